"""Situations placed by ``gate:`` (:class:`tools.matrix.gate.Gate`): the rare paths of the fair
lock (and the coalescing fair lock's own situations), reached by ordering two participants'
calls rather than by timing them. :mod:`tools.matrix.table` lays :data:`PLACED` over the others."""

from __future__ import annotations

import re

#: Situations of the fourth pass (issue 25): the fair lock's rare paths, reached by placing two
#: participants' calls in the order the path needs (``gate:``, :class:`tools.matrix.gate.Gate`)
#: rather than by timing. The parts:
#:
#: - :data:`_IN_ORDER`: the first participant takes the lock, the second queues ticket 1, the
#:   third ticket 2;
#: - :data:`_UNPARKED`: ticket 1's waiter has its ticket, but its response comes (and it parks)
#:   only once the third participant's helper skipped that ticket - a release meets a ticket
#:   with no row (``ReleaseQueued``, then a ready mark), the third waiter's park timeout finds
#:   that mark (the helper's take, mark, skip, take of the next row: its own), and ticket 1's
#:   late park ends in a requeue;
#: - :data:`_UNMARK`: ticket 1's waiter has its ticket's response (and parks) once the release
#:   marked its row (refused: ready -> it takes the lock itself), and the release reads the
#:   lock only once it did (the mark is litter: ``Unmark``);
#: - :func:`_reparked`: the releaser takes ticket 1's row only once its waiter's park timed out
#:   and it looked (the lock still held: it parks again), the new park comes only after the
#:   wake-up of the old one failed (the answer to its liveness check of the holder held) (and, for the late look, after the early look found nothing),
#:   and the releaser looks for it only once it landed (``RetakeEarly`` -> ``WakeAgainEarly``;
#:   ``Retake`` -> ``WakeAgain``);
#: - :data:`_HELPED`: behind a dead holder (no janitor), ticket 1's waiter does not look until
#:   the third participant's helper granted it the lock - its wake-up fails (the park had timed
#:   out): the grantee described, its row looked for twice (``RetakeEarly``, ``Retake``), the
#:   grant revoked (refused: the grantee claimed meanwhile);
#: - :data:`_HELP_REFUSED`: the same, but ticket 1's waiter takes the lock itself between the
#:   helper's take of its row and its grant: the grant is refused (``Recheck``, ``Nudge``).
_IN_ORDER = "with:Fair,Fair,Fair+gate:1/Lock.Acquire@0/Lock.Acquire+gate:2/Lock.Acquire@1/Lock.Enqueue"
_UNPARKED = f"no-janitor+{_IN_ORDER}+gate:1/Lock.Enqueue>@2/Lock.Help.Skip"
_HELPED = f"dead-holder+no-janitor+{_IN_ORDER}+gate:1/Lock.Inspect*@2/Lock.Help.Grant"
_HELP_REFUSED = f"dead-holder+no-janitor+{_IN_ORDER}+gate:1/Lock.Inspect*@2/Lock.Help.Take" \
                f"+gate:2/Lock.Help.Grant@1/Lock.DropRow"


def _as_coalescing(situation: str) -> str:
    """A fair row's situation for the coalescing fair lock's machine (``FairNewest``)."""
    return re.sub(r"\bFair(Section)?\b", "FairNewest", situation)


def _unmark(run: str, by: int = 0) -> str:
    """:data:`_UNMARK` for the handoff of ``run`` (``Release``, ``ReleaseAfterError``; ``Help``:
    the third participant's, ``by`` 2, once its park timed out on the lock the release freed)."""
    return f"{_IN_ORDER}+gate:1/Lock.Enqueue>@{by}/Lock.{run}.Mark+gate:{by}/Lock.{run}.Served@1/Lock.DropRow"


def _parked(run: str) -> str:
    """The handoff of ``run`` starts only once both waiters parked (a take of a parked row)."""
    return f"{_IN_ORDER}+gate:0/Lock.{run}.Take@2/Lock.Park"


_UNMARK = _unmark("Release")


