"""Transaction conflicts: DynamoDB's answers to a request that meets a transaction in flight.

Gap (moto 5.2.1 and DynamoDB Local 2026-05-28): neither ever answers
``TransactionConflictException``, nor cancels a transaction with a ``TransactionConflict``
reason. moto orders the requests on an item (``patches/serial_dynamodb``), so no transaction is
ever in flight when another request arrives; DynamoDB Local names the exception in its
error table but no code path raises it (its jar holds the name only in that table and in
the AWS SDK's model classes), and a burst of concurrent transactions and writes on one item
never conflicts (``tests/local/test_patch_transaction_conflicts.py`` shows both). DynamoDB
documents them ("Transaction conflict handling in DynamoDB",
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-conflict-handling):
a PutItem, UpdateItem or DeleteItem on an item that an ongoing TransactWriteItems includes
fails with ``TransactionConflictException``; a TransactWriteItems with an item of another
ongoing TransactWriteItems, and a TransactGetItems with an item of an ongoing
TransactWriteItems, fail with ``TransactionCanceledException``, whose ``CancellationReasons``
(one per action, in request order, ``{"Code": "None"}`` for an action without error) carry
``{"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item."}``
(botocore's model of ``TransactionCanceledException``, from the API reference).

Fix: a mode, off by default so the serialized store stays deterministic, turned on by
:func:`transaction_conflicts` inside an active ``LocalCloud`` (either backend). With it on,
every TransactWriteItems (or those ``when`` selects) is *in flight* for ``window_s`` seconds
before it reaches the backend; a request that arrives meanwhile and touches one of its
items is answered as DynamoDB answers it, without reaching the backend:

=============================================  ===============================================
request touching an item in flight             answer
=============================================  ===============================================
PutItem, UpdateItem, DeleteItem                ``TransactionConflictException``
TransactWriteItems, TransactGetItems           ``TransactionCanceledException``, reason
                                               ``TransactionConflict`` at each such action
GetItem, BatchGetItem, Query, Scan             served (the state before the transaction)
=============================================  ===============================================

The transaction's effects are applied atomically at the *end* of its window (its conditions
evaluated then), and its caller gets the answer after that. That is the stricter of the two
orders: a read is serialized before or after a transaction and never sees a transactional
write that did not succeed (same page, "Isolation levels for DynamoDB transactions"), so a
read in the window may see the state before; committing at the end shows the old state to
every reader for the longest time allowed (a waiter polling for a transaction's effect waits
longest), and a transaction cancelled at its end (``write_wins``) was never seen; its caller
waits the whole window either way. Two conflicting transactions: the one that arrives second is cancelled
at once and holds nothing. A TransactWriteItems the backend then refuses (a failed
condition, a validation error) held its items for its window all the same (stricter: AWS
refuses validation errors before any item is held).

The hook sits where botocore makes a call (``BaseClient._make_api_call``), upstream of
moto and DynamoDB Local, as ``faults.py``'s does; it sees the state machines' optimized and
``aws-sdk`` DynamoDB tasks, the in-process Lambdas' calls and the tests' own. Its errors
are botocore's modeled exception classes, so a state machine's task fails with the name
Step Functions gives it: ``DynamoDB.TransactionConflictException`` (optimized integration),
``DynamoDb.TransactionConflictException`` / ``DynamoDb.TransactionCanceledException``
(``aws-sdk``). Installed when the runtime starts (``apply``), below any
``dynamodb_faults`` entered later: a fault injected before a call stops it before any
conflict check, a lost response comes after it.

AWS's launch post of transactions tells the other outcome of a single write against a
transaction in flight: "If an item is modified outside of a transaction while the transaction
is in progress, the transaction is canceled" (https://aws.amazon.com/blogs/aws/new-amazon-dynamodb-transactions/).
``write_wins=True`` models that one: the write succeeds, and the transaction, at the end of
its window, is cancelled with a ``TransactionConflict`` reason at each item such a write
touched, having written nothing. A lock must cope with both.

A fault matrix that wants one given call to meet a conflict, whatever else is in flight,
names it with ``conflict_when(operation, params)``: that request is answered as if a
transaction in flight held each of its items (a single write: ``TransactionConflictException``;
a transaction: cancelled, ``TransactionConflict`` at every action) and never reaches the
backend.

Not modelled: BatchWriteItem (its API lists no conflict error), PartiQL (``ExecuteStatement``,
``ExecuteTransaction``), and a TransactGetItems in flight against later writes.

Proof: ``tests/local/test_patch_transaction_conflicts.py``.
"""

