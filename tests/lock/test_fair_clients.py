"""Python participants of the fair lock (``LockClient(fair=True)``) on both DynamoDB backends:
a client queues beside the workflows, is granted in its turn, wakes a parked workflow, gives up,
and takes over a holder cancelled by a sibling after its grace, never before.

Split from ``test_fair_lock.py`` (its stack fixture ``fair`` and helpers), so that ``make test``'s
``--dist loadgroup`` can run the files on several workers.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from lock_invariants import probe_as_client
from safety_stack import PROBE_GRACE_S
from locked_workflow.state_machines import fair_protocol as fp
from locked_workflow.state_machines import lock_protocol as p
from test_fair_lock import (  # noqa: F401 - fair: the stack's fixture
    assert_park_rounds_fit_the_budget, client, dead_head, fair, key, not_the_gate, parks_timed_out, queued,
)
# ---- Python participants (LockClient(fair=True)) ---------------------------------------------


def _cancelled_fair_holder(fair, k: str) -> str:
    """A FairCancelled holder at work (its gate) with its presence registered and dated past
    the settle (lock_invariants.presence_dated_back)."""
    from lock_invariants import presence_dated_back

    holder = fair.start("FairCancelled", {"key": k, "workMs": 1})
    fair.until(lambda: fair.gate_token(k, "held") is not None, timeout=60)  # holds, at work (its gate)
    fair.until(lambda: p.PRESENCE in fair.lock(k), timeout=60)  # its presence registered
    presence_dated_back(fair.cloud, fair.table("LocksTable"), p.namespaced("f", k))
    return holder


def test_a_fair_client_waiting_behind_a_holder_cancelled_by_a_sibling_gets_the_lock_after_its_grace(fair):
    """D1-fair for ``LockClient(fair=True)``: queued behind a hold whose branch was cancelled
    (the execution RUNNING), the client probes the hold's presence token, writes ABANDONED and
    takes the lock as the head after the stop grace - not at the 3-minute lease (before the
    fix: ``LockTimeout`` after its 30 s wait)."""
    from fair_stack import CANCELLED_STOP_GRACE_S

    k = key()
    cancelled = _cancelled_fair_holder(fair, k)
    fair.fail_gate(f"sibling#{k}")  # the sibling fails: the holder's branch is cancelled at work
    fair.until(lambda: any(e["type"] == "ParallelStateFailed" for e in fair.cloud.history(cancelled)), timeout=60)
    started = time.time()
    lease = client(fair).acquire(k, wait=30, lease=30)
    waited = time.time() - started
    assert fair.cloud.stepfunctions.describe_execution(executionArn=cancelled)["status"] == "RUNNING"
    assert CANCELLED_STOP_GRACE_S - 1 <= waited < CANCELLED_STOP_GRACE_S + 10, waited  # (a round and slack)
    print(f"the client got the key {waited:.1f} s after the cancel")
    assert probe_as_client(fair.cloud, fair.app, k, lease.fence)["insideAtEntry"] == 1
    client(fair).release(lease)
    probe = fair.probe(k)
    assert probe.get("violations", 0) == 0 and probe["seen"] == [1], probe  # (the holder never passed its gate)
    assert lease.fence == 2
    fair.cloud.stepfunctions.stop_execution(executionArn=cancelled)  # (it would idle on for 2 min)
    fair.until(lambda: fair.drained(k), timeout=60)


def test_negative_control_a_fair_client_never_takes_over_a_holder_whose_branch_runs(fair):
    """The same hold at work, not cancelled: the client's probes are accepted, it never retires
    the hold, and its wait ends in ``LockTimeout`` with the hold's lease untouched."""
    from lock_invariants import HeartbeatCounter, LeaseEndsSeen
    from locked_workflow.constructs_lib.lock_client import LockTimeout

    k = key()
    holder = _cancelled_fair_holder(fair, k)
    held_until = int(fair.lock(k)[p.EXPIRES_AT]["N"])
    heartbeats = HeartbeatCounter(fair.cloud.stepfunctions)
    waiter = client(fair, heartbeats)
    with LeaseEndsSeen(lambda: fair.lock(k), holder) as seen, pytest.raises(LockTimeout):
        waiter.acquire(k, wait=8, lease=30)
    assert len(heartbeats.calls) >= 2, heartbeats.calls  # probed (more than once) ...
    assert seen == {held_until}, seen  # ... and never retired
    assert holder in fair.lock(k)[p.OWNER]["S"] and p.PRESENCE_CLOSED not in fair.lock(k)
    fair.cloud.stepfunctions.stop_execution(executionArn=holder)


