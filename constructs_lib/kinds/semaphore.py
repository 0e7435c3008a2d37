"""The semaphore kind (``Lock.semaphore``): ``limit`` holders per key, a mutex on one of
``limit`` slot items tried from a slot drawn per attempt -
:mod:`locked_workflow.state_machines.semaphore_protocol`. Its states are the mutex's
(:mod:`~locked_workflow.constructs_lib.kinds.mutex`) on the slot's key, plus one::

    Acquire (a slot; Retry: its refusal only, on the next slot)
       |--transient error (it may have applied)--> AcquireAgain (the same slot; transient Retry)
       |--ok--> work                                   |--ok--> work
       (refused: the section's wait path)              (refused: the section's wait path)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from locked_workflow.constructs_lib.dynamodb_tasks import retry_transient
from locked_workflow.constructs_lib.kinds.base import AcquireStates, KindBuilder, NextOfAll, SectionContext
from locked_workflow.constructs_lib.kinds.mutex import MutexKind
from locked_workflow.constructs_lib.kinds.value import LockValue, unwrapped_key
from locked_workflow.state_machines import errors
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines import semaphore_protocol as semaphore
from locked_workflow.state_machines.lock_protocol import jsonata


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

    def build_acquire(self, section: SectionContext, lease_ms: int) -> AcquireStates:
        """The mutex's acquire on a slot of the sweep, whose transient errors are retried on
        the same slot by ``AcquireAgain`` (semaphore_protocol, point 3): the acquire state's
        own Retry is the section's fast polls of a refusal, which move to the next slot."""
        v = section.variables
        acquire = self.acquire_task(section, "Acquire", lease_ms, key_jsonata=self.attempt_key(section))
        again = self.acquire_task(section, "AcquireAgain", lease_ms, key_jsonata=f"${v['slot']}", reentrant=False)
        retry_transient(again)
        acquire.add_catch(again, errors=list(errors.TRANSIENT_ERRORS),
                          assign={v["slot"]: jsonata(self.attempt_key(section))}, outputs=jsonata("$states.input"))
        self.catch_reentered(section, acquire)
        return AcquireStates(first=acquire, attempt=acquire, acquired=NextOfAll(acquire, again), retried=(again,))

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
