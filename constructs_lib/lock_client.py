"""``LockClient``: take part in the workflows' lock from plain Python (a Lambda, a script).

The client reads and writes the very lock items the state machines use, with the very
expressions of :mod:`locked_workflow.state_machines.lock_protocol` (nothing is spelled again here), so a
script holding ``customer#123`` keeps every ``LockedWorkflow`` on that key waiting, and
the other way round::

    client = LockClient("locks", namespace="customer")
    with client.hold("123", lease=timedelta(minutes=5), wait=30) as lease:
        write_customer(..., fence=lease.fence)

Time. The state machines judge leases by the Step Functions service clock (``$millis()``),
which a client cannot read. A client therefore judges each lease by the clock that wrote it,
and never by its own wall clock (``time.time()``, injectable as ``clock``):

* **a client's lease** (its acquisition carries ``clientLease``, the lease length) is judged
  clock-free, as AWS's DynamoDB lock client does: a waiter takes it over only after it has
  watched the lock item stay unchanged - same owner, fence and ``expiresAt`` - for that lease,
  measured on its own monotonic clock (``monotonic``), and only with a write conditioned on
  exactly what it watched (``CLIENT_TAKEOVER``). A holder that renews changes ``expiresAt``,
  so a waiter whose clock runs ahead by any amount cannot take a live lock. The price: a lock
  left by a dead client is taken over one lease after a waiter first looks at it;
* **a workflow's lease** (stamped by the service clock) is judged by AWS's clock as the
  ``Date`` header of DynamoDB's responses bounds it (whole seconds, so within about a second
  and a round trip): taken over once AWS's clock is surely past ``expiresAt``, or - without
  a ``Date`` header - after watching it unchanged for ``expiresAt - acquiredAt``;
* **the holder's own view** (:meth:`Lease.check`) counts its lease on its monotonic clock from
  *before* the write that took or renewed it, and ``expiresAt`` is stamped from the latest time
  AWS's clock can show then: the lease ends for its holder before any waiter - client or
  workflow - may take over.

What remains: the workflows judge a client's ``expiresAt`` by the service clock. The client
stamps ``acquiredAt`` with its wall clock held within the bounds that DynamoDB's ``Date``
headers put on AWS's clock, and ``expiresAt`` from their upper end, so whatever its own clock
says, workflows see the lease it asked for, or up to about a second (plus a round trip) more.
Its very first acquisition is stamped before any response told it AWS's time: if its clock
turned out off, the lease is stamped again at once; if not, the holder counts up to that
second less. Without ``Date`` headers (a stand-in client, an endpoint that sends none) the stamps
are the client's clock: s seconds behind, it gives workflows a lease s seconds shorter - with
s >= its lease they may take the lock at once - and the holder learns it at its next step
(``Lease.check()`` after a heartbeat's renewal found it, ``refresh()``, the release). A fair
lock (``fair=True``) and a read/write one judge leases with their writes' ``expiresAt < :now``,
``:now`` being the *earliest* time AWS's clock can show (:meth:`LockClient.earliest_ms`): no
lease ends by that judgement before it ended for its holder. Mutual exclusion of *writes* rests on no clock: a holder that lost
its lock still carries its fence, and a store that conditions writes on ``lastFence < :fence``
refuses its late writes (see ``lambdas/apply_customer_update``).

Heartbeat. ``hold(key, heartbeat=True)`` renews the lease in a background thread half a lease
after each renewal, until the release; a renewal that finds the lock taken over is reported by
the holder's next ``lease.check()`` (and by the release).

Retries. Throttling and 5xx errors are retried by botocore itself, and a write refused by a
transaction on its item (``TransactionConflictException``, which botocore does not retry) by
the client (``client_lease.retry_conflicts``); the writes are
idempotent for the same owner (a retried acquire whose first try succeeded finds the lock
already "mine"; a retried release whose first try succeeded finds the lock free with the
same fence), so botocore's retries are safe.

Owners. Ownership is per acquisition, as in the state machines: every :meth:`acquire` gets
its own owner ``<client owner>#<uuid4>`` (the client owner defaults to
``client:<host>:<pid>:<uuid4>``), so two threads of one client, or two acquisitions in one
thread, serialize like separate processes. An explicit ``owner=`` (without ``#``, like the
client owner: it can never be one of the client's own acquisitions) makes an acquire
repeatable: acquiring again with the same owner is the same acquisition (that is what makes
retries safe).

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
did retry and the lease had not ended yet (the holder's view, :meth:`Lease.check`), nobody
could have taken the lock over by expiry before our first attempt - so that attempt released it, and ``release`` returns normally.

Layout. This module is the client's front (every name it always had imports from here); the
client's parts live beside it, one concern each: :mod:`client_args` (the arguments, checked),
:mod:`client_lease` (the lease, its holder's view, the errors), :mod:`client_clocks` (the clocks
and the heartbeat), :mod:`client_session` (the AWS clients, the stamps, the protocol's write),
:mod:`client_takeover` (a plain mutex's attempt and its takeover), :mod:`client_liveness` (a
waiter's check of a workflow holder: its presence probe, its execution), :mod:`client_fair` (the fair
lock's queue), :mod:`client_blocks` (the re-entrancy of ``hold()``) and :mod:`shared_client` (the
read/write lock).
"""

