"""``LockClient``: take part in the workflows' lock from plain Python (a Lambda, a script).

The client reads and writes the very lock items the state machines use, with the very
expressions of :mod:`state_machines.lock_protocol` (nothing is spelled again here), so a
script holding ``customer#123`` keeps every ``LockedWorkflow`` on that key waiting, and
the other way round::

    client = LockClient("locks", namespace="customer")
    with client.hold("123", lease=timedelta(minutes=5), wait=30) as lease:
        write_customer(..., fence=lease.fence)

Time. The state machines stamp ``acquiredAt``/``expiresAt`` with the Step Functions
service clock (``$millis()``); a client has no access to it and uses its own clock
(``time.time()``, injectable). Lease expiry across participants therefore assumes loosely
synchronised clocks: a client whose clock runs ahead could take over a lock whose lease
has not ended by the service clock (and one running behind holds expired locks longer).
Keep leases long compared with any plausible skew. Mutual exclusion of *writes* does not
rest on clocks: a holder that lost its lock (lease ended, lock taken over) still carries
its fence, and a store that conditions writes on ``lastFence < :fence`` refuses its late
writes (see ``lambdas/apply_customer_update``).

Retries. Throttling and 5xx errors are retried by botocore itself; both writes are
idempotent for the same owner (a retried acquire whose first try succeeded finds the lock
already "mine"; a retried release whose first try succeeded finds the lock free with the
same fence), so botocore's retries are safe.

Owners. Ownership is per acquisition, as in the state machines: every :meth:`acquire` gets
its own owner ``<client owner>#<uuid4>`` (the client owner defaults to
``client:<host>:<pid>:<uuid4>``), so two threads of one client, or two acquisitions in one
thread, serialize like separate processes. An explicit ``owner=`` makes an acquire repeatable:
acquiring again with the same owner is the same acquisition (that is what makes retries safe).

Nesting. ``hold()`` is re-entrant within one flow of control, for sequential nesting only:
a ``hold()`` of a key whose ``with hold()`` block, through the same client, is running *below*
it on the call stack (the caller, its caller ...) yields the enclosing lease (same fence),
writes nothing, and leaving it does not release the enclosing hold. Anything that runs
*beside* a block instead of inside it is another holder and acquires like anyone else:

* another thread - started inside the block or not, with a copy of the block's context
  (``asyncio.to_thread``, ``contextvars.copy_context().run``) or not: it waits, for up to
  its ``wait``, while the block holds the lock. A block that waits for such a thread to
  finish therefore waits on itself, until the thread's ``wait`` ends in :class:`LockTimeout`;
* another asyncio task - a sibling, or a child created inside the block (``create_task``,
  ``gather``): tasks share the thread, and an await inside the block lets them run. Their
  ``hold()`` cannot wait (the client is synchronous: a wait would block the event loop,
  and with it the holder that must release), so it raises :class:`LockHeldInThisThread` at
  once; a task that wants to wait catches it and retries after ``await asyncio.sleep(...)``,
  or runs its hold in a thread of its own (``asyncio.to_thread``);
* a generator (or async generator) that entered ``hold()`` and is suspended inside the
  block: the block is the generator's, wherever it is resumed. Its caller is not inside
  it (a ``hold()`` there raises :class:`LockHeldInThisThread` - the generator can only go on
  when its caller resumes it), and neither is a second generator interleaved with it. A
  generator that is a context manager (``@contextmanager``, ``@asynccontextmanager``,
  entered through ``ExitStack``) belongs to the ``with`` statement that uses it: wrapping
  ``hold()`` in one keeps nesting re-entrant.

A nested block that outlives the block it re-entered - a generator suspended inside it and
resumed after the enclosing block released the lock - raises :class:`LockLost` when it ends:
it ran, at least partly, without the lock. (The stack, not a ``contextvars.ContextVar``,
decides: tasks and ``to_thread`` inherit a copy of the context, and generators share their
caller's, so a context variable alone would let all of these pass.)

Releases. A release whose first attempt succeeded but whose response was lost is retried by
botocore; if a waiter took the lock in between, the retry finds it not ours. When botocore
did retry and the lease had not ended yet, nobody could have taken the lock over by expiry
before our first attempt - so that attempt released it, and ``release`` returns normally.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import random
import socket
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from types import FrameType
from typing import Any, Callable, Iterator, Mapping

from botocore.exceptions import ClientError

from state_machines import fair_protocol as fair
from state_machines.lock_protocol import (
    ACQUIRE,
    ACQUIRED_AT,
    ALIVE_STATUSES,
    ERROR_INVALID_KEY,
    ERROR_LOST,
    ERROR_TIMEOUT,
    EXPIRES_AT,
    FENCE,
    KEY_ATTRIBUTE,
    OWNER,
    OWNER_SEPARATOR,
    REFRESH,
    RELEASE,
    LockWrite,
    key_problem,
    lock_item_key,
    namespace_problem,
    namespaced,
    owner_execution,
)

logger = logging.getLogger(__name__)

#: Default lease: how long a holder that dies without releasing blocks the key.
DEFAULT_LEASE = timedelta(seconds=60)

_CONDITION_FAILED = "ConditionalCheckFailedException"


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
    """Another owner holds the lock (and its lease has not ended)."""

    def __init__(self, message: str, *, key: str, holder: str | None = None,
                 expires_at: int | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.holder = holder
        self.expires_at = expires_at
        self.item: Mapping[str, Any] = {}  # the lock item as the refused write found it


class LockTimeout(LockHeld):
    """The lock was still held when the caller's ``wait`` ran out."""

    error = ERROR_TIMEOUT