from __future__ import annotations

import threading
import time
import uuid
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable, Hashable, Iterator

from boto3.dynamodb.types import TypeSerializer
from botocore.client import BaseClient
from botocore.exceptions import ClientError

from locked_workflow.testing.seams import patch_attribute

#: The exception of a single-item write that meets a transaction in flight.
CONFLICT_ERROR = "TransactionConflictException"
#: The exception of a transaction that meets another one in flight.
CANCELLED_ERROR = "TransactionCanceledException"
#: The cancellation reason code of an action whose item a transaction in flight holds.
CONFLICT_REASON = "TransactionConflict"
#: The message DynamoDB gives with that reason (botocore's model of TransactionCanceledException).
CONFLICT_MESSAGE = "Transaction is ongoing for the item."

_SINGLE_WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem"})
_TRANSACTIONS = frozenset({"TransactWriteItems", "TransactGetItems"})
_KEY_TYPES = frozenset({"S", "N", "B"})

ItemId = tuple[Hashable, ...]


@dataclass
class ConflictLog:
    """What the mode did, for assertions: ``outcomes`` lists ``(operation, outcome)`` of every
    request it answered or held (``"in flight"``, ``"applied"``, ``CONFLICT_ERROR``,
    ``CANCELLED_ERROR``, ``"won"``: a write that cancelled a transaction in flight)."""

    outcomes: list[tuple[str, str]] = field(default_factory=list)
    in_flight: int = 0
    #: Requests answered with a conflict because ``conflict_when`` named them.
    injected: int = 0

    def count(self, outcome: str, operation: str | None = None) -> int:
        return sum(1 for op, out in list(self.outcomes) if out == outcome and operation in (None, op))

    @property
    def rejected_writes(self) -> int:
        """Single-item writes answered ``TransactionConflictException``."""
        return self.count(CONFLICT_ERROR)

    @property
    def cancelled_transactions(self) -> int:
        """Transactions answered ``TransactionCanceledException`` (reason ``TransactionConflict``)."""
        return self.count(CANCELLED_ERROR)

    @property
    def windows(self) -> int:
        """TransactWriteItems that went in flight."""
        return self.count("in flight")


