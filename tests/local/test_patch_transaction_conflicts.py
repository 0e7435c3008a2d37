"""Fix ``patches/transaction_conflicts``: a request meeting a transaction in flight is answered as
DynamoDB answers it ("Transaction conflict handling in DynamoDB",
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-conflict-handling).

The gap first: on the bare serialized store (moto) a write issued while a transaction is inside
the backend waits and succeeds, and on DynamoDB Local a burst of transactions and writes on one
item never conflicts. Then the mode, on both backends: a TransactWriteItems held in flight (a long
``window_s`` ended by an event, so nothing depends on timing) makes single writes to its items
fail with ``TransactionConflictException`` and other transactions on them be cancelled with a
``TransactionConflict`` reason, changes nothing until it applies, and leaves other items free; a
state machine's DynamoDB tasks see Step Functions' error names, and a Retry on them recovers.
"""

from __future__ import annotations

import threading
import uuid
from unittest import mock

import pytest
from botocore.exceptions import ClientError
from moto.dynamodb.models import DynamoDBBackend

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.faults import Fault, dynamodb_faults
from locked_workflow.testing.pytest_plugin import require_backend
from locked_workflow.testing.patches.transaction_conflicts import (
    CANCELLED_ERROR,
    CONFLICT_ERROR,
    CONFLICT_REASON,
    transaction_conflicts,
)
from local_helpers import create_state_machine, wait_until

HELD = {"pk": {"S": "held"}}
OTHER = {"pk": {"S": "other"}}
FREE = {"pk": {"S": "free"}}


@pytest.fixture(scope="module", params=["moto", "dynamodb-local"])
def cloud(request):
    """One cloud per backend (DynamoDB Local takes seconds to start); each test its own table."""
    require_backend(request.param)
    with LocalCloud(request.param) as local:
        yield local


