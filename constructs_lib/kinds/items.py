"""JSONata readers of a DynamoDB item as a state reads it (DynamoDB JSON: ``{"N": "12"}``,
``{"S": "..."}``), shared by the queue kinds (fair, read/write)."""

from __future__ import annotations


def item_number(item: str, name: str, default: str = "0") -> str:
    """JSONata: the number attribute ``name`` of ``item`` (``default`` if absent)."""
    return f"($exists({item}.`{name}`.N) ? $number({item}.`{name}`.N) : {default})"


def item_string(item: str, name: str) -> str:
    """JSONata: the string attribute ``name`` of ``item`` ('' if absent)."""
    return f"($exists({item}.`{name}`.S) ? {item}.`{name}`.S : '')"
