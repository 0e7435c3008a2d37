"""The fault matrix's ``blocked`` judge (:func:`tools.matrix.judge.blocked`) on synthetic
timelines: no cloud, milliseconds of wall time.

The bound a waiter is judged by restarts at each abnormal end of a participant that held or
took the lock (docs/safety.md): a grantee stopped right after its claim, before its work, is a
hold the next waiter queued behind (``fair:Lock.Claim`` x ``stop-after``, issue 25). The
negative controls: a waiter blocked past the bound after the last such end is caught; a
stopped participant that never took the lock, or that held beside the dead one, does not
restart the bound.
"""

from __future__ import annotations

from tools.matrix.judge import blocked
from tools.matrix.roles import GRACE_S, HOLD_MS, SLACK_S, Participant
from tools.matrix.stack import PARK_TIMEOUT_S

#: A parking waiter's bound after an abnormal end (ms), as the judge states it.
BOUND_MS = int((GRACE_S + PARK_TIMEOUT_S + SLACK_S + HOLD_MS / 1000) * 1000)
HOLDER_END_MS = 5_000


def _arn(index: int) -> str:
    return f"arn:aws:states:us-east-1:123456789012:execution:Fair:cell-{index}-abcd1234"


def _scene(*, grantee_end_ms: int, waiter_enters_ms: int, grantee_took: bool = True,
           grantee_entered_ms: tuple[int, ...] = ()) -> list[Participant]:
    """A holder stopped inside its work; the grantee the helper handed the lock to, stopped
    (right after its claim when ``grantee_took``, else while it waited; one that entered at
    ``grantee_entered_ms``); the third waiter entering at ``waiter_enters_ms``."""
    holder = Participant("Fair", {}, arn=_arn(0), status="ABORTED", started_ms=0, ended_ms=HOLDER_END_MS,
                         entered_ms=[1_000], stopped=True, held_at_end=True)
    grantee = Participant("Fair", {}, arn=_arn(1), status="ABORTED", started_ms=300, ended_ms=grantee_end_ms,
                          entered_ms=list(grantee_entered_ms), stopped=True, held_at_end=grantee_took)
    waiter = Participant("client-fair", {}, arn="", status="SUCCEEDED", started_ms=600, ended_ms=waiter_enters_ms + 3_000,
                         entered_ms=[waiter_enters_ms])
    return [holder, grantee, waiter]


def test_a_grantee_stopped_after_its_claim_restarts_the_bound() -> None:
    # as reported: 27 s after the grantee's end, past the bound counted from the holder's end
    waiter_enters = HOLDER_END_MS + BOUND_MS + 4_000
    scene = _scene(grantee_end_ms=waiter_enters - 27_000, waiter_enters_ms=waiter_enters)
    assert waiter_enters - scene[1].ended_ms < BOUND_MS < waiter_enters - HOLDER_END_MS
    assert blocked(scene) == []


def test_a_key_blocked_past_the_bound_after_the_last_abnormal_end_is_caught() -> None:
    grantee_end = HOLDER_END_MS + 27_000
    scene = _scene(grantee_end_ms=grantee_end, waiter_enters_ms=grantee_end + BOUND_MS + 2_000)
    found = blocked(scene)
    assert any("after Fair cell-1-abcd1234 ended ABORTED" in line for line in found), found


def test_a_stopped_waiter_that_never_took_the_lock_does_not_restart_the_bound() -> None:
    waiter_enters = HOLDER_END_MS + BOUND_MS + 4_000
    scene = _scene(grantee_end_ms=waiter_enters - 27_000, waiter_enters_ms=waiter_enters, grantee_took=False)
    found = blocked(scene)
    assert any("after Fair cell-0-abcd1234 ended ABORTED" in line for line in found), found


def test_one_that_held_beside_the_dead_holder_does_not_restart_its_bound() -> None:
    # (a semaphore's other slot: it entered before the holder's end; its later stop says nothing
    # of when the dead holder's slot was retired)
    waiter_enters = HOLDER_END_MS + BOUND_MS + 4_000
    scene = _scene(grantee_end_ms=waiter_enters - 27_000, waiter_enters_ms=waiter_enters,
                   grantee_entered_ms=(HOLDER_END_MS - 1_000,))
    found = blocked(scene)
    assert any("after Fair cell-0-abcd1234 ended ABORTED" in line for line in found), found


def test_a_stopped_sections_lock_is_awaited_until_a_waiters_abandoned_could_have_freed_it():
    """A section's holder stopped 3 s into its hold: a waiter's ABANDONED (its presence token
    closed) gives it a grace from the waiter's look, made once the token is PRESENCE_SETTLE_MS
    old - the semaphore cells of issue 25 judged its slot "left" 9 s before that. Negative
    control: a workflow's holder (no presence) is awaited to its end + the grace only."""
    from tools.matrix.judge import settled_by_ms
    from tools.matrix.stack import STOP_GRACE_S
    from locked_workflow.state_machines.lock_writes import PRESENCE_SETTLE_MS
    from tools.stress import LIVENESS_ROUND_S

    def holder(role: str) -> Participant:
        return Participant(role, {}, arn=_arn(0), status="ABORTED", stopped=True, started_ms=0, ended_ms=3_000,
                           entered_ms=[500])

    waiter = Participant("Semaphore", {}, arn=_arn(1), status="SUCCEEDED", started_ms=100, ended_ms=40_000)
    section = settled_by_ms([holder("SemaphoreSection"), waiter])
    assert section == 500 + PRESENCE_SETTLE_MS + int(LIVENESS_ROUND_S * 1000) + (STOP_GRACE_S + 2) * 1000
    assert settled_by_ms([holder("Semaphore"), waiter]) == 3_000 + (STOP_GRACE_S + 2) * 1000
    assert settled_by_ms([waiter]) is None
