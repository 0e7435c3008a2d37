"""A ``LockClient(read_write=True)`` waiting behind a read/write section a sibling cancelled
(issue 25, D1), on both DynamoDB backends: it gets the key after the section's stop grace, never
retires a section whose branch runs (the negative control), and a client writer behind two
readers retires the cancelled one and waits for the live one. (The fixture:
``test_shared_client_workflows.py``, whose group this file is in.)"""

from __future__ import annotations

import time
import uuid

import pytest

from locked_workflow.constructs_lib.lock_client import LockClient, LockTimeout
from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import shared_protocol as sp
from deployed import run_in_thread
from test_shared_client_workflows import mixed, workflow_client  # noqa: F401 - mixed: the stack's fixture


# ---- a client waiting behind a section a sibling cancelled (issue 25, D1, both backends) -----------

#: The stop grace of SharedStack's Cancelled* sections (the probe Lambda's Init limit + its
#: timeout + the margin: ``safety_stack.PROBE_GRACE_S``).
def _grace_s() -> float:
    from safety_stack import PROBE_GRACE_S

    return PROBE_GRACE_S


def _section_holding(mixed, k: str, machine: str, gate: str = "c") -> tuple[str, str]:
    """(execution, owner) of a ``machine`` (a SharedStack ``Cancelled*`` section beside a
    sibling branch) holding ``k`` at its gate ``gate``, its presence row registered and dated
    past the settle (``lock_invariants.presence_dated_back``; the settle is the state machines'
    tests' subject), its sibling parked."""
    from lock_invariants import presence_dated_back

    run = mixed.start(machine, {"key": k, "gate": gate, "workMs": 1})
    mixed.until(lambda: mixed.gate_token(k, gate))  # holds, at work

    def owner() -> str | None:
        item = mixed.lock(k)
        return next((o for o in (item.get(p.OWNER, {}).get("S", ""), *sp.readers_of(item)) if run in o), None)

    mixed.until(lambda: owner() is not None and p.PRESENCE in mixed.presence_row(owner()))
    presence_dated_back(mixed.cloud, mixed.table("LocksTable"), sp.presence_row_key(owner()))
    return run, owner()


def _hold_of(mixed, k: str, owner: str) -> dict:
    """The hold of ``owner`` on ``k`` as ``{owner, expiresAt}`` ({} when it has none): a reader's
    entry, or the lock item of a writer."""
    item = mixed.lock(k)
    hold = sp.readers_of(item).get(owner) or (item if item.get(p.OWNER, {}).get("S") == owner else {})
    return {p.OWNER: {"S": owner}, p.EXPIRES_AT: hold[p.EXPIRES_AT]} if hold else {}


def _fail_sibling(mixed, k: str, run: str) -> None:
    """The sibling branch of ``run`` fails: Step Functions cancels its section's branch; the user
    catches the Parallel's failure and the execution runs on."""
    mixed.until(lambda: mixed.gate_token(k, "sibling"))
    mixed.cloud.stepfunctions.send_task_failure(taskToken=mixed.gate_token(k, "sibling"), error="User.Failed",
                                                cause="the sibling fails")
    mixed.until(lambda: any(e["type"] == "ParallelStateFailed" for e in mixed.cloud.history(run)))


class ActionsSeen:
    """A boto3 client (DynamoDB or Step Functions) that records the IAM action of each call it
    passes on (a ``TransactWriteItems``: its items' actions) in ``seen``."""

    _TRANSACT = {"ConditionCheck": "ConditionCheckItem", "Update": "UpdateItem", "Delete": "DeleteItem",
                 "Put": "PutItem"}

    def __init__(self, client, service: str, seen: set) -> None:
        self._client, self._service, self.seen = client, service, seen

    def __getattr__(self, name):
        method = getattr(self._client, name)
        if not callable(method):
            return method

        def call(*args, **kwargs):
            if name == "transact_write_items":
                self.seen.update(f"dynamodb:{self._TRANSACT[t]}" for i in kwargs["TransactItems"] for t in i)
            else:
                self.seen.add(f"{self._service}:{self._client.meta.method_to_api_mapping[name]}")
            return method(*args, **kwargs)

        return call


