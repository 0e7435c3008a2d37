"""Execution status events: an ending execution puts its status change on the bus.

Gap (moto 5.2.1): the Step Functions interpreter emits no EventBridge events, so a rule
on ``aws.states`` / ``Step Functions Execution Status Change`` (e.g. the lock's janitor,
which releases locks held by ABORTED / TIMED_OUT / FAILED executions) never fires.

Fix: after moto records an execution's final status
(``BaseExecutionWorkerCommunication.terminated``), call
:meth:`locked_workflow.testing.events.EventRouter.execution_ended`, at most once per
execution, which puts the event on the default bus (or drops it, when a test asks).

AWS: Step Functions sends ``Step Functions Execution Status Change`` events of Standard
workflows to the default event bus
(https://docs.aws.amazon.com/step-functions/latest/dg/eventbridge-integration.html,
https://docs.aws.amazon.com/eventbridge/latest/ref/events-ref-states.html).

Proof: ``tests/local/test_patch_execution_status_events.py``.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack

from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication

from locked_workflow.testing.events import TERMINAL_STATUSES, EventRouter
from locked_workflow.testing.seams import wrap

_ONCE = threading.Lock()


def apply(stack: ExitStack, router: EventRouter) -> None:
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
            router.execution_ended(execution)

        return terminated

    wrap(stack, BaseExecutionWorkerCommunication, "terminated", announcing, by=__name__)
