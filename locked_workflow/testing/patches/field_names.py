"""A JSONata error's cause names the state's field, as Step Functions does.

Gap (moto 5.2.1): every component of a state records its Python class name as "the field"
being evaluated, and the innermost one wins. A failing JSONata expression inside ``Arguments``
thus reads ``... specified for the field 'JSONataTemplateValueTerminalStringJSONata' ...``
(``AssignTemplateValueTerminalStringJSONata`` inside ``Assign``): an internal class, where
Step Functions names the field (``Arguments``, ``Output``, ``Assign`` …).

Fix: the template-value components (the parts of a field's JSON template) name no field of
their own, so the field keeps the name of the state field that holds them; the few fields
whose class name differs from the ASL name are renamed (``AssignDecl`` -> ``Assign``).

AWS: a JSONata expression that fails raises ``States.QueryEvaluationError``
(https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html); that its cause names the state's field
(``Arguments``, ``Output``, ``Assign``) is what the service answers, not a documented format.

Proof: ``tests/local/test_patch_field_names.py``.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Iterator

from moto.stepfunctions.parser.asl.component.eval_component import EvalComponent
from moto.stepfunctions.parser.asl.parse import preprocessor  # noqa: F401 - loads every component

from locked_workflow.testing.seams import patch_attribute

#: Components that are an ASL field under another name.
ASL_FIELD_NAMES = {
    "Parargs": "Arguments",
    "ArgumentsJSONataTemplateValueObject": "Arguments",
    "ArgumentsStringJSONata": "Arguments",
    "AssignDecl": "Assign",
    "ItemsJSONata": "Items",
    "ConditionStringJSONata": "Condition",
    "SecondsJSONata": "Seconds",
    "TimeoutSecondsJSONata": "TimeoutSeconds",
    "HeartbeatSecondsJSONata": "HeartbeatSeconds",
    "MaxItemsStringJSONata": "MaxItems",
}
#: Parts of a field (its template's values, the task's resource): they name no field.
_PARTS = ("TemplateValue", "Binding", "StringJSONata", "Resource")


def _subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _no_field(self) -> None:  # type: ignore[no-untyped-def]
    return None


def _asl_name(name: str):
    def _field_name(self) -> str:  # type: ignore[no-untyped-def]
        return name

    return _field_name


def apply(stack: ExitStack) -> None:
    for cls in set(_subclasses(EvalComponent)):
        name = cls.__name__
        if name in ASL_FIELD_NAMES:
            patch_attribute(stack, cls, "_field_name", _asl_name(ASL_FIELD_NAMES[name]), by=__name__)
        elif any(part in name for part in _PARTS):
            patch_attribute(stack, cls, "_field_name", _no_field, by=__name__)
