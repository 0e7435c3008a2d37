"""Each attempt of a retried callback task is a task of its own, with its own task token.

Gap (moto 5.2.1): ``StateTaskServiceCallback._eval_body`` makes a ``.waitForTaskToken``
task's token once, before the state's ``Retry`` loop (``ExecutionState._eval_state``), so
every attempt hands out (``$$.Task.Token``) and waits on the same token, and a callback sent
to the token of an attempt that failed still wakes the retry. Seen by the fault matrix
(``fair:Lock.Park`` x ``lost``): a park whose write applied but whose response was lost was
woken by its releaser while its ``Retry`` waited; the retry wrote its row again and ended at
once with that wake-up, leaving a row parked after the waiter was served (docs/safety.md,
third pass) - kinder than AWS.

AWS: each attempt of a Task state is a task of its own in the history (``TaskScheduled``,
``TaskStarted``, then ``TaskFailed``, ``TaskTimedOut`` or ``TaskSucceeded``), with its own
``$$.Task.Token``; a ``SendTaskSuccess``, ``SendTaskFailure`` or ``SendTaskHeartbeat`` for a
token whose task has been closed fails with ``TaskTimedOut`` ("the task token has either
expired or the task associated with the token has already been closed") or
``TaskDoesNotExist``
(https://docs.aws.amazon.com/step-functions/latest/apireference/API_SendTaskSuccess.html#API_SendTaskSuccess_Errors).

Fix: around each attempt of a callback task (its ``_evaluate_with_timeout``, one call per
attempt of the ``Retry`` loop), an attempt that finds its token already closed - by the
attempt before it - gets a new token (``update_task_token``, so ``$$.Task.Token`` and the
callback pool see it, as moto makes the first); when the attempt ends, whatever its outcome,
its token is closed (:func:`late_callbacks.close`): a callback on it then fails as above and
changes nothing. The first attempt keeps the token moto made.

Proof: ``tests/local/test_patch_retried_callbacks.py``.
"""

from __future__ import annotations

from contextlib import ExitStack

from moto.stepfunctions.parser.asl.component.state.exec.execute_state import ExecutionState
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.resource import ResourceCondition
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_callback import (
    StateTaskServiceCallback,
)

from locked_workflow.testing.patches import late_callbacks
from locked_workflow.testing.seams import wrap


def _waits_for_task_token(state) -> bool:  # type: ignore[no-untyped-def]
    resource = getattr(state, "resource", None)
    return isinstance(state, StateTaskServiceCallback) and \
        getattr(resource, "condition", None) == ResourceCondition.WaitForTaskToken


def _endpoint(env):  # type: ignore[no-untyped-def]
    token = (env.states.context_object.context_object_data.get("Task") or {}).get("Token")
    return env.callback_pool_manager.get(token) if token else None


def _token_per_attempt(original):  # type: ignore[no-untyped-def]
    """ExecutionState._evaluate_with_timeout: a callback task's attempt on a token of its own."""

    def _evaluate_with_timeout(self, env):  # type: ignore[no-untyped-def]
        if not _waits_for_task_token(self):
            return original(self, env)
        endpoint = _endpoint(env)
        if endpoint is None or late_callbacks.closed(endpoint):  # the attempt before used it
            env.callback_pool_manager.add(env.states.context_object.update_task_token())
            endpoint = _endpoint(env)
        try:
            return original(self, env)
        finally:
            if endpoint is not None:
                late_callbacks.close(endpoint)

    return _evaluate_with_timeout


def apply(stack: ExitStack) -> None:
    wrap(stack, ExecutionState, "_evaluate_with_timeout", _token_per_attempt, by=__name__)
