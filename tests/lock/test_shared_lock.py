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

import random
import time
import uuid

import pytest

from locked_workflow.state_machines import fair_protocol as fp
from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import shared_protocol as sp
from deployed import StackRun, deployed_stack, synthesized
from shared_stack import SharedStack


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


def state_times(arn_history, name: str, event: str = "TaskStateExited") -> list[float]:
    """When the state ``name`` was left (or entered) in a history, epoch ms (service clock)."""
    details = "stateExitedEventDetails" if event.endswith("Exited") else "stateEnteredEventDetails"
    return [e["timestamp"].timestamp() * 1000 for e in arn_history if e["type"] == event and e[details]["name"] == name]


def entered_states_of(rw, arn: str) -> list[str]:
    return [e["stateEnteredEventDetails"]["name"] for e in rw.cloud.history(arn) if "stateEnteredEventDetails" in e]
