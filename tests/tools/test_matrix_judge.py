"""The fault matrix's ``blocked`` judge (:func:`tools.matrix.judge.blocked`) on synthetic
timelines: no cloud, milliseconds of wall time.

The bound a waiter is judged by restarts at each abnormal end of a participant that held or
took the lock (docs/safety.md): a grantee stopped right after its claim, before its work, is a
hold the next waiter queued behind (``fair:Lock.Claim`` x ``stop-after``, issue 25). The
negative controls: a waiter blocked past the bound after the last such end is caught; a
stopped participant that never took the lock, or that held beside the dead one, does not
restart the bound.

The gaps the 2026-11-28 full matrix run showed (helper matrix-triage), each with its control: a
redriven waiter waits for its own stopped hold (judged from its redrive); a redriven holder's
hold again counts as it lasted (with its grace when its work timed out); a section's hold is
judged from its presence token's settling; a stopped waiter's served row is a row left, not a
park (:func:`tools.matrix.judge.left_behind`); ``Lock.Lost`` of a release resumed by a late
redrive is documented (:func:`tools.matrix.judge.lost_after_redrive`); a plain mutex behind a
dead reader has two liveness rounds.
"""

from __future__ import annotations

from locked_workflow.state_machines.lock_writes import PRESENCE_SETTLE_MS
from tools.matrix.judge import blocked, left_behind, lost_after_redrive, settled_by_ms
from tools.matrix.roles import GRACE_S, HOLD_MS, SLACK_S, Participant
from tools.matrix.stack import PARK_TIMEOUT_S, STOP_GRACE_S
from tools.stress import LIVENESS_ROUND_S

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
    def holder(role: str) -> Participant:
        return Participant(role, {}, arn=_arn(0), status="ABORTED", stopped=True, started_ms=0, ended_ms=3_000,
                           entered_ms=[500])

    waiter = Participant("Semaphore", {}, arn=_arn(1), status="SUCCEEDED", started_ms=100, ended_ms=40_000)
    section = settled_by_ms([holder("SemaphoreSection"), waiter])
    assert section == 500 + PRESENCE_SETTLE_MS + int(LIVENESS_ROUND_S * 1000) + (STOP_GRACE_S + 2) * 1000
    assert settled_by_ms([holder("Semaphore"), waiter]) == 3_000 + (STOP_GRACE_S + 2) * 1000
    assert settled_by_ms([waiter]) is None


# -- a redriven participant's own stopped hold; a redriven holder's hold again; a section's presence


def _writer(index: int, **fields: object) -> Participant:
    return Participant("Writer", {}, arn=_arn(index).replace(":Fair:", ":Writer:"), **fields)  # type: ignore[arg-type]


def test_a_redriven_waiter_waits_for_its_own_stopped_hold_judged_from_its_redrive() -> None:
    # (exclusive:Lock.DropRow x redrive, seed 82 on DynamoDB Local: the head stopped right after
    # its claim and redriven; its resumed work refused (Lock.Resumed), it retired its old hold for
    # the grace and queued again - 63 s after the dead holder's end, 30 s after its own redrive)
    holder = _writer(0, status="ABORTED", started_ms=0, ended_ms=7_100, entered_ms=[5_000], stopped=True,
                     held_at_end=True)
    redriven = _writer(2, status="SUCCEEDED", started_ms=5_400, ended_ms=70_600, entered_ms=[69_700],
                       redriven=True, redriven_ms=39_400, held_at_end=True)
    other = _writer(1, status="SUCCEEDED", started_ms=5_200, ended_ms=69_600, entered_ms=[68_700])
    assert 69_700 - 7_100 > BOUND_MS  # the bound counted from the holder's end alone
    assert blocked([holder, other, redriven]) == []


