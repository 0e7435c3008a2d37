"""In-process Lambda: invoking a function runs its Python handler in this process.

Gap (moto 5.2.1): ``LambdaFunction.invoke`` runs the function in a Docker container
(``lambda:invoke`` from boto3, ``arn:aws:states:::lambda:invoke`` and bare function ARNs
from Step Functions all end there); offline, without Docker, every Lambda task fails.

Fix: when the function is registered in the runtime's
:class:`locked_workflow.testing.lambda_runtime.FunctionRegistry`, run its handler in-process
instead. A raised exception sets the ``X-Amz-Function-Error`` header with an
``errorType`` payload, so Step Functions sees the exception's class name as the error.
``InvocationType=Event`` runs the handler on a background thread, with Lambda's retries of a
function error (``patches/async_invoke_retries``). Unregistered functions keep moto's
behaviour.

The function's ``Timeout`` holds: an invocation still running at it fails with
``Sandbox.Timedout`` at that moment, as Lambda's does; the handler thread itself cannot be
stopped and runs on - stricter than AWS, which stops it (see ``lambda_runtime``).

Also sets ``os.environ`` to a per-thread overlay (see ``lambda_runtime``) while active, and
sends each function's output to its log group (``function_logs``), not the process's output.

AWS: ``Invoke`` runs the function's handler with the event and returns its result, or the
error it raised with ``X-Amz-Function-Error``
(https://docs.aws.amazon.com/lambda/latest/api/API_Invoke.html); a Lambda task gets that error
as its own (https://docs.aws.amazon.com/step-functions/latest/dg/connect-lambda.html).

Proof: ``tests/local/test_patch_lambda_in_process.py``.
"""

from __future__ import annotations

import json
import os
from contextlib import ExitStack

from moto.awslambda.models import LambdaFunction

from locked_workflow.testing import function_logs
from locked_workflow.testing.patches import async_invoke_retries
from locked_workflow.testing.lambda_runtime import FunctionRegistry, ThreadLocalEnviron
from locked_workflow.testing.seams import patch_attribute


def _header(headers, name):  # type: ignore[no-untyped-def]
    for key, value in (headers or {}).items():
        if key.lower() == name.lower():
            return value
    return None


def apply(stack: ExitStack, registry: FunctionRegistry) -> None:
    original = LambdaFunction.invoke

    def invoke(self, body, request_headers, response_headers):  # type: ignore[no-untyped-def]
        function = registry.get(self.function_name)
        if function is None:
            return original(self, body, request_headers, response_headers)
        if isinstance(body, bytes):
            body = body.decode("utf-8")
        event = json.loads(body) if body else {}
        if _header(request_headers, "X-Amz-Invocation-Type") == "Event":
            async_invoke_retries.start(function, event, self)
            return b""
        result = function.invoke(event)
        if result.failed:
            response_headers["x-amz-function-error"] = "Unhandled"
        return result.payload

    patch_attribute(stack, LambdaFunction, "invoke", invoke, by=__name__)
    if not isinstance(os.environ, ThreadLocalEnviron):
        patch_attribute(stack, os, "environ", ThreadLocalEnviron(os.environ), by=__name__)
    function_logs.apply(stack)  # a function's output goes to its log group
