"""Unique execution names: an execution started without a name gets a fresh UUID.

Gap (moto 5.2.1): ``StepFunctionsParserBackend.start_execution`` formats the execution
ARN with the name it was given, so every unnamed execution (``sfn.start_execution``
without ``name``, ``arn:aws:states:::states:startExecution``, EventBridge targets) is
``...:execution:<state machine>:None``: the second one collides with the first
(``ExecutionAlreadyExists``) or is mistaken for it, and an owner id built from
``$states.context.Execution.Id`` is shared by all of them.

Fix: fill in ``name = uuid4()`` when none is given, like the service does: an override of
the runtime's backend subclass (``testing/backend``), calling moto's method. It also
keeps every execution it started by ARN (a weak map, :func:`started`), so the task token calls
find a token's execution at once instead of walking every execution of the session.

AWS: "If you don't provide a name for the execution, Step Functions automatically generates a
universally unique identifier (UUID) as the execution name"
(https://docs.aws.amazon.com/step-functions/latest/apireference/API_StartExecution.html).

Proof: ``tests/local/test_patch_unique_execution_names.py``.
"""

from __future__ import annotations

import uuid
import weakref
from contextlib import ExitStack
from typing import Any

from locked_workflow.testing.backend import override


#: Execution ARN -> moto's execution object, of every execution started while the fix is on.
_STARTED: "weakref.WeakValueDictionary[str, Any]" = weakref.WeakValueDictionary()


def started(execution_arn: str) -> Any:
    """moto's execution object of ``execution_arn`` (None if it was not started here)."""
    return _STARTED.get(execution_arn)


def _named(original):  # type: ignore[no-untyped-def]
    """The backend's start_execution (``super()``'s is ``original``): a name whatever the caller gave."""

    def start_execution(self, state_machine_arn, name=None, execution_input=None, trace_header=None):  # type: ignore[no-untyped-def]
        execution = original(
            self,
            state_machine_arn,
            name=name or str(uuid.uuid4()),
            execution_input=execution_input,
            trace_header=trace_header,
        )
        arn = getattr(execution, "execution_arn", None)
        if isinstance(arn, str):
            _STARTED[arn] = execution
        return execution

    return start_execution


def apply(stack: ExitStack) -> None:
    stack.callback(_STARTED.clear)
    override(stack, "start_execution", _named, by=__name__)
