"""Serial DynamoDB: requests to moto's DynamoDB backend are serialized per item, as DynamoDB does.

Gap (moto 5.2.1): the DynamoDB backend has no locking. A conditional write reads the
current item, evaluates the condition, then stores the new item; two threads can both
read "absent" and both win ``attribute_not_exists(pk)``. Real DynamoDB serialises writes
to an item, so a lock built on conditional writes is meaningless without this fix.

Fix: a lock around ``DynamoHandler.call_action`` - the entry point of every DynamoDB API call
(boto3 clients of the test, of Step Functions tasks, of in-process Lambdas) - that orders the
requests touching one item and lets requests on other items run at once. Three levels, always
taken in this order (so no two requests can wait on each other in a cycle):

1. the whole store, read-write: every request below holds it shared; any other request
   (CreateTable, DescribeTable, UpdateTimeToLive, ListTables, PartiQL, ...) holds it alone;
2. each table, read-write: GetItem, PutItem, UpdateItem, DeleteItem, the Batch requests and
   TransactGetItems hold it shared (alone on a table with a stream, whose records moto numbers
   in order); Query and Scan hold it alone, as moto walks the table's items; TransactWriteItems
   holds every table it names alone (moto copies those tables to roll a failed transaction
   back, and restores the copies);
3. each item's partition key (table, partition key value: a stricter grain than the item,
   as moto keeps a partition's items in one dict), a mutex: every item a request names, in a
   fixed order (table, then key), so a transaction or batch takes all of its items at once.

A request the wrapper cannot read (no such table, no key in it) holds the whole store alone, as
every request did before: moto answers it. A DynamoDB request made while the same thread handles
one (none is today) runs under the outer request's locks.

AWS: a conditional write succeeds only if its condition holds against the item as it is
when the write is applied - ``attribute_not_exists`` on the key prevents an overwrite
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.ConditionExpressions.html#Expressions.ConditionExpressions.PreventingOverwrites);
writes to different items proceed independently, and DynamoDB orders only writes to the same
item ("Read consistency", "Isolation levels for DynamoDB transactions":
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-isolation).

Proof: ``tests/local/test_patch_serial_dynamodb.py`` (and, for the per-item grain,
``tests/local/test_serial_dynamodb_per_item.py``).
"""

from __future__ import annotations

import json
import threading
from contextlib import ExitStack
from typing import Any, Iterator

from moto.dynamodb.responses import DynamoHandler

from locked_workflow.testing.seams import patch_attribute

#: Requests on one item (or a few named items) of one or more tables.
ITEM_REQUESTS = frozenset({"GetItem", "PutItem", "UpdateItem", "DeleteItem",
                           "BatchGetItem", "BatchWriteItem", "TransactGetItems", "TransactWriteItems"})
#: Requests that walk one table's items.
TABLE_WALKS = frozenset({"Query", "Scan"})