def _reparked(run: str, early: bool) -> str:
    """:data:`_REPARKED`'s situation for the handoff of ``run``: the grantee parks again just
    after its wake-up failed and before the releaser's early (``early``) or late look for it."""
    look, after = (f"{run}.RetakeEarly", f"{run}.Wake") if early else (f"{run}.Retake", f"{run}.RetakeEarly")
    armed = "~1/Lock.Inspect"
    return (f"{_IN_ORDER}+gate:0/Lock.{run}.Take@1/Lock.Inspect+gate:1/Lock.DescribeHolder>@0/Lock.{after}{armed}"
            f"+gate:0/Lock.{look}@1/Lock.Park{armed}")
def _help_reparked(early: bool) -> str:
    """The helper's grantee parks again just after the helper's wake-up failed and before its
    early (``early``) or late look for it: the holder (working long) is stopped once ticket 1
    described it (running: ticket 1 will park again), the answer held until the helper - the
    third participant, whose look found the holder ended - granted ticket 1 and its wake-up failed
    (or its early look found nothing); the helper looks only once that park landed."""
    look, after = ("Help.RetakeEarly", "Help.Wake") if early else ("Help.Retake", "Help.RetakeEarly")
    armed = "~1/Lock.Inspect"
    return (f"contend+no-janitor+holds-long:0+{_IN_ORDER}+stop:0@1/Lock.DescribeHolder"
            f"+gate:1/Lock.DescribeHolder>@2/Lock.{after}{armed}+gate:2/Lock.{look}@1/Lock.Park{armed}")


PLACED: dict[str, dict[str, str]] = {
    'fair': {
        'Lock.Requeue': f"contend+{_UNPARKED}",
        'Lock.Help.Take': f"contend+{_UNPARKED}",
        'Lock.Help.Mark': f"contend+{_UNPARKED}",
        'Lock.Help.Served': f"contend+{_UNPARKED}",
        'Lock.Help.Skip': f"contend+{_UNPARKED}",
        'Lock.Help.TakeNext': f"contend+{_UNPARKED}",
        'Lock.Help.Grant': _HELPED,
        'Lock.Help.Wake': _HELPED,
        'Lock.Help.DescribeGrantee': _HELPED,
        'Lock.Help.RetakeEarly': _HELPED,
        'Lock.Help.Confirmed': _HELPED,
        'Lock.Help.Retake': _HELPED,
        'Lock.Help.Revoke': _HELPED,
        'Lock.Help.Recheck': _HELP_REFUSED,
        'Lock.Help.Nudge': _HELP_REFUSED,
        **{f"Lock.{run}.{state}": f"{base}+{_UNPARKED}"
           for run, base in (("Release", "contend"), ("ReleaseAfterError", "work-fails"))
           for state in ("TakeAny", "ReleaseQueued", "Mark", "Served")},
        **{f"Lock.{run}.ReleaseQueuedAgain": f"{base}+{_UNPARKED}+pre:Lock.{run}.ReleaseQueued=5xx"
           for run, base in (("Release", "contend"), ("ReleaseAfterError", "work-fails"))},
        **{f"Lock.{run}.{state}": f"{base}+{_reparked(run, early)}"
           for run, base in (("Release", "contend"), ("ReleaseAfterError", "work-fails"))
           for state, early in (("DescribeGrantee", True), ("RetakeEarly", True), ("WakeAgainEarly", True),
                                ("Confirmed", False), ("Retake", False), ("WakeAgain", False))},
        'Lock.Release.Unmark': f"contend+{_UNMARK}",
        'Lock.Help.Unmark': f"contend+no-janitor+{_unmark('Help', 2)}",
        'Lock.Claim': _HELPED,
        'Lock.ReleaseAfterError.Recheck': f"work-fails+reach+{_parked('ReleaseAfterError')}",
        'Lock.ReleaseAfterError.Release':
            "work-fails+with:Fair,Fair,Fair+gate:1/Lock.Acquire@0/Lock.ReleaseAfterError.Release"
            "+gate:2/Lock.Acquire@0/Lock.ReleaseAfterError.Release",
        'Lock.ReleaseAfterError.Unmark': f"work-fails+{_unmark('ReleaseAfterError')}",
        # (a park failing through its whole Retry: ticket 1's own, its Leave then its claim on leave;
        # in order, else the second participant may take the lock first and never park)
        'Lock.Leave': f"contend+{_IN_ORDER}+reach+faults-by:1",
        'Lock.ClaimOnLeave': f"contend+{_IN_ORDER}+reach+faults-by:1",
        # (the head of the queue a polling client: the third participant's helper, its park timed
        # out behind the dead holder, takes the client's row and grants it)
        'Lock.Help.GrantPoller': "dead-holder+no-janitor+with:Fair,client-fair,Fair",
        'Lock.Help.WakeAgainEarly': _help_reparked(early=True),
        'Lock.Help.WakeAgain': _help_reparked(early=False),
    },
}
#: The same orders for the coalescing lock where they need only the holder and ticket 1 (a
#: third waiter would supersede the second): the release's unmark and its second wake-ups.
_PAIR = "with:Fair,Fair+gate:1/Lock.Acquire@0/Lock.Acquire"
PLACED['coalesce'] = {
    state: _as_coalescing(situation.replace(_IN_ORDER, _PAIR)) for state, situation in PLACED['fair'].items()
    if _IN_ORDER in situation and "2/" not in situation.replace(_IN_ORDER, _PAIR)
}
PLACED['coalesce'].update({f"Lock.{run}.{state}": _as_coalescing(f"{base}+{_unmark(run).replace(_IN_ORDER, _PAIR)}")
                           for run, base in (("Release", "contend"), ("ReleaseAfterError", "work-fails"))
                           for state in ("ReleaseQueued", "Mark", "Served")})
