"""The shared/exclusive lock's protocol, model-checked: every interleaving of the
participants' steps - fast read or write, ticket, transactional park, handoff (read the next
row; grant and wake, going on past readers; skip; release and look again), claims, the last
reader's handoff, reaping an expired reader, the park's fallback and the handoff it runs for
a head that does not move - with crashes, lost responses, failed wake-ups, park timeouts,
the janitor and expiring leases. It proves: a writer is never inside with anyone; readers
share only with readers; grants follow ticket order (no live queued waiter is passed: a
writer queued before a reader goes first); a reader at the head of a key no writer holds is
admitted with nobody leaving (readers behind a writer all at once); no wake-up is lost
(without faults, even with no fallback); from every reachable state every live participant
can finish; readers read the last writer's fence; a writer works only under its exact hold.
Each property has a protocol variant that breaks it, and the model catches it.

The faults: a crash (an execution stopped) at every step - every write is a step of its own,
so this is a stop between any two writes (its negative control: ``free_after_leave``, the first
protocol's two-write leave, whose stop in between left a shared hold with no reader); a lost
response on every write; a wake-up (SendTaskSuccess) delivered whose answer is lost (its
negative control: ``revoke_failed_wake``); failed wake-ups; park timeouts; the janitor's events
lost.

The suite runs 3 participants without faults (and with two crashes, the janitor off), and 2
with every fault; 3 participants with every fault run with ``SHARED_MODEL_FULL=1`` or
``PYTHONPATH=. python tests/protocol/shared_model.py`` (long - see docs/shared-lock.md for the figures).

The model's reading of each write against DynamoDB itself: ``test_shared_model_writes.py``; the
presence writes (a hold's row and a probe's retire): ``test_shared_model_presence.py``."""

from __future__ import annotations

import os

import pytest

import shared_model as m
from shared_model import Model


FULL = os.environ.get("SHARED_MODEL_FULL", "") not in ("", "0")


def explore(**kw) -> tuple[dict, Model]:
    model = Model(**kw)
    return model.explore(), model


# ---- the properties hold ----------------------------------------------------------------


@pytest.mark.parametrize("kinds", ["rw", "ww", "rr"])
def test_two_participants_under_every_fault_exclude_keep_order_and_always_finish(kinds):
    result, model = explore(kinds=kinds, max_crashes=2 if kinds == "rw" else 1)
    assert result["violation"] is None, model.violations
    assert result["states"] > (300 if kinds == "rr" else 3_000)


@pytest.mark.parametrize("kinds", ["rrw", "wwr"])
def test_three_participants_exclude_keep_order_admit_readers_together_and_always_finish(kinds):
    result, model = explore(kinds=kinds, crashes=False, lost_responses=False, batch=True)
    assert result["violation"] is None, model.violations
    assert result["states"] > 15_000


@pytest.mark.parametrize("kinds", ["rrw", "wwr"])
def test_without_faults_no_wake_up_is_ever_lost_even_with_no_fallback(kinds):
    result, model = explore(kinds=kinds, crashes=False, lost_responses=False, fallback=False)
    assert result["violation"] is None, model.violations


@pytest.mark.parametrize("kinds", ["rww", "rrw"])
def test_with_no_janitor_a_dead_reader_and_a_dead_head_cost_the_waiter_behind_them_only_time(kinds):
    """Two crashes, the janitor's events lost: a reader dies holding and the head of the queue
    dies parked; the waiter behind them reaps the reader and hands off past the head."""
    result, model = explore(kinds=kinds, max_crashes=2, janitor=False, lost_responses=False)
    assert result["violation"] is None, model.violations
    assert result["states"] > 35_000


@pytest.mark.skipif(not FULL, reason="minutes: SHARED_MODEL_FULL=1 (or python tests/protocol/shared_model.py)")
@pytest.mark.parametrize("kinds", ["rrw", "wwr"])
def test_three_participants_under_every_fault(kinds):
    model = Model(kinds=kinds, symmetry=True)
    result = m.explore_held_as_bytes(model)
    assert result["violation"] is None, model.violations


def test_the_full_runs_explorer_and_symmetry_find_what_the_suites_does():
    """The full runs hold states as bytes and explore one of each pair of swapped twins."""
    assert m.explore_held_as_bytes(Model(kinds="rw")) == Model(kinds="rw").explore()
    both, twins = Model(kinds="ww").explore(), m.explore_held_as_bytes(Model(kinds="ww", symmetry=True))
    assert twins["violation"] is None and both["states"] / 2 <= twins["states"] < both["states"] * 0.55
    broken = Model(kinds="rrw", variant="park_unchecked", crashes=False, lost_responses=False, fallback=False,
                   symmetry=True)
    assert m.explore_held_as_bytes(broken)["violation"].startswith("stuck") and broken.violations[0][1]
    assert m.explore_held_as_bytes(Model(kinds="rw", variant="write_ignores_readers"))["violation"].startswith("writer")


@pytest.mark.parametrize("kinds", ["rm", "wm"])
def test_a_plain_mutex_is_refused_while_others_hold_and_enters_after_them(kinds):
    """The mutex's own ACQUIRE and RELEASE (lock_protocol), beside a reader or a writer of this
    protocol: a writer."""
    result, model = explore(kinds=kinds, crashes=False)
    assert result["violation"] is None, model.violations


