"""The read/write lock's ticket queue (:mod:`shared_protocol`, steps 1 to 4 and 7): the fast
paths, the tickets, the grants and claims on the lock item, the park on a waiter's row and the
janitor's dequeue - the fair lock's queue (:mod:`fair_protocol`) with a kind on each row - and
the holds an execution took through them, read from its history.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines.fair_protocol import (
    LEFT,
    NOBODY_QUEUES,
    READY,
    SERVED,
    row_key,
    with_actions,
)
from locked_workflow.state_machines.lock_protocol import (
    ACQUIRE,
    ACQUIRED_AT,
    EXPIRES_AT,
    FENCE,
    GRACE,
    OWNER,
    LockWrite,
    ScheduledTask,
)
from locked_workflow.state_machines.shared_hold import (
    ALL_FREE,
    FREE,
    KIND,
    READ,
    READER_PLACEHOLDER,
    READER_PREFIX,
    READERS,
    ROOM,
    SHARE,
    UNWRITER,
    WRITE,
    WRITER_FREE,
    arguments,
)

# --------------------------------------------------------------------------------------
# 3. The writes on the lock item: entering
# --------------------------------------------------------------------------------------

#: FAST_READ: enter as a reader - free of writers, nobody queues, room for my entry. Values
#: ``:me``, ``:stale``, ``:now``, ``:shared``, ``:entry``, ``:one``, ``:maxReaders``.
FAST_READ = LockWrite(
    update=f"SET {', '.join(SHARE)} REMOVE {', '.join(UNWRITER)} ADD #{READERS} :one",
    condition=f"attribute_not_exists({READER_PLACEHOLDER}) AND ({WRITER_FREE}) AND {NOBODY_QUEUES} AND {ROOM}",
)
#: FAST_WRITE: the mutex's acquire - free of readers and writers and nobody queues (or mine:
#: a retry whose response was lost). Values as ACQUIRE's plus ``:shared``, ``:zero``.
FAST_WRITE = LockWrite(
    update=ACQUIRE.update,
    condition=f"#{OWNER} = :me OR (({ALL_FREE}) AND {NOBODY_QUEUES})",
)
#: ENQUEUE_*: the fair lock's ticket (``ALL_NEW``: ``tickets`` is mine), refused when my fast
#: path would enter now - and a reader's when the key has :data:`MAX_READERS` readers (so
#: both of a reader's first writes are refused at the cap: it reads ``readers`` and fails
#: ``Lock.TooManyReaders``). Values: those of the fast path's condition plus ``:zero``, ``:one``.
ENQUEUE_READ = LockWrite(update=fair.ENQUEUE.update,
                         condition=f"NOT (({WRITER_FREE}) AND {NOBODY_QUEUES}) AND {ROOM}")
ENQUEUE_WRITE = LockWrite(update=fair.ENQUEUE.update, condition=f"NOT (({ALL_FREE}) AND {NOBODY_QUEUES})")

#: GRANT_READ: admit the reader ``#reader`` as ticket ``:ticket`` (``:prev`` = ``:ticket`` - 1),
#: by whoever may pass the head - its holder ``:me`` (a writer, freed by this write), anyone
#: while no writer holds - or the reader itself (``:me``, the head). ``:entry``: a claim-window
#: lease for a reader woken by a handoff, its own lease when it admits itself. Refused at
#: :data:`MAX_READERS` readers (the handoff stops; the reader, the head, is refused
#: ``Lock.TooManyReaders`` at its next look).
GRANT_READ = LockWrite(
    update=f"SET {', '.join(SHARE)}, #{SERVED} = :ticket REMOVE {', '.join(UNWRITER)} ADD #{READERS} :one",
    condition=f"attribute_not_exists({READER_PLACEHOLDER}) AND #{SERVED} = :prev AND ({WRITER_FREE}) AND {ROOM}",
)
#: GRANT_WRITE: the key to the writer ``:next`` as ticket ``:ticket`` (the head itself:
#: ``:next`` = ``:me``), free of readers and writers (or mine: a writer handing over). ``:expiresAt``:
#: a claim-window lease for a woken writer, its own lease for the head itself. ``ALL_NEW``: the
#: fence.
GRANT_WRITE = LockWrite(
    update=(
        f"SET #{OWNER} = :next, #{ACQUIRED_AT} = :now, #{EXPIRES_AT} = :expiresAt, #{GRACE} = :grace, "
        f"#{SERVED} = :ticket ADD #{FENCE} :one"
    ),
    condition=f"#{SERVED} = :prev AND ({ALL_FREE})",
)
#: SKIP: pass over ticket ``:ticket`` (its waiter is gone) - its holder (a writer) or anyone
#: while no writer holds.
SKIP = LockWrite(update=f"SET #{SERVED} = :ticket", condition=f"#{SERVED} = :prev AND ({WRITER_FREE})")
#: CLAIM_READ: my entry exists (granted, or mine from an earlier attempt whose response was
#: lost, or a redriven reader's) -> my own lease on it. Also a reader's REFRESH.
CLAIM_READ = LockWrite(update=f"SET {READER_PLACEHOLDER} = :entry", condition=f"attribute_exists({READER_PLACEHOLDER})")
#: CLAIM_WRITE: the writer ``:me`` granted ticket ``:ticket`` takes its own lease.
CLAIM_WRITE = LockWrite(update=f"SET #{EXPIRES_AT} = :expiresAt",
                        condition=f"#{OWNER} = :me AND #{SERVED} = :ticket")

# --------------------------------------------------------------------------------------
# 4. The writes on rows
# --------------------------------------------------------------------------------------

#: PARK (a row, in a transaction with :data:`PARK_UNLESS`): my token and kind, unless I left.
#: A hole mark of a helper is cleared (I am no hole). Values ``:me``, ``:token``, ``:lease``,
#: ``:grace``, ``:kind``.
PARK = LockWrite(update=with_actions(fair.PARK.update, set_=[f"#{KIND} = :kind"], remove=[f"#{READY}"]),
                 condition=f"attribute_not_exists(#{LEFT})")
#: The park's ConditionCheck on the lock item, by kind: ticket ``:ticket`` was not passed, and
#: may not be admitted now. Values: the kind's free condition's, ``:ticket``, ``:prev``.
PARK_UNLESS = {kind: LockWrite(update="", condition=f"#{SERVED} < :ticket AND NOT (#{SERVED} = :prev AND ({free}))")
               for kind, free in FREE.items()}
#: MARK (a helper, at a ticket whose row never came) and LEAVE (a waiter giving up) are the
#: fair lock's.
MARK, LEAVE = fair.MARK, fair.LEAVE
#: DEQUEUE (the janitor, for a stopped waiter; the parks it finds: ``fair_protocol.
#: enqueues_in_history``): LEAVE, but only on the row that waiter parked on - never a row a
#: claim or a requeue deleted since (an item nobody would ever read or delete). Values ``:me``,
#: ``:one``.
DEQUEUE = LockWrite(update=LEAVE.update, condition=f"#{OWNER} = :me")


def park_transaction(table: str, key: str, ticket: int, kind: str, row_values: Mapping[str, Any],
                     lock_values: Mapping[str, Any]) -> list[dict]:
    """TransactItems of a park: the row ``!<ticket>!key`` and the lock item's check."""
    check = arguments(key, PARK_UNLESS[kind], lock_values)
    update = arguments(row_key(key, ticket), PARK, {**row_values, ":kind": {"S": kind}})
    del update["ReturnValues"]
    return [{"ConditionCheck": {"TableName": table, **check}}, {"Update": {"TableName": table, **update}}]


