"""The read/write lock's lost responses, refused writes and reader cap on both DynamoDB
backends: a reader's enter and leave whose responses were lost count it once, a leave refused
round after round retires its entry, a lost grant and a lost wake-up strand no reader, a ticket
whose waiter never parked is skipped, readers past ``MAX_READERS`` are refused, and a reader
stopped after its leave ends released when redriven. (The stack's fixture and helpers:
``test_shared_lock.py``, whose group this file is in.)"""

from __future__ import annotations

import contextlib
import json
import time
import uuid

import pytest

from locked_workflow.state_machines import fair_protocol as fp
from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import shared_protocol as sp
from test_shared_lock import (  # noqa: F401 - rw: the stack's fixture
    NAMESPACE, assert_park_rounds_fit_the_budget, entered_states, new_key, probe_of, rw,
)


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
