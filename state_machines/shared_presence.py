"""The presence of a read/write lock's hold (:mod:`shared_protocol`, step 4b): one row per
hold, where its branch registers its callback task's token, and the writes that read a closed
token as a cancelled branch (the probe's retire, the janitor's delete).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines.lock_protocol import (
    ACQUIRED_AT,
    EXPIRES_AT,
    PRESENCE,
    PRESENCE_AT,
    PRESENCE_CLOSED,
    PRESENCE_OF,
    RETIRE_BY,
    LockWrite,
    ScheduledTask,
)
from locked_workflow.state_machines.shared_hold import READER_PLACEHOLDER, arguments

# --------------------------------------------------------------------------------------
# 4b. Presence (a cancelled holder's branch): one row per hold
# --------------------------------------------------------------------------------------

#: A hold's presence row: this prefix + its owner (``<execution ARN>#<uuid>``: one section
#: entry, so one key and one hold at a time - a redrive's new acquisition of the same owner
#: is told from the old by ``acquiredAt``). The ``!`` keeps it out of the stored keys (those
#: start with a namespace, which has no ``!``) and out of ``locks list``, like a queue row;
#: its length does not depend on the lock key (an owner is at most ~250 bytes).
#:
#: Why a row and not the lock item (the mutex's PRESENT): a task token is ~700+ bytes with
#: AWS-sized tokens - one per reader on the one lock item would add ~1 KB per concurrent
#: reader to every write's units and reach the 400 KB item limit at a few hundred readers.
#: A writer uses a row too: one mechanism for both, and a writer's token never stays on the
#: lock item under the shared hold that follows it.
PRESENCE_ROW_MARK = "!presence!"


def presence_row_key(owner: str) -> str:
    """The presence row of the hold ``owner``."""
    return f"{PRESENCE_ROW_MARK}{owner}"


def presence_row_key_expression(owner: str) -> str:
    """JSONata: :func:`presence_row_key` of the owner the expression evaluates to."""
    return f"'{PRESENCE_ROW_MARK}' & ({owner})"


#: The acquisition ``:acquiredAt`` has not departed (its row's mark is older, or absent).
_NOT_DEPARTED = f"(attribute_not_exists(#{PRESENCE_CLOSED}) OR #{PRESENCE_CLOSED} < :acquiredAt)"
#: PRESENT_ROW: the hold's presence branch registers its callback task's token (a
#: ``.waitForTaskToken`` UpdateItem that parks until the work is over: the mutex's PRESENT on
#: a row of its own), never after this acquisition departed (:data:`DEPART_ROW`). It may
#: overwrite an earlier token of the same acquisition (a retried registration: that token is
#: closed) or of an earlier acquisition of the owner (a redrive). Values ``:token``,
#: ``:acquiredAt``, ``:now``.
PRESENT_ROW = LockWrite(
    update=f"SET #{PRESENCE} = :token, #{PRESENCE_OF} = :acquiredAt, #{PRESENCE_AT} = :now",
    condition=_NOT_DEPARTED,
)
#: DEPART_ROW: the work is over (or the registration could not be ruled in): no token may be
#: registered for this acquisition any more; the one registered before, if any, is read after
#: it and its branch dismissed (the mutex's DEPART, on the row: the two writes are on one item,
#: so whichever comes first the other sees it). Never moves the mark back. Values
#: ``:acquiredAt``.
DEPART_ROW = LockWrite(
    update=f"SET #{PRESENCE_CLOSED} = :acquiredAt",
    condition=f"attribute_not_exists(#{PRESENCE_CLOSED}) OR #{PRESENCE_CLOSED} <= :acquiredAt",
)
#: GONE_ROW (a conditional Delete, in :func:`gone_transaction`): the probe found the token of
#: acquisition ``:acquiredAt`` closed (``SendTaskHeartbeat``: ``TaskTimedOut``), it is still
#: the row's token, that acquisition never departed, and the token is older than the mutex's
#: ``PRESENCE_SETTLE_MS`` (a younger closed token may be a failed registration attempt, whose
#: retry or DEPART_ROW follows within that time): its branch ended without releasing. Values
#: ``:token``, ``:acquiredAt``, ``:settledBefore``.
GONE_ROW = LockWrite(
    update="",
    condition=(
        f"#{PRESENCE} = :token AND #{PRESENCE_OF} = :acquiredAt AND #{PRESENCE_AT} <= :settledBefore "
        f"AND {_NOT_DEPARTED}"
    ),
)
#: RETIRE_GONE_READER / RETIRE_GONE_WRITER (beside GONE_ROW, in one transaction): that exact
#: acquisition's lease now ends at ``:until`` (the probe's now + its stop grace: work the
#: branch started may still run), only if that is sooner - a retire never lengthens a lease,
#: and a second probe of the same token is refused (the row is gone anyway). The janitor
#: retires with the same writes (``:until``: the execution's end + the grace it read). Values
#: ``:acquiredAt``, ``:until`` (and the writer's ``:owner``).
RETIRE_GONE_READER = LockWrite(
    update=f"SET {READER_PLACEHOLDER}.#{EXPIRES_AT} = :until",
    condition=f"{READER_PLACEHOLDER}.#{ACQUIRED_AT} = :acquiredAt AND {READER_PLACEHOLDER}.#{EXPIRES_AT} > :until",
)
RETIRE_GONE_WRITER = RETIRE_BY  # (the mutex's write; the janitor's for a writer too)
#: FORGET_ROW (a conditional Delete: the janitor's): the presence row an execution that ended
#: without releasing left behind (its hold never reached the delete after the hold), unless a
#: token was registered on it after the end ``:endedAt`` (a redriven hold's). Only after the
#: janitor retired the execution's holds: a row only ever lets a probe *shorten* a lease, so
#: deleting it never admits anyone; a registration still in flight at the end that lands after
#: the delete leaves a row whose token is closed (a probe's GONE_ROW removes it). Values
#: ``:endedAt``.
FORGET_ROW = LockWrite(
    update="",
    condition=f"attribute_not_exists(#{PRESENCE_AT}) OR #{PRESENCE_AT} <= :endedAt",
)
PRESENCE_WRITES = {"PRESENT_ROW": PRESENT_ROW, "DEPART_ROW": DEPART_ROW, "GONE_ROW": GONE_ROW,
                   "RETIRE_GONE_READER": RETIRE_GONE_READER, "RETIRE_GONE_WRITER": RETIRE_GONE_WRITER,
                   "FORGET_ROW": FORGET_ROW}


def gone_transaction(table: str, key: str, row: str, *, reader: str | None, row_values: Mapping[str, Any],
                     lock_values: Mapping[str, Any]) -> list[dict]:
    """TransactItems of a probe's retire of a hold whose presence token is closed, all or
    nothing: the presence row ``row``'s conditional Delete (:data:`GONE_ROW`) and the lock item
    ``key``'s retire of that acquisition - :data:`RETIRE_GONE_READER` on the entry of
    ``reader``, else :data:`RETIRE_GONE_WRITER` (JSONata templates allowed in all)."""
    delete = fair.delete_arguments(row, GONE_ROW, row_values)
    del delete["ReturnValues"]
    update = arguments(key, RETIRE_GONE_READER if reader is not None else RETIRE_GONE_WRITER, lock_values,
                       reader=reader)
    del update["ReturnValues"]
    return [{"Delete": {"TableName": table, **delete}}, {"Update": {"TableName": table, **update}}]


def presence_rows_in_history(tasks: Iterable[ScheduledTask], *, table_name: str) -> list[str]:
    """The presence rows (their keys) an execution wrote on ``table_name``: its holds'
    registrations (PRESENT_ROW, a ``.waitForTaskToken`` UpdateItem) and departures
    (DEPART_ROW, which writes the row too when no registration did). The janitor deletes them
    (:data:`FORGET_ROW`) once it has retired the execution's holds."""
    conditions = (PRESENT_ROW.condition, DEPART_ROW.condition)
    found: dict[str, None] = {}
    for task in tasks:
        p = task.parameters
        if task.resource.split(".")[0] != "updateItem" or p.get("TableName") != table_name:
            continue
        (key,) = p["Key"].values()
        if p.get("ConditionExpression") in conditions and key["S"].startswith(PRESENCE_ROW_MARK):
            found[key["S"]] = None
    return list(found)
