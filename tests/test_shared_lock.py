"""The read/write lock (``Lock.shared`` / ``Lock.exclusive``) on both DynamoDB backends.

Invariants, from the probe inside the protected work (it counts readers and writers inside at
every entry): readers are inside together, a writer is always alone, no writer's update is
lost, readers read the fence of the last writer, arrivals are served in ticket order (a writer
queued before a reader goes first; a writer's release admits every reader queued behind it at
once). The same load with no lock is the negative control. Then recovery: a stopped reader
(its lease, no janitor) and a stopped writer (the janitor) cost a bounded delay.

Holders that must stay inside until the test says park on a *gate* (a task token the test
completes): every wait is on a condition, never on time.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
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
        entered = {k: _state_times(results[k].history, "MutexProbe", "TaskStateEntered")[0] for k in stop_ms}
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
    """The negative control: the probe does catch readers beside writers."""
    k = new_key()
    kinds = ["UnlockedWriter" if i % 2 else "UnlockedReader" for i in range(10)]
    results = rw.wait([rw.start(kind, {"key": k, "workMs": 1500}) for kind in kinds])
    assert [r.status for r in results] == ["SUCCEEDED"] * len(kinds)
    assert rw.probe(k).get("violations", 0) > 0


def _holder(item: dict) -> tuple[str, int, int, int]:
    """(owner, acquiredAt, expiresAt, grace) of the one hold on a lock item: its reader entry, or
    its writer."""
    readers = sp.readers_of(item)
    owner, hold = next(iter(readers.items())) if readers else (item[p.OWNER]["S"], item)
    assert len(readers) <= 1, readers
    return owner, int(hold[p.ACQUIRED_AT]["N"]), int(hold[p.EXPIRES_AT]["N"]), int(hold[p.GRACE]["N"])


def test_a_stopped_reader_is_freed_by_its_lease_and_cancelled_branches_after_their_stop_grace(rw, record_property):
    """A stopped reader with no janitor (a 12-s lease): only its lease ends its hold, and the
    writer at the head reaps its entry (both backends).

    A reader and a writer hold (10-minute leases) in one branch of a Parallel whose other
    branch fails: Step Functions cancels the holding branch (no Catch, no event) and the
    execution runs on. A writer waiting behind each probes the hold's presence token, finds it
    closed and its execution running, retires that acquisition from then - held for its stop
    grace - and enters. The negative control, the same holds with ``detect_cancellation=False``
    (no presence row), is still held, its lease untouched, after its waiter's fallback checked
    liveness past the settle time and the grace. (Step Functions behaviour: moto only; the
    presence writes on both backends: ``test_shared_model``.)"""
    stopped = new_key()
    orphan = rw.start("ReaderOrphan", {"key": stopped, "gate": "o", "workMs": 1})
    rw.until(lambda: rw.gate_token(stopped, "o"))
    rw.cloud.stop_execution(orphan)
    assert len(sp.readers_of(rw.lock(stopped))) == 1
    reaper = rw.start("Writer", {"key": stopped, "workMs": 1})
    cases = {(mode, detect): new_key() for mode in ("Reader", "Writer") for detect in (True, False)
             if rw.cloud.backend == "moto"}
    machine = {c: f"Cancelled{c[0]}{'' if c[1] else 'Blind'}" for c in cases}
    parallels = {c: rw.start(machine[c], {"key": k, "gate": "c", "workMs": 1}) for c, k in cases.items()}
    rw.until(lambda: all(rw.gate_token(k, "c") for k in cases.values()))  # holding, inside the work
    holders = {c: _holder(rw.lock(k)) for c, k in cases.items()}

    def row(c) -> dict:
        return rw.presence_row(holders[c][0])

    # the holds with presence registered their token for that acquisition; the others none
    rw.until(lambda: all(p.PRESENCE in row(c) for c in cases if c[1]))
    assert all(int(row(c)[p.PRESENCE_OF]["N"]) == holders[c][1] for c in cases if c[1])
    assert not any(row(c) for c in cases if not c[1])
    waiters = {c: rw.start("Writer", {"key": k, "workMs": 1}) for c, k in cases.items()}
    rw.until(lambda: all(rw.parked(k) == ["write"] for k in cases.values()))
    rw.until(lambda: all(rw.gate_token(k, "sibling") for k in cases.values()))
    for k in cases.values():  # the sibling fails: the holding branch is cancelled
        rw.cloud.stepfunctions.send_task_failure(taskToken=rw.gate_token(k, "sibling"), error="User.Failed",
                                                 cause="the sibling fails")
    cancel_ms = time.time() * 1000
    rw.until(lambda: all(any(e["type"] == "ParallelStateFailed" for e in rw.cloud.history(a))
                         for a in parallels.values()), timeout=60)
    grace_ms = {c: holders[c][3] for c in cases}  # the holds' stop grace (PROBE_GRACE_S)
    assert all(g >= 5000 for g in grace_ms.values())
    # with presence: in after the grace from the probe's retire, minutes before the lease
    for c in [c for c in cases if c[1]]:
        result = rw.cloud.wait_for(waiters[c], timeout=150)
        assert result.status == "SUCCEEDED", (c, result.cause)
        states = entered_states(result)
        abandon = f"Lock.Abandon{'Reader' if c[0] == 'Reader' else 'Holder'}"
        assert {"Lock.ReadPresence", "Lock.ProbeHolder", "Lock.DescribeHolder", abandon} <= set(states), states
        retired_ms = _state_times(result.history, abandon, "TaskStateEntered")[-1]
        entered_ms = _state_times(result.history, "Lock.Admit")[-1]
        lease_ms = holders[c][2]
        assert retired_ms + grace_ms[c] <= entered_ms < lease_ms - 120_000, (c, retired_ms, entered_ms, lease_ms)
        assert rw.cloud.status(parallels[c]) == "RUNNING"  # the execution ran on: only its branch was cancelled
        assert probe_of(result)["insideAtEntry"] == 1 and rw.free(cases[c]) and not row(c)  # (the row went too)
        assert_park_rounds_fit_the_budget(result, "WriterProbe")  # rounds with the probe and its retire
        record_property(f"cancelled_{c[0].lower()}_recovered_after_cancel_s", round((entered_ms - cancel_ms) / 1000, 1))
        record_property(f"cancelled_{c[0].lower()}_lease_after_cancel_s", round((lease_ms - cancel_ms) / 1000, 1))
    # without: rounds of the fallback well past the settle time and the grace, and still held
    blind = [c for c in cases if not c[1]]

    def inspected_after(c, state: str) -> int:
        after = cancel_ms + p.PRESENCE_SETTLE_MS + grace_ms[c]
        return sum(t > after for t in _state_times(rw.cloud.history(waiters[c]), state, "TaskStateEntered"))

    rw.until(lambda: all(inspected_after(c, "Lock.Inspect") >= 2 and inspected_after(c, "Lock.DescribeHolder") >= 1
                         for c in blind), timeout=120)
    for c in blind:
        assert _holder(rw.lock(cases[c])) == holders[c]  # that acquisition, its lease untouched
        assert rw.cloud.status(waiters[c]) == "RUNNING" and rw.parked(cases[c]) == ["write"]
        states = entered_states_of(rw, waiters[c])
        assert "Lock.ReadPresence" in states and "Lock.ProbeHolder" not in states  # it looked: no row
        rw.cloud.stop_execution(waiters[c])
    for arn in parallels.values():
        rw.cloud.stop_execution(arn)
    # the stopped reader: its lease, then the reap
    result = rw.wait([reaper])[0]
    assert result.status == "SUCCEEDED", result.cause
    assert "Lock.ReapLast" in entered_states(result)  # the writer at the head reaped the entry
    assert rw.probe(stopped).get("violations", 0) == 0 and rw.free(stopped)


def test_a_stopped_reader_is_recovered_by_the_janitor_after_its_stop_grace(rw):
    """Its lease is the machine's timeout + 5 min: only the janitor's RETIRE_READER (then a
    waiter's reap) can free the key within the test's deadline."""
    k = new_key()
    reader = rw.start("ReaderHold", {"key": k, "gate": "r", "workMs": 1})
    rw.until(lambda: rw.gate_token(k, "r"))
    (owner, entry), = sp.readers_of(rw.lock(k)).items()
    rw.cloud.stop_execution(reader)
    rw.until(lambda: int(sp.readers_of(rw.lock(k)).get(owner, entry)[p.EXPIRES_AT]["N"])
             < int(entry[p.EXPIRES_AT]["N"]))  # retired: its entry now ends a stop grace after the stop
    result = rw.wait([rw.start("Writer", {"key": k, "workMs": 1})])[0]
    assert result.status == "SUCCEEDED", result.cause
    assert "Lock.ReapLast" in entered_states(result) and rw.free(k)


def test_a_stopped_writer_woken_by_a_handoff_is_recovered_by_the_janitor(rw):
    """It holds by its CLAIM_WRITE (no ACQUIRE in its history): the janitor finds that claim."""
    k = new_key()
    first, second = writer_handed_on(rw, k, "w1")  # woken by the handoff, claimed, inside
    rw.cloud.stop_execution(second)
    stopped = rw.cloud.wait_for(second, timeout=60)
    assert stopped.status == "ABORTED" and "Lock.Claim" in entered_states(stopped)
    assert "Lock.Acquire" in entered_states(stopped) and "Lock.Admit" not in entered_states(stopped)
    assert rw.wait([first])[0].status == "SUCCEEDED"
    result = rw.wait([rw.start("Reader", {"key": k, "workMs": 1})])[0]
    assert result.status == "SUCCEEDED", result.cause
    assert probe_of(result)["fence"] == int(rw.lock(k)[p.FENCE]["N"]) and rw.free(k)


def _state_times(arn_history, name: str, event: str = "TaskStateExited") -> list[float]:
    """When the state ``name`` was left (or entered) in a history, epoch ms (service clock)."""
    details = "stateExitedEventDetails" if event.endswith("Exited") else "stateEnteredEventDetails"
    return [e["timestamp"].timestamp() * 1000 for e in arn_history if e["type"] == event and e[details]["name"] == name]


def test_the_liveness_check_recovers_a_stopped_reader_and_writer_long_before_their_leases(rw, record_property):
    """The janitor's events are dropped: only a waiter's fallback can learn that the holder's
    execution ended. With the liveness check (every 2nd round of the fallback) the waiting writer
    describes the holder - the writer holder, or the reader entry - retires it (held for its stop
    grace from its end) and enters; its lease (the machine's timeout + 5 min) is minutes away.
    The negative control, a waiter with ``liveness_check_every=0``, finds both still held after
    rounds of its fallback past the stop grace, their leases untouched."""
    keys = {(holder, check): new_key() for holder in ("Reader", "Writer") for check in (True, False)}
    holders = {k: rw.start(f"{k[0]}Hold", {"key": key, "gate": "h", "workMs": 1}) for k, key in keys.items()}
    rw.until(lambda: all(rw.gate_token(key, "h") for key in keys.values()))
    held = {k: rw.lock(key) for k, key in keys.items()}
    leases = {k: (int(next(iter(sp.readers_of(item).values()))[p.EXPIRES_AT]["N"]) if k[0] == "Reader"
                  else int(item[p.EXPIRES_AT]["N"])) for k, item in held.items()}
    waiters = {k: rw.start("Writer" if k[1] else "WriterBlind", {"key": key, "workMs": 1}) for k, key in keys.items()}
    rw.until(lambda: all(rw.parked(key) == ["write"] for key in keys.values()))
    stopped = set(holders.values())
    rw.cloud.events.status_event_filter = lambda detail: detail["executionArn"] not in stopped  # no janitor
    try:
        for arn in holders.values():
            rw.cloud.stop_execution(arn)
        ends = {k: rw.cloud.wait_for(arn, timeout=60) for k, arn in holders.items()}
        assert all(r.status == "ABORTED" for r in ends.values())
        stop_ms = {k: rw.cloud.stepfunctions.describe_execution(executionArn=arn)["stopDate"].timestamp() * 1000
                   for k, arn in holders.items()}
        grace_ms = int(held[("Writer", True)][p.GRACE]["N"])
        # with the check: in, after the stop grace and minutes before the lease
        for k in [k for k in keys if k[1]]:
            result = rw.cloud.wait_for(waiters[k], timeout=120)
            assert result.status == "SUCCEEDED", (k, result.cause)
            states = entered_states(result)
            assert "Lock.DescribeHolder" in states and f"Lock.Retire{'Reader' if k[0] == 'Reader' else 'Holder'}" in states
            entered_ms = _state_times(result.history, "Lock.Admit")[-1]
            assert stop_ms[k] + grace_ms <= entered_ms < leases[k] - 120_000, (k, stop_ms[k], entered_ms, leases[k])
            record_property(f"{k[0].lower()}_recovered_after_stop_s", round((entered_ms - stop_ms[k]) / 1000, 1))
            record_property(f"{k[0].lower()}_lease_after_stop_s", round((leases[k] - stop_ms[k]) / 1000, 1))
            assert probe_of(result)["insideAtEntry"] == 1 and rw.free(keys[k])
            assert_park_rounds_fit_the_budget(result, "WriterProbe")  # rounds with the liveness check
        # without: rounds of the fallback past the grace, and still held, the lease untouched
        blind = [k for k in keys if not k[1]]

        def inspected_after_grace(k) -> int:
            after = stop_ms[k] + grace_ms
            return sum(t > after for t in _state_times(rw.cloud.history(waiters[k]), "Lock.Inspect", "TaskStateEntered"))

        rw.until(lambda: all(inspected_after_grace(k) >= 3 for k in blind), timeout=120)
        for k in blind:
            item = rw.lock(keys[k])
            if k[0] == "Reader":
                (entry,) = sp.readers_of(item).values()
                assert int(entry[p.EXPIRES_AT]["N"]) == leases[k]
            else:
                assert item[p.OWNER] == held[k][p.OWNER] and int(item[p.EXPIRES_AT]["N"]) == leases[k]
            assert rw.cloud.status(waiters[k]) == "RUNNING" and rw.parked(keys[k]) == ["write"]
            assert "Lock.DescribeHolder" not in entered_states_of(rw, waiters[k])
            rw.cloud.stop_execution(waiters[k])
    finally:
        rw.cloud.events.status_event_filter = None
    assert stopped <= {d["executionArn"] for d in rw.cloud.events.dropped_status_events}


def entered_states_of(rw, arn: str) -> list[str]:
    return [e["stateEnteredEventDetails"]["name"] for e in rw.cloud.history(arn) if "stateEnteredEventDetails" in e]


def test_a_redriven_reader_holds_again_before_its_work_resumes(rw):
    """A reader stopped inside its work, retired by the janitor and reaped by a writer that then
    wrote, is redriven: its work's task refuses to resume (Lock.Resumed), the section retires
    the old entry and takes a new hold - after the writer, reading its fence."""
    if rw.cloud.backend != "moto":
        pytest.skip("the redrive is Step Functions behaviour: one backend suffices")
    k = new_key()
    reader = rw.start("ReaderHold", {"key": k, "gate": "r", "workMs": 1})
    rw.until(lambda: rw.gate_token(k, "r"))
    first_token = rw.gate_token(k, "r")
    rw.cloud.stop_execution(reader)
    writer = rw.wait([rw.start("Writer", {"key": k, "workMs": 1})])[0]
    assert writer.status == "SUCCEEDED" and not sp.readers_of(rw.lock(k))  # the stopped reader's entry was reaped
    rw.cloud.stepfunctions.redrive_execution(executionArn=reader)
    rw.until(lambda: rw.gate_token(k, "r") not in (None, first_token))  # holding again, at its gate
    (owner,) = sp.readers_of(rw.lock(k))
    rw.open(k, "r")
    redriven = rw.wait([reader])[0]
    assert redriven.status == "SUCCEEDED", (redriven.error, redriven.cause)
    assert "Lock.EntryFailed?" in entered_states(redriven) and "Lock.Retire" in entered_states(redriven)
    assert owner.startswith(reader + "#") and probe_of(redriven)["fence"] == probe_of(writer)["fence"]
    assert rw.probe(k).get("violations", 0) == 0 and rw.free(k)


def test_a_redriven_writer_waits_out_its_own_stopped_hold_and_holds_once(rw):
    """A writer woken by a handoff (its hold: the grant, then its CLAIM_WRITE) is stopped inside
    its work and redriven at once, while its stopped work may still run: the redrive resumes
    the work's task, which refuses (Lock.Resumed); the section retires the old hold (held for
    its stop grace from now) and takes a new one only after that grace - one hold, its fence one
    up from the first. A reader that comes meanwhile waits for it; the key ends free."""
    if rw.cloud.backend != "moto":
        pytest.skip("the redrive is Step Functions behaviour: one backend suffices")
    k = new_key()
    first, writer = writer_handed_on(rw, k, "w")  # granted by the handoff, claimed, inside its work
    assert rw.wait([first])[0].status == "SUCCEEDED"
    stopped_token, held = rw.gate_token(k, "w"), rw.lock(k)
    first_owner, first_fence = held[p.OWNER]["S"], int(held[p.FENCE]["N"])
    assert first_owner.startswith(writer + "#") and "Lock.Claim" in entered_states_of(rw, writer)
    rw.cloud.stop_execution(writer)
    assert rw.cloud.wait_for(writer, timeout=60).status == "ABORTED"
    stop_ms = rw.cloud.stepfunctions.describe_execution(executionArn=writer)["stopDate"].timestamp() * 1000
    rw.cloud.stepfunctions.redrive_execution(executionArn=writer)
    rw.until(lambda: rw.gate_token(k, "w") not in (None, stopped_token), timeout=120)  # holding again
    again = rw.lock(k)
    assert again[p.OWNER]["S"].startswith(writer + "#") and again[p.OWNER]["S"] != first_owner
    assert int(again[p.ACQUIRED_AT]["N"]) >= stop_ms + int(held[p.GRACE]["N"])  # after its own stopped hold's grace
    assert int(again[p.FENCE]["N"]) == first_fence + 1  # one new hold, one fence up
    reader = rw.start("Reader", {"key": k, "workMs": 1})
    rw.until(lambda: rw.parked(k) == ["read"])
    assert rw.probe(k)["entries"] == 1  # (the first writer's) nobody is inside beside the redriven writer
    rw.open(k, "w")
    redriven, r = rw.wait([writer, reader])
    assert (redriven.status, r.status) == ("SUCCEEDED", "SUCCEEDED"), (redriven.cause, r.cause)
    states = entered_states(redriven)
    assert "Lock.EntryFailed?" in states and "Lock.Retire" in states
    assert probe_of(redriven)["fence"] == probe_of(r)["fence"] == first_fence + 1
    assert probe_of(redriven)["insideAtEntry"] == probe_of(r)["insideAtEntry"] == 1
    probe = rw.probe(k)
    assert probe.get("violations", 0) == 0 and probe["counter"] == probe["accepted"] == 2
    assert probe["fences"] == [first_fence - 1, first_fence + 1]  # the stopped hold wrote nothing
    assert probe.get("staleReads", 0) == 0 and rw.free(k) and int(rw.lock(k)[p.FENCE]["N"]) == first_fence + 1


def test_the_janitor_marks_a_stopped_parked_writers_row_left_and_the_handoff_skips_it(rw):
    """A writer stopped while parked (its row: a token that will never answer): the janitor
    finds its park - a TransactWriteItems - in its history and marks the row left. The holder's
    release then skips it and grants the reader behind it at once, instead of granting the dead
    writer (whose wake-up fails) and leaving the reader to wait out the claim window."""
    k = new_key()
    holder = rw.start("WriterHold", {"key": k, "gate": "w0", "workMs": 1})
    rw.until(lambda: rw.gate_token(k, "w0"))
    dead = rw.start("Writer", {"key": k, "workMs": 1})
    rw.until(lambda: rw.parked(k) == ["write"])
    reader = rw.start("Reader", {"key": k, "workMs": 1})
    rw.until(lambda: rw.parked(k) == ["write", "read"])
    served, _ = fp.counters(rw.lock(k))
    row_key = fp.row_key(p.namespaced(NAMESPACE, k), served + 1)
    rw.cloud.stop_execution(dead)
    assert rw.cloud.wait_for(dead, timeout=60).status == "ABORTED"

    def row():
        return rw.cloud.dynamodb.get_item(TableName=rw.table("LocksTable"), Key={"pk": {"S": row_key}},
                                          ConsistentRead=True).get("Item", {})
    rw.until(lambda: fp.LEFT in row())  # the janitor marked it
    assert row()[p.OWNER]["S"].startswith(dead + "#") and fp.TOKEN not in row()
    rw.open(k, "w0")
    h, r = rw.wait([holder, reader])
    assert (h.status, r.status) == ("SUCCEEDED", "SUCCEEDED"), r.cause
    released = entered_states(h)
    assert "Lock.Release.Skip" in released and "Lock.Release.GrantWrite" not in released
    assert "Lock.Release.GrantRead" in released and "Lock.Claim" in entered_states(r)
    assert probe_of(r)["fence"] == probe_of(h)["fence"] and rw.free(k)


def test_the_janitor_finds_an_executions_parks_of_both_queues():
    """One finder for the fair queue's park (an UpdateItem) and the read/write queue's (the
    row's Update in a TransactWriteItems); another table's, or a ConditionCheck's, is not one."""
    me, table = "arn:x:execution:m:a#1", "Locks"
    transact = sp.park_transaction(table, "rw#k", 7, sp.WRITE, {":me": {"S": me}, ":token": {"S": "t"},
                                                               ":lease": {"N": "1"}, ":grace": {"N": "0"}},
                                   {n: {"S": "x"} for n in sp.PARK_UNLESS[sp.WRITE].value_names()})
    fair_park = {"TableName": table, **fp.arguments("!3!f#k", fp.PARK, {
        ":me": {"S": me}, ":token": {"S": "t"}, ":lease": {"N": "1"}, ":grace": {"N": "0"}})}
    tasks = [p.ScheduledTask("transactWriteItems.waitForTaskToken", {"TransactItems": transact}),
             p.ScheduledTask("updateItem", fair_park)]
    assert fp.enqueues_in_history(tasks, table_name=table) == [("!7!rw#k", me), ("!3!f#k", me)]
    assert fp.enqueues_in_history(tasks, table_name="Other") == []


def test_the_janitor_finds_only_an_executions_own_holds():
    me, other, table = "arn:x:execution:m:a#1", "arn:x:execution:m:b#2", "Locks"

    def update(write, *, reader=None, values=None):
        return p.ScheduledTask("updateItem", {"TableName": table, **sp.arguments(
            "rw#k", write, {n: {"S": v} for n, v in (values or {}).items()} | {
                n: {"S": "x"} for n in write.value_names() if n not in (values or {})}, reader=reader)})

    tasks = [update(sp.FAST_READ, reader=me, values={":me": me}),
             update(sp.GRANT_READ, reader=other, values={":me": me}),  # a handoff to another reader
             update(sp.CLAIM_WRITE, values={":me": me})]
    assert sp.holds_in_history(tasks, table_name=table) == [("rw#k", me, sp.READ), ("rw#k", me, sp.WRITE)]
    assert sp.holds_in_history(tasks, table_name="Other") == []


def test_the_janitor_finds_an_executions_presence_rows():
    """Its registrations (a ``.waitForTaskToken`` UpdateItem) and departures (which write the
    row when no registration did), once each; not another table's, nor a lock item's write."""
    table, owner = "Locks", "arn:x:execution:m:a#1"
    row = sp.presence_row_key(owner)

    def update(write, key: str = row, resource: str = "updateItem", in_table: str = table):
        values = {n: {"S": "x"} for n in write.value_names()}
        return p.ScheduledTask(resource, {"TableName": in_table, **sp.arguments(key, write, values, reader=owner)})

    tasks = [update(sp.PRESENT_ROW, resource="updateItem.waitForTaskToken"), update(sp.DEPART_ROW),
             update(sp.DEPART_ROW, key=sp.presence_row_key("arn:x:execution:m:a#2")),
             update(sp.PRESENT_ROW, in_table="Other", resource="updateItem.waitForTaskToken"),
             update(sp.FAST_READ, key="rw#k")]
    assert sp.presence_rows_in_history(tasks, table_name=table) == [row, sp.presence_row_key("arn:x:execution:m:a#2")]
    assert sp.presence_rows_in_history(tasks, table_name="Nothing") == []


def test_the_janitor_forgets_a_presence_row_unless_registered_after_the_end(rw):
    """FORGET_ROW on DynamoDB: a row registered at or before the end goes, and a departed-only
    row (no registration); a redriven hold's row (registered after the end) stays; no row, or a
    second delivery of the event, deletes nothing."""
    from locked_workflow.lambdas.lock_janitor.logic import forget_row
    from locked_workflow.lambdas.lock_janitor.settings import JanitorSettings

    end = 1_700_000_000_000
    rows = {"registered before the end": {p.PRESENCE: {"S": "T"}, p.PRESENCE_OF: {"N": "5"}, p.PRESENCE_AT: {"N": str(end - 1)}},
            "registered at the end": {p.PRESENCE: {"S": "T"}, p.PRESENCE_OF: {"N": "5"}, p.PRESENCE_AT: {"N": str(end)}},
            "departed only": {p.PRESENCE_CLOSED: {"N": "5"}},
            "a redriven hold's": {p.PRESENCE: {"S": "T"}, p.PRESENCE_OF: {"N": "5"}, p.PRESENCE_AT: {"N": str(end + 1)},
                                  p.PRESENCE_CLOSED: {"N": "5"}},
            "no row": None}
    ddb, table, tag = rw.cloud.dynamodb, rw.table("LocksTable"), new_key()

    def row_key(case: str) -> str:
        return sp.presence_row_key(f"{case}#{tag}")

    for case, row in rows.items():
        if row is not None:
            ddb.put_item(TableName=table, Item={"pk": {"S": row_key(case)}, **row})
    settings = JanitorSettings(table_name=table)
    forgotten = {case: forget_row(ddb, settings, row_key(case), end) for case in rows}
    again = {case: forget_row(ddb, settings, row_key(case), end) for case in rows}
    left = {case for case in rows
            if ddb.get_item(TableName=table, Key={"pk": {"S": row_key(case)}}, ConsistentRead=True).get("Item")}
    assert forgotten == {"registered before the end": True, "registered at the end": True, "departed only": True,
                         "a redriven hold's": False, "no row": False}
    assert not any(again.values()) and left == {"a redriven hold's"}


def test_the_janitors_retire_shortens_a_lease_to_the_end_plus_the_grace_and_never_lengthens_it(rw):
    """The janitor reads the lock item and retires that exact acquisition to its end + its stop
    grace only if that is sooner than its lease's end: a holder stopped near its lease's end
    keeps its lease (the protocol's RETIRE, the negative control, would lengthen it). A writer
    (RETIRE_BY) and a reader entry (RETIRE_GONE_READER); not another owner's, not an
    acquisition made after the end, and a duplicate event retires nothing more."""
    from locked_workflow.lambdas.lock_janitor.logic import retire, retire_reader
    from locked_workflow.lambdas.lock_janitor.settings import JanitorSettings

    ddb, table = rw.cloud.dynamodb, rw.table("LocksTable")
    settings, end, grace, me = JanitorSettings(table_name=table), 1_700_000_000_000, 60_000, "arn:x:execution:m:e#1"
    hold = lambda acquired, expires: {p.ACQUIRED_AT: {"N": str(acquired)}, p.EXPIRES_AT: {"N": str(expires)},  # noqa: E731
                                      p.GRACE: {"N": str(grace)}}
    cases = {  # name -> (acquiredAt, expiresAt, owner of the write)
        "sooner": (end - 5_000, end + 600_000, me), "the lease ends first": (end - 5_000, end + 30_000, me),
        "made after the end": (end + 1, end + 600_000, me), "another owner's": (end - 5_000, end + 600_000, "o#2"),
    }
    out = {}
    for reader in (False, True):
        for case, (acquired, expires, owner) in cases.items():
            k = p.namespaced(NAMESPACE, new_key())
            item = ({p.OWNER: {"S": sp.SHARED}, sp.READERS: {"N": "1"}, sp.reader_attribute(owner): {"M": hold(acquired, expires)}}
                    if reader else {p.OWNER: {"S": owner}, **hold(acquired, expires)})
            ddb.put_item(TableName=table, Item={"pk": {"S": k}, **item})
            write = retire_reader if reader else retire
            done = [write(ddb, settings, k, me, end), write(ddb, settings, k, me, end)]  # (a duplicate event)
            after = ddb.get_item(TableName=table, Key={"pk": {"S": k}}, ConsistentRead=True)["Item"]
            entry = sp.readers_of(after)[owner] if reader else after
            out[("reader" if reader else "writer", case)] = (done, int(entry[p.EXPIRES_AT]["N"]) - end)
    for kind in ("writer", "reader"):
        assert out[(kind, "sooner")] == ([True, False], grace)
        assert out[(kind, "the lease ends first")] == ([False, False], 30_000)  # its lease, not end + grace
        assert out[(kind, "made after the end")] == ([False, False], 600_000)
        assert out[(kind, "another owner's")] == ([False, False], 600_000)
    # the negative control: the protocol's RETIRE (the liveness check's) sets end + grace whatever the lease
    k = p.namespaced(NAMESPACE, new_key())
    ddb.put_item(TableName=table, Item={"pk": {"S": k}, p.OWNER: {"S": me}, **hold(end - 5_000, end + 30_000)})
    ddb.update_item(TableName=table, Key={"pk": {"S": k}}, UpdateExpression=p.RETIRE.update, ConditionExpression=p.RETIRE.condition,
                    ExpressionAttributeNames=p.RETIRE.attribute_names(),
                    ExpressionAttributeValues={":owner": {"S": me}, ":endedAt": {"N": str(end)}})
    lengthened = ddb.get_item(TableName=table, Key={"pk": {"S": k}}, ConsistentRead=True)["Item"][p.EXPIRES_AT]["N"]
    assert int(lengthened) - end == grace > 30_000


def test_every_janitor_write_is_tried_again_after_a_transaction_conflict(rw):
    """A janitor write whose item is in a transaction in flight (a waiter's park, a transfer)
    is refused with ``TransactionConflictException`` and nothing is written; botocore does not
    retry it, so the janitor must, like the clients (``client_lease.retry_conflicts``), or the
    ended execution's retire, presence row or queue row stays (fault matrix:
    ``janitor:shared_protocol.DEQUEUE`` x ``conflict``). Each write meets two conflicts, then
    does what it does without them."""
    from locked_workflow.lambdas.lock_janitor.logic import dequeue, forget_row, retire, retire_reader
    from locked_workflow.lambdas.lock_janitor.settings import JanitorSettings
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    ddb, table = rw.cloud.dynamodb, rw.table("LocksTable")
    settings, end, grace, me = JanitorSettings(table_name=table), 1_700_000_000_000, 60_000, "arn:x:execution:m:c#1"
    hold = {p.ACQUIRED_AT: {"N": str(end - 5_000)}, p.EXPIRES_AT: {"N": str(end + 600_000)}, p.GRACE: {"N": str(grace)}}
    writer, reader = p.namespaced(NAMESPACE, new_key()), p.namespaced(NAMESPACE, new_key())
    presence, queue_row = sp.presence_row_key(f"{me}-{new_key()}"), fp.row_key(p.namespaced(NAMESPACE, new_key()), 1)
    items = {writer: {p.OWNER: {"S": me}, **hold},
             reader: {p.OWNER: {"S": sp.SHARED}, sp.READERS: {"N": "1"}, sp.reader_attribute(me): {"M": hold}},
             presence: {p.PRESENCE: {"S": "T"}, p.PRESENCE_OF: {"N": "5"}, p.PRESENCE_AT: {"N": str(end - 1)}},
             queue_row: {p.OWNER: {"S": me}}}
    for key, item in items.items():
        ddb.put_item(TableName=table, Item={"pk": {"S": key}, **item})
    conflicts = [Fault(operation, p.TRANSACTION_CONFLICT, times=2, when=lambda params, key=key: params["Key"]["pk"]["S"] == key)
                 for operation, key in (("UpdateItem", writer), ("UpdateItem", reader), ("DeleteItem", presence),
                                        ("UpdateItem", queue_row))]
    writes = {"retire": lambda: retire(ddb, settings, writer, me, end),
              "retire_reader": lambda: retire_reader(ddb, settings, reader, me, end),
              "forget_row": lambda: forget_row(ddb, settings, presence, end),
              "dequeue": lambda: dequeue(ddb, settings, queue_row, me)}
    done = {}
    with dynamodb_faults(*conflicts) as log:
        for name, write in writes.items():
            try:
                done[name] = write()
            except Exception as error:  # noqa: BLE001 - today's defect: the conflict reaches the janitor
                done[name] = type(error).__name__
    assert done == {"retire": True, "retire_reader": True, "forget_row": True, "dequeue": True}
    assert log.injected == 8

    def read(key: str) -> dict:
        return ddb.get_item(TableName=table, Key={"pk": {"S": key}}, ConsistentRead=True).get("Item", {})
    assert int(read(writer)[p.EXPIRES_AT]["N"]) - end == grace
    assert int(sp.readers_of(read(reader))[me][p.EXPIRES_AT]["N"]) - end == grace
    assert read(presence) == {} and fp.LEFT in read(queue_row)


def test_only_a_janitor_of_holds_with_presence_rows_may_delete_and_only_those_rows(template):
    """The janitor of read/write sections with presence deletes presence rows (DeleteItem on the
    lock table, its partition keys starting with the row mark), and no other janitor deletes."""
    rendered = template.to_json()

    def janitor_statements(workflow: str) -> list[dict]:
        (role,) = [k for k, r in rendered["Resources"].items()
                   if k.startswith(f"{workflow}JanitorRole") and r["Type"] == "AWS::IAM::Role"]
        return role_statements(rendered, role)

    for section in ("MapReadersSection", "MapWritersSection"):
        (delete,) = [st for st in janitor_statements(section) if "dynamodb:DeleteItem" in actions(st)]
        assert actions(delete) == ["dynamodb:DeleteItem"] and ":table/" in json.dumps(delete["Resource"])
        assert delete["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{sp.PRESENCE_ROW_MARK}*"]}}
    # a workflow's own section has no presence (nothing of the machine's can cancel it), a mutex
    # keeps its presence on the lock item: their janitors delete nothing
    for workflow in ("Reader", "Writer", "Mutex"):
        assert not [st for st in janitor_statements(workflow) if "dynamodb:DeleteItem" in actions(st)], workflow


