"""One ticket queue for the queueing kinds (issue 28): the fair lock (every form of it) and both
sides of the read/write lock build their waiters' path through
:class:`~locked_workflow.constructs_lib.kinds.ticket_queue.TicketQueue`, each with a driver of
its own, and the queue's look decides in one order for all of them. (That the refactoring onto
it changed no rendered state is proven by ``make templates-snapshot ARGS=--check``.)"""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_stepfunctions as sfn

from locked_workflow import Lock, LockedWorkflow, QueueLimit
from locked_workflow.constructs_lib.kinds import ticket_queue
from locked_workflow.constructs_lib.kinds.fair_queue import FairQueueDriver
from locked_workflow.constructs_lib.kinds.shared import SharedQueueDriver
from locked_workflow.constructs_lib.section_record import named_states, rendered_definition
from locked_workflow.state_machines.lock_protocol import jsonata

KEY = jsonata("$states.input.id")

KINDS = {
    "fair": (lambda: Lock.fair(KEY), sfn.StateMachineType.STANDARD, FairQueueDriver, "AcquireHead"),
    "fair-polling": (lambda: Lock.fair(KEY, polling=True), sfn.StateMachineType.EXPRESS, FairQueueDriver,
                     "AcquireHead"),
    "fair-newest": (lambda: Lock.fair(KEY, queue=QueueLimit.keep_newest(2)), sfn.StateMachineType.STANDARD,
                    FairQueueDriver, "AcquireHead"),
    "fair-oldest": (lambda: Lock.fair(KEY, queue=QueueLimit.keep_oldest(2)), sfn.StateMachineType.STANDARD,
                    FairQueueDriver, "AcquireHead"),
    "shared": (lambda: Lock.shared(KEY), sfn.StateMachineType.STANDARD, SharedQueueDriver, "Admit"),
    "exclusive": (lambda: Lock.exclusive(KEY), sfn.StateMachineType.STANDARD, SharedQueueDriver, "Admit"),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_queueing_kind_builds_its_waiters_path_with_the_one_ticket_queue(kind, monkeypatch):
    lock, machine_type, driver_type, admit = KINDS[kind]
    built = []
    build = ticket_queue.TicketQueue.build

    def recording(queue, fast):
        built.append(type(queue.driver))
        return build(queue, fast)

    monkeypatch.setattr(ticket_queue.TicketQueue, "build", recording)
    stack = cdk.Stack(cdk.App(), "Q")
    workflow = LockedWorkflow(stack, "L", lock=lock(), protected=sfn.Pass.jsonata(stack, "Work"),
                              state_machine_type=machine_type)
    assert built == [driver_type]  # one queue, driven by the kind's driver

    definition = rendered_definition(stack.resolve(workflow.state_machine.node.default_child.definition_string))
    by_suffix = {name.rsplit(".", 1)[-1]: state for name, state in named_states(definition["States"])}
    # the queue's states, in every kind
    for suffix in ("Enqueue", "Inspect", "Decide?", "Requeue", "Leave", "ClaimOnLeave", "DropRow", "Claim",
                   "Left?", "QueueFailed", "Timeout", admit):
        assert suffix in by_suffix, f"{kind}: no {suffix}"
    # the look decides in the queue's order: granted -> Claim, ..., passed -> Requeue, ..., my turn -> admit
    nexts = [c["Next"].rsplit(".", 1)[-1] for c in by_suffix["Decide?"]["Choices"]]
    assert nexts[0] == "Claim"
    assert nexts.index("Requeue") < nexts.index(admit)
    assert by_suffix["Requeue"]["Next"].rsplit(".", 1)[-1] in ("Enqueue", "CountQueue")
