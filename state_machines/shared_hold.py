"""The read/write lock's hold on the lock item (:mod:`shared_protocol`): its attributes - the
shared hold, the reader entries and their count - the conditions every write of the protocol
builds on, the writes that end a hold (a reader's leave, a reap, a retire, a writer's release),
the requests and the Python readings of a lock item's readers.
"""

from __future__ import annotations

from typing import Any, Mapping

from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines.lock_protocol import (
    ACQUIRE,
    ACQUIRED_AT,
    EXPIRES_AT,
    FENCE,
    GRACE,
    OWNER,
    RELEASE,
    LockWrite,
    owner_execution,
)

# --------------------------------------------------------------------------------------
# 1. Attributes
# --------------------------------------------------------------------------------------

#: ``owner`` of a shared hold: readers hold the key. Never an acquisition's owner (those are
#: ``<execution ARN or client id>#<uuid>``), never an execution (no liveness check, no janitor).
SHARED = "shared"
#: The number of reader entries on the lock item.
READERS = "readers"
#: A reader entry's attribute: this prefix + the reader's owner. Protocol attribute names are
#: plain words, so no entry can collide with them.
READER_PREFIX = "r:"
#: Row attribute: what the waiter wants (absent: a writer).
KIND = "kind"
READ, WRITE = "read", "write"
#: The placeholder of the reader entry a write touches (its name is the reader's attribute).
READER_PLACEHOLDER = "#reader"

#: The most readers that hold one key at once: the entry writes (``FAST_READ``,
#: ``GRANT_READ``) are refused at this count, and ``ENQUEUE_READ`` too, so a reader that
#: arrives at it takes no ticket and is refused (``Lock.TooManyReaders``,
#: :data:`~locked_workflow.state_machines.errors.ERROR_TOO_MANY_READERS`) before any write.
#:
#: Derivation. Every state that returns the lock item whole - a reader's ``FAST_READ`` and
#: ``CLAIM_READ``, every ``ENQUEUE_*`` (``ALL_NEW``), a waiter's look (GetItem) - fails with
#: ``States.DataLimitExceeded``, which no Catch handles, once the item's JSON passes 262,144
#: bytes, *after* its write landed ("Maximum input or output size for a task, state, or
#: execution: 262,144 bytes of data as a UTF-8 encoded string",
#: https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html); DynamoDB's item
#: limit is 400 KB (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html).
#: A reader entry with the longest owner AWS allows - an execution ARN in the longest partition
#: with an 80-character state machine name and execution name (220 bytes), ``#`` and a uuid:
#: 257 bytes - is 362 bytes of the answer's JSON (measured by ``tests/lock/test_shared_faults.py``)
#: and ~310 bytes of item (DynamoDB's sizing rules). 200 entries: ~73 KB of JSON (28 % of the
#: task limit) and ~62 KB of item (16 % of DynamoDB's): headroom for the key (up to 2 KB), the
#: counters and a writer's attributes, and for a factor of three in the size of an entry.
#: The price at the cap: a lock-item write costs ~62 write units.
MAX_READERS = 200
#: The value of ``:maxReaders`` (every write whose condition counts the readers against the cap).
MAX_READERS_VALUES = {":maxReaders": {"N": str(MAX_READERS)}}


def reader_attribute(owner: str) -> str:
    """The lock item attribute holding the entry of the reader ``owner``."""
    return f"{READER_PREFIX}{owner}"


def reader_attribute_expression(owner: str) -> str:
    """JSONata: :func:`reader_attribute` of the owner the expression evaluates to."""
    return f"'{READER_PREFIX}' & ({owner})"


def entry_value(*, expires_at: Any, acquired_at: Any, grace: Any) -> dict:
    """The DynamoDB value of a reader entry (``:entry``; JSONata templates allowed)."""
    return {"M": {EXPIRES_AT: {"N": expires_at}, ACQUIRED_AT: {"N": acquired_at}, GRACE: {"N": grace}}}


# --------------------------------------------------------------------------------------
# 2. Conditions
# --------------------------------------------------------------------------------------

