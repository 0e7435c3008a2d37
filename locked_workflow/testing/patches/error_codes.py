"""Error codes: every Step Functions API error of the interpreter answers with its name.

Gap (moto 5.2.1): the errors of moto's Step Functions interpreter (``moto.stepfunctions.parser.api``:
``InvalidDefinition``, ``StateMachineDoesNotExist``, ``ExecutionDoesNotExist``,
``InvalidExecutionInput``, ``TaskTimedOut``, ...) spell their name as ``code``, but they derive
from moto's ``AWSError``, which answers with ``TYPE``: the client sees ``Error.Code == ""``. AWS
answers each with its name (the "Errors" section of every action in the Step Functions API
reference, e.g. https://docs.aws.amazon.com/step-functions/latest/apireference/API_CreateStateMachine.html#API_CreateStateMachine_Errors),
and an application matches on it: ``except sfn.exceptions.InvalidDefinition`` never matched offline.

Fix: each such class answers with its ``code`` as ``TYPE``, for as long as the runtime is on.

Proof: ``tests/local/test_patch_error_codes.py``.
"""

from __future__ import annotations

import inspect
from contextlib import ExitStack

from moto.core.exceptions import AWSError
from moto.stepfunctions.parser import api

from locked_workflow.testing.seams import patch_attribute


def unnamed() -> list[type[AWSError]]:
    """The interpreter's API errors that name themselves only by ``code``."""
    return [cls for _, cls in inspect.getmembers(api, inspect.isclass)
            if issubclass(cls, AWSError) and isinstance(vars(cls).get("code"), str) and not vars(cls).get("TYPE")]


def apply(stack: ExitStack) -> None:
    for cls in unnamed():
        patch_attribute(stack, cls, "TYPE", vars(cls)["code"], create=True, by=__name__)