class ReadWriteLock:
    """Shared or exclusive; a waiting exclusive request keeps new shared ones out (no starvation)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    def acquire(self, exclusive: bool) -> None:
        with self._cond:
            if exclusive:
                self._writers_waiting += 1
                try:
                    while self._writer or self._readers:
                        self._cond.wait()
                finally:
                    self._writers_waiting -= 1
                self._writer = True
            else:
                while self._writer or self._writers_waiting:
                    self._cond.wait()
                self._readers += 1

    def release(self, exclusive: bool) -> None:
        with self._cond:
            if exclusive:
                self._writer = False
            else:
                self._readers -= 1
            self._cond.notify_all()


class ItemLocks:
    """The three levels of locks of one process (see the module's docstring)."""

    def __init__(self) -> None:
        self.store = ReadWriteLock()
        self._guard = threading.Lock()
        self._tables: dict[str, ReadWriteLock] = {}
        self._items: dict[tuple[str, str], threading.Lock] = {}

    def table(self, name: str) -> ReadWriteLock:
        found = self._tables.get(name)  # a dict read: no guard for a lock that exists
        if found is not None:
            return found
        with self._guard:
            return self._tables.setdefault(name, ReadWriteLock())

    def item(self, table: str, key: str) -> threading.Lock:
        found = self._items.get((table, key))
        if found is not None:
            return found
        with self._guard:
            return self._items.setdefault((table, key), threading.Lock())


#: The locks of this process (moto's backend is process-wide).
LOCKS = ItemLocks()
_held = threading.local()


class _Plan:
    """What one request locks: tables (name -> alone?) and items ((table, key) pairs)."""

    def __init__(self) -> None:
        self.tables: dict[str, bool] = {}
        self.items: set[tuple[str, str]] = set()

    def table(self, name: str, exclusive: bool) -> None:
        self.tables[name] = self.tables.get(name, False) or exclusive


class _Unreadable(Exception):
    """The request names no table or key the wrapper can find: it runs alone."""


def _partition(backend: Any, table_name: Any, key: Any) -> tuple[str, str, Any]:
    table = backend.tables.get(table_name) if isinstance(table_name, str) else None
    if table is None or not isinstance(key, dict) or table.hash_key_attr not in key:
        raise _Unreadable
    return table_name, json.dumps(key[table.hash_key_attr], sort_keys=True), table


def plan_of(action: str, params: dict[str, Any], backend: Any) -> _Plan | None:
    """The locks ``action`` needs besides the store's shared hold; None: the store alone."""
    plan = _Plan()
    try:
        if action in TABLE_WALKS:
            name = params.get("TableName")
            if backend.tables.get(name) is None:
                return None
            plan.table(name, True)
            return plan
        if action not in ITEM_REQUESTS:
            return None
        for name, key, exclusive in _named_items(action, params):
            table_name, partition, table = _partition(backend, name, key)
            writes_stream = action not in ("GetItem", "BatchGetItem", "TransactGetItems") and table.stream_shard is not None
            plan.table(table_name, exclusive or writes_stream)
            plan.items.add((table_name, partition))
    except (_Unreadable, AttributeError, TypeError, KeyError, ValueError):
        return None
    return plan if plan.tables else None


def _named_items(action: str, params: dict[str, Any]) -> Iterator[tuple[Any, Any, bool]]:
    """(table name, key or item, the table alone?) of every item the request names."""
    if action in ("GetItem", "UpdateItem", "DeleteItem"):
        yield params["TableName"], params["Key"], False
    elif action == "PutItem":
        yield params["TableName"], params["Item"], False
    elif action in ("TransactWriteItems", "TransactGetItems"):
        for entry in params["TransactItems"]:
            ((kind, operation),) = entry.items()
            yield operation["TableName"], operation["Item"] if kind == "Put" else operation["Key"], \
                action == "TransactWriteItems"
    elif action == "BatchGetItem":
        for name, request in params["RequestItems"].items():
            for key in request["Keys"]:
                yield name, key, False
    elif action == "BatchWriteItem":
        for name, requests in params["RequestItems"].items():
            for request in requests:
                ((kind, operation),) = request.items()
                yield name, operation["Item"] if kind == "PutRequest" else operation["Key"], False


def run_serialized(action: str, params: dict[str, Any], backend: Any, call: Any) -> Any:
    """``call()`` holding the locks ``action`` needs (see the module's docstring)."""
    if getattr(_held, "depth", 0):
        return call()  # a request inside a request: the outer one's locks cover it
    plan = plan_of(action, params, backend)
    store_alone = plan is None
    taken: list[Any] = []
    _held.depth = 1
    LOCKS.store.acquire(store_alone)
    try:
        if plan is not None:
            for name in sorted(plan.tables):
                lock = LOCKS.table(name)
                lock.acquire(plan.tables[name])
                taken.append((lock, plan.tables[name]))
            for table_name, key in sorted(plan.items):
                lock = LOCKS.item(table_name, key)
                lock.acquire()
                taken.append((lock, None))
        return call()
    finally:
        for lock, exclusive in reversed(taken):
            if exclusive is None:
                lock.release()
            else:
                lock.release(exclusive)
        LOCKS.store.release(store_alone)
        _held.depth = 0


def apply(stack: ExitStack) -> None:
    original = DynamoHandler.call_action

    def call_action(self):  # type: ignore[no-untyped-def]
        return run_serialized(self._get_action(), getattr(self, "params", None) or {}, self.dynamodb_backend,
                              lambda: original(self))

    patch_attribute(stack, DynamoHandler, "call_action", call_action, by=__name__)
