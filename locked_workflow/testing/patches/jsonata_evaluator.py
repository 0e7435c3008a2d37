"""JSONata evaluator: ``QueryLanguage: JSONata`` state machines actually evaluate.

Gaps (moto 5.2.1, ``moto/stepfunctions/parser/asl/jsonata/jsonata.py``):

* ``_eval_jsonata`` is ``None`` (LocalStack's JVM bridge was not ported), so every JSONata
  expression fails with ``TypeError: 'NoneType' object is not callable`` (States.Runtime).
* ``encode_jsonata_variable_declarations`` (and ``VariableStore.get_assigned_variables``)
  write a string variable as ``f'"{value}"'`` without escaping: a value holding ``"`` or
  ``\\`` (an error Cause, a JSON string) breaks the expression that samples it.
* An evaluation error (``$error(...)``, a type error) is not turned into the
  ``States.QueryEvaluationError`` the service raises; it ends up as an uncatchable
  ``States.Runtime`` with an empty cause.
* ``$uuid()``, ``$hash()`` and ``$parse()`` are stubs returning "Function ... is currently not supported" (or missing).
* A bare ``$`` anywhere in an expression (``$states.input.items[$ > 2]``,
  ``$states.input.items.{'id': $}``, ``$count($)``) fails the state with ``States.Runtime``
  (``IllegalJSONataVariableReference``): ``extract_jsonata_variable_references`` refuses
  ``$`` and ``$$`` outright. Step Functions accepts them: it implements JSONata 2.0.6 with
  only ``$eval`` withheld (https://docs.aws.amazon.com/step-functions/latest/dg/transforming-data.html),
  and in JSONata ``$`` is the context value - the current item inside a path step, a
  filter or a function body. The page names ``$states`` as the single reserved variable
  and gives no input document to an expression (the state input is ``$states.input``),
  so at the top level ``$`` is what JSONata binds when it evaluates without input:
  undefined (``{% $ %}`` alone then "returned nothing", ``$count($)`` is 0). ``$$`` (the
  root of that missing input) stays refused.

Fix: evaluate with the pure-Python ``jsonata-python`` package. Field expressions
(``StringJSONata``) are parsed once per expression text and evaluated with ``$states`` and
the workflow variables passed as bindings, rather than re-parsed with every value spliced
in as text (ten times faster, which keeps the interpreter's timing close to the service's
under concurrency); other call sites get the same evaluator. Variables are encoded as
JSON; errors raise ``States.QueryEvaluationError`` with the evaluator's message in the
Cause; ``$uuid``, ``$hash`` and ``$parse`` are native functions; a bare ``$`` is left to
the evaluator (no input document: undefined at the top level, the context value inside).

Proof: ``tests/local/test_patch_jsonata.py``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
import uuid
from contextlib import ExitStack
from typing import Any, Mapping

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
from moto.stepfunctions.parser.asl.component.intrinsic.jsonata import (
    get_intrinsic_functions_declarations,
)
from moto.stepfunctions.parser.asl.eval import states as moto_states
from moto.stepfunctions.parser.asl.eval import variable_store as moto_variable_store
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
from moto.stepfunctions.parser.asl.jsonata import jsonata as moto_jsonata
from moto.stepfunctions.parser.asl.utils.encoding import to_json_str

from locked_workflow.testing.seams import patch_attribute

Jsonata = jsonata_python.Jsonata

# ------------------------------------------------------------------------------------
# Evaluation
# ------------------------------------------------------------------------------------

_HASHES = {"MD5": "md5", "SHA-1": "sha1", "SHA-256": "sha256", "SHA-384": "sha384", "SHA-512": "sha512"}


def _hash(value: Any, algorithm: Any) -> str:
    if not isinstance(value, str) or algorithm not in _HASHES:
        raise ValueError(f"$hash needs a string and one of {sorted(_HASHES)}, got {value!r}, {algorithm!r}")
    return hashlib.new(_HASHES[algorithm], value.encode("utf-8")).hexdigest()


def _parse(text: Any) -> Any:
    if not isinstance(text, str):
        raise ValueError(f"$parse needs a JSON string, got {type(text).__name__}")
    return json.loads(text)


#: Step Functions' own JSONata functions that jsonata-python lacks (moto only stubs them).
NATIVE_FUNCTIONS = {
    "uuid": Jsonata.JLambda(lambda: str(uuid.uuid4())),
    "hash": Jsonata.JLambda(_hash),
    "parse": Jsonata.JLambda(_parse),
}

_PARSED: dict[str, Any] = {}
_PARSED_LOCK = threading.Lock()
_PARSED_MAX = 4096


def _instance(expression: str) -> Any:
    """A ready-to-evaluate jsonata-python object for ``expression`` (parsed once).

    jsonata-python keeps per-evaluation state on the object and reads ``$millis()``'s
    timestamp from the thread's *current* instance, so every evaluation gets its own
    shallow copy (sharing the parsed tree) made current for this thread.
    """
    parsed = _PARSED.get(expression)
    if parsed is None:
        parsed = Jsonata(expression)
        with _PARSED_LOCK:
            if len(_PARSED) >= _PARSED_MAX:
                _PARSED.clear()
            _PARSED[expression] = parsed
    instance = copy.copy(parsed)
    instance.environment = instance.create_frame(Jsonata.static_frame)
    Jsonata.CURRENT.jsonata = instance
    return instance


def evaluate(expression: str, bindings: Mapping[str, Any] | None = None) -> Any:
    """Evaluate a JSONata expression (no input document), variables from ``bindings``."""
    try:
        return _instance(expression).evaluate(None, {**NATIVE_FUNCTIONS, **(bindings or {})})
    except Exception as error:  # jsonata-python raises JException and plain Python errors
        raise moto_jsonata.JSONataException(type(error).__name__, str(error)) from error


def encode_variable_declarations(bindings: dict[str, Any]) -> str:
    """``$name:=<json>;`` for each binding; strings are JSON-escaped."""
    return "".join(
        f"{name}:={to_json_str(value, separators=(',', ':'))};" for name, value in bindings.items()
    )


def _assigned_variables(self: Any) -> dict[str, str]:
    """``VariableStore.get_assigned_variables`` with every value as JSON (history details)."""
    return {
        name: to_json_str(self.get(name), separators=(",", ":")) for name in self._declaration_tracing
    }


# ------------------------------------------------------------------------------------
# Field expressions ({% ... %})
# ------------------------------------------------------------------------------------


def _failure(env: Any, cause: str) -> FailureEventException:
    name = StatesErrorName(typ=StatesErrorNameType.StatesQueryEvaluationError)
    return FailureEventException(
        failure_event=FailureEvent(
            env=env,
            error_name=name,
            event_type=HistoryEventType.EvaluationFailed,
            event_details=EventDetails(
                evaluationFailedEventDetails=EvaluationFailedEventDetails(error=name.error_name, cause=cause)
            ),
        )
    )


def _query_evaluation_error(env: Any, expression: str, error: moto_jsonata.JSONataException) -> FailureEventException:
    field = env.next_field_name
    where = f" specified for the field '{field}'" if field else ""
    return _failure(env, f"The JSONata expression '{expression}'{where} threw an error during evaluation. {error.details}")


def _bindings(env: Any) -> dict[str, Any]:
    """``$states`` and the variables in scope, as plain JSON values."""
    store = env.variable_store
    values = {**store._outer_scope, **store._inner_scope, "states": env.states._states_data}
    return json.loads(to_json_str(values))


def variable_references(expression: str) -> set[str]:
    """The ``$name`` references of an expression (moto's scan, outside string and regex
    literals), without the context value ``$``; ``$$`` is refused as moto refuses it."""
    found = {reference for reference in moto_jsonata._PATTERN_VARIABLE_REFERENCE.findall(expression) if reference}
    if "$$" in found:
        raise moto_jsonata.IllegalJSONataVariableReference(variable_reference="$$")
    return found - {"$"}


def _string_jsonata_eval_body(self: Any, env: Any) -> None:
    references = variable_references(self.expression)
    declarations = get_intrinsic_functions_declarations(
        variable_references={r for r in references if r.lstrip("$") not in NATIVE_FUNCTIONS}
    )
    expression = f"({declarations}{self.expression})" if declarations else self.expression
    bindings = _bindings(env)
    try:
        result = evaluate(expression, bindings)
        undefined = result is None and not evaluate(f"$exists({expression})", bindings)
    except moto_jsonata.JSONataException as error:
        raise _query_evaluation_error(env, self.expression, error) from error
    if undefined:
        failure = _failure(env, f"The JSONata expression '{self.expression}' returned nothing (undefined).")
        env.event_manager.add_event(
            context=env.event_history_context,
            event_type=HistoryEventType.EvaluationFailed,
            event_details=EventDetails(
                evaluationFailedEventDetails=failure.get_evaluation_failed_event_details()
            ),
        )
        raise failure
    env.stack.append(result)


def _raising_query_evaluation_errors(cls: type) -> Any:
    original = cls._eval_body

    def _eval_body(self, env):  # type: ignore[no-untyped-def]
        try:
            return original(self, env)
        except moto_jsonata.JSONataException as error:
            raise _query_evaluation_error(env, self.expression, error) from error

    return _eval_body


def apply(stack: ExitStack) -> None:
    patch_attribute(stack, moto_jsonata, "_eval_jsonata", evaluate, by=__name__)
    for module in (moto_jsonata, moto_states, moto_variable_store):
        patch_attribute(stack, module, "encode_jsonata_variable_declarations", encode_variable_declarations, by=__name__)
    patch_attribute(stack, moto_variable_store.VariableStore, "get_assigned_variables", _assigned_variables, by=__name__)
    patch_attribute(stack, string_expression.StringJSONata, "_eval_body", _string_jsonata_eval_body, by=__name__)
    patch_attribute(stack, string_expression.StringVariableSample,
            "_eval_body",
            _raising_query_evaluation_errors(string_expression.StringVariableSample), by=__name__)
