"""The semaphore kind (``Lock.semaphore``): ``limit`` holders per key, a mutex on one of
``limit`` slot items tried from a slot drawn per attempt -
:mod:`locked_workflow.state_machines.semaphore_protocol`. Its states are the mutex's
(:mod:`~locked_workflow.constructs_lib.kinds.mutex`) on the slot's key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from locked_workflow.constructs_lib.kinds.base import KindBuilder, SectionContext
from locked_workflow.constructs_lib.kinds.mutex import MutexKind
from locked_workflow.constructs_lib.kinds.value import LockValue, unwrapped_key
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines import semaphore_protocol as semaphore


class SemaphoreKind(MutexKind):
    """``limit`` holders per key: a mutex on one of ``limit`` slots (see semaphore_protocol)."""

    name = "semaphore"
    #: Its items are slots (``<key>#<slot>``): never a read/write lock's item.
    meets_shared_holds = False

    def __init__(self, user_key: str, limit: int) -> None:
        super().__init__(user_key)
        self.limit = limit

    def key_expression(self, namespace: str) -> str:
        return protocol.key_expression(self.user_key, namespace, semaphore.reserve_bytes(self.limit))

    def holds_same_lock(self, variable: str) -> str:
        return semaphore.holds_slot_expression(variable)

    def entry_fields(self, enclosing_lock_variables: Sequence[str] = ()) -> Mapping[str, str]:
        return {"slot": semaphore.first_slot_expression(self.limit)}

    def attempt_key(self, section: SectionContext) -> str:
        attempts = section.wait_policy.retries_for(section.max_wait_ms / 1000) + 1
        return semaphore.attempt_key_expression(
            limit=self.limit, wait_variable=section.variables["wait"], attempts_per_round=attempts
        )

    def inspect_key(self, section: SectionContext) -> str:
        return semaphore.inspect_key_expression(
            limit=self.limit, wait_variable=section.variables["wait"], every=section.liveness_check_every
        )


@dataclass(frozen=True, init=False)
class SemaphoreLock(LockValue):
    """``Lock.semaphore(key, limit=...)``: ``limit`` holders per key."""

    key: str
    limit: int
    kind = "semaphore"
    factory = "semaphore(key, limit=...)"

    @classmethod
    def of(cls, key: str, *, limit: int) -> "SemaphoreLock":
        """``Lock.semaphore``'s value: ``limit`` a whole number from 2 to ``MAX_LIMIT``."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 2 <= limit <= semaphore.MAX_LIMIT:
            raise ValueError(
                f"`limit` must be a whole number from 2 to {semaphore.MAX_LIMIT} (one holder: "
                f"Lock.mutex), got: {limit!r}"
            )
        return cls(unwrapped_key(key), limit)

    def builder(self) -> KindBuilder:
        return SemaphoreKind(self.key, self.limit)
