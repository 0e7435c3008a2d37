"""Parallel and Map states re-raise a branch's ``States.*`` error.

Gap (moto 5.2.1): when a Parallel branch (or a Map iteration) fails, moto re-raises its
error as a ``CustomErrorName``, which refuses names starting with ``States.``. A branch
failing with ``States.TaskFailed``, ``States.Timeout``, ``States.QueryEvaluationError``...
therefore turns into ``States.Runtime`` (cause: "Custom Error Names MUST NOT begin with
the prefix 'States.'"), which no ``Catch`` on the original error matches - and wrapping a
chain in a single-branch Parallel is how the lock Catches every error of protected work.

Fix: in those two places, build a ``StatesErrorName`` for the service's own error names
and a ``CustomErrorName`` for the rest.

AWS: if a branch fails, the Parallel state fails with that error, and its own Retry and Catch
apply to it (https://docs.aws.amazon.com/step-functions/latest/dg/state-parallel.html, Error handling;
https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html); only custom error names may not start with
``States.``.

Proof: ``tests/local/test_patch_nested_states_errors.py``.
"""

from __future__ import annotations

from contextlib import ExitStack

from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import (
    ILLEGAL_CUSTOM_ERROR_PREFIX,
    CustomErrorName,
)
from moto.stepfunctions.parser.asl.component.common.error_name.error_name import ErrorName
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import (
    StatesErrorName,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration import iteration_worker
from moto.stepfunctions.parser.asl.component.state.exec.state_parallel import branches_decl

from locked_workflow.testing.seams import patch_attribute


def error_name(error_name: str | None) -> ErrorName:
    """The ErrorName object for an error a nested program ended with."""
    if error_name is not None and error_name.startswith(ILLEGAL_CUSTOM_ERROR_PREFIX):
        try:
            return StatesErrorName.from_name(error_name)
        except Exception:  # noqa: BLE001 - a States.* name moto does not know
            name = CustomErrorName(error_name=None)
            name.error_name = error_name  # type: ignore[misc]
            return name
    return CustomErrorName(error_name=error_name)


def apply(stack: ExitStack) -> None:
    for module in (branches_decl, iteration_worker):
        patch_attribute(stack, module, "CustomErrorName", error_name, by=__name__)
