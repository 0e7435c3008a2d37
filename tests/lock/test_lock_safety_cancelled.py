"""Sections a failing sibling cancelled (no Catch, no status event, the execution running on), on
both DynamoDB backends: the lock is free after the section's stop grace, not its lease (without
the presence it blocks for its lease: the negative control), and a Python client behind such a
section gets the lock after the grace but never takes over a holder whose branch runs. (The
fixture: ``test_lock_safety.py``, whose group this file is in.)"""

from __future__ import annotations

import time

from lock_invariants import HeartbeatCounter, LeaseEndsSeen, presence_dated_back, probe_as_client
from safety_stack import PROBE_GRACE_S, fail_sibling
from locked_workflow.state_machines import lock_protocol as p
from test_lock_safety import key, safety, step_functions_only  # noqa: F401 - safety: the stack's fixture


# ---- a section cancelled by a sibling branch (the user catches the failure) ----------------

def _cancelled_holder(safety, machine: str, k: str):
    """Start ``machine`` (a section beside a branch that fails when told, the failure caught,
    the execution RUNNING for 120 s more), and once its probe is inside, fail the sibling: its
    Lambda runs 3 s, past the cancellation."""
    holder = safety.cloud.start_execution(safety.arn(machine), {"key": k, "workMs": 3000, "siblingGate": k})
    deadline = time.time() + 60
    while safety.probe(k).get("entries", 0) == 0 and time.time() < deadline:
        time.sleep(0.05)
    assert safety.probe(k).get("entries", 0) == 1, "the holder never entered its work"
    fail_sibling(safety.cloud, safety.app, k)
    return holder


def test_a_section_cancelled_by_a_sibling_frees_its_lock_after_its_grace(safety):
    """Step Functions cancels the holding branch (no Catch, no event, the execution goes on
    RUNNING). A waiter's probe of the holder's presence token finds it closed: the lock is
    held for the stop grace from then (the cancelled Lambda may still run), not for the
    10-minute lease - and nobody enters while that Lambda runs."""
    k = key("cancelled")
    holder = _cancelled_holder(safety, "SeenCancelled", k)
    waiter = safety.cloud.start_execution(safety.arn("PlainStateMachine"), {"key": k, "workMs": 100})
    result = safety.cloud.wait_for(waiter, timeout=180)
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert safety.cloud.stepfunctions.describe_execution(executionArn=holder)["status"] == "RUNNING"
    probe = safety.probe(k)
    assert (probe["entries"], probe.get("violations", 0), probe["inside"]) == (2, 0, 0)
    history = safety.cloud.stepfunctions.get_execution_history(executionArn=holder, maxResults=1000)["events"]
    cancelled = [e["timestamp"].timestamp() for e in history if e["type"] == "ParallelStateFailed"]
    assert cancelled, [e["type"] for e in history]
    item = safety.cloud.dynamodb.get_item(TableName=safety.probes(), Key={"pk": {"S": k}}, ConsistentRead=True)["Item"]
    entered = sorted(int(n["N"]) / 1000 for n in item["enteredAt"]["L"])
    # the waiter entered its stop grace (PROBE_GRACE_S) after the cancel
    assert entered[1] - cancelled[0] >= PROBE_GRACE_S - 0.5, entered[1] - cancelled[0]
    assert safety.lock(k)[p.FENCE] == {"N": "2"}  # the waiter's is a new acquisition
    safety.cloud.stop_execution(holder)


def test_negative_control_without_the_presence_a_cancelled_section_blocks_for_its_lease(safety):
    """Without the presence branch, a waiter's liveness checks see only a RUNNING execution:
    well past the cancelled Lambda's grace, the lock still has most of its 10-minute lease."""
    step_functions_only(safety, "the cancellation")
    k = key("blind")
    holder = _cancelled_holder(safety, "BlindCancelled", k)
    waiter = safety.cloud.start_execution(safety.arn("PlainStateMachine"), {"key": k, "workMs": 100})
    cancelled_by = time.time() + 1  # the sibling fails 1 s after the holder's start at the latest

    def checks() -> int:
        events = safety.cloud.stepfunctions.get_execution_history(executionArn=waiter, maxResults=1000)["events"]
        return sum(1 for e in events if e["type"] == "TaskStateEntered"
                   and e["stateEnteredEventDetails"]["name"] == "Lock.DescribeHolder")

    deadline = time.time() + 120  # two liveness checks after the grace (PROBE_GRACE_S) has passed
    while (checks() < 2 or time.time() < cancelled_by + PROBE_GRACE_S + 3) and time.time() < deadline:
        time.sleep(0.5)
    assert checks() >= 2
    lock = safety.lock(k)
    assert holder in lock[p.OWNER]["S"], lock
    assert int(lock[p.EXPIRES_AT]["N"]) / 1000 - time.time() > 8 * 60  # held for the lease
    assert safety.probe(k)["entries"] == 1
    safety.cloud.stop_execution(waiter)
    safety.cloud.stop_execution(holder)