def test_a_stopped_writer_is_recovered_by_the_janitor(rw):
    """The writer is stopped at its gate, before its work wrote: it moved the fence (1) without a
    write, so the reader after it reads fence 1 while the probe's last write is none (0). That is
    the fault matrix's ``staleReads`` with no fault injected (triaged: the probe's strict count,
    not a defect); ``overtakenReads`` - a write during the read, or newer than the reader's fence -
    is what the matrix judges, and stays 0."""
    k = new_key()
    writer = rw.start("WriterHold", {"key": k, "gate": "w", "workMs": 1})
    rw.until(lambda: rw.gate_token(k, "w"))
    rw.cloud.stop_execution(writer)  # the janitor retires it: held for its stop grace, then free
    result = rw.wait([rw.start("Reader", {"key": k, "workMs": 1})])[0]
    assert result.status == "SUCCEEDED", result.cause
    assert probe_of(result)["fence"] == int(rw.lock(k)[p.FENCE]["N"]) == 1 and rw.free(k)
    assert probe_of(result)["read"]["lastFence"] == [0, 0]
    assert rw.probe(k).get("staleReads") == 1 and rw.probe(k).get("overtakenReads", 0) == 0


def test_a_map_of_writer_sections_on_one_key_holds_one_at_a_time(rw):
    """Each Map iteration's section is its own holder (an owner per acquisition): one inside,
    the other two parked, whichever went first."""
    k = new_key()
    run = rw.start("MapWriters", {"items": [{"key": k, "gate": f"g{i}", "workMs": 1} for i in range(3)]})
    opened: set = set()
    for n in range(3):
        rw.until(lambda: sum(bool(rw.gate_token(k, f"g{i}")) for i in range(3)) == n + 1)
        rw.until(lambda: rw.parked(k) == ["write"] * (2 - n))
        inside = [i for i in range(3) if rw.gate_token(k, f"g{i}") and i not in opened]
        assert len(inside) == 1, inside  # one holder at a time
        assert rw.lock(k)[p.OWNER]["S"].startswith(run + "#")
        rw.open(k, f"g{inside[0]}")
        opened.add(inside[0])
    result = rw.wait([run])[0]
    assert result.status == "SUCCEEDED", result.cause
    fences = [r["probe"]["fence"] for r in result.output]
    assert sorted(fences) == list(range(min(fences), min(fences) + 3))  # three holds, three fences
    probe = rw.probe(k)
    assert probe.get("violations", 0) == 0 and probe["counter"] == probe["accepted"] == 3 and rw.free(k)


