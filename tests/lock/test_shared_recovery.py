"""The read/write lock's recovery on both DynamoDB backends: a stopped reader or writer (its
lease, its stop grace, the liveness check), a redriven reader or writer, Map iterations of
read/write sections on one key, a stopped writer's probe in a slow cold start. The janitor's
reads and writes: ``test_shared_janitor.py``, in this file's group (one deployment per backend).

Split from ``test_shared_lock.py`` (its stack fixture ``rw`` and helpers), so that ``make test``'s
``--dist loadgroup`` can run the two groups on two workers.
"""

from __future__ import annotations

import threading
import time

import pytest

from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import shared_protocol as sp
from test_shared_lock import (  # noqa: F401 - rw: the stack's fixture
    NAMESPACE, state_times, assert_park_rounds_fit_the_budget, entered_states, entered_states_of, new_key, probe_of, rw,
    writer_handed_on,
)


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
        retired_ms = state_times(result.history, abandon, "TaskStateEntered")[-1]
        entered_ms = state_times(result.history, "Lock.Admit")[-1]
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
        return sum(t > after for t in state_times(rw.cloud.history(waiters[c]), state, "TaskStateEntered"))

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
            entered_ms = state_times(result.history, "Lock.Admit")[-1]
            assert stop_ms[k] + grace_ms <= entered_ms < leases[k] - 120_000, (k, stop_ms[k], entered_ms, leases[k])
            record_property(f"{k[0].lower()}_recovered_after_stop_s", round((entered_ms - stop_ms[k]) / 1000, 1))
            record_property(f"{k[0].lower()}_lease_after_stop_s", round((leases[k] - stop_ms[k]) / 1000, 1))
            assert probe_of(result)["insideAtEntry"] == 1 and rw.free(keys[k])
            assert_park_rounds_fit_the_budget(result, "WriterProbe")  # rounds with the liveness check
        # without: rounds of the fallback past the grace, and still held, the lease untouched
        blind = [k for k in keys if not k[1]]

        def inspected_after_grace(k) -> int:
            after = stop_ms[k] + grace_ms
            return sum(t > after for t in state_times(rw.cloud.history(waiters[k]), "Lock.Inspect", "TaskStateEntered"))

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