from __future__ import annotations

import logging
import os
import random
import socket
import sys
import threading
import time
import uuid
from contextlib import contextmanager, suppress
from dataclasses import replace
from datetime import timedelta
from typing import Any, Callable, Iterator, Mapping

from botocore.exceptions import ClientError

from locked_workflow.constructs_lib.client_args import (  # noqa: F401 - re-exported
    DEFAULT_LEASE,
    MAX_LEASE,
    MAX_POLL_INTERVAL_S,
    validate_key,
)
from locked_workflow.constructs_lib.client_args import (
    AcquireOptions as _Options,
    checked_boto3_client as _boto3_client,
    checked_callable as _callable,
    checked_lease_ms as _lease_ms,
    checked_owner as _owner_checked,
    checked_seconds as _seconds,
    checked_stored_key as _stored_key,
)
from locked_workflow.constructs_lib.client_blocks import (
    Block as _Block,
    ReentrantHolds,
    block_frame as _block_frame,
)
from locked_workflow.constructs_lib.client_clocks import (
    AwsClock as _AwsClock,
    Heartbeat as _Heartbeat,
    Watch as _Watch,
    monotonic_clock as _monotonic_clock,
    takeover_note as _takeover_note,
    wall_clock_ms as _wall_clock_ms,
)
from locked_workflow.constructs_lib.client_fair import FairQueue
from locked_workflow.constructs_lib.client_rate import Admission, RateAdmissions  # noqa: F401 - re-exported
from locked_workflow.constructs_lib.client_lease import (  # noqa: F401 - re-exported
    InvalidLockKey,
    Lease,
    LockError,
    LockHeld,
    LockHeldInThisThread,
    LockLost,
    LockSuperseded,
    LockTimeout,
    retry_conflicts,
)
from locked_workflow.constructs_lib.client_lease import (
    Holding,
    condition_failed as _condition_failed,
    lease_from_item as _lease,
    old_item as _old_item,
)
from locked_workflow.constructs_lib.client_liveness import HolderLiveness
from locked_workflow.constructs_lib.client_session import ClientSession
from locked_workflow.constructs_lib.client_takeover import Takeovers
from locked_workflow.constructs_lib.shared_client import READ, WRITE, ReadWriteParticipant, Refused
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines.errors import ERROR_INVALID_KEY, ERROR_LOST, ERROR_TIMEOUT
from locked_workflow.state_machines.lock_item import (
    FENCE,
    OWNER,
    OWNER_SEPARATOR,
    key_problem,
    namespace_problem,
    namespaced,
)
from locked_workflow.state_machines.lock_writes import CLIENT_REFRESH, CLIENT_RELEASE, REFRESH

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------
# The client
# --------------------------------------------------------------------------------------