class _Mode:
    def __init__(self, window_s: float, until: threading.Event | None, when: Callable[[dict], bool],
                 write_wins: bool, conflict_when: Callable[[str, dict], bool] | None) -> None:
        self.window_s = window_s
        self.until = until
        self.when = when
        self.write_wins = write_wins
        self.conflict_when = conflict_when
        self.log = ConflictLog()
        self._guard = threading.Lock()
        self._held: dict[ItemId, int] = {}  # item -> the transaction holding it
        self._lost: dict[int, set[ItemId]] = {}  # a transaction -> its items a winning write touched
        self._key_names: dict[tuple[str, str], tuple[str, ...]] = {}
        self._next_id = 0

    # -- item identity --------------------------------------------------------------------

    def _key_of(self, call: Callable, client: BaseClient, table: str, item: dict) -> dict:
        names = self._key_names.get((client.meta.region_name, table))
        if names is None:
            schema = call(client, "DescribeTable", {"TableName": table})["Table"]["KeySchema"]
            names = self._key_names[(client.meta.region_name, table)] = tuple(k["AttributeName"] for k in schema)
        return {name: item[name] for name in names}

    def _item_id(self, client: BaseClient, table: str, key: dict) -> ItemId:
        table_name = table.rsplit(":table/", 1)[-1]  # a table ARN names the same table
        return (client.meta.region_name, table_name, tuple(sorted((name, _key_value(v)) for name, v in key.items())))

    def _items(self, call: Callable, client: BaseClient, operation: str, params: dict) -> list[ItemId]:
        """The items a request touches, one per action for a transaction (request order)."""
        if operation in _SINGLE_WRITES:
            table = params["TableName"]
            key = self._key_of(call, client, table, params["Item"]) if operation == "PutItem" else params["Key"]
            return [self._item_id(client, table, key)]
        items = []
        for action in params["TransactItems"]:
            ((kind, body),) = action.items()
            key = self._key_of(call, client, body["TableName"], body["Item"]) if kind == "Put" else body["Key"]
            items.append(self._item_id(client, body["TableName"], key))
        return items

    # -- the call -------------------------------------------------------------------------

    def call(self, original: Callable, client: BaseClient, operation: str, params: dict) -> Any:
        try:
            items = self._items(original, client, operation, params)
        except (KeyError, TypeError, ValueError, AttributeError, ClientError):
            return original(client, operation, params)  # malformed, no such table: the backend answers
        if len(set(items)) != len(items):
            return original(client, operation, params)  # two actions on one item: a ValidationException
        if self.conflict_when is not None and self.conflict_when(operation, params):
            with self._guard:
                self.log.outcomes.append((operation, CONFLICT_ERROR if operation in _SINGLE_WRITES else CANCELLED_ERROR))
                self.log.injected += 1
            raise _conflict(client, operation, [True] * len(items))
        window = operation == "TransactWriteItems" and self.when(params)
        with self._guard:
            conflicts = [item in self._held for item in items]
            wins = any(conflicts) and self.write_wins and operation in _SINGLE_WRITES
            if wins:
                self._lost.setdefault(self._held[items[0]], set()).add(items[0])
                self.log.outcomes.append((operation, "won"))
            elif any(conflicts):
                outcome = CONFLICT_ERROR if operation in _SINGLE_WRITES else CANCELLED_ERROR
                self.log.outcomes.append((operation, outcome))
            elif window:
                self._next_id += 1
                transaction = self._next_id
                for item in items:
                    self._held[item] = transaction
                self.log.in_flight += 1
                self.log.outcomes.append((operation, "in flight"))
        if any(conflicts) and not wins:
            raise _conflict(client, operation, conflicts)
        if not window or wins:
            return original(client, operation, params)
        try:
            if self.until is not None:
                self.until.wait(self.window_s)
            else:
                time.sleep(self.window_s)
            with self._guard:
                lost = self._lost.pop(transaction, set())
                if lost:
                    self.log.outcomes.append((operation, CANCELLED_ERROR))
            if lost:
                raise _conflict(client, operation, [item in lost for item in items])
            result = original(client, operation, params)
            self.log.outcomes.append((operation, "applied"))
            return result
        finally:
            with self._guard:
                for item in items:
                    del self._held[item]
                self._lost.pop(transaction, None)
                self.log.in_flight -= 1


def _key_value(value: Any) -> tuple[str, Any]:
    """A key attribute's value, one spelling per value (``{"N": "1.0"}`` is ``{"N": "1"}``);
    a boto3 resource's plain Python values are serialized first."""
    if not (isinstance(value, dict) and len(value) == 1 and next(iter(value)) in _KEY_TYPES):
        value = TypeSerializer().serialize(value)
    ((kind, raw),) = value.items()
    if kind == "N":
        return kind, str(Decimal(raw).normalize())
    return kind, raw


