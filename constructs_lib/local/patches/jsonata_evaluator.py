"""JSONata evaluator: ``QueryLanguage: JSONata`` state machines actually evaluate.

Gaps (moto 5.2.1, ``moto/stepfunctions/parser/asl/jsonata/jsonata.py``):

* ``_eval_jsonata`` is ``None`` (LocalStack's JVM bridge was not ported), so every JSONata
  expression fails with ``TypeError: 'NoneType' object is not callable`` (States.Runtime).
* ``encode_jsonata_variable_declarations`` writes a string variable as ``f'"{value}"'``
  without escaping: a value holding ``"`` or ``\\`` (an error Cause, a JSON string) breaks
  the expression that samples it.
* An evaluation error (``$error(...)``, a type error) is not turned into the
  ``States.QueryEvaluationError`` the service raises; it ends up as an uncatchable
  ``States.Runtime`` with an empty cause.

Fix: evaluate with the pure-Python ``jsonata-python`` package
(``jsonata.Jsonata(expr).evaluate(None)``), encode every variable as JSON (a JSON string
literal is a JSONata string literal), and raise ``States.QueryEvaluationError`` with the
evaluator's message in the Cause.

Proof: ``tests/local/test_patch_jsonata.py``.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any
from unittest import mock

import jsonata as jsonata_python
from moto.stepfunctions.parser.api import EvaluationFailedEventDetails, HistoryEventType
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
    FailureEvent,
    FailureEventException,
)
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import (
    StatesErrorName,
)
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import (
    StatesErrorNameType,
)
from moto.stepfunctions.parser.asl.component.common.string import string_expression
from moto.stepfunctions.parser.asl.eval import states as moto_states
from moto.stepfunctions.parser.asl.eval import variable_store as moto_variable_store
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
from moto.stepfunctions.parser.asl.jsonata import jsonata as moto_jsonata
from moto.stepfunctions.parser.asl.utils.encoding import to_json_str


def evaluate(expression: str) -> Any:
    """Evaluate a complete JSONata expression (no input document)."""
    try:
        return jsonata_python.Jsonata(expression).evaluate(None)
    except Exception as error:  # jsonata-python raises JException and plain Python errors
        raise moto_jsonata.JSONataException(type(error).__name__, str(error)) from error


def encode_variable_declarations(bindings: dict[str, Any]) -> str:
    """``$name:=<json>;`` for each binding; strings are JSON-escaped."""
    return "".join(
        f"{name}:={to_json_str(value, separators=(',', ':'))};" for name, value in bindings.items()
    )


def _query_evaluation_error(env: Any, expression: str, error: moto_jsonata.JSONataException) -> FailureEventException:
    name = StatesErrorName(typ=StatesErrorNameType.StatesQueryEvaluationError)
    field = env.next_field_name
    where = f" specified for the field '{field}'" if field else ""
    cause = (
        f"The JSONata expression '{expression}'{where} threw an error during evaluation. "
        f"{error.details}"
    )
    return FailureEventException(
        failure_event=FailureEvent(
            env=env,
            error_name=name,
            event_type=HistoryEventType.EvaluationFailed,
            event_details=EventDetails(
                evaluationFailedEventDetails=EvaluationFailedEventDetails(
                    error=name.error_name, cause=cause
                )
            ),
        )
    )


def _raising_query_evaluation_errors(cls: type) -> Any:
    original = cls._eval_body

    def _eval_body(self, env):  # type: ignore[no-untyped-def]
        try:
            return original(self, env)
        except moto_jsonata.JSONataException as error:
            raise _query_evaluation_error(env, self.expression, error) from error

    return _eval_body


def apply(stack: ExitStack) -> None:
    stack.enter_context(mock.patch.object(moto_jsonata, "_eval_jsonata", evaluate))
    for module in (moto_jsonata, moto_states, moto_variable_store):
        stack.enter_context(
            mock.patch.object(
                module, "encode_jsonata_variable_declarations", encode_variable_declarations
            )
        )
    for cls in (string_expression.StringJSONata, string_expression.StringVariableSample):
        stack.enter_context(
            mock.patch.object(cls, "_eval_body", _raising_query_evaluation_errors(cls))
        )
