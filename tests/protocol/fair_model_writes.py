"""The fair model's items and writes (:mod:`fair_model`): the lock item and a ticket's row,
each write of state_machines/fair_protocol.py as (condition holds, item after), reading the
items as the real expressions do (``test_fair_model`` checks each against DynamoDB itself), and
a row's reading (``row_state``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional


@dataclass(frozen=True)
class Lock:
    owner: Optional[str] = None
    expired: bool = False          # the holder's lease (or its retired stop grace) is over
    fence: int = 0
    served: Optional[int] = None   # None: the attribute is absent
    tickets: Optional[int] = None
    handed: Optional[str] = None   # who handed the lock over (unconfirmed), else None
    cut: int = 0                   # coalescing (fair_coalesce_model): tickets <= cut are superseded


@dataclass(frozen=True)
class Row:
    owner: Optional[str] = None
    token: Optional[tuple] = None  # (owner, park number) of a parked waiter
    ready: Optional[str] = None    # "fresh" | "old" (a hole's mark, ageing)
    left: bool = False


def or_zero(v: Optional[int]) -> int:
    """A number attribute as the expressions read it: absent is 0."""
    return 0 if v is None else v


# -- the writes: (condition holds, item after) ------------------------------------------------


def acquire_ok(lock: Lock, me: str, stale: str) -> bool:
    return lock.owner is None or lock.owner in (me, stale) or lock.expired


def nobody_queues(lock: Lock) -> bool:
    return lock.tickets is None or lock.served == lock.tickets


def fast_acquire(lock: Lock, me: str, stale: str, variant: str = "") -> tuple[bool, Lock]:
    queue_ok = True if variant == "fast_ignores_queue" else nobody_queues(lock)
    ok = lock.owner == me or (acquire_ok(lock, me, stale) and queue_ok)
    if not ok:
        return False, lock
    return True, replace(lock, owner=me, expired=False, fence=lock.fence + 1, served=or_zero(lock.served),
                         tickets=or_zero(lock.tickets), handed=None)


def enqueue(lock: Lock, me: str, stale: str, variant: str = "") -> tuple[bool, Lock]:
    ok = variant == "enqueue_unconditional" or not (acquire_ok(lock, me, stale) and nobody_queues(lock))
    return ok, (replace(lock, tickets=or_zero(lock.tickets) + 1, served=or_zero(lock.served)) if ok else lock)


def may_pass(lock: Lock, me: str, stale: str, prev: int) -> bool:
    return acquire_ok(lock, me, stale) and lock.served is not None and lock.served == prev


def grant(lock: Lock, me: str, stale: str, nxt: str, prev: int, variant: str = "") -> tuple[bool, Lock]:
    ok = may_pass(lock, me, stale, prev) and (variant == "grant_ignores_cut" or lock.cut < prev + 1)
    return ok, (replace(lock, owner=nxt, expired=False, served=prev + 1, handed=me, fence=lock.fence + 1) if ok else lock)


def skip(lock: Lock, me: str, stale: str, prev: int) -> tuple[bool, Lock]:
    # (idempotent: a retry whose first try applied finds the ticket passed)
    ok = may_pass(lock, me, stale, prev) or (acquire_ok(lock, me, stale) and lock.served == prev + 1)
    return ok, (replace(lock, served=prev + 1) if ok else lock)


def claim(lock: Lock, me: str, ticket: int) -> tuple[bool, Lock]:
    ok = lock.owner == me and lock.served is not None and lock.served == ticket
    return ok, (replace(lock, handed=None) if ok else lock)


def drop_grant(lock: Lock, me: str, ticket: int) -> tuple[bool, Lock]:
    """DROP_GRANT: the janitor takes back the grant to the ended ``me`` at ``ticket`` that
    nobody confirmed (``handed`` another's), freeing the lock."""
    ok = claim(lock, me, ticket)[0] and lock.handed is not None and lock.handed != me
    return ok, (replace(lock, owner=None, expired=False, handed=None) if ok else lock)


def revoke(lock: Lock, nxt: str, fence: int, me: str, variant: str = "") -> tuple[bool, Lock]:
    ok = lock.owner == nxt and lock.fence == fence and (variant == "revoke_ignores_claim" or lock.handed == me)
    return ok, (replace(lock, owner=None, expired=False, handed=None) if ok else lock)


def release(lock: Lock, me: str, fence: int) -> tuple[bool, Lock]:
    ok = lock.owner == me or (lock.owner is None and lock.fence == fence)
    return ok, (replace(lock, owner=None, expired=False) if ok else lock)


def release_alone(lock: Lock, me: str, fence: int, variant: str = "") -> tuple[bool, Lock]:
    ok, after = release(lock, me, fence)
    return (ok and (variant == "release_alone_ignores_queue" or nobody_queues(lock))), (
        after if ok and (variant == "release_alone_ignores_queue" or nobody_queues(lock)) else lock)


def take_parked(row: Optional[Row]) -> tuple[bool, Optional[Row]]:
    """TAKE_PARKED (a conditional delete): a row whose waiter is parked on a token goes."""
    ok = row is not None and row.token is not None and not row.left
    return ok, (None if ok else row)


def park(row: Optional[Row], me: str, token: tuple, variant: str = "") -> tuple[bool, Row]:
    row = row or Row()
    ok = not row.left and (variant == "park_ignores_ready" or row.ready is None)
    return ok, (replace(row, owner=me, token=token) if ok else row)


def mark(row: Optional[Row], since: str) -> tuple[bool, Optional[Row]]:
    ok = row is None or row.token is None
    return ok, (replace(row or Row(), ready=since) if ok else row)


def leave(row: Optional[Row], me: str) -> tuple[bool, Optional[Row]]:
    ok = row is None or row.owner in (None, me)
    return ok, (replace(row or Row(), owner=me, left=True, token=None) if ok else row)


def leave_present(row: Optional[Row], me: str) -> tuple[bool, Optional[Row]]:
    """LEAVE_PRESENT: LEAVE, refused when the row is gone (the janitor's write)."""
    return leave(row, me) if row is not None else (False, None)


def row_state(row: Optional[Row]) -> str:
    """As fair_protocol.row_state (no polling waiters here)."""
    if row is None:
        return "mark"
    if row.left:
        return "skip"
    if row.token is not None:
        return "wake"
    return "skip" if row.ready == "old" else "mark"