def test_a_map_of_reader_sections_on_one_key_holds_together(rw):
    k = new_key()
    run = rw.start("MapReaders", {"items": [{"key": k, "gate": f"g{i}", "workMs": 1} for i in range(3)]})
    rw.until(lambda: all(rw.gate_token(k, f"g{i}") for i in range(3)))  # all three inside at once
    item = rw.lock(k)
    assert item[p.OWNER]["S"] == sp.SHARED and len(sp.readers_of(item)) == int(item[sp.READERS]["N"]) == 3
    assert all(o.startswith(run + "#") for o in sp.readers_of(item))  # three holders of one execution
    # each iteration's hold registered its own presence token, for its own acquisition
    rows = {o: rw.presence_row(o) for o in sp.readers_of(item)}
    rw.until(lambda: all(p.PRESENCE in rw.presence_row(o) for o in rows))
    assert len({rw.presence_row(o)[p.PRESENCE]["S"] for o in rows}) == 3
    assert all(rw.presence_row(o)[p.PRESENCE_OF] == e[p.ACQUIRED_AT] for o, e in sp.readers_of(item).items())
    for i in range(3):
        rw.open(k, f"g{i}")
    result = rw.wait([run])[0]
    assert result.status == "SUCCEEDED", result.cause
    # (their holds overlapped at the gates; the probes after the gates may or may not)
    assert rw.probe(k).get("violations", 0) == 0 and rw.probe(k)["readCount"] == 3 and rw.free(k)
    assert not any(rw.presence_row(o) for o in rows)  # each release deleted its row


