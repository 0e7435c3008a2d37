"""The ticket queue of the queueing kinds (``Lock.fair``, ``Lock.shared`` / ``Lock.exclusive``),
built once: the waiters' path after a refused fast path, every kind's the same algorithm::

    Fast --refused--> Enqueue (ticket) --> Park (on a task token in my row) --woken--> Claim --> work
                                            |--refused (my turn)--> Admit (grant myself) --> work
                                            |--park timeout--> WaitedEnough? --> Inspect (the fallback)
       Inspect: granted -> Claim | passed -> Requeue -> Enqueue | my turn -> Admit
                | the kind's fallback (the handoff for a head that does not move, liveness) | else -> Park
       max_wait spent, or an error while queued: Leave (mark my row left) -> ClaimOnLeave
                (granted meanwhile: the work after all) | Left? -> Lock.Timeout or the error

As Curator keeps one queue algorithm (``LockInternals``) and lets a lock kind decide only
whether a place in it holds the lock (``LockInternalsDriver.getsTheLock``; its read/write
lock is two drivers over that one queue), a kind here declares a :class:`QueueDriver`: what
"my turn" and "granted" mean read on the lock item (fair: my ticket is ``served + 1`` on a
free lock; a reader: no writer holds; a writer: nobody holds), and the writes that spell
them (its ticket, its own grant, its claim, its park, its look). :class:`TicketQueue` wires
them; a driver reads what it needs of the queue from the queue's public attributes, set as
the queue builds (one queue per ``build_acquire`` call: a kind keeps nothing between calls).

The queue wires its states in one fixed order for every kind. That order is part of what it
renders: CDK lists a state machine's states in the order its graph reaches them, and it reaches
a state's *incoming* transitions before its outgoing ones, so wiring the same transitions in
another order reorders the definition (``make templates-snapshot ARGS=--check`` shows it).

The handoff (whoever frees the head runs it: a release, a helper at the fallback) is each
kind's own module: it is not a driver decision but a different protocol (the fair lock's
granter *takes* the row and may revoke an unconfirmed grant; the read/write lock's granter
*reads* the row and grants with a claim-window lease that lapses, admitting readers in turn).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import NamedTuple, Optional, Sequence

from aws_cdk import aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks

from locked_workflow.constructs_lib.dynamodb_tasks import attribute_value, retry_transient, update_item_task
from locked_workflow.constructs_lib.kinds.base import SectionContext
from locked_workflow.constructs_lib.section_record import Role
from locked_workflow.state_machines import errors
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines.lock_protocol import ENTRY, jsonata


def queue_vars(section: SectionContext) -> dict:
    """The queue's variables beside the section's (named after its lock variable): my
    ``ticket``, the lock item as my fallback ``seen`` it, a ``handoff``'s run, and (coalescing)
    the ticket my ticket ``superseded``."""
    lock = section.variables["lock"]
    return {"ticket": lock + "Ticket", "seen": lock + "Seen", "handoff": lock + "Handoff",
            "superseded": lock + "Superseded"}


def row_key(key: str, ticket: str) -> dict:
    """The key of the queue row of ``ticket`` (JSONata) on the lock ``key`` (JSONata)."""
    return {protocol.KEY_ATTRIBUTE: attribute_value({"S": jsonata(fair.row_key_expression(key, ticket))})}


def choice(section: SectionContext, suffix: str) -> sfn.Choice:
    """A JSONata Choice state named ``<suffix>?`` in the section."""
    return sfn.Choice.jsonata(section, suffix, state_name=section.state_name(f"{suffix}?"))


def when(state: sfn.Choice, condition: str, then: sfn.IChainable) -> sfn.Choice:
    """``state`` goes to ``then`` when the JSONata ``condition`` holds."""
    return state.when(sfn.Condition.jsonata(jsonata(condition)), then)


class Wait(NamedTuple):
    """Where a queued waiter waits (:meth:`QueueDriver.build_wait`)."""

    #: The state after the ticket (a park, or an EXPRESS poll).
    first: sfn.State
    #: Where a look that decided nothing goes back to (the park, or the next poll round).
    again: sfn.State
    #: The park on a task token (``None``: the waiter polls).
    park: Optional[sfn.TaskStateBase]


class QueueDriver(ABC):
    """What one queueing kind decides in the ticket queue: the traits and hooks of the queue,
    declared with their defaults. A driver is made for one ``build_acquire`` call."""

    #: The errors of an acquiring write (the head's own grant, a claim) after which the waiter
    #: looks again (Inspect). Default: a refusal only.
    look_again_errors: Sequence[str] = (errors.CONDITION_FAILED,)
    #: The granter takes (deletes) the row of the waiter it wakes: the waiter's claim after a
    #: wake-up (``Confirm``) or after leaving goes straight to the work. ``False``: the granter
    #: only reads the row, and every claim drops it first (``DropRow``). Default: ``False``.
    granter_takes_row: bool = False
    #: The error of a park refused (my ticket was passed, or may take the key now): an
    #: UpdateItem's, or a transaction's (a park with a ConditionCheck of the lock item).
    park_refused: str = errors.SDK_CONDITION_FAILED
    #: The step between the ticket and the wait (:meth:`after_enqueue`) may go to the look
    #: (``queue.inspect``). Default: ``False``.
    looks_after_ticket: bool = False

    # -- my turn (JSONata over the lock item as Inspect read it, ``queue.seen``) ---------------

    @abstractmethod
    def granted(self, queue: "TicketQueue") -> str:
        """JSONata: my ticket was granted the lock (a handoff woke me, or would have)."""

    @abstractmethod
    def my_turn(self, queue: "TicketQueue") -> str:
        """JSONata: my ticket is the head's (``served + 1``) and the key is free for me."""

    # -- the writes ----------------------------------------------------------------------------

    @abstractmethod
    def build_enqueue(self, queue: "TicketQueue", fast: sfn.TaskStateBase) -> tuple:
        """The ticket: (the write that takes it, the state a refused fast path goes to). Its
        own refusal (the fast path would enter now) is caught here."""

    @abstractmethod
    def build_admit(self, queue: "TicketQueue") -> sfn.TaskStateBase:
        """The head's grant to itself (recorded here, chained by :meth:`after_admit`)."""

    @abstractmethod
    def build_claim(self, queue: "TicketQueue", suffix: str, *, outputs: Optional[str] = None) -> sfn.TaskStateBase:
        """The confirm of a grant handed to my ticket (recorded as an acquisition)."""

    @abstractmethod
    def build_wait(self, queue: "TicketQueue") -> Wait:
        """The wait in the queue (``queue.admit``: where a refused park goes; its catch is the
        queue's)."""

    @abstractmethod
    def build_inspect(self, queue: "TicketQueue") -> sfn.TaskStateBase:
        """The fallback's read of the lock item, assigning ``queue.vars['seen']`` (its
        failures are the queue's: back to the wait)."""

    # -- hooks with defaults -------------------------------------------------------------------

    def refused_at_once(self, queue: "TicketQueue") -> sfn.State:
        """``max_wait`` 0: where a refused fast path goes. Default: ``Lock.Timeout``."""
        return queue.timeout

    def leaving_before_ticket(self, queue: "TicketQueue") -> Sequence[sfn.State]:
        """States before the ticket whose errors end the acquire as a queued waiter's do
        (``queue.left``: the error, kept). Default: none."""
        return ()

    def leave_entry(self, queue: "TicketQueue", leave: sfn.State) -> sfn.State:
        """The first state of a leave (``leave``: the LEAVE of my row). Default: ``leave``."""
        return leave

    def after_admit(self, queue: "TicketQueue") -> sfn.State:
        """Where the head's own grant goes. Default: ``queue.drop`` (then the work)."""
        return queue.drop

    def after_enqueue(self, queue: "TicketQueue", wait: sfn.State) -> sfn.State:
        """Where the ticket goes (``wait``: the first wait). Default: ``wait``."""
        return wait

    def park_catches(self, queue: "TicketQueue", park: sfn.TaskStateBase) -> None:
        """More ways a park ends (after its refusal's, before its timeout's)."""

    def ended_branches(self, queue: "TicketQueue") -> list:
        """The look's branches (JSONata condition, state) for a ticket that can no longer be
        granted, before "passed" (requeue)."""
        return []

    def refused_branches(self, queue: "TicketQueue") -> list:
        """The look's branches for a head that may not take the key, before "my turn"."""
        return []

    def behind_branches(self, queue: "TicketQueue", decide: sfn.Choice) -> list:
        """The look's branches after "my turn": a head that does not move (the kind's
        handoff), a holder to check (``decide``: the look, to come back to)."""
        return []


