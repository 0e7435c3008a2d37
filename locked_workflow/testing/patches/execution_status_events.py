"""Execution status events: an ending execution puts its status change on the bus.

Gap (moto 5.2.1): the Step Functions interpreter emits no EventBridge events, so a rule
on ``aws.states`` / ``Step Functions Execution Status Change`` (e.g. the lock's janitor,
which releases locks held by ABORTED / TIMED_OUT / FAILED executions) never fires.

Fix: after moto records an execution's final status
(``BaseExecutionWorkerCommunication.terminated``), call
:meth:`locked_workflow.testing.events.EventRouter.execution_ended`, at most once per
execution, which puts the event on the default bus (or drops it, when a test asks).

An execution's event goes to the bus of the cloud it started in: ``Execution.start`` tags the
execution with its cloud's router, and only that router announces its end - which a closed
cloud's router drops (``dropped_status_events``). Before, whichever cloud was open when an
execution ended announced it: an execution a closed ``LocalCloud`` left running (started by
work still in flight while the cloud stopped its executions) put its status event on the next
cloud's bus, where a janitor rule for a same-named state machine would have acted on it.

AWS: Step Functions sends ``Step Functions Execution Status Change`` events of Standard
workflows to the default event bus
(https://docs.aws.amazon.com/step-functions/latest/dg/eventbridge-integration.html,
https://docs.aws.amazon.com/eventbridge/latest/ref/events-ref-states.html).

Proof: ``tests/local/test_patch_execution_status_events.py``.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack

from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication, Execution

from locked_workflow.testing.events import TERMINAL_STATUSES, EventRouter
from locked_workflow.testing.seams import patch_attribute, wrap

_ONCE = threading.Lock()


def apply(stack: ExitStack, router: EventRouter) -> None:
    original_start = Execution.start

    def start(self):  # type: ignore[no-untyped-def]
        self._local_router = router  # the cloud the execution belongs to, for its whole life
        original_start(self)

    def announcing(original):  # type: ignore[no-untyped-def]
        def terminated(self):  # type: ignore[no-untyped-def]
            original(self)
            execution = self.execution
            with _ONCE:
                if getattr(execution, "_local_status_event_sent", False):
                    return
                if execution.exec_status is None or execution.exec_status.value not in TERMINAL_STATUSES:
                    return
                execution._local_status_event_sent = True
            owner = getattr(execution, "_local_router", None)
            if owner is not None:  # (None: started before the runtime was applied)
                owner.execution_ended(execution)

        return terminated

    patch_attribute(stack, Execution, "start", start, by=__name__)
    wrap(stack, BaseExecutionWorkerCommunication, "terminated", announcing, by=__name__)
