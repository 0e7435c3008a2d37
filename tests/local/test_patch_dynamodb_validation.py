"""Fix ``patches/dynamodb_validation``: moto's DynamoDB refuses what DynamoDB refuses, and only that.

One probe (:func:`observe`) runs the same requests against a client and records what each
answered and what was stored. Bare moto diverges from DynamoDB in every group; the runtime
answers exactly as DynamoDB Local does, and so does the ``dynamodb-local`` backend itself
(the proof that the expected answers are DynamoDB's, not the patch's).
"""

from __future__ import annotations

from typing import Any, Callable

import boto3
import pytest
from botocore.exceptions import ClientError

from locked_workflow.testing.patches.dynamodb_validation import MAX_ITEM_BYTES, item_size, number_size
from local_helpers import REGION, bare_moto

TABLE = "things"
BIG = 220_000  # an attribute of ~215 KB: an item holds one, its replacement included


def answer(call: Callable[..., Any], **kwargs: Any) -> str:
    try:
        call(**kwargs)
        return "OK"
    except ClientError as error:
        return f"{error.response['Error']['Code']}: {error.response['Error']['Message']}"
    except Exception as error:  # noqa: BLE001 - bare moto lets some Python errors escape
        return f"crashed: {type(error).__name__}"


def sized_item(key: str, total: int) -> dict[str, Any]:
    """An item of exactly ``total`` bytes by DynamoDB's sizing: a map, a list, a negative
    decimal, a binary and a string padded to the size."""
    item = {
        "pk": {"S": key},
        "m": {"M": {"k": {"L": [{"N": "-100.5"}, {"BOOL": True}, {"NULL": True}]}, "b": {"B": b"\x00\x01"}}},
        "ns": {"NS": ["12345", "0.01"]},
        "pad": {"S": ""},
    }
    item["pad"]["S"] = "é" * ((total - item_size(item)) // 2) + "x" * ((total - item_size(item)) % 2)
    assert item_size(item) == total
    return item


def observe(client: Any) -> dict[str, Any]:
    """What ``client``'s DynamoDB answers and stores for each divergence of bare moto."""
    client.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )

    def stored(key: str) -> Any:
        return client.get_item(TableName=TABLE, Key={"pk": {"S": key}}, ConsistentRead=True).get("Item")

    def update(key: str, expression: str, values: dict[str, Any]) -> str:
        return answer(
            client.update_item,
            TableName=TABLE,
            Key={"pk": {"S": key}},
            UpdateExpression=expression,
            ExpressionAttributeValues=values,
        )

    seen: dict[str, Any] = {}
    # 1. Size: the item after the write, 400 KB, DynamoDB's sizing.
    client.put_item(TableName=TABLE, Item={"pk": {"S": "big"}, "body": {"S": "x" * BIG}})
    seen["replace a big attribute"] = update("big", "SET body = :b", {":b": {"S": "y" * BIG}})
    seen["item of 400 KB"] = answer(client.put_item, TableName=TABLE, Item=sized_item("edge", MAX_ITEM_BYTES))
    seen["item of 400 KB + 1 byte"] = answer(client.put_item, TableName=TABLE, Item=sized_item("over", MAX_ITEM_BYTES + 1))
    # 2. UpdateItem: all or nothing.
    client.put_item(TableName=TABLE, Item={"pk": {"S": "typed"}, "s": {"S": "text"}})
    seen["update failing on its 2nd action"] = update("typed", "SET a = :one ADD s :one", {":one": {"N": "1"}})
    seen["... leaves the item"] = stored("typed")
    seen["update of a missing item failing"] = update("new", "SET a = :s, b = :s", {":s": {"S": "q" * BIG}})
    seen["... creates nothing"] = stored("new")
    client.put_item(TableName=TABLE, Item={"pk": {"S": "grow"}})
    seen["update growing past 400 KB"] = update("grow", "SET a = :s, b = :s", {":s": {"S": "q" * BIG}})
    seen["... leaves the item too"] = stored("grow")
    # 3. Values DynamoDB rejects.
    client.put_item(TableName=TABLE, Item={"pk": {"S": "values"}, "n": {"N": "1"}})
    seen["SET a non-number"] = update("values", "SET n = :v", {":v": {"N": "not-a-number"}})
    seen["ADD a non-number"] = update("values", "ADD n :v", {":v": {"N": "1e"}})
    seen["a number set with a non-number"] = update("values", "SET ns = :v", {":v": {"NS": ["1", "x"]}})
    seen["put an empty set in a list"] = answer(
        client.put_item, TableName=TABLE, Item={"pk": {"S": "with-list"}, "l": {"L": [{"SS": []}]}}
    )
    seen["put a set with duplicates"] = answer(
        client.put_item, TableName=TABLE, Item={"pk": {"S": "with-set"}, "ss": {"SS": ["a", "a"]}}
    )
    seen["... the item keeps its number"] = stored("values")
    return seen


