"""State machine type: ``CreateStateMachine(type="EXPRESS")`` creates an Express workflow.

Gap (moto 5.2.1): ``StepFunctionResponse.create_state_machine`` ignores ``type``; every
state machine is STANDARD (``DescribeStateMachine`` says so, and the interpreter runs its
executions as Standard). Express workflows behave differently where it matters here: they
emit no execution status events.

Fix: record the requested type on the state machine (``type`` and ``sm_type``).

AWS: ``CreateStateMachine``'s ``type`` is ``STANDARD`` (the default) or ``EXPRESS``
(https://docs.aws.amazon.com/step-functions/latest/apireference/API_CreateStateMachine.html); Express workflows send no
status change events (https://docs.aws.amazon.com/step-functions/latest/dg/eventbridge-integration.html).

Proof: ``tests/local/test_patch_state_machine_type.py``.
"""

from __future__ import annotations

from contextlib import ExitStack

from moto.stepfunctions.responses import StepFunctionResponse

from locked_workflow.testing.seams import patch_attribute


def apply(stack: ExitStack) -> None:
    original = StepFunctionResponse.create_state_machine

    def create_state_machine(self):  # type: ignore[no-untyped-def]
        result = original(self)
        requested = self._get_param("type")
        if requested:
            machine = self.stepfunction_backend.describe_state_machine(result.result["stateMachineArn"])
            machine.type = machine.sm_type = requested
        return result

    patch_attribute(stack, StepFunctionResponse, "create_state_machine", create_state_machine, by=__name__)
