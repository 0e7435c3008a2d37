"""A CustomState whose Catch keeps its JSONata ``Output`` and ``Assign``.

CDK renders a ``CustomState``'s catchers with ``ErrorEquals`` and ``Next`` only: the ``outputs``
and ``assign`` given to ``add_catch`` are dropped. A state after such a Catch then receives the
error object instead of what the Catch meant to pass on - for the lock's liveness check, the
Wait and the next acquire would get the error instead of the entry record.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from aws_cdk import aws_stepfunctions as sfn


class JsonataCustomState(sfn.CustomState):
    """``sfn.CustomState`` with ``add_catch(..., outputs=, assign=)`` rendered."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._catch_fields: list[dict] = []

    def add_catch(
        self,
        handler: sfn.IChainable,
        *,
        errors: Optional[Sequence[str]] = None,
        outputs: Any = None,
        assign: Optional[dict] = None,
        result_path: Optional[str] = None,
    ) -> "JsonataCustomState":
        fields = {}
        if outputs is not None:
            fields["Output"] = outputs
        if assign:
            fields["Assign"] = dict(assign)
        self._catch_fields.append(fields)
        super().add_catch(handler, errors=list(errors) if errors else None, result_path=result_path)
        return self

    def to_state_json(self, *args: Any) -> Any:
        rendered = dict(super().to_state_json(*args))
        catchers = rendered.get("Catch") or []
        if len(catchers) != len(self._catch_fields):  # CDK changed how it renders catchers
            raise AssertionError(f"{len(catchers)} catchers rendered, {len(self._catch_fields)} added")
        rendered["Catch"] = [{**catcher, **fields} for catcher, fields in zip(catchers, self._catch_fields)] or None
        if rendered["Catch"] is None:
            del rendered["Catch"]
        return rendered