def test_a_stopped_map_of_reader_sections_leaves_no_presence_rows_after_the_janitor(rw):
    """The run is stopped while its two readers hold: no hold reaches the delete after it. The
    janitor retires both entries (a stop grace from the stop) and deletes both rows; a writer
    then gets the key. The negative control is the run's own state before the janitor: the
    rows were there, each with its acquisition's token."""
    k = new_key()
    run = rw.start("MapReaders", {"items": [{"key": k, "gate": f"g{i}", "workMs": 1} for i in range(2)]})
    rw.until(lambda: all(rw.gate_token(k, f"g{i}") for i in range(2)))
    entries = sp.readers_of(rw.lock(k))
    assert len(entries) == 2
    rw.until(lambda: all(p.PRESENCE in rw.presence_row(o) for o in entries))
    rw.cloud.stop_execution(run)
    assert rw.cloud.wait_for(run, timeout=60).status == "ABORTED"
    rw.until(lambda: not any(rw.presence_row(o) for o in entries))  # FORGET_ROW, both
    retired = sp.readers_of(rw.lock(k))
    assert all(int(retired[o][p.EXPIRES_AT]["N"]) < int(e[p.EXPIRES_AT]["N"]) for o, e in entries.items())
    # the same event again (EventBridge delivers at least once): each reader hold once, unchanged
    from locked_workflow.lambdas.lock_janitor.logic import EndedExecution, recover
    from locked_workflow.lambdas.lock_janitor.settings import JanitorSettings

    detail = next(d for d in rw.cloud.events.status_events if d["executionArn"] == run)
    again = recover(EndedExecution.from_detail(detail), JanitorSettings(table_name=rw.table("LocksTable")),
                    dynamodb=rw.cloud.dynamodb, stepfunctions=rw.cloud.stepfunctions)
    assert (again.retired, again.forgotten) == ([], [])
    assert sorted(again.unchanged) == sorted((p.namespaced(NAMESPACE, k), o) for o in entries)
    result = rw.wait([rw.start("Writer", {"key": k, "workMs": 1})])[0]
    assert result.status == "SUCCEEDED", result.cause
    assert rw.free(k) and not any(rw.presence_row(o) for o in entries)


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