def test_a_client_release_wakes_the_parked_workflow(fair):
    k = key()
    lease = client(fair).acquire(k, lease=60)
    waiter = fair.start("FairPatient", {"key": k, "workMs": 1})
    fair.until(lambda: fair.queue(k))  # parked
    client(fair).release(lease)
    result = fair.wait([waiter])[0]
    assert result.status == "SUCCEEDED" and parks_timed_out(result) == 0
    assert result.output["probe"]["fence"] == lease.fence + 1


def test_a_client_release_whose_wake_up_response_was_lost_never_takes_the_lock_back(fair):
    """F1 for ``LockClient(fair=True).release()``: its ``SendTaskSuccess`` applies (the workflow
    is woken) and its response is lost; the client waits its claim window and revokes - refused,
    since the woken workflow confirmed its grant before its work. The workflow (held at its
    work's gate until the release returned) keeps the lock and releases it itself."""
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = key()
    lease = client(fair).acquire(k, lease=60)
    waiter = fair.start("FairHold", {"key": k, "workMs": 1})
    fair.until(lambda: fair.queue(k))  # parked
    lost = Fault("SendTaskSuccess", "InternalServerError", after_call=True, service="stepfunctions", when=not_the_gate)
    with dynamodb_faults(lost) as log:
        client(fair, claim_window=3).release(lease)
    assert log.injected == 1
    fair.until(lambda: fair.gate_token(k) is not None)  # the woken workflow is at its work
    item = fair.lock(k)
    assert item.get(p.OWNER, {}).get("S", "").startswith(waiter) and fp.HANDED not in item, item  # still its lock
    fair.open(k)
    result = fair.wait([waiter])[0]
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert result.output["probe"]["fence"] == lease.fence + 1
    assert fair.drained(k) and fair.probe(k).get("rejected", 0) == 0


def test_a_client_release_whose_wake_up_failed_returns_once_its_grant_is_confirmed(fair):
    """A client's release grants the lock to a parked workflow; the ``SendTaskSuccess`` applies
    (the workflow is woken and confirms, ``CLAIM``) and its response is lost, so the release
    cannot tell it from a failed wake-up. As the workflows' handoff does, it looks after
    ``REPARK_LOOK_S`` and reads the grant: confirmed (``fair_protocol.revocable`` false), its
    revoke could only be refused, so ``release()`` returns then - not after its claim window (a
    minute here; before, it slept the whole window, then revoked in vain)."""
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    window_s = 60
    k = key()
    lease = client(fair).acquire(k, lease=60)
    waiter = fair.start("FairPatient", {"key": k, "workMs": 1})
    fair.until(lambda: fair.queue(k))  # parked
    lost = Fault("SendTaskSuccess", "InternalServerError", after_call=True, service="stepfunctions", when=not_the_gate)
    with dynamodb_faults(lost) as log:
        started = time.monotonic()
        client(fair, claim_window=window_s).release(lease)
        took = time.monotonic() - started
    assert log.injected == 1
    assert took < window_s / 2, f"the release took {took:.1f} s: it waited out its claim window"
    result = fair.wait([waiter])[0]
    assert result.status == "SUCCEEDED" and parks_timed_out(result) == 0, (result.error, result.cause)
    assert result.output["probe"]["fence"] == lease.fence + 1  # its grant stood (never revoked)
    assert fair.drained(k) and fair.probe(k).get("violations", 0) == 0
    print(f"the release returned {took:.1f} s after its call (claim window {window_s} s)")


def test_negative_control_a_client_release_whose_grant_is_not_confirmed_keeps_its_claim_window(fair):
    """The same release, the wake-up failing before it applies (the workflow stays parked, its
    park timeout longer than the test): nobody confirms, so the release waits its whole claim
    window, then takes the grant back (``REVOKE``) - the early end needs a confirmed grant."""
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    window_s = 4
    k = key()
    lease = client(fair).acquire(k, lease=60)
    waiter = fair.start("FairPatient", {"key": k, "workMs": 1})
    fair.until(lambda: fair.queue(k))  # parked
    unwoken = Fault("SendTaskSuccess", "ServiceUnavailable", service="stepfunctions", times=5, when=not_the_gate)
    with dynamodb_faults(unwoken) as log:
        started = time.monotonic()
        client(fair, claim_window=window_s).release(lease)
        took = time.monotonic() - started
    assert unwoken.injected >= 1, log.calls
    assert took >= window_s + fp.REPARK_LOOK_S, took
    item = fair.lock(k)
    assert not item.get(p.OWNER, {}).get("S", "").startswith(waiter), item  # revoked: never confirmed
    assert fair.cloud.status(waiter) == "RUNNING"  # still parked, never woken
    fair.cloud.stepfunctions.stop_execution(executionArn=waiter)
    assert fair.cloud.wait_for(waiter, timeout=60).status == "ABORTED"
    # (nobody holds; the handoff after the revoke marked the next ticket's row ready, though
    # no ticket was out: its first taker finds it and takes the lock as the head)
    fair.until(lambda: p.OWNER not in fair.lock(k) and fp.HANDED not in fair.lock(k), timeout=60)