class LockHeldInThisThread(LockHeld):
    """:meth:`LockClient.hold` found the lock held through the same client by another flow of
    the current thread - an asyncio task, or a generator suspended inside its ``hold()``
    block - and did not wait: that flow can only go on, and release, once this thread is
    free again, so a wait here would last until ``wait`` ran out. Raised at once, whatever
    ``wait`` is (after one acquire attempt: a lease that ended is taken over as usual)."""


class LockLost(LockError):
    """The lock is not (or no longer) held by this lease: taken over, released, or never taken."""

    error = ERROR_LOST


# --------------------------------------------------------------------------------------
# The lease
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lease:
    """One acquisition of a lock. Times are epoch milliseconds of the acquirer's clock."""

    key: str  # the caller's key
    table_key: str  # the stored (namespaced) key
    owner: str
    fence: int  # fencing token: pass it to every write made under the lock
    acquired_at: int
    expires_at: int
    #: a fair lock's ticket of this acquisition (its release hands the lock to the next one)
    ticket: int | None = None

    def remaining_ms(self, now_ms: int) -> int:
        return self.expires_at - now_ms


def validate_key(key: Any, namespace: str = "") -> str:
    """``key`` if it is a valid lock key, else :class:`InvalidLockKey` naming the problem.

    The same rules as the state machines' key validation.
    """
    problem = key_problem(key, namespace)
    if problem:
        raise InvalidLockKey(f"{ERROR_INVALID_KEY}: the lock key {problem}")
    return key


def _millis(duration: timedelta | float | int, name: str) -> int:
    seconds = duration.total_seconds() if isinstance(duration, timedelta) else duration
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise ValueError(f"`{name}` must be a timedelta or seconds, got: {duration!r}")
    return round(seconds * 1000)


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


# --------------------------------------------------------------------------------------
# The client
# --------------------------------------------------------------------------------------


