"""Consumed capacity: moto's DynamoDB reports the units DynamoDB would consume.

Gap (moto 5.2.1): ``ReturnConsumedCapacity`` is answered with constants - 0.5 for an
UpdateItem (always present, even when not asked for), 1 for a PutItem, DeleteItem, Query or
Scan, 0.5 for a GetItem, the number of keys for a BatchGetItem, 2 per item found for a
TransactGetItems, nothing for a TransactWriteItems - whatever the items' sizes: an
UpdateItem of a 300 KB item "consumes" 0.5 units, so any decision or bill based on the units
is meaningless offline.

Fix: every item request measures the items it touches, with DynamoDB's item sizing
(:func:`~locked_workflow.testing.patches.dynamodb_validation.item_size`: attribute names and
values, https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html),
and computes the units as the developer guide states them
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html):

* **Writes** - 1 unit per KB (rounded up, at least 1) of the larger of the item before and
  after the write: PutItem, UpdateItem (the whole item, however few attributes change),
  DeleteItem (the deleted item; 1 when there is none), BatchWriteItem (each item rounded on
  its own, then summed).
* **Reads** - 1 unit per 4 KB (rounded up, at least one 4 KB block) when strongly
  consistent, half of it when eventually consistent (the default). A GetItem of a missing item
  still consumes a block (0.5 or 1, "If you perform a read operation on an item that doesn't
  exist, DynamoDB will still consume read throughput"); a projection does not lower the units.
  BatchGetItem: each key as its own GetItem (keys returned unprocessed excepted). Query and
  Scan: the items *evaluated* (before any FilterExpression or ProjectionExpression, within
  ``Limit``) summed, then rounded up - at least one block, even when nothing is found.
* **Transactions** - two underlying writes (reads) of every item, prepare and commit
  (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-capacity-handling):
  TransactWriteItems 2 units per KB of each item (a ``ConditionCheck``'s item is one of
  them: 2 units per KB of the item checked); TransactGetItems 2 units per 4 KB of each item
  (a missing one too).
* **Secondary indexes** (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.html#GSI.ThroughputConsiderations.Writes,
  and the same rules for LSIs): a write puts, updates or deletes the item's index entry
  (its projected attributes, sized as an item) - 1 unit per KB; 2 writes when the index key
  changes; none when the entry is absent before and after, or unchanged. A Query or Scan
  of an index is sized on its entries; through an LSI, each entry's table item is charged
  too (DynamoDB charges that fetch only for attributes the index does not project: stricter).
* **Failed conditional writes** consume too, the larger of the existing item and the one
  the write would have made ("The write capacity units consumed will be 310 KB for the new
  item" - read-write-operations.html; WorkingWithItems.html#WorkingWithItems.ConditionalWrites.ReturnConsumedCapacity
  says the existing item's, or 1: the larger reading is the stricter), and so does a
  cancelled transaction (each item as above). As in DynamoDB, the error response carries
  no ``ConsumedCapacity`` ("you don't receive any information in the response about the
  write capacity that was consumed. However, you can view the ConsumedWriteCapacityUnits
  metric for the table in Amazon CloudWatch").

Every consumption - answered or not - is also published to the runtime's CloudWatch as
DynamoDB does: ``AWS/DynamoDB`` ``ConsumedReadCapacityUnits`` / ``ConsumedWriteCapacityUnits``
(Unit ``Count``) with dimension ``TableName`` (and ``GlobalSecondaryIndexName`` for a GSI's
own units), one datum per request
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/metrics-dimensions.html).
The answer's shape is DynamoDB Local's: ``TableName`` and ``CapacityUnits``; with
``INDEXES`` also ``Table`` and the ``GlobalSecondaryIndexes`` / ``LocalSecondaryIndexes``
that consumed units; a transaction's entries (one per table) add ``ReadCapacityUnits`` or
``WriteCapacityUnits``. Without ``ReturnConsumedCapacity`` (or ``NONE``) no capacity is
answered (moto answers UpdateItem's, BatchWriteItem's and BatchGetItem's anyway).

DynamoDB Local (``backend="dynamodb-local"``, which never reaches this module) agrees to
the unit with all of the above for GetItem, PutItem, UpdateItem, DeleteItem, BatchWriteItem,
a Query or Scan that finds items, TransactGetItems and GSI writes, and differs from the
documentation in four places, where the documentation is the spec: it charges a
TransactWriteItems 4 units per KB of each Put/Update/Delete item (the docs: 2) and a
``ConditionCheck`` 4 units per 4 KB of the item checked - though not in every transaction
(in some, nothing); it charges 0 for a Query or Scan that evaluates no item and for a
BatchGetItem key that finds none; and it publishes no CloudWatch metrics.

Proof: ``tests/local/test_patch_consumed_capacity.py``.
"""

