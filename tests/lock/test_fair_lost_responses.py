"""The fair lock's handoff when a call's response is lost or comes late, on both DynamoDB
backends: a lost wake-up costs one park timeout, a park that ends as its row is taken, a wake-up
delivered but answered 5xx, a wake-up that meets the park timeout, a lost skip, a hole's young
mark, a refused grant while the lock is still the releaser's, a park whose response was lost.
(The stack's fixture and helpers: ``test_fair_lock.py``, whose group this file is in.)"""

from __future__ import annotations

import json
import threading
import time

import pytest

from fair_stack import PATIENT_PARK_TIMEOUT_S
from locked_workflow.state_machines import fair_protocol as fp
from locked_workflow.state_machines import lock_protocol as p
from test_fair_lock import (  # noqa: F401 - fair: the stack's fixture
    _entered_at, assert_park_rounds_fit_the_budget, fair, fences_of, key, not_the_gate, parks_timed_out, queued,
)


def test_a_lost_wake_up_costs_one_park_timeout(fair):
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = key()
    holder, (w1,) = queued(fair, k, waiters=1)
    lost = Fault("SendTaskSuccess", "ServiceUnavailable", service="stepfunctions", when=not_the_gate)
    with dynamodb_faults(lost) as log:
        fair.open(k)
        results = fair.wait([holder, w1])
    assert log.injected == 1
    assert [r.status for r in results] == ["SUCCEEDED"] * 2, [(r.error, r.cause) for r in results]
    assert parks_timed_out(results[1]) >= 1  # the fallback, not the wake-up, let it in
    assert fair.probe(k).get("violations", 0) == 0 and fair.drained(k)
    assert_park_rounds_fit_the_budget(results[1])


def test_a_waiter_whose_park_ends_as_its_row_is_taken_is_woken_in_its_new_park_not_after_a_park_timeout(fair):
    """The tail seen in the bench: the releaser takes the head's row (its token) just as the
    head's park ends; the head inspects before the grant lands, finds the lock held and parks
    again with a new token; the releaser's wake-up of the old token fails (``TaskDoesNotExist``
    - bare moto answered success here and the head slept a whole park timeout). The releaser
    then looks for the new park and wakes it. FairPatient's park timeout (120 s) is longer than
    the test's waits: a wake-up, not the fallback, must let the head in."""
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = key()
    holder, (w1,) = queued(fair, k, waiters=1, machine="FairPatient")
    row_key = fp.row_key(p.namespaced("f", k), fp.counters(fair.lock(k))[1])

    def token():
        item = fair.cloud.dynamodb.get_item(TableName=fair.table("LocksTable"), Key={"pk": {"S": row_key}},
                                            ConsistentRead=True).get("Item", {})
        return item.get(fp.TOKEN, {}).get("S")

    def park_ends_and_parks_again():  # between the releaser's take and its grant
        parks = [e for e in fair.cloud.history(w1) if e["type"] == "TaskScheduled"
                 and "waitForTaskToken" in e["taskScheduledEventDetails"]["resource"]]
        old_token = json.loads(parks[-1]["taskScheduledEventDetails"]["parameters"])[
            "ExpressionAttributeValues"][":token"]["S"]
        fair.cloud.stepfunctions.send_task_failure(taskToken=old_token, error="Lock.Look", cause="the park ends")
        fair.until(lambda: token() not in (None, old_token), timeout=60)  # parked again, new token

    slow_grant = Fault("UpdateItem", "ProvisionedThroughputExceededException",
                       when=lambda params: params.get("ConditionExpression") == fp.GRANT.condition,
                       then=park_ends_and_parks_again)
    with dynamodb_faults(slow_grant) as log:
        fair.open(k)
        results = fair.wait([holder, w1])
    assert log.injected == 1
    assert [r.status for r in results] == ["SUCCEEDED"] * 2, [(r.error, r.cause) for r in results]
    entered = [e["stateEnteredEventDetails"]["name"] for e in results[0].history if "stateEnteredEventDetails" in e]
    assert "Lock.Release.WakeAgainEarly" in entered, entered
    assert parks_timed_out(results[1]) == 0  # woken in its new park, not by its (2 min) fallback
    assert fences_of(results) == sorted(fences_of(results))
    assert fair.probe(k).get("violations", 0) == 0 and fair.drained(k)


