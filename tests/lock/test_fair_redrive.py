"""A redriven fair-lock run on both DynamoDB backends: a run stopped after its release applied
ends released, never ``Lock.Lost``; one stopped before its release, or in its work, and
redriven after another run took the key over is ``Lock.Lost``.

Split from ``test_fair_lock.py`` (its stack fixture ``fair`` and helpers), so that ``make test``'s
``--dist loadgroup`` can run the files on several workers.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

import pytest

from lock_invariants import redrive, states_entered_after_redrive
from locked_workflow.state_machines import fair_protocol as fp
from locked_workflow.state_machines import lock_protocol as p
from test_fair_lock import fair, fences_of, key, queued  # noqa: F401 - fair: the stack's fixture


def _release_of(stored_key: str):
    """``when``: a release (alone or queued) of the lock item ``stored_key``."""
    def when(params: dict) -> bool:
        return params.get("Key", {}).get("pk") == {"S": stored_key} and params.get("UpdateExpression") == fp.RELEASE.update
    return when


def _holds(fair, k: str, arn: str) -> bool:
    return fair.lock(k).get(p.OWNER, {}).get("S", "").startswith(arn)


def _stopped_at_its_release_while_another_run_takes_the_key(fair, k: str, *, applied: bool):
    """A holder of ``k`` stopped right in its release (the write applied or not), and a second
    run holding ``k`` after it (at once, or after the stop grace when the holder's release did
    not apply: FairWaitShortGrace). Returns (holder ARN, second run's ARN)."""
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    arns: list[str] = []

    def stop_once() -> None:  # (a release retried before the stop landed meets the fault again)
        if fair.cloud.status(arns[0]) == "RUNNING":
            fair.cloud.stop_execution(arns[0])

    # not applied: every attempt of the release fails until the stop lands (with one fault, a
    # retry could apply the release before the stop on a loaded machine - then it had released)
    stop = Fault("UpdateItem", "InternalServerError", after_call=applied, when=_release_of(p.namespaced("f", k)),
                 then=stop_once, times=1 if applied else 100)
    with dynamodb_faults(stop) as log:
        arns.append(fair.start("FairWait" if applied else "FairWaitShortGrace", {"key": k, "waitS": 1}))
        fair.until(lambda: _holds(fair, k, arns[0]), timeout=60)
        assert fair.cloud.wait_for(arns[0], timeout=60).status == "ABORTED"
    assert log.injected == 1 if applied else log.injected >= 1
    arns.append(fair.start("FairWait", {"key": k, "waitS": 4}))
    fair.until(lambda: _holds(fair, k, arns[1]), timeout=60)
    return arns[0], arns[1]


@pytest.mark.parametrize("reevaluates", [False, True], ids=["strict", "reevaluate"])
def test_a_run_stopped_after_its_release_applied_ends_released_when_redriven(fair, reevaluates):
    """The fair lock's release applied, the run was stopped right after, another run took the
    key, then the stopped run was redriven. AWS reruns only the unsuccessful step - the release
    (https://docs.aws.amazon.com/step-functions/latest/dg/redrive-executions.html). The resumed
    release finds the key another run's and goes through the handoff to its queued release
    (``ReleaseQueued``), refused too: its own write had applied (nobody could take over a stopped
    holder before its stop grace), so it ends released - not ``Lock.Lost`` - and the work does
    not run again."""
    k = key("redrive")
    holder, second = _stopped_at_its_release_while_another_run_takes_the_key(fair, k, applied=True)
    redriven = redrive(fair.cloud, holder, reevaluates=reevaluates)
    entered = states_entered_after_redrive(redriven)
    assert (redriven.status, redriven.error) == ("SUCCEEDED", None), (redriven.error, redriven.cause, entered)
    assert "FairWaitWork" not in entered, entered  # nothing that succeeded ran again
    assert fair.cloud.wait_for(second, timeout=60).status == "SUCCEEDED"
    assert fair.drained(k)


@contextmanager
def _row_drops_held(stored_key: str) -> Iterator[threading.Event]:
    """Hold every head's drop of its own queue row of ``stored_key`` (``DropRow``, the DeleteItem
    right after the head took the lock - ``AcquireHead``) until the event yielded is set: the
    head holds the lock while its row is still stored, for as long as the test needs. An
    observer of the fault hook (``faults.fault_registry``) blocks that call's thread before the
    call; nothing fails. Set on leaving the block."""
    from locked_workflow.testing.faults import calling_state, fault_registry

    go = threading.Event()

    def hold(service: str, operation: str, params: dict) -> None:
        if service == "dynamodb" and operation == "DeleteItem" \
                and params.get("Key", {}).get("pk", {}).get("S", "").endswith(fp.ROW_MARK + stored_key):
            state = calling_state()
            if state is not None and state.state_name.endswith("DropRow"):
                go.wait(timeout=180)  # (a bound: a broken test must not hang the suite)

    with fault_registry() as registry:
        registry.observers.append(hold)
        try:
            yield go
        finally:
            go.set()


@pytest.mark.parametrize("reevaluates", [False, True], ids=["strict", "reevaluate"])
@pytest.mark.parametrize("taker_row", ["dropped", "still-stored"])
def test_a_run_stopped_before_its_release_applied_is_lost_when_redriven_after_a_takeover(fair, reevaluates, taker_row):
    """The control of the one above: the release did *not* apply when the run was stopped, the
    key was taken over after the stop grace, then the run was redriven: ``Lock.Lost``, its work
    not run again, no acquisition made (the fence is the taker's), the taker undisturbed.

    The taker is the stopped holder's next ticket, which took the lock as the head of the
    queue (``AcquireHead``) and then deletes its own row (``DropRow``). The redriven release
    (RELEASE_ALONE, refused: a ticket is out and the lock is not mine) takes row ``c + 1``:

    * ``dropped``: no row - the release writes RELEASE, refused: ``Lock.Lost``;
    * ``still-stored`` (the taker between its two writes): the row of the taker's ended park -
      the release grants it, refused (not mine), and the recheck finds the lock not granted by
      it. The release used to end there, SUCCEEDED (intermittent: 2 of 4 fresh-clone suites);
      it now tells the refusal as a refused RELEASE: ``Lock.Lost``."""
    k = key("redrive")
    stored = p.namespaced("f", k)
    with _row_drops_held(stored) as go:
        if taker_row == "dropped":
            go.set()
        holder, second = _stopped_at_its_release_while_another_run_takes_the_key(fair, k, applied=False)
        if taker_row == "dropped":
            fair.until(lambda: fair.rows(k) == [], timeout=60)
        else:  # the taker's own row is still there: it holds, at its DropRow
            assert [r[p.OWNER]["S"].startswith(second) for r in fair.rows(k)] == [True], fair.rows(k)
        fence = int(fair.lock(k)[p.FENCE]["N"])
        redriven = redrive(fair.cloud, holder, reevaluates=reevaluates)
        entered = states_entered_after_redrive(redriven)
        assert (redriven.status, redriven.error) == ("FAILED", p.ERROR_LOST), (redriven.error, redriven.cause, entered)
        assert "FairWaitShortGraceWork" not in entered, entered  # its work did not run again
        # (the interleaving asked for: the taker's row granted, refused - or no row to grant)
        assert ("Lock.Release.Grant" in entered) == (taker_row == "still-stored"), entered
        assert _holds(fair, k, second) and int(fair.lock(k)[p.FENCE]["N"]) == fence  # no acquisition since
    assert fair.cloud.wait_for(second, timeout=60).status == "SUCCEEDED"
    assert fair.drained(k)


@pytest.mark.parametrize("reevaluates", [False, True], ids=["strict", "reevaluate"])
def test_a_run_stopped_in_its_work_and_redriven_after_a_takeover_is_lost_not_released(fair, reevaluates):
    """A redrive resumes the work's Wait (not guarded), the work ends, and the release finds the
    key taken over during the stop. The work's end came after the redrive, so it says nothing of
    when the stop was: ``Lock.Lost``."""
    k = key("redrive")
    holder = fair.start("FairWaitShortGrace", {"key": k, "waitS": 3})
    fair.until(lambda: any(e.get("stateEnteredEventDetails", {}).get("name") == "FairWaitShortGraceWork"
                           for e in fair.cloud.history(holder)), timeout=60)
    fair.cloud.stop_execution(holder)  # inside its 3 s Wait
    assert fair.cloud.wait_for(holder, timeout=60).status == "ABORTED"
    second = fair.start("FairWait", {"key": k, "waitS": 4})
    fair.until(lambda: _holds(fair, k, second), timeout=60)
    redriven = redrive(fair.cloud, holder, reevaluates=reevaluates)
    entered = states_entered_after_redrive(redriven)
    assert (redriven.status, redriven.error) == ("FAILED", p.ERROR_LOST), (redriven.error, redriven.cause, entered)
    assert "FairWaitShortGraceWork" in entered  # it did resume its work
    assert fair.cloud.wait_for(second, timeout=60).status == "SUCCEEDED"
    assert fair.drained(k)


def test_a_late_janitor_event_never_hands_on_the_grant_a_redriven_waiter_confirmed(fair):
    """Issue 25: a fair waiter W stopped while parked (ABORTED) and redriven (RedriveExecution
    reruns its park: https://docs.aws.amazon.com/step-functions/latest/dg/redrive-executions.html)
    is granted the lock by the holder's release after its end, confirms it (CLAIM) and works.
    The janitor's event for W's first end comes after that (EventBridge delivers at least once,
    and retries for up to 24 h): it used to CLAIM the grant for W (idempotent: accepted) and, the
    grant being newer than the end, release it - handing the lock to X, queued behind W, while W
    works. The janitor now takes back only a grant never confirmed (``DROP_GRANT``): W keeps its
    lock, its release hands it to X, and the fences stay in order."""
    from locked_workflow.lambdas.lock_janitor.logic import EndedExecution, recover
    from locked_workflow.lambdas.lock_janitor.settings import JanitorSettings

    k = key("redrive")
    holder, (w,) = queued(fair, k, waiters=1, machine="FairPatientHold")
    x = fair.start("FairPatient", {"key": k, "workMs": 1})
    fair.until(lambda: len(fair.queue(k)) == 2)
    events = fair.cloud.events
    events.status_event_filter = lambda detail: detail.get("executionArn") != w  # held back: delivered below
    try:
        fair.cloud.stop_execution(w)  # parked
        assert fair.cloud.wait_for(w, timeout=60).status == "ABORTED"
        fair.until(lambda: any(d["executionArn"] == w for d in events.dropped_status_events))
    finally:
        events.status_event_filter = None
    holder_gate = fair.gate_token(k)
    fair.cloud.stepfunctions.redrive_execution(executionArn=w)
    fair.until(lambda: len(fair.queue(k)) == 2 and fair.queue(k)[0].startswith(w), timeout=60)  # parked again
    fair.open(k)  # the holder's release grants W and wakes it: W confirms and works (its gate)
    fair.until(lambda: fair.gate_token(k) not in (None, holder_gate), timeout=60)
    held = fair.lock(k)
    assert _holds(fair, k, w) and fp.HANDED not in held, held  # confirmed, at work
    # the ABORTED event of W's first end, delivered late
    detail = next(d for d in events.dropped_status_events if d["executionArn"] == w)
    recover(EndedExecution.from_detail(detail), JanitorSettings(table_name=fair.table("LocksTable"), fair=True),
            dynamodb=fair.cloud.dynamodb, stepfunctions=fair.cloud.stepfunctions)
    during = fair.lock(k)
    # still W's, while it works
    assert (during.get(p.OWNER, {}).get("S", "")[:len(w)], during[p.FENCE]) == (w, held[p.FENCE]), (held, during)
    assert fair.cloud.status(x) == "RUNNING" and fair.queue(k) == [fair.queue(k)[0]] and fair.queue(k)[0].startswith(x)
    fair.open(k)  # W's work ends
    results = fair.wait([holder, w, x])
    assert [(r.status, r.error) for r in results] == [("SUCCEEDED", None)] * 3, [(r.error, r.cause) for r in results]
    assert fences_of(results) == sorted(fences_of(results))
    assert fair.drained(k) and fair.probe(k).get("violations", 0) == 0