def test_a_redriven_waiter_blocked_past_the_bound_after_its_own_redrive_is_caught() -> None:
    holder = _writer(0, status="ABORTED", started_ms=0, ended_ms=7_100, entered_ms=[5_000], stopped=True,
                     held_at_end=True)
    late = 39_400 + BOUND_MS + 5_000
    redriven = _writer(2, status="SUCCEEDED", started_ms=5_400, ended_ms=late + 1_000, entered_ms=[late],
                       redriven=True, redriven_ms=39_400, held_at_end=True)
    found = blocked([holder, redriven])
    assert any(line.startswith("Writer cell-2-abcd1234 waited") and "after Writer cell-2-abcd1234" in line
               for line in found), found


def _transfers(rehold_error: str | None, waiter_enters_ms: int) -> list[Participant]:
    """A holder stopped and redriven at 10 s, holding again at 12 s until 25 s (its work past
    its function timeout when ``rehold_error``); a waiter that entered at ``waiter_enters_ms``."""
    redriven = Participant("Transfer", {}, arn=_arn(0), status="FAILED" if rehold_error else "SUCCEEDED",
                           error=rehold_error, started_ms=0, ended_ms=25_000, entered_ms=[1_000, 12_000],
                           redriven=True, redriven_ms=10_000, held_at_end=True)
    waiter = Participant("Transfer", {}, arn=_arn(1), status="SUCCEEDED", started_ms=500,
                         ended_ms=waiter_enters_ms + 2_000, entered_ms=[waiter_enters_ms])
    return [redriven, waiter]


def test_a_redriven_holder_whose_hold_again_timed_out_adds_that_hold_and_its_grace() -> None:
    # (multikey:Lock.RetireKey x conflict [redrive]: its work timed out at 10 s on the loaded
    # machine, the section retired its hold to the end + the grace; the waiter came 76 s after)
    polling = int((GRACE_S + LIVENESS_ROUND_S + SLACK_S + HOLD_MS / 1000) * 1000)
    enters = 10_000 + polling + 20_000
    assert blocked(_transfers(None, enters)), "the control: a hold again of 13 s does not cover 20 s more"
    assert blocked(_transfers("Sandbox.Timedout", enters)) == []


def test_a_section_holder_is_judged_from_its_presence_token_settling() -> None:
    # (mutex:Lock.Abandoned [dead-holder+no-janitor+with:Nested,Mutex,Mutex]: the probe retires a
    # stopped section's hold for the grace from when its token is PRESENCE_SETTLE_MS old)
    def scene(role: str) -> list[Participant]:
        dead = Participant(role, {}, arn=_arn(0), status="ABORTED", started_ms=0, ended_ms=6_000,
                           entered_ms=[1_300], stopped=True, held_at_end=True)
        waiter = Participant("Mutex", {}, arn=_arn(1), status="SUCCEEDED", started_ms=500, ended_ms=90_000,
                             entered_ms=[1_300 + PRESENCE_SETTLE_MS + BOUND_MS])
        return [dead, waiter]

    assert blocked(scene("Mutex")), "the control: a workflow's hold (no presence) is judged from its end"
    assert blocked(scene("Nested")) == []


def test_a_stopped_waiters_row_its_ticket_served_is_a_row_left_not_a_park() -> None:
    # (shared:Lock.ReleaseAfterError.Handoff.GrantRead x timeout-after: the handoff granted the
    # writer stopped while parked, its wake-up failed; the janitor's DEQUEUE had not come yet)
    stopped = _writer(1, status="ABORTED", started_ms=0, ended_ms=9_000, stopped=True)
    lock = {"pk": {"S": "rw#cell"}, "served": {"N": "2"}, "tickets": {"N": "2"}, "fence": {"N": "1"}}

    def row(ticket: int) -> dict:
        return {"pk": {"S": f"!{ticket}!rw#cell"}, "owner": {"S": f"{stopped.arn}#uuid"}, "token": {"S": "T"}}

    assert left_behind([lock, row(1)], [stopped], no_janitor=False, now_ms=60_000) == []
    # the control: a row its lock item did not serve yet still parks (the next handoff would grant it)
    assert left_behind([dict(lock, served={"N": "0"}), row(1)], [stopped], no_janitor=False, now_ms=60_000)
    # and so does a served row of a waiter that did not end abnormally (a park that outlived its waiter)
    done = _writer(1, status="SUCCEEDED", started_ms=0, ended_ms=9_000)
    assert left_behind([lock, row(1)], [done], no_janitor=False, now_ms=60_000)


