"""The lock kind a :class:`~locked_workflow.constructs_lib.lock_client.LockClient` takes part in,
chosen as a value - the way the constructs choose theirs (``Lock.fair(key)``)::

    LockClient("locks", kind=LockClient.FAIR)        # the client's own spelling
    LockClient("locks", kind=Lock.fair(key))         # the workflows' value on the same keys

A client serves three kinds: the mutex (``Lock.mutex``), the fair lock (``Lock.fair``) and the
read/write lock (``Lock.shared`` / ``Lock.exclusive``: one client takes both sides,
``acquire(key, shared=True)`` is a reader). Any other kind is a :class:`LockKindNotServed`,
raised when the client is made (before any AWS call).

No CDK here: the client runs in Lambda functions without aws-cdk-lib. The constructs' values
(:class:`~locked_workflow.constructs_lib.kinds.value.LockValue`) are :class:`ClientServed`: each
names the client kind that joins its holders.
"""

from __future__ import annotations

import warnings
from enum import Enum
from typing import Any, ClassVar, Optional

from locked_workflow.constructs_lib.client_lease import LockError


class ClientKind(str, Enum):
    """The lock kinds a ``LockClient`` takes part in (also ``LockClient.MUTEX``, ``.FAIR``,
    ``.READ_WRITE``)."""

    #: One holder per key; waiters poll the lock item (``Lock.mutex``).
    MUTEX = "mutex"
    #: One holder per key in arrival order: a ticket, polling as the head; a release hands the
    #: lock on and wakes a parked workflow (``Lock.fair``).
    FAIR = "fair"
    #: Many readers (``acquire(key, shared=True)``) or one writer per key, in arrival order
    #: (``Lock.shared`` / ``Lock.exclusive``).
    READ_WRITE = "read_write"


class ClientServed:
    """What a client reads of a lock value (the constructs' ``Lock`` values are these): the kind
    a ``LockClient`` takes to join the value's holders on the same keys."""

    #: Its factory as messages spell it (``Lock.<factory>``).
    factory: ClassVar[str]
    #: The client kind that joins its holders; ``None``: no client serves it. Default: ``None``.
    client_kind: ClassVar[Optional[ClientKind]] = None


class LockKindNotServed(LockError, ValueError):
    """A ``LockClient`` was given a lock kind it cannot take part in (``Lock.semaphore``,
    ``Lock.keys``, ``Lock.on_record``, ``Lock.rate``), before any AWS call."""


def client_kind_of(kind: Any = None, *, fair: bool = False, read_write: bool = False) -> ClientKind:
    """The client kind chosen by ``kind`` - a :class:`ClientKind`, or a lock value a client
    serves; ``None``: ``ClientKind.MUTEX`` - or, deprecated, by the flags ``fair=True`` /
    ``read_write=True`` (a ``DeprecationWarning`` pointing at the caller of the function that
    called this one: ``LockClient(...)``, ``grant_lock_client(...)``).

    :raises LockKindNotServed: a lock value no client serves.
    :raises TypeError: a ``kind`` of no kind, a flag that is not a bool.
    :raises ValueError: a flag set with ``kind``, or both flags.
    """
    for name, flag in (("fair", fair), ("read_write", read_write)):
        if not isinstance(flag, bool):
            raise TypeError(f"`{name}` must be True or False, got: {flag!r}")
    if kind is None:
        return _flagged(fair=fair, read_write=read_write)
    for name, flag in (("fair", fair), ("read_write", read_write)):
        if flag:
            raise ValueError(f"`{name}` must be False with `kind` (the kind says it), got: True")
    if isinstance(kind, ClientKind):
        return kind
    if isinstance(kind, ClientServed):
        if kind.client_kind is None:
            raise LockKindNotServed(
                "`kind` must be a lock kind a LockClient takes part in (Lock.mutex, Lock.fair, Lock.shared or "
                "Lock.exclusive; a Lock.rate key's permits are spent by any client's LockClient.admit), "
                f"got: Lock.{kind.factory}"
            )
        return kind.client_kind
    raise TypeError(
        f"`kind` must be LockClient.MUTEX, LockClient.FAIR, LockClient.READ_WRITE or a Lock value, got: {kind!r}"
    )


def _flagged(*, fair: bool, read_write: bool) -> ClientKind:
    """The kind the deprecated flags choose (a ``DeprecationWarning`` when one is set)."""
    if fair and read_write:
        raise ValueError("`read_write` must be False with `fair` (a read/write lock is fair already), got: True")
    for name, flag, chosen in (("fair", fair, ClientKind.FAIR), ("read_write", read_write, ClientKind.READ_WRITE)):
        if flag:
            warnings.warn(f"`{name}=True` is deprecated: use kind=LockClient.{chosen.name} (or the workflows' "
                          "Lock value on the same keys)", DeprecationWarning, stacklevel=4)
            return chosen
    return ClientKind.MUTEX