from __future__ import annotations

import copy
import inspect
import math
import threading
from abc import ABC, abstractmethod
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from moto.cloudwatch.models import cloudwatch_backends
from moto.core.exceptions import JsonRESTError
from moto.dynamodb.exceptions import ConditionalCheckFailed, MockValidationException, TransactionCanceledException
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.models.table import GlobalSecondaryIndex, SecondaryIndex, Table
from moto.dynamodb.parsing.executors import UpdateExpressionExecutor
from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]
from moto.dynamodb.parsing.validators import UpdateExpressionValidator
from moto.dynamodb.responses import DynamoHandler

from locked_workflow.testing.patches.dynamodb_validation import item_size
from locked_workflow.testing.seams import patch_attribute, wrap

#: One write unit covers an item of up to 1 KB; one read unit (strongly consistent) 4 KB.
WRITE_UNIT_BYTES = 1024
READ_UNIT_BYTES = 4 * 1024
#: Transactions read or write every item twice: prepare and commit.
TRANSACTION_FACTOR = 2
METRIC_NAMESPACE = "AWS/DynamoDB"
READ_METRIC = "ConsumedReadCapacityUnits"
WRITE_METRIC = "ConsumedWriteCapacityUnits"
_MODES = ("NONE", "TOTAL", "INDEXES")
#: Errors of a missing table or a key not of the table's schema while measuring: moto's action
#: answers them (the values were validated before, by ``dynamodb_validation``).
_UNMEASURABLE = (JsonRESTError, LookupError)


def write_units(size: int) -> int:
    """Write units of one write of an item of ``size`` bytes: per KB, rounded up, at least 1."""
    return max(1, math.ceil(size / WRITE_UNIT_BYTES))


def read_units(size: int, *, consistent: bool) -> float:
    """Read units of reading ``size`` bytes: per 4 KB, rounded up, at least one block; half
    when eventually consistent."""
    blocks = max(1, math.ceil(size / READ_UNIT_BYTES))
    return float(blocks) if consistent else blocks / 2


# ------------------------------------------------------------------------------------
# What an item weighs, in the table and in each of its indexes
# ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """An item's entry in a secondary index: its index key and projected attributes."""

    key: tuple[Any, ...]
    attributes: dict[str, DynamoType]
    size: int


@dataclass(frozen=True)
class Image:
    """An item as it stands at one moment: its size (0 when absent) and its index entries."""

    size: int
    entries: dict[str, Entry | None]


def _entry(index: SecondaryIndex, attrs: Mapping[str, DynamoType]) -> Entry | None:
    if not all(name in attrs for name in index.schema_key_attrs):
        return None  # sparse: an item without the index key is not in the index
    projection = (index.projection or {}).get("ProjectionType", "ALL")
    if projection == "ALL":
        names: Iterable[str] = attrs
    else:
        names = [*index.table_key_attrs, *index.schema_key_attrs]
        if projection == "INCLUDE":
            names = [*names, *index.projection.get("NonKeyAttributes", [])]
    projected = {name: copy.deepcopy(attrs[name]) for name in names if name in attrs}
    return Entry(
        key=tuple(attrs[name] for name in index.schema_key_attrs), attributes=projected, size=item_size(projected)
    )


def image(table: Table, item: Item | None) -> Image:
    attrs = item.attrs if item is not None else {}
    return Image(
        size=item_size(attrs) if item is not None else 0,
        entries={index.name: _entry(index, attrs) for index in table.all_indexes()},
    )


