"""A callback for a task that has ended fails, as in Step Functions, and changes nothing.

Gap (moto 5.2.1): a ``.waitForTaskToken`` task that timed out (or ended otherwise) keeps its
token in the execution's callback pool. A later ``SendTaskSuccess`` with that token returns
success, and the task's still-waiting inner thread appends a ``TaskSucceeded`` to the history
while the execution is already in another state. Step Functions answers such a call with
``TaskTimedOut`` (the task timed out) or ``TaskDoesNotExist``: a sender that gets success
believes it woke a waiter that is no longer there - kinder than AWS.

Fix: when a callback task's state ends, its token's endpoint is closed: a later
SendTaskSuccess, SendTaskFailure or SendTaskHeartbeat fails with ``TaskTimedOut`` when the
task ended without a callback (timed out, failed, cancelled), else ``TaskDoesNotExist``, and
nothing reaches the history (moto's own answer for a timed-out consumer raises a TypeError:
its ``TaskTimedOut()`` lacks a message). (A callback that lands while the timeout is being decided may
still be accepted and ignored: a window of microseconds.) Each callback token is also noted with
its execution's ARN (:func:`execution_arn_of`), so a callback finds its execution at once.

AWS: ``SendTaskSuccess``/``SendTaskFailure``/``SendTaskHeartbeat`` for a token whose task
has closed fail with ``TaskTimedOut`` ("the task token has either expired or the task associated
with the token has already been closed") or ``TaskDoesNotExist``
(https://docs.aws.amazon.com/step-functions/latest/apireference/API_SendTaskSuccess.html#API_SendTaskSuccess_Errors).

Proof: ``tests/local/test_patch_late_callbacks.py``.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack

from moto.core.exceptions import AWSError
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_callback import (
    StateTaskServiceCallback,
)
from moto.stepfunctions.parser.asl.eval.callback.callback import CallbackPoolManager

from locked_workflow.testing.seams import patch_attribute

class TaskTimedOut(AWSError):
    TYPE = "TaskTimedOut"
    STATUS = 400


class TaskDoesNotExist(AWSError):
    TYPE = "TaskDoesNotExist"
    STATUS = 400


#: The attribute a closed endpoint carries: ``"timed out"`` (no callback came) or ``"ended"``.
_CLOSED = "_locked_workflow_task_closed"


#: Callback token -> the ARN of the execution whose task it belongs to.
_TOKEN_EXECUTIONS: dict[str, str] = {}


def execution_arn_of(token: str) -> str | None:
    """The ARN of the execution that ``token``'s callback task belongs to (None if unknown:
    an activity task's token, or a token this runtime never handed out)."""
    return _TOKEN_EXECUTIONS.get(token) if isinstance(token, str) else None


def close(endpoint) -> None:  # type: ignore[no-untyped-def]
    """Close ``endpoint``'s task: callbacks on its token fail from now on (:func:`refuse`)."""
    setattr(endpoint, _CLOSED, "timed out" if endpoint.get_outcome() is None else "ended")


def closed(endpoint) -> bool:  # type: ignore[no-untyped-def]
    """Whether ``endpoint``'s task has been closed."""
    return getattr(endpoint, _CLOSED, None) is not None


def refuse(endpoint) -> None:  # type: ignore[no-untyped-def]
    """``TaskTimedOut`` (no callback came) or ``TaskDoesNotExist`` if ``endpoint``'s task is closed."""
    state = getattr(endpoint, _CLOSED, None)
    if state == "timed out":
        raise TaskTimedOut("Task Timed Out: the task of this token timed out or ended before the callback")
    if state is not None:
        raise TaskDoesNotExist("Task Does Not Exist: the task of this token has ended")


def apply(stack: ExitStack) -> None:
    current = threading.local()  # the endpoint the callback state evaluated in this thread added
    original_add = CallbackPoolManager.add
    original_notify = CallbackPoolManager.notify
    original_heartbeat = CallbackPoolManager.heartbeat
    original_eval_body = StateTaskServiceCallback._eval_body

    def add(self, callback_id):  # type: ignore[no-untyped-def]
        endpoint = original_add(self, callback_id)
        current.endpoint = endpoint
        env = getattr(current, "env", None)
        if env is not None and isinstance(callback_id, str):
            _TOKEN_EXECUTIONS[callback_id] = env.states.context_object.context_object_data["Execution"]["Id"]
        return endpoint

    def notify(self, callback_id, outcome):  # type: ignore[no-untyped-def]
        endpoint = self.get(callback_id)
        if endpoint is not None:
            refuse(endpoint)
        return original_notify(self, callback_id, outcome)

    def heartbeat(self, callback_id):  # type: ignore[no-untyped-def]
        endpoint = self.get(callback_id)
        if endpoint is not None:
            refuse(endpoint)
        return original_heartbeat(self, callback_id)

    def _eval_body(self, env):  # type: ignore[no-untyped-def]
        current.endpoint = None
        current.env = env
        try:
            original_eval_body(self, env)
        finally:
            current.env = None
            endpoint, current.endpoint = getattr(current, "endpoint", None), None
            if endpoint is not None:
                close(endpoint)

    stack.callback(_TOKEN_EXECUTIONS.clear)
    patch_attribute(stack, CallbackPoolManager, "add", add, by=__name__)
    patch_attribute(stack, CallbackPoolManager, "notify", notify, by=__name__)
    patch_attribute(stack, CallbackPoolManager, "heartbeat", heartbeat, by=__name__)
    patch_attribute(stack, StateTaskServiceCallback, "_eval_body", _eval_body, by=__name__)