class TicketQueue:
    """The waiters' path of one section, after its kind's fast path: built once per
    ``build_acquire`` call with the kind's :class:`QueueDriver` (its states refer to each
    other while they are built). The attributes a driver reads are set as they are built."""

    def __init__(self, section: SectionContext, driver: QueueDriver, *, lease_ms: int) -> None:
        self.section, self.driver, self.lease_ms = section, driver, lease_ms
        #: The queue's variables (:func:`queue_vars`) and their JSONata.
        self.vars = queue_vars(section)
        self.ticket, self.seen = f"${self.vars['ticket']}", f"${self.vars['seen']}"
        #: Me and my key (the entry record's).
        self.me, self.key = f"{ENTRY}.owner", f"{ENTRY}.key"

    def build(self, fast: sfn.TaskStateBase) -> None:
        """The waiters' path after a refused fast path ``fast``."""
        section, v, d = self.section, self.section.variables, self.driver
        #: ``Lock.Timeout`` (max_wait spent).
        self.timeout = sfn.Fail.jsonata(
            section, "Timeout", state_name=section.state_name("Timeout"), error=errors.ERROR_TIMEOUT,
            cause=f"the lock was held by another run for longer than max_wait ({section.max_wait_ms} ms)")
        section.record(self.timeout, Role.TIMEOUT)
        if section.max_wait_ms == 0:
            fast.add_catch(d.refused_at_once(self), errors=[errors.CONDITION_FAILED])
            return
        failed = sfn.Fail.jsonata(section, "QueueFailed", state_name=section.state_name("QueueFailed"),
                                  error=jsonata(f"${v['wait']}.error.Error"), cause=jsonata(f"${v['wait']}.error.Cause"))
        #: After a leave: ``Lock.Timeout``, or the error that made me leave.
        self.left = when(choice(section, "Left"), f"$exists(${v['wait']}.error)", failed).otherwise(self.timeout)
        #: The catch of an error while queued: kept, then leave.
        self.on_error = dict(
            errors=["States.ALL"], outputs=jsonata("$states.input"),
            assign={v["wait"]: jsonata(f"$merge([${v['wait']}, {{'error': $states.errorOutput}}])")})

        # the ticket (refused: the fast path would enter now - the kind's way back to it)
        enqueue, self.to_queue = d.build_enqueue(self, fast)
        enqueue.add_catch(self.left, **self.on_error)
        fast.add_catch(self.to_queue, errors=[errors.CONDITION_FAILED], outputs=jsonata("$states.input"),
                       assign={v["wait"]: jsonata(protocol.wait_bookkeeping_expression(v["wait"]))})

        for state in d.leaving_before_ticket(self):
            state.add_catch(self.left, **self.on_error)

        #: The work, after my row is gone (best effort: a row of a served ticket is never read).
        self.drop = self.delete_row("DropRow", outputs=f"{ENTRY}.input")
        self.drop.add_catch(section.protected, errors=["States.ALL"], outputs=jsonata(f"{ENTRY}.input"))
        self.drop.next(section.protected)
        #: My turn: the head grants itself.
        self.admit = d.build_admit(self)
        #: A grant handed to me, found by a look.
        self.claim = d.build_claim(self, "Claim")
        self.claim.next(self.drop)
        #: Passed (skipped, or superseded): my row goes, and I queue again.
        self.requeue = self.delete_row("Requeue")
        self.requeue.next(self.to_queue)
        self.requeue.add_catch(self.to_queue, errors=["States.ALL"], outputs=jsonata("$states.input"))
        #: Giving up (max_wait spent, or an error while queued).
        self.leave = self._build_leave()

        wait = d.build_wait(self)
        #: Where a look that decided nothing goes back to.
        self.wait_again = wait.again
        if not d.looks_after_ticket:
            enqueue.next(d.after_enqueue(self, wait.first))
        acquiring = [self.admit, self.claim]
        if wait.park is not None:  # refused: my ticket may take the key now (or was passed)
            wait.park.add_catch(self.admit, errors=[d.park_refused], outputs=jsonata("$states.input"))
        if wait.park is not None and d.granter_takes_row:  # woken = granted, unconfirmed: confirm it first
            confirm = d.build_claim(self, "Confirm", outputs=jsonata(f"{ENTRY}.input"))
            confirm.next(section.protected)
            wait.park.next(confirm)
            acquiring.append(confirm)
        elif wait.park is not None:
            wait.park.next(self.claim)
        self._build_inspect()
        if wait.park is not None:  # a park ends woken (granted), refused (my turn), nudged, or by its timeout
            park = wait.park
            d.park_catches(self, park)
            park.add_catch(self.waited_enough(self.inspect), errors=[errors.STATES_TIMEOUT],
                           outputs=jsonata("$states.input"),
                           assign={v["wait"]: jsonata(protocol.wait_bookkeeping_expression(v["wait"]))})
            park.add_catch(self.leave, **self.on_error)
        self.admit.next(d.after_admit(self))
        for state in acquiring:
            state.add_catch(self.inspect, errors=list(d.look_again_errors), outputs=jsonata("$states.input"))
            state.add_catch(self.leave, **self.on_error)
        if d.looks_after_ticket:  # (its step after the ticket goes to the look, built now)
            enqueue.next(d.after_enqueue(self, wait.first))

    def waited_enough(self, otherwise: sfn.State, *, suffix: str = "WaitedEnough") -> sfn.State:
        """max_wait spent: leave; else ``otherwise``."""
        section, v = self.section, self.section.variables
        if section.max_wait_ms is None:
            return otherwise
        return when(choice(section, suffix), protocol.waited_enough_expression(v["wait"], section.max_wait_ms),
                    self.leave).otherwise(otherwise)

    def _build_leave(self) -> sfn.State:
        """Mark my row left, then claim - handed to me meanwhile: the work after all."""
        section, d = self.section, self.driver
        leave = update_item_task(
            section, section.state_name("Leave"), section.table,
            fair.arguments(jsonata(fair.row_key_expression(self.key, self.ticket)), fair.LEAVE,
                           {":me": {"S": jsonata(self.me)}, ":one": {"N": "1"}}))
        retry_transient(leave)
        leave.add_catch(self.left, errors=["States.ALL"], outputs=jsonata("$states.input"))
        if d.granter_takes_row:
            claim = d.build_claim(self, "ClaimOnLeave", outputs=jsonata(f"{ENTRY}.input"))
            claim.next(section.protected)
        else:  # (DropRow takes the entry, as from Claim and Admit, and unwraps the section's input)
            claim = d.build_claim(self, "ClaimOnLeave")
            claim.next(self.drop)
        claim.add_catch(self.left, errors=["States.ALL"], outputs=jsonata("$states.input"))
        leave.next(claim)
        return d.leave_entry(self, leave)

    def _build_inspect(self) -> None:
        """The fallback: read the lock item (the driver's read), then decide."""
        d = self.driver
        #: The fallback's read of the lock item.
        self.inspect = read = d.build_inspect(self)
        read.add_catch(self.wait_again, errors=["States.ALL"], outputs=jsonata("$states.input"))
        decide = choice(self.section, "Decide")
        when(decide, d.granted(self), self.claim)
        for condition, state in d.ended_branches(self):
            when(decide, condition, state)
        when(decide, f"{self.seen}.served >= {self.ticket}", self.requeue)
        for condition, state in d.refused_branches(self):
            when(decide, condition, state)
        when(decide, f"{self.seen}.served = {self.ticket} - 1 and {d.my_turn(self)}", self.admit)
        for condition, state in d.behind_branches(self, decide):
            when(decide, condition, state)
        decide.otherwise(self.wait_again)
        read.next(decide)

    def delete_row(self, suffix: str, *, ticket: Optional[str] = None,
                   outputs: str = "$states.input") -> tasks.DynamoDeleteItem:
        """Delete my row (``ticket``: that ticket's, default mine)."""
        section = self.section
        delete = tasks.DynamoDeleteItem.jsonata(
            section, suffix, state_name=section.state_name(suffix), table=section.table,
            key=row_key(self.key, ticket or self.ticket), outputs=jsonata(outputs))
        retry_transient(delete)
        return delete