def _stored(table: Table, key: Mapping[str, Any]) -> Item | None:
    hash_value = DynamoType(key[table.hash_key_attr])
    range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
    return table.get_item(hash_value, range_value)


def _index_writes(before: Entry | None, after: Entry | None) -> int:
    if before is None and after is None:
        return 0
    if before is None or after is None:
        return write_units((before or after).size)  # type: ignore[union-attr]
    if before.key != after.key:
        return write_units(before.size) + write_units(after.size)  # delete the old entry, put the new
    if before.attributes == after.attributes:
        return 0
    return write_units(max(before.size, after.size))


def _would_be_updated(table: Table, found: Item | None, key: Mapping[str, Any], request: Mapping[str, Any]) -> int:
    """Size of the item an UpdateItem would leave (applied to a copy), or of the item found
    when the update cannot be applied."""
    if found is not None:
        item = copy.deepcopy(found)
    else:
        range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
        item = Item(DynamoType(key[table.hash_key_attr]), range_value, attrs=copy.deepcopy(dict(key)))
    names = request.get("ExpressionAttributeNames") or {}
    try:
        if request.get("UpdateExpression"):
            validated = UpdateExpressionValidator(
                UpdateExpressionParser.make(request["UpdateExpression"]),
                expression_attribute_names=names,
                expression_attribute_values=request.get("ExpressionAttributeValues") or {},
                item=item,
                table=table,
            ).validate()
            validated.normalize()
            UpdateExpressionExecutor(validated, item, names).execute()
        elif request.get("AttributeUpdates"):
            item.update_with_attribute_updates(request["AttributeUpdates"])
    except (JsonRESTError, LookupError, TypeError, ValueError, ArithmeticError):
        return item_size(found.attrs) if found is not None else 0  # refused anyway: the item found counts
    return item_size(item.attrs)


# ------------------------------------------------------------------------------------
# Consumption of one request, per table
# ------------------------------------------------------------------------------------


@dataclass
class Consumption:
    """Units one request consumed on one table: the table's own and each index's."""

    table: Table
    kind: str  # "read" | "write"
    units: float = 0.0
    global_indexes: dict[str, float] = field(default_factory=dict)
    local_indexes: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return self.units + sum(self.global_indexes.values()) + sum(self.local_indexes.values())

    def add_index(self, name: str, units: float) -> None:
        if units:
            index = self.table.get_index(name)
            target = self.global_indexes if isinstance(index, GlobalSecondaryIndex) else self.local_indexes
            target[name] = target.get(name, 0.0) + units

    def write(self, before: Image, after: Image, *, factor: int = 1) -> None:
        """One write that took the item from ``before`` to ``after``."""
        self.units += factor * write_units(max(before.size, after.size))
        for name, entry in before.entries.items():
            self.add_index(name, _index_writes(entry, after.entries.get(name)))

    def answer(self, mode: str, *, split: bool) -> dict[str, Any]:
        """The ConsumedCapacity DynamoDB answers (``split``: a transaction's, with Read/WriteCapacityUnits)."""
        kind_units = "ReadCapacityUnits" if self.kind == "read" else "WriteCapacityUnits"
        answer: dict[str, Any] = {"TableName": self.table.name, "CapacityUnits": float(self.total)}
        if split:
            answer[kind_units] = float(self.total)
        if mode == "INDEXES":
            answer["Table"] = {"CapacityUnits": float(self.units), **({kind_units: float(self.units)} if split else {})}
            for key, indexes in (("GlobalSecondaryIndexes", self.global_indexes), ("LocalSecondaryIndexes", self.local_indexes)):
                if indexes:
                    answer[key] = {name: {"CapacityUnits": float(units)} for name, units in indexes.items()}
        return answer

    def publish(self, account_id: str, region: str) -> None:
        """The ``AWS/DynamoDB`` metric data DynamoDB emits for this consumption (LSIs share the table's)."""
        name = READ_METRIC if self.kind == "read" else WRITE_METRIC
        table = [{"Name": "TableName", "Value": self.table.name}]
        data = [{"MetricName": name, "Value": self.units + sum(self.local_indexes.values()), "Unit": "Count", "Dimensions": table}]
        data += [
            {"MetricName": name, "Value": units, "Unit": "Count",
             "Dimensions": [*table, {"Name": "GlobalSecondaryIndexName", "Value": index}]}
            for index, units in self.global_indexes.items()
        ]
        cloudwatch_backends[account_id][region].put_metric_data(METRIC_NAMESPACE, data)