def test_a_delivered_wake_up_whose_response_was_lost_is_never_taken_back(fair):
    """F1: the releaser's ``SendTaskSuccess`` reaches Step Functions (the waiter is woken) but
    its response is lost (a 5xx after the call applied). The releaser cannot tell this from a
    wake-up that failed: it waits a claim window and revokes - which must never take the lock
    from a waiter already at work. The woken waiter confirms its grant (CLAIM) before its work,
    so the revoke is refused. W2 holds its work at a gate until the releaser's execution has
    ended (then a revoke and a grant to W3 would have happened already): W3 enters only after
    W2 left, fences rise, W2 keeps its lock (no ``Lock.Lost``)."""
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = key()
    holder = fair.start("FairHold", {"key": k, "workMs": 1})
    fair.until(lambda: p.OWNER in fair.lock(k))
    w2 = fair.start("FairPatientHold", {"key": k, "workMs": 1})  # still parked when its wake-up comes, however slow
    fair.until(lambda: len(fair.queue(k)) == 1)
    w3 = fair.start("Fair", {"key": k, "workMs": 1})
    fair.until(lambda: len(fair.queue(k)) == 2)
    lost = Fault("SendTaskSuccess", "InternalServerError", after_call=True, service="stepfunctions", when=not_the_gate)
    with dynamodb_faults(lost) as log:
        first_gate = fair.gate_token(k)
        fair.open(k)
        held = fair.wait([holder])[0]  # its release is over (a revoke, if any, is done)
    assert log.injected == 1 and log.calls.count(("SendTaskSuccess", "done, then InternalServerError")) == 1
    assert held.status == "SUCCEEDED", (held.error, held.cause)
    assert "Lock.Release.DescribeGrantee" in [e.get("stateEnteredEventDetails", {}).get("name") for e in held.history]
    fair.until(lambda: fair.gate_token(k) not in (None, first_gate), timeout=60)  # W2 at its work's gate
    fair.open(k)
    r2, r3 = fair.wait([w2, w3])
    assert [r2.status, r3.status] == ["SUCCEEDED"] * 2, [(r.error, r.cause) for r in (r2, r3)]
    # W3's work began after W2's ended (W2's release began)
    assert _entered_at(r3, "FairProbe") > _entered_at(r2, "Lock.Release.Take")
    fences = [held.output["probe"]["fence"], r2.output["probe"]["fence"], r3.output["probe"]["fence"]]
    assert fences == sorted(fences) and len(set(fences)) == 3, fences
    probe = fair.probe(k)
    assert probe.get("violations", 0) == 0 and probe.get("rejected", 0) == 0, probe
    assert fair.drained(k)


def test_a_releaser_whose_wake_up_response_was_lost_ends_once_its_grant_is_confirmed(fair):
    """A releaser whose ``SendTaskSuccess`` applied but answered a 5xx (the waiter is woken and
    confirms at once) looks again after ``REPARK_LOOK_S``; finding its grant confirmed, it is
    done - it does not sleep out its claim window (its own park timeout, here
    ``PATIENT_PARK_TIMEOUT_S`` = 120 s) before a revoke that can only be refused. Before, the
    releaser always waited the whole window: a loaded run of
    ``test_a_delivered_wake_up_whose_response_was_lost_is_never_taken_back`` took 130 s
    instead of 6 s when its patient W2's wake-up of W3 met W3's park timeout (``TaskTimedOut``:
    W3 then claimed its grant by itself, and W2's execution waited 120 s in its release)."""
    from locked_workflow.testing.cloud import ExecutionsStillRunning
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = key()
    holder = fair.start("FairPatientHold", {"key": k, "workMs": 1})  # its claim window: 120 s
    fair.until(lambda: p.OWNER in fair.lock(k))
    w2 = fair.start("FairPatient", {"key": k, "workMs": 1})  # still parked when its wake-up comes
    fair.until(lambda: len(fair.queue(k)) == 1)
    lost = Fault("SendTaskSuccess", "InternalServerError", after_call=True, service="stepfunctions", when=not_the_gate)
    with dynamodb_faults(lost) as log:
        fair.open(k)
        r2 = fair.wait([w2])[0]
    assert log.injected == 1
    assert r2.status == "SUCCEEDED", (r2.error, r2.cause)
    assert parks_timed_out(r2) == 0  # woken, not looking by itself
    bound = PATIENT_PARK_TIMEOUT_S / 4  # generous on a loaded machine, far below the window
    try:
        held = fair.cloud.wait_for(holder, timeout=bound)
    except ExecutionsStillRunning as e:
        pytest.fail(f"the releaser still waits {bound} s after its grant was confirmed: {e}")
    assert held.status == "SUCCEEDED", (held.error, held.cause)
    entered = [e.get("stateEnteredEventDetails", {}).get("name") for e in held.history]
    assert "Lock.Release.DescribeGrantee" in entered and "Lock.Release.Revoke" not in entered
    assert fences_of([held, r2]) == sorted(fences_of([held, r2]))
    assert fair.probe(k).get("violations", 0) == 0 and fair.drained(k)