def test_a_stopped_writers_probe_in_a_slow_cold_start_does_not_enter_beside_the_next_writer(rw, monkeypatch):
    """A writer holder stopped just as Step Functions invoked its probe Lambda: Lambda runs the
    function's Init phase first (a cold start, up to 10 s, before the function's timeout starts:
    https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html), then the
    handler for up to its timeout. The hold's stop grace must cover both from the stop, or the
    writer parked behind enters while the stopped writer's handler runs. The probe's Init is
    made 9 s long here (the runtime's first invocation waits for its import the same way): a
    grace of the probe's timeout + 1 s (9 s) let the next writer in beside it (probe
    ``seen`` ``[1, 1, 2]``); the derived grace (``PROBE_GRACE_S``) keeps it out."""
    from safety_stack import PROBE_GRACE_S

    init_s = 9  # within Lambda's Init limit (LAMBDA_INIT_LIMIT_S)
    k = new_key()
    probe_fn = next(f for f in rw.cloud.functions if "Probe" in f.name)
    invoked, original = threading.Event(), probe_fn.invoke

    def cold_start(event):  # the stopped holder's invocation: a slow Init, then the handler
        if event.get("key") == k and not invoked.is_set():
            invoked.set()
            time.sleep(init_s)
        return original(event)

    holder = rw.start("WriterHold", {"key": k, "gate": "w", "workMs": 5000})
    rw.until(lambda: rw.gate_token(k, "w"))
    grace_ms = int(rw.lock(k)[p.GRACE]["N"])
    writer = rw.start("Writer", {"key": k, "workMs": 3000})
    rw.until(lambda: rw.parked(k) == ["write"])
    monkeypatch.setattr(probe_fn, "invoke", cold_start)
    rw.open(k, "w")
    assert invoked.wait(60)
    rw.cloud.stop_execution(holder)  # right after its probe was invoked, in its Init
    stopped_at = time.time()
    assert rw.cloud.wait_for(holder, timeout=60).status == "ABORTED"
    result = rw.wait([writer])[0]
    assert result.status == "SUCCEEDED", result.cause
    rw.until(lambda: rw.probe(k).get("entries") == 2 and rw.probe(k).get("inside") == 0, timeout=60)  # both ran
    probe = rw.probe(k)
    assert probe["seen"] == [1, 1] and probe.get("violations", 0) == 0, probe
    assert min(probe["enteredAt"]) / 1000 - stopped_at >= init_s - 1, probe  # the stopped one after its Init
    assert grace_ms >= PROBE_GRACE_S * 1000, grace_ms  # the hold's grace: Init + the probe's timeout + 5 s
    assert rw.free(k)
