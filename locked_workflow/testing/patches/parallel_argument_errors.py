"""An error in a Parallel state's ``Arguments`` is the state's failure: its Catch applies.

Gap (moto 5.2.1): ``StateParallel._eval_state`` evaluates the state's ``Arguments`` (JSONata)
or ``Parameters`` before its retry/catch loop, so a ``States.QueryEvaluationError`` raised
there (``$error(...)``, a bad expression) escapes every Catch and fails the execution. Step
Functions treats it as the state failing: its Retry and Catch apply. The lock section's
entry relies on it (``Lock.InvalidKey``).

Fix: evaluate the branches' input inside the same retry/catch handling as the branches.

AWS: a Parallel state's Retry and Catch handle the state's failures
(https://docs.aws.amazon.com/step-functions/latest/dg/state-parallel.html); an ``Arguments`` expression that fails is such a
failure (``States.QueryEvaluationError``, https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html).

Proof: ``tests/local/test_patch_parallel_argument_errors.py``.
"""

from __future__ import annotations

import copy
from contextlib import ExitStack

from moto.stepfunctions.parser.asl.component.common.catch.catch_outcome import CatchOutcome
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
    FailureEventException,
)
from moto.stepfunctions.parser.asl.component.common.retry.retry_outcome import RetryOutcome
from moto.stepfunctions.parser.asl.component.state.exec.state_parallel.state_parallel import (
    StateParallel,
)
from moto.stepfunctions.parser.api import HistoryEventType

from locked_workflow.testing.seams import patch_attribute


def _eval_state(self, env):  # type: ignore[no-untyped-def]
    env.states.context_object.context_object_data["State"]["RetryCount"] = 0
    original_input = env.stack.pop()
    while env.is_running():
        try:
            env.stack.append(copy.deepcopy(original_input))
            if self.parargs is not None:
                self.parargs.eval(env=env)
            env.stack.append(copy.deepcopy(env.stack.pop()))
            self._evaluate_with_timeout(env)
            break
        except FailureEventException as failure_event_ex:
            failure_event = self._from_error(env=env, ex=failure_event_ex)
            error_output = self._construct_error_output_value(failure_event=failure_event)
            env.states.set_error_output(error_output)
            env.states.set_result(error_output)
            if self.retry is not None:
                if self._handle_retry(env=env, failure_event=failure_event) == RetryOutcome.CanRetry:
                    continue
            env.event_manager.add_event(
                context=env.event_history_context,
                event_type=HistoryEventType.ParallelStateFailed,
            )
            if self.catch is not None:
                self._handle_catch(env=env, failure_event=failure_event)
                if env.stack[-1] == CatchOutcome.Caught:
                    break
            self._handle_uncaught(env=env, failure_event=failure_event)


def apply(stack: ExitStack) -> None:
    patch_attribute(stack, StateParallel, "_eval_state", _eval_state, by=__name__)
