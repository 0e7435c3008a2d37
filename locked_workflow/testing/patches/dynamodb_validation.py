"""DynamoDB validation: moto refuses what DynamoDB refuses, and only that.

Gaps (moto 5.2.1), each measured against DynamoDB Local (``backend="dynamodb-local"``):

* **Item size.** moto checks the size while it builds an item, attribute by attribute
  (``LimitedSizeDict.__setitem__``), with its own sizing and a 405,000-byte cap. A
  replaced attribute is counted twice (old and new value), so an UpdateItem that
  rewrites a ~220 KB attribute of a ~220 KB item is refused, while DynamoDB only
  limits the item *after* the write to 400 KB (409,600 bytes). Its sizing also differs:
  numbers count as their text, List/Map overheads are not counted. DynamoDB's sizing
  (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html):
  attribute names and strings by their UTF-8 bytes, binaries by their raw bytes,
  Boolean/Null 1 byte, List/Map 3 bytes plus 1 byte per element, numbers 1 byte plus
  their significant digits in pairs (DynamoDB Local agrees to the byte with
  :func:`number_size`, which places the pairs on the decimal point and adds a byte for
  a negative number).
* **UpdateItem is not all-or-nothing.** moto applies the actions of an UpdateExpression
  one by one to the stored item; when a later one fails (a type error, the size limit)
  the earlier ones stay applied, and an update of a missing item leaves a key-only item
  behind. DynamoDB applies all of an UpdateItem or nothing
  (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateItem.html).
* **Invalid values are stored.** moto stores ``{"N": "not-a-number"}`` given as an
  ExpressionAttributeValue (``SET n = :v``), inside a number set, or a number out of
  DynamoDB's range or precision; it stores empty sets nested in a List or Map and sets
  holding duplicates; ``ADD n :v`` with a non-number crashes with a Python ValueError.
  DynamoDB rejects each with a ValidationException before touching the item
  (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.NamingRulesDataTypes.html:
  numbers up to 38 digits of precision, magnitude 1E-130 to 9.99…E+125; sets never
  empty, their values unique).

Fix: every AttributeValue of an item request (PutItem, UpdateItem, DeleteItem, GetItem,
Query, Scan, BatchWriteItem, BatchGetItem, TransactWriteItems, TransactGetItems) is
validated before moto reads it, with DynamoDB Local's messages; the item's size is
checked once, on the whole item a put writes or an update leaves, with DynamoDB's
sizing; an UpdateItem that fails restores the item it found (or removes the one it
created).

Proof: ``tests/local/test_patch_dynamodb_validation.py`` (bare moto, the runtime, and
DynamoDB Local).
"""

from __future__ import annotations

import base64
import copy
import re
from contextlib import ExitStack
from decimal import Context, Decimal
from typing import Any, Callable, Iterator, Mapping

from moto.dynamodb.exceptions import ItemSizeTooLarge, MockValidationException
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict
from moto.dynamodb.models.table import Table
from moto.dynamodb.parsing.executors import UpdateExpressionExecutor
from moto.dynamodb.responses import DynamoHandler

from locked_workflow.testing.seams import patch_attribute, wrap

#: DynamoDB's maximum item size: 400 KB, attribute names included.
MAX_ITEM_BYTES = 400 * 1024

#: Java ``BigDecimal`` syntax, which DynamoDB accepts (``+1``, ``.5``, ``5.``, ``1e3``).
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_MAX_PRECISION = 38
_SMALLEST = Decimal("1E-130")
_LARGEST = Decimal("9.9999999999999999999999999999999999999E+125")
_SET_NAMES = {"SS": "string", "NS": "number", "BS": "binary"}
#: Exact arithmetic on any number DynamoDB could be sent (the default context rounds to 28 digits).
_EXACT = Context(prec=1000, Emax=999_999, Emin=-999_999)


# ------------------------------------------------------------------------------------
# Sizes
# ------------------------------------------------------------------------------------


