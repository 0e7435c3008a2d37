"""Every payload over 256 KiB fails with ``States.DataLimitExceeded``, as in Step Functions.

The service: "Maximum input or output size for a task, state, or execution: 262,144 bytes of
data as a UTF-8 encoded string. This quota affects tasks (activity, Lambda function, or
integrated service), state or execution output, and input data when scheduling a task,
entering a state, or starting an execution."
(https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html); the error is
``States.DataLimitExceeded`` ("the input of a state is larger than the payload size quota
after Parameters processing", and the same for a connector's and a state's output,
https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html); a
workflow variable holds "up to 256 KiB per state"
(https://docs.aws.amazon.com/step-functions/latest/dg/workflow-variables.html).

Gaps (moto 5.2.1): a service task's result and a state's output are checked, but

* a state's input is not: the input a Parallel gives its branches or a Map its iterations
  (after ``Arguments``/``Parameters``/``ItemSelector``), or the execution's input;
* a task's input after ``Arguments``/``Parameters`` (a Lambda payload, an SDK call's
  parameters, an activity's input) is not;
* ``Assign`` is not: a variable of any size is stored;
* the checks moto has count a payload's JSON with spaces after separators (and a string
  without its quotes) and fail at 262,144 bytes; the service counts the payload's bytes
  and allows 262,144.

Fix: a state whose input (when it is entered), task input, assigned variable or whole
``Assign`` is over 262,144 bytes (its JSON, UTF-8 encoded) fails with
``States.DataLimitExceeded``; moto's own checks use the same bound. Where a state's
input is over the quota, it fails before its ``...StateEntered`` event (an execution's input
over the quota therefore fails the execution at its first state, where the service refuses
``StartExecution``). That no Catch or Retry handles the error is ``patches/terminal_errors``.

Proof: ``tests/local/test_patch_data_limit.py``.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from typing import Any

from moto.stepfunctions.parser.api import HistoryEventType, TaskFailedEventDetails
from moto.stepfunctions.parser.asl.component.common.assign.assign_decl import AssignDecl
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
    FailureEvent,
    FailureEventException,
)
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import StatesErrorName
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import StatesErrorNameType
from moto.stepfunctions.parser.asl.component.state import state as state_module
from moto.stepfunctions.parser.asl.component.state.exec.state_task import state_task_lambda
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import state_task_service
from moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task import StateTask
from moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task_activitiy import StateTaskActivity
from moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task_lambda import StateTaskLambda
from moto.stepfunctions.parser.asl.component.state.state import CommonStateField
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails

from locked_workflow.testing.seams import patch_attribute

#: The service's payload quota: 256 KiB of UTF-8 encoded JSON.
MAX_BYTES = 262_144
_ERROR = StatesErrorNameType.StatesStatesDataLimitExceeded


def size(value: Any) -> int:
    """Bytes of ``value`` as the service counts them: its compact JSON, UTF-8 encoded."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str).encode("utf-8"))


def is_within_size_quota(value: Any) -> bool:
    return size(value) <= MAX_BYTES


def _fail(env, what: str) -> None:  # type: ignore[no-untyped-def]
    cause = f"{what} has a size exceeding the maximum number of bytes service limit ({MAX_BYTES} bytes)."
    raise FailureEventException(
        failure_event=FailureEvent(
            env=env,
            error_name=StatesErrorName(typ=_ERROR),
            event_type=HistoryEventType.TaskFailed,
            event_details=EventDetails(
                taskFailedEventDetails=TaskFailedEventDetails(error=_ERROR.to_name(), cause=cause)
            ),
        )
    )


def _check_state_input(original):  # type: ignore[no-untyped-def]
    def _eval_body(self, env):  # type: ignore[no-untyped-def]
        if not is_within_size_quota(env.states.get_input()):
            _fail(env, f"The input of the state '{self.name}'")
        return original(self, env)

    return _eval_body


def _check_task_input(original, payload_of):  # type: ignore[no-untyped-def]
    def _eval_parameters(self, env):  # type: ignore[no-untyped-def]
        parameters = original(self, env)
        if not is_within_size_quota(payload_of(parameters)):
            _fail(env, f"The input of the task in the state '{env.next_state_name}'")
        return parameters

    return _eval_parameters


def _assign_body(self, env):  # type: ignore[no-untyped-def]
    """``AssignDecl._eval_body``, with the quota checked before any variable is set."""
    declarations: dict[str, Any] = {}
    for declaration_binding in self.declaration_bindings:
        declaration_binding.eval(env=env)
        declarations.update(env.stack.pop())
    for identifier, value in declarations.items():
        if not is_within_size_quota(value):
            _fail(env, f"The variable '{identifier}' assigned in the state '{env.next_state_name}'")
    if not is_within_size_quota(declarations):
        _fail(env, f"The Assign of the state '{env.next_state_name}'")
    for identifier, value in declarations.items():
        env.variable_store.set(variable_identifier=identifier, variable_value=value)


def apply(stack: ExitStack) -> None:
    for module in (state_module, state_task_service, state_task_lambda):
        patch_attribute(stack, module, "is_within_size_quota", is_within_size_quota, by=__name__)
    patch_attribute(stack, CommonStateField, "_eval_body", _check_state_input(CommonStateField._eval_body), by=__name__)
    for cls, payload_of in (
        (StateTask, lambda parameters: parameters),
        (StateTaskActivity, lambda task_input: task_input),
        (StateTaskLambda, lambda parameters: parameters["Payload"]),
    ):
        patched = _check_task_input(cls.__dict__["_eval_parameters"], payload_of)
        patch_attribute(stack, cls, "_eval_parameters", patched, by=__name__)
    patch_attribute(stack, AssignDecl, "_eval_body", _assign_body, by=__name__)
