"""The read/write lock (``Lock.shared`` / ``Lock.exclusive``) on both DynamoDB backends.

Invariants, from the probe inside the protected work (it counts readers and writers inside at
every entry): readers are inside together, a writer is always alone, no writer's update is
lost, readers read the fence of the last writer, arrivals are served in ticket order (a writer
queued before a reader goes first; a writer's release admits every reader queued behind it at
once). The same load with no lock is the negative control. Recovery (a stopped reader: its
lease, no janitor; a stopped writer: the janitor; each a bounded delay) is in
``test_shared_recovery.py``, which shares this file's stack fixture.

Holders that must stay inside until the test says park on a *gate* (a task token the test
completes): every wait is on a condition, never on time.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
import uuid

import pytest

from locked_workflow.state_machines import fair_protocol as fp
from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import shared_protocol as sp
from deployed import StackRun, deployed_stack, synthesized
from shared_stack import SharedStack
from template_iam import actions, role_statements

NAMESPACE = "rw"


@pytest.fixture(scope="session")
def shared_synth():
    return synthesized(SharedStack, "Shared")


class ReadWrite(StackRun):
    def wait(self, arns, timeout: float = 200):
        return super().wait(arns, timeout)

    def lock(self, key: str) -> dict:
        return self.get("LocksTable", {"pk": {"S": p.namespaced(NAMESPACE, key)}})

    def rows(self, key: str) -> list[int]:
        """The tickets of ``key`` whose queue row is still there (a drained key has none)."""
        stored = p.namespaced(NAMESPACE, key)
        return [t for t in range(1, fp.counters(self.lock(key))[1] + 1) if self.cloud.dynamodb.get_item(
            TableName=self.table("LocksTable"), Key={"pk": {"S": fp.row_key(stored, t)}}, ConsistentRead=True).get("Item")]

    def parked(self, key: str) -> list[str]:
        """The kinds of the waiters parked on the key, head first."""
        out = []
        for ticket in fp.queued_tickets(self.lock(key)):
            row = self.cloud.dynamodb.get_item(
                TableName=self.table("LocksTable"), ConsistentRead=True,
                Key={"pk": {"S": fp.row_key(p.namespaced(NAMESPACE, key), ticket)}}).get("Item", {})
            if fp.TOKEN in row:
                out.append(sp.row_kind(row))
        return out

    def presence_row(self, owner: str) -> dict:
        """The presence row of the hold ``owner`` ({} when there is none)."""
        return self.cloud.dynamodb.get_item(TableName=self.table("LocksTable"), ConsistentRead=True,
                                            Key={"pk": {"S": sp.presence_row_key(owner)}}).get("Item", {})

    def probe(self, key: str) -> dict:
        item = self.cloud.dynamodb.get_item(TableName=self.table("Probes"), Key={"pk": {"S": key}},
                                            ConsistentRead=True).get("Item", {})
        out = {k: int(v["N"]) for k, v in item.items() if "N" in v}
        out.update({k: [int(x["N"]) for x in v["L"]] for k, v in item.items() if "L" in v})
        return out

    def gate_token(self, key: str, gate: str):
        item = self.cloud.dynamodb.get_item(TableName=self.table("Probes"), Key={"pk": {"S": f"gate#{key}#{gate}"}},
                                            ConsistentRead=True).get("Item")
        return item and item["token"]["S"]

    def open(self, key: str, gate: str) -> None:
        self.until(lambda: self.gate_token(key, gate))
        self.cloud.stepfunctions.send_task_success(taskToken=self.gate_token(key, gate), output='{"gate": "open"}')

    def until(self, predicate, timeout: float = 90):
        deadline = time.time() + timeout
        while not predicate():
            assert time.time() < deadline, "timed out waiting"
            time.sleep(0.1)

    def free(self, key: str) -> bool:
        """Nobody holds (no owner, no reader entry) and nobody queues."""
        item = self.lock(key)
        served, tickets = fp.counters(item)
        return p.OWNER not in item and not sp.readers_of(item) and served == tickets


rw = deployed_stack(SharedStack, "Shared", ReadWrite)


def assert_park_rounds_fit_the_budget(result, protected_state: str) -> None:
    """Every park round of ``result`` fits the section's history budget's figure for a round
    (``fair_protocol.EVENTS_PER_PARK_ROUND``: the read/write kinds' waiters are budgeted as the
    fair lock's)."""
    from lock_invariants import park_round_events

    rounds = park_round_events(result, protected_state)
    assert rounds and max(rounds) <= fp.EVENTS_PER_PARK_ROUND, rounds
    print(f"park rounds: {rounds} events (budget figure {fp.EVENTS_PER_PARK_ROUND})")


def new_key() -> str:
    return f"k-{uuid.uuid4().hex[:8]}"


def writer_handed_on(rw, k: str, gate: str) -> tuple[str, str]:
    """(first, second): a writer holds ``k`` at its gate ``w0``, a second parks behind it; the
    first's gate opens, and the second is inside its work at ``gate`` (the first's handoff
    granted it)."""
    first = rw.start("WriterHold", {"key": k, "gate": "w0", "workMs": 1})
    rw.until(lambda: rw.gate_token(k, "w0"))
    second = rw.start("WriterHold", {"key": k, "gate": gate, "workMs": 1})
    rw.until(lambda: rw.parked(k) == ["write"])
    rw.open(k, "w0")
    rw.until(lambda: rw.gate_token(k, gate))
    return first, second


def entered_states(result) -> list[str]:
    return [e["stateEnteredEventDetails"]["name"] for e in result.history if "stateEnteredEventDetails" in e]


def probe_of(result) -> dict:
    return result.output["probe"]


def test_an_uncontended_reader_enters_and_leaves_with_one_write_each(rw):
    k = new_key()
    result = rw.wait([rw.start("Reader", {"key": k, "workMs": 1})])[0]
    assert result.status == "SUCCEEDED", result.cause
    # one write to enter (FAST_READ); to leave, LEAVE_READ (refused: no other reader), then the
    # last reader's LEAVE_LAST, which ends the shared hold; the handoff's look at the queue
    assert entered_states(result) == ["Lock", "Lock.Acquire", "ReaderProbe", "Lock.Release", "Lock.ReleaseLast",
                                      "Lock.Release.Last?", "Lock.Release.Handoff.Look", "Lock.Release.Handoff.Next?",
                                      "Lock.Released"]
    assert rw.free(k) and int(rw.lock(k)[sp.READERS]["N"]) == 0


def test_readers_hold_together_beside_a_reader_that_holds(rw):
    k = new_key()
    holder = rw.start("ReaderHold", {"key": k, "gate": "h", "workMs": 1})
    rw.until(lambda: rw.gate_token(k, "h"))  # the holder is inside its work
    item = rw.lock(k)
    assert item[p.OWNER]["S"] == sp.SHARED and len(sp.readers_of(item)) == 1
    # three more readers come and go while the first still holds: none waited for it
    results = rw.wait([rw.start("Reader", {"key": k, "workMs": 1}) for _ in range(3)])
    assert [r.status for r in results] == ["SUCCEEDED"] * 3
    assert rw.lock(k)[p.OWNER]["S"] == sp.SHARED and len(sp.readers_of(rw.lock(k))) == 1
    assert rw.probe(k)["entries"] == 3
    rw.open(k, "h")
    assert rw.wait([holder])[0].status == "SUCCEEDED"
    assert rw.free(k)


def test_a_writer_holds_alone_and_its_release_admits_every_queued_reader_at_once(rw):
    k = new_key()
    writer = rw.start("WriterHold", {"key": k, "gate": "w", "workMs": 1})
    rw.until(lambda: rw.gate_token(k, "w"))
    readers = [rw.start("ReaderHold", {"key": k, "gate": f"r{i}", "workMs": 1}) for i in range(3)]
    rw.until(lambda: rw.parked(k) == ["read"] * 3)
    # parked, not inside: the writer is alone
    assert rw.probe(k).get("entries", 0) == 0 and not sp.readers_of(rw.lock(k))
    rw.open(k, "w")
    # all three readers are admitted and hold at the same time (each waits at its own gate)
    rw.until(lambda: all(rw.gate_token(k, f"r{i}") for i in range(3)))
    item = rw.lock(k)
    assert item[p.OWNER]["S"] == sp.SHARED and len(sp.readers_of(item)) == int(item[sp.READERS]["N"]) == 3
    for i in range(3):
        rw.open(k, f"r{i}")
    w, *rs = rw.wait([writer, *readers])
    assert w.status == "SUCCEEDED" and [r.status for r in rs] == ["SUCCEEDED"] * 3
    # the readers read the writer's fence: the version it wrote
    assert {probe_of(r)["fence"] for r in rs} == {probe_of(w)["fence"]} and rw.probe(k)["lastFence"] == probe_of(w)["fence"]
    assert rw.probe(k).get("violations", 0) == 0 and rw.probe(k).get("staleReads", 0) == 0
    assert rw.free(k)


def test_arrivals_are_served_in_ticket_order(rw):
    """A writer that queued before a reader goes first; the readers before it share."""
    k = new_key()
    first = rw.start("ReaderHold", {"key": k, "gate": "r0", "workMs": 1})
    rw.until(lambda: rw.gate_token(k, "r0"))
    writer = rw.start("WriterHold", {"key": k, "gate": "w", "workMs": 1})
    rw.until(lambda: rw.parked(k) == ["write"])
    late = rw.start("ReaderHold", {"key": k, "gate": "r1", "workMs": 1})
    # the late reader finds the key free of writers but a writer queued: it queues behind it
    rw.until(lambda: rw.parked(k) == ["write", "read"])
    rw.open(k, "r0")
    rw.until(lambda: rw.gate_token(k, "w"))  # the writer holds ...
    assert rw.parked(k) == ["read"] and not rw.gate_token(k, "r1")  # ... and the late reader waits
    rw.open(k, "w")
    rw.open(k, "r1")
    r0, w, r1 = rw.wait([first, writer, late])
    assert (r0.status, w.status, r1.status) == ("SUCCEEDED",) * 3
    assert probe_of(r1)["fence"] == probe_of(w)["fence"] > probe_of(r0)["fence"]
    assert rw.free(k)


def test_a_reader_that_gives_up_leaves_its_place_and_is_skipped(rw):
    k = new_key()
    writer = rw.start("WriterHold", {"key": k, "gate": "w", "workMs": 1})
    rw.until(lambda: rw.gate_token(k, "w"))
    impatient = rw.start("ReaderImpatient", {"key": k, "workMs": 1})
    late = rw.start("Reader", {"key": k, "workMs": 1})
    gave_up = rw.wait([impatient])[0]
    assert (gave_up.status, gave_up.error) == ("FAILED", p.ERROR_TIMEOUT)
    assert "Lock.Leave" in entered_states(gave_up)
    rw.open(k, "w")
    w, r = rw.wait([writer, late])
    assert (w.status, r.status) == ("SUCCEEDED", "SUCCEEDED")
    assert "Lock.Release.Skip" in entered_states(w)  # the handoff passed over the row left
    assert rw.probe(k)["entries"] == 2 and rw.free(k)
    assert rw.rows(k) == []  # R1: and deleted it (a row left behind was never deleted)


@pytest.mark.parametrize("machine", ["ReaderImpatient", "WriterImpatient"])
def test_a_waiter_granted_the_lock_as_it_gives_up_claims_it_runs_and_releases(rw, machine):
    """Fault matrix finding (``client-rw:fair_protocol.LEAVE`` x ``lost``): a waiter whose
    ``max_wait`` ran out is handed the lock before its ``LEAVE`` lands. Placed here: its first
    ``LEAVE`` fails before applying and, meanwhile, the holder's release grants it the key; the
    retried ``LEAVE`` applies, ``Lock.ClaimOnLeave`` claims the grant, and the run holds the lock:
    it runs its work and releases (docs/shared-lock.md). Before the fix ``Lock.DropRow``
    unwrapped the section's input a second time and failed ``States.QueryEvaluationError``,
    holding the key it had just claimed."""
    from locked_workflow.testing.faults import Fault, calling_state, dynamodb_faults

    k = new_key()
    writer = rw.start("WriterHold", {"key": k, "gate": "w", "workMs": 1})
    rw.until(lambda: rw.gate_token(k, "w"))
    impatient = rw.start(machine, {"key": k, "workMs": 1})
    rw.until(lambda: len(rw.parked(k)) == 1)

    def leave_of_the_impatient(params: dict) -> bool:
        state = calling_state()
        return state is not None and state.state_name == "Lock.Leave" and state.execution_arn == impatient

    def the_holder_hands_over() -> None:
        rw.open(k, "w")
        rw.until(lambda: rw.cloud.status(writer) != "RUNNING", timeout=120)

    handed = Fault("UpdateItem", "InternalServerError", when=leave_of_the_impatient, then=the_holder_hands_over)
    with dynamodb_faults(handed) as log:
        w, late = rw.wait([writer, impatient])
    assert log.injected == 1
    assert w.status == "SUCCEEDED", w.cause
    states = entered_states(late)
    assert "Lock.ClaimOnLeave" in states, states[-12:]
    assert (late.status, late.error) == ("SUCCEEDED", None), (late.error, late.cause)
    assert probe_of(late)["fence"] >= probe_of(w)["fence"]
    assert rw.probe(k)["entries"] == 2 and rw.probe(k).get("violations", 0) == 0
    rw.until(lambda: rw.free(k))
    assert rw.rows(k) == []


def test_a_plain_mutex_on_the_key_is_a_writer(rw):
    k = new_key()
    reader = rw.start("ReaderHold", {"key": k, "gate": "r", "workMs": 1})
    rw.until(lambda: rw.gate_token(k, "r"))
    mutex = rw.start("Mutex", {"key": k, "workMs": 1})
    # its acquire is refused by the shared hold (it polls), and it is not inside
    rw.until(lambda: any(e["type"] == "TaskFailed" for e in rw.cloud.history(mutex)))
    assert rw.probe(k).get("entries", 0) == 0
    rw.open(k, "r")
    r, m = rw.wait([reader, mutex])
    assert (r.status, m.status) == ("SUCCEEDED", "SUCCEEDED")
    assert probe_of(m)["insideAtEntry"] == 1 and rw.probe(k).get("violations", 0) == 0
    assert probe_of(m)["fence"] == int(rw.lock(k)[p.FENCE]["N"]) and rw.free(k)


def test_a_plain_mutex_frees_a_key_whose_readers_ended_without_leaving(rw, record_property):
    """A reader stopped inside its hold leaves its entry and the shared hold (``owner`` =
    shared), which a plain mutex's ACQUIRE never takes over. The mutex waiter's liveness check
    reads the shared hold: with the janitor, the entry it retired is reaped (``REAP_LAST``) once
    its stop grace is over; with the janitor's events dropped, the mutex describes the reader's
    execution, retires the entry from its end (``RETIRE_READER``) and reaps it a round later;
    an item the first protocol left (``owner`` shared, no reader) is freed (``FREE_EMPTY``). Each
    within the stop grace + one liveness round + slack after the stop (before the fix: the whole
    ``max_wait``, 150 s, then ``Lock.Timeout``). The control: beside a live reader the mutex's
    checks describe it (running) and change nothing - it stays out until the reader leaves."""
    janitor_key, blind_key, empty_key, live_key = (new_key() for _ in range(4))
    readers = {k: rw.start("ReaderHold", {"key": k, "gate": "r", "workMs": 1}) for k in (janitor_key, blind_key, live_key)}
    rw.until(lambda: all(rw.gate_token(k, "r") for k in readers))
    grace_ms = int(next(iter(sp.readers_of(rw.lock(janitor_key)).values()))[p.GRACE]["N"])
    # the first protocol's leave, stopped between its two writes: a shared hold with no reader
    rw.cloud.dynamodb.put_item(TableName=rw.table("LocksTable"), Item={
        "pk": {"S": p.namespaced(NAMESPACE, empty_key)}, p.OWNER: {"S": sp.SHARED}, sp.READERS: {"N": "0"},
        p.FENCE: {"N": "3"}, fp.TICKETS: {"N": "0"}, fp.SERVED: {"N": "0"}})
    mutexes = {k: rw.start("Mutex", {"key": k, "workMs": 1}) for k in (janitor_key, blind_key, empty_key, live_key)}
    rw.until(lambda: all(any(e["type"] == "TaskFailed" for e in rw.cloud.history(m)) for m in mutexes.values()))
    dropped = {readers[blind_key]}
    rw.cloud.events.status_event_filter = lambda detail: detail["executionArn"] not in dropped  # no janitor
    try:
        for k in (janitor_key, blind_key):
            rw.cloud.stop_execution(readers[k])
        stop_ms = {k: rw.cloud.stepfunctions.describe_execution(executionArn=readers[k])["stopDate"].timestamp() * 1000
                   for k in (janitor_key, blind_key)}
        from safety_stack import FAST

        liveness_round_s = 2 * (FAST.round_polling_s(150) + FAST.max_interval)  # the stack's Mutex: every 2nd round
        bound_s = grace_ms / 1000 + liveness_round_s + 30
        results = {k: rw.cloud.wait_for(mutexes[k], timeout=bound_s + 15) for k in (janitor_key, blind_key, empty_key)}
        for k, result in results.items():
            assert result.status == "SUCCEEDED", (k, result.status, result.cause)
            assert probe_of(result)["insideAtEntry"] == 1 and rw.free(k), k
        entered = {k: state_times(results[k].history, "MutexProbe", "TaskStateEntered")[0] for k in stop_ms}
        for k in stop_ms:  # never before the stop grace, and within the bound
            assert stop_ms[k] + grace_ms <= entered[k] <= stop_ms[k] + bound_s * 1000, (k, stop_ms[k], entered[k])
            record_property(f"{'janitor' if k == janitor_key else 'no_janitor'}_mutex_in_after_stop_s",
                            round((entered[k] - stop_ms[k]) / 1000, 1))
        assert "Lock.ReapLastReader" in entered_states(results[janitor_key])
        assert {"Lock.DescribeReader", "Lock.RetireEndedReader", "Lock.ReapLastReader"} <= set(entered_states(results[blind_key]))
        assert "Lock.FreeEmptyShared" in entered_states(results[empty_key])
        assert probe_of(results[empty_key])["fence"] == 4
    finally:
        rw.cloud.events.status_event_filter = None
    # the control: a live reader is described (running) and keeps its entry; the mutex stays out
    rw.until(lambda: entered_states_of(rw, mutexes[live_key]).count("Lock.DescribeReader") >= 2, timeout=120)
    (entry,) = sp.readers_of(rw.lock(live_key)).values()
    assert int(entry[p.EXPIRES_AT]["N"]) > time.time() * 1000 + 60_000 and rw.probe(live_key).get("entries", 0) == 0
    assert rw.cloud.status(mutexes[live_key]) == "RUNNING"
    rw.open(live_key, "r")
    r, m = rw.wait([readers[live_key], mutexes[live_key]])
    assert (r.status, m.status) == ("SUCCEEDED", "SUCCEEDED") and probe_of(m)["insideAtEntry"] == 1


def _lost(write, *, times: int = 1):
    """The write reaches DynamoDB, its response is lost (a 500 after the call)."""
    from locked_workflow.testing.faults import Fault

    return Fault("UpdateItem", "InternalServerError", times=times, after_call=True,
                 when=lambda params: (params.get("ConditionExpression"), params.get("UpdateExpression"))
                 == (write.condition, write.update))


def test_lost_responses_of_a_readers_enter_and_leave_count_it_once(rw):
    """A fast read whose response was lost rejoins its entry (a retry of the ADD would be
    refused and loop); a last reader's leave whose response was lost is refused when tried again
    (its entry is gone), reads the count and hands off."""
    from locked_workflow.testing.faults import dynamodb_faults

    k = new_key()
    with dynamodb_faults(_lost(sp.FAST_READ), _lost(sp.LEAVE_LAST)) as log:
        result = rw.wait([rw.start("Reader", {"key": k, "workMs": 1})])[0]
    assert log.injected == 2
    assert result.status == "SUCCEEDED", result.cause
    states = entered_states(result)
    assert "Lock.Rejoin" in states and "Lock.ReleaseLastAgain" in states and "Lock.ReleaseRead" in states
    assert rw.probe(k)["entries"] == 1 and rw.free(k) and int(rw.lock(k)[sp.READERS]["N"]) == 0


def test_a_readers_leave_refused_round_after_round_retires_its_entry_at_the_cap(rw):
    """Issue 25: LEAVE_READ and LEAVE_LAST condition on the reader count, so a leave is refused
    whenever another reader entered or left between its read and its write. Refused every time
    (as under readers whose count moves between every read and write of mine), the leave loop
    stops after ``shared_protocol.MAX_LEAVE_ROUNDS`` reads: the reader retires its entry (it
    ends its stop grace from now, then is reaped as a stopped reader's) and its release ends;
    the run succeeds (its work did). Before the cap it looped until the refusals stopped."""
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = new_key()
    stored = p.namespaced(NAMESPACE, k)

    def refused(write):
        return Fault("UpdateItem", "ConditionalCheckFailedException", times=3 * sp.MAX_LEAVE_ROUNDS,
                     when=lambda params: (params.get("ConditionExpression"), params.get("UpdateExpression"))
                     == (write.condition, write.update) and params.get("Key") == {"pk": {"S": stored}})

    with dynamodb_faults(refused(sp.LEAVE_READ), refused(sp.LEAVE_LAST)):
        result = rw.wait([rw.start("Reader", {"key": k, "workMs": 1})])[0]
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    states = entered_states(result)
    assert states.count("Lock.ReleaseRead") == sp.MAX_LEAVE_ROUNDS and states[-1] == "Lock.Released", states[-8:]
    assert states.count("Lock.ReleaseRetire") == 1
    retired_ms = next(e["timestamp"].timestamp() * 1000 for e in result.history
                      if e.get("stateEnteredEventDetails", {}).get("name") == "Lock.ReleaseRetire")
    (entry,) = sp.readers_of(rw.lock(k)).values()  # still there, its lease cut to the stop grace
    grace_ms, expires_ms = int(entry[p.GRACE]["N"]), int(entry[p.EXPIRES_AT]["N"])
    assert retired_ms + grace_ms - 1_000 <= expires_ms <= retired_ms + grace_ms + 5_000, (retired_ms, grace_ms, expires_ms)


def test_a_lost_grant_response_and_a_lost_wake_up_strand_no_reader(rw):
    """The writer's handoff: its first grant's response is lost (it reads the lock item: granted
    by me - wake it); its second reader's wake-up is lost (the grant stands; that reader finds it
    at its park's timeout and claims it)."""
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = new_key()
    writer = rw.start("WriterHold", {"key": k, "gate": "w", "workMs": 1})
    rw.until(lambda: rw.gate_token(k, "w"))
    readers = [rw.start("Reader", {"key": k, "workMs": 1}) for _ in range(2)]
    rw.until(lambda: rw.parked(k) == ["read", "read"])
    lost_wake = Fault("SendTaskSuccess", "ServiceUnavailable", service="stepfunctions",
                      when=lambda params: "granted" in params.get("output", ""))
    with dynamodb_faults(_lost(sp.GRANT_READ), lost_wake) as log:
        rw.open(k, "w")
        results = rw.wait([writer, *readers])
    assert log.injected == 2
    assert [r.status for r in results] == ["SUCCEEDED"] * 3, [r.cause for r in results]
    writer_states = entered_states(results[0])
    assert "Lock.Release.Recheck" in writer_states
    assert sum(any(e["type"] == "TaskTimedOut" for e in r.history) for r in results[1:]) >= 1
    assert {probe_of(r)["fence"] for r in results[1:]} == {probe_of(results[0])["fence"]}
    assert rw.probe(k).get("violations", 0) == 0 and rw.free(k)


def test_a_ticket_whose_waiter_never_parked_is_marked_and_skipped(rw):
    """A reader's ENQUEUE response is lost: its retry takes another ticket, and the first is a
    hole no row will ever fill. The writer's release stops at it; the reader, parked behind it,
    runs the handoff itself at its park's timeout: marks the hole, skips it once the mark is a
    park timeout old, and reaches its own row."""
    from locked_workflow.testing.faults import dynamodb_faults

    k = new_key()
    writer = rw.start("WriterHold", {"key": k, "gate": "w", "workMs": 1})
    rw.until(lambda: rw.gate_token(k, "w"))
    with dynamodb_faults(_lost(sp.ENQUEUE_READ)) as log:
        reader = rw.start("Reader", {"key": k, "workMs": 1})
        rw.until(lambda: rw.parked(k) == ["read"])
    assert log.injected == 1
    served, tickets = fp.counters(rw.lock(k))
    assert tickets == served + 2  # the hole, then the reader's ticket
    rw.open(k, "w")
    w, r = rw.wait([writer, reader])
    assert (w.status, r.status) == ("SUCCEEDED", "SUCCEEDED"), r.cause
    states = entered_states(r)
    assert "Lock.Help.Mark" in states and "Lock.Help.Skip" in states and "Lock.Admit" in states
    assert_park_rounds_fit_the_budget(r, "ReaderProbe")  # rounds that ran the handoff for a hole
    assert probe_of(r)["fence"] == probe_of(w)["fence"] and rw.free(k)


def test_a_mix_of_readers_and_writers_keeps_every_invariant(rw):
    k, rng = new_key(), random.Random(18)
    kinds = ["Writer" if i % 5 == 0 else "Reader" for i in range(20)]
    rng.shuffle(kinds)
    results = rw.wait([rw.start(kind, {"key": k, "workMs": 150}) for kind in kinds])
    assert [r.status for r in results] == ["SUCCEEDED"] * len(kinds), [(r.status, r.error, r.cause) for r in results
                                                                      if r.status != "SUCCEEDED"]
    probe = rw.probe(k)
    writers = kinds.count("Writer")
    assert probe.get("violations", 0) == 0  # no writer with anyone, no reader with a writer
    assert probe["counter"] == probe["accepted"] == writers  # no lost update
    assert probe["fences"] == sorted(set(probe["fences"])) and len(probe["fences"]) == writers  # strictly up
    assert probe.get("staleReads", 0) == 0  # every reader read the fence of the last writer
    assert max(probe["readersSeen"]) > 1  # readers were inside together
    assert rw.free(k)


def test_the_same_mix_without_the_lock_overlaps(rw):
    """The negative control: the probe does catch readers beside writers. (How each unlocked
    run ends is no part of it: ten probes at once on a loaded machine may outlast the probe
    function's timeout, and the run fails with it - after its entry was counted.)"""
    k = new_key()
    kinds = ["UnlockedWriter" if i % 2 else "UnlockedReader" for i in range(10)]
    rw.wait([rw.start(kind, {"key": k, "workMs": 1500}) for kind in kinds])
    assert rw.probe(k).get("violations", 0) > 0


@pytest.mark.parametrize("outer, inner", [("shared", "exclusive"), ("shared", "shared"), ("exclusive", "shared"),
                                          ("exclusive", "exclusive"), ("mutex", "exclusive")])
def test_a_read_write_section_nested_on_the_same_key_is_refused_at_synth(outer, inner):
    """Not re-entrant: a nested hold on the key its enclosing section holds would wait for that
    very section (a writer for its own reader or writer; a reader for its own writer, or behind
    a writer queued meanwhile) until max_wait. The same key expression, table and namespace is
    refused; another key is allowed (the negative control)."""
    import aws_cdk as cdk
    from aws_cdk import aws_stepfunctions as sfn

    from locked_workflow import Lock, LockedSection, LockedWorkflow, LockTable

    def synth(inner_key: str) -> None:
        stack = cdk.Stack(cdk.App())
        table = LockTable(stack, "T").table
        nested = LockedSection(stack, "Inner", lock=getattr(Lock, inner)(inner_key), table=table, key_namespace="rw",
                               lock_variable="inner", lease=cdk.Duration.minutes(10),
                               protected=sfn.Pass(stack, "Work"))
        LockedWorkflow(stack, "Outer", lock=getattr(Lock, outer)("{% $states.input.key %}"), protected=nested,
                       table=table, key_namespace="rw")
        cdk.assertions.Template.from_stack(stack)

    synth("{% $states.input.other %}")  # another key: an ordinary nested lock
    with pytest.raises((ValueError, RuntimeError), match=rf"`lock` must not be Lock.{inner} on the key .* holds .*got: .*Inner"):
        synth("{% $states.input.key %}")


# -- synth: the states, their IAM and the settings ---------------------------------------------


@pytest.fixture(scope="module")
def template(shared_synth):
    from aws_cdk.assertions import Template

    return Template.from_json(shared_synth.template)


def _definition(template, prefix: str) -> dict:
    import json

    from aws_cdk.assertions import Capture, Match

    body = Capture()
    template.has_resource_properties("AWS::StepFunctions::StateMachine", Match.object_like({
        "StateMachineName": Match.string_like_regexp(f"^Shared-{prefix}-"), "DefinitionString": body}))
    parts = body.as_object()["Fn::Join"][1]
    return json.loads("".join(x if isinstance(x, str) else "TABLE" for x in parts))


def _states(definition: dict) -> dict:
    """Every state of a definition, nested ones included, by name."""
    out = {}
    for name, state in definition["States"].items():
        out[name] = state
        for branch in state.get("Branches", []):
            out.update(_states(branch))
    return out


def test_a_waiter_parks_in_one_transaction_with_the_protocols_expressions(template):
    states = _states(_definition(template, "Reader"))
    park = states["Lock.Park"]
    assert park["Resource"].endswith(":states:::aws-sdk:dynamodb:transactWriteItems.waitForTaskToken")
    check, update = park["Arguments"]["TransactItems"]
    assert check["ConditionCheck"]["ConditionExpression"] == sp.PARK_UNLESS[sp.READ].condition
    assert update["Update"]["ConditionExpression"] == sp.PARK.condition
    assert states["Lock.Acquire"]["Arguments"]["ConditionExpression"] == sp.FAST_READ.condition
    writer = _states(_definition(template, "Writer"))
    assert writer["Lock.Acquire"]["Arguments"]["ConditionExpression"] == sp.FAST_WRITE.condition
    assert writer["Lock.Park"]["Arguments"]["TransactItems"][0]["ConditionCheck"]["ConditionExpression"] == \
        sp.PARK_UNLESS[sp.WRITE].condition
    # every DynamoDB write of the lock is one of the protocol's (a writer's redrive retire: the mutex's)
    spelled = {w.condition for w in [*sp.LOCK_WRITES.values(), *sp.ROW_WRITES.values(), *sp.PARK_UNLESS.values(),
                                     *sp.PRESENCE_WRITES.values(), p.RETIRE]}
    held = {**_states(_definition_of(template, "CancelledReaderStateMachine")),
            **_states(_definition_of(template, "CancelledWriterStateMachine"))}  # (with their holds' presence)
    for name, state in {**states, **writer, **held}.items():
        arguments = state.get("Arguments")
        condition = arguments.get("ConditionExpression") if isinstance(arguments, dict) else None
        if condition and name.startswith(("Lock.", "CancelledReader.", "CancelledWriter.")):
            assert condition in spelled, name


def test_every_dynamodb_task_of_the_lock_retries_a_transaction_conflict(template):
    """TC: DynamoDB refuses a write on an item an ongoing transaction touches (a waiter's park
    checks the lock item in one) with TransactionConflictException: every DynamoDB task of the
    lock tries again - a Retry, or a Catch to the state that retries or rechecks it (never
    only States.ALL, which gives up)."""
    conflicts = {f"DynamoDB.{p.TRANSACTION_CONFLICT}", f"DynamoDb.{p.TRANSACTION_CONFLICT}"}
    seen = 0
    for machine in ("Reader", "Writer"):
        for name, state in _states(_definition(template, machine)).items():
            if not name.startswith("Lock.") or state["Type"] != "Task" or ":dynamodb:" not in state["Resource"]:
                continue
            handled = {e for r in state.get("Retry", []) + state.get("Catch", []) for e in r["ErrorEquals"]}
            assert handled & conflicts, f"{machine}: {name} ({state['Resource']}) gives up on a conflict"
            seen += 1
    assert seen > 40


def test_every_lock_state_goes_on_to_another_state(template):
    """No lock state ends its branch by itself (a path that ended there would skip the work, or
    leave the lock held): only the work's own states, Succeed and Fail end."""
    for machine in ("Reader", "Writer"):
        for name, state in _states(_definition(template, machine)).items():
            if name.startswith("Lock.") and state["Type"] not in ("Succeed", "Fail", "Choice"):
                assert "Next" in state and not state.get("End"), f"{machine}: {name}"
            if name.startswith("Lock.") and state["Type"] == "Choice":
                assert "Default" in state, f"{machine}: {name}"  # (no States.NoChoiceMatched)


def test_the_park_may_check_the_lock_item_and_no_action_is_a_wildcard(template):
    from aws_cdk.assertions import Match

    template.has_resource_properties("AWS::IAM::Policy", Match.object_like({"PolicyDocument": {"Statement": Match.array_with([
        Match.object_like({"Action": "dynamodb:ConditionCheckItem", "Effect": "Allow"})])}}))
    for policy in template.find_resources("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            assert not any(a == "*" or a.endswith(":*") for a in actions(statement)), statement


def test_the_kinds_are_values_with_their_own_validation():
    import aws_cdk as cdk
    from aws_cdk import aws_stepfunctions as sfn

    from locked_workflow import Lock, LockedWorkflow, LockTable

    a, b = Lock.shared("{% $states.input.k %}"), Lock.shared("{% $states.input.k %}")
    assert a == b and a.kind == "shared" and Lock.exclusive("{% $states.input.k %}").kind == "exclusive"
    with pytest.raises(ValueError, match=r"`park_timeout` must be whole seconds from 1 s to 1 hour, got: 0.5 s"):
        Lock.exclusive("{% $states.input.k %}", park_timeout=cdk.Duration.millis(500))
    stack = cdk.Stack(cdk.App())
    with pytest.raises(ValueError, match=r"`state_machine_type` must be STANDARD with Lock.shared .*got: EXPRESS"):
        LockedWorkflow(stack, "W", lock=a, protected=sfn.Pass(stack, "P"), table=LockTable(stack, "T").table,
                       state_machine_type=sfn.StateMachineType.EXPRESS, timeout=cdk.Duration.minutes(1))


def test_the_fallbacks_liveness_check_describes_executions_it_may_name_only(template):
    """The states (DescribeHolder, then RETIRE or RETIRE_READER - the protocol's) are there with
    the check on, absent with it off; DescribeExecution is granted on executions, never on *."""
    import json

    for machine in ("Reader", "Writer"):
        states = _states(_definition(template, machine))
        assert states["Lock.DescribeHolder"]["Resource"].endswith(":states:::aws-sdk:sfn:describeExecution")
        assert states["Lock.RetireHolder"]["Arguments"]["ConditionExpression"] == p.RETIRE.condition
        assert states["Lock.RetireReader"]["Arguments"]["ConditionExpression"] == sp.RETIRE_READER.condition
    blind = _states(_definition(template, "WriterBlind"))
    assert not {"Lock.DescribeHolder", "Lock.RetireHolder", "Lock.RetireReader"} & set(blind)
    grants = [s for policy in template.find_resources("AWS::IAM::Policy").values()
              for s in policy["Properties"]["PolicyDocument"]["Statement"] if "states:DescribeExecution" in s["Action"]]
    assert grants
    for statement in grants:
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        assert statement["Action"] == "states:DescribeExecution"
        assert all(":execution:" in json.dumps(r) and r != "*" for r in resources), statement


def _definition_of(template, logical_prefix: str) -> dict:
    """The definition of the state machine whose logical ID starts with ``logical_prefix``."""
    import json

    (machine,) = [r for lid, r in template.find_resources("AWS::StepFunctions::StateMachine").items()
                  if lid.startswith(logical_prefix) and not lid.startswith(logical_prefix + "Blind")]
    parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    return json.loads("".join(x if isinstance(x, str) else "TABLE" for x in parts))


def test_the_holds_presence_and_the_probe_use_the_protocols_writes(template):
    """A section's hold registers its token on its own row (PRESENT_ROW, ``.waitForTaskToken``),
    departs with DEPART_ROW and deletes the row after; the waiter's fallback reads the row,
    heartbeats the token and retires in one transaction (GONE_ROW beside RETIRE_GONE_*). With
    ``detect_cancellation=False`` the hold has none of it. IAM: the token calls on ``*`` (task
    tokens cannot be scoped), the row's DeleteItem on the lock table only."""
    for mode in ("Reader", "Writer"):
        states, n = _states(_definition_of(template, f"Cancelled{mode}StateMachine")), f"Cancelled{mode}."
        presence = states[n + "Presence"]
        assert presence["Resource"].endswith(":states:::aws-sdk:dynamodb:updateItem.waitForTaskToken")
        assert presence["Arguments"]["ConditionExpression"] == sp.PRESENT_ROW.condition
        assert sp.PRESENCE_ROW_MARK in presence["Arguments"]["Key"]["pk"]["S"]
        assert states[n + "Depart"]["Arguments"]["ConditionExpression"] == sp.DEPART_ROW.condition
        assert states[n + "PresenceUnsure"]["Arguments"]["ConditionExpression"] == sp.DEPART_ROW.condition
        assert sp.PRESENCE_ROW_MARK in states[n + "Forget"]["Arguments"]["Key"]["pk"]["S"]
        assert sp.PRESENCE_ROW_MARK in states[n + "ForgetAfterError"]["Arguments"]["Key"]["pk"]["S"]
        blind = _states(_definition_of(template, f"Cancelled{mode}BlindStateMachine"))
        assert f"Cancelled{mode}Blind.Acquire" in blind
        assert not {f"Cancelled{mode}Blind.{x}" for x in ("Presence", "Depart", "Forget")} & set(blind)
    for machine in ("Reader", "Writer", "WriterBlind"):
        states = _states(_definition(template, machine))
        if machine == "WriterBlind":  # no liveness check: no probe either
            assert not {"Lock.ReadPresence", "Lock.ProbeHolder", "Lock.AbandonReader"} & set(states)
            continue
        assert sp.PRESENCE_ROW_MARK in states["Lock.ReadPresence"]["Arguments"]["Key"]["pk"]["S"]
        assert states["Lock.ProbeHolder"]["Resource"].endswith(":states:::aws-sdk:sfn:sendTaskHeartbeat")
        catches = states["Lock.ProbeHolder"]["Catch"]
        assert catches[0]["ErrorEquals"] == [p.PRESENCE_GONE] and catches[0]["Next"] == "Lock.DescribeHolder"
        for name, write in (("Lock.AbandonReader", sp.RETIRE_GONE_READER), ("Lock.AbandonHolder", sp.RETIRE_GONE_WRITER)):
            row, lock = states[name]["Arguments"]["TransactItems"]
            assert states[name]["Resource"].endswith(":states:::aws-sdk:dynamodb:transactWriteItems")
            assert row["Delete"]["ConditionExpression"] == sp.GONE_ROW.condition
            assert lock["Update"]["ConditionExpression"] == write.condition
            assert lock["Update"]["UpdateExpression"] == write.update
    token_actions = {"states:SendTaskHeartbeat", "states:SendTaskSuccess"}
    seen = set()
    for policy in template.find_resources("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            named = set(actions(statement))
            if token_actions & named:
                assert named <= token_actions and statement["Resource"] == "*", statement
                seen |= named
            if "dynamodb:DeleteItem" in named:  # (the lock table, never *)
                resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
                assert resources and "*" not in resources, statement
    assert seen == token_actions


def state_times(arn_history, name: str, event: str = "TaskStateExited") -> list[float]:
    """When the state ``name`` was left (or entered) in a history, epoch ms (service clock)."""
    details = "stateExitedEventDetails" if event.endswith("Exited") else "stateEnteredEventDetails"
    return [e["timestamp"].timestamp() * 1000 for e in arn_history if e["type"] == event and e[details]["name"] == name]


def entered_states_of(rw, arn: str) -> list[str]:
    return [e["stateEnteredEventDetails"]["name"] for e in rw.cloud.history(arn) if "stateEnteredEventDetails" in e]


# ---- the reader cap (shared_protocol.MAX_READERS) -------------------------------------------

#: The longest owner AWS allows: an execution ARN in the longest partition, 80-character state
#: machine and execution names, then ``#`` and a uuid (lock_protocol.NEW_OWNER_EXPRESSION).
LONGEST_ARN = "arn:aws-us-gov:states:us-gov-west-1:123456789012:execution:" + "s" * 80 + ":"


def _aws_sized_owner(i: int) -> str:
    return f"{LONGEST_ARN}{i:0>80}{p.OWNER_SEPARATOR}{uuid.UUID(int=i)}"


def _fill_readers(rw, k: str, owners: list[str], write=sp.FAST_READ) -> None:
    """The entries of ``owners`` written (or, with LEAVE_READ, removed) by the protocol's own
    write, one UpdateItem each, as a reader's enter (leave) writes it; far-future leases."""
    now = int(time.time() * 1000)
    values = {":me": {"S": "-"}, ":stale": {"S": "-"}, ":now": {"N": str(now)}, ":shared": {"S": sp.SHARED},
              ":one": {"N": "1"}, ":minusOne": {"N": "-1"}, ":zero": {"N": "0"}, **sp.MAX_READERS_VALUES,
              ":entry": sp.entry_value(expires_at=str(now + 3_600_000), acquired_at=str(now), grace="3600000")}
    for owner in owners:
        args = sp.arguments(p.namespaced(NAMESPACE, k), write,
                            {n: v for n, v in values.items() if n in write.value_names()}, reader=owner)
        rw.cloud.dynamodb.update_item(TableName=rw.table("LocksTable"), **args)


def test_a_reader_past_the_reader_cap_is_refused_before_it_writes_and_a_writer_still_works(rw, record_property):
    """H1: the lock item grows with its readers; past a size, every state returning it (a
    reader's FAST_READ, a writer's ticket: ``ALL_NEW``) failed ``States.DataLimitExceeded`` -
    uncatchable - after its write landed. At ``MAX_READERS`` readers a workflow reader and a
    client reader are refused ``Lock.TooManyReaders``, the item unchanged; a writer queues,
    parks and holds once the readers left. The negative control: one below the cap, a reader
    enters (and its ALL_NEW answer, the item at the cap, fits)."""
    from locked_workflow.constructs_lib.lock_client import LockClient
    from locked_workflow.constructs_lib.shared_client import TooManyReaders

    k = new_key()
    fake = [_aws_sized_owner(i) for i in range(sp.MAX_READERS - 1)]
    _fill_readers(rw, k, fake)
    # the negative control: one below the cap, a workflow reader enters (its gate: the cap's last)
    holder = rw.start("ReaderHold", {"key": k, "gate": "r0", "workMs": 1})
    rw.until(lambda: rw.gate_token(k, "r0"))
    at_cap = rw.lock(k)
    assert int(at_cap[sp.READERS]["N"]) == len(sp.readers_of(at_cap)) == sp.MAX_READERS
    entry_json = len(json.dumps({sp.reader_attribute(fake[0]): at_cap[sp.reader_attribute(fake[0])]},
                                separators=(",", ":"))) - 2
    item_json = len(json.dumps(at_cap, separators=(",", ":")))
    record_property("entry_json_bytes", entry_json)
    record_property("item_json_bytes_at_cap", item_json)
    print(f"an AWS-sized reader entry: {entry_json} bytes of JSON; the item at the cap: {item_json} bytes")
    assert item_json < 0.3 * 262_144, item_json  # the documented headroom

    # past the cap: a workflow reader and a client reader refused, typed, nothing written
    refused = rw.wait([rw.start("Reader", {"key": k, "workMs": 1})])[0]
    assert (refused.status, refused.error) == ("FAILED", p.ERROR_TOO_MANY_READERS), (refused.error, refused.cause)
    assert "ReaderProbe" not in entered_states(refused)
    client = LockClient(rw.table("LocksTable"), namespace=NAMESPACE, read_write=True, dynamodb=rw.cloud.dynamodb,
                        stepfunctions=rw.cloud.stepfunctions)
    with pytest.raises(TooManyReaders) as raised:
        client.acquire(k, shared=True, wait=5)
    assert raised.value.error == p.ERROR_TOO_MANY_READERS
    assert rw.lock(k) == at_cap

    # a writer: its ticket's ALL_NEW (the item at the cap) fits; it parks, and holds once the readers left
    writer = rw.start("Writer", {"key": k, "workMs": 1})
    rw.until(lambda: rw.parked(k) == ["write"])
    _fill_readers(rw, k, fake, write=sp.LEAVE_READ)
    rw.open(k, "r0")  # the last reader's leave hands the key to the writer
    done = rw.wait([holder, writer])
    assert [r.status for r in done] == ["SUCCEEDED", "SUCCEEDED"], [(r.error, r.cause) for r in done]
    assert rw.free(k) and rw.rows(k) == []


def test_a_queued_reader_at_the_head_of_a_key_at_the_reader_cap_gives_up_its_place_typed(rw):
    """A reader queued while the key had room, at the head once it has none (readers admitted
    meanwhile): its GRANT_READ is refused by the cap, so it leaves its row and fails
    ``Lock.TooManyReaders`` - never a loop of refused grants, never an entry past the cap."""
    k = new_key()
    stored = p.namespaced(NAMESPACE, k)
    fake = [_aws_sized_owner(i) for i in range(sp.MAX_READERS)]
    _fill_readers(rw, k, fake[:-1])
    writer = rw.start("Writer", {"key": k, "workMs": 1})  # ticket 1, held back by the readers
    rw.until(lambda: rw.parked(k) == ["write"])
    reader = rw.start("Reader", {"key": k, "workMs": 1})  # ticket 2: room for one more reader
    rw.until(lambda: rw.parked(k) == ["write", "read"])
    # a reader admitted meanwhile (its entry as an enter writes it): the key is at the cap
    _fill_readers(rw, k, fake[-1:], write=p.LockWrite(update=sp.FAST_READ.update, condition=""))
    # the writer goes (stopped; its row marked left, as the janitor's DEQUEUE does)
    rw.cloud.stepfunctions.stop_execution(executionArn=writer)
    row = rw.cloud.dynamodb.get_item(TableName=rw.table("LocksTable"), Key={"pk": {"S": fp.row_key(stored, 1)}},
                                     ConsistentRead=True)["Item"]
    args = fp.arguments(fp.row_key(stored, 1), sp.LEAVE, {":me": row[p.OWNER], ":one": {"N": "1"}})
    with contextlib.suppress(rw.cloud.dynamodb.exceptions.ConditionalCheckFailedException):
        rw.cloud.dynamodb.update_item(TableName=rw.table("LocksTable"), **args)
    at_cap = rw.lock(k)
    result = rw.wait([reader])[0]
    assert (result.status, result.error) == ("FAILED", p.ERROR_TOO_MANY_READERS), (result.error, result.cause)
    assert "Lock.TooManyQueued" in entered_states(result) and "ReaderProbe" not in entered_states(result)
    after = rw.lock(k)
    assert sp.readers_of(after) == sp.readers_of(at_cap) and int(after[sp.READERS]["N"]) == sp.MAX_READERS
    assert rw.parked(k) == []  # its place given up


def test_a_reader_stopped_after_its_leave_applied_ends_released_when_redriven(rw):
    """Fault matrix ``shared:Lock.Release`` x ``redrive``: a reader's leave (``LEAVE_READ``)
    applied, the reader was stopped right after, the last reader left and a writer took the key;
    then the stopped reader was redriven. AWS reruns the step it stopped in - the leave - and
    nothing before it (https://docs.aws.amazon.com/step-functions/latest/dg/redrive-executions.html).
    Its entry is gone, but nobody could have reaped it yet (a stopped holder is freed only a stop
    grace after its end): its own leave took it, so it ends released, not ``Lock.Lost``."""
    from locked_workflow.testing.faults import Fault, calling_state, dynamodb_faults

    k = new_key()
    readers = [rw.start("ReaderHold", {"key": k, "gate": gate, "workMs": 1}) for gate in ("r1", "r2")]
    rw.until(lambda: rw.gate_token(k, "r1") and rw.gate_token(k, "r2"))  # both read

    def leave_of_the_first(params: dict) -> bool:
        state = calling_state()
        return state is not None and state.state_name == "Lock.Release" and state.execution_arn == readers[0]

    stop = Fault("UpdateItem", "InternalServerError", after_call=True, when=leave_of_the_first,
                 then=lambda: rw.cloud.stop_execution(readers[0]))
    with dynamodb_faults(stop) as log:
        rw.open(k, "r1")
        assert rw.cloud.wait_for(readers[0], timeout=60).status == "ABORTED"
    assert log.injected == 1
    writer = rw.start("Writer", {"key": k, "workMs": 3000})
    rw.until(lambda: rw.parked(k) == ["write"])
    rw.open(k, "r2")  # the last reader leaves and hands the key to the writer
    rw.until(lambda: rw.lock(k).get(p.OWNER, {}).get("S", "").startswith(writer + "#"))
    rw.cloud.stepfunctions.redrive_execution(executionArn=readers[0])
    time.sleep(0.5)  # (RUNNING again at once; its end comes later)
    redriven, second, w = rw.wait([readers[0], readers[1], writer])
    assert (redriven.status, redriven.error) == ("SUCCEEDED", None), (redriven.error, redriven.cause)
    assert (second.status, w.status) == ("SUCCEEDED", "SUCCEEDED"), (second.cause, w.cause)
    redrive = next(i for i, e in enumerate(redriven.history) if e["type"] == "ExecutionRedriven")
    resumed = [e["stateEnteredEventDetails"]["name"] for e in redriven.history[redrive:] if "stateEnteredEventDetails" in e]
    assert "Lock.Acquire" not in resumed and "ReaderHoldProbe" not in resumed, resumed  # nothing ran again
    probe = rw.probe(k)
    assert probe.get("violations", 0) == 0 and probe["counter"] == probe["accepted"]
    rw.until(lambda: rw.free(k))