#: No writer holds: the mutex may acquire (free, mine, a proven-stale holder's, a lease over),
#: or readers hold. Values ``:me``, ``:stale``, ``:now``, ``:shared``.
WRITER_FREE = f"({ACQUIRE.condition}) OR #{OWNER} = :shared"
#: Nobody holds: the mutex may acquire, or a shared hold has no reader left (no write leaves one
#: since the last reader's leave ends the hold: an item an earlier release left so). Values as
#: above plus ``:zero``.
ALL_FREE = f"({ACQUIRE.condition}) OR (#{OWNER} = :shared AND #{READERS} = :zero)"
FREE = {READ: WRITER_FREE, WRITE: ALL_FREE}
#: Room for one more reader entry (:data:`MAX_READERS`). Values ``:maxReaders``.
ROOM = f"(attribute_not_exists(#{READERS}) OR #{READERS} < :maxReaders)"

#: The shared hold, as a write sets it (a writer whose lease was over is replaced whole).
SHARE = [f"#{OWNER} = :shared", f"{READER_PLACEHOLDER} = :entry"]
UNWRITER = [f"#{ACQUIRED_AT}", f"#{EXPIRES_AT}", f"#{GRACE}"]

# --------------------------------------------------------------------------------------
# 3. The writes that end a hold
# --------------------------------------------------------------------------------------

_DROP_ENTRY = f"REMOVE {READER_PLACEHOLDER} ADD #{READERS} :minusOne"
#: The last entry's removal ends the shared hold too: no write ever leaves a shared hold with no
#: reader (a plain mutex cannot see a reader count, and nothing would end it).
_DROP_LAST = f"REMOVE {READER_PLACEHOLDER}, #{OWNER} ADD #{READERS} :minusOne"
_OTHERS, _LAST = f"#{READERS} > :one", f"#{READERS} = :one"
#: LEAVE_READ: my entry goes, other readers stay. LEAVE_LAST: my entry goes and with it the
#: shared hold (``ALL_NEW``: I run the handoff from ``served``). Values ``:one``, ``:minusOne``.
#: Refused: the other one holds (the item says which), or my entry is gone - reaped
#: (``Lock.Lost``), or by my own earlier attempt if this is a retry.
LEAVE_READ = LockWrite(update=_DROP_ENTRY, condition=f"attribute_exists({READER_PLACEHOLDER}) AND {_OTHERS}")
LEAVE_LAST = LockWrite(update=_DROP_LAST, condition=f"attribute_exists({READER_PLACEHOLDER}) AND {_LAST}")
#: REAP_READ / REAP_LAST: a reader entry whose lease is over goes (as LEAVE_READ / LEAVE_LAST).
_OVER = f"{READER_PLACEHOLDER}.#{EXPIRES_AT} < :now"
REAP_READ = LockWrite(update=_DROP_ENTRY, condition=f"{_OVER} AND {_OTHERS}")
REAP_LAST = LockWrite(update=_DROP_LAST, condition=f"{_OVER} AND {_LAST}")


#: FREE_EMPTY: a shared hold with no reader entry left ends (``owner`` removed). No write of
#: this module leaves one (the last entry's removal ends the hold in the same write), but an
#: item the first protocol's two-write leave (``LEAVE_READ`` then ``FREE_SHARED``) left so
#: would refuse a plain mutex for ever: a plain mutex waiter's liveness check frees it (this
#: module's writers count it free: ``ALL_FREE``). Values ``:shared``, ``:zero``.
FREE_EMPTY = LockWrite(
    update=f"REMOVE #{OWNER}",
    condition=f"#{OWNER} = :shared AND (attribute_not_exists(#{READERS}) OR #{READERS} = :zero)",
)


def leave_write(readers: int, *, reap: bool = False) -> LockWrite:
    """The write that removes one entry of a lock item counting ``readers`` (a reader's own
    leave, or ``reap``: an expired one's removal): the last one's ends the shared hold."""
    if reap:
        return REAP_LAST if readers <= 1 else REAP_READ
    return LEAVE_LAST if readers <= 1 else LEAVE_READ