#: (the client's mode, the cancelled section): a writer behind a reader and behind a writer, a
#: reader behind a writer.
_BEHIND = (("write", "CancelledReader"), ("write", "CancelledWriter"), ("read", "CancelledWriter"))


def test_a_client_waiting_behind_a_section_cancelled_by_a_sibling_gets_the_key_after_its_grace(mixed):
    """D1 for ``LockClient(read_write=True)``: a client writer (behind a reader, behind a
    writer) and a client reader (behind a writer) wait behind a hold whose branch Step Functions
    cancelled (the execution RUNNING: DescribeExecution cannot tell it). Each probes the hold's
    presence row (``SendTaskHeartbeat``: ``TaskTimedOut``), retires that acquisition from now
    (the row's GONE_ROW beside RETIRE_GONE_*: held for its stop grace) and gets the key after
    it - not at the 10-minute lease (before: ``LockTimeout`` after its 40 s wait)."""
    from lock_invariants import probe_as_client

    keys = {case: f"k-{uuid.uuid4().hex[:8]}" for case in _BEHIND}
    holds = {case: _section_holding(mixed, keys[case], case[1]) for case in _BEHIND}
    fences = {case: int(mixed.lock(keys[case]).get(p.FENCE, {}).get("N", "0")) for case in _BEHIND}
    for case in _BEHIND:
        _fail_sibling(mixed, keys[case], holds[case][0])
    cancelled = time.time()

    seen: set[str] = set()  # the IAM actions the waiting clients called

    def behind(case):
        client = LockClient(mixed.table("LocksTable"), namespace="rw", read_write=True,
                            dynamodb=ActionsSeen(mixed.cloud.dynamodb, "dynamodb", seen),
                            stepfunctions=ActionsSeen(mixed.cloud.stepfunctions, "states", seen))
        lease = client.acquire(keys[case], shared=case[0] == "read", wait=40, lease=30)
        return time.time() - cancelled, lease

    waiting = {case: run_in_thread(lambda case=case: behind(case)) for case in _BEHIND}
    for case, (thread, out) in waiting.items():
        thread.join(90)
        assert "value" in out, (case, out.get("error"))
        waited, lease = out["value"]
        k, (run, owner) = keys[case], holds[case]
        print(f"{case}: the client got the key {waited:.1f} s after the cancel")
        assert _grace_s() - 1 <= waited < _grace_s() + 10, (case, waited)  # its grace, not its lease
        assert mixed.cloud.status(run) == "RUNNING"  # only its branch was cancelled
        assert not mixed.presence_row(owner) and not _hold_of(mixed, k, owner)  # retired by the probe, then gone
        entered = probe_as_client(mixed.cloud, mixed.app, k, lease.fence, role=case[0])
        assert entered["insideAtEntry"] == 1, (case, entered)  # the cancelled work never ran
        # a writer's fence follows the last one; a reader reads the last writer's
        assert lease.fence == fences[case] + (case[0] == "write"), (case, lease.fence, fences[case])
        workflow_client(mixed).release(lease)
        assert mixed.free(k), mixed.lock(k)
        mixed.cloud.stop_execution(run)
    assert all(mixed.probe(k).get("violations", 0) == 0 for k in keys.values())
    # what grant_lock_client(read_write=True) grants covers the calls (the probe, the retire's
    # transaction of a Delete and an Update among them)
    from locked_workflow.constructs_lib.client_layer import lock_client_actions

    assert {"states:SendTaskHeartbeat", "dynamodb:DeleteItem"} <= seen <= lock_client_actions(read_write=True), seen