# ---- a LockClient waiting behind a section cancelled by a sibling (issue 25, clients) ------

def _safety_client(safety, stepfunctions=None):
    from locked_workflow.constructs_lib.lock_client import LockClient

    locks = next(v for k, v in safety.app.resources.items() if k.startswith("LocksTable"))
    return LockClient(locks, namespace="s", dynamodb=safety.cloud.dynamodb,
                      stepfunctions=stepfunctions or safety.cloud.stepfunctions), locks


def _holding_with_presence(safety, k: str, *, work_ms: int) -> str:
    """A SeenCancelled hold of ``k`` at work (its sibling waits on the gate ``k``), its presence
    registered: the holder's execution ARN."""
    holder = safety.cloud.start_execution(safety.arn("SeenCancelled"), {"key": k, "workMs": work_ms, "siblingGate": k})
    deadline = time.time() + 60
    while (safety.probe(k).get("entries", 0) == 0 or p.PRESENCE not in safety.lock(k)) and time.time() < deadline:
        time.sleep(0.05)
    assert safety.probe(k).get("entries", 0) == 1 and p.PRESENCE in safety.lock(k), safety.lock(k)
    return holder


def test_a_client_waiting_behind_a_section_cancelled_by_a_sibling_gets_the_lock_after_its_grace(safety):
    """A ``LockClient`` waiting behind a hold whose branch Step Functions cancelled (the
    execution RUNNING, no Catch, no event) probes the hold's presence token as the state
    machines' waiters do (``SendTaskHeartbeat``: ``TaskTimedOut``), writes ABANDONED (held for
    the stop grace from now: the cancelled Lambda may still run) and takes the lock after it -
    not at the 10-minute lease (before the fix: ``LockTimeout`` after its 40 s wait)."""
    k = key("client-cancelled")
    client, locks = _safety_client(safety)
    holder = _holding_with_presence(safety, k, work_ms=3000)
    presence_dated_back(safety.cloud, locks, p.namespaced("s", k))
    fail_sibling(safety.cloud, safety.app, k)  # the holder's branch is cancelled at work
    cancelled = time.time()
    lease = client.acquire(k, wait=40, lease=30)
    waited = time.time() - cancelled
    assert safety.cloud.stepfunctions.describe_execution(executionArn=holder)["status"] == "RUNNING"
    grace_s = PROBE_GRACE_S  # SeenCancelled's derived stop grace
    assert grace_s - 1 <= waited < grace_s + 10, waited  # its grace, not its lease (a round and slack)
    print(f"the client got the key {waited:.1f} s after the cancel")
    entered = probe_as_client(safety.cloud, safety.app, k, lease.fence)
    assert entered["insideAtEntry"] == 1, entered  # the cancelled Lambda had ended
    client.release(lease)
    probe = safety.probe(k)
    assert (probe["entries"], probe.get("violations", 0), probe["inside"]) == (2, 0, 0), probe
    assert safety.lock(k)[p.FENCE] == {"N": "2"} and lease.fence == 2
    safety.cloud.stop_execution(holder)


def test_negative_control_a_client_never_takes_over_a_holder_whose_branch_runs(safety):
    """The same hold, not cancelled, at work for 6 s with its registration dated past the
    settle: the client's probes are accepted (the branch runs), so it waits for the release -
    no ABANDONED, the holder releases its own acquisition, the client enters after it."""
    k = key("client-alive")
    heartbeats = HeartbeatCounter(safety.cloud.stepfunctions)
    client, locks = _safety_client(safety, heartbeats)
    holder = _holding_with_presence(safety, k, work_ms=6000)
    presence_dated_back(safety.cloud, locks, p.namespaced("s", k))
    held_until = int(safety.lock(k)[p.EXPIRES_AT]["N"])
    with LeaseEndsSeen(lambda: safety.lock(k), holder) as seen:
        lease = client.acquire(k, wait=60, lease=30)
    assert len(heartbeats.calls) >= 2, heartbeats.calls  # the client probed the live holder (more than once) ...
    assert seen == {held_until}, seen  # ... and never retired it
    entered = probe_as_client(safety.cloud, safety.app, k, lease.fence)
    assert entered["insideAtEntry"] == 1, entered
    client.release(lease)
    probe = safety.probe(k)
    assert (probe["entries"], probe.get("violations", 0), probe["inside"]) == (2, 0, 0), probe
    assert lease.fence == 2
    safety.cloud.stop_execution(holder)
