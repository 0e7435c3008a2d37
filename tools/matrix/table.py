"""The fault matrix's table: its fault columns, which apply to which row (or why not), and the
situation each workflow row's cells bring their participants into so the row's state runs.

:data:`SITUATIONS` names every lock state of every kind, by hand: a state added to a kind
(a new row of :mod:`tools.matrix.rows`) has no situation until someone says how to reach it,
and :func:`uncovered` - run by ``tests/tools/test_fault_matrix.py`` on every synth - reports it, so
a new state cannot ship without a row in the matrix.

Situations (:mod:`tools.matrix.cells` runs them):

- ``contend``: two or three participants arrive together;
- ``work-fails``: the first participant's work fails (the release after an error);
- ``dead-holder``: the first participant is stopped inside its work while the others wait (the
  liveness check, the takeover of an ended holder, a reader's reap);
- ``dead-waiter``: a holder works while the second participant, queued, is stopped once it
  parked (holes in a queue: mark, skip, revoke, a wake-up of an ended waiter);
- ``client-waiter``: a workflow holds while the kind's :class:`LockClient` waits (a grant to a
  polling waiter);
- ``redrive``: the first participant is stopped inside its work and redriven (a resumed
  holder retires the acquisition it cannot prove it still holds);
- ``refused``: the record lock refuses its record (too large) and frees it;
- ``after-lost:<state>``: the response of ``<state>``'s call is lost first (its retry, the row,
  follows); ``work-fails+...``: with the first participant's work failing.

A situation is ``+``-joined parts: one of the above, then any of

- ``pre:[<machine>/]<state>=<column>``: a preparatory fault, placed as a column's (``5xx``,
  ``lost``, ``stop-after`` ...) on the first call of ``<state>`` by an execution of
  ``<machine>`` (default: the row's) of the cell: a wake-up that fails, a releaser stopped
  between two writes - what a row of a rare path needs first;
- ``reach``: the preparatory faults read from the row's machine's definition
  (:mod:`tools.matrix.paths`): each Catch on the way to the row's state, in the row's own part
  of the definition, that a fault can take - a call that fails (``5xx``, as often as its
  ``Retry`` tries it: a wake-up that fails, a grant that fails), or a write whose response is
  lost (``lost``: its retry is refused, its first try having applied) - so a new Catch path
  needs no new situation;
- ``waiter-dies``: the second participant is stopped once it parked, as in ``dead-waiter``,
  with any base (``dead-holder+waiter-dies``: a dead head of the queue behind a dead holder,
  which the third participant's own look must pass; ``work-fails+waiter-dies``);
- ``queued``: the first participant's work lasts twice the hold, so the others have queued
  and parked when its release runs;
- ``no-janitor``: the janitor's history reads of the cell's executions fail, as when its
  retries ran out, so the waiters' own liveness checks take over from an ended holder (a lock
  no waiter is left for then waits for its lease: documented);
- ``with:<role>,<role>,...``: the participants (``<kind>Section``: the kind as a
  :class:`LockedSection`, whose hold registers a presence token the waiters probe);
- ``as:<machine>``: the row's state run by another machine of the same definition (a mutex's
  sweep of a shared hold: ``RwMutex``, the mutex on read/write keys).

A row no situation of this stack can reach says why (:data:`UNREACHABLE`); its cells are not
run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from tools.matrix.rows import Row

#: Kinds whose items a DynamoDB transaction writes (a read/write lock's park and abandon, a
#: multi-key lock's acquire and release): a write there may meet ``TransactionConflictException``.
TRANSACTIONAL_KINDS = frozenset({"shared", "exclusive", "multikey", "client-rw", "janitor"})
#: Row kinds without an execution of their own.
CLIENT_KINDS = frozenset({"client-mutex", "client-fair", "client-rw"})


@dataclass(frozen=True)
class Column:
    """A fault: the error a call gets, whether it applied first, what happens right after it."""

    name: str
    error: str  # botocore's error code (a Step Functions call: :attr:`sfn_error`)
    after_call: bool = False
    then: str = ""  # "stop", "time out", "stop, redrive" - the caller's execution, right after the call
    reading: str = "strict"  # the redrive reading the cell runs under
    sfn_error: str = ""

    def error_for(self, row: Row) -> str:
        if row.operation == "TransactWriteItems" and self.error == "TransactionConflictException":
            return "TransactionCanceledException"  # a transaction is cancelled by a conflict
        return self.sfn_error if row.service == "stepfunctions" and self.sfn_error else self.error


COLUMNS: tuple[Column, ...] = (
    Column("5xx", "InternalServerError", sfn_error="ServiceUnavailable"),
    Column("throttle", "ThrottlingException"),
    Column("lost", "InternalServerError", after_call=True, sfn_error="ServiceUnavailable"),
    Column("stop-after", "InternalServerError", after_call=True, then="stop", sfn_error="ServiceUnavailable"),
    Column("timeout-after", "InternalServerError", after_call=True, then="time out", sfn_error="ServiceUnavailable"),
    Column("redrive", "InternalServerError", after_call=True, then="stop, redrive", sfn_error="ServiceUnavailable"),
    Column("redrive-reeval", "InternalServerError", after_call=True, then="stop, redrive", reading="reevaluate",
           sfn_error="ServiceUnavailable"),
    Column("conflict", "TransactionConflictException"),
)
COLUMN = {column.name: column for column in COLUMNS}


def not_applicable(row: Row, column: Column) -> str:
    """Why ``column`` does not apply to ``row`` ("" when it does); every column of a row no
    participant of the matrix can reach (:func:`unreachable`) says why."""
    if unreachable(row):
        return UNREACHABLE_WHY[unreachable(row)]
    if column.name == "conflict":
        if not row.writes:
            return "not a DynamoDB write (reads and Step Functions calls never meet a transaction conflict)"
        if row.kind not in TRANSACTIONAL_KINDS:
            return f"no transaction writes the items of a {row.kind} lock"
    if row.kind == "janitor" and column.then:
        return "the janitor is a Lambda with no execution: its crash right after a call is the lost response"
    if row.kind in CLIENT_KINDS and column.then in ("time out", "stop, redrive"):
        return "a client has no execution to time out or redrive (its crash right after a call: stop-after)"
    return ""


def cells(rows: Iterable[Row]) -> list[tuple[Row, Column]]:
    """Every applicable (row, column) of ``rows``."""
    return [(row, column) for row in rows for column in COLUMNS if not not_applicable(row, column)]


def situation(row: Row) -> str | None:
    """How a cell of ``row`` reaches its state (``None``: nobody said - the row is uncovered)."""
    if row.kind in CLIENT_KINDS or row.kind == "janitor":
        if row.state in SITUATIONS.get(row.kind, {}):
            return SITUATIONS[row.kind][row.state]
        return "dead-holder" if row.kind == "janitor" else "client-" + ("contend" if row.service == "dynamodb" else "waker")
    return SITUATIONS.get(row.kind, {}).get(row.state)


def unreachable(row: Row) -> str:
    """The key of :data:`UNREACHABLE_WHY` saying why no cell reaches ``row`` ("" when one does)."""
    return UNREACHABLE.get(row.kind, {}).get(row.state, "")


def uncovered(rows: Iterable[Row]) -> list[str]:
    """Rows with no cell definition (no situation), and situations of states that are gone."""
    rows = list(rows)
    missing = [f"{row.name}: no situation in tools/matrix/table.py SITUATIONS" for row in rows if situation(row) is None]
    seen = {(row.kind, row.state) for row in rows}
    kinds = {row.kind for row in rows}
    stale = [f"{kind}:{state}: in {name} but no such state" for name, table in (("SITUATIONS", SITUATIONS),
                                                                               ("UNREACHABLE", UNREACHABLE))
             for kind, states in table.items() if kind in kinds for state in states if (kind, state) not in seen]
    return missing + stale


#: The states of a kind whose lock is one item taken and given back as the mutex's.
_ONE_ITEM: dict[str, str] = {
    'Lock.Acquire': 'contend',
    'Lock.Inspect': 'dead-holder',
    'Lock.ProbeHolder': 'dead-holder',
    'Lock.Abandoned': 'dead-holder',
    'Lock.DescribeHolder': 'dead-holder',
    'Lock.ReleaseAfterError': 'work-fails',
    'Lock.Retire': 'redrive',
    'Lock.Release': 'contend',
    'Lock.ReleaseAgain': 'after-lost:Lock.Release',
}

#: A plain mutex waiter's liveness check on a key a read/write lock's readers own (a shared
#: hold, ``kinds.shared_hold.shared_hold_sweep``): reached only on a read/write key, so n/r in the
#: cells of these kinds (the ``shared`` cells' ``RwMutex`` runs them).
_SHARED_HOLD: dict[str, str] = {
    'ReapLastReader': 'dead-holder',
    'ReapReader': 'dead-holder',
    'FreeEmptyShared': 'dead-holder',
    'DescribeReader': 'dead-holder',
    'RetireEndedReader': 'dead-holder',
}


def _sweep(section: str) -> dict[str, str]:
    return {f"{section}.{state}": situation for state, situation in _SHARED_HOLD.items()}


SITUATIONS: dict[str, dict[str, str]] = {
    'mutex': {**_ONE_ITEM, **_sweep('Lock')},
    # a rate limit: three runs on two permits - the third reads, waits for its permit, admits
    'rate': {'Lock.Read': 'contend', 'Lock.Admit': 'contend'},
    'nested': {
        **_sweep('Outer'),
        **_sweep('Inner'),
        'Outer.Acquire': 'contend',
        'Outer.Inspect': 'dead-holder',
        'Outer.ProbeHolder': 'dead-holder',
        'Outer.Abandoned': 'dead-holder',
        'Outer.DescribeHolder': 'dead-holder',
        'Inner.Acquire': 'contend',
        'Inner.Inspect': 'dead-holder',
        'Inner.ProbeHolder': 'dead-holder',
        'Inner.Abandoned': 'dead-holder',
        'Inner.DescribeHolder': 'dead-holder',
        'Inner.Depart': 'contend',
        'Inner.Departed': 'contend',
        'Inner.Dismiss': 'contend',
        'Inner.Presence': 'contend',
        'Inner.PresenceUnsure': 'contend',
        'Inner.ReleaseAfterError': 'work-fails',
        'Inner.Retire': 'redrive',
        'Inner.Release': 'contend',
        'Inner.ReleaseAgain': 'after-lost:Inner.Release',
        'Outer.Depart': 'contend',
        'Outer.Departed': 'contend',
        'Outer.Dismiss': 'contend',
        'Outer.Presence': 'contend',
        'Outer.PresenceUnsure': 'contend',
        'Outer.ReleaseAfterError': 'work-fails',
        'Outer.Retire': 'redrive',
        'Outer.Release': 'contend',
        'Outer.ReleaseAgain': 'after-lost:Outer.Release',
    },
    'fair': {
        'Lock.Acquire': 'contend',
        'Lock.Enqueue': 'contend',
        'Lock.Requeue': 'dead-waiter',
        'Lock.DescribeHolder': 'dead-holder',
        'Lock.Park': 'contend',
        'Lock.Inspect': 'dead-holder',
        'Lock.ProbeHolder': 'dead-holder',
        'Lock.Abandoned': 'dead-holder',
        'Lock.Help.GrantPoller': 'client-waiter',
        'Lock.Help.Take': 'contend',
        'Lock.Help.TakeNext': 'dead-waiter',
        'Lock.Help.Skip': 'dead-waiter',
        'Lock.Help.Revoke': 'dead-waiter',
        'Lock.Help.Retake': 'dead-waiter',
        'Lock.Help.RetakeEarly': 'dead-waiter',
        'Lock.Help.Confirmed': 'dead-waiter',
        'Lock.Help.WakeAgainEarly': 'dead-waiter',
        'Lock.Help.DescribeGrantee': 'dead-waiter',
        'Lock.Help.Wake': 'contend',
        'Lock.Help.Grant': 'contend',
        'Lock.Help.Recheck': 'contend',
        'Lock.Help.Nudge': 'dead-waiter',
        'Lock.Help.WakeAgain': 'dead-waiter',
        'Lock.Help.Mark': 'dead-waiter',
        'Lock.Help.Served': 'dead-waiter',
        'Lock.Help.Unmark': 'dead-waiter',
        'Lock.AcquireHead': 'contend',
        'Lock.DropRow': 'dead-waiter',
        'Lock.Claim': 'contend',
        'Lock.Confirm': 'contend',
        'Lock.Leave': 'dead-waiter',
        'Lock.ClaimOnLeave': 'dead-waiter',
        'Lock.ReleaseAfterError.Take': 'work-fails',
        'Lock.ReleaseAfterError.Grant': 'work-fails',
        'Lock.ReleaseAfterError.TakeAny': 'work-fails',
        'Lock.ReleaseAfterError.Release': 'work-fails',
        'Lock.ReleaseAfterError.ReleaseQueuedAgain': 'work-fails+after-lost:Lock.ReleaseAfterError.ReleaseQueued',
        'Lock.ReleaseAfterError.ReleaseQueued': 'work-fails',
        'Lock.ReleaseAfterError.Mark': 'work-fails',
        'Lock.ReleaseAfterError.Served': 'work-fails',
        'Lock.ReleaseAfterError.Unmark': 'work-fails',
        'Lock.ReleaseAfterError.TakeNext': 'work-fails',
        'Lock.ReleaseAfterError.Skip': 'work-fails',
        'Lock.ReleaseAfterError.Revoke': 'work-fails',
        'Lock.ReleaseAfterError.Retake': 'work-fails',
        'Lock.ReleaseAfterError.RetakeEarly': 'work-fails',
        'Lock.ReleaseAfterError.Confirmed': 'work-fails',
        'Lock.ReleaseAfterError.WakeAgainEarly': 'work-fails',
        'Lock.ReleaseAfterError.DescribeGrantee': 'work-fails',
        'Lock.ReleaseAfterError.Wake': 'work-fails',
        'Lock.ReleaseAfterError.Recheck': 'work-fails',
        'Lock.ReleaseAfterError.Nudge': 'work-fails',
        'Lock.ReleaseAfterError.WakeAgain': 'work-fails',
        'Lock.ReleaseAfterError.GrantPoller': 'work-fails',
        'Lock.Retire': 'redrive',
        'Lock.Release.Take': 'contend',
        'Lock.Release.Grant': 'contend',
        'Lock.Release.TakeAny': 'dead-waiter',
        'Lock.Release.Release': 'contend',
        'Lock.Release.ReleaseQueuedAgain': 'after-lost:Lock.Release.ReleaseQueued',
        'Lock.Release.ReleaseQueued': 'contend',
        'Lock.Release.GrantPoller': 'client-waiter',
        'Lock.Release.Skip': 'dead-waiter',
        'Lock.Release.TakeNext': 'dead-waiter',
        'Lock.Release.Revoke': 'dead-waiter',
        'Lock.Release.Retake': 'dead-waiter',
        'Lock.Release.RetakeEarly': 'dead-waiter',
        'Lock.Release.Confirmed': 'dead-waiter',
        'Lock.Release.WakeAgainEarly': 'dead-waiter',
        'Lock.Release.DescribeGrantee': 'dead-waiter',
        'Lock.Release.Wake': 'contend',
        'Lock.Release.Recheck': 'contend',
        'Lock.Release.Nudge': 'dead-waiter',
        'Lock.Release.WakeAgain': 'dead-waiter',
        'Lock.Release.Mark': 'dead-waiter',
        'Lock.Release.Served': 'dead-waiter',
        'Lock.Release.Unmark': 'dead-waiter',
    },
    # a slot is the mutex's lock item; AcquireAgain retries the slot of an acquire attempt
    # that met a transient error (it may have applied)
    'semaphore': {**_ONE_ITEM, 'Lock.AcquireAgain': 'after-lost:Lock.Acquire'},
    # a rate limit with a concurrency limit: a semaphore's slot, then the rate's read and admit
    # (three runs on two slots and two permits); a permit past max_wait releases the slot
    # (RateSlotsBrief: the third run's permit comes after its max_wait)
    'rate-slots': {
        **_ONE_ITEM,
        'Lock.AcquireAgain': 'after-lost:Lock.Acquire',
        # a dead holder's slot beside a slot held through its permit's wait: five runs, so that
        # later ones wait for a slot for rounds (the liveness check; a section's presence probe)
        **{state: f"dead-holder+with:{first}," + ",".join(["RateSlots"] * 4)
           for state, first in (('Lock.Inspect', 'RateSlots'), ('Lock.DescribeHolder', 'RateSlots'),
                                ('Lock.ProbeHolder', 'RateSlotsSection'), ('Lock.Abandoned', 'RateSlotsSection'))},
        'Lock.Read': 'contend',
        'Lock.Admit': 'contend',
        'Lock.RateTimeoutRelease': 'contend+as:RateSlotsBrief+with:RateSlotsBrief,RateSlotsBrief,RateSlotsBrief',
    },
    'multikey': {
        'Lock.Acquire': 'contend',
        'Lock.Inspect': 'dead-holder',
        'Lock.ProbeHolder': 'dead-holder',
        'Lock.Abandoned': 'dead-holder',
        'Lock.DescribeHolder': 'dead-holder',
        'Lock.ReadFences': 'contend',
        'Lock.Release': 'contend',
        'Lock.ReleaseEachKey': 'contend',
        'Lock.ReleaseAfterError': 'work-fails',
        'Lock.ReleaseEachAfterErrorKey': 'work-fails',
        'Lock.RetireKey': 'redrive',
        **_sweep('Lock'),
    },
    'shared': {
        'Lock.Acquire': 'contend',
        'Lock.Rejoin': 'dead-waiter',
        'Lock.DropRow': 'dead-waiter',
        'Lock.Claim': 'contend',
        'Lock.Park': 'contend',
        'Lock.Enqueue': 'contend',
        'Lock.CountReaders': 'contend',  # (UNREACHABLE: only at the reader cap)
        'Lock.Requeue': 'dead-waiter',
        'Lock.Inspect': 'dead-holder',
        'Lock.Reap': 'dead-holder',
        'Lock.ReapLast': 'dead-holder',
        'Lock.RetireHolder': 'dead-holder',
        'Lock.DescribeHolder': 'dead-holder',
        'Lock.ReadPresence': 'dead-holder',
        'Lock.ProbeHolder': 'dead-holder',
        'Lock.RetireReader': 'dead-holder',
        'Lock.AbandonReader': 'dead-holder',
        'Lock.AbandonHolder': 'dead-holder',
        'Lock.Admit': 'contend',
        'Lock.Help.Look': 'contend',
        'Lock.Help.LookAgain': 'contend',
        'Lock.Help.WakeReader': 'contend',
        'Lock.Help.GrantRead': 'contend',
        'Lock.Help.Recheck': 'contend',
        'Lock.Help.GrantWrite': 'contend',
        'Lock.Help.WakeWriter': 'contend',
        'Lock.Help.GrantWritePolling': 'client-waiter',
        'Lock.Help.GrantReadPolling': 'client-waiter',
        'Lock.Help.Skip': 'dead-waiter',
        'Lock.Help.DropSkipped': 'dead-waiter',
        'Lock.Help.Mark': 'dead-waiter',
        'Lock.Admitted.Look': 'contend',
        'Lock.Admitted.LookAgain': 'contend',
        'Lock.Admitted.WakeReader': 'contend',
        'Lock.Admitted.GrantRead': 'contend',
        'Lock.Admitted.Recheck': 'contend',
        'Lock.Admitted.GrantWrite': 'contend',
        'Lock.Admitted.WakeWriter': 'contend',
        'Lock.Admitted.GrantWritePolling': 'client-waiter',
        'Lock.Admitted.GrantReadPolling': 'client-waiter',
        'Lock.Admitted.Skip': 'dead-waiter',
        'Lock.Admitted.DropSkipped': 'dead-waiter',
        'Lock.Leave': 'dead-waiter',
        'Lock.ClaimOnLeave': 'dead-waiter',
        'Lock.Release': 'contend',
        'Lock.ReleaseAgain': 'after-lost:Lock.Release',
        'Lock.ReleaseRead': 'contend',
        'Lock.ReleaseLast': 'contend',
        'Lock.ReleaseLastAgain': 'after-lost:Lock.ReleaseLast',
        'Lock.ReleaseRetire': 'contend',  # (UNREACHABLE: only after MAX_LEAVE_ROUNDS refused leaves)
        'Lock.Release.Handoff.WakeWriter': 'contend',
        'Lock.Release.Handoff.GrantWrite': 'contend',
        'Lock.Release.Handoff.Look': 'contend',
        'Lock.Release.Handoff.LookAgain': 'contend',
        'Lock.Release.Handoff.WakeReader': 'contend',
        'Lock.Release.Handoff.GrantRead': 'contend',
        'Lock.Release.Handoff.Recheck': 'contend',
        'Lock.Release.Handoff.GrantReadPolling': 'client-waiter',
        'Lock.Release.Handoff.GrantWritePolling': 'client-waiter',
        'Lock.Release.Handoff.Skip': 'dead-waiter',
        'Lock.Release.Handoff.DropSkipped': 'dead-waiter',
        'Lock.ReleaseAfterError': 'work-fails',
        'Lock.ReleaseAfterErrorAgain': 'work-fails+after-lost:Lock.ReleaseAfterError',
        'Lock.ReleaseAfterErrorRead': 'work-fails',
        'Lock.ReleaseAfterErrorLast': 'work-fails',
        'Lock.ReleaseAfterErrorLastAgain': 'work-fails+after-lost:Lock.ReleaseAfterErrorLast',
        'Lock.ReleaseAfterErrorRetire': 'work-fails',  # (UNREACHABLE: as Lock.ReleaseRetire)
        'Lock.ReleaseAfterError.Handoff.WakeWriter': 'work-fails',
        'Lock.ReleaseAfterError.Handoff.GrantWrite': 'work-fails',
        'Lock.ReleaseAfterError.Handoff.Look': 'work-fails',
        'Lock.ReleaseAfterError.Handoff.LookAgain': 'work-fails',
        'Lock.ReleaseAfterError.Handoff.WakeReader': 'work-fails',
        'Lock.ReleaseAfterError.Handoff.GrantRead': 'work-fails',
        'Lock.ReleaseAfterError.Handoff.Recheck': 'work-fails',
        'Lock.ReleaseAfterError.Handoff.GrantReadPolling': 'work-fails',
        'Lock.ReleaseAfterError.Handoff.GrantWritePolling': 'work-fails',
        'Lock.ReleaseAfterError.Handoff.Skip': 'work-fails',
        'Lock.ReleaseAfterError.Handoff.DropSkipped': 'work-fails',
        'Lock.Retire': 'redrive',
    },
    'exclusive': {
        'Lock.Acquire': 'contend',
        'Lock.Enqueue': 'contend',
        'Lock.Requeue': 'dead-waiter',
        'Lock.Inspect': 'dead-holder',
        'Lock.Reap': 'dead-holder',
        'Lock.ReapLast': 'dead-holder',
        'Lock.RetireHolder': 'dead-holder',
        'Lock.DescribeHolder': 'dead-holder',
        'Lock.ReadPresence': 'dead-holder',
        'Lock.ProbeHolder': 'dead-holder',
        'Lock.Park': 'contend',
        'Lock.Help.WakeWriter': 'contend',
        'Lock.Help.GrantWrite': 'contend',
        'Lock.Help.Look': 'contend',
        'Lock.Help.LookAgain': 'contend',
        'Lock.Help.WakeReader': 'contend',
        'Lock.Help.GrantRead': 'contend',
        'Lock.Help.Recheck': 'contend',
        'Lock.Help.GrantReadPolling': 'client-waiter',
        'Lock.Help.GrantWritePolling': 'client-waiter',
        'Lock.Help.Skip': 'dead-waiter',
        'Lock.Help.DropSkipped': 'dead-waiter',
        'Lock.Admit': 'contend',
        'Lock.DropRow': 'dead-waiter',
        'Lock.Claim': 'contend',
        'Lock.Leave': 'dead-waiter',
        'Lock.ClaimOnLeave': 'dead-waiter',
        'Lock.Release.Look': 'contend',
        'Lock.Release.LookAgain': 'contend',
        'Lock.Release.ReleaseAgain': 'after-lost:Lock.Release.Release',
        'Lock.Release.Release': 'contend',
        'Lock.Release.WakeWriter': 'contend',
        'Lock.Release.GrantWrite': 'contend',
        'Lock.Release.Recheck': 'contend',
        'Lock.Release.GrantRead': 'contend',
        'Lock.Release.WakeReader': 'contend',
        'Lock.Release.GrantReadPolling': 'client-waiter',
        'Lock.Release.GrantWritePolling': 'client-waiter',
        'Lock.Release.Skip': 'dead-waiter',
        'Lock.Release.DropSkipped': 'dead-waiter',
        'Lock.ReleaseAfterError.Look': 'work-fails',
        'Lock.ReleaseAfterError.LookAgain': 'work-fails',
        'Lock.ReleaseAfterError.ReleaseAgain': 'work-fails+after-lost:Lock.ReleaseAfterError.Release',
        'Lock.ReleaseAfterError.Release': 'work-fails',
        'Lock.ReleaseAfterError.WakeWriter': 'work-fails',
        'Lock.ReleaseAfterError.GrantWrite': 'work-fails',
        'Lock.ReleaseAfterError.Recheck': 'work-fails',
        'Lock.ReleaseAfterError.GrantRead': 'work-fails',
        'Lock.ReleaseAfterError.WakeReader': 'work-fails',
        'Lock.ReleaseAfterError.GrantReadPolling': 'work-fails',
        'Lock.ReleaseAfterError.GrantWritePolling': 'work-fails',
        'Lock.ReleaseAfterError.Skip': 'work-fails',
        'Lock.ReleaseAfterError.DropSkipped': 'work-fails',
        'Lock.Retire': 'redrive',
        'Lock.Help.Mark': 'dead-waiter',
        'Lock.RetireReader': 'dead-holder',
        'Lock.AbandonReader': 'dead-holder',
        'Lock.AbandonHolder': 'dead-holder',
    },
    'record': {
        'Lock.Acquire': 'contend',
        'Lock.Inspect': 'dead-holder',
        'Lock.ProbeHolder': 'dead-holder',
        'Lock.Abandoned': 'dead-holder',
        'Lock.DescribeHolder': 'dead-holder',
        'Lock.ReadRecord': 'contend',
        'Lock.Release': 'contend',
        'Lock.ReleaseAfterError': 'work-fails',
        'Lock.ReleaseAgain': 'after-lost:Lock.Release',
        'Lock.Retire': 'redrive',
        'Lock.FreeRefused': 'refused',
    },
}

#: Situations found by trying candidates per row that its first situation did not reach
#: (``--log`` runs of the ``lost`` column on moto, 2026-11-27): each reached its row at least once.
_FOUND: dict[str, dict[str, str]] = {
    'client-mutex': {
        'lock_protocol.CLIENT_TAKEOVER': 'dead-holder+with:Mutex,client-mutex,client-mutex',
    },
    'exclusive': {
        'Lock.DropRow': 'dead-holder+no-janitor+with:Writer,Writer,Writer',
        'Lock.Enqueue': 'contend+with:Writer,Writer,Writer',
        'Lock.Help.Recheck': 'dead-holder+no-janitor+with:Writer,Writer,Writer',
        'Lock.Help.WakeWriter': 'dead-holder+no-janitor+with:Writer,Writer,Writer',
        'Lock.Inspect': 'contend+with:Writer,Writer,Writer',
        'Lock.Park': 'contend+with:Writer,Writer,Writer',
        'Lock.ProbeHolder': 'dead-holder+with:WriterSection,Writer,Writer',
        'Lock.ReadPresence': 'contend+with:Writer,Writer,Writer',
        'Lock.Release.GrantWritePolling': 'contend+with:Writer,Reader,client-rw-write',
        'Lock.Release.WakeReader': 'contend+with:Writer,Writer,Reader',
        'Lock.ReleaseAfterError.GrantWritePolling': 'work-fails+with:Writer,Reader,client-rw-write',
        'Lock.ReleaseAfterError.Release': 'work-fails+with:Writer,Reader,client-rw-write',
        'Lock.ReleaseAfterError.WakeWriter': 'work-fails+with:Writer,Writer,Reader',
        'Lock.RetireHolder': 'dead-holder+no-janitor+with:Writer,Writer,Writer',
    },
    'fair': {
        'Lock.Abandoned': 'dead-holder+with:FairSection,Fair,Fair',
        'Lock.AcquireHead': 'dead-holder+no-janitor+with:Fair,Fair,Fair',
        'Lock.Claim': 'dead-holder+with:Fair,Fair,Fair',
        'Lock.DropRow': 'contend+with:Fair,Fair,Fair+pre:Lock.Release.Wake=5xx',
        'Lock.Help.Retake': 'dead-holder+no-janitor+with:Fair,Fair,Fair',
        'Lock.Help.Wake': 'dead-holder+no-janitor+with:Fair,Fair,Fair',
        'Lock.ProbeHolder': 'dead-holder+with:FairSection,Fair,Fair',
        'Lock.Release.Grant': 'contend+with:Fair,Fair,Fair+pre:Lock.Release.Wake=5xx',
        'Lock.Release.Retake': 'contend+with:Fair,Fair,Fair+pre:Lock.Release.Wake=5xx',
        'Lock.Release.RetakeEarly': 'contend+with:Fair,Fair,Fair+pre:Lock.Release.Wake=5xx',
        'Lock.Release.Revoke': 'contend+with:Fair,Fair,Fair+stop-others-at:Lock.Release.Wake+pre:Lock.Release.DescribeGrantee=5xx',
        'Lock.ReleaseAfterError.DescribeGrantee': 'work-fails+with:Fair,Fair,Fair+pre:Lock.ReleaseAfterError.Wake=5xx',
        'Lock.ReleaseAfterError.Retake': 'work-fails+with:Fair,Fair,Fair+pre:Lock.ReleaseAfterError.Wake=5xx',
        'Lock.ReleaseAfterError.Revoke': 'work-fails+with:Fair,Fair,Fair+pre:Lock.ReleaseAfterError.Wake=5xx',
    },
    'multikey': {
        'Lock.ProbeHolder': 'dead-holder+with:TransferSection,Transfer,Transfer',
    },
    'mutex': {
        'Lock.Abandoned': 'dead-holder+no-janitor+with:Nested,Mutex,Mutex',
        'Lock.ProbeHolder': 'dead-holder+with:Nested,Mutex,Mutex',
        'Lock.ReapLastReader': 'dead-holder+as:RwMutex+with:Reader,RwMutex,RwMutex',
        'Lock.RetireEndedReader': 'dead-holder+no-janitor+as:RwMutex+with:Reader,RwMutex,RwMutex',
    },
    'nested': {
        'Inner.Inspect': 'contend+with:Nested,Nested,Mutex',
    },
    'shared': {
        'Lock.Admit': 'dead-holder+no-janitor+with:Writer,Reader,Reader',
        'Lock.Admitted.GrantRead': 'dead-holder+no-janitor+with:Writer,Reader,Reader',
        'Lock.Admitted.Look': 'dead-holder+no-janitor+with:Writer,Reader,Reader',
        'Lock.Admitted.WakeReader': 'dead-holder+no-janitor+with:Writer,Reader,Reader',
        'Lock.Inspect': 'contend+with:Writer,Reader,Reader',
        'Lock.ProbeHolder': 'dead-holder+with:WriterSection,Reader,Reader',
        'Lock.ReadPresence': 'dead-holder+no-janitor+with:Writer,Reader,Reader',
        'Lock.ReleaseAfterError.Handoff.GrantWrite': 'work-fails+with:Reader,Writer,Writer',
        'Lock.RetireHolder': 'dead-holder+no-janitor+with:Writer,Reader,Reader',
    },
}
for _kind, _states in _FOUND.items():
    SITUATIONS.setdefault(_kind, {}).update(_states)

#: Situations of the third pass (``lost`` column, moto, 2026-11-27): rows the situations above
#: left n/r, each reached by the first of a few candidates built from the general parts - the
#: faults on the way read from the definition (``reach``: a wake-up or a grant that fails, a
#: release whose response was lost), a dead head of the queue behind a dead holder or a failed
#: work (``waiter-dies``), the readers and writers queued in the order the handoff needs
#: (``with:``); the fault lands on whichever of the cell's executions of the row's machine makes
#: the call first (the releaser, a helper, a second waiter).
_REACHED: dict[str, dict[str, str]] = {
    'exclusive': {
        'Lock.Admit': 'dead-holder+no-janitor+with:Reader,Writer,Writer',
        'Lock.ClaimOnLeave': 'dead-waiter+reach',
        'Lock.Help.DropSkipped': 'dead-holder+waiter-dies+with:Writer,Writer,Writer',
        'Lock.Help.GrantWrite': 'dead-holder+waiter-dies+no-janitor+with:Writer,Writer,Writer',
        'Lock.Help.Look': 'dead-holder+waiter-dies+with:Writer,Writer,Writer',
        'Lock.Help.LookAgain': 'dead-holder+waiter-dies+with:Writer,Writer,Writer',
        'Lock.Help.Skip': 'dead-holder+waiter-dies+with:Writer,Writer,Writer',
        'Lock.Help.WakeWriter': 'dead-holder+waiter-dies+no-janitor+with:Writer,Writer,Writer',
        'Lock.Leave': 'dead-waiter+reach',
        'Lock.ReadPresence': 'contend+with:Writer,Writer,Writer+reach',
        'Lock.ReapLast': 'dead-holder+no-janitor+with:Reader,Writer,Writer+reach',
        'Lock.Release.DropSkipped': 'dead-waiter+with:Writer,Writer,Reader',
        'Lock.Release.GrantRead': 'dead-waiter+with:Writer,Writer,Reader',
        'Lock.Release.ReleaseAgain': 'contend+reach',
        'Lock.Release.Skip': 'dead-waiter+with:Writer,Writer,Reader',
        'Lock.Release.WakeReader': 'dead-waiter+with:Writer,Writer,Reader',
        'Lock.ReleaseAfterError.DropSkipped': 'work-fails+waiter-dies+with:Writer,Writer,Reader',
        'Lock.ReleaseAfterError.GrantRead': 'work-fails+waiter-dies+with:Writer,Writer,Reader',
        'Lock.ReleaseAfterError.Recheck': 'work-fails+waiter-dies+with:Writer,Writer,Reader+reach',
        'Lock.ReleaseAfterError.ReleaseAgain': 'work-fails+reach',
        'Lock.ReleaseAfterError.Skip': 'work-fails+waiter-dies+with:Writer,Writer,Reader',
        'Lock.ReleaseAfterError.WakeReader': 'work-fails+waiter-dies+with:Writer,Writer,Reader',
        'Lock.RetireReader': 'dead-holder+no-janitor+with:Reader,Writer,Writer+reach',
    },
    'fair': {
        'Lock.DescribeHolder': 'dead-holder+waiter-dies+with:Fair,Fair,Fair',
        'Lock.Help.Grant': 'dead-holder+waiter-dies+no-janitor+with:Fair,Fair,Fair',
        'Lock.Help.Skip': 'dead-holder+waiter-dies+with:Fair,Fair,Fair',
        'Lock.Help.Take': 'dead-holder+waiter-dies+with:Fair,Fair,Fair',
        'Lock.Help.TakeNext': 'dead-holder+waiter-dies+with:Fair,Fair,Fair',
        'Lock.Help.Wake': 'dead-holder+no-janitor+queued+with:Fair,Fair,Fair',
        'Lock.Leave': 'dead-waiter+reach',
        'Lock.Release.DescribeGrantee': 'contend+queued+with:Fair,Fair,Fair+reach',
        'Lock.Release.Recheck': 'contend+reach',
        'Lock.Release.ReleaseQueuedAgain': 'dead-waiter+with:Fair,Fair,Fair+reach',
        'Lock.Release.Skip': 'dead-waiter+reach',
        'Lock.Release.Unmark': 'dead-waiter+reach',
        'Lock.ReleaseAfterError.Recheck': 'work-fails+reach',
        'Lock.ReleaseAfterError.ReleaseQueuedAgain': 'work-fails+waiter-dies+with:Fair,Fair,Fair+reach',
        'Lock.ReleaseAfterError.Retake': 'work-fails+waiter-dies+with:Fair,Fair,Fair+reach',
        'Lock.ReleaseAfterError.Revoke': 'work-fails+waiter-dies+with:Fair,Fair,Fair+reach',
        'Lock.ReleaseAfterError.Skip': 'work-fails+waiter-dies+with:Fair,Fair,Fair+reach',
        'Lock.ReleaseAfterError.TakeAny': 'work-fails+waiter-dies+with:Fair,Fair,Fair+reach',
        'Lock.ReleaseAfterError.TakeNext': 'work-fails+waiter-dies+with:Fair,Fair,Fair+reach',
        'Lock.ReleaseAfterError.Wake': 'work-fails+waiter-dies+with:Fair,Fair,Fair',
    },
    'multikey': {
        'Lock.ReleaseEachAfterErrorKey': 'work-fails+reach',
        'Lock.ReleaseEachKey': 'contend+reach',
    },
    'mutex': {
        'Lock.DescribeReader': 'dead-holder+no-janitor+as:RwMutex+with:Reader,Reader,RwMutex',
    },
    'nested': {
        'Inner.PresenceUnsure': 'contend+reach',
        'Outer.PresenceUnsure': 'contend+reach',
    },
    'record': {
        'Lock.ReleaseAfterError': 'work-fails+reach',
    },
    'shared': {
        'Lock.ClaimOnLeave': 'dead-holder+no-janitor+with:Reader,Writer,Reader+reach',
        'Lock.DropRow': 'dead-holder+with:ReaderSection,Writer,Reader',
        'Lock.Help.Look': 'dead-holder+waiter-dies+with:Writer,Writer,Reader',
        'Lock.Help.LookAgain': 'dead-holder+waiter-dies+with:Writer,Writer,Reader',
        'Lock.Help.Skip': 'dead-holder+waiter-dies+with:Writer,Writer,Reader',
        'Lock.Help.WakeWriter': 'dead-holder+waiter-dies+no-janitor+with:Writer,Writer,Reader',
        'Lock.Inspect': 'dead-holder+no-janitor+with:Reader,Writer,Reader+reach',
        'Lock.Leave': 'contend+queued+with:Writer,Reader,Reader+reach',
        'Lock.Park': 'dead-holder+with:ReaderSection,Writer,Reader',
        'Lock.ProbeHolder': 'dead-holder+with:WriterSection,Reader,Reader+reach',
        'Lock.Release.Handoff.GrantRead': 'dead-waiter+with:Reader,Writer,Reader',
        'Lock.Release.Handoff.LookAgain': 'dead-waiter+with:Reader,Writer,Reader',
        'Lock.Release.Handoff.Recheck': 'dead-waiter+with:Reader,Writer,Reader+reach',
        'Lock.Release.Handoff.Skip': 'dead-waiter+with:Reader,Writer,Reader',
        'Lock.Release.Handoff.WakeReader': 'dead-waiter+with:Reader,Writer,Reader',
        'Lock.ReleaseAfterError.Handoff.DropSkipped': 'work-fails+waiter-dies+with:Reader,Writer,Reader',
        'Lock.ReleaseAfterError.Handoff.GrantRead': 'work-fails+waiter-dies+with:Reader,Writer,Reader',
        'Lock.ReleaseAfterError.Handoff.GrantWrite': 'work-fails+queued+with:Reader,Writer,Reader',
        'Lock.ReleaseAfterError.Handoff.LookAgain': 'work-fails+waiter-dies+with:Reader,Writer,Reader',
        'Lock.ReleaseAfterError.Handoff.Recheck': 'work-fails+waiter-dies+with:Reader,Writer,Reader+reach',
        'Lock.ReleaseAfterError.Handoff.Skip': 'work-fails+waiter-dies+with:Reader,Writer,Reader',
        'Lock.ReleaseAfterError.Handoff.WakeReader': 'work-fails+waiter-dies+with:Reader,Writer,Reader',
        'Lock.ReleaseAfterError.Handoff.WakeWriter': 'work-fails+queued+with:Reader,Writer,Reader',
        'Lock.ReleaseAfterErrorAgain': 'work-fails+reach',
        'Lock.ReleaseAfterErrorRead': 'work-fails+reach',
        'Lock.ReleaseAgain': 'dead-waiter+with:Reader,Writer,Reader+reach',
        'Lock.ReleaseRead': 'contend+reach',
    },
}
for _kind, _states in _REACHED.items():
    SITUATIONS.setdefault(_kind, {}).update(_states)

#: A client waiter's liveness check of a workflow holder stopped at work: a section's (its
#: presence token closed: the probe, then ABANDONED - refused while the token is younger than
#: the settle, the call made all the same), or a workflow's without a token, no janitor (the
#: execution described: RETIRE_BY its stop + grace).
_CLIENT_LIVENESS: dict[str, dict[str, str]] = {
    'client-mutex': {
        'SendTaskHeartbeat': 'dead-holder+with:Nested,client-mutex,client-mutex',
        'lock_protocol.ABANDONED': 'dead-holder+with:Nested,client-mutex,client-mutex',
        'DescribeExecution': 'dead-holder+no-janitor+with:Mutex,client-mutex,client-mutex',
        'lock_protocol.RETIRE_BY': 'dead-holder+no-janitor+with:Mutex,client-mutex,client-mutex',
    },
    'client-fair': {
        'SendTaskHeartbeat': 'dead-holder+with:FairSection,client-fair,client-fair',
        'lock_protocol.ABANDONED': 'dead-holder+with:FairSection,client-fair,client-fair',
        'lock_protocol.RETIRE_BY': 'dead-holder+no-janitor+with:Fair,client-fair,client-fair',
    },
    # a read/write client writer behind a writer's or a reader's hold (the presence on its row)
    'client-rw': {
        'SendTaskHeartbeat': 'dead-holder+with:WriterSection,client-rw-write,client-rw-write',
        # (no janitor: its retire of the stopped hold would end the lease before the client's
        # abandon could shorten it, and the client would not send it)
        'lock_protocol.RETIRE_BY+shared_protocol.GONE_ROW':
            'dead-holder+no-janitor+with:WriterSection,client-rw-write,client-rw-write',
        'shared_protocol.GONE_ROW+shared_protocol.RETIRE_GONE_READER':
            'dead-holder+no-janitor+with:ReaderSection,client-rw-write,client-rw-write',
        'DescribeExecution': 'dead-holder+no-janitor+with:Writer,client-rw-write,client-rw-write',
        'lock_protocol.RETIRE_BY': 'dead-holder+no-janitor+with:Writer,client-rw-write,client-rw-write',
        'shared_protocol.RETIRE_GONE_READER': 'dead-holder+no-janitor+with:Reader,client-rw-write,client-rw-write',
    },
}
for _kind, _states in _CLIENT_LIVENESS.items():
    SITUATIONS.setdefault(_kind, {}).update(_states)


#: Situations of the fourth pass (issue 25): the fair lock's rare paths, reached by placing two
#: participants' calls in the order the path needs (``gate:``, :class:`tools.matrix.cells.Gate`)
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
_PLACED: dict[str, dict[str, str]] = {
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
    },
}
#: (the coalescing lock's rows keep the fair lock's situations of before: a coalescing third
#: participant supersedes the second, which these orders do not foresee - not yet tried there)
_FAIR_UNPLACED = dict(SITUATIONS['fair'])
for _kind, _states in _PLACED.items():
    SITUATIONS.setdefault(_kind, {}).update(_states)


def _as_coalescing(situation: str) -> str:
    """A fair row's situation for the coalescing fair lock's machine (``FairNewest``)."""
    return re.sub(r"\bFair(Section)?\b", "FairNewest", situation)


#: The coalescing fair lock (``FairNewest``, ``QueueLimit.keep_newest(1)``): the fair lock's states,
#: reached as the fair lock's by its own runs (the third of a contended cell supersedes the
#: second), and its own: the newcomer's take and wake-up of the ticket it superseded; the
#: superseded waiter's exits (woken; or its park refused, or its look - the newcomer stopped
#: right after taking its row, its token lost with it); the handoff's JUMP; and a releaser's
#: wake-up of a superseded waiter whose row it took first (the newcomer's take slowed).
SITUATIONS['coalesce'] = {
    **{state: _as_coalescing(situation) for state, situation in _FAIR_UNPLACED.items()},
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

#: Rows whose situation a witness run (``--reach``: the situation without a fault, the row's
#: calls only counted) found not to make the row's call, each with why: their cells end ``n/r``
#: in every column (moto, 2026-11-28: the fair rows; docs/safety.md says which were run);
#: ``tests/tools/test_fault_matrix.py`` keeps this list from growing unnoticed.
NOT_REACHED: dict[str, dict[str, str]] = {
    'fair': {
        'Lock.Help.GrantPoller': "the helper grants a polling waiter (a LockClient) whose turn came while the "
                                 "lock was free: the client-waiter cells' client is granted by the releaser",
        'Lock.Help.WakeAgain': "the helper's grantee parks again after its wake-up failed: not yet placed "
                               "(the releaser's, Lock.Release.WakeAgain, is)",
        'Lock.Help.WakeAgainEarly': "as Lock.Help.WakeAgain",
        'Lock.Help.Unmark': "the helper marks ticket 1's row again only while the release's mark is younger than a "
                            "park timeout, and the helper looks when its own park times out: the gates order the "
                            "waiter's take between the helper's mark and read, but not that the mark is still young",
        'Lock.ClaimOnLeave': "its Leave needs one waiter's park to fail through its Retry (7 tries, up to a minute "
                             "of backoff): a preparatory fault hits the first calls of any of the cell's waiters, so "
                             "neither fails through; a fault on one participant's calls would place it",
        'Lock.Leave': "as Lock.ClaimOnLeave (the cells of the first passes reached it now and then)",
        'Lock.ReleaseAfterError.Nudge': "a release's grant refused by another's handoff: only when the releaser's "
                                        "hold was taken over during its handoff (its lease ran out)",
        'Lock.Release.Nudge': "as Lock.ReleaseAfterError.Nudge",
    },
}

#: Why a row cannot be reached by any cell of this stack (:data:`UNREACHABLE`): its cells are
#: not run, and the table prints the reason in place of ``n/r``.
UNREACHABLE_WHY: dict[str, str] = {
    "mutex key": "a plain mutex waiter's sweep of a read/write key's shared hold: this machine's keys are in a "
                 "namespace no reader ever holds (the same states run in the mutex:Lock.* cells, on a read/write "
                 "key as RwMutex)",
    "legacy item": "frees `{owner: shared, readers: 0}` with no reader entry, the item the first protocol's "
                   "two-write leave left (L1); today's last leave frees the hold in the same write, so no "
                   "participant can write that item",
    "no coalescing section": "probes a holder's presence token: only a LockedSection registers one, and the "
                             "matrix's coalescing lock is a LockedWorkflow (presence off); the same states of "
                             "the fair lock run in the fair:Lock.* cells (FairSection)",
    "no coalescing poller": "grants a polling waiter (a LockClient, an EXPRESS run): the matrix's coalescing "
                            "participants park; the same state of the fair lock runs in the fair:Lock.* cells",
    "no record section": "probes a holder's presence token: only a LockedSection registers one, and the matrix's "
                         "record lock is a LockedWorkflow (presence off); tests/lock/test_lock_record.py::"
                         "test_a_record_held_by_a_cancelled_branch_is_free_after_its_grace covers it",
    "reader cap": "runs only when a reader's enqueue is refused at the reader cap (shared_protocol.MAX_READERS "
                  "readers on the key): a cell has three participants; tests/lock/test_shared_lock.py::"
                  "test_a_reader_past_the_reader_cap_is_refused_before_it_writes_and_a_writer_still_works covers it",
    "leave rounds": "runs only after shared_protocol.MAX_LEAVE_ROUNDS leaves in a row were refused (the readers' "
                    "count moving between each read and write): a cell has three participants; tests/"
                    "test_shared_lock.py::test_a_readers_leave_refused_round_after_round_retires_its_entry_at_the_cap "
                    "covers it",
}
UNREACHABLE: dict[str, dict[str, str]] = {
    "mutex": {"Lock.FreeEmptyShared": "legacy item"},
    "nested": {f"{section}.{state}": "mutex key" for section in ("Outer", "Inner") for state in _SHARED_HOLD},
    "multikey": {f"Lock.{state}": "mutex key" for state in _SHARED_HOLD},
    "record": {"Lock.ProbeHolder": "no record section", "Lock.Abandoned": "no record section"},
    "shared": {"Lock.CountReaders": "reader cap", "Lock.ReleaseRetire": "leave rounds",
               "Lock.ReleaseAfterErrorRetire": "leave rounds"},
    "coalesce": {"Lock.ProbeHolder": "no coalescing section", "Lock.Abandoned": "no coalescing section",
                 **{f"Lock.{run}.GrantPoller": "no coalescing poller" for run in ("Release", "ReleaseAfterError", "Help")}},
}