def test_a_client_release_whose_grant_is_refused_while_the_lock_is_still_its_own_hands_it_on(fair):
    """The fair client's twin of ``test_fair_lock.py``'s workflow case: the client holds, ticket
    s + 1 was passed (``SKIP`` by a runner of the handoff that found the holder stale) while its
    waiter parked in row s + 1 anyway. The release's ``GRANT`` of that row is refused with the
    lock still the client's: it tells that waiter to look (it queues again) and hands the lock
    to ticket s + 2. Before, ``release()`` raised ``LockLost`` and the lock stayed the client's
    until its lease."""
    k = key("moved")
    lease = client(fair).acquire(k, lease=60)
    late = fair.start("FairPatient", {"key": k, "workMs": 1})
    fair.until(lambda: len(fair.queue(k)) == 1)
    nxt = fair.start("FairPatient", {"key": k, "workMs": 1})
    fair.until(lambda: len(fair.queue(k)) == 2)
    stored = p.namespaced("f", k)
    fair.cloud.dynamodb.update_item(TableName=fair.table("LocksTable"), **fp.arguments(stored, fp.SKIP, {
        ":me": {"S": "helper"}, ":stale": {"S": lease.owner}, ":now": {"N": str(int(time.time() * 1000))},
        ":prev": {"N": str(lease.ticket)}, ":ticket": {"N": str(lease.ticket + 1)}}))
    client(fair).release(lease)
    assert not fair.lock(k).get(p.OWNER, {}).get("S", "").startswith(lease.owner), fair.lock(k)
    second = fair.cloud.wait_for(nxt, timeout=45)  # far below its park timeout (2 min)
    assert second.status == "SUCCEEDED" and parks_timed_out(second) == 0, (second.error, second.cause)
    assert second.output["probe"]["fence"] == lease.fence + 1
    third = fair.cloud.wait_for(late, timeout=60)  # told to look: it queued again, behind ``nxt``
    assert third.status == "SUCCEEDED", (third.error, third.cause)
    assert third.output["probe"]["fence"] == lease.fence + 2
    assert fair.drained(k) and fair.probe(k).get("violations", 0) == 0


def test_a_client_release_that_handed_the_lock_on_does_not_fail_on_a_later_step(fair):
    """A client's release grants the lock to the parked workflow (the lock is no longer the
    client's), its wake-up fails, and its REVOKE after the claim window is throttled past
    botocore's retries. The release is done - the grantee's park timeout lets it find its
    grant and confirm it, as after a failed wake-up - so ``release()`` returns: a raw error
    would make the application retry a release whose lock has moved on, and the retry reports
    ``LockLost`` (fault matrix: ``client-fair:fair_protocol.REVOKE`` x ``throttle``)."""
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = key()
    lease = client(fair).acquire(k, lease=60)
    waiter = fair.start("Fair", {"key": k, "workMs": 1})
    fair.until(lambda: fair.queue(k))  # parked
    unwoken = Fault("SendTaskSuccess", "ServiceUnavailable", service="stepfunctions", times=2, when=not_the_gate)
    throttled = Fault("UpdateItem", "ThrottlingException", when=lambda params: (
        params.get("ConditionExpression"), params.get("UpdateExpression")) == (fp.REVOKE.condition, fp.REVOKE.update))
    with dynamodb_faults(unwoken, throttled) as log:
        try:
            # (its looks and claim window not waited: the grantee's own look at its park
            # timeout must come after the revoke, which a look would let it precede)
            client(fair, claim_window=1, sleep=lambda seconds: None).release(lease)
            raised = None
        except Exception as error:  # noqa: BLE001 - what the application would see
            raised = error
    assert throttled.injected == 1 and unwoken.injected >= 1, log.calls
    assert raised is None, f"the release raised {type(raised).__name__}: {raised}"
    result = fair.wait([waiter])[0]
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert result.output["probe"]["fence"] == lease.fence + 1
    assert fair.drained(k) and fair.probe(k).get("violations", 0) == 0


