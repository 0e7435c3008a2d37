"""The contract of a lock kind's *value*: what ``Lock.<factory>(...)`` returns.

A value is a kind's settings, validated at synth by the kind's own module, immutable and
shareable between sections; each section asks it for a fresh builder of its states
(:meth:`LockValue.builder`, a :class:`~locked_workflow.constructs_lib.kinds.base.KindBuilder`).
Every kind module declares its value class this way, beside its builder::

    @dataclass(frozen=True, init=False)
    class MutexLock(LockValue):
        key: str
        kind = "mutex"
        factory = "mutex(key)"

        @classmethod
        def of(cls, key: str) -> "MutexLock":    # the factory's validation
            return cls(unwrapped_key(key))

        def builder(self) -> KindBuilder:
            return MutexKind(self.key)

and :class:`~locked_workflow.constructs_lib.lock.Lock`'s factory (the public spelling, with
its keyword-only typed props and their defaults) delegates to ``of``.

This module imports no CDK at run time (the contract's CDK types are annotations only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Optional

from locked_workflow.constructs_lib.client_kind import ClientServed
from locked_workflow.state_machines.expressions import unwrap_jsonata

if TYPE_CHECKING:  # the CDK types of the contract (annotations only: no CDK at run time here)
    from aws_cdk import aws_dynamodb as dynamodb

    from locked_workflow.constructs_lib.kinds.base import KindBuilder


class LockValue(ClientServed):
    """A lock kind's value: its settings, as its factory validated them. Subclasses are frozen
    dataclasses whose fields are the settings, in order (``cls(*fields)``). From
    :class:`~locked_workflow.constructs_lib.client_kind.ClientServed`: ``factory`` (as messages
    spell it, ``Lock.<factory>``) and ``client_kind`` (the ``LockClient`` kind that joins its
    holders, ``LockClient(table, kind=Lock.fair(key))``; default ``None``: none)."""

    #: The kind's name, as errors and the docs spell it.
    kind: ClassVar[str]

    def __init__(self, *args: object) -> None:  # the dataclass fields, in order (frozen)
        for name, value in zip(self.__dataclass_fields__, args):  # type: ignore[attr-defined]
            object.__setattr__(self, name, value)

    @property
    def record_table(self) -> Optional["dynamodb.ITable"]:
        """The table the lock lives on when it is the record's own (``Lock.on_record``)."""
        return None

    def builder(self) -> "KindBuilder":
        """A fresh builder of this kind's states (one per section)."""
        raise NotImplementedError

    def for_express(self) -> "LockValue":
        """This lock as an EXPRESS state machine can run it (no task tokens)."""
        return self


def unwrapped_key(key: str, name: str = "key") -> str:
    """The JSONata of a ``key`` prop (``{% ... %}`` unwrapped); ``ValueError`` if it is not a
    JSONata template."""
    return unwrap_jsonata(key, name)