def row_kind(row: Mapping[str, Any] | None) -> str:
    """What a row's waiter wants (a row without a kind is a writer's)."""
    return ((row or {}).get(KIND) or {}).get("S", WRITE)


def holds_in_history(tasks: Iterable[ScheduledTask], *, table_name: str) -> list[tuple[str, str, str]]:
    """``(stored key, owner, READ or WRITE)`` of every hold an execution *attempted for itself*
    on ``table_name`` that the mutex's ``acquisitions_in_history`` does not find: a reader's
    entry (``FAST_READ``, a ``GRANT_READ`` admitting itself, ``CLAIM_READ``) and a woken
    writer's ``CLAIM_WRITE``. The janitor retires them (``RETIRE_READER`` / the mutex's
    RETIRE) when the execution ended without leaving. A ``GRANT_READ`` this execution ran for
    *another* reader (a handoff) is not its hold and is not listed."""
    found: dict[tuple[str, str, str], None] = {}
    for task in tasks:
        p = task.parameters
        if task.resource != "updateItem" or p.get("TableName") != table_name:
            continue
        condition, values = p.get("ConditionExpression"), p.get("ExpressionAttributeValues") or {}
        (key,) = p["Key"].values()
        if condition in (FAST_READ.condition, GRANT_READ.condition, CLAIM_READ.condition):
            owner = str((p.get("ExpressionAttributeNames") or {}).get(READER_PLACEHOLDER, ""))[len(READER_PREFIX):]
            if owner and (condition != GRANT_READ.condition or values.get(":me", {}).get("S") == owner):
                found[(key["S"], owner, READ)] = None
        elif condition == CLAIM_WRITE.condition:
            found[(key["S"], values[":me"]["S"], WRITE)] = None
    return list(found)
