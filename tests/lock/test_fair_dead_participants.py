"""The fair lock's dead participants on both DynamoDB backends: a waiter stopped mid-queue (with
and without the janitor), a stopped holder, a releaser stopped between its release and its
wake-up, and a waiter or holder whose branch a failing sibling cancelled. (The stack's fixture
and helpers: ``test_fair_lock.py``, whose group this file is in.)"""

from __future__ import annotations

import time

from safety_stack import PROBE_GRACE_S
from locked_workflow.state_machines import lock_protocol as p
from test_fair_lock import (  # noqa: F401 - fair: the stack's fixture
    _entered_at, fair, fences_of, key, last_park_end, not_the_gate, parks_timed_out, queued,
)


def test_a_waiter_stopped_mid_queue_is_dequeued_by_the_janitor_and_the_rest_keep_their_order(fair):
    k = key()
    holder, (w1, w2, w3) = queued(fair, k, waiters=3, machine="FairPatient")
    fair.cloud.stepfunctions.stop_execution(executionArn=w2)
    assert fair.cloud.wait_for(w2).status == "ABORTED"
    fair.until(lambda: len(fair.queue(k)) == 2)  # the janitor took w2 out, the holder still holds
    assert p.OWNER in fair.lock(k)
    fair.open(k)
    results = fair.wait([holder, w1, w3])
    assert [r.status for r in results] == ["SUCCEEDED"] * 3, [(r.error, r.cause) for r in results]
    assert fences_of(results[1:]) == sorted(fences_of(results[1:]))
    assert parks_timed_out(results[2]) == 0  # w1's release woke w3 directly
    assert fair.drained(k) and fair.probe(k).get("violations", 0) == 0


def test_without_a_janitor_a_stopped_waiter_is_skipped_by_the_release_that_fails_to_wake_it(fair):
    k = key()
    holder, (w1, w2, w3) = queued(fair, k, waiters=3, machine="FairNoJanitor")
    fair.cloud.stepfunctions.stop_execution(executionArn=w2)
    assert fair.cloud.wait_for(w2).status == "ABORTED"
    fair.open(k)
    results = fair.wait([holder, w1, w3])
    assert [r.status for r in results] == ["SUCCEEDED"] * 3, [(r.error, r.cause) for r in results]
    assert fences_of(results[1:]) == sorted(fences_of(results[1:]))
    # w1's release found w2's wake-up failing, saw its execution ended, took the grant back and
    # handed the lock to w3 at once: w3's last park was ended by a wake-up, not by its timeout
    assert last_park_end(results[2]) == "TaskSucceeded"
    assert any(e.get("stateEnteredEventDetails", {}).get("name") == "Lock.Release.Revoke" for e in results[1].history)
    assert fair.drained(k) and fair.probe(k).get("violations", 0) == 0


def test_a_stopped_holder_is_taken_over_after_its_stop_grace_in_queue_order(fair):
    k = key()
    holder, (w1, w2) = queued(fair, k, waiters=2)  # never opened: the holder is stopped
    fair.cloud.stepfunctions.stop_execution(executionArn=holder)
    stopped = time.time()
    results = fair.wait([w1, w2])
    assert [r.status for r in results] == ["SUCCEEDED"] * 2, [(r.error, r.cause) for r in results]
    grace_s = PROBE_GRACE_S  # the derived stop grace: the probe's timeout plus the margin
    first_grant = min(
        e["timestamp"].timestamp() for e in results[0].history
        if e.get("stateEnteredEventDetails", {}).get("name") == "FairProbe"
    )
    assert first_grant - stopped >= grace_s - 1  # not before the stopped holder's work could have ended
    assert fences_of(results) == sorted(fences_of(results))
    assert fair.drained(k) and fair.probe(k).get("violations", 0) == 0


def test_a_releaser_stopped_between_its_release_and_its_wake_up_strands_no_one(fair):
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = key()
    holder, (w1, w2) = queued(fair, k, waiters=2)
    # the releaser dies as it is about to wake w1: its wake-up is never sent
    crash = Fault("SendTaskSuccess", "ServiceUnavailable", service="stepfunctions", when=not_the_gate,
                  then=lambda: fair.cloud.stepfunctions.stop_execution(executionArn=holder))
    with dynamodb_faults(crash) as log:
        fair.open(k)
        results = fair.wait([w1, w2])
    assert log.injected == 1 and fair.cloud.wait_for(holder).status == "ABORTED"
    assert [r.status for r in results] == ["SUCCEEDED"] * 2, [(r.error, r.cause) for r in results]
    assert fences_of(results) == sorted(fences_of(results))
    assert fair.probe(k).get("violations", 0) == 0 and fair.drained(k)