def test_a_client_queues_behind_workflows_and_is_granted_in_its_turn(fair):
    import threading

    k = key()
    holder, (w1,) = queued(fair, k, waiters=1)
    got = {}
    thread = threading.Thread(target=lambda: got.update(lease=client(fair).acquire(k, wait=60, poll_interval=0.1)))
    thread.start()
    fair.until(lambda: len(fair.queue(k)) == 2)
    w2 = fair.start("Fair", {"key": k, "workMs": 1})  # arrives after the client
    fair.until(lambda: len(fair.queue(k)) == 3)
    fair.open(k)
    thread.join(60)
    lease = got["lease"]
    results = fair.wait([holder, w1])
    assert lease.fence == results[1].output["probe"]["fence"] + 1  # right after w1
    client(fair).release(lease)  # wakes w2, parked behind the client
    last = fair.wait([w2])[0]
    assert last.status == "SUCCEEDED" and last.output["probe"]["fence"] == lease.fence + 1
    assert fair.drained(k)


def test_a_waiter_stopped_as_the_release_grants_it_is_handed_on_by_the_janitor(fair):
    """The waiter at the head is stopped just before the release grants it the lock
    (``GRANT``), and the janitor's look lands between that ``GRANT`` and the release's
    ``REVOKE`` (fault matrix: "fair key left held by a waiter that was stopped after the release
    granted it the lock"). The janitor's ``leave_queue`` claims the grant for the ended waiter,
    so the releaser's REVOKE is refused: the janitor must hand that lease on, never drop it. A
    client queued behind gets the key within the stop grace and one park timeout (the bound
    docs/fair-lock.md states), not at the ended waiter's lease; the grant was made after the
    end, so no retire shortened it and its waiter never worked under it."""
    import threading

    from fair_stack import PARK_TIMEOUT_S
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = key()
    holder, (w1,) = queued(fair, k, waiters=1, machine="FairPatient")
    got = {}

    def acquire():
        try:
            got["lease"] = client(fair).acquire(k, wait=60, poll_interval=0.2)
        except Exception as error:  # noqa: BLE001 - in the assertion's message
            got["error"] = error

    thread = threading.Thread(target=acquire)
    thread.start()
    fair.until(lambda: len(fair.queue(k)) == 2)
    events = fair.cloud.events
    events.status_event_filter = lambda detail: detail["executionArn"] != w1  # the test delivers it
    stopped = []

    def stop_w1():  # just before the GRANT (retried) lands
        fair.cloud.stepfunctions.stop_execution(executionArn=w1)
        assert fair.cloud.wait_for(w1).status == "ABORTED"
        stopped.append(time.time())

    def janitor_runs():  # after the GRANT, before the releaser's REVOKE
        (detail,) = [d for d in events.dropped_status_events if d["executionArn"] == w1]
        event = {"version": "0", "id": str(uuid.uuid4()), "source": "aws.states",
                 "detail-type": "Step Functions Execution Status Change", "account": "123456789012",
                 "time": "2026-01-01T00:00:00Z", "region": "us-east-1", "resources": [w1], "detail": detail}
        response = fair.cloud.client("lambda").invoke(
            FunctionName=fair.app.function_name("FairPatient/Janitor/Function"), Payload=json.dumps(event).encode())
        assert "FunctionError" not in response, response["Payload"].read()

    granting = Fault("UpdateItem", "ProvisionedThroughputExceededException", then=stop_w1,
                     when=lambda params: params.get("ConditionExpression") == fp.GRANT.condition
                     and params["ExpressionAttributeValues"][":next"]["S"].startswith(w1))
    unwoken = Fault("SendTaskSuccess", "TaskTimedOut", service="stepfunctions", when=not_the_gate, then=janitor_runs)
    try:
        with dynamodb_faults(granting, unwoken) as log:
            fair.open(k)
            held = fair.wait([holder])[0]
            thread.join(90)
    finally:
        events.status_event_filter = None
    assert granting.injected == 1 and unwoken.injected == 1, log.calls
    assert held.status == "SUCCEEDED", (held.error, held.cause)
    lease = got.get("lease")
    assert lease is not None, f"the client never got the key ({got.get('error')!r}): {fair.lock(k)}"
    grace_s = PROBE_GRACE_S  # at least FairPatient's derived stop grace
    assert time.time() - stopped[0] <= grace_s + PARK_TIMEOUT_S + 5, time.time() - stopped[0]
    assert lease.fence == held.output["probe"]["fence"] + 2  # w1's grant, then the client's
    client(fair).release(lease)
    assert fair.drained(k) and fair.probe(k).get("violations", 0) == 0

