"""A Standard execution fails when its history reaches 25,000 events, as in Step Functions.

Gap (moto 5.2.1): an execution's history grows without bound; a wait loop that would hit
the service's hard quota runs on (and succeeds) locally.

The service: "Maximum execution history size: 25,000 events. If the execution history
reaches this quota, the execution will fail"
(https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html); "When an
execution reaches 24,999 events, it waits for the next event to happen. If the event number
25,000 is ExecutionSucceeded, the execution finishes successfully. If the event number
25,000 isn't ExecutionSucceeded, the ExecutionFailed event is logged and the state machine
execution fails because of reaching the history limit"
(https://docs.aws.amazon.com/step-functions/latest/dg/bp-history-limit.html). The pages do
not name the error; the service reports ``States.Runtime`` with the cause "The execution
reached the maximum number of history events (25000).". Such an execution is not
redrivable (``redriveStatusReason`` "Execution history event limit exceeded",
https://docs.aws.amazon.com/step-functions/latest/apireference/API_DescribeExecution.html).
Express workflows have no such quota
(https://docs.aws.amazon.com/step-functions/latest/dg/express-limits.html).

Fix: a Standard execution whose next event would be number ``limit`` records, unless that
event closes the execution anyway (ExecutionSucceeded, or an ExecutionFailed / Aborted /
TimedOut of its own), an ``ExecutionFailed`` event with that error and cause instead, ends
FAILED at once, and records nothing after it. The state in flight is abandoned as a stopped
execution's is: work it started (a Lambda invocation) may still finish. ``limit`` is
``LocalCloud(history_event_limit=...)`` (default 25,000) so a test can reach it quickly;
the count carries over a ``RedriveExecution``, as the history does, and an execution cut
by the limit refuses ``RedriveExecution`` with ``ExecutionNotRedrivable``.

Proof: ``tests/local/test_patch_history_limit.py``.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from moto.stepfunctions.parser.api import (
    ExecutionFailedEventDetails,
    HistoryEventType,
    StateMachineType,
)
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import StatesErrorNameType
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
from moto.stepfunctions.parser.asl.eval.event.event_manager import EventManager
from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

from locked_workflow.testing.patches import redrive
from locked_workflow.testing.patches.execution_end import CLOSING_EVENTS
from locked_workflow.testing.seams import patch_attribute, wrap

#: The service's hard quota on a Standard execution's history.
DEFAULT_LIMIT = 25_000


def validate_limit(limit: int) -> int:
    """``limit`` if it can be a history limit (an ExecutionStarted, one event, then the cut)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 3:
        raise ValueError(f"history_event_limit must be an integer of at least 3, got {limit!r}")
    return limit


def failure(limit: int) -> ExecutionFailedEventDetails:
    return ExecutionFailedEventDetails(
        error=StatesErrorNameType.StatesRuntime.to_name(),
        cause=f"The execution reached the maximum number of history events ({limit}).",
    )


@dataclass
class _Budget:
    """The history budget of one execution (kept on its event-id generator, which a redrive keeps)."""

    execution: Any
    limit: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    cut: bool = False


def apply(stack: ExitStack, limit: int = DEFAULT_LIMIT) -> None:
    validate_limit(limit)
    def budgeted_environment(original_environment):  # type: ignore[no-untyped-def]
        def _get_evaluation_environment(self):  # type: ignore[no-untyped-def]
            env = original_environment(self)
            execution = self._execution_communication.execution
            if env.execution_type == StateMachineType.STANDARD:
                env.event_manager._event_id_gen._local_budget = _Budget(execution, limit)
            return env

        return _get_evaluation_environment

    def counted(original_add_event):  # type: ignore[no-untyped-def]
        def add_event(self, context, event_type, *args, **kwargs):  # type: ignore[no-untyped-def]
            budget: _Budget | None = getattr(self._event_id_gen, "_local_budget", None)
            if budget is None:
                return original_add_event(self, context, event_type, *args, **kwargs)
            with budget.lock:
                next_id = self._event_id_gen._next_id
                if budget.cut or next_id > budget.limit:  # the execution has ended
                    return -1
                if next_id < budget.limit or event_type in CLOSING_EVENTS:
                    return original_add_event(self, context, event_type, *args, **kwargs)
                budget.cut = True
                details = failure(budget.limit)
                event_id = original_add_event(
                    self, context, HistoryEventType.ExecutionFailed,
                    EventDetails(executionFailedEventDetails=details),
                )
            worker = budget.execution.exec_worker
            worker.env.set_error(details)
            worker._execution_communication.terminated()
            return event_id

        return add_event

    def redrive_execution(execution):  # type: ignore[no-untyped-def]
        worker = execution.exec_worker
        budget = getattr(worker.env.event_manager._event_id_gen, "_local_budget", None) if worker.env else None
        if budget is not None and budget.cut:
            raise redrive.ExecutionNotRedrivable("Execution history event limit exceeded.")
        return original_redrive(execution)

    original_redrive = redrive.redrive
    wrap(stack, ExecutionWorker, "_get_evaluation_environment", budgeted_environment, by=__name__)
    patch_attribute(stack, redrive, "redrive", redrive_execution, by=__name__)
    wrap(stack, EventManager, "add_event", counted, by=__name__)
