"""The fair lock's coalescing (``QueueLimit.keep_newest(1)``), model-checked
(:mod:`fair_coalesce_model`): every interleaving of 3 participants - a holder, a queued
waiter, a newcomer superseding it - through the supersede step (the ticket write that moves
``cut``, the newcomer's take and ``Lock.Superseded`` wake-up, the transactional park, the
handoff's JUMP and its wake-up of a superseded row it took), with crashes, lost write
responses and wake-ups delivered whose response was lost. It proves: never two holders; a
superseded ticket is never granted and nobody both works and ends superseded; and (without
faults that need the park timeout) every live participant finishes - a superseded waiter is
woken, never left to sleep out its park. Each rule has a variant the model must catch.

The model's reading of ENQUEUE_NEWEST, ENQUEUE_BOUNDED, JUMP and GRANT's cut is checked against
DynamoDB itself in ``test_fair_model`` (both backends)."""

from __future__ import annotations

from fair_coalesce_model import CoalescingModel


def test_three_participants_with_lost_wake_up_responses_are_granted_or_superseded_never_both_and_finish():
    """Liveness without park timeouts: a superseded waiter is woken (or refused its park), and
    the newest is handed the lock, whatever the interleaving and with wake-ups whose response
    was lost (delivered: treated as possibly delivered, nothing rests on it)."""
    model = CoalescingModel(participants=3, fallback=False, crashes=False, lost_responses=False, coverage=True)
    result = model.explore()
    assert result["violation"] is None, model.violations
    assert result["states"] > 10_000
    assert {"sup_take", "sup_wake", "sup_nudge", "jump"} <= model.visited, model.visited
    assert any("superseded: response lost" in label for label in model.lost_at), model.lost_at


def test_three_participants_with_a_crash_at_every_step_never_grant_a_superseded_ticket():
    """Safety with a stop between any two calls (the supersede steps included): never two
    holders, never a superseded ticket granted. (Liveness after a crash needs the park timeout,
    whose 3-participant space takes minutes: the fair model's FULL tests.)"""
    model = CoalescingModel(participants=3, fallback=False, crashes=True, lost_responses=False, lost_wakes=False,
                            check_liveness=False, coverage=True)
    result = model.explore()
    assert result["violation"] is None, model.violations
    assert {"sup_take", "sup_wake", "jump"} <= model.crashed_at, model.crashed_at


def test_three_participants_with_lost_write_responses_never_grant_a_superseded_ticket():
    """A lost response (applied, then retried) of the writes coalescing adds or conditions: JUMP
    and GRANT (the release's RELEASE_ALONE too, as the base model). Every write's, the ticket
    write's included: over 400,000 states (``lossy=None``, by hand)."""
    model = CoalescingModel(participants=3, fallback=False, crashes=False, lost_responses=True, lost_wakes=False,
                            check_liveness=False, coverage=True, lossy=("jump", "grant"))
    result = model.explore()
    assert result["violation"] is None, model.violations
    assert {"X jump response lost", "X grant X response lost"} <= model.lost_at, model.lost_at


def test_negative_control_a_grant_without_the_cut_grants_a_superseded_waiter():
    """GRANT without ``cut < ticket``: the release grants the waiter a newer run superseded in
    the same instant - both granted and superseded."""
    model = CoalescingModel(participants=3, variant="grant_ignores_cut", fallback=False, crashes=False,
                            lost_responses=False, lost_wakes=False)
    assert "superseded ticket" in model.explore()["violation"], model.violations


def test_negative_control_a_park_without_the_cut_check_strands_a_superseded_waiter():
    """A plain park (no ConditionCheck of ``cut``) after the newer run took the row: nobody
    will wake it - it would sleep out its park timeout."""
    model = CoalescingModel(participants=3, variant="park_ignores_cut", fallback=False, crashes=False,
                            lost_responses=False, lost_wakes=False)
    assert model.explore()["violation"].startswith("stuck"), model.violations
