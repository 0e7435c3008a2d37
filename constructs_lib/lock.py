"""Lock kinds as values: what a locked section locks, and how.

A section takes one ``lock=`` value, made by a factory of :class:`Lock` - the way the CDK
spells choices (``Schedule.rate(...)``, ``Code.from_asset(...)``)::

    Lock.mutex("{% $states.input.detail.customerId %}")
    Lock.fair("{% $states.input.detail.customerId %}", park_timeout=Duration.seconds(30))
    Lock.fair("{% $states.input.detail.customerId %}", queue=QueueLimit.keep_newest(1))  # coalescing
    Lock.semaphore("{% $states.input.region %}", limit=5)
    Lock.keys("{% [$states.input.from, $states.input.to] %}")
    Lock.on_record(customers, "{% $states.input.customerId %}", must_exist=True)
    Lock.shared("{% $states.input.customerId %}")      # a reader: many together
    Lock.exclusive("{% $states.input.customerId %}")   # a writer: alone
    Lock.rate("{% $states.input.partnerId %}", limit=10, period=Duration.minutes(1))
    Lock.rate("{% $states.input.partnerId %}", limit=10, at_once=2)  # and 2 at a time

Each factory validates its own settings at synth ("`x` must ..., got: ..."), and a setting
exists only on the kinds it means something for: a semaphore has a ``limit``, a fair lock a
``park_timeout``, the lock on the record its record table. A value is immutable and may be
given to several sections; each section builds its own states from it.
"""

from __future__ import annotations

from abc import ABCMeta
from typing import Optional, Union

from aws_cdk import Duration, aws_dynamodb as dynamodb

from locked_workflow.constructs_lib.kinds.fair import DEFAULT_PARK_TIMEOUT, FairLock
from locked_workflow.constructs_lib.kinds.multikey import KeysLock
from locked_workflow.constructs_lib.kinds.mutex import MutexLock
from locked_workflow.constructs_lib.kinds.rate import RateLock
from locked_workflow.constructs_lib.kinds.record import RecordLock
from locked_workflow.constructs_lib.kinds.semaphore import SemaphoreLock
from locked_workflow.constructs_lib.kinds.shared import SharedKind, SharedLock
from locked_workflow.constructs_lib.kinds.value import LockValue
from locked_workflow.constructs_lib.lock_table import LockTable
from locked_workflow.constructs_lib.queue_limit import QueueLimit

#: What a ``lock`` prop must be (messages).
A_LOCK = "a Lock (Lock.mutex(key), Lock.fair(key), ...)"


