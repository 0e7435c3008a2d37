"""SendTaskFailure keeps its ``cause``.

Gap (moto 5.2.1): the SendTaskFailure handler passes the ``error`` to the interpreter and
drops the ``cause``, so the failed callback task's error output has ``"Cause": null``.

Fix: the handler passes both.

AWS: ``SendTaskFailure`` takes an ``error`` and a ``cause``
(https://docs.aws.amazon.com/step-functions/latest/apireference/API_SendTaskFailure.html), both in the failed task's error output.

Proof: ``tests/local/test_patch_task_failure_cause.py``.
"""

from __future__ import annotations

from contextlib import ExitStack

from moto.core.responses import EmptyResult
from moto.stepfunctions.responses import StepFunctionResponse

from locked_workflow.testing.seams import patch_attribute


def apply(stack: ExitStack) -> None:
    def send_task_failure(self):  # type: ignore[no-untyped-def]
        self.stepfunction_backend.send_task_failure(
            self._get_param("taskToken"), error=self._get_param("error"), cause=self._get_param("cause")
        )
        return EmptyResult()

    patch_attribute(stack, StepFunctionResponse, "send_task_failure", send_task_failure, by=__name__)
