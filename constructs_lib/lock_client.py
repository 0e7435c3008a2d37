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
lock (``kind=LockClient.FAIR``) and a read/write one judge leases with their writes' ``expiresAt < :now``,
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
:mod:`client_acquire` (the attempts of ``acquire()``, its backoff and wait),
:mod:`client_release` (``release()`` and ``refresh()``), :mod:`client_takeover` (a plain mutex's
attempt and its takeover), :mod:`client_liveness` (a waiter's check of a workflow holder: its
presence probe, its execution), :mod:`client_fair` (the fair lock's queue), :mod:`client_blocks`
(the re-entrancy of ``hold()``), :mod:`client_rate` (a rate limit's admissions) and
:mod:`shared_client` (the read/write lock: with :mod:`client_rw_steps` and
:mod:`client_rw_handoff`).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Callable, Iterator

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
    checked_owner as _owner_checked,
    checked_seconds as _seconds,
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
    wall_clock_ms as _wall_clock_ms,
)
from locked_workflow.constructs_lib.client_acquire import Acquisitions
from locked_workflow.constructs_lib.client_kind import ClientKind, ClientServed, LockKindNotServed, client_kind_of  # noqa: F401 - re-exported
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
from locked_workflow.constructs_lib.client_liveness import HolderLiveness
from locked_workflow.constructs_lib.client_release import Releases
from locked_workflow.constructs_lib.client_session import ClientSession
from locked_workflow.constructs_lib.client_takeover import Takeovers
from locked_workflow.constructs_lib.shared_client import ReadWriteParticipant
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines.errors import ERROR_INVALID_KEY
from locked_workflow.state_machines.lock_item import key_problem, namespace_problem, namespaced


# --------------------------------------------------------------------------------------
# The client
# --------------------------------------------------------------------------------------


class LockClient(ClientSession, Acquisitions, Releases, Takeovers, FairQueue, HolderLiveness, ReentrantHolds,
                 RateAdmissions):
    """Acquire, refresh and release the locks of a lock table from Python.

    The lock kind it takes part in is a value, as the constructs' is: ``kind=LockClient.FAIR``,
    or the workflows' own ``Lock`` value on the same keys (``kind=Lock.fair(key)``; only its kind
    counts, not its key or settings). A rate limit's key (the workflows' ``Lock.rate``):
    :meth:`admit`, on a client of any kind, spends one of its permits.

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
    :param kind: the lock kind it takes part in (:class:`ClientKind`), or a ``Lock`` value of
        the workflows on the same keys, whose kind it takes:

        - ``LockClient.MUTEX`` (``Lock.mutex``): one holder per key;
        - ``LockClient.FAIR`` (``Lock.fair``): acquire only when nobody queues, else take a
          ticket and poll as the head, keeping a lease on my queue row (a client cannot park on
          a task token); a release hands the lock to the next waiter (``SendTaskSuccess`` for a
          parked workflow);
        - ``LockClient.READ_WRITE`` (``Lock.shared`` / ``Lock.exclusive``):
          ``acquire(key, shared=True)`` enters as one of many readers, ``acquire(key)`` as the
          one writer, in arrival order (see :mod:`shared_client`). Queued, the client polls its
          place as the fair lock's client does; a release admits the next waiters.

        Default: ``None`` (``LockClient.MUTEX``).
    :param claim_window: with ``LockClient.FAIR``: how long (a timedelta or seconds) a release
        waits for a waiter whose wake-up failed but whose execution still runs (its park may
        have just timed out) to confirm the handoff, before taking it back; the release
        returns as soon as it reads the grant confirmed. Default: 30 s (the workflows' default
        park timeout).
    :param fair: deprecated (a ``DeprecationWarning``): ``fair=True`` is
        ``kind=LockClient.FAIR``. Default: ``False``.
    :param read_write: deprecated (a ``DeprecationWarning``): ``read_write=True`` is
        ``kind=LockClient.READ_WRITE``. Default: ``False``.
    :param stepfunctions: a boto3 Step Functions client for those wake-ups, and for a waiter's
        liveness check of a workflow holding its key (:mod:`client_liveness`: the probe of its
        presence token, ``DescribeExecution``). Default: ``boto3.client("stepfunctions")``,
        created on first use.
    :raises LockKindNotServed: ``kind`` is a lock value no client takes part in
        (``Lock.semaphore``, ``Lock.keys``, ``Lock.on_record``, ``Lock.rate``): a ``ValueError``.
    :raises TypeError: an argument of the wrong type (``"`x` must ..., got: ..."``).
    :raises ValueError: an argument of a bad value (the same form).
    """

    #: The kinds a client takes part in (``kind=LockClient.FAIR``).
    MUTEX = ClientKind.MUTEX
    FAIR = ClientKind.FAIR
    READ_WRITE = ClientKind.READ_WRITE

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
        kind: ClientKind | ClientServed | None = None,
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
        kind = client_kind_of(kind, fair=fair, read_write=read_write)
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
        #: The lock kind it takes part in.
        self.kind = kind
        #: It takes part in a fair lock (``kind`` is ``LockClient.FAIR``).
        self.fair = kind is ClientKind.FAIR
        #: It takes part in a read/write lock (``kind`` is ``LockClient.READ_WRITE``).
        self.read_write = kind is ClientKind.READ_WRITE
        self.claim_window = window
        self._rw = ReadWriteParticipant(self) if self.read_write else None

    def table_key(self, key: str) -> str:
        """The stored key of ``key`` (validated, namespaced; a fair key leaves room for its
        queue rows' keys)."""
        if self.fair or self.read_write:
            problem = key_problem(key, self.namespace, fair.ROW_KEY_RESERVE_BYTES)
            if problem:
                raise InvalidLockKey(f"{ERROR_INVALID_KEY}: the lock key {problem}")
        return namespaced(self.namespace, validate_key(key, self.namespace))

    # ----------------------------------------------------------------------------------

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