class Tally:
    """Consumptions of one request, one per table, in the order the tables come."""

    def __init__(self, backend: DynamoDBBackend, kind: str) -> None:
        self.backend = backend
        self.kind = kind
        self.by_table: dict[str, Consumption] = {}

    def on(self, table_name: str) -> Consumption:
        if table_name not in self.by_table:
            self.by_table[table_name] = Consumption(self.backend.get_table(table_name), self.kind)
        return self.by_table[table_name]


# ------------------------------------------------------------------------------------
# Meters: what each action consumes, measured around moto's own handling
# ------------------------------------------------------------------------------------


class Meter(ABC):
    """Measures one request: :meth:`succeeded` after moto answered, :meth:`failed` after a
    failed condition (or cancelled transaction); both return the request's consumptions."""

    #: A transaction's answer carries Read/WriteCapacityUnits and is a list, one per table.
    transaction = False
    #: Batches and transactions answer a list, one entry per table.
    listed = False

    def __init__(self, handler: DynamoHandler) -> None:
        self.backend = handler.dynamodb_backend
        self.body = handler.body

    @abstractmethod
    def succeeded(self, answer: Mapping[str, Any]) -> list[Consumption]:
        """The consumptions of the request moto answered with ``answer``."""

    def failed(self) -> list[Consumption]:
        return []  # a read never fails on a condition


class ItemWrite(Meter):
    """PutItem, UpdateItem, DeleteItem."""

    def __init__(self, handler: DynamoHandler, action: str) -> None:
        super().__init__(handler)
        self.action = action
        self.table = self.backend.get_table(self.body["TableName"])
        self.key = self.body["Item"] if action == "put_item" else self.body["Key"]
        self.found = _stored(self.table, self.key)
        self.before = image(self.table, self.found)

    def succeeded(self, answer: Mapping[str, Any]) -> list[Consumption]:
        consumption = Consumption(self.table, "write")
        consumption.write(self.before, image(self.table, _stored(self.table, self.key)))
        return [consumption]

    def failed(self) -> list[Consumption]:
        consumption = Consumption(self.table, "write")
        consumption.units = write_units(max(self.before.size, _attempted_size(self.table, self.found, self.action, self.body)))
        return [consumption]


def _attempted_size(table: Table, found: Item | None, action: str, request: Mapping[str, Any]) -> int:
    """Size of the item a write meant to leave (a delete: the item it meant to remove)."""
    if action == "put_item":
        return item_size(request["Item"])
    if action == "update_item":
        return _would_be_updated(table, found, request["Key"], request)
    return item_size(found.attrs) if found is not None else 0


class ItemRead(Meter):
    """GetItem."""

    def __init__(self, handler: DynamoHandler) -> None:
        super().__init__(handler)
        self.table = self.backend.get_table(self.body["TableName"])
        self.size = image(self.table, _stored(self.table, self.body["Key"])).size

    def succeeded(self, answer: Mapping[str, Any]) -> list[Consumption]:
        consumption = Consumption(self.table, "read")
        consumption.units = read_units(self.size, consistent=bool(self.body.get("ConsistentRead")))
        return [consumption]


class BatchWrite(Meter):
    listed = True

    def __init__(self, handler: DynamoHandler) -> None:
        super().__init__(handler)
        self.writes: list[tuple[str, Table, Mapping[str, Any], Image]] = []
        for table_name, requests in self.body["RequestItems"].items():
            table = self.backend.get_table(table_name)
            for request in requests:
                key = request["PutRequest"]["Item"] if "PutRequest" in request else request["DeleteRequest"]["Key"]
                self.writes.append((table_name, table, key, image(table, _stored(table, key))))

    def succeeded(self, answer: Mapping[str, Any]) -> list[Consumption]:
        tally = Tally(self.backend, "write")
        for table_name, table, key, before in self.writes:
            tally.on(table_name).write(before, image(table, _stored(table, key)))
        return list(tally.by_table.values())


