"""A DynamoDB table's key, read from its CloudFormation properties (no CDK needed: the lock
CLI reads a deployed stack's template with it, the constructs a synthesized table's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from locked_workflow.state_machines import lock_protocol as protocol


@dataclass(frozen=True)
class KeyAttribute:
    """A key attribute of a table: its name and DynamoDB type (``"S"``, ``"N"``, ``"B"``)."""

    name: str
    type: str


_TYPE_NAMES = {"S": "string", "N": "number", "B": "binary"}


@dataclass(frozen=True)
class KeySchema:
    """A table's key: its partition key and its sort key, if any."""

    partition: KeyAttribute
    sort: Optional[KeyAttribute]

    @classmethod
    def parse(cls, keys: Any, definitions: Any) -> Optional["KeySchema"]:
        """From ``KeySchema`` and ``AttributeDefinitions`` as a template writes them
        (``AttributeName``, ``KeyType``, ``AttributeType``) or as the CDK resolves them
        (``attributeName``, ...); ``None`` when they are not plain lists or lack a partition key."""
        if not isinstance(keys, list) or not isinstance(definitions, list):
            return None

        def field(entry: Any, name: str) -> Any:
            return entry.get(name, entry.get(name[:1].lower() + name[1:])) if isinstance(entry, dict) else None

        types = {field(d, "AttributeName"): field(d, "AttributeType") for d in definitions}
        found = {field(k, "KeyType"): field(k, "AttributeName") for k in keys}
        if not isinstance(found.get("HASH"), str):
            return None
        partition = KeyAttribute(found["HASH"], str(types.get(found["HASH"])))
        sort = KeyAttribute(found["RANGE"], str(types.get(found["RANGE"]))) if isinstance(found.get("RANGE"), str) else None
        return cls(partition, sort)

    def shown(self) -> str:
        """``pk (string)``, or ``pk (string) and sort key sk (number)``."""
        text = f"{self.partition.name} ({_TYPE_NAMES.get(self.partition.type, self.partition.type)})"
        if self.sort is not None:
            text += f" and sort key {self.sort.name} ({_TYPE_NAMES.get(self.sort.type, self.sort.type)})"
        return text


#: A lock table's key: the string partition key ``pk`` alone (what a ``LockTable`` has).
LOCK_TABLE_KEY = KeySchema(KeyAttribute(protocol.KEY_ATTRIBUTE, "S"), None)
