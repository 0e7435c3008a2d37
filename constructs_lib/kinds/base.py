"""The contract between a locked section and its lock kind.

A :class:`~locked_workflow.constructs_lib.locked_section.LockedSection` makes one builder per
section from its ``lock`` value (``Lock.builder()``) and asks it for the kind's states; the
section builds what every kind shares (the entry, the Wait-state poll, the liveness check, the
hold's presence branch, the error path). Two declarations make that exchange explicit:

- :class:`SectionContext`: what the section gives a kind (names, table, variables,
  ``max_wait``, the protected work, rethrow, release-after-error, a few shared builders). A
  kind reads nothing else of the section.
- :class:`KindBuilder`: every trait and hook a kind has, with its default. A trait is a plain
  attribute the section reads; a hook is a method it calls. The section never asks whether a
  kind has a member: every member is declared here.

A new kind is one module in this package (a subclass of :class:`KindBuilder`, usually of
:class:`~locked_workflow.constructs_lib.kinds.mutex.MutexKind`, and its value: a
:class:`~locked_workflow.constructs_lib.kinds.value.LockValue` with its settings' validation)
plus its protocol module in :mod:`locked_workflow.state_machines`, and a factory on ``Lock``
that delegates to the value. A kind whose waiters queue by ticket builds no queue of its own:
it declares a :class:`~locked_workflow.constructs_lib.kinds.ticket_queue.QueueDriver` (what
"my turn" means, and the writes that spell it) for the one
:class:`~locked_workflow.constructs_lib.kinds.ticket_queue.TicketQueue`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Mapping, NamedTuple, Optional, Protocol, Sequence

from aws_cdk import aws_dynamodb as dynamodb, aws_stepfunctions as sfn
from constructs import Node

from locked_workflow.constructs_lib.section_record import Role
from locked_workflow.state_machines import errors, fair_protocol
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines.lock_protocol import ENTRY


def lost_cause_expression(held: str, fence: str) -> str:
    """JSONata: a ``Lock.Lost`` cause naming the hold - ``held`` (JSONata: what it held) and
    ``fence`` (JSONata: the fence or fences it held them with), both strings."""
    return f"'lock ' & {held} & ' (fence ' & {fence} & ') was taken over by another holder before it was released'"


class SectionContext(Protocol):
    """What a kind's builder uses of the section it builds states for (a
    :class:`~locked_workflow.constructs_lib.locked_section.LockedSection`, which is also the
    construct scope of every state a kind makes): the kinds depend on this contract, not on
    the section's module."""

    node: Node
    #: The ``Lock`` value the section was given.
    lock: Any
    #: The builder of the section's kind (a nested section's, when a kind compares nesting).
    kind: "KindBuilder"
    table: dynamodb.ITable
    key_namespace: str
    #: The section's variable names: ``lock``, ``wait``, ``holder``, ``redrives``, ``lost``,
    #: ``presence``, ``held``, ``done``.
    variables: Mapping[str, str]
    #: The protected work (the hold, with ``detect_cancellation``): where an acquire goes.
    protected: sfn.State
    #: Fails with the error in ``$states.input`` (States.* renamed).
    rethrow: sfn.State
    #: The kind's release after an error (set once :meth:`KindBuilder.build_release_after_error` ran).
    release_after_error: sfn.State
    wait_policy: protocol.WaitPolicy
    liveness_check_every: int
    max_wait_ms: int
    detect_cancellation: bool

    def state_name(self, suffix: str) -> str: ...

    def record(self, state: Any, role: Role, variable: Optional[str] = ...) -> None: ...

    def held_assign(self, state_name: str, when: Optional[str] = ...) -> dict: ...

    def after_acquire_failure(self, state: sfn.TaskStateBase) -> None: ...

    def probe_presence(self, describe: sfn.State, *, then: sfn.State) -> sfn.State: ...


class AcquireStates(NamedTuple):
    """What :meth:`KindBuilder.build_acquire` returns: the kind's acquire, by role."""

    #: The section branch's first state.
    first: sfn.State
    #: The acquire attempt: the section retries it and catches its refusal as a poll (unless
    #: the kind ``builds_own_wait_path``).
    attempt: sfn.State
    #: The last state before the work: the section chains the work to it (``.next``).
    acquired: Any
    #: Other states that try the same acquisition (a semaphore's ``AcquireAgain``): the
    #: section catches their refusal as a poll too (without fast retries of their own).
    retried: tuple = ()