NOT_A_NUMBER = "A value provided cannot be converted into a number"
DYNAMODB = {
    "replace a big attribute": "OK",
    "item of 400 KB": "OK",
    "item of 400 KB + 1 byte": "ValidationException: Item size has exceeded the maximum allowed size",
    "update failing on its 2nd action": "ValidationException: An operand in the update expression has an incorrect data type",
    "... leaves the item": {"pk": {"S": "typed"}, "s": {"S": "text"}},
    "update of a missing item failing": "ValidationException: Item size to update has exceeded the maximum allowed size",
    "... creates nothing": None,
    "update growing past 400 KB": "ValidationException: Item size to update has exceeded the maximum allowed size",
    "... leaves the item too": {"pk": {"S": "grow"}},
    "SET a non-number": f"ValidationException: ExpressionAttributeValues contains invalid value: {NOT_A_NUMBER} for key :v",
    "ADD a non-number": f"ValidationException: ExpressionAttributeValues contains invalid value: {NOT_A_NUMBER} for key :v",
    "a number set with a non-number": f"ValidationException: ExpressionAttributeValues contains invalid value: {NOT_A_NUMBER} for key :v",
    "put an empty set in a list": "ValidationException: One or more parameter values were invalid: An string set  may not be empty",
    "put a set with duplicates": "ValidationException: One or more parameter values were invalid: Input collection [a, a] contains duplicates",
    "... the item keeps its number": {"pk": {"S": "values"}, "n": {"N": "1"}},
}


def test_bare_moto_diverges_from_dynamodb():
    with bare_moto():
        seen = observe(boto3.client("dynamodb", region_name=REGION))
    assert seen["replace a big attribute"] == "ValidationException: Item size to update has exceeded the maximum allowed size"
    assert seen["item of 400 KB"] == "ValidationException: Item size has exceeded the maximum allowed size"
    assert seen["... leaves the item"] == {"pk": {"S": "typed"}, "s": {"S": "text"}, "a": {"N": "1"}}
    assert seen["... creates nothing"] == {"pk": {"S": "new"}, "a": {"S": "q" * BIG}}
    assert seen["... leaves the item too"] == {"pk": {"S": "grow"}, "a": {"S": "q" * BIG}}
    assert seen["SET a non-number"] == "OK"
    assert seen["ADD a non-number"] == "crashed: ValueError"
    assert seen["a number set with a non-number"] == "OK"
    assert seen["put an empty set in a list"] == "OK"
    assert seen["put a set with duplicates"] == "OK"
    assert seen["... the item keeps its number"]["n"] == {"N": "not-a-number"}
    assert seen["... the item keeps its number"]["ns"] == {"NS": ["1", "x"]}


@pytest.mark.parametrize("local_cloud", ["moto", "dynamodb-local"], indirect=True)
def test_runtime_answers_like_dynamodb(local_cloud):
    assert observe(local_cloud.dynamodb) == DYNAMODB


@pytest.mark.parametrize(
    ("number", "size"),
    [("0", 1), ("1", 2), ("-1", 3), ("10", 2), ("12345", 4), ("-12345", 5), ("123.4", 4), ("99.99", 3),
     ("0.01", 2), ("-100.5", 5), ("1E-130", 2), ("1" * 38, 20)],
)
def test_number_sizes_are_dynamodb_locals(number, size):
    """Sizes measured on DynamoDB Local (the largest string that still fits beside the number)."""
    assert number_size(number) == size