def number_size(text: str) -> int:
    """Bytes DynamoDB counts for a number: 1, plus its significant digits in pairs
    aligned on the decimal point, plus 1 when negative (``"0"`` is 1 byte)."""
    value = Decimal(text)
    if value == 0:
        return 1
    sign, digits, exponent = value.normalize(_EXACT).as_tuple()
    first = exponent + len(digits) - 1  # power of ten of the first significant digit
    last = exponent  # ... and of the last one (trailing zeros are normalized away)
    return 1 + (first // 2 - last // 2 + 1) + (1 if sign else 0)


def _raw_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else base64.b64decode(value)


def attribute_size(value: DynamoType) -> int:
    """Bytes DynamoDB counts for one attribute value (without its name)."""
    kind, inner = value.type, value.value
    if kind == "S":
        return len(inner.encode("utf-8"))
    if kind == "N":
        return number_size(inner)
    if kind == "B":
        return len(_raw_bytes(inner))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(member.encode("utf-8")) for member in inner)
    if kind == "NS":
        return sum(number_size(member) for member in inner)
    if kind == "BS":
        return sum(len(_raw_bytes(member)) for member in inner)
    if kind == "L":
        return 3 + sum(1 + attribute_size(DynamoType(member)) for member in inner)
    if kind == "M":
        return 3 + sum(
            1 + len(name.encode("utf-8")) + attribute_size(DynamoType(member)) for name, member in inner.items()
        )
    raise MockValidationException(f"Supplied AttributeValue has an unknown data type: {kind}")


def item_size(attributes: Mapping[str, Any]) -> int:
    """Bytes DynamoDB counts for an item (attribute name -> DynamoType or AttributeValue)."""
    return sum(len(name.encode("utf-8")) + attribute_size(DynamoType(value)) for name, value in attributes.items())


# ------------------------------------------------------------------------------------
# Values
# ------------------------------------------------------------------------------------


def _number_error(text: Any) -> str | None:
    if not isinstance(text, str) or not _NUMBER.fullmatch(text):
        return "A value provided cannot be converted into a number"
    value = Decimal(text)
    if value == 0:
        return None
    if len(value.normalize(_EXACT).as_tuple().digits) > _MAX_PRECISION:
        return "DynamoDB only supports precision up to 38 digits"
    if value.copy_abs() > _LARGEST:
        return "Number overflow. Attempting to store a number with magnitude larger than supported range"
    if value.copy_abs() < _SMALLEST:
        return "Number underflow. Attempting to store a number with magnitude smaller than supported range"
    return None


def value_error(value: Any) -> str | None:
    """Why DynamoDB rejects this AttributeValue (DynamoDB Local's words), or None."""
    if not isinstance(value, dict) or len(value) != 1:
        return None  # malformed shapes: moto's own parsing answers them
    (kind, inner), = value.items()
    if kind == "N":
        return _number_error(inner)
    if kind in _SET_NAMES:
        if not inner:
            return f"One or more parameter values were invalid: An {_SET_NAMES[kind]} set  may not be empty"
        if kind == "NS":
            for member in inner:
                if (error := _number_error(member)) is not None:
                    return error
            if len({Decimal(member).normalize(_EXACT) for member in inner}) != len(inner):
                return "Input collection contains duplicates"
        elif kind == "BS":
            if len({_raw_bytes(member) for member in inner}) != len(inner):
                return "One or more parameter values were invalid: Input collection of type BS contains duplicates."
        elif len(set(inner)) != len(inner):
            return f"One or more parameter values were invalid: Input collection [{', '.join(inner)}] contains duplicates"
        return None
    if kind == "L":
        return next((error for member in inner if (error := value_error(member)) is not None), None)
    if kind == "M":
        return next((error for member in inner.values() if (error := value_error(member)) is not None), None)
    return None


def _values(attributes: Mapping[str, Any] | None) -> Iterator[Any]:
    return iter((attributes or {}).values())


def _condition_values(conditions: Mapping[str, Any] | None) -> Iterator[Any]:
    """Values of legacy ``Expected`` / ``KeyConditions`` / ``QueryFilter`` / ``ScanFilter``."""
    for condition in (conditions or {}).values():
        if "Value" in condition:
            yield condition["Value"]
        yield from condition.get("AttributeValueList") or []


def _check(values: Iterator[Any]) -> None:
    for value in values:
        if (error := value_error(value)) is not None:
            raise MockValidationException(error)


def _check_expression_values(expression_values: Mapping[str, Any] | None) -> None:
    for key, value in (expression_values or {}).items():
        if (error := value_error(value)) is not None:
            raise MockValidationException(f"ExpressionAttributeValues contains invalid value: {error} for key {key}")


def _check_operation(operation: Mapping[str, Any]) -> None:
    """One item operation: PutItem/UpdateItem/DeleteItem/GetItem or a transaction entry."""
    _check(_values(operation.get("Item")))
    _check(_values(operation.get("Key")))
    _check(update["Value"] for update in (operation.get("AttributeUpdates") or {}).values() if "Value" in update)
    _check(_condition_values(operation.get("Expected")))
    _check_expression_values(operation.get("ExpressionAttributeValues"))


