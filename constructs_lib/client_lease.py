"""What a :class:`~locked_workflow.constructs_lib.lock_client.LockClient` hands out: its errors
and the :class:`Lease` of one acquisition (with the holder's own view of it, :class:`Holding`,
and the lease a lock item shows, :func:`lease_from_item`); how every participant retries a write
a transaction refused (:func:`retry_conflicts`) and tells a refused condition
(:func:`condition_failed`, :func:`old_item`).

A module of its own so that the participants of each lock kind (:mod:`lock_client`,
:mod:`shared_client`) share these types without importing each other; ``lock_client``
re-exports them.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, TypeVar

from botocore.exceptions import ClientError

from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines.errors import (
    CONDITIONAL_CHECK_FAILED_CODE,
    ERROR_INVALID_KEY,
    ERROR_LOST,
    ERROR_SUPERSEDED,
    ERROR_TIMEOUT,
    TRANSACTION_CONFLICT,
)
from locked_workflow.state_machines.lock_item import ACQUIRED_AT, EXPIRES_AT, FENCE, KEY_ATTRIBUTE, OWNER

_T = TypeVar("_T")
#: Tries of one write while transactions on its item refuse it (a transaction lasts
#: milliseconds: the backoff below waits up to about 6 s in all).
CONFLICT_ATTEMPTS = 10


def retry_conflicts(call: Callable[[], _T], *, sleep: Callable[[float], None]) -> _T:
    """``call()`` (one DynamoDB write), tried again after a backoff with full jitter (50 ms,
    doubling, at most 2 s) while DynamoDB answers ``TransactionConflictException``: the item is
    part of an ongoing transaction and nothing was written (developer guide, "Transaction
    conflict handling in DynamoDB"). botocore retries throttling and 5xx errors itself, but
    not this one. Any other error, and the last conflict, are raised."""
    cap = 0.05
    for attempt in range(1, CONFLICT_ATTEMPTS + 1):
        try:
            return call()
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != TRANSACTION_CONFLICT or attempt == CONFLICT_ATTEMPTS:
                raise
        sleep(random.uniform(0, cap))
        cap = min(2.0, cap * 2)
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------


class LockError(Exception):
    """Base of every error of the lock client. ``error`` is the protocol's error name."""

    error: str | None = None


class InvalidLockKey(LockError, ValueError):
    """The key is missing, not a string, empty or too long - more than 2048 bytes of UTF-8
    with its namespace prefix (raised before any DynamoDB call)."""

    error = ERROR_INVALID_KEY


class LockHeld(LockError):
    """Another owner holds the lock, and this client may not take it over yet.

    ``takeover_in``: seconds until this client may take the lock over if it stays unchanged
    meanwhile (None: not known, e.g. for a fair lock). ``expires_at``: the lease end stamped on
    the item (epoch ms of its writer's clock - informative only: a client never judges it)."""

    def __init__(self, message: str, *, key: str, holder: str | None = None,
                 expires_at: int | None = None, takeover_in: float | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.holder = holder
        self.expires_at = expires_at
        self.takeover_in = takeover_in
        self.item: Mapping[str, Any] = {}  # the lock item as the refused write found it


class LockTimeout(LockHeld):
    """The lock was still held when the caller's ``wait`` ran out."""

    error = ERROR_TIMEOUT


class LockSuperseded(LockHeld):
    """A fair client queued on a coalescing key (``Lock.fair(key, queue=QueueLimit.keep_newest(n))``)
    was superseded by a newer run queued behind it before its turn came: it left the queue
    without the lock. ``holder`` names the newer run (its owner)."""

    error = ERROR_SUPERSEDED


class LockHeldInThisThread(LockHeld):
    """:meth:`LockClient.hold` found the lock held through the same client by another flow of
    the current thread - an asyncio task, or a generator suspended inside its ``hold()``
    block - and did not wait: that flow can only go on, and release, once this thread is
    free again, so a wait here would last until ``wait`` ran out. Raised at once, whatever
    ``wait`` is (after one acquire attempt: a lease that ended is taken over as usual)."""


class LockLost(LockError):
    """The lock is not (or no longer) held by this lease: taken over, released, never taken,
    or its lease ran out on this client's clock without a renewal (:meth:`Lease.check`)."""

    error = ERROR_LOST


# --------------------------------------------------------------------------------------
# The lease
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lease:
    """One acquisition of a lock.

    ``acquired_at`` and ``expires_at`` are the epoch milliseconds stamped on the lock item by
    its writer - this client's clock for its own acquisitions and renewals - and are what the
    *workflows* judge the lease by (``expiresAt < $millis()``). The holder's own view of its
    lease is :meth:`check`, on this client's monotonic clock.
    """

    key: str  # the caller's key
    table_key: str  # the stored (namespaced) key
    owner: str
    fence: int  # fencing token: pass it to every write made under the lock
    acquired_at: int
    expires_at: int
    #: a fair lock's ticket of this acquisition (its release hands the lock to the next one)
    ticket: int | None = None
    #: a reader's hold of a read/write lock (``acquire(key, shared=True)``): others may read
    #: beside it; ``fence`` is then the last writer's - the version it reads - never a write fence
    shared: bool = False
    #: what the holder knows of this acquisition (shared by the leases refresh() returns)
    _holding: "Holding | None" = field(default=None, compare=False, repr=False)

    def check(self) -> float:
        """Seconds left of this lease, else :class:`LockLost`. No DynamoDB call: cheap enough
        to call before every step of long work.

        The lease is counted on this client's monotonic clock from *before* the write that took
        or last renewed it, so it runs out no later than any client waiter may take the lock
        over (they watch it unchanged for the lease from *after* that write landed), or any
        workflow (``expiresAt`` is stamped from the latest time AWS's clock can show).

        :raises LockLost: a renewal (the heartbeat's, or :meth:`LockClient.refresh`) found the
            lock taken over; or it was released; or the lease ran out without a renewal -
            nobody may have taken the lock yet, but anyone may from now on (a successful
            :meth:`LockClient.refresh` then proves nobody did, and counts afresh).
        :raises ValueError: the lease was not made by a ``LockClient`` (built by hand).
        """
        if self._holding is None:
            raise ValueError(
                f"`lease` must come from LockClient.acquire(), hold() or refresh() to be checked, "
                f"got one built by hand: {self!r}"
            )
        return self._holding.check(self)

    @property
    def holding(self) -> "Holding | None":
        """What the holder knows of this acquisition (None: a lease built by hand)."""
        return self._holding

    def with_holding(self, holding: "Holding") -> "Lease":
        """This lease with ``holding`` as its holder's view (how a participant hands out a lease
        it took or renewed)."""
        return replace(self, _holding=holding)


class Holding:
    """The holder's view of one acquisition: until when its lease runs on the client's
    monotonic clock, the latest lease length and ``expiresAt`` written, whether the lock is
    known lost or was released, and its heartbeat (if any)."""

    def __init__(self, monotonic: Callable[[], float], started: float, lease_ms: int, expires_at: int) -> None:
        self.mutex = threading.Lock()
        self.monotonic = monotonic
        self.started = started
        self.deadline = started + lease_ms / 1000
        self.lease_ms = lease_ms
        self.expires_at = expires_at
        self.lost: str | None = None  # why the lock is known lost
        self.released = False
        self.heartbeat: Any = None  # client_clocks.Heartbeat, while one runs

    def __deepcopy__(self, memo: dict) -> "Holding":
        return self  # one acquisition, one view (``dataclasses.asdict(lease)`` shares it)

    def renewed(self, started: float, lease_ms: int, expires_at: int) -> None:
        with self.mutex:
            self.started, self.deadline = started, started + lease_ms / 1000
            self.lease_ms, self.expires_at = lease_ms, expires_at
            self.lost = None  # the renewal found the lock still mine: nobody took it meanwhile

    def lose(self, why: str) -> None:
        with self.mutex:
            self.lost = why

    def check(self, lease: Lease) -> float:
        with self.mutex:
            lost, released, deadline = self.lost, self.released, self.deadline
        if lost is not None:
            raise LockLost(lost)
        if released:
            raise LockLost(f"{ERROR_LOST}: lock {lease.table_key!r} (fence {lease.fence}) was released")
        left = deadline - self.monotonic()
        if left <= 0:
            raise LockLost(
                f"{ERROR_LOST}: the lease of lock {lease.table_key!r} (fence {lease.fence}) ran out "
                f"{-left:.3f} s ago on this client's clock without a renewal: others may take the lock over"
            )
        return left

    def stop_heartbeat(self) -> None:
        with self.mutex:
            heartbeat, self.heartbeat = self.heartbeat, None
        if heartbeat is not None:
            heartbeat.stop()


def condition_failed(error: ClientError) -> bool:
    return error.response.get("Error", {}).get("Code") == CONDITIONAL_CHECK_FAILED_CODE


def old_item(error: ClientError) -> Mapping[str, Any]:
    """The item as it was when the condition failed (empty if it does not exist)."""
    return error.response.get("Item") or {}


def lease_from_item(key: str, item: Mapping[str, Any], holding: Holding | None = None) -> Lease:
    """The lease of the acquisition ``item`` shows (``holding``: what its holder knows of it;
    None: a lease built for an operator's release)."""
    return Lease(
        key=key,
        table_key=item[KEY_ATTRIBUTE]["S"],
        owner=item[OWNER]["S"],
        fence=int(item[FENCE]["N"]),
        acquired_at=int(item[ACQUIRED_AT]["N"]),
        expires_at=int(item[EXPIRES_AT]["N"]),
        ticket=int(item[fair.SERVED]["N"]) if fair.SERVED in item else None,
        _holding=holding,
    )
