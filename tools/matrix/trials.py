"""Situations the matrix's trial passes found for rows their first situation left ``n/r``
(runs of the ``lost`` column on moto, 2026-11-27): each reached its row at least once.
:mod:`tools.matrix.table` lays them over :data:`tools.matrix.situations.FIRST_PASS`."""

from __future__ import annotations

#: Situations found by trying candidates per row that its first situation did not reach
#: (``--log`` runs of the ``lost`` column on moto, 2026-11-27): each reached its row at least once.
FOUND: dict[str, dict[str, str]] = {
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

#: Situations of the third pass (``lost`` column, moto, 2026-11-27): rows the situations above
#: left n/r, each reached by the first of a few candidates built from the general parts - the
#: faults on the way read from the definition (``reach``: a wake-up or a grant that fails, a
#: release whose response was lost), a dead head of the queue behind a dead holder or a failed
#: work (``waiter-dies``), the readers and writers queued in the order the handoff needs
#: (``with:``); the fault lands on whichever of the cell's executions of the row's machine makes
#: the call first (the releaser, a helper, a second waiter).
REACHED: dict[str, dict[str, str]] = {
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

#: A client waiter's liveness check of a workflow holder stopped at work: a section's (its
#: presence token closed: the probe, then ABANDONED - refused while the token is younger than
#: the settle, the call made all the same), or a workflow's without a token, no janitor (the
#: execution described: RETIRE_BY its stop + grace).
CLIENT_LIVENESS: dict[str, dict[str, str]] = {
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
#: A client waiter that gives up its queue place (``LockClient.leave_queue``: LEAVE_PRESENT on
#: its row, then a look at the lock): it waits 3 s behind a client holding 8 s and a parked
#: workflow waiter.
CLIENT_GIVES_UP: dict[str, dict[str, str]] = {
    'client-fair': {
        'fair_protocol.LEAVE_PRESENT': 'contend+holds-long:0+client-waits:3+with:client-fair,Fair,client-fair',
    },
}
