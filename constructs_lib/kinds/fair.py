"""The fair lock kind (``Lock.fair``): the mutex's lock item with a ticket queue of one row per
waiter and direct handoff - :mod:`locked_workflow.state_machines.fair_protocol` wired into a section's states::

    Acquire (fast path) --ok--> work --> Take (the next row, if parked) --> Grant --> Wake (the next one's confirm)
       |                                  |--none--> Release (alone) | --queued--> TakeAny --> Next? --> ...
       |--held or queued--> Enqueue (ticket) --> Park (.waitForTaskToken) --woken--> Confirm (CLAIM) --> work
                                                  |--refused (ready)--> AcquireHead --> work
                                                  |--park timeout / Lock.Look--> Inspect (the fallback)
       Inspect: granted -> Claim -> work | skipped -> Requeue | head of a free lock -> AcquireHead
                | behind a free lock -> the handoff for its head | else -> Park

The kind is this module; its waiters' path (ticket, park, fallback, leave) is the ticket
queue (:mod:`~locked_workflow.constructs_lib.kinds.ticket_queue`) driven by
:class:`~locked_workflow.constructs_lib.kinds.fair_queue.FairQueueDriver`, its handoff
:mod:`~locked_workflow.constructs_lib.kinds.fair_handoff`.

The woken waiter confirms its grant (``CLAIM``) before its work, so a releaser that saw its
wake-up fail - or lose its response after it was delivered - may take back only a grant nobody
works under: between two holders the critical path is two writes (GRANT, CLAIM) and one
wake-up (``SendTaskSuccess``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from aws_cdk import Duration, aws_stepfunctions as sfn

from locked_workflow.constructs_lib import prop_types

from locked_workflow.constructs_lib.client_kind import ClientKind
from locked_workflow.constructs_lib.dynamodb_tasks import retry_transient, update_item_task
from locked_workflow.constructs_lib.section_record import Role
from locked_workflow.constructs_lib.kinds.base import AcquireStates, KindBuilder, SectionContext
from locked_workflow.constructs_lib.kinds.fair_handoff import build_handoff
from locked_workflow.constructs_lib.kinds.fair_queue import FairQueueDriver
from locked_workflow.constructs_lib.kinds.items import item_number
from locked_workflow.constructs_lib.kinds.mutex import MutexKind
from locked_workflow.constructs_lib.kinds.ticket_queue import TicketQueue
from locked_workflow.constructs_lib.kinds.value import LockValue, unwrapped_key
from locked_workflow.constructs_lib.queue_limit import QueueLimit
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines.lock_protocol import ENTRY, jsonata

#: A parked waiter's default ``park_timeout`` (``Lock.fair``, ``Lock.shared``, ``Lock.exclusive``).
DEFAULT_PARK_TIMEOUT = Duration.seconds(fair.DEFAULT_PARK_TIMEOUT_S)


def park_timeout_seconds(park_timeout: Duration) -> int:
    """A ``park_timeout`` prop in whole seconds: 1 s to 1 hour (``ValueError`` else)."""
    park_timeout_ms = prop_types.concrete_ms("park_timeout", park_timeout)
    if not 1000 <= park_timeout_ms <= 3_600_000 or park_timeout_ms % 1000:
        raise ValueError(
            f"`park_timeout` must be whole seconds from 1 s to 1 hour, got: {park_timeout_ms / 1000} s"
        )
    return park_timeout_ms // 1000


class FairKind(MutexKind):
    """One holder per key, granted in ticket order, handed off directly to the next waiter."""

    name = "fair"
    builds_own_wait_path = True
    parked_waiters_check_liveness = True
    janitor_dequeues = True
    express_form = "Lock.fair(key, polling=True)"

    def __init__(self, user_key: str, *, park_timeout_s: int, polling: bool = False,
                 queue: Optional[QueueLimit] = None) -> None:
        super().__init__(user_key)
        self.park_timeout_s = park_timeout_s
        #: EXPRESS: no task tokens - poll as the head, keeping a lease on the queue place
        self.polling = polling
        #: the bound on the queue per key (None: unbounded)
        self.queue = queue

    @property
    def parks_on_token(self) -> bool:  # type: ignore[override] - but its EXPRESS form, which polls
        return not self.polling

    @property
    def supersedes(self) -> bool:
        """Coalescing (``QueueLimit.keep_newest``): a newcomer supersedes the oldest waiter."""
        return self.queue is not None and self.queue.supersedes

    def key_expression(self, namespace: str) -> str:
        # the rows' keys add up to ROW_KEY_RESERVE_BYTES to the stored key
        return protocol.key_expression(self.user_key, namespace, fair.ROW_KEY_RESERVE_BYTES)

    # -- acquire --------------------------------------------------------------------------

    def build_acquire(self, section: SectionContext, lease_ms: int):
        v = section.variables
        stale = protocol.stale_owner_expression(v["wait"])
        values = {
            ":me": {"S": jsonata(f"{ENTRY}.owner")}, ":stale": {"S": jsonata(stale)},
            ":now": {"N": jsonata(protocol.NOW_EXPRESSION)},
            ":expiresAt": {"N": jsonata(protocol.lease_end_expression(lease_ms))},
            ":grace": {"N": jsonata(f"$string({ENTRY}.grace)")}, ":one": {"N": "1"}, ":zero": {"N": "0"},
        }
        fast = update_item_task(
            section, section.state_name("Acquire"), section.table,
            fair.arguments(jsonata(protocol.reentered_or(f"{ENTRY}.key", reentered_expression=f"$exists({ENTRY}.reentered)")),
                           fair.FAST_ACQUIRE, values, return_values="ALL_NEW"),
            assign={v["lock"]: jsonata(f"$merge([{protocol.lock_variable_expression()}, "
                                       f"{{'ticket': {item_number('$states.result.Attributes', fair.SERVED)}}}])"),
                    v["wait"]: jsonata("null")},
            outputs=jsonata(f"{ENTRY}.input"),
        )
        section.record(fast, Role.ACQUISITION, v["lock"])
        retry_transient(fast)
        self.catch_reentered(section, fast)
        driver = FairQueueDriver(values=values, park_timeout_s=self.park_timeout_s, polling=self.polling,
                                 queue=self.queue)
        TicketQueue(section, driver, lease_ms=lease_ms).build(fast)
        return AcquireStates(first=fast, attempt=fast, acquired=fast)

    # -- release ---------------------------------------------------------------------------

    def build_release(self, section: SectionContext, lost: sfn.State, left: sfn.State) -> sfn.State:
        v = section.variables
        return build_handoff(section, "Release", park_timeout_s=self.park_timeout_s, supersedes=self.supersedes,
                             key=f"${v['lock']}.key", me=f"${v['lock']}.owner",
                             start=f"${v['lock']}.ticket", holding=True, then=None,
                             stale=f"${v['lock']}.owner", lost=lost, left=left)

    def build_release_after_error(self, section: SectionContext, rethrow: sfn.State) -> sfn.State:
        v = section.variables
        return build_handoff(section, "ReleaseAfterError", park_timeout_s=self.park_timeout_s, supersedes=self.supersedes,
                             key=f"${v['lock']}.key", me=f"${v['lock']}.owner",
                             start=f"${v['lock']}.ticket", holding=True, then=rethrow,
                             stale=f"${v['lock']}.owner", lost=None, left=rethrow)


@dataclass(frozen=True, init=False)
class FairLock(LockValue):
    """``Lock.fair(key)``: one holder per key, granted in arrival order."""

    key: str
    park_timeout_s: int
    polling: bool
    queue: Optional[QueueLimit]
    kind = "fair"
    factory = "fair(key)"
    client_kind = ClientKind.FAIR

    @classmethod
    def of(cls, key: str, *, park_timeout: Duration, polling: bool, queue: Optional[QueueLimit]) -> "FairLock":
        """``Lock.fair``'s value (its props as the factory documents them)."""
        park_timeout_s = park_timeout_seconds(park_timeout)
        if not isinstance(polling, bool):
            raise TypeError(f"`polling` must be True or False, got: {polling!r}")
        if queue is not None and not isinstance(queue, QueueLimit):
            raise TypeError(
                f"`queue` must be a QueueLimit (QueueLimit.keep_newest(n), QueueLimit.keep_oldest(n)) or None, got: {queue!r}")
        return cls(unwrapped_key(key), park_timeout_s, polling, queue)

    def builder(self) -> KindBuilder:
        return FairKind(self.key, park_timeout_s=self.park_timeout_s, polling=self.polling, queue=self.queue)

    def for_express(self) -> "FairLock":
        return FairLock(self.key, self.park_timeout_s, True, self.queue)
