"""A task whose heartbeat stops fails with ``States.HeartbeatTimeout``, as in Step Functions.

Gap (moto 5.2.1): a callback task (``.waitForTaskToken``) or an activity that gets no
``SendTaskHeartbeat`` for ``HeartbeatSeconds`` fails with ``States.Timeout``, the error of
``TimeoutSeconds``: a Catch or Retry on ``States.HeartbeatTimeout`` never matches.

Fix: a heartbeat timeout fails the task with ``States.HeartbeatTimeout`` (its ``TaskTimedOut``
event says so); a Catch or Retry on ``States.Timeout`` still matches it, because Step Functions
defines ``States.Timeout`` as covering both timeouts.

AWS: ``States.HeartbeatTimeout`` is the error of a task that sent no heartbeat for
``HeartbeatSeconds``, and ``States.Timeout`` covers it too
(https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html;
https://docs.aws.amazon.com/step-functions/latest/apireference/API_SendTaskHeartbeat.html).

Proof: ``tests/local/test_patch_heartbeat_timeout.py``.
"""

from __future__ import annotations

from contextlib import ExitStack

from moto.stepfunctions.parser.api import HistoryEventType, TaskTimedOutEventDetails
from moto.stepfunctions.parser.asl.component.common.error_name.error_equals_decl import ErrorEqualsDecl
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import FailureEvent
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import StatesErrorName
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import StatesErrorNameType
from moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task import StateTask
from moto.stepfunctions.parser.asl.eval.callback.callback import HeartbeatTimeoutError
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails

from locked_workflow.testing.seams import wrap

_HEARTBEAT = StatesErrorName(typ=StatesErrorNameType.StatesHeartbeatTimeout)
_TIMEOUT = StatesErrorName(typ=StatesErrorNameType.StatesTimeout)


def apply(stack: ExitStack) -> None:
    def timed_out_event(original_from_error):  # type: ignore[no-untyped-def]
        def _from_error(self, env, ex):  # type: ignore[no-untyped-def]
            if isinstance(ex, HeartbeatTimeoutError):
                return FailureEvent(
                    env=env,
                    error_name=_HEARTBEAT,
                    event_type=HistoryEventType.TaskTimedOut,
                    event_details=EventDetails(
                        taskTimedOutEventDetails=TaskTimedOutEventDetails(
                            resourceType=self._get_sfn_resource_type(), resource=self._get_sfn_resource(),
                            error=StatesErrorNameType.StatesHeartbeatTimeout.to_name(),
                        )
                    ),
                )
            return original_from_error(self, env, ex)

        return _from_error

    def timeout_matches_heartbeat(original_matches):  # type: ignore[no-untyped-def]
        def _eval_body(self, env):  # type: ignore[no-untyped-def]
            error_name = env.stack[-1]
            original_matches(self, env)
            if env.stack[-1] is False and error_name == _HEARTBEAT and _TIMEOUT in self.error_names:
                env.stack[-1] = True  # States.Timeout covers heartbeat timeouts

        return _eval_body
    wrap(stack, StateTask, "_from_error", timed_out_event, by=__name__)
    wrap(stack, ErrorEqualsDecl, "_eval_body", timeout_matches_heartbeat, by=__name__)
