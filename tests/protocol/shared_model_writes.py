"""The read/write model's items and writes (:mod:`shared_model`): the lock item (owner, shared
hold, reader count and entries, fence, ticket counters) and a row with its waiter's kind, each
write of state_machines/shared_protocol.py as (condition holds, item after), reading the items
as the real expressions do (``test_shared_model_writes`` checks each against DynamoDB itself);
and the frozen dataclasses' fast hash and copy (``hashed_once``, ``renew``) the exploration
leans on."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Optional

from fair_model_writes import Row, acquire_ok, nobody_queues, or_zero
from fair_model_writes import leave as leave_row
from locked_workflow.state_machines.shared_protocol import READ, SHARED


def hashed_once(cls):
    """A frozen dataclass whose hash is computed once per object: states share most of their
    parts, and the exploration hashes every state it meets."""
    computed = cls.__hash__

    def __hash__(self) -> int:
        try:
            return self.__dict__["_hash"]
        except KeyError:
            object.__setattr__(self, "_hash", computed(self))
            return self.__dict__["_hash"]

    cls.__hash__ = __hash__
    return cls


def renew(obj, **changes):
    """``dataclasses.replace`` for these frozen dataclasses, without its ``__init__`` round trip
    (the exploration's hottest call)."""
    if not changes.keys() <= obj.__dataclass_fields__.keys():
        raise TypeError(f"{type(obj).__name__} has no {set(changes) - set(obj.__dataclass_fields__)}")
    new = object.__new__(type(obj))
    values = new.__dict__
    values.update(obj.__dict__)
    values.pop("_hash", None)
    values.update(changes)
    return new


@hashed_once
@dataclass(frozen=True)
class Lock:
    owner: Optional[str] = None   # a writer, SHARED, or None
    expired: bool = False         # the writer's lease is over (a shared hold has none)
    fence: int = 0
    served: Optional[int] = None
    tickets: Optional[int] = None
    readers: Optional[int] = None  # the count attribute
    entries: tuple = ()           # sorted (reader, lease over)

    def entry(self, reader: str) -> Optional[bool]:
        """None: no entry; else whether its lease is over."""
        return dict(self.entries).get(reader)

    def with_entry(self, reader: str, over: Optional[bool]) -> "Lock":
        """The entry of ``reader`` set (``over``: its lease is over) or, with None, removed."""
        kept = tuple((r, o) for r, o in self.entries if r != reader)
        return replace(self, entries=tuple(sorted(kept + (((reader, over),) if over is not None else ()))))


@hashed_once
@dataclass(frozen=True)
class KindRow(Row):
    kind: Optional[str] = None


def dequeue_row(row: Optional[Row], me: str) -> tuple[bool, Optional[Row]]:
    """DEQUEUE (the janitor): LEAVE, only on a row that waiter parked on (never a new row)."""
    if row is None or row.owner != me:
        return False, row
    return leave_row(row, me)


def as_kind_row(row: Optional[Row]) -> KindRow:
    if isinstance(row, KindRow):
        return row
    return KindRow(**{f.name: getattr(row, f.name) for f in fields(Row)}) if row else KindRow()


# -- the writes: (condition holds, item after) ------------------------------------------------


def writer_free(lock: Lock, me: str, stale: str) -> bool:
    return acquire_ok(lock, me, stale) or lock.owner == SHARED


def all_free(lock: Lock, me: str, stale: str, variant: str = "") -> bool:
    shared_free = lock.readers == 0 or variant == "write_ignores_readers"
    return acquire_ok(lock, me, stale) or (lock.owner == SHARED and shared_free)


def free_for(kind: str, lock: Lock, me: str, stale: str, variant: str = "") -> bool:
    return writer_free(lock, me, stale) if kind == READ else all_free(lock, me, stale, variant)


def _share(lock: Lock, reader: str, **more) -> Lock:
    return replace(lock, owner=SHARED, expired=False, readers=or_zero(lock.readers) + 1, **more).with_entry(reader, False)


def drop_reader(lock: Lock, reader: str, *, last: bool = False, variant: str = "") -> Lock:
    """``reader``'s entry removed; ``last``: the last one, which ends the shared hold (but in
    ``free_after_leave``, the first protocol's: a FREE_SHARED of its own follows)."""
    dropped = replace(lock, readers=or_zero(lock.readers) - 1).with_entry(reader, None)
    return replace(dropped, owner=None) if last and variant != "free_after_leave" else dropped


def fast_read(lock: Lock, me: str, stale: str, variant: str = "") -> tuple[bool, Lock]:
    queue_ok = variant == "read_ignores_queue" or nobody_queues(lock)
    ok = lock.entry(me) is None and writer_free(lock, me, stale) and queue_ok
    return ok, (_share(lock, me) if ok else lock)


def fast_write(lock: Lock, me: str, stale: str, variant: str = "") -> tuple[bool, Lock]:
    ok = lock.owner == me or (all_free(lock, me, stale, variant) and nobody_queues(lock))
    return ok, (replace(lock, owner=me, expired=False, fence=lock.fence + 1) if ok else lock)


def enqueue(lock: Lock, kind: str, me: str, stale: str, variant: str = "") -> tuple[bool, Lock]:
    ok = not (free_for(kind, lock, me, stale, variant) and nobody_queues(lock))
    return ok, (replace(lock, tickets=or_zero(lock.tickets) + 1, served=or_zero(lock.served)) if ok else lock)


def grant_read(lock: Lock, me: str, stale: str, nxt: str, prev: int) -> tuple[bool, Lock]:
    ok = lock.entry(nxt) is None and lock.served is not None and lock.served == prev and writer_free(lock, me, stale)
    return ok, (_share(lock, nxt, served=prev + 1) if ok else lock)


def grant_write(lock: Lock, me: str, stale: str, nxt: str, prev: int, variant: str = "") -> tuple[bool, Lock]:
    ok = lock.served is not None and lock.served == prev and all_free(lock, me, stale, variant)
    return ok, (replace(lock, owner=nxt, expired=False, served=prev + 1, fence=lock.fence + 1) if ok else lock)


def skip(lock: Lock, me: str, stale: str, prev: int) -> tuple[bool, Lock]:
    ok = lock.served is not None and lock.served == prev and writer_free(lock, me, stale)
    return ok, (replace(lock, served=prev + 1) if ok else lock)


def claim_read(lock: Lock, me: str) -> tuple[bool, Lock]:
    ok = lock.entry(me) is not None
    return ok, (lock.with_entry(me, False) if ok else lock)


def claim_write(lock: Lock, me: str, ticket: int) -> tuple[bool, Lock]:
    ok = lock.owner == me and lock.served == ticket
    return ok, (replace(lock, expired=False) if ok else lock)


def leave_read(lock: Lock, me: str) -> tuple[bool, Lock]:
    ok = lock.entry(me) is not None and or_zero(lock.readers) > 1
    return ok, (drop_reader(lock, me) if ok else lock)


def leave_last(lock: Lock, me: str, variant: str = "") -> tuple[bool, Lock]:
    ok = lock.entry(me) is not None and lock.readers == 1
    return ok, (drop_reader(lock, me, last=True, variant=variant) if ok else lock)


def reap_read(lock: Lock, reader: str) -> tuple[bool, Lock]:
    ok = lock.entry(reader) is True and or_zero(lock.readers) > 1
    return ok, (drop_reader(lock, reader) if ok else lock)


def reap_last(lock: Lock, reader: str, variant: str = "") -> tuple[bool, Lock]:
    ok = lock.entry(reader) is True and lock.readers == 1
    return ok, (drop_reader(lock, reader, last=True, variant=variant) if ok else lock)


def free_shared(lock: Lock) -> tuple[bool, Lock]:
    ok = lock.owner == SHARED and lock.readers == 0
    return ok, (replace(lock, owner=None) if ok else lock)


def free_empty(lock: Lock) -> tuple[bool, Lock]:
    """FREE_EMPTY: a shared hold with no reader counted ends (its entries, if any, stay)."""
    ok = lock.owner == SHARED and or_zero(lock.readers) == 0
    return ok, (replace(lock, owner=None) if ok else lock)


def sweep_reap(lock: Lock, reader: str, variant: str = "") -> tuple[bool, Lock]:
    """The plain mutex's sweep of a shared hold reaps ``reader``'s entry: REAP_LAST if the
    lock counts one reader, else REAP_READ (``sweep_ignores_lease``: any entry, its lease over
    or not)."""
    if variant == "sweep_ignores_lease":
        ok = lock.entry(reader) is not None
        return ok, (drop_reader(lock, reader, last=or_zero(lock.readers) <= 1) if ok else lock)
    return reap_last(lock, reader, variant) if or_zero(lock.readers) <= 1 else reap_read(lock, reader)


def retire_reader(lock: Lock, reader: str, acquired_before_end: bool, grace_over: bool) -> tuple[bool, Lock]:
    ok = lock.entry(reader) is not None and acquired_before_end
    return ok, (lock.with_entry(reader, grace_over) if ok else lock)


def park_unless(lock: Lock, kind: str, me: str, stale: str, ticket: int, variant: str = "") -> bool:
    """The park's check of the lock item: not passed, and not admissible now."""
    if variant == "park_unchecked":
        return True
    served = lock.served
    return served is not None and served < ticket and not (served == ticket - 1 and free_for(kind, lock, me, stale))


def park(row: Optional[Row], me: str, token: tuple, kind: str) -> tuple[bool, KindRow]:
    row = as_kind_row(row)
    ok = not row.left
    return ok, (replace(row, owner=me, token=token, kind=kind, ready=None) if ok else row)

