"""A failure while evaluating a Task's Arguments/Parameters keeps its own error name.

Gap (moto 5.2.1): several task services' ``_from_error`` (DynamoDB's in particular) map
*every* exception that is not a ``ClientError`` to their generic service error - the
``FailureEventException`` raised while evaluating the task's own ``Arguments`` included.
A JSONata ``$error(...)`` in an optimized DynamoDB task's arguments (the lock's key
validation) thus fails with ``DynamoDB.AmazonDynamoDBException`` instead of
``States.QueryEvaluationError``, as if DynamoDB had been called.

Fix: every task state's ``_from_error`` returns the failure event carried by a
``FailureEventException`` as is (what the base ``ExecutionState`` already does), and only
maps real service exceptions.

AWS: an error in evaluating a state's JSONata is ``States.QueryEvaluationError``
(https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html); an integration's errors are
the service's own, named ``ServiceName.ErrorName``
(https://docs.aws.amazon.com/step-functions/latest/dg/supported-services-awssdk.html).

Proof: ``tests/local/test_patch_task_argument_errors.py``.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any, Iterator

from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
    FailureEventException,
)
from moto.stepfunctions.parser.asl.component.state.exec.execute_state import ExecutionState
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (  # noqa: F401 - loads every service
    state_task_service_factory,
)

from locked_workflow.testing.seams import wrap


def _subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _passing_failure_events(original: Any) -> Any:
    def _from_error(self, env, ex):  # type: ignore[no-untyped-def]
        if isinstance(ex, FailureEventException):
            return ex.failure_event
        return original(self, env, ex)

    return _from_error


def apply(stack: ExitStack) -> None:
    for cls in set(_subclasses(ExecutionState)):
        if "_from_error" in vars(cls):
            wrap(stack, cls, "_from_error", _passing_failure_events, by=__name__)