def _check_read(request: Mapping[str, Any]) -> None:
    """Query / Scan."""
    _check(_values(request.get("ExclusiveStartKey")))
    for legacy in ("KeyConditions", "QueryFilter", "ScanFilter"):
        _check(_condition_values(request.get(legacy)))
    _check_expression_values(request.get("ExpressionAttributeValues"))


def _check_batch_write(request: Mapping[str, Any]) -> None:
    for writes in (request.get("RequestItems") or {}).values():
        for write in writes:
            _check(_values((write.get("PutRequest") or {}).get("Item")))
            _check(_values((write.get("DeleteRequest") or {}).get("Key")))


def _check_batch_get(request: Mapping[str, Any]) -> None:
    for reads in (request.get("RequestItems") or {}).values():
        for key in reads.get("Keys") or []:
            _check(_values(key))


def _check_transaction(request: Mapping[str, Any]) -> None:
    for entry in request.get("TransactItems") or []:
        for operation in entry.values():
            _check_operation(operation)


#: DynamoHandler action -> validation of its request body.
VALIDATED_ACTIONS: dict[str, Callable[[Mapping[str, Any]], None]] = {
    "put_item": _check_operation,
    "update_item": _check_operation,
    "delete_item": _check_operation,
    "get_item": _check_operation,
    "query": _check_read,
    "scan": _check_read,
    "batch_write_item": _check_batch_write,
    "batch_get_item": _check_batch_get,
    "transact_write_items": _check_transaction,
    "transact_get_items": _check_transaction,
}


def _validated(action: Callable[[Any], Any], check: Callable[[Mapping[str, Any]], None]) -> Callable[[Any], Any]:
    def handler(self):  # type: ignore[no-untyped-def]
        check(self.body)  # a MockValidationException becomes moto's 400 response
        return action(self)

    return handler


# ------------------------------------------------------------------------------------
# Writes: the size of the item written; UpdateItem all or nothing
# ------------------------------------------------------------------------------------


def _set_attribute(self: LimitedSizeDict, key: str, value: Any) -> None:
    """Store without moto's running size check; the whole item is checked once, below."""
    dict.__setitem__(self, key, value)


def _sized_put(original: Callable[..., Item]) -> Callable[..., Item]:
    def put_item(self: Table, item_attrs: dict[str, Any], *args: Any, **kwargs: Any) -> Item:
        if item_size(item_attrs) > MAX_ITEM_BYTES:
            raise ItemSizeTooLarge()
        return original(self, item_attrs, *args, **kwargs)

    return put_item


def _sized_execute(original: Callable[..., None]) -> Callable[..., None]:
    def execute(self: UpdateExpressionExecutor, node: Any = None) -> None:
        original(self, node)
        # The top-level call has applied every action: size the resulting item (moto's
        # update_item turns this into "Item size to update has exceeded ...").
        if node is None and item_size(self.item.attrs) > MAX_ITEM_BYTES:
            raise ItemSizeTooLarge()

    return execute


def _all_or_nothing(original: Callable[..., Item]) -> Callable[..., Item]:
    def update_item(self: DynamoDBBackend, table_name: str, key: dict[str, Any], *args: Any, **kwargs: Any) -> Item:
        try:
            table = self.get_table(table_name)
            hash_key, range_key = self.get_keys_value(table, key)
            found = table.get_item(hash_key, range_key)
        except Exception:  # noqa: BLE001 - a bad key or table: moto's update_item reports it
            return original(self, table_name, key, *args, **kwargs)
        saved = copy.deepcopy(found.attrs) if found is not None else None
        try:
            return original(self, table_name, key, *args, **kwargs)
        except BaseException:
            if found is not None:
                found.attrs = saved
            elif table.get_item(hash_key, range_key) is not None:  # created by this update
                if range_key is not None:
                    table.items[hash_key].pop(range_key)
                else:
                    table.items.pop(hash_key)
            raise

    return update_item


def apply(stack: ExitStack) -> None:
    for name, check in VALIDATED_ACTIONS.items():
        wrap(stack, DynamoHandler, name, lambda action, check=check: _validated(action, check), by=__name__)
    patch_attribute(stack, LimitedSizeDict, "__setitem__", _set_attribute, by=__name__)
    patch_attribute(stack, Table, "put_item", _sized_put(Table.put_item), by=__name__)
    execute = _sized_execute(UpdateExpressionExecutor.execute)
    patch_attribute(stack, UpdateExpressionExecutor, "execute", execute, by=__name__)
    patch_attribute(stack, DynamoDBBackend, "update_item", _all_or_nothing(DynamoDBBackend.update_item), by=__name__)