def test_a_wake_up_that_meets_the_park_timeout_does_not_hold_the_releaser_for_its_claim_window(fair):
    """The loaded run's interleaving, made deterministic: the patient releaser (claim window
    ``PATIENT_PARK_TIMEOUT_S``) takes W2's parked row and grants it; its ``SendTaskSuccess`` is
    held (an observer of the fault hook blocks the call's thread; nothing fails) until W2's
    park (3 s) has timed out and W2, looking by itself, found itself the owner, confirmed and
    reached its work's gate. The wake-up then answers ``TaskTimedOut``; W2's execution runs,
    so the releaser looks again after ``REPARK_LOOK_S``: no new park, its grant confirmed -
    it is done. Before, it slept out its whole claim window (120 s) first."""
    from locked_workflow.testing.cloud import ExecutionsStillRunning
    from locked_workflow.testing.faults import calling_state, fault_registry

    k = key()
    holder = fair.start("FairPatientHold", {"key": k, "workMs": 1})  # its claim window: 120 s
    fair.until(lambda: p.OWNER in fair.lock(k))
    w2 = fair.start("FairHold", {"key": k, "workMs": 1})  # parks for 3 s at a time
    fair.until(lambda: len(fair.queue(k)) == 1)
    go, held = threading.Event(), []

    def hold(service: str, operation: str, params: dict) -> None:
        if (service, operation) == ("stepfunctions", "SendTaskSuccess") and not_the_gate(params):
            state = calling_state()
            if state is not None and state.state_name == "Lock.Release.Wake":
                held.append(state.state_name)
                go.wait(timeout=180)  # (a bound: a broken test must not hang the suite)

    with fault_registry() as registry:
        registry.observers.append(hold)
        try:
            first_gate = fair.gate_token(k)
            fair.open(k)
            # W2's park timed out meanwhile: it found itself the owner, confirmed, and holds at its gate
            fair.until(lambda: fair.gate_token(k) not in (None, first_gate), timeout=60)
        finally:
            go.set()
    bound = PATIENT_PARK_TIMEOUT_S / 4  # generous on a loaded machine, far below the window
    try:
        released = fair.cloud.wait_for(holder, timeout=bound)
    except ExecutionsStillRunning as e:
        pytest.fail(f"the releaser still waits {bound} s after its grant was confirmed: {e}")
    assert held == ["Lock.Release.Wake"]
    assert released.status == "SUCCEEDED", (released.error, released.cause)
    entered = [e.get("stateEnteredEventDetails", {}).get("name") for e in released.history]
    assert "Lock.Release.DescribeGrantee" in entered and "Lock.Release.ClaimWindow" not in entered, entered
    fair.open(k)
    r2 = fair.wait([w2])[0]
    assert r2.status == "SUCCEEDED", (r2.error, r2.cause)
    assert parks_timed_out(r2) >= 1  # it looked by itself: the wake-up came too late
    assert fences_of([released, r2]) == sorted(fences_of([released, r2]))
    assert fair.probe(k).get("violations", 0) == 0 and fair.drained(k)