def test_a_parked_waiter_whose_branch_was_cancelled_blocks_the_next_one_for_at_most_one_park_timeout(fair):
    """The waiter's branch is cancelled by its failing sibling and the user catches the
    Parallel's failure: the execution stays RUNNING, no status event, and its park's token is
    closed. The release's wake-up of it fails; its execution still runs, so the grant waits one
    claim window (the park timeout) for a claim, is taken back and passes to the next waiter."""
    from fair_stack import PARK_TIMEOUT_S

    k = key()
    holder = fair.start("FairHold", {"key": k, "workMs": 1})
    fair.until(lambda: p.OWNER in fair.lock(k))
    cancelled = fair.start("FairCancelled", {"key": k, "workMs": 1})
    fair.until(lambda: len(fair.queue(k)) == 1)
    behind = fair.start("FairPatient", {"key": k, "workMs": 1})
    fair.until(lambda: len(fair.queue(k)) == 2)
    fair.fail_gate(f"sibling#{k}")  # the sibling branch fails: the parked waiter's branch is cancelled
    fair.until(lambda: any(e["type"] == "ParallelStateFailed" for e in fair.cloud.history(cancelled)), timeout=60)
    assert fair.cloud.stepfunctions.describe_execution(executionArn=cancelled)["status"] == "RUNNING"
    fair.open(k)
    holder_result, behind_result = fair.wait([holder, behind])
    assert [holder_result.status, behind_result.status] == ["SUCCEEDED"] * 2
    names = [e.get("stateEnteredEventDetails", {}).get("name") for e in holder_result.history]
    assert "Lock.Release.ClaimWindow" in names and "Lock.Release.Revoke" in names  # waited one window, took it back
    released = next(e["timestamp"] for e in holder_result.history
                    if e.get("stateEnteredEventDetails", {}).get("name") == "Lock.Release.Take")
    granted = next(e["timestamp"] for e in behind_result.history if e["type"] == "TaskSucceeded"
                   and "waitForTaskToken" in str(e.get("taskSucceededEventDetails", {}).get("resource")))
    blocked_s = (granted - released).total_seconds()
    assert PARK_TIMEOUT_S <= blocked_s < PARK_TIMEOUT_S + 30  # one claim window (and the loaded machine's slack)
    assert last_park_end(behind_result) == "TaskSucceeded"  # the handoff, not its own fallback, let it in
    assert behind_result.output["probe"]["fence"] == holder_result.output["probe"]["fence"] + 2  # (+1: the revoked grant)
    fair.cloud.stepfunctions.stop_execution(executionArn=cancelled)  # (it would idle on for a minute)
    fair.until(lambda: fair.drained(k))
    assert fair.probe(k).get("violations", 0) == 0


def test_a_holder_cancelled_by_a_sibling_is_probed_and_frees_the_key_after_its_stop_grace_not_its_lease(fair):
    """D1-fair: the holder's branch is cancelled at work (its sibling failed; the user caught
    the Parallel's failure): no Catch runs, no status event, the execution stays RUNNING, and
    DescribeExecution cannot tell it from a live holder. A parked waiter's fallback probes the
    hold's presence token (``SendTaskHeartbeat``: ``TaskTimedOut``), retires the acquisition
    (ABANDONED: held for its stop grace from now) and takes the lock after it - with the
    cancelled execution still RUNNING, not at its lease (3 min) or its end (2 min on)."""
    from fair_stack import CANCELLED_STOP_GRACE_S

    k = key()
    cancelled = fair.start("FairCancelled", {"key": k, "workMs": 1})
    fair.until(lambda: fair.gate_token(k, "held") is not None, timeout=60)  # holds, at work (its gate)
    fair.until(lambda: p.PRESENCE in fair.lock(k), timeout=60)  # its presence registered
    registered = int(fair.lock(k)[p.PRESENCE_AT]["N"]) / 1000
    waiter = fair.start("Fair", {"key": k, "workMs": 1})
    fair.until(lambda: len(fair.queue(k)) == 1, timeout=60)
    fair.fail_gate(f"sibling#{k}")  # the sibling fails: the holder's branch is cancelled at work
    fair.until(lambda: any(e["type"] == "ParallelStateFailed" for e in fair.cloud.history(cancelled)), timeout=60)
    result = fair.wait([waiter])[0]
    assert result.status == "SUCCEEDED", (result.error, result.cause)  # (before: Lock.Timeout after 90 s)
    assert fair.cloud.stepfunctions.describe_execution(executionArn=cancelled)["status"] == "RUNNING"
    from lock_invariants import state_entered

    assert {"Lock.ProbeHolder", "Lock.Abandoned"} <= set(state_entered(result))
    entered = _entered_at(result, "FairProbe")
    # not before the token stood PRESENCE_SETTLE_MS and the stop grace ran (the cancelled work
    # may still run), and long before the lease: the settle, the grace, a few park rounds, slack
    waited = entered - registered
    settle_s = p.PRESENCE_SETTLE_MS / 1000
    assert settle_s + CANCELLED_STOP_GRACE_S - 1 <= waited < settle_s + CANCELLED_STOP_GRACE_S + 30, waited
    probe = fair.probe(k)
    assert probe.get("violations", 0) == 0 and probe["seen"] == [1], probe  # (the holder never passed its gate)
    fair.cloud.stepfunctions.stop_execution(executionArn=cancelled)  # (it would idle on for 2 min)
    fair.until(lambda: fair.drained(k), timeout=60)
    print(f"the waiter entered {waited:.1f} s after the holder's presence registered")