def test_negative_control_a_client_never_retires_a_reader_or_writer_section_whose_branch_runs(mixed):
    """The same holds at work, not cancelled: a client writer behind the reader and a client
    reader behind the writer probe them (their heartbeats are accepted), never retire them (the
    holds' leases never move, their presence rows stay), and wait out their 8 s in
    ``LockTimeout``."""
    from lock_invariants import HeartbeatCounter, LeaseEndsSeen

    cases = (("write", "CancelledReader"), ("read", "CancelledWriter"))
    keys = {case: f"k-{uuid.uuid4().hex[:8]}" for case in cases}
    holds = {case: _section_holding(mixed, keys[case], case[1]) for case in cases}
    held_until = {case: _hold_of(mixed, keys[case], holds[case][1])[p.EXPIRES_AT]["N"] for case in cases}
    heartbeats = {case: HeartbeatCounter(mixed.cloud.stepfunctions) for case in cases}

    def behind(case):
        client = LockClient(mixed.table("LocksTable"), namespace="rw", dynamodb=mixed.cloud.dynamodb,
                            stepfunctions=heartbeats[case], read_write=True)
        run, owner = holds[case]
        with LeaseEndsSeen(lambda: _hold_of(mixed, keys[case], owner), run) as seen:
            with pytest.raises(LockTimeout):
                client.acquire(keys[case], shared=case[0] == "read", wait=8, lease=30)
        return seen

    waiting = {case: run_in_thread(lambda case=case: behind(case)) for case in cases}
    for case, (thread, out) in waiting.items():
        thread.join(60)
        assert "value" in out, (case, out.get("error"))
        run, owner = holds[case]
        assert len(heartbeats[case].calls) >= 2, (case, heartbeats[case].calls)  # probed, more than once ...
        assert {str(v) for v in out["value"]} == {held_until[case]}, (case, out["value"])  # ... never retired
        row = mixed.presence_row(owner)
        assert p.PRESENCE in row and p.PRESENCE_CLOSED not in row, row
        mixed.cloud.stop_execution(run)


def test_a_client_writer_behind_two_readers_retires_the_cancelled_one_and_waits_for_the_live_one(mixed):
    """Readers hold several entries: the waiter probes each holder it is blocked by (in turn,
    as the state machines' waiters do). Of two reader sections, one cancelled by its sibling,
    one at work: the cancelled entry is retired and reaped after its grace, the live one is
    never touched, and the writer enters when the live reader leaves."""
    k = f"k-{uuid.uuid4().hex[:8]}"
    live, live_owner = _section_holding(mixed, k, "CancelledReader", gate="live")
    mixed.until(lambda: mixed.gate_token(k, "sibling"))
    live_sibling = mixed.gate_token(k, "sibling")
    gone, gone_owner = _section_holding(mixed, k, "CancelledReader", gate="gone")
    # (both siblings store their token under one key: the later one's is the cancelled run's)
    mixed.until(lambda: mixed.gate_token(k, "sibling") not in (None, live_sibling))
    live_until = _hold_of(mixed, k, live_owner)[p.EXPIRES_AT]["N"]
    _fail_sibling(mixed, k, gone)
    cancelled = time.time()
    thread, out = run_in_thread(lambda: workflow_client(mixed).acquire(k, wait=60, lease=30))
    mixed.until(lambda: not _hold_of(mixed, k, gone_owner), timeout=60)  # retired, then reaped
    reaped = time.time() - cancelled
    print(f"the cancelled reader's entry was reaped {reaped:.1f} s after the cancel")
    assert _grace_s() - 1 <= reaped < _grace_s() + 10, reaped
    assert _hold_of(mixed, k, live_owner)[p.EXPIRES_AT]["N"] == live_until  # the live reader: untouched
    assert thread.is_alive() and p.PRESENCE in mixed.presence_row(live_owner)  # the writer waits for it
    mixed.open(k, "live")  # the live reader's work ends: it leaves, and hands the key to the writer
    thread.join(60)
    assert "value" in out, out.get("error")
    lease = out["value"]
    assert mixed.lock(k)[p.OWNER]["S"] == lease.owner and not sp.readers_of(mixed.lock(k))
    workflow_client(mixed).release(lease)
    assert mixed.probe(k).get("violations", 0) == 0 and mixed.free(k)
    mixed.cloud.stepfunctions.send_task_success(taskToken=live_sibling, output="{}")  # (its execution ends)
    mixed.cloud.stop_execution(gone)
