"""``RedriveExecution``: a failed, stopped or timed-out Standard execution continues.

Gap (moto 5.2.1): there is no ``RedriveExecution`` (the call fails as not implemented), and
``$states.context.Execution.RedriveCount`` does not exist.

Fix, modelled on the service's documented behaviour:

* the execution keeps its ARN and continues from its unsuccessful *top-level* state - the one
  that was running, or failed, when the execution ended - re-entering it with the input it
  had and the variables as they were when it was entered; earlier successful states are not
  run again;
* ``RedriveCount`` counts the redrives (0 in a first run); ``DescribeExecution`` reports
  ``redriveCount``, ``redriveDate`` and ``redriveStatus`` (and, as the service does, the
  ``stopDate`` of a TIMED_OUT execution); the history gets an
  ``ExecutionRedriven`` event and goes on; the state machine timeout starts again; when the
  execution ends again, its status-change event is emitted again (with ``redriveCount``);
* RUNNING, SUCCEEDED and EXPRESS executions raise ``ExecutionNotRedrivable``.

Simplification: for a Parallel or Map, the service reruns only the unsuccessful branches or
iterations, each from its unsuccessful step; here the top-level state is re-entered as a
whole (its Arguments evaluated again) and its branches run from their start. Work started
before the end and still running (a Lambda invocation) is not affected by either.

Proof: ``tests/local/test_patch_redrive.py``.
"""

from __future__ import annotations

import copy
import datetime
import threading
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any
from unittest import mock

from moto.core.exceptions import JsonRESTError
from moto.core.responses import ActionResult
from moto.stepfunctions.parser.api import (
    ExecutionRedrivenEventDetails,
    ExecutionStatus,
    HistoryEventType,
    StateMachineType,
)
from moto.stepfunctions.parser.asl.component.state.state import CommonStateField
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
from moto.stepfunctions.parser.asl.eval.event.event_manager import EventManager
from moto.stepfunctions.parser.backend.execution import Execution
from moto.stepfunctions.parser.utils import TMP_THREADS
from moto.stepfunctions.responses import StepFunctionResponse

REDRIVABLE = (ExecutionStatus.FAILED, ExecutionStatus.ABORTED, ExecutionStatus.TIMED_OUT)


class ExecutionNotRedrivable(JsonRESTError):
    code = 400

    def __init__(self, message: str) -> None:
        super().__init__("ExecutionNotRedrivable", message)


@dataclass
class _Entry:
    """A top-level state as it was entered: where a redrive continues from."""

    state: str
    input: Any
    variables: dict


def _remember_entries(original):  # type: ignore[no-untyped-def]
    def eval(self, env):  # type: ignore[no-untyped-def]
        execution = env.states.context_object.context_object_data.get("Execution")
        if isinstance(execution, dict):
            execution.setdefault("RedriveCount", 0)  # the service sets it in every run
        if not env.is_frame():
            env._local_redrive_entry = _Entry(
                state=self.name,
                input=copy.deepcopy(env.states.get_input()),
                variables=copy.deepcopy(env.variable_store._inner_scope),
            )
        return original(self, env)

    return eval


def _with_redrive_fields(original):  # type: ignore[no-untyped-def]
    def describe_execution(self):  # type: ignore[no-untyped-def]
        result = original(self)
        execution = self.stepfunction_backend.describe_execution(self._get_param("executionArn"))
        output = result.result
        if isinstance(output, dict) and isinstance(execution, Execution):
            count = getattr(execution, "_local_redrive_count", 0)
            output["redriveCount"] = count
            if count:
                output["redriveDate"] = execution._local_redrive_date
            redrivable = execution.sm_type == StateMachineType.STANDARD and execution.exec_status in REDRIVABLE
            output["redriveStatus"] = "REDRIVABLE" if redrivable else "NOT_REDRIVABLE"
            if execution.exec_status == ExecutionStatus.TIMED_OUT and execution.stop_date:
                output["stopDate"] = execution.stop_date  # moto leaves it out for TIMED_OUT
        return result

    return describe_execution


def redrive(execution: Execution) -> datetime.datetime:
    """Continue ``execution`` from its unsuccessful top-level state (see the module notes)."""
    if execution.sm_type != StateMachineType.STANDARD:
        raise ExecutionNotRedrivable("Express executions cannot be redriven")
    if execution.exec_status not in REDRIVABLE:
        raise ExecutionNotRedrivable(f"Execution is {execution.exec_status.value} and cannot be redriven.")
    worker = execution.exec_worker
    old_env = worker.env
    entry: _Entry | None = getattr(old_env, "_local_redrive_entry", None)
    if entry is None:
        raise ExecutionNotRedrivable("The execution never entered a state.")

    count = getattr(execution, "_local_redrive_count", 0) + 1
    redrive_date = datetime.datetime.now(tz=datetime.timezone.utc)
    old_manager = old_env.event_manager
    old_manager._local_closed = True  # the previous run's late events stay out of the history
    manager = EventManager(old_manager._cloud_watch_logging_session)
    with old_manager._mutex:
        manager._history_event_list.extend(old_manager._history_event_list)
        manager._event_id_gen = old_manager._event_id_gen

    # A new worker: the previous run's thread may still end late (a Lambda in flight) and
    # report to its own, spent, worker communication - never to this run's.
    worker = execution._get_start_execution_worker()
    env = worker._get_evaluation_environment()
    env.event_manager = manager
    env.states.context_object.context_object_data["Execution"]["RedriveCount"] = count
    env.variable_store._inner_scope.update(copy.deepcopy(entry.variables))
    env.states.reset(input_value=copy.deepcopy(entry.input))
    env._local_redrive_entry = entry
    env.event_manager.add_event(
        context=env.event_history_context,
        event_type=HistoryEventType.ExecutionRedriven,
        event_details=EventDetails(executionRedrivenEventDetails=ExecutionRedrivenEventDetails(redriveCount=count)),
    )

    communication = worker._execution_communication
    worker.env = env
    execution.exec_worker = worker
    execution._local_redrive_count = count
    execution._local_redrive_date = redrive_date
    execution.exec_status = ExecutionStatus.RUNNING
    execution._local_status_event_sent = False  # its next end is announced again
    execution.stop_date = None
    execution.error = None
    execution.cause = None
    program = worker._get_evaluation_entrypoint()

    def run() -> None:
        env.next_state_name = entry.state
        body = threading.Thread(target=program._eval_body, args=(env,), daemon=True)
        TMP_THREADS.append(body)
        body.start()
        timeout = program.timeout_seconds.timeout_seconds if program.timeout_seconds else None
        body.join(timeout=timeout)  # the state machine timeout starts again
        if body.is_alive():
            env.set_timed_out()
        communication.terminated()

    thread = threading.Thread(target=run, daemon=True)
    TMP_THREADS.append(thread)
    thread.start()
    return redrive_date


def _redrive_execution(self):  # type: ignore[no-untyped-def]
    execution = self.stepfunction_backend.describe_execution(self._get_param("executionArn"))
    return ActionResult({"redriveDate": redrive(execution)})


def apply(stack: ExitStack) -> None:
    stack.enter_context(mock.patch.object(CommonStateField, "eval", _remember_entries(CommonStateField.eval)))
    stack.enter_context(
        mock.patch.object(
            StepFunctionResponse, "describe_execution", _with_redrive_fields(StepFunctionResponse.describe_execution)
        )
    )
    stack.enter_context(
        mock.patch.object(StepFunctionResponse, "redrive_execution", _redrive_execution, create=True)
    )