class NextOfAll:
    """Several states that go on to the same next state, as one ``.next(state)`` (what a kind
    returns as :attr:`AcquireStates.acquired` when more than one state acquires)."""

    def __init__(self, *states: sfn.INextable) -> None:
        self.states = states

    def next(self, state: sfn.IChainable) -> sfn.Chain:
        for s in self.states:
            s.next(state)
        return sfn.Chain.start(state)


class KindBuilder(ABC):
    """The builder of one lock kind's states for one section: every trait and hook, declared
    with its default. Subclasses set the traits as class (or instance) attributes and override
    the hooks; the abstract ones have no sensible default."""

    #: The kind's name, as messages spell it.
    name: str = ""
    #: The entry record's field with the stored key (``keys`` for a multi-key lock).
    key_field: str = "key"
    #: Where the lock attributes live (a lock table's item; a record's, ``Lock.on_record``).
    item: protocol.LockItem = protocol.LOCK_TABLE_ITEM
    #: The acquire's error when the lock is held (a poll).
    refused: str = errors.CONDITION_FAILED
    #: The hold registers a presence token (``detect_cancellation``) ...
    presence: bool = True
    #: ... on a row of its own instead of the lock item (the janitor deletes an ended
    #: execution's rows).
    presence_rows: bool = False
    #: Its key may be a read/write lock's: its liveness check reads the whole lock item and
    #: frees a shared hold whose readers are gone (:meth:`shared_hold_branches`).
    meets_shared_holds: bool = False
    #: Its acquisitions are held until released (a rate limit's admissions are not: no janitor,
    #: no liveness check).
    holds: bool = True
    #: Its waiters park on a task token (woken by ``SendTaskSuccess``) instead of polling the
    #: lock item in Wait states (the section's history budget counts park rounds).
    parks_on_token: bool = False
    #: The form an EXPRESS machine runs of a parking kind: its waiters poll, and its hold keeps
    #: no presence branch.
    polling: bool = False
    #: It builds its waiters' path itself (its queue, its park or its computed Wait), instead
    #: of the section's Wait-state poll.
    builds_own_wait_path: bool = False
    #: The acquire's output: the work's input (a kind with states between them may keep the
    #: entry record, ``$states.input``, and give the work its input itself).
    acquire_outputs: str = f"{ENTRY}.input"
    #: A parking kind's park timeout (whole seconds; ``None``: it does not park).
    park_timeout_s: Optional[int] = None
    #: A rate limit's entries per period (``None``: no rate limit), for budget messages.
    rate_limit: Optional[int] = None
    #: It lives on the user's records (``Lock.on_record``: the value's ``record_table``): the
    #: section takes no lock table nor ``key_namespace``, and no section re-enters a hold on a
    #: lock table across it (nor it one). Default: ``False``.
    lives_on_records: bool = False
    #: Its parked waiters' fallback asks whether the holder and the head of the queue still
    #: run: a parking section refuses ``liveness_check_every=0``. Default: ``False``.
    parked_waiters_check_liveness: bool = False
    #: Ended executions leave entries in its ticket queue: the janitor takes them out (and
    #: wakes a free lock's new head). Default: ``False``.
    janitor_dequeues: bool = False
    #: How an EXPRESS state machine must spell this kind when it parks (its polling form, e.g.
    #: ``Lock.fair(key, polling=True)``), for the message refusing it there; ``None``: the
    #: kind has no EXPRESS form. Default: ``None``.
    express_form: Optional[str] = None

    def __init__(self, user_key: str) -> None:
        #: The key (or keys) as the user wrote it (JSONata, unwrapped).
        self.user_key = user_key

    # -- the key ------------------------------------------------------------------------------

    @abstractmethod
    def key_expression(self, namespace: str) -> str:
        """JSONata: the stored key (or keys) from the user's key."""

    @abstractmethod
    def holds_same_lock(self, variable: str) -> str:
        """JSONata over an enclosing section's lock variable ``variable``: true when a section
        of this kind would re-enter that hold (pass through); ``"false"``: not re-entrant."""

    def entry_fields(self, enclosing_lock_variables: Sequence[str] = ()) -> Mapping[str, str]:
        """Fields the kind adds to the entry record (``$key``: the stored key or keys;
        ``enclosing_lock_variables``: the lock variables of enclosing sections on this table)."""
        return {}

    def check_nesting(self, section: SectionContext, enclosing: Sequence[SectionContext]) -> None:
        """At render: refuse (``ValueError``) a nesting this kind cannot run, given the
        sections enclosing ``section`` on its table (outermost first). Default: any."""

    def attempt_key(self, section: SectionContext) -> str:
        """JSONata: the key an acquire attempt writes (a semaphore: one of its slots)."""
        return f"{ENTRY}.key"

    def inspect_key(self, section: SectionContext) -> str:
        """JSONata: the key the liveness check reads."""
        return f"{ENTRY}.key"

    # -- waiting ------------------------------------------------------------------------------

    def worst_case_events(self, max_wait_s: float) -> Optional[int]:
        """History events a kind that waits its own way adds to a run's wait (checked against
        the section's budget); ``None``: the section's own count (poll or park rounds)."""
        return None

    def worst_case_park_events(self, max_wait_s: float) -> int:
        """History events a parked waiter (``parks_on_token``) can record while it waits up to
        ``max_wait_s``, checked against the section's budget. Default: the ticket queue's park
        rounds of ``park_timeout_s``
        (:func:`~locked_workflow.state_machines.fair_protocol.worst_case_park_events`)."""
        return fair_protocol.worst_case_park_events(self.park_timeout_s, max_wait_s)

    def longest_park_wait_s(self, history_event_budget: Optional[int]) -> int:
        """A parking kind's wait when the section's ``max_wait`` is ``None``: the longest whose
        park rounds fit ``history_event_budget``. Default: the ticket queue's
        (:func:`~locked_workflow.state_machines.fair_protocol.unlimited_wait_s`)."""
        return fair_protocol.unlimited_wait_s(self.park_timeout_s, history_event_budget)

    def shared_hold_expression(self, section: SectionContext, item: str) -> str:
        """JSONata over the lock item a liveness check read (``meets_shared_holds``): what the
        check needs of a shared hold there (null if none owns it)."""
        return "null"

    def shared_hold_branches(self, section: SectionContext, *, holder_variable: str,
                             then: sfn.State) -> list:
        """The liveness check's branches (JSONata condition, first state) for a key a shared
        hold owns (``meets_shared_holds``)."""
        return []

    # -- the states ---------------------------------------------------------------------------

    @abstractmethod
    def build_acquire(self, section: SectionContext, lease_ms: int) -> AcquireStates:
        """The acquire's states (:class:`AcquireStates`; a plain 3-tuple in that order is read
        the same way). Built once per section; the later hooks receive what they need as
        arguments: a builder keeps nothing between calls."""

    @abstractmethod
    def build_release(self, section: SectionContext, lost: sfn.State, left: sfn.State) -> sfn.State:
        """The release after the work succeeded (``lost``: ``Lock.Lost``; ``left``: a
        re-entered section's way out)."""

    @abstractmethod
    def build_release_after_error(self, section: SectionContext, rethrow: sfn.State) -> sfn.State:
        """The release after an error of the work, then ``rethrow``."""

    @abstractmethod
    def build_retire(self, section: SectionContext, then: sfn.State) -> sfn.State:
        """After a task refused to resume (a redrive) or timed out: retire the acquisition
        (held for its stop grace from now), then ``then``."""

    def lost_cause(self, lock_variable: str) -> str:
        """JSONata: the cause of the section's ``Lock.Lost`` (the lock was taken over before it
        was released), naming the hold from the section's lock variable ``lock_variable`` (with
        its ``$``; see :func:`lost_cause_expression`). Default: a single-key hold's key and
        fence (``key``, ``fence``); a kind whose lock variable holds otherwise spells its own."""
        return lost_cause_expression(f"{lock_variable}.key", f"$string({lock_variable}.fence)")

    # -- presence (``detect_cancellation``) -----------------------------------------------------

    def presence_task(self, section: SectionContext) -> tuple[str, dict]:
        """The hold's presence registration: (aws-sdk DynamoDB action, its arguments).
        Default: a token on the one lock item."""
        return "updateItem", {
            "TableName": section.table.table_name,
            **protocol.present_arguments(lock_variable=section.variables["lock"], item=self.item),
        }

    def presence_key(self, section: SectionContext) -> str:
        """JSONata: the item where the hold marks its departure and reads its token back."""
        return f"${section.variables['lock']}.key"

    def depart_arguments(self, section: SectionContext) -> dict:
        """The hold's departure (its work is over: no token may be registered any more) on
        :meth:`presence_key`'s item: the arguments of an UpdateItem (all but the table)."""
        return protocol.depart_arguments(lock_variable=section.variables["lock"], item=self.item,
                                         key_jsonata=self.presence_key(section))