class Lock(LockValue, metaclass=ABCMeta):
    """What a locked section locks, and how: one value per lock kind, made by the factories
    :meth:`mutex`, :meth:`fair`, :meth:`semaphore`, :meth:`keys`, :meth:`on_record`,
    :meth:`shared`, :meth:`exclusive` and :meth:`rate`.

    Every kind is exclusive per key (but the semaphore, ``limit`` holders per key), fenced
    (``$lock.fence`` strictly increases per key), recovered (lease, janitor, liveness check,
    stop grace) and released on success and on every Catch path. Every participant of one
    key must use the same kind (and the same ``limit``) - but :meth:`shared` and
    :meth:`exclusive`, the two sides of one read/write lock (a :meth:`mutex` on their key
    counts as a writer).

    Each factory delegates to its kind's value class, declared beside the kind's builder in
    ``kinds/<kind>.py`` with its settings and their validation (a
    :class:`~locked_workflow.constructs_lib.kinds.value.LockValue`, which is a ``Lock``): the
    members a section uses of a value (``kind``, ``factory``, ``record_table``, ``builder()``,
    ``for_express()``) are declared there.
    """

    @classmethod
    def __subclasshook__(cls, subclass: type) -> bool:
        """Every kind's value (a :class:`LockValue`, declared in its kind's module) is a ``Lock``."""
        return issubclass(subclass, LockValue) if cls is Lock else NotImplemented

    def __init__(self) -> None:
        raise TypeError(
            "`Lock` values come from its factories: Lock.mutex(key), Lock.fair(key), "
            "Lock.semaphore(key, limit=...), Lock.keys(keys), Lock.on_record(table, key), "
            "Lock.shared(key), Lock.exclusive(key) or Lock.rate(key, limit=...)"
        )

    # -- the factories ------------------------------------------------------------------------

    @staticmethod
    def mutex(key: str) -> "Lock":
        """One holder per key; waiters poll the lock item (Wait states, ``wait_policy``).

        :param key: JSONata template whose value is the resource to serialize on, e.g.
            ``"{% $states.input.detail.customerId %}"``. At run time it must be a non-empty
            string whose stored form ``<namespace>#<key>`` is at most 2048 bytes of UTF-8,
            else the section fails with ``Lock.InvalidKey`` before any DynamoDB call.
        """
        return MutexLock.of(key)

    @staticmethod
    def fair(key: str, *, park_timeout: Duration = DEFAULT_PARK_TIMEOUT, polling: bool = False,
             queue: Optional[QueueLimit] = None) -> "Lock":
        """One holder per key, granted in arrival order: waiters take a ticket and park on a
        task token (``.waitForTaskToken``) in a queue row of their own; the release hands the
        lock to the head of the queue in the same write and wakes it (``SendTaskSuccess``).
        The uncontended path is the mutex's single write. See
        :mod:`locked_workflow.state_machines.fair_protocol`.

        :param key: as :meth:`mutex`'s.
        :param park_timeout: a parked waiter's fallback: after this long it looks by itself
            (re-queues if dropped, asks whether the holder and a dead-looking head still run,
            dequeues a dead head and wakes the next). It bounds what a lost wake-up or a
            stopped participant costs. Whole seconds, 1 s to 1 hour. Default: 30 seconds.
        :param polling: waiters poll as the head of the queue instead of parking, keeping
            their place alive with a lease (``wait_policy`` applies): what an EXPRESS state
            machine needs, which cannot park on a task token. ``LockedWorkflow`` sets it for
            EXPRESS. Default: ``False``.
        :param queue: bound the runs queued per key: ``QueueLimit.keep_newest(n)`` (coalescing:
            one more supersedes the oldest queued, which ends ``Lock.Superseded``) or
            ``QueueLimit.keep_oldest(n)`` (one more is refused: ``Lock.QueueFull``). Every
            participant of a key must use the same ``queue``. Default: ``None`` (unbounded).
        """
        return FairLock.of(key, park_timeout=park_timeout, polling=polling, queue=queue)

    @staticmethod
    def semaphore(key: str, *, limit: int) -> "Lock":
        """Up to ``limit`` holders per key at once: a mutex on one of ``limit`` slot items,
        tried from a slot drawn per attempt (see
        :mod:`locked_workflow.state_machines.semaphore_protocol`).

        :param key: as :meth:`mutex`'s.
        :param limit: holders admitted per key at once, 2 to 32 (1 is :meth:`mutex`). Every
            participant of a key must use the same limit.
        """
        return SemaphoreLock.of(key, limit=limit)

    @staticmethod
    def keys(keys: str) -> "Lock":
        """Every key of a list, all or nothing, in one transaction (an account transfer locks
        both accounts); the work reads ``$lock.keys`` and ``$lock.fences`` (stored key ->
        fence). See :mod:`locked_workflow.state_machines.multikey_protocol`.

        :param keys: JSONata template whose value is an array of keys (1 to 100 after
            de-duplication), e.g. ``"{% [$states.input.from, $states.input.to] %}"``.
        """
        return KeysLock.of(keys)

    @staticmethod
    def on_record(
        table: Union[dynamodb.ITable, LockTable],
        key: str,
        *,
        key_attribute: Optional[str] = None,
        must_exist: bool = True,
    ) -> "Lock":
        """The lock kept on the record it protects, in ``table`` - no lock table: the acquire
        reads the record (``$lock.item``) and the release writes the work's ``recordUpdate``
        (``{"set": {name: AttributeValue}, "remove": [name]}``) in the same conditional
        write. Not re-entrant. See :mod:`locked_workflow.state_machines.record_protocol`.

        :param table: the record table: a string partition key (the lock key), no sort key.
        :param key: as :meth:`mutex`'s: the record's partition key value (not namespaced).
        :param key_attribute: the table's partition key, needed when its schema cannot be
            read (an imported table). Default: read from the table.
        :param must_exist: a missing record fails with ``Lock.RecordMissing``; ``False`` lets
            the acquire create it. Default: ``True``.
        """
        return RecordLock.of(table, key, key_attribute=key_attribute, must_exist=must_exist)

    @staticmethod
    def shared(key: str, *, park_timeout: Duration = DEFAULT_PARK_TIMEOUT) -> "Lock":
        """A *reader* of a read/write lock: any number of readers hold the key together while
        no writer (:meth:`exclusive`) holds it. Arrivals are served in ticket order, so a
        reader that comes after a queued writer waits for it (writers never starve), and a
        writer's release admits every reader queued behind it, up to the next writer, at once.
        A reader that finds the key free of writers and nobody queued enters with one write.
        The work reads ``$lock.fence``: the fence of the last writer (the version it reads) -
        a reader never moves it. STANDARD state machines only (waiters park on a task token).
        See :mod:`locked_workflow.state_machines.shared_protocol`.

        :param key: as :meth:`mutex`'s.
        :param park_timeout: a parked waiter's fallback, as :meth:`fair`'s (it also bounds how
            long a grant whose wake-up failed stands unclaimed: the larger of it and 10 s).
            Whole seconds, 1 s to 1 hour. Default: 30 seconds.
        """
        return SharedLock.of(key, mode=SharedKind.READ_MODE, park_timeout=park_timeout)

    @staticmethod
    def exclusive(key: str, *, park_timeout: Duration = DEFAULT_PARK_TIMEOUT) -> "Lock":
        """A *writer* of a read/write lock (see :meth:`shared`): it holds the key alone, in
        ticket order with the readers; its fence (``$lock.fence``) strictly increases.

        :param key: as :meth:`mutex`'s.
        :param park_timeout: as :meth:`shared`'s. Default: 30 seconds.
        """
        return SharedLock.of(key, mode=SharedKind.WRITE_MODE, park_timeout=park_timeout)

    @staticmethod
    def rate(key: str, *, limit: int, period: Duration = Duration.minutes(1),
             at_once: Optional[int] = None) -> "Lock":
        """A rate limit per key: at most ``limit`` entries per key in any window of ``period``
        (checked on the Step Functions service clock), e.g. 10 calls of a partner API per
        minute. An entry is admitted by one conditional write on the key's rate item, which
        reserves its entry time - now, or when the next permit frees; the run waits exactly
        until then (a computed Wait, rounded up to the second, no polling), and fails at once
        with ``Lock.Timeout`` if that is past its ``max_wait``. Nothing is held while the work
        runs, so nothing is released, and runs admitted together work side by side. A section's
        ``max_wait`` left unset is 15 minutes or, when that could outgrow the history budget (a
        refusal round per entry admitted meanwhile), the longest wait that fits it.
        ``$lock.fence`` is the admission's number (strictly increasing per key),
        ``$lock.acquiredAt`` its reserved time. A ``LockClient`` spends
        the same permits (``LockClient.admit``). See
        :mod:`locked_workflow.state_machines.rate_protocol`.

        :param key: as :meth:`mutex`'s.
        :param limit: entries admitted per key in any window of ``period``, 1 to 1000. Every
            participant of a key must use the same ``limit`` and ``period``.
        :param period: the window, whole seconds from 1 s to 1 day. Default: 1 minute.
        :param at_once: also at most this many runs per key in the work at a time, 1 to 32 (a
            partner API that takes 2 calls at once and 10 a minute: ``limit=10, at_once=2``).
            A run takes one of ``at_once`` slots (a semaphore's, with its wait path, recovery
            and release on every path) before its permit and holds it through the permit's
            wait and the work, so its entry keeps both limits. ``$lock`` is then the slot's
            (``fence`` per slot) plus ``admission`` (the admission's number) and
            ``admittedAt`` (its reserved time). Every participant of a key must use the same
            ``at_once``. Default: ``None`` (no concurrency limit: runs admitted together work
            side by side).
        """
        return RateLock.of(key, limit=limit, period=period, at_once=at_once)