#: A reader's leave whose write was refused this many times in a row, each time after a read of
#: the count (another reader entered or left between my read and my write: LEAVE_READ and
#: LEAVE_LAST condition on the count), stops trying: it RETIREs its entry at now (the entry ends
#: its stop grace from now, and is reaped then as a stopped reader's: REAP_READ / REAP_LAST) and
#: the release ends as if done. Without the cap, readers whose count moves between every read
#: and write of mine would keep the loop going (a livelock) to the history limit. A round costs
#: about 12 history events (a refused write, the read, the choice): 240 at the cap.
MAX_LEAVE_ROUNDS = 20
#: RETIRE_READER: the reader's execution ended at ``:endedAt``: its entry now lasts its stop
#: grace from then (janitor, liveness check) - that acquisition only.
RETIRE_READER = LockWrite(
    update=f"SET {READER_PLACEHOLDER}.#{EXPIRES_AT} = :endedAt + {READER_PLACEHOLDER}.#{GRACE}",
    condition=f"{READER_PLACEHOLDER}.#{ACQUIRED_AT} <= :endedAt",
)
#: A writer's release is the mutex's RELEASE. A retry whose first attempt was applied may be
#: refused (readers or a writer entered since): as for the mutex and the fair lock, only a
#: refused *first* attempt is ``Lock.Lost``.
RELEASE_WRITE = RELEASE

#: A fenced write by a writer (a ``ConditionCheck`` on the lock item beside the record's own
#: ``lastFence < :fence``): I hold it, with that fence. No reader is ever the owner.
FENCED_WRITE_CHECK = LockWrite(update="", condition=f"#{OWNER} = :me AND #{FENCE} = :fence")


# --------------------------------------------------------------------------------------
# 5. Requests (all but the table name) and readings in Python
# --------------------------------------------------------------------------------------


def arguments(key: str, write: LockWrite, values: Mapping[str, Any], *, reader: str | None = None,
              return_values: str = "NONE") -> dict:
    """UpdateItem arguments for ``write`` on the item ``key``; ``reader``: the owner whose entry
    ``#reader`` names (JSONata templates allowed in all)."""
    args = fair.arguments(key, write, values, return_values=return_values)
    names = args["ExpressionAttributeNames"]
    if READER_PLACEHOLDER in names:
        if reader is None:
            raise AssertionError(f"{write} touches a reader entry: say whose")
        names[READER_PLACEHOLDER] = reader_attribute(reader)
    if not write.update:  # a ConditionCheck
        del args["UpdateExpression"], args["ReturnValues"]
    return args


def readers_of(item: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The reader entries of a lock item as boto3 returns it: owner -> ``{expiresAt, ...}``."""
    return {name[len(READER_PREFIX):]: value["M"] for name, value in item.items() if name.startswith(READER_PREFIX)}


def too_many_readers(item: Mapping[str, Any]) -> bool:
    """A lock item (as boto3 returns it) with no room for another reader (:data:`MAX_READERS`)."""
    return int(item.get(READERS, {}).get("N", "0")) >= MAX_READERS


def expired_readers(item: Mapping[str, Any], *, now: int) -> list[str]:
    """The readers whose entry's lease is over (REAP_READ / REAP_LAST may remove them)."""
    return [owner for owner, entry in readers_of(item).items() if int(entry[EXPIRES_AT]["N"]) < now]


def workflow_holds(item: Mapping[str, Any], *, me: str, now: int) -> list[tuple[str, bool, Mapping[str, Any]]]:
    """The holds of executions a waiter ``me`` finds on a lock item (as boto3 returns it) and may
    check the liveness of - the Python reading of ``kinds.shared_hold``'s suspect (the waiters'
    fallback): the writer holder, an execution's acquisition not mine; else the reader entries
    of executions whose lease runs at ``now`` (sorted by owner: checked in turn). Each: (owner,
    a reader's entry?, the hold - its entry, or the lock item - with ``expiresAt``,
    ``acquiredAt``, ``grace``)."""
    owner = item.get(OWNER, {}).get("S", "")
    if owner and owner not in (SHARED, me) and owner_execution(owner) is not None:
        return [(owner, False, item)] if ACQUIRED_AT in item and EXPIRES_AT in item else []
    return [(reader, True, entry) for reader, entry in sorted(readers_of(item).items())
            if owner_execution(reader) is not None and int(entry[EXPIRES_AT]["N"]) >= now]
