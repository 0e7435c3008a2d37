"""Unique execution names: an execution started without a name gets a fresh UUID.

Gap (moto 5.2.1): ``StepFunctionsParserBackend.start_execution`` formats the execution
ARN with the name it was given, so every unnamed execution (``sfn.start_execution``
without ``name``, ``arn:aws:states:::states:startExecution``, EventBridge targets) is
``...:execution:<state machine>:None``: the second one collides with the first
(``ExecutionAlreadyExists``) or is mistaken for it, and an owner id built from
``$states.context.Execution.Id`` is shared by all of them.

Fix: fill in ``name = uuid4()`` when none is given, like the service does.

AWS: "If you don't provide a name for the execution, Step Functions automatically generates a
universally unique identifier (UUID) as the execution name"
(https://docs.aws.amazon.com/step-functions/latest/apireference/API_StartExecution.html).

Proof: ``tests/local/test_patch_unique_execution_names.py``.
"""

from __future__ import annotations

import uuid
from contextlib import ExitStack
from unittest import mock

from moto.stepfunctions.parser.models import StepFunctionsParserBackend


def apply(stack: ExitStack) -> None:
    original = StepFunctionsParserBackend.start_execution

    def start_execution(self, state_machine_arn, name=None, execution_input=None, trace_header=None):  # type: ignore[no-untyped-def]
        return original(
            self,
            state_machine_arn,
            name=name or str(uuid.uuid4()),
            execution_input=execution_input,
            trace_header=trace_header,
        )

    stack.enter_context(
        mock.patch.object(StepFunctionsParserBackend, "start_execution", start_execution)
    )