def test_a_release_resumed_by_a_redrive_past_the_grace_may_end_lock_lost() -> None:
    # (record:Lock.Retire x 5xx [redrive], nested:Inner.Departed x redrive: the redriven run's
    # release came 40 s after its work, its hold retired and taken meanwhile: Lock.Lost, documented)
    def run(ended_ms: int) -> Participant:
        return Participant("Record", {}, arn=_arn(0), status="FAILED", error="Lock.Lost", started_ms=0,
                           ended_ms=ended_ms, entered_ms=[15_600], redriven=True, redriven_ms=21_900)

    assert lost_after_redrive(run(62_300))
    # the controls: within the grace a takeover is not documented; nor is Lock.Lost without a redrive
    assert not lost_after_redrive(run(30_000))
    assert not lost_after_redrive(Participant("Record", {}, arn=_arn(0), status="FAILED", error="Lock.Lost",
                                              started_ms=0, ended_ms=62_300, entered_ms=[15_600]))


def test_a_plain_mutex_behind_a_dead_reader_has_two_liveness_rounds() -> None:
    # (mutex:Lock.RetireEndedReader [dead-holder+no-janitor+as:RwMutex]: its sweep retires the
    # ended reader's entry at one liveness check and reaps it at a later one)
    def scene(waiter_role: str) -> list[Participant]:
        reader = Participant("Reader", {}, arn=_arn(0), status="ABORTED", started_ms=0, ended_ms=20_000,
                             entered_ms=[11_600], stopped=True, held_at_end=True)
        one_round = int((GRACE_S + LIVENESS_ROUND_S + SLACK_S + HOLD_MS / 1000) * 1000)
        waiter = Participant(waiter_role, {}, arn=_arn(1), status="SUCCEEDED", started_ms=500, ended_ms=99_000,
                             entered_ms=[20_000 + one_round + 4_000])
        return [reader, waiter]

    assert blocked(scene("RwMutex")) == []
    # the control: a polling waiter of another kind behind it has one round
    assert blocked(scene("Semaphore"))


def test_a_gates_hold_within_the_wait_counts_toward_the_bound_once() -> None:
    # A waiter entering 20 s past its bound, counted from the holder's end: a ``gate:`` held a call
    # 25 s of that wait (two overlapping holds, 15 s + 15 s with 5 s shared), the harness's pause
    # and not the lock's: not blocked. The control: the same wait with no hold, or with the hold
    # before the holder's end (it paused nobody waiting for it), is caught.
    waiter_enters = HOLDER_END_MS + BOUND_MS + 20_000
    scene = _scene(grantee_end_ms=HOLDER_END_MS - 100, waiter_enters_ms=waiter_enters, grantee_took=False)
    scene[1].status, scene[1].stopped = "SUCCEEDED", False  # (only the holder ended abnormally)
    holds = [(HOLDER_END_MS + 1_000, HOLDER_END_MS + 16_000), (HOLDER_END_MS + 11_000, HOLDER_END_MS + 26_000)]
    assert blocked(scene, gate_holds=holds) == []
    assert any("after Fair cell-0-abcd1234 ended ABORTED" in line for line in blocked(scene))
    early = [(0, HOLDER_END_MS)]
    assert any("after Fair cell-0-abcd1234 ended ABORTED" in line for line in blocked(scene, gate_holds=early))
    # (overlapping holds count once: 25 s, not 30 s - 5 s short of 30 s past the bound is caught)
    later = _scene(grantee_end_ms=HOLDER_END_MS - 100, waiter_enters_ms=HOLDER_END_MS + BOUND_MS + 28_000,
                   grantee_took=False)
    later[1].status, later[1].stopped = "SUCCEEDED", False
    assert any("ended ABORTED" in line for line in blocked(later, gate_holds=holds))