def test_a_plain_mutex_alone_recovers_a_dead_reader_by_its_sweep_of_the_shared_hold():
    """A shared hold has no lease a mutex's ACQUIRE can see; its liveness rounds sweep the hold
    (``kinds.shared_hold.shared_hold_sweep``): a reader entry whose lease is over is reaped (the last
    one's REAP_LAST ends the hold), a hold with no reader is freed (FREE_EMPTY). With every
    fault, a dead reader never keeps a plain mutex out."""
    result, model = explore(kinds="rm")
    assert result["violation"] is None, model.violations  # (without the sweep: stuck, below)


def test_negative_control_a_plain_mutex_without_its_sweep_does_not_recover_a_dead_reader():
    """The mutex before its sweep: a reader that dies holding leaves a key a plain mutex alone
    never gets - the model finds it stuck."""
    result, model = explore(kinds="rm", lost_responses=False, sweep=False)
    assert result["violation"].startswith("stuck")
    assert "r1 crashes at cs" in model.violations[0][1]


def test_negative_control_a_sweep_that_reaps_a_live_readers_entry_is_caught():
    """``sweep_ignores_lease``: the mutex's sweep reaps a reader entry whose lease is not over -
    the reader is still at work, and the mutex walks in beside it."""
    result, model = explore(kinds="rm", crashes=False, lost_responses=False, variant="sweep_ignores_lease")
    assert result["violation"] in ("writer m1 inside with ['r1']", "reader r1 at work without its entry"), model.violations
    assert any("m1 sweeps: reaps r1" in label for label in model.violations[0][1])


def _after_its_leave(name: str, proc) -> bool:
    """A reader whose leave was written, stopped before anything else it would write."""
    return name.startswith("r") and proc.then == "done" and proc.pc in m.LOOP + ("after_leave",)


def test_a_reader_stopped_after_its_leave_never_locks_a_plain_mutex_out():
    """L1: a reader stopped between its leave (LEAVE_READ: its entry gone, ``readers`` 0) and
    FREE_SHARED left ``{owner: shared, readers: 0}``: no entry, no lease, no execution - a plain
    mutex's ACQUIRE was refused forever. The last reader's leave now ends the shared hold in the
    same write (LEAVE_LAST), so a stop after it leaves the key free."""
    result, model = explore(kinds="rm", lost_responses=False, crash_when=_after_its_leave)
    assert result["violation"] is None, model.violations


@pytest.mark.parametrize("kinds", ["rw", "ww"])
def test_negative_control_a_waker_that_takes_back_a_grant_whose_wake_up_answer_was_lost_is_caught(kinds):
    """The fault "a Step Functions call whose answer is lost after it applied": a wake-up
    delivered whose SendTaskSuccess answer is lost looks failed to the waker. The protocol goes
    on as after a success (a grant lapses unconfirmed by itself); a waker that revoked it would
    leave the woken waiter working without its grant - the model catches it, and only with the
    fault on."""
    faults = dict(crashes=False, lost_responses=False, fallback=False)
    result, model = explore(kinds=kinds, variant="revoke_failed_wake", **faults)
    assert result["violation"] in ("reader r1 at work without its entry", "writer w2 at work without its exact hold")
    assert any(label.endswith("response lost") and " wakes " in label for label in model.violations[0][1])
    assert explore(kinds=kinds, variant="revoke_failed_wake", lost_wakes=False, **faults)[0]["violation"] is None
    assert explore(kinds=kinds, **faults)[0]["violation"] is None  # the protocol itself


def test_negative_control_a_last_reader_that_frees_the_shared_hold_in_a_write_of_its_own_is_caught():
    """The first protocol (LEAVE_READ, then FREE_SHARED): the model finds the shared hold with no
    reader it leaves between them - and, stopped there, the plain mutex stuck behind it."""
    result, model = explore(kinds="rm", lost_responses=False, crash_when=_after_its_leave, variant="free_after_leave")
    assert result["violation"] == "a shared hold with no reader", model.violations
    assert "r1 leaves last ok" in model.violations[0][1]


# ---- negative controls: the model catches each broken rule ------------------------------


def test_negative_control_a_reader_admitted_past_a_queued_writer_is_caught():
    result, model = explore(kinds="rrw", variant="read_ignores_queue", crashes=False, lost_responses=False)
    assert result["violation"] == "r2 (read) overtook ['w1 (write)']", model.violations


def test_negative_control_a_writer_admitted_with_a_reader_inside_is_caught():
    result, model = explore(kinds="rw", variant="write_ignores_readers", crashes=False, lost_responses=False)
    assert result["violation"] == "writer w1 inside with ['r1']", model.violations


@pytest.mark.parametrize("variant", ["park_unchecked", "leave_no_handoff", "release_then_stop"])
def test_negative_control_each_rendezvous_rule_is_needed_or_a_wake_up_is_lost(variant):
    """A park that does not check the lock item; a last reader that hands nothing off; a writer
    that releases after reading an empty row and does not read it again: each strands a parked
    waiter that nobody wakes (the fallback off, as a lost wake-up must not need it)."""
    result, _ = explore(kinds="rrw" if variant != "release_then_stop" else "rw", variant=variant,
                        crashes=False, lost_responses=False, fallback=False)
    assert result["violation"].startswith("stuck")


def test_negative_control_a_handoff_that_stops_after_one_reader_makes_the_next_wait():
    result, model = explore(kinds="rrw", variant="no_cascade", crashes=False, lost_responses=False, batch=True)
    assert result["violation"].startswith("a queued reader"), model.violations