class Scene:
    """A fresh table holding ``HELD`` (``n`` = 0), and the requests of the tests."""

    def __init__(self, cloud) -> None:
        self.cloud, self.dynamodb = cloud, cloud.dynamodb
        self.table = f"conflicts-{uuid.uuid4().hex[:8]}"
        self.dynamodb.create_table(
            TableName=self.table, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
        self.dynamodb.put_item(TableName=self.table, Item={**HELD, "n": {"N": "0"}})

    def item(self, key: dict) -> dict | None:
        return self.dynamodb.get_item(TableName=self.table, Key=key, ConsistentRead=True).get("Item")

    def increment(self, key: dict) -> dict:
        """UpdateItem parameters (a transaction's Update action too): ``n`` += 1."""
        return {"TableName": self.table, "Key": key, "UpdateExpression": "ADD n :one",
                "ExpressionAttributeValues": {":one": {"N": "1"}}}

    def holding_transaction(self) -> dict:
        """TransactWriteItems: mark ``held`` (if it exists) and create ``other``."""
        return {"TransactItems": [
            {"Update": {"TableName": self.table, "Key": HELD, "UpdateExpression": "SET tx = :t",
                        "ConditionExpression": "attribute_exists(pk)", "ExpressionAttributeValues": {":t": {"S": "yes"}}}},
            {"Put": {"TableName": self.table, "Item": {**OTHER, "tx": {"S": "yes"}}}},
        ]}

    def is_holding(self, params: dict) -> bool:
        """``when``: only the holding transaction goes in flight (a test's own go straight through)."""
        return params == self.holding_transaction()


@pytest.fixture
def scene(cloud) -> Scene:
    return Scene(cloud)


class _InFlight:
    """The holding transaction, run in a thread; ``join()`` returns what it returned or raised."""

    def __init__(self, scene: Scene, log) -> None:
        self.result: object = None
        self.thread = threading.Thread(target=self._run, args=(scene,), daemon=True)
        self.thread.start()
        assert wait_until(lambda: log.in_flight == 1 or not self.thread.is_alive(), timeout=20)
        assert log.in_flight == 1, f"the transaction never went in flight: {self.result!r}"

    def _run(self, scene: Scene) -> None:
        try:
            self.result = scene.dynamodb.transact_write_items(**scene.holding_transaction())
        except Exception as error:  # noqa: BLE001 - reported by the test
            self.result = error

    def join(self) -> object:
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()
        return self.result


def _code(call) -> str | None:
    try:
        call()
    except ClientError as error:
        return error.response["Error"]["Code"]
    return None


# -- the gap ------------------------------------------------------------------------------


def test_bare_serialized_moto_lets_a_write_wait_behind_a_transaction_and_succeed(scene):
    """With the transaction inside moto's backend (held there), an UpdateItem of its item waits
    for the serial lock and then succeeds: no conflict is ever answered."""
    if scene.cloud.backend != "moto":
        pytest.skip("holds the transaction inside moto's backend")
    inside, go_on = threading.Event(), threading.Event()
    original = DynamoDBBackend.transact_write_items

    def held(self, *args, **kwargs):
        inside.set()
        assert go_on.wait(20)
        return original(self, *args, **kwargs)

    with mock.patch.object(DynamoDBBackend, "transact_write_items", held):
        transaction = threading.Thread(target=scene.dynamodb.transact_write_items, kwargs=scene.holding_transaction())
        transaction.start()
        assert inside.wait(20)
        codes: list = []
        write = threading.Thread(target=lambda: codes.append(_code(lambda: scene.dynamodb.update_item(**scene.increment(HELD)))))
        write.start()
        write.join(timeout=0.5)
        assert write.is_alive(), "the write did not wait for the transaction: is the store still serial?"
        go_on.set()
        transaction.join(timeout=20)
        write.join(timeout=20)
    assert codes == [None]
    assert scene.item(HELD) == {**HELD, "n": {"N": "1"}, "tx": {"S": "yes"}}


def _burst(scene: Scene, rounds: int = 12) -> tuple[dict[str | None, int], int]:
    """4 threads of transactions and 4 of UpdateItems on one item at once; returns the error codes
    (None: success) and the item's counter."""
    codes: dict[str | None, int] = {}
    guard = threading.Lock()
    barrier = threading.Barrier(8)

    def run(request) -> None:
        barrier.wait()
        for _ in range(rounds):
            code = _code(request)
            with guard:
                codes[code] = codes.get(code, 0) + 1

    transaction = lambda: scene.dynamodb.transact_write_items(TransactItems=[  # noqa: E731
        {"Update": scene.increment(HELD)}, {"Put": {"TableName": scene.table, "Item": OTHER}}])
    update = lambda: scene.dynamodb.update_item(**scene.increment(HELD))  # noqa: E731
    threads = [threading.Thread(target=run, args=(request,)) for request in [transaction, update] * 4]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return codes, int(scene.item(HELD)["n"]["N"])


def test_without_the_mode_concurrent_transactions_and_writes_never_conflict(scene):
    codes, counter = _burst(scene)
    assert codes == {None: 96}, f"{scene.cloud.backend} answered a conflict by itself: {codes}"
    assert counter == 96


# -- the mode -----------------------------------------------------------------------------


def test_a_write_to_an_item_a_transaction_holds_is_rejected_and_changes_nothing(scene):
    ends = threading.Event()
    with transaction_conflicts(window_s=30, until=ends) as log:
        transaction = _InFlight(scene, log)
        increment = lambda: scene.dynamodb.update_item(**scene.increment(HELD))  # noqa: E731
        with pytest.raises(scene.dynamodb.exceptions.TransactionConflictException):
            increment()
        assert _code(lambda: scene.dynamodb.put_item(TableName=scene.table, Item={**OTHER, "mine": {"S": "x"}})) == CONFLICT_ERROR
        assert _code(lambda: scene.dynamodb.delete_item(TableName=scene.table, Key=HELD)) == CONFLICT_ERROR
        assert scene.item(HELD) == {**HELD, "n": {"N": "0"}}  # reads are served: the state before
        assert scene.item(OTHER) is None
        scene.dynamodb.update_item(**scene.increment(FREE))  # another item: free
        assert log.rejected_writes == 3 and transaction.thread.is_alive()
        ends.set()
        assert "ResponseMetadata" in transaction.join()
        increment()  # the window is over
    assert scene.item(HELD) == {**HELD, "n": {"N": "1"}, "tx": {"S": "yes"}}  # the rejected writes left nothing
    assert scene.item(OTHER) == {**OTHER, "tx": {"S": "yes"}}
    assert scene.item(FREE) == {**FREE, "n": {"N": "1"}}


def test_a_second_transaction_on_a_held_item_is_cancelled_with_a_transaction_conflict_reason(scene):
    ends = threading.Event()
    with transaction_conflicts(window_s=30, until=ends, when=scene.is_holding) as log:
        transaction = _InFlight(scene, log)
        with pytest.raises(scene.dynamodb.exceptions.TransactionCanceledException) as cancelled:
            scene.dynamodb.transact_write_items(TransactItems=[
                {"Put": {"TableName": scene.table, "Item": {**FREE, "second": {"S": "yes"}}}},
                {"Update": scene.increment(HELD)}])
        assert cancelled.value.response["CancellationReasons"] == [
            {"Code": "None"}, {"Code": CONFLICT_REASON, "Message": "Transaction is ongoing for the item."}]
        with pytest.raises(scene.dynamodb.exceptions.TransactionCanceledException) as read:
            scene.dynamodb.transact_get_items(TransactItems=[{"Get": {"TableName": scene.table, "Key": OTHER}}])
        assert [r["Code"] for r in read.value.response["CancellationReasons"]] == [CONFLICT_REASON]
        scene.dynamodb.transact_write_items(TransactItems=[{"Update": scene.increment(FREE)}])  # other items: free
        assert log.cancelled_transactions == 2 and log.windows == 1 and transaction.thread.is_alive()
        ends.set()
        assert "ResponseMetadata" in transaction.join()
    assert scene.item(FREE) == {**FREE, "n": {"N": "1"}}  # the cancelled transaction wrote nothing
    assert scene.item(HELD) == {**HELD, "n": {"N": "0"}, "tx": {"S": "yes"}}


def test_with_write_wins_the_write_lands_and_the_transaction_is_cancelled_having_written_nothing(scene):
    ends = threading.Event()
    with transaction_conflicts(window_s=30, until=ends, write_wins=True) as log:
        transaction = _InFlight(scene, log)
        scene.dynamodb.update_item(**scene.increment(HELD))
        assert scene.item(HELD) == {**HELD, "n": {"N": "1"}}
        ends.set()
        cancelled = transaction.join()
    assert isinstance(cancelled, scene.dynamodb.exceptions.TransactionCanceledException), cancelled
    assert cancelled.response["CancellationReasons"] == [
        {"Code": CONFLICT_REASON, "Message": "Transaction is ongoing for the item."}, {"Code": "None"}]
    assert log.count("won") == 1 and log.cancelled_transactions == 1 and log.count("applied") == 0
    assert scene.item(HELD) == {**HELD, "n": {"N": "1"}} and scene.item(OTHER) is None


def test_concurrent_transactions_and_writes_conflict_and_lose_no_update(scene):
    """The burst of the gap test with the mode on: conflicts now happen, and every increment that
    succeeded is counted once (none that failed is)."""
    with transaction_conflicts(window_s=0.05) as log:
        codes, counter = _burst(scene, rounds=6)
    assert set(codes) <= {None, CONFLICT_ERROR, CANCELLED_ERROR}
    assert codes.get(CONFLICT_ERROR, 0) + codes.get(CANCELLED_ERROR, 0) > 0, codes
    assert counter == codes[None]
    assert log.rejected_writes == codes.get(CONFLICT_ERROR, 0) and log.cancelled_transactions == codes.get(CANCELLED_ERROR, 0)


def test_the_mode_validates_its_options_is_on_once_and_leaves_bad_requests_to_the_backend(cloud):
    with pytest.raises(ValueError, match="`window_s` must be a number of seconds >= 0, got: -1"):
        with transaction_conflicts(window_s=-1):
            pass
    with pytest.raises(ValueError, match="`write_wins` must be a bool, got: 'yes'"):
        with transaction_conflicts(write_wins="yes"):
            pass
    with transaction_conflicts():
        with pytest.raises(RuntimeError, match="already on"):
            with transaction_conflicts():
                pass
        with pytest.raises(cloud.dynamodb.exceptions.ResourceNotFoundException):  # the backend's answer, as without
            cloud.dynamodb.put_item(TableName="no-such-table", Item={"pk": {"S": "x"}})


# -- state machines -------------------------------------------------------------------------


def _task(resource: str, arguments: dict, **extra) -> dict:
    return {"Type": "Task", "Resource": f"arn:aws:states:::{resource}", "Arguments": arguments, **extra}


def _caught(name: str, next_state: str) -> list[dict]:
    return [{"ErrorEquals": ["States.ALL"], "Assign": {name: "{% $states.errorOutput %}"}, "Next": next_state}]


def test_a_state_machine_task_sees_step_functions_error_names(scene):
    increment = scene.increment(HELD)
    machine = create_state_machine({
        "QueryLanguage": "JSONata", "StartAt": "Optimized",
        "States": {
            "Optimized": _task("dynamodb:updateItem", increment, Catch=_caught("optimized", "AwsSdk"), Next="AwsSdk"),
            "AwsSdk": _task("aws-sdk:dynamodb:updateItem", increment, Catch=_caught("sdk", "Transaction"), Next="Transaction"),
            "Transaction": _task("aws-sdk:dynamodb:transactWriteItems", {"TransactItems": [{"Update": increment}]},
                                 Catch=_caught("transaction", "Done"), Next="Done"),
            "Done": {"Type": "Pass", "Output": "{% {'optimized': $optimized, 'sdk': $sdk, 'transaction': $transaction} %}",
                     "End": True},
        },
    }, name=scene.table)
    ends = threading.Event()
    with transaction_conflicts(window_s=30, until=ends, when=scene.is_holding) as log:
        transaction = _InFlight(scene, log)
        result = scene.cloud.wait_for(scene.cloud.start_execution(machine, {}), timeout=30)
        ends.set()
        transaction.join()
    errors = {state: caught["Error"] for state, caught in result.output.items()}
    assert errors == {"optimized": "DynamoDB.TransactionConflictException", "sdk": "DynamoDb.TransactionConflictException",
                      "transaction": "DynamoDb.TransactionCanceledException"}, result.output
    assert CONFLICT_REASON in result.output["transaction"]["Cause"]
    assert scene.item(HELD)["n"] == {"N": "0"}


def test_a_retry_on_the_conflict_recovers_once_the_transaction_ends(scene):
    retry = [{"ErrorEquals": ["DynamoDB.TransactionConflictException"], "IntervalSeconds": 1, "MaxAttempts": 30,
              "BackoffRate": 1}]
    machine = create_state_machine({
        "QueryLanguage": "JSONata", "StartAt": "Increment",
        "States": {"Increment": _task("dynamodb:updateItem", scene.increment(HELD), Retry=retry, End=True)},
    }, name=scene.table)
    ends = threading.Event()
    with transaction_conflicts(window_s=30, until=ends, when=scene.is_holding) as log:
        transaction = _InFlight(scene, log)
        arn = scene.cloud.start_execution(machine, {})
        assert wait_until(lambda: log.rejected_writes >= 1, timeout=20), "the task never met the transaction"
        ends.set()
        transaction.join()
        result = scene.cloud.wait_for(arn, timeout=30)
    failed = [e["taskFailedEventDetails"]["error"] for e in result.history if e["type"] == "TaskFailed"]
    assert result.status == "SUCCEEDED" and failed and set(failed) == {"DynamoDB.TransactionConflictException"}
    assert scene.item(HELD) == {**HELD, "n": {"N": "1"}, "tx": {"S": "yes"}}


def test_a_lost_response_of_a_transaction_in_flight_composes_with_the_faults(scene):
    """``dynamodb_faults`` sits above the mode: a transaction whose response is lost was in flight
    (writes rejected meanwhile), applied, and its caller sees the fault."""
    ends = threading.Event()
    lost = Fault("TransactWriteItems", "InternalServerError", after_call=True)
    with transaction_conflicts(window_s=30, until=ends) as log, dynamodb_faults(lost):
        transaction = _InFlight(scene, log)
        assert _code(lambda: scene.dynamodb.update_item(**scene.increment(HELD))) == CONFLICT_ERROR
        ends.set()
        result = transaction.join()
    assert isinstance(result, ClientError) and result.response["Error"]["Code"] == "InternalServerError"
    assert lost.injected == 1 and log.count("applied") == 1
    assert scene.item(HELD) == {**HELD, "n": {"N": "0"}, "tx": {"S": "yes"}}


def test_a_targeted_conflict_meets_each_integration_once_and_its_retry_recovers(scene):
    """``conflict_when`` makes every other call of an operation meet a conflict (the two UpdateItem
    tasks' first tries, the transaction's): each task fails once with Step Functions' name for it,
    its Retry on that name runs it again, and it lands once."""
    def retry_on(error: str) -> list[dict]:
        return [{"ErrorEquals": [error], "IntervalSeconds": 1, "MaxAttempts": 2, "BackoffRate": 1}]

    increment = scene.increment(HELD)
    machine = create_state_machine({
        "QueryLanguage": "JSONata", "StartAt": "Optimized",
        "States": {
            "Optimized": _task("dynamodb:updateItem", increment, Retry=retry_on("DynamoDB.TransactionConflictException"),
                               Next="AwsSdk"),
            "AwsSdk": _task("aws-sdk:dynamodb:updateItem", increment, Retry=retry_on("DynamoDb.TransactionConflictException"),
                            Next="Transaction"),
            "Transaction": _task("aws-sdk:dynamodb:transactWriteItems", {"TransactItems": [{"Update": increment}]},
                                 Retry=retry_on("DynamoDb.TransactionCanceledException"), End=True),
        },
    }, name=scene.table)
    seen: dict[str, int] = {}

    def every_other(operation: str, params: dict) -> bool:
        seen[operation] = seen.get(operation, 0) + 1
        return seen[operation] % 2 == 1

    with transaction_conflicts(window_s=0, conflict_when=every_other) as log:
        result = scene.cloud.wait_for(scene.cloud.start_execution(machine, {}), timeout=30)
    failed = [e["taskFailedEventDetails"] for e in result.history if e["type"] == "TaskFailed"]
    assert result.status == "SUCCEEDED", result
    assert [f["error"] for f in failed] == ["DynamoDB.TransactionConflictException", "DynamoDb.TransactionConflictException",
                                           "DynamoDb.TransactionCanceledException"]
    assert CONFLICT_REASON in failed[2]["cause"] and log.injected == 3
    assert scene.item(HELD)["n"] == {"N": "3"}  # each increment landed once