def test_a_dead_client_at_the_head_is_dequeued_by_a_waiter(fair):
    k = key()
    dead_head(fair, k, "client:gone#1", fence=4)
    result = fair.wait([fair.start("Fair", {"key": k, "workMs": 1})])[0]
    assert result.status == "SUCCEEDED" and result.output["probe"]["fence"] == 5
    assert parks_timed_out(result) >= 1 and fair.drained(k)
    assert_park_rounds_fit_the_budget(result)  # a round that ran the handoff for a dead head
    # and a client waiter does the same
    dead_head(fair, k, "client:gone#2", fence=5)
    lease = client(fair).acquire(k, wait=10, poll_interval=0.1)
    assert lease.fence == 6 and fair.queue(k) == [] and fair.rows(k) == []
    client(fair).release(lease)
    # the longest round a section's history budget must count: the head's wake-up fails while
    # its execution runs (its park ended: it may claim) - a short look for its new park, the
    # claim window, a last look, the revoke, the next row (here: the waiter's own)
    running = fair.start("FairHold", {"key": key(), "workMs": 1})
    dead_head(fair, k, f"{running}#1", fence=6, token="a-token-of-an-ended-park")
    result = fair.wait([fair.start("Fair", {"key": k, "workMs": 1})])[0]
    fair.cloud.stepfunctions.stop_execution(executionArn=running)
    assert result.status == "SUCCEEDED" and result.output["probe"]["fence"] == 8, result.output  # 7: the revoked grant
    from lock_invariants import state_entered

    assert {"Lock.Help.Reparking", "Lock.Help.ClaimWindow", "Lock.Help.Revoke"} <= set(state_entered(result))
    assert_park_rounds_fit_the_budget(result)
    assert fair.drained(k)


def test_a_client_that_gives_up_leaves_the_queue(fair):
    from locked_workflow.constructs_lib.lock_client import LockTimeout

    k = key()
    holder = client(fair).acquire(k, lease=60)
    with pytest.raises(LockTimeout):
        client(fair).acquire(k, wait=0.5, poll_interval=0.1)
    assert fair.queue(k) == []  # its row is marked left
    client(fair).release(holder)  # (and the release passes over it)
    assert fair.drained(k)


def test_a_client_that_claims_its_grant_late_gets_a_whole_lease_not_what_was_left(fair, monkeypatch):
    """A polling fair client handed the lock gets a lease its granter stamped at the grant: the
    client claims it at its next poll - seconds later on a loaded machine. ``acquire`` returned
    that lease with whatever was left of it, nothing if the claim came after its end, and any
    waiter may take over a lease that ended (``expiresAt < now``) while the client works: the
    matrix's ``client-fair:DeleteItem`` x ``lost`` cell, on a loaded machine, saw a client's hold
    run past its 30 s lease and a workflow enter beside it (probe ``[1, 1, 2]``). The claim
    here comes 3 s after a grant of a 2 s lease: ``acquire`` must return a lock whose lease runs
    from the claim (a renewal: allowed while nobody took the lock over)."""
    import threading

    k = key()
    first, late = client(fair), client(fair)
    held = first.acquire(k, lease=60)
    original = late.claim
    claimed_at: list[float] = []

    def claim_late(*args, **kwargs):  # the poll that finds the grant comes late (a loaded machine)
        time.sleep(3)
        claimed_at.append(time.time())
        return original(*args, **kwargs)

    monkeypatch.setattr(late, "claim", claim_late)
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(late.acquire(k, lease=2, wait=60, max_poll_interval=0.5)))
    waiter.start()
    fair.until(lambda: fp.counters(fair.lock(k))[1] == 1 and fair.queue(k), timeout=60)  # queued (polling)
    first.release(held)  # grants the polling client: a 2 s lease from now
    waiter.join(60)
    assert got and claimed_at, "the waiter never got the lock"
    lease, now_ms = got[0], time.time() * 1000
    expires_ms = int(fair.lock(k)[p.EXPIRES_AT]["N"])
    assert expires_ms > now_ms + 500, (expires_ms - now_ms, "the lease had run out when acquire returned it")
    assert lease.expires_at == expires_ms and lease.owner == fair.lock(k)[p.OWNER]["S"]
    late.release(lease)
    fair.until(lambda: fair.drained(k), timeout=60)