def test_a_release_whose_skip_response_was_lost_still_hands_the_lock_on(fair):
    """The releaser's ``SKIP`` of a waiter gone (stopped; the janitor marked its row left)
    applies, and its response is lost (a 5xx after the call). Its retry finds the ticket
    passed already: that is its own skip, so the handoff goes on to the next waiter. Before,
    the retry was refused and the handoff ended - the release's execution SUCCEEDED with the
    lock still its own, blocking the key for the rest of its lease (fault matrix:
    ``fair:Lock.Release.Skip`` x ``lost``)."""
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = key()
    holder, (w1, w2) = queued(fair, k, waiters=2, machine="FairPatient")
    fair.cloud.stepfunctions.stop_execution(executionArn=w1)
    assert fair.cloud.wait_for(w1).status == "ABORTED"
    fair.until(lambda: len(fair.queue(k)) == 1)  # the janitor marked w1's row left
    lost = Fault("UpdateItem", "InternalServerError", after_call=True, when=lambda params: (
        params.get("ConditionExpression"), params.get("UpdateExpression")) == (fp.SKIP.condition, fp.SKIP.update))
    with dynamodb_faults(lost) as log:
        fair.open(k)
        held = fair.wait([holder])[0]
        after_release = fair.lock(k).get(p.OWNER, {}).get("S", "")
    assert log.injected == 1
    assert held.status == "SUCCEEDED", (held.error, held.cause)
    assert "Lock.Release.Skip" in [e.get("stateEnteredEventDetails", {}).get("name") for e in held.history]
    assert not after_release.startswith(holder), f"the ended releaser still holds the lock: {after_release}"
    r2 = fair.wait([w2])[0]
    assert r2.status == "SUCCEEDED", (r2.error, r2.cause)
    assert parks_timed_out(r2) == 0  # handed on by the release, not found by a fallback
    assert fences_of([held, r2]) == sorted(fences_of([held, r2]))
    assert fair.probe(k).get("violations", 0) == 0 and fair.drained(k)


def _entered(result, state: str) -> int:
    return sum(1 for e in result.history if e.get("stateEnteredEventDetails", {}).get("name") == state)


def test_a_helper_behind_a_young_ready_mark_parks_again_instead_of_spinning(fair):
    """A free lock whose head (ticket s + 1) took its ticket and never parked (a hole), and a
    waiter behind it (ticket s + 2, park timeout 3 s). Its fallback runs the handoff for the
    head: no row, so it marks the row ready (the head's park would be refused: it takes the
    lock itself). The mark must be a park timeout old before a helper may skip that ticket;
    until then the helper goes back to its park. Before, it inspected again at once and its
    take found the young mark, marked it again, and so on until the mark was old enough: 22-28
    takes and 12 marks in about 3 s in the fault matrix's cells (writes and transitions, no
    invariant broken). Counted from the waiter's history: its helper's takes and marks."""
    k = key("hole")
    stored, served = p.namespaced("f", k), 5
    fair.cloud.dynamodb.put_item(TableName=fair.table("LocksTable"), Item={  # ticket 6 out, never parked
        "pk": {"S": stored}, p.FENCE: {"N": "5"}, fp.SERVED: {"N": str(served)}, fp.TICKETS: {"N": str(served + 1)}})
    started = time.monotonic()
    waiter = fair.start("Fair", {"key": k, "workMs": 1})
    result = fair.cloud.wait_for(waiter, timeout=90)
    took = time.monotonic() - started
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    takes, marks = _entered(result, "Lock.Help.Take"), _entered(result, "Lock.Help.Mark")
    print(f"the waiter entered after {took:.1f} s: {takes} helper takes, {marks} marks, "
          f"{parks_timed_out(result)} park timeouts")
    assert 1 <= marks <= 2 and takes <= 3, (takes, marks)  # (a mark, then a park; the next look skips)
    assert result.output["probe"]["fence"] == 6
    assert parks_timed_out(result) <= 3  # (bounded by park timeouts, never a lease)
    assert fair.probe(k).get("violations", 0) == 0 and fair.drained(k)