class BatchGet(Meter):
    listed = True

    def __init__(self, handler: DynamoHandler) -> None:
        super().__init__(handler)
        self.reads: list[tuple[str, Mapping[str, Any], int, bool]] = []
        for table_name, request in self.body["RequestItems"].items():
            table = self.backend.get_table(table_name)
            for key in request["Keys"]:
                self.reads.append((table_name, key, image(table, _stored(table, key)).size, bool(request.get("ConsistentRead"))))

    def succeeded(self, answer: Mapping[str, Any]) -> list[Consumption]:
        tally = Tally(self.backend, "read")
        unprocessed = answer.get("UnprocessedKeys") or {}
        for table_name, key, size, consistent in self.reads:
            if key in (unprocessed.get(table_name) or {}).get("Keys", []):
                continue
            tally.on(table_name).units += read_units(size, consistent=consistent)
        return list(tally.by_table.values())


class TransactWrite(Meter):
    listed = transaction = True

    def __init__(self, handler: DynamoHandler) -> None:
        super().__init__(handler)
        self.writes: list[tuple[str, str, Table, Item | None, Mapping[str, Any], Image]] = []
        for entry in self.body["TransactItems"]:
            (operation, request), = entry.items()
            table = self.backend.get_table(request["TableName"])
            key = request["Item"] if operation == "Put" else request["Key"]
            found = _stored(table, key)
            self.writes.append((operation, request["TableName"], table, found, request, image(table, found)))

    def succeeded(self, answer: Mapping[str, Any]) -> list[Consumption]:
        tally = Tally(self.backend, "write")
        for operation, table_name, table, _, request, before in self.writes:
            key = request["Item"] if operation == "Put" else request["Key"]
            after = before if operation == "ConditionCheck" else image(table, _stored(table, key))
            tally.on(table_name).write(before, after, factor=TRANSACTION_FACTOR)
        return list(tally.by_table.values())

    def failed(self) -> list[Consumption]:
        tally = Tally(self.backend, "write")
        actions = {"Put": "put_item", "Update": "update_item", "Delete": "delete_item", "ConditionCheck": "delete_item"}
        for operation, table_name, table, found, request, before in self.writes:
            attempted = _attempted_size(table, found, actions[operation], request)
            tally.on(table_name).units += TRANSACTION_FACTOR * write_units(max(before.size, attempted))
        return list(tally.by_table.values())


class TransactGet(Meter):
    listed = transaction = True

    def __init__(self, handler: DynamoHandler) -> None:
        super().__init__(handler)
        self.reads: list[tuple[str, int]] = []
        for entry in self.body["TransactItems"]:
            request = entry["Get"]
            table = self.backend.get_table(request["TableName"])
            self.reads.append((request["TableName"], image(table, _stored(table, request["Key"])).size))

    def succeeded(self, answer: Mapping[str, Any]) -> list[Consumption]:
        tally = Tally(self.backend, "read")
        for table_name, size in self.reads:
            tally.on(table_name).units += TRANSACTION_FACTOR * read_units(size, consistent=True)
        return list(tally.by_table.values())


#: The items a Query or Scan evaluates, recorded by the Table methods below for the request
#: running on this thread (moto answers a request on the caller's thread).
_evaluated = threading.local()


