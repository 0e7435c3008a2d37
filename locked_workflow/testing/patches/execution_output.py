"""Execution output is JSON: ``DescribeExecution`` encodes every output value.

Gap (moto 5.2.1): ``StepFunctionResponse.describe_execution`` assumes a ``str`` output is
already JSON text. The interpreter stores the output as a Python value, so an execution
that ends with a string (``"k"``) is described with output ``k`` - not JSON - and one
that ends with ``null`` has no output at all.

Fix: for executions of the interpreter, serialise the output value as JSON.

AWS: ``DescribeExecution``'s ``output`` is "the JSON output data of the execution"
(https://docs.aws.amazon.com/step-functions/latest/apireference/API_DescribeExecution.html).

Proof: ``tests/local/test_patch_execution_output.py``.
"""

from __future__ import annotations

from contextlib import ExitStack

from moto.stepfunctions.parser.backend.execution import Execution
from moto.stepfunctions.parser.asl.utils.encoding import to_json_str
from moto.stepfunctions.responses import StepFunctionResponse

from locked_workflow.testing.seams import wrap


def apply(stack: ExitStack) -> None:
    def json_output(original):  # type: ignore[no-untyped-def]
        def describe_execution(self):  # type: ignore[no-untyped-def]
            result = original(self)
            execution = self.stepfunction_backend.describe_execution(self._get_param("executionArn"))
            if isinstance(execution, Execution) and execution.status == "SUCCEEDED":
                result.result["output"] = to_json_str(execution.output, separators=(",", ":"))
            return result

        return describe_execution

    wrap(stack, StepFunctionResponse, "describe_execution", json_output, by=__name__)