def test_a_release_whose_grant_is_refused_while_the_lock_is_still_its_own_hands_it_on(fair):
    """The holder's lock is still its own but the queue moved under it: ticket s + 1 was
    skipped (``served`` = s + 1, the lock untouched - a helper that found this holder stale
    skips a waiter whose mark was old and takes the next row, as after a redrive) while its
    waiter, late, parked in row s + 1 anyway. The release takes that parked row and its
    ``GRANT`` (``served = s``) is refused; the recheck finds the lock not granted by it but
    still its own. It nudges the skipped waiter (which queues again) and must go on from the
    new ``served`` - hand the lock to ticket s + 2 - not end "released" while holding: before,
    the key stayed the ended holder's until its lease (3 minutes here) or the next waiter's
    park timeout (2 minutes) and takeover."""
    from locked_workflow.testing.cloud import ExecutionsStillRunning

    k = key("moved")
    holder, (late, nxt) = queued(fair, k, waiters=2, machine="FairPatient")
    item = fair.lock(k)
    stored, owner = p.namespaced("f", k), item[p.OWNER]["S"]
    s_ = fp.counters(item)[0]
    assert fp.counters(item)[1] == s_ + 2
    # ticket s + 1 skipped by a helper that found the holder stale (``:stale``), its row left
    # parked (its waiter parked after the helper's take)
    fair.cloud.dynamodb.update_item(TableName=fair.table("LocksTable"), **{
        k_: v for k_, v in fp.arguments(stored, fp.SKIP, {
            ":me": {"S": "helper"}, ":stale": {"S": owner}, ":now": {"N": str(int(time.time() * 1000))},
            ":prev": {"N": str(s_)}, ":ticket": {"N": str(s_ + 1)}}).items()})
    fair.open(k)
    released = fair.cloud.wait_for(holder, timeout=60)
    assert released.status == "SUCCEEDED", (released.error, released.cause)
    entered = [e.get("stateEnteredEventDetails", {}).get("name") for e in released.history]
    assert "Lock.Release.Recheck" in entered and "Lock.Release.Nudge" in entered, entered
    assert not fair.lock(k).get(p.OWNER, {}).get("S", "").startswith(holder), fair.lock(k)
    try:
        second = fair.cloud.wait_for(nxt, timeout=45)  # far below its park timeout (2 min)
    except ExecutionsStillRunning as e:
        pytest.fail(f"the next waiter did not enter: the ended holder still holds the key: {e}")
    assert second.status == "SUCCEEDED" and parks_timed_out(second) == 0, (second.error, second.cause)
    third = fair.cloud.wait_for(late, timeout=60)  # nudged: it queued again, behind ``nxt``
    assert third.status == "SUCCEEDED", (third.error, third.cause)
    assert fences_of([released, second, third]) == sorted(fences_of([released, second, third]))
    assert fair.probe(k).get("violations", 0) == 0 and fair.drained(k)


def test_a_park_whose_response_was_lost_is_woken_in_its_retry_and_leaves_no_row(fair):
    """A waiter's ``PARK`` applies (its row holds token T1) and its response is lost (a 5xx after
    the call); the holder releases then, and wakes T1 while the park's ``Retry`` runs (its second
    attempt fails before applying and ends only once the wake-up has been sent). As on Step
    Functions, each attempt of the callback task has its own token and T1's task is closed, so
    the wake-up fails (``TaskTimedOut``,
    https://docs.aws.amazon.com/step-functions/latest/apireference/API_SendTaskSuccess.html#API_SendTaskSuccess_Errors);
    the third attempt parks again and the releaser's retake wakes it. Before the runtime gave
    each attempt its own token, the retry ended at once with T1's wake-up and its re-created row
    stayed parked after the waiter was served (fault matrix: ``fair:Lock.Park`` x ``lost``)."""
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = key()
    holder, _ = queued(fair, k, waiters=0)
    wakes: list = []
    is_park = lambda params: params.get("UpdateExpression") == fp.PARK.update  # noqa: E731
    lost = Fault("UpdateItem", "InternalServerError", after_call=True, then=lambda: fair.open(k), when=is_park)
    failed = Fault("UpdateItem", "InternalServerError", then=lambda: fair.until(lambda: wakes), when=is_park)
    seen = Fault("SendTaskSuccess", "never", service="stepfunctions",
                 when=lambda params: not_the_gate(params) and wakes.append(params["taskToken"]) and False)
    with dynamodb_faults(lost, failed, seen) as log:
        waiter = fair.start("Fair", {"key": k, "workMs": 100})
        held, woken = fair.wait([holder, waiter])
    assert (lost.injected, failed.injected, seen.injected) == (1, 1, 0)
    assert (held.status, woken.status) == ("SUCCEEDED", "SUCCEEDED"), (woken.error, woken.cause)
    assert fences_of([held, woken]) == sorted(fences_of([held, woken]))
    assert fair.probe(k).get("violations", 0) == 0 and fair.drained(k)