class LockClient(ClientSession, Takeovers, FairQueue, HolderLiveness, ReentrantHolds, RateAdmissions):
    """Acquire, refresh and release the locks of a lock table from Python.

    A rate limit's key (the workflows' ``Lock.rate``): :meth:`admit` spends one of its permits.

    :param table_name: the lock table (partition key ``pk`` (S)), e.g. ``LockTable.table_name``.
    :param namespace: prefix of every key, as the construct's ``key_namespace`` (the stored
        key is ``<namespace>#<key>``). Default: ``""``.
    :param dynamodb: a boto3 DynamoDB *client*. Default: ``boto3.client("dynamodb")``
        (honours ``AWS_ENDPOINT_URL_DYNAMODB``), created on first use.
    :param owner: this client's holder id; each acquisition owns ``<owner>#<uuid4>``.
        Must not contain ``#``. Default: ``client:<hostname>:<pid>:<uuid4>``.
    :param clock: epoch *milliseconds* stamped as ``acquiredAt``/``expiresAt`` (what the
        workflows judge a client's lease by). Default: ``time.time() * 1000`` (see the module
        notes on clocks).
    :param monotonic: seconds of a clock that never jumps, for the client's own judgement of
        leases (a holder's lease, a waiter's takeover). Default: the boot time clock where the
        system has one (it counts a suspended machine's sleep), else ``time.monotonic``.
    :param sleep: how to wait between attempts while the lock is held. Default: ``time.sleep``.
    :param fair: take part in a fair lock (the workflows' ``fair=True``): acquire only when
        nobody queues, else take a ticket and poll as the head, keeping a lease on my queue row
        (a client cannot park on a task token); a release hands the lock to the next waiter
        (``SendTaskSuccess`` for a parked workflow). Default: ``False``.
    :param claim_window: with ``fair``: how long (a timedelta or seconds) a release waits for a
        waiter whose wake-up failed but whose execution still runs (its park may have just timed
        out) to confirm the handoff, before taking it back. Default: 30 s (the workflows' park
        timeout).
    :param read_write: take part in a read/write lock (the workflows' ``Lock.shared`` /
        ``Lock.exclusive`` on the same keys): ``acquire(key, shared=True)`` enters as one of
        many readers, ``acquire(key)`` as the one writer, in arrival order (see
        :mod:`shared_client`). Queued, the client polls its place as the fair lock's client
        does; a release admits the next waiters. Not with ``fair``. Default: ``False``.
    :param stepfunctions: a boto3 Step Functions client for those wake-ups, and for a waiter's
        liveness check of a workflow holding its key (:mod:`client_liveness`: the probe of its
        presence token, ``DescribeExecution``). Default: ``boto3.client("stepfunctions")``,
        created on first use.
    :raises TypeError: an argument of the wrong type (``"`x` must ..., got: ..."``).
    :raises ValueError: an argument of a bad value (the same form).
    """

    def __init__(
        self,
        table_name: str,
        *,
        namespace: str = "",
        dynamodb: Any = None,
        owner: str | None = None,
        clock: Callable[[], float] | None = None,
        monotonic: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
        fair: bool = False,
        stepfunctions: Any = None,
        claim_window: timedelta | float = fair.DEFAULT_PARK_TIMEOUT_S,
        read_write: bool = False,
    ) -> None:
        if not isinstance(table_name, str):
            raise TypeError(f"`table_name` must be a non-empty string, got: {table_name!r}")
        if not table_name:
            raise ValueError(f"`table_name` must be a non-empty string, got: {table_name!r}")
        problem = namespace_problem(namespace)
        if problem:
            raise ValueError(f"`namespace` {problem}")
        if owner is not None:
            _owner_checked(owner)
        if not isinstance(fair, bool):
            raise TypeError(f"`fair` must be True or False, got: {fair!r}")
        if not isinstance(read_write, bool):
            raise TypeError(f"`read_write` must be True or False, got: {read_write!r}")
        if fair and read_write:
            raise ValueError("`read_write` must be False with `fair` (a read/write lock is fair already), got: True")
        window = _seconds(claim_window, "claim_window")
        if not 0 <= window <= MAX_POLL_INTERVAL_S:
            raise ValueError(
                f"`claim_window` must be from 0 to {MAX_POLL_INTERVAL_S:g} seconds, got: {claim_window!r}"
            )
        self.table_name = table_name
        self.namespace = namespace
        self.owner = owner or f"client:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4()}"
        self._dynamodb = _boto3_client(dynamodb, "dynamodb", "dynamodb")
        self._stepfunctions = _boto3_client(stepfunctions, "stepfunctions", "stepfunctions")
        self._clock = _callable(clock, "clock", "a function returning epoch milliseconds") or _wall_clock_ms
        self._monotonic = _callable(monotonic, "monotonic", "a function returning seconds") or _monotonic_clock
        self._sleep = _callable(sleep, "sleep", "a function taking seconds") or time.sleep
        self._blocks: dict[str, list[_Block]] = {}  # open hold() blocks per stored key: re-entrancy
        self._blocks_mutex = threading.Lock()
        self._watches: dict[str, _Watch] = {}  # held locks watched for a takeover, per stored key
        self._watches_mutex = threading.Lock()
        self._liveness_checked: dict[str, tuple[float, int]] = {}  # last check of a workflow holder (and count), per key
        self._aws_clock = _AwsClock()
        self.fair = fair
        self.read_write = read_write
        self.claim_window = window
        self._rw = ReadWriteParticipant(self) if read_write else None

    def table_key(self, key: str) -> str:
        """The stored key of ``key`` (validated, namespaced; a fair key leaves room for its
        queue rows' keys)."""
        if self.fair or self.read_write:
            problem = key_problem(key, self.namespace, fair.ROW_KEY_RESERVE_BYTES)
            if problem:
                raise InvalidLockKey(f"{ERROR_INVALID_KEY}: the lock key {problem}")
        return namespaced(self.namespace, validate_key(key, self.namespace))

    # ----------------------------------------------------------------------------------

    def acquire(
        self,
        key: str,
        *,
        owner: str | None = None,
        lease: timedelta | float = DEFAULT_LEASE,
        wait: timedelta | float = 0,
        poll_interval: timedelta | float = 0.2,
        max_poll_interval: timedelta | float = 2.0,
        backoff_rate: float = 1.5,
        shared: bool = False,
    ) -> Lease:
        """Take the lock on ``key``; return the :class:`Lease` (with its fence).

        Succeeds when the lock is free or already held by ``owner``, or - a takeover - when
        this client has watched it held, unchanged, for that holder's lease on its own monotonic
        clock (see the module notes on clocks). While another owner holds it, retries for up to
        ``wait``: the n-th wait is ``min(max_poll_interval, poll_interval * backoff_rate**(n-1))``
        seconds with equal jitter, shortened to the moment a takeover becomes possible, never
        past the deadline.

        :param owner: holder id of this acquisition; acquiring again with the same owner is
            the same acquisition. A non-empty string without ``#``. Default: a new one,
            ``<client owner>#<uuid4>``.
        :param lease: how long the lock is ours without a renewal (a timedelta or seconds, from
            1 ms to :data:`MAX_LEASE`, 365 days). Default: 60 s.
        :param wait: how long to wait while the lock is held (a timedelta or seconds; ``math.inf``:
            as long as it takes). Default: 0 (try once).
        :param poll_interval: the first wait between attempts (s, more than 0, at most
            :data:`MAX_POLL_INTERVAL_S`). Default: 0.2.
        :param max_poll_interval: the longest wait between attempts (s, from ``poll_interval`` to
            :data:`MAX_POLL_INTERVAL_S`). Default: 2.
        :param backoff_rate: growth of the wait between attempts (at least 1). Default: 1.5.
        :param shared: a read/write client (``read_write=True``) only: enter as a reader, beside
            other readers (``lease.fence`` is the last writer's). Default: ``False`` (the writer).
        :raises InvalidLockKey: before any DynamoDB call.
        :raises TypeError: an argument of the wrong type, before any DynamoDB call.
        :raises ValueError: an argument of a bad value, before any DynamoDB call.
        :raises LockHeld: held by another owner and ``wait`` is 0.
        :raises LockTimeout: still held when ``wait`` ran out.
        """
        table_key = self.table_key(key)
        me = self._owner(owner)
        options = _Options.of(lease, wait, poll_interval, max_poll_interval, backoff_rate)
        return self._acquire(key, table_key, me, options, shared=self._shared_checked(shared))

    def _shared_checked(self, shared: Any) -> bool:
        if not isinstance(shared, bool):
            raise TypeError(f"`shared` must be True or False, got: {shared!r}")
        if shared and not self.read_write:
            raise ValueError("`shared` must be False on a client without `read_write=True` (only a read/write "
                             "lock has shared holders), got: True")
        return shared

    def _acquire(self, key: str, table_key: str, me: str, options: _Options, *, shared: bool = False) -> Lease:
        if self._rw is not None:
            return self._rw.acquire(key, table_key, me, options, mode=READ if shared else WRITE)
        lease_ms, wait_s = options.lease_ms, options.wait_s
        deadline = self._monotonic() + wait_s  # math.inf: no deadline
        nominal = options.poll_interval
        queued: int | None = None  # my ticket, once queued
        due_again = 2  # attempts at once when a refusal showed a takeover is due (wait or not)
        while True:
            try:
                if queued is not None:
                    return self._stamped_right(self._try_as_head(key, table_key, me, lease_ms, queued))
                return self._stamped_right(self._try_acquire(key, table_key, me, lease_ms))
            except LockHeld as held:
                if self.fair and wait_s and queued is None:
                    queued = self._enqueue(table_key, me, lease_ms, lease_for_s=options.max_poll_interval)
                    continue  # refused (the lock is free with nobody queued): the fast path again; or the head
                if held.takeover_in == 0 and due_again:  # e.g. a dead workflow's lease is over by AWS's
                    due_again -= 1  # clock, which this very refusal's response told
                    continue
                if not self.fair and ReadWriteParticipant(self).sweep_shared_hold(
                        table_key, me, getattr(held, "item", None) or {}):
                    continue  # a read/write lock's readers that are gone: their shared hold freed
                if wait_s and self.holder_gone(table_key, getattr(held, "item", None) or {}):
                    continue  # a workflow holder gone (its branch cancelled, its execution ended): its
                    # lease now ends at its stop grace, which the next refusal shows
                remaining = deadline - self._monotonic()
                if wait_s == 0:
                    raise
                if remaining <= 0:
                    if queued is not None:
                        lease = self.leave_queue(fair.row_key(table_key, queued), me)
                        if lease is not None:  # handed to me meanwhile: mine after all, for a whole lease
                            with suppress(LockHeld):
                                return self._whole_lease(replace(lease, key=key), lease_ms)
                    raise LockTimeout(
                        f"{ERROR_TIMEOUT}: lock {table_key!r} still held by {held.holder!r} "
                        f"after waiting {wait_s:g} s{_takeover_note(held.takeover_in)}",
                        key=key, holder=held.holder, expires_at=held.expires_at, takeover_in=held.takeover_in,
                    ) from None
                delay = min(random.uniform(nominal / 2, nominal), remaining)
                if held.takeover_in is not None and held.takeover_in < delay:
                    delay = held.takeover_in + 0.001  # a takeover is due: be there
                nominal = min(options.max_poll_interval, nominal * options.backoff_rate)
                if queued is not None:
                    try:
                        queued = self._poll(table_key, me, lease_ms, queued, held.item, lease_for_s=delay)
                    except LockSuperseded as superseded:  # (a coalescing key) the caller's key, not the stored one
                        superseded.key = key
                        raise
                logger.debug("lock %s held by %s; retrying in %.3f s", table_key, held.holder, delay)
                self._sleep(delay)

    def release(self, lease: Lease) -> None:
        """Free the lock of ``lease``; the item and its fence stay. Stops the lease's heartbeat
        first (if any).

        Succeeds when ``lease.owner`` holds the lock, and also when the lock is free and its
        fence is still ``lease.fence`` (a repeated release).

        :raises LockLost: the lock was taken over (or is held by someone else, or never
            existed). Another holder's lock is never removed.
        :raises TypeError: ``lease`` is not a :class:`Lease`, before any DynamoDB call.
        """
        table_key = _stored_key(lease)
        holding = lease.holding
        if holding is not None:
            holding.stop_heartbeat()
        if self._rw is not None:
            try:
                self._rw.release(lease)
            except LockLost as lost:
                if holding is not None:
                    holding.lose(str(lost))
                raise
            if holding is not None:
                with holding.mutex:
                    holding.released = True
            return
        try:
            if self.fair and lease.ticket is not None:
                self.handoff(table_key, me=lease.owner, served=lease.ticket, fence=lease.fence)
            else:
                self._update(table_key, CLIENT_RELEASE, {":me": {"S": lease.owner}, ":fence": {"N": str(lease.fence)}})
        except ClientError as error:
            if not _condition_failed(error):
                raise
            retried = error.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) > 0
            if holding is not None:
                running = holding.deadline > self._monotonic()
            else:  # a lease built by hand (an operator's release): only its stamp is known
                running = self.now_ms() < lease.expires_at
            if not (retried and running):
                message = self._lost_message(lease, table_key, _old_item(error))
                if holding is not None:
                    holding.lose(message)
                raise LockLost(message) from None
            logger.info(
                "release of %s: a retried attempt found it released already (an earlier "
                "attempt's response was lost)", table_key,
            )
        if holding is not None:
            with holding.mutex:
                holding.released = True

    def refresh(self, held: Lease, /, *, lease: timedelta | float = DEFAULT_LEASE) -> Lease:
        """Renew the lease of a lock still held by ``held.owner``: it now ends ``lease``
        (timedelta or seconds, from 1 ms to 365 days; default: 60 s, as :meth:`acquire`) from
        now - which may also shorten it, for its holder and for client waiters. ``expiresAt``
        only ever moves on, by 1 ms at least (that is how a client waiter watching the lock
        sees that its holder lives, and it never shows a value it showed before): a shorter
        lease ends no sooner for the workflows than the last one.

        Allowed also after the lease ended, as long as nobody took the lock over (the owner
        is still ``held.owner``): that proves nobody held it meanwhile. Returns the new
        :class:`Lease` (its fence is the lock's current one); ``held.check()`` counts from this
        renewal too.

        :raises LockLost: the lock is no longer held by ``held.owner`` (``held.check()`` raises
            it from now on).
        :raises TypeError: an argument of the wrong type, before any DynamoDB call.
        :raises ValueError: an argument of a bad value, before any DynamoDB call.
        """
        for_ms = _lease_ms(lease)
        table_key = _stored_key(held)
        holding = held.holding
        started = self._monotonic()
        written = holding.expires_at if holding is not None else held.expires_at
        expires_at = max(self.stamp(started)[1] + for_ms, written + 1)  # never an end written before
        try:
            if self._rw is not None:
                item = self._rw.refresh(held, expires_at)
            else:
                values = {":me": {"S": held.owner}, ":expiresAt": {"N": str(expires_at)}}
                if not self.fair:
                    values[":clientLease"] = {"M": {"owner": {"S": held.owner}, "ms": {"N": str(for_ms)}}}
                item = self._update(table_key, REFRESH if self.fair else CLIENT_REFRESH, values,
                                    return_new=True)["Attributes"]
        except (ClientError, Refused) as error:
            if isinstance(error, ClientError) and not _condition_failed(error):
                raise
            message = (self._lost_message(held, table_key, _old_item(error)) if isinstance(error, ClientError) else
                       f"{ERROR_LOST}: the {'shared' if held.shared else 'exclusive'} hold of {held.owner!r} "
                       f"on lock {table_key!r} is gone (its lease ran out and it was reaped or taken over)")
            if holding is not None:
                holding.lose(message)
            raise LockLost(message) from None
        if holding is None:
            holding = Holding(self._monotonic, started, for_ms, expires_at)
        else:
            holding.renewed(started, for_ms, expires_at)
        if self._rw is not None:  # (a reader's item has no owner of its own: the lease is what it held)
            return replace(held, fence=int(item.get(FENCE, {}).get("N", held.fence)),
                           expires_at=expires_at).with_holding(holding)
        return _lease(held.key, item, holding=holding)

    @contextmanager
    def hold(
        self,
        key: str,
        *,
        lease: timedelta | float = DEFAULT_LEASE,
        wait: timedelta | float = 0,
        owner: str | None = None,
        heartbeat: bool = False,
        poll_interval: timedelta | float = 0.2,
        max_poll_interval: timedelta | float = 2.0,
        backoff_rate: float = 1.5,
        shared: bool = False,
    ) -> Iterator[Lease]:
        """``with client.hold(key) as lease:`` acquire, run the block, release. Options as
        :meth:`acquire`, plus:

        :param heartbeat: renew the lease in a background thread while the block runs, half a
            lease after each renewal (seed 001's rule), until the release. A renewal that finds
            the lock taken over is reported at the block's next ``lease.check()`` (and by the
            release), not only at the end. Default: ``False`` - the lease must cover the block,
            or the block renews it with :meth:`refresh`.

        :param shared: a read/write client only: hold as one of many readers (as :meth:`acquire`).
            Default: ``False``.

        Re-entrant for sequential nesting only (see the module notes): inside a block of this
        client on ``key`` that runs below on the call stack, ``hold()`` yields the enclosing
        lease (renewed by the enclosing block's heartbeat, if any) and releases nothing; beside
        it - another thread, asyncio task or suspended generator - it acquires like any other
        holder.

        The lock is released also when the block raises; the block's exception is then the
        one that propagates (a failed release is added to it as a note). After a block that
        completed, a failed release raises :class:`LockLost`: the work ran (at least
        partly) without the lock.

        :raises LockHeldInThisThread: another flow of this thread holds the key through this
            client (a wait would block the thread that flow needs).
        :raises TypeError: an argument of the wrong type, before any DynamoDB call.
        :raises ValueError: an argument of a bad value, before any DynamoDB call.
        """
        table_key = self.table_key(key)
        if owner is not None:
            _owner_checked(owner)
        options = _Options.of(lease, wait, poll_interval, max_poll_interval, backoff_rate)
        if not isinstance(heartbeat, bool):
            raise TypeError(f"`heartbeat` must be True or False, got: {heartbeat!r}")
        shared = self._shared_checked(shared)
        here = _block_frame(sys._getframe())
        with self._blocks_mutex:
            enclosing, beside_in_this_thread = self._enclosing(table_key, owner)
        if enclosing is not None and enclosing.lease.shared and not shared:
            raise LockHeldInThisThread(
                f"lock {table_key!r} is held shared by an enclosing hold() of this client: a reader cannot "
                f"become the writer (it would wait for its own hold to end); take the exclusive hold "
                f"outside instead", key=key, holder=enclosing.lease.owner)
        if enclosing is not None:  # re-entered: covered by the enclosing block's acquisition
            yield from self._run_block(table_key, _Block(enclosing.lease, here, enclosing.acquisition))
            return
        if beside_in_this_thread:
            try:
                held = self._acquire(key, table_key, self._owner(owner), options._replace(wait_s=0), shared=shared)
            except LockHeld as refused:
                error = LockHeldInThisThread(
                    f"lock {table_key!r} is held through this client by another flow of this thread "
                    f"(an asyncio task, or a generator suspended inside its hold()): it can only "
                    f"release once this thread is free, so hold() does not wait for it. Await and "
                    f"retry, or hold in a thread of its own (asyncio.to_thread)",
                    key=key, holder=refused.holder, expires_at=refused.expires_at,
                    takeover_in=refused.takeover_in,
                )
                error.item = refused.item
                raise error from None
        else:
            held = self._acquire(key, table_key, self._owner(owner), options, shared=shared)
        if heartbeat:
            try:
                _Heartbeat(self, held).start()
            except BaseException:
                self.release(held)
                raise
        yield from self._run_block(table_key, _Block(held, here, None))

    # ----------------------------------------------------------------------------------

    def _owner(self, owner: str | None) -> str:
        if owner is None:
            return f"{self.owner}{OWNER_SEPARATOR}{uuid.uuid4()}"
        return _owner_checked(owner)

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