class LockClient:
    """Acquire, refresh and release the locks of a lock table from Python.

    :param table_name: the lock table (partition key ``pk`` (S)), e.g. ``LockTable.table_name``.
    :param namespace: prefix of every key, as the construct's ``key_namespace`` (the stored
        key is ``<namespace>#<key>``). Default: ``""``.
    :param dynamodb: a boto3 DynamoDB *client*. Default: ``boto3.client("dynamodb")``
        (honours ``AWS_ENDPOINT_URL_DYNAMODB``), created on first use.
    :param owner: this client's holder id; each acquisition owns ``<owner>#<uuid4>``.
        Must not contain ``#``. Default: ``client:<hostname>:<pid>:<uuid4>``.
    :param clock: epoch *milliseconds* for ``acquiredAt``/``expiresAt`` and lease expiry.
        Default: ``time.time() * 1000`` (see the module notes on clocks).
    :param sleep: how to wait between attempts while the lock is held. Default: ``time.sleep``.
    :param fair: take part in a fair lock (the workflows' ``fair=True``): acquire only when
        nobody queues, else take a ticket and poll as the head, keeping a lease on my queue row
        (a client cannot park on a task token); a release hands the lock to the next waiter
        (``SendTaskSuccess`` for a parked workflow). Default: ``False``.
    :param claim_window: with ``fair``: how long a release waits for a waiter whose wake-up
        failed but whose execution still runs (its park may have just timed out) to confirm
        the handoff, before taking it back. Default: 30 s (the workflows' park timeout).
    :param stepfunctions: a boto3 Step Functions client for those wake-ups. Default:
        ``boto3.client("stepfunctions")``, created on first use.
    """

    def __init__(
        self,
        table_name: str,
        *,
        namespace: str = "",
        dynamodb: Any = None,
        owner: str | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
        fair: bool = False,
        stepfunctions: Any = None,
        claim_window: float = fair.DEFAULT_PARK_TIMEOUT_S,
    ) -> None:
        if not isinstance(table_name, str) or not table_name:
            raise ValueError(f"`table_name` must be a non-empty string, got: {table_name!r}")
        problem = namespace_problem(namespace)
        if problem:
            raise ValueError(f"`namespace` {problem}")
        if owner is not None and (not isinstance(owner, str) or not owner or OWNER_SEPARATOR in owner):
            raise ValueError(
                f"`owner` must be a non-empty string without '{OWNER_SEPARATOR}', got: {owner!r}"
            )
        self.table_name = table_name
        self.namespace = namespace
        self.owner = owner or f"client:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4()}"
        self._dynamodb = dynamodb
        self._clock = clock or _wall_clock_ms
        self._sleep = sleep or time.sleep
        self._blocks: dict[str, list[_Block]] = {}  # open hold() blocks per stored key: re-entrancy
        self._blocks_mutex = threading.Lock()
        if not isinstance(fair, bool):
            raise ValueError(f"`fair` must be True or False, got: {fair!r}")
        self.fair = fair
        self.claim_window = claim_window
        self._stepfunctions = stepfunctions

    @property
    def dynamodb(self) -> Any:
        if self._dynamodb is None:
            import boto3

            self._dynamodb = boto3.client("dynamodb")
        return self._dynamodb

    @property
    def stepfunctions(self) -> Any:
        if self._stepfunctions is None:
            import boto3

            self._stepfunctions = boto3.client("stepfunctions")
        return self._stepfunctions

    def table_key(self, key: str) -> str:
        """The stored key of ``key`` (validated, namespaced; a fair key leaves room for its
        queue rows' keys)."""
        if self.fair:
            problem = key_problem(key, self.namespace, fair.ROW_KEY_RESERVE_BYTES)
            if problem:
                raise InvalidLockKey(f"{ERROR_INVALID_KEY}: the lock key {problem}")
        return namespaced(self.namespace, validate_key(key, self.namespace))

    def now_ms(self) -> int:
        return int(self._clock())

    # ----------------------------------------------------------------------------------

    def acquire(
        self,
        key: str,
        *,
        owner: str | None = None,
        lease: timedelta | float = DEFAULT_LEASE,
        wait: timedelta | float = 0,
        poll_interval: float = 0.2,
        max_poll_interval: float = 2.0,
        backoff_rate: float = 1.5,
    ) -> Lease:
        """Take the lock on ``key``; return the :class:`Lease` (with its fence).

        Succeeds when the lock is free, already held by ``owner``, or its lease has ended.
        While another owner holds it, retries for up to ``wait`` (timedelta or seconds;
        default 0: try once): the n-th wait is ``min(max_poll_interval, poll_interval *
        backoff_rate**(n-1))`` seconds with equal jitter, never past the deadline.

        :param owner: holder id of this acquisition; acquiring again with the same owner is
            the same acquisition. Default: a new one, ``<client owner>#<uuid4>``.
        :param lease: how long the lock is ours without a refresh. Default: 60 s.
        :raises InvalidLockKey: before any DynamoDB call.
        :raises LockHeld: held by another owner and ``wait`` is 0.
        :raises LockTimeout: still held when ``wait`` ran out.
        """
        table_key = self.table_key(key)
        me = self._owner(owner)
        lease_ms = _millis(lease, "lease")
        wait_ms = _millis(wait, "wait")
        if lease_ms <= 0:
            raise ValueError(f"`lease` must be positive, got: {lease!r}")
        if wait_ms < 0:
            raise ValueError(f"`wait` must not be negative, got: {wait!r}")
        if poll_interval <= 0 or max_poll_interval < poll_interval or backoff_rate < 1:
            raise ValueError(
                "need 0 < poll_interval <= max_poll_interval and backoff_rate >= 1, got: "
                f"{poll_interval}, {max_poll_interval}, {backoff_rate}"
            )

        deadline = time.monotonic() + wait_ms / 1000
        polls = 0
        queued: int | None = None  # my ticket, once queued
        while True:
            try:
                if queued is not None:
                    return self._try_as_head(key, table_key, me, lease_ms, queued)
                return self._try_acquire(key, table_key, me, lease_ms)
            except LockHeld as held:
                if self.fair and wait_ms and queued is None:
                    queued = self._enqueue(table_key, me, lease_ms, lease_for_s=max_poll_interval)
                    continue  # refused (the lock is free with nobody queued): the fast path again; or the head
                remaining = deadline - time.monotonic()
                if wait_ms == 0:
                    raise
                if remaining <= 0:
                    if queued is not None:
                        lease = self.leave_queue(fair.row_key(table_key, queued), me)
                        if lease is not None:  # handed to me meanwhile: mine after all
                            return replace(lease, key=key)
                    raise LockTimeout(
                        f"{ERROR_TIMEOUT}: lock {table_key!r} still held by {held.holder!r} "
                        f"after waiting {wait_ms / 1000:g} s",
                        key=key, holder=held.holder, expires_at=held.expires_at,
                    ) from None
                polls += 1
                nominal = min(max_poll_interval, poll_interval * backoff_rate ** (polls - 1))
                delay = min(random.uniform(nominal / 2, nominal), remaining)
                if queued is not None:
                    queued = self._poll(table_key, me, lease_ms, queued, held.item, lease_for_s=delay)
                logger.debug("lock %s held by %s; retrying in %.3f s", table_key, held.holder, delay)
                self._sleep(delay)

    def _try_acquire(self, key: str, table_key: str, me: str, lease_ms: int) -> Lease:
        now = self.now_ms()
        write = ACQUIRE if not self.fair else fair.FAST_ACQUIRE
        try:
            response = self._update(
                table_key,
                write,
                {
                    ":me": {"S": me},
                    ":stale": {"S": me},  # no liveness check here: nobody is known dead
                    ":now": {"N": str(now)},
                    ":expiresAt": {"N": str(now + lease_ms)},
                    ":grace": {"N": "0"},  # no janitor retires a client's lock: its lease does
                    ":one": {"N": "1"},
                    **({":zero": {"N": "0"}} if write is fair.FAST_ACQUIRE else {}),
                },
                return_new=True,
                who=me,
            )
        except ClientError as error:
            if not _condition_failed(error):
                raise
            old = _old_item(error)
            holder = old.get(OWNER, {}).get("S")
            expires_at = int(old[EXPIRES_AT]["N"]) if EXPIRES_AT in old else None
            held = LockHeld(
                f"lock {table_key!r} is held by {holder!r} until {expires_at} (epoch ms)",
                key=key, holder=holder, expires_at=expires_at,
            )
            held.item = old
            raise held from None
        return _lease(key, response["Attributes"])

    def release(self, lease: Lease) -> None:
        """Free the lock of ``lease``; the item and its fence stay.

        Succeeds when ``lease.owner`` holds the lock, and also when the lock is free and its
        fence is still ``lease.fence`` (a repeated release).

        :raises LockLost: the lock was taken over (or is held by someone else, or never
            existed). Another holder's lock is never removed.
        """
        table_key = _stored_key(lease)
        try:
            if self.fair and lease.ticket is not None:
                self.handoff(table_key, me=lease.owner, served=lease.ticket, fence=lease.fence)
                return
            self._update(table_key, RELEASE, {":me": {"S": lease.owner}, ":fence": {"N": str(lease.fence)}})
        except ClientError as error:
            if not _condition_failed(error):
                raise
            retried = error.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) > 0
            if retried and self.now_ms() < lease.expires_at:
                logger.info(
                    "release of %s: a retried attempt found it released already (an earlier "
                    "attempt's response was lost)", table_key,
                )
                return
            raise LockLost(self._lost_message(lease, table_key, _old_item(error))) from None

    def refresh(self, held: Lease, /, *, lease: timedelta | float = DEFAULT_LEASE) -> Lease:
        """Extend the lease of a lock still held by ``held.owner``: it now ends ``lease``
        (timedelta or seconds; default: 60 s, as :meth:`acquire`) from now - which may also
        shorten it.

        Allowed also after the lease ended, as long as nobody took the lock over (the owner
        is still ``held.owner``). Returns the new :class:`Lease` (its fence is the lock's
        current one).

        :raises LockLost: the lock is no longer held by ``held.owner``.
        """
        for_ms = _millis(lease, "lease")
        if for_ms <= 0:
            raise ValueError(f"`lease` must be positive, got: {lease!r}")
        table_key = _stored_key(held)
        try:
            response = self._update(
                table_key,
                REFRESH,
                {":me": {"S": held.owner}, ":expiresAt": {"N": str(self.now_ms() + for_ms)}},
                return_new=True,
            )
        except ClientError as error:
            if not _condition_failed(error):
                raise
            raise LockLost(self._lost_message(held, table_key, _old_item(error))) from None
        return _lease(held.key, response["Attributes"])

    @contextmanager
    def hold(
        self,
        key: str,
        *,
        lease: timedelta | float = DEFAULT_LEASE,
        wait: timedelta | float = 0,
        owner: str | None = None,
        **acquire_options: Any,
    ) -> Iterator[Lease]:
        """``with client.hold(key) as lease:`` acquire, run the block, release.

        Re-entrant for sequential nesting only (see the module notes): inside a block of this
        client on ``key`` that runs below on the call stack, ``hold()`` yields the enclosing
        lease and releases nothing; beside it - another thread, asyncio task or suspended
        generator - it acquires like any other holder.

        The lock is released also when the block raises; the block's exception is then the
        one that propagates (a failed release is added to it as a note). After a block that
        completed, a failed release raises :class:`LockLost`: the work ran (at least
        partly) without the lock.

        :raises LockHeldInThisThread: another flow of this thread holds the key through this
            client (a wait would block the thread that flow needs).
        """
        table_key = self.table_key(key)
        here = _block_frame(sys._getframe())
        with self._blocks_mutex:
            enclosing, beside_in_this_thread = self._enclosing(table_key, owner)
        if enclosing is not None:  # re-entered: covered by the enclosing block's acquisition
            yield from self._run_block(table_key, _Block(enclosing.lease, here, enclosing.acquisition))
            return
        if beside_in_this_thread:
            try:
                held = self.acquire(key, owner=owner, lease=lease, wait=0, **acquire_options)
            except LockHeld as refused:
                error = LockHeldInThisThread(
                    f"lock {table_key!r} is held through this client by another flow of this thread "
                    f"(an asyncio task, or a generator suspended inside its hold()): it can only "
                    f"release once this thread is free, so hold() does not wait for it. Await and "
                    f"retry, or hold in a thread of its own (asyncio.to_thread)",
                    key=key, holder=refused.holder, expires_at=refused.expires_at,
                )
                error.item = refused.item
                raise error from None
        else:
            held = self.acquire(key, owner=owner, lease=lease, wait=wait, **acquire_options)
        yield from self._run_block(table_key, _Block(held, here, None))

    def _run_block(self, table_key: str, block: "_Block") -> Iterator[Lease]:
        """Run one ``with hold()`` block: registered while open; an acquisition releases at
        its end, a re-entered block checks that its acquisition outlived it."""
        with self._blocks_mutex:
            self._blocks.setdefault(table_key, []).append(block)
        try:
            yield block.lease
        except BaseException as error:
            problem = self._close_block(table_key, block)
            if problem is not None:  # the block's error is the one that matters
                what = "releasing the lock also failed" if block.taken is None else "the lock was not held to the end"
                logger.warning("leaving the hold of %s: %s: %r", table_key, what, problem)
                if hasattr(error, "add_note"):  # Python >= 3.11
                    error.add_note(f"{what}: {problem!r}")
            raise
        problem = self._close_block(table_key, block)
        if problem is not None:
            raise problem

    def _close_block(self, table_key: str, block: "_Block") -> Exception | None:
        """Unregister ``block`` and, if it acquired, release; what went wrong, if anything
        (:class:`LockLost`, or the release's own error)."""
        with self._blocks_mutex:
            blocks = self._blocks.get(table_key, [])
            blocks.remove(block)
            if not blocks:
                self._blocks.pop(table_key, None)
            outlived = block.taken is not None and block.taken.released
            if block.taken is None:
                block.released = True
        if block.taken is not None:
            if not outlived:
                return None
            return LockLost(
                f"{ERROR_LOST}: lock {table_key!r} (fence {block.lease.fence}) was released by the "
                f"block this nested hold() re-entered before the nested block ended (e.g. a generator "
                f"suspended inside it was resumed later): the nested block ran partly without the lock"
            )
        try:
            self.release(block.lease)
        except Exception as error:  # noqa: BLE001 - the caller decides: raise it, or note it
            return error
        return None

    def _enclosing(self, table_key: str, owner: str | None) -> tuple["_Block | None", bool]:
        """The open block a new ``hold()`` here re-enters (or None), and whether another flow
        of this thread holds the key (then a wait could never end). Call with the mutex held.

        Re-entered: the innermost open block on the current call stack, unless a later block of
        this thread is open beside it (a suspended generator's: interleaved, not nested)."""
        thread = threading.current_thread()
        blocks = [b for b in self._blocks.get(table_key, []) if not b.acquisition.released]
        if not blocks:
            return None, False
        stack = set()
        frame: FrameType | None = sys._getframe()
        while frame is not None:
            stack.add(id(frame))  # frames on the stack are alive: their ids are unique
            frame = frame.f_back
        enclosing = None
        for index in range(len(blocks) - 1, -1, -1):
            if id(blocks[index].frame) in stack:
                beside = [b for b in blocks[index + 1:] if b.thread is thread]
                if not beside and owner in (None, blocks[index].lease.owner):
                    enclosing = blocks[index]
                break
        return enclosing, enclosing is None and any(b.thread is thread for b in blocks)

    # ----------------------------------------------------------------------------------

    def _owner(self, owner: str | None) -> str:
        if owner is None:
            return f"{self.owner}{OWNER_SEPARATOR}{uuid.uuid4()}"
        if not isinstance(owner, str) or not owner:
            raise ValueError(f"`owner` must be a non-empty string, got: {owner!r}")
        return owner

    def _client_lease(self, seconds: float) -> dict:
        """My row's token while I queue: polling until now + ``seconds`` + a margin."""
        until = self.now_ms() + int((seconds + fair.CLIENT_POLL_MARGIN_S) * 1000)
        return {"S": f"{fair.CLIENT_LEASE_PREFIX}{until}"}

    def _row_update(self, row_key: str, write: LockWrite, values: Mapping[str, Any]) -> bool:
        """A fair write on a queue row; False when its condition is refused."""
        try:
            self._update(row_key, write, values)
            return True
        except ClientError as error:
            if _condition_failed(error):
                return False
            raise

    def _enqueue(self, table_key: str, me: str, lease_ms: int, *, lease_for_s: float) -> int | None:
        """Take a ticket and register my row (polling); None: refused - the lock is free with
        nobody queued (the fast path again)."""
        now = self.now_ms()
        try:
            item = self._update(table_key, fair.ENQUEUE, {
                ":me": {"S": me}, ":stale": {"S": me}, ":now": {"N": str(now)}, ":zero": {"N": "0"},
                ":one": {"N": "1"}}, return_new=True)["Attributes"]
        except ClientError as error:
            if _condition_failed(error):
                return None
            raise
        ticket = int(item[fair.TICKETS]["N"])
        self._park(table_key, me, lease_ms, ticket, lease_for_s)
        return ticket

    def _park(self, table_key: str, me: str, lease_ms: int, ticket: int, lease_for_s: float) -> bool:
        """PARK (a lease for a token) on my row; False: my row is marked ready (or left)."""
        return self._row_update(fair.row_key(table_key, ticket), fair.PARK, {
            ":me": {"S": me}, ":token": self._client_lease(lease_for_s), ":lease": {"N": str(lease_ms)},
            ":grace": {"N": "0"}})

    def _try_as_head(self, key: str, table_key: str, me: str, lease_ms: int, ticket: int) -> Lease:
        """GRANT to myself as the head of the queue (then drop my row)."""
        now = self.now_ms()
        try:
            item = self._update(table_key, fair.GRANT, {
                ":me": {"S": me}, ":next": {"S": me}, ":stale": {"S": me}, ":now": {"N": str(now)},
                ":expiresAt": {"N": str(now + lease_ms)}, ":grace": {"N": "0"}, ":one": {"N": "1"},
                ":prev": {"N": str(ticket - 1)}, ":ticket": {"N": str(ticket)}}, return_new=True)["Attributes"]
        except ClientError as error:
            if not _condition_failed(error):
                raise
            old = _old_item(error)
            if old.get(OWNER, {}).get("S") == me and fair.counters(old)[0] == ticket:
                lease = self.claim(key, table_key, me, ticket)  # handed to me: confirm it
                if lease is not None:
                    return lease
            held = LockHeld(f"lock {table_key!r} is not mine yet (ticket {ticket})", key=key,
                            holder=old.get(OWNER, {}).get("S"),
                            expires_at=int(old[EXPIRES_AT]["N"]) if EXPIRES_AT in old else None)
            held.item = old
            raise held from None
        self.dynamodb.delete_item(TableName=self.table_name, Key=lock_item_key(fair.row_key(table_key, ticket)))
        return _lease(key, item)

    def _poll(self, table_key: str, me: str, lease_ms: int, ticket: int, item: Mapping[str, Any], *,
              lease_for_s: float) -> int:
        """Between polls, from the lock item as my refused try saw it: handed to me -> the next
        try claims it; skipped -> a new ticket; behind a free lock whose head does not move ->
        run the handoff for it; else keep my row's lease alive. Returns my ticket."""
        served, _ = fair.counters(item)
        now = self.now_ms()
        owner = item.get(OWNER, {}).get("S")
        if owner == me and served == ticket:
            return ticket  # handed to me: the next try claims it
        if served >= ticket:  # skipped (my lease lapsed): queue again
            self.dynamodb.delete_item(TableName=self.table_name, Key=lock_item_key(fair.row_key(table_key, ticket)))
            return self._enqueue(table_key, me, lease_ms, lease_for_s=lease_for_s) or ticket
        free = owner is None or int(item.get(EXPIRES_AT, {}).get("N", "0")) < now
        if free and served < ticket - 1:
            self.handoff(table_key, me=me, served=served, fence=None)
        self._park(table_key, me, lease_ms, ticket, lease_for_s)
        return ticket

    def claim(self, key: str, table_key: str, me: str, ticket: int) -> Lease | None:
        """CLAIM a lock handed to me (its handoff could not wake me: I poll); None: not mine."""
        try:
            item = self._update(table_key, fair.CLAIM, {":me": {"S": me}, ":ticket": {"N": str(ticket)}},
                                return_new=True)["Attributes"]
        except ClientError as error:
            if _condition_failed(error):
                return None
            raise
        self.dynamodb.delete_item(TableName=self.table_name, Key=lock_item_key(fair.row_key(table_key, ticket)))
        return _lease(key, item)

    def leave_queue(self, row_key: str, me: str) -> Lease | None:
        """Give up the queue place of row ``row_key`` (a waiter giving up; the janitor, for an
        ended execution's parks): mark the row left - only a row still there, never one a
        handoff took - then, if the lock is free, hand it to the next waiter. Returns the
        lease when the lock was handed to ``me`` meanwhile (a waiter giving up claims it)."""
        ticket_text, _, table_key = row_key[len(fair.ROW_MARK):].partition(fair.ROW_MARK)
        ticket = int(ticket_text)
        row = self.dynamodb.get_item(TableName=self.table_name, Key=lock_item_key(row_key),
                                     ConsistentRead=True).get("Item")
        if row is not None and row.get(OWNER, {}).get("S") in (None, me):
            self._row_update(row_key, fair.LEAVE, {":me": {"S": me}, ":one": {"N": "1"}})
        item = self.dynamodb.get_item(TableName=self.table_name, Key=lock_item_key(table_key),
                                      ConsistentRead=True).get("Item", {})
        served, _ = fair.counters(item)
        if item.get(OWNER, {}).get("S") == me and served == ticket:
            return self.claim(table_key, table_key, me, ticket)
        free = OWNER not in item or int(item.get(EXPIRES_AT, {}).get("N", "0")) < self.now_ms()
        if free and served < ticket:
            self.handoff(table_key, me=me, served=served, fence=None)
        return None

    def handoff(self, table_key: str, *, me: str, served: int, fence: int | None, hole_s: float | None = None) -> None:
        """Hand the lock of ``table_key`` to the next live waiter (fair_protocol, step 4):
        ``me`` holds it with ticket ``served`` and fence ``fence`` (a release), or - ``fence``
        None - the lock is free and its head does not move (a waiter's fallback, the janitor,
        an operator). Raises LockLost (via ClientError) when a release finds the lock not mine."""
        holding = fence is not None
        hole_ms = int((hole_s if hole_s is not None else self.claim_window) * 1000)
        c = served
        for _ in range(10_000):  # one row per round; each round passes a ticket or ends
            row_key = fair.row_key(table_key, c + 1)
            row = self.dynamodb.delete_item(TableName=self.table_name, Key=lock_item_key(row_key),
                                            ReturnValues="ALL_OLD").get("Attributes")
            state = fair.row_state(row, now=self.now_ms(), hole_ms=hole_ms)
            if state in ("wake", "grant"):
                nxt = row[OWNER]["S"]
                now = self.now_ms()
                try:
                    granted = self._update(table_key, fair.GRANT, {
                        ":me": {"S": me}, ":next": {"S": nxt}, ":stale": {"S": me}, ":now": {"N": str(now)},
                        ":expiresAt": {"N": str(now + int(row[fair.LEASE]["N"]))},
                        ":grace": {"N": row.get(fair.GRACE_MS, {}).get("N", "0")}, ":one": {"N": "1"},
                        ":prev": {"N": str(c)}, ":ticket": {"N": str(c + 1)}}, return_new=True)["Attributes"]
                except ClientError as error:
                    if not _condition_failed(error):
                        raise
                    if holding:
                        raise
                    if state == "wake":
                        self._nudge(row[fair.TOKEN]["S"])
                    return
                if state == "grant" or self._wake(row[fair.TOKEN]["S"], granted):
                    return
                if not self._grantee_ended(nxt):  # alive-looking: one claim window to confirm it
                    self._sleep(self.claim_window)
                    again = self.dynamodb.delete_item(TableName=self.table_name, Key=lock_item_key(row_key),
                                                      ReturnValues="ALL_OLD").get("Attributes")
                    if fair.row_state(again, now=self.now_ms(), hole_ms=hole_ms) == "wake" \
                            and again[OWNER]["S"] == nxt and self._wake(again[fair.TOKEN]["S"], granted):
                        return
                if not self._row_update(table_key, fair.REVOKE, {
                        ":next": {"S": nxt}, ":me": {"S": me}, ":fence": {"N": granted[FENCE]["N"]}}):
                    return  # confirmed (claimed) meanwhile
                holding, c = False, c + 1
            elif state == "skip":
                if not self._row_update(table_key, fair.SKIP, {
                        ":me": {"S": me}, ":stale": {"S": me}, ":now": {"N": str(self.now_ms())},
                        ":prev": {"N": str(c)}, ":ticket": {"N": str(c + 1)}}):
                    return
                c += 1
            else:  # nobody parked on the next ticket yet
                if holding:
                    item = self._update(table_key, RELEASE, {":me": {"S": me}, ":fence": {"N": str(fence)}},
                                        return_new=True)["Attributes"]
                    holding = False
                    if fair.counters(item)[1] <= c:
                        return
                since = (row or {}).get(fair.READY, {}).get("N") or str(self.now_ms())
                if self._row_update(row_key, fair.MARK, {":since": {"N": since}}):
                    item = self.dynamodb.get_item(TableName=self.table_name, Key=lock_item_key(table_key),
                                                  ConsistentRead=True).get("Item", {})
                    if fair.counters(item)[0] > c:  # served meanwhile: the mark is litter
                        with contextlib.suppress(ClientError):
                            self.dynamodb.delete_item(
                                TableName=self.table_name, Key=lock_item_key(row_key),
                                ConditionExpression=f"attribute_not_exists(#{fair.TOKEN})",
                                ExpressionAttributeNames={f"#{fair.TOKEN}": fair.TOKEN})
                    return
                # its waiter parked meanwhile: take the row again

    def _grantee_ended(self, owner: str) -> bool:
        execution = owner_execution(owner)
        if execution is None:
            return False
        try:
            status = self.stepfunctions.describe_execution(executionArn=execution)["status"]
        except ClientError:
            return False
        return status not in ALIVE_STATUSES

    def _wake(self, token: str, granted: Mapping[str, Any]) -> bool:
        """Wake a parked waiter with its grant (its next state is its work); False: its park
        has ended (stopped, cancelled, timed out)."""
        record = {"owner": granted[OWNER]["S"], "fence": int(granted[FENCE]["N"]),
                  "acquiredAt": int(granted[ACQUIRED_AT]["N"]), "expiresAt": int(granted[EXPIRES_AT]["N"]),
                  "served": int(granted[fair.SERVED]["N"])}
        try:
            self.stepfunctions.send_task_success(taskToken=token, output=json.dumps(record))
            return True
        except ClientError as error:
            logger.info("wake-up not delivered: %s", error.response.get("Error", {}).get("Code"))
            return False

    def _nudge(self, token: str) -> None:
        with contextlib.suppress(ClientError):
            self.stepfunctions.send_task_failure(taskToken=token, error="Lock.Look",
                                                 cause="the lock moved on while this waiter's row was taken")

    def _update(
        self, table_key: str, write: LockWrite, values: Mapping[str, Any], *, return_new: bool = False,
        return_old: bool = False, who: str | None = None, index: int | None = None, refused_ok: bool = False,
    ) -> dict:
        """One conditional UpdateItem of the protocol; on a failed condition the
        ``ClientError`` carries the item as it was (``ReturnValuesOnConditionCheckFailure``).
        ``who``/``index``: a fair lock's owner placeholder and queue place; ``refused_ok``: a
        refused condition is no error (an enqueue retried after it succeeded)."""
        if set(values) != set(write.value_names()):  # a programming error in this module
            raise AssertionError(f"values {sorted(values)} do not fit {write}")
        names = fair.attribute_names(write)
        try:
            return self.dynamodb.update_item(
                TableName=self.table_name,
                Key=lock_item_key(table_key),
                UpdateExpression=write.update,
                ConditionExpression=write.condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=dict(values),
                ReturnValues="ALL_NEW" if return_new else "ALL_OLD" if return_old else "NONE",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as error:
            if refused_ok and _condition_failed(error):
                return {}
            raise

    @staticmethod
    def _lost_message(lease: Lease, table_key: str, old: Mapping[str, Any]) -> str:
        if not old:
            state = "no such lock"
        elif OWNER in old:
            state = f"now held by {old[OWNER]['S']!r} with fence {old.get(FENCE, {}).get('N')}"
        else:
            state = f"free, fence now {old.get(FENCE, {}).get('N')}"
        return (
            f"{ERROR_LOST}: lock {table_key!r} is not held by {lease.owner!r} "
            f"(fence {lease.fence}): {state}"
        )


def _stored_key(lease: Lease) -> str:
    """The stored key a lease was acquired on (checked before any DynamoDB call)."""
    if not isinstance(lease, Lease):
        raise TypeError(f"expected a Lease, got: {type(lease).__name__}")
    if not isinstance(lease.table_key, str) or not lease.table_key:
        raise InvalidLockKey(f"{ERROR_INVALID_KEY}: the lease has no stored key: {lease!r}")
    return lease.table_key


class _Block:
    """One open ``with hold()`` block. ``frame`` runs the block (its ``with`` statement);
    ``taken`` is the block whose acquisition a re-entered block shares (None: it acquired);
    ``released`` (on an acquiring block) is set when that acquisition ends."""

    __slots__ = ("lease", "frame", "taken", "thread", "released")

    def __init__(self, lease: Lease, frame: FrameType, taken: "_Block | None") -> None:
        self.lease = lease
        self.frame = frame
        self.taken = taken
        self.thread = threading.current_thread()
        self.released = False

    @property
    def acquisition(self) -> "_Block":
        return self.taken or self


_GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR


def _in_contextlib(frame: FrameType) -> bool:
    return frame.f_globals is vars(contextlib)


def _block_frame(frame: FrameType) -> FrameType:
    """The frame whose ``with`` statement runs a block, from a frame inside ``hold()``:
    contextlib's own frames are skipped, and so is a generator that contextlib drives - a
    ``@contextmanager`` (``hold()`` itself, or a user's wrapper), whose block is its caller's.
    A generator that something else drives (``next()``, ``for``) keeps the block its own."""
    while True:
        back = frame.f_back
        if back is None:
            return frame
        if _in_contextlib(frame) or (frame.f_code.co_flags & _GENERATOR_FLAGS and _in_contextlib(back)):
            frame = back
            continue
        return frame


def _condition_failed(error: ClientError) -> bool:
    return error.response.get("Error", {}).get("Code") == _CONDITION_FAILED


def _old_item(error: ClientError) -> Mapping[str, Any]:
    """The item as it was when the condition failed (empty if it does not exist)."""
    return error.response.get("Item") or {}


def _lease(key: str, item: Mapping[str, Any]) -> Lease:
    return Lease(
        key=key,
        table_key=item[KEY_ATTRIBUTE]["S"],
        owner=item[OWNER]["S"],
        fence=int(item[FENCE]["N"]),
        acquired_at=int(item[ACQUIRED_AT]["N"]),
        expires_at=int(item[EXPIRES_AT]["N"]),
        ticket=int(item[fair.SERVED]["N"]) if fair.SERVED in item else None,
    )