#: (and the release after an error that finds no waiter, or a parked one; a park failing through)
_PARKED_PAIR = f"{_PAIR}+gate:0/Lock.ReleaseAfterError.Take@1/Lock.Park"
PLACED['coalesce'].update({state: _as_coalescing(situation) for state, situation in {
    'Lock.ReleaseAfterError.Release': "work-fails+with:Fair,Fair+gate:1/Lock.Acquire@0/Lock.ReleaseAfterError.Release",
    'Lock.ReleaseAfterError.Grant': f"work-fails+{_PARKED_PAIR}",
    'Lock.ReleaseAfterError.Recheck': f"work-fails+reach+{_PARKED_PAIR}",
    # (its park is a transaction: reach's way goes through AcquireHead, which ticket 1 never calls)
    'Lock.Leave': f"contend+{_PAIR}+pre:Lock.Park=5xx*7+faults-by:1",
    'Lock.ClaimOnLeave': f"contend+{_PAIR}+pre:Lock.Park=5xx*7+faults-by:1",
}.items()})


def coalescing(fair: dict[str, str]) -> dict[str, str]:
    """The coalescing fair lock's situations (``FairNewest``, ``QueueLimit.keep_newest(1)``):
    the fair lock's states, reached as the fair lock's (``fair``: its situations before
    :data:`PLACED`) by its own runs (the third of a contended cell supersedes the second), and
    its own: the newcomer's take and wake-up of the ticket it superseded; the superseded
    waiter's exits (woken; or its park refused, or its look - the newcomer stopped right after
    taking its row, its token lost with it); the handoff's JUMP; and a releaser's wake-up of a
    superseded waiter whose row it took first (the newcomer's take slowed)."""
    return {
        **{state: _as_coalescing(situation) for state, situation in fair.items()},
        'Lock.TakeSuperseded': 'contend',
        'Lock.WakeSuperseded': 'contend',
        'Lock.DropSuperseded': 'contend',
        'Lock.DropSupersededOnLook': 'contend+pre:Lock.TakeSuperseded=stop-after',
        'Lock.Release.Jump': 'contend',
        'Lock.Release.WakeSuperseded': 'contend+pre:Lock.TakeSuperseded=throttle',
        'Lock.ReleaseAfterError.Jump': 'work-fails',
        'Lock.ReleaseAfterError.WakeSuperseded': 'work-fails+pre:Lock.TakeSuperseded=throttle',
        'Lock.Help.Jump': 'dead-holder+no-janitor',
        'Lock.Help.WakeSuperseded': 'dead-holder+no-janitor+pre:Lock.TakeSuperseded=throttle',
    }