def _conflict(client: BaseClient, operation: str, conflicts: list[bool]) -> Exception:
    """The modeled exception botocore would raise for DynamoDB's answer."""
    metadata = {"HTTPStatusCode": 400, "RequestId": uuid.uuid4().hex.upper(), "HTTPHeaders": {}, "RetryAttempts": 0}
    if operation in _SINGLE_WRITES:
        code, members = CONFLICT_ERROR, {"message": CONFLICT_MESSAGE}
        message = CONFLICT_MESSAGE
    else:
        reasons = [{"Code": CONFLICT_REASON, "Message": CONFLICT_MESSAGE} if hit else {"Code": "None"}
                   for hit in conflicts]
        codes = ", ".join(reason["Code"] for reason in reasons)
        message = f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]"
        code, members = CANCELLED_ERROR, {"Message": message, "CancellationReasons": reasons}
    parsed = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": metadata, **members}
    return client.exceptions.from_code(code)(parsed, operation)


class _Hook:
    """The wrapper of ``BaseClient._make_api_call`` and the mode it consults (None: off)."""

    def __init__(self) -> None:
        self.mode: _Mode | None = None
        self.installed = 0
        self.lock = threading.Lock()


_HOOK = _Hook()


def apply(stack: ExitStack) -> None:
    """Install the dormant hook; :func:`transaction_conflicts` turns the mode on."""
    original = BaseClient._make_api_call

    def _make_api_call(client: BaseClient, operation: str, params: dict) -> Any:
        mode = _HOOK.mode
        if mode is None or (operation not in _SINGLE_WRITES and operation not in _TRANSACTIONS) \
                or client.meta.service_model.service_name != "dynamodb":
            return original(client, operation, params)
        return mode.call(original, client, operation, params)

    patch_attribute(stack, BaseClient, "_make_api_call", _make_api_call, by=__name__)
    with _HOOK.lock:
        _HOOK.installed += 1

    def _uninstall() -> None:
        with _HOOK.lock:
            _HOOK.installed -= 1
            _HOOK.mode = None

    stack.callback(_uninstall)


@contextmanager
def transaction_conflicts(
    *,
    window_s: float = 0.2,
    until: threading.Event | None = None,
    when: Callable[[dict], bool] = lambda params: True,
    write_wins: bool = False,
    conflict_when: Callable[[str, dict], bool] | None = None,
) -> Iterator[ConflictLog]:
    """Answer requests that meet a transaction in flight as DynamoDB does (module docstring).

    Args:
        window_s: seconds each TransactWriteItems is in flight before it is applied.
            Default 0.2. Must be >= 0.
        until: ends every window early once set (a test's deterministic window: a long
            ``window_s`` and ``until.set()`` when the test is ready). Default None.
        when: which TransactWriteItems go in flight, given their parameters (botocore's,
            e.g. ``params["TransactItems"]``). Default: all. Every request is checked
            against those in flight whatever ``when`` says. Must not call AWS.
        write_wins: a PutItem/UpdateItem/DeleteItem on an item in flight succeeds, and the
            transaction is cancelled at the end of its window (the launch post's outcome).
            Default False: the write fails with ``TransactionConflictException`` (the
            developer guide's).
        conflict_when: given the operation and parameters of every PutItem, UpdateItem,
            DeleteItem, TransactWriteItems and TransactGetItems, True answers it as if a
            transaction in flight held all its items (a targeted fault; count calls in it
            for "the first two"). Default None. Must not call AWS.

    Yields the :class:`ConflictLog`. Needs an active ``LocalCloud``; one mode at a time.
    """
    if isinstance(window_s, bool) or not isinstance(window_s, (int, float)) or not window_s >= 0:
        raise ValueError(f"`window_s` must be a number of seconds >= 0, got: {window_s!r}")
    if not isinstance(write_wins, bool):
        raise ValueError(f"`write_wins` must be a bool, got: {write_wins!r}")
    mode = _Mode(float(window_s), until, when, write_wins, conflict_when)
    with _HOOK.lock:
        if _HOOK.installed == 0:
            raise RuntimeError("transaction_conflicts needs an active LocalCloud (its runtime installs the hook)")
        if _HOOK.mode is not None:
            raise RuntimeError("transaction_conflicts is already on; exit it first")
        _HOOK.mode = mode
    try:
        yield mode.log
    finally:
        with _HOOK.lock:
            if _HOOK.mode is mode:
                _HOOK.mode = None