class Search(Meter):
    """Query and Scan: the items evaluated, recorded while moto runs the request."""

    def __init__(self, handler: DynamoHandler) -> None:
        super().__init__(handler)
        self.table = self.backend.get_table(self.body["TableName"])
        self.evaluated: list[Item] = []
        _evaluated.items = self.evaluated  # filled by Table.query / Table.scan, below

    def succeeded(self, answer: Mapping[str, Any]) -> list[Consumption]:
        consumption = Consumption(self.table, "read")
        index_name = self.body.get("IndexName")
        index = self.table.get_index(index_name) if index_name else None
        size = 0
        for item in self.evaluated:
            stored = _stored_by_keys(self.table, item)
            if stored is None:
                continue
            if index is None:
                size += item_size(stored.attrs)
                continue
            entry = _entry(index, stored.attrs)
            size += entry.size if entry is not None else 0
            if not isinstance(index, GlobalSecondaryIndex):
                size += item_size(stored.attrs)  # through an LSI: the table item too (stricter)
        units = read_units(size, consistent=bool(self.body.get("ConsistentRead")))
        if index is None:
            consumption.units = units
        else:
            consumption.add_index(index.name, units)
        return [consumption]


def _stored_by_keys(table: Table, item: Item) -> Item | None:
    return table.get_item(item.hash_key, item.range_key if table.range_key_attr else None)


def _recording(original: Callable[..., Any], unfiltered: Mapping[str, Any]) -> Callable[..., Any]:
    """Table.query / Table.scan: also record the items the request evaluates - the same call
    without its filters and projections (``unfiltered``: the arguments to clear)."""
    signature = inspect.signature(original)

    def search(self: Table, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if getattr(_evaluated, "items", None) is not None:
            bound = signature.bind(self, *args, **kwargs)
            bound.arguments.update(unfiltered)
            evaluated, _, _ = original(*bound.args, **bound.kwargs)
            _evaluated.items.extend(evaluated)
        return result

    return search


#: DynamoHandler action -> its meter.
METERS: dict[str, Callable[[DynamoHandler], Meter]] = {
    "put_item": lambda handler: ItemWrite(handler, "put_item"),
    "update_item": lambda handler: ItemWrite(handler, "update_item"),
    "delete_item": lambda handler: ItemWrite(handler, "delete_item"),
    "get_item": ItemRead,
    "batch_write_item": BatchWrite,
    "batch_get_item": BatchGet,
    "transact_write_items": TransactWrite,
    "transact_get_items": TransactGet,
    "query": Search,
    "scan": Search,
}


def _metered(action: Callable[[Any], Any], meter_for: Callable[[DynamoHandler], Meter]) -> Callable[[Any], Any]:
    def handler(self: DynamoHandler):  # type: ignore[no-untyped-def]
        mode = self.body.get("ReturnConsumedCapacity", "NONE")
        if mode not in _MODES:
            raise MockValidationException(
                f"1 validation error detected: Value '{mode}' at 'returnConsumedCapacity' failed to satisfy "
                "constraint: Member must satisfy enum value set: [INDEXES, TOTAL, NONE]"
            )
        try:
            meter = meter_for(self)
        except _UNMEASURABLE:
            return action(self)  # a missing table or a malformed request: moto answers its error
        try:
            result = action(self)
        except (ConditionalCheckFailed, TransactionCanceledException):
            for consumption in meter.failed():
                consumption.publish(self.current_account, self.region)
            raise
        finally:
            _evaluated.items = None
        answer = result.result
        consumptions = meter.succeeded(answer)
        for consumption in consumptions:
            consumption.publish(self.current_account, self.region)
        answer.pop("ConsumedCapacityUnits", None)  # moto's DeleteItem, not in DynamoDB's API
        answer.pop("ConsumedCapacity", None)
        if mode != "NONE":
            answers = [consumption.answer(mode, split=meter.transaction) for consumption in consumptions]
            answer["ConsumedCapacity"] = answers if meter.listed else answers[0]
        return result

    return handler


def apply(stack: ExitStack) -> None:
    for name, meter_for in METERS.items():
        wrap(stack, DynamoHandler, name, lambda action, meter_for=meter_for: _metered(action, meter_for), by=__name__)
    query = _recording(Table.query, {"projection_expressions": None, "filter_expression": None, "filter_kwargs": {}})
    patch_attribute(stack, Table, "query", query, by=__name__)
    scan = _recording(Table.scan, {"filters": {}, "filter_expression": None, "projection_expression": None})
    patch_attribute(stack, Table, "scan", scan, by=__name__)
