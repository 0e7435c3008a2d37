"""The fault matrix's first situations: how each workflow row's cells bring their participants
into the row's state, by hand, per kind (:data:`FIRST_PASS`; :mod:`tools.matrix.table` adds
the situations later passes found, :mod:`tools.matrix.trials` and :mod:`tools.matrix.placed`).

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

- ``pre:[<machine>/]<state>=<column>[*<times>]``: a preparatory fault (``times`` calls), placed as a column's (``5xx``,
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
- ``holds-long:<i>[,<j>...]``: those participants' works last ``roles.LONG_HOLD_MS`` (8 s,
  within the probe's timeout), so those behind them wait rounds and check the holders'
  liveness (a semaphore's other slot held while the dead holder's waits for its grace);
- ``stop:<k>@<i>/<state>``: participant ``<k>`` is stopped once participant ``<i>``'s first
  call of ``<state>`` returned (a holder alive when one waiter described it, ended when the
  next one does);
- ``faults-by:<i>``: the preparatory faults hit only participant ``<i>``'s calls (a park that
  fails through its whole Retry is one waiter's, not spread over the cell's waiters);
- ``client-waits:<s>``: the client participants wait ``<s>`` seconds (default
  ``roles.CLIENT_WAIT_S``): shorter than a hold, a client gives up its queue place;
- ``with:<role>,<role>,...``: the participants (``<kind>Section``: the kind as a
  :class:`LockedSection`, whose hold registers a presence token the waiters probe);
- ``as:<machine>``: the row's state run by another machine of the same definition (a mutex's
  sweep of a shared hold: ``RwMutex``, the mutex on read/write keys).

A row no situation of this stack can reach says why (:data:`tools.matrix.unreached.UNREACHABLE`);
its cells are not run.
"""

from __future__ import annotations

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
SHARED_HOLD: dict[str, str] = {
    'ReapLastReader': 'dead-holder',
    'ReapReader': 'dead-holder',
    'FreeEmptyShared': 'dead-holder',
    'DescribeReader': 'dead-holder',
    'RetireEndedReader': 'dead-holder',
}


def _sweep(section: str) -> dict[str, str]:
    return {f"{section}.{state}": situation for state, situation in SHARED_HOLD.items()}


FIRST_PASS: dict[str, dict[str, str]] = {
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
    'semaphore': {
        **_ONE_ITEM,
        'Lock.AcquireAgain': 'after-lost:Lock.Acquire',
        # a dead holder's slot (held for its grace) beside a slot held long twice over: the runs
        # behind wait for a slot for rounds (the liveness check; a section's presence probe)
        **{state: f"dead-holder+holds-long:1,2+with:{first},Semaphore,Semaphore,Semaphore"
           for state, first in (('Lock.Inspect', 'Semaphore'), ('Lock.DescribeHolder', 'Semaphore'),
                                ('Lock.ProbeHolder', 'SemaphoreSection'), ('Lock.Abandoned', 'SemaphoreSection'))},
    },
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
