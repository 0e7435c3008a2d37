"""Fix ``patches/direct_dynamodb``: DynamoDB tasks reach moto without emulating HTTP, and answer
exactly what they answered through botocore's whole path (results, errors, causes, faults)."""

from __future__ import annotations

import json
import re
import uuid
from contextlib import contextmanager
from typing import Any, Iterator
from unittest import mock

import boto3
from botocore.endpoint import Endpoint

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.faults import Fault, calling_state, dynamodb_faults
from locked_workflow.testing.patches import direct_dynamodb
from local_helpers import REGION, create_state_machine, wait_for_end

TABLE = "items"
_KEY = {"pk": {"S.$": "$.key"}}
_CAUGHT = [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.caught", "Next": "Get"}]
#: Every kind of answer a task gets: an item written and returned, a refused condition (caught),
#: a cancelled transaction (caught: its cause names the reasons), a read with its capacity, a Query.
CALLS = {  # JSONPath: the interpreter's two DynamoDB integrations, optimized and aws-sdk
    "StartAt": "Put",
    "States": {
        "Put": {"Type": "Task", "Resource": "arn:aws:states:::dynamodb:putItem",
                "Parameters": {"TableName": TABLE, "Item": {"pk": {"S.$": "$.key"}, "n": {"N": "1"}}},
                "ResultPath": "$.put", "Next": "Update"},
        "Update": {"Type": "Task", "Resource": "arn:aws:states:::dynamodb:updateItem",
                   "Parameters": {"TableName": TABLE, "Key": _KEY, "UpdateExpression": "ADD n :one",
                                  "ExpressionAttributeValues": {":one": {"N": "1"}}, "ReturnValues": "ALL_NEW",
                                  "ReturnConsumedCapacity": "TOTAL"},
                   "ResultPath": "$.update", "Next": "Refused"},
        "Refused": {"Type": "Task", "Resource": "arn:aws:states:::dynamodb:updateItem",
                    "Parameters": {"TableName": TABLE, "Key": _KEY, "UpdateExpression": "SET n = :one",
                                   "ConditionExpression": "attribute_not_exists(pk)",
                                   "ExpressionAttributeValues": {":one": {"N": "1"}}},
                    "ResultPath": "$.refused", "Catch": [{**_CAUGHT[0], "ResultPath": "$.refused", "Next": "Cancelled"}],
                    "Next": "Cancelled"},
        "Cancelled": {"Type": "Task", "Resource": "arn:aws:states:::aws-sdk:dynamodb:transactWriteItems",
                      "Parameters": {"TransactItems": [
                          {"ConditionCheck": {"TableName": TABLE, "Key": _KEY,
                                              "ConditionExpression": "attribute_not_exists(pk)"}},
                          {"Put": {"TableName": TABLE, "Item": {"pk": {"S": "other"}}}}]},
                      "ResultPath": "$.cancelled", "Catch": [{**_CAUGHT[0], "ResultPath": "$.cancelled"}],
                      "Next": "Get"},
        "Get": {"Type": "Task", "Resource": "arn:aws:states:::aws-sdk:dynamodb:getItem",
                "Parameters": {"TableName": TABLE, "Key": _KEY, "ConsistentRead": True,
                               "ReturnConsumedCapacity": "INDEXES"},
                "ResultPath": "$.get", "Next": "Query"},
        "Query": {"Type": "Task", "Resource": "arn:aws:states:::aws-sdk:dynamodb:query",
                  "Parameters": {"TableName": TABLE, "KeyConditionExpression": "pk = :k",
                                 "ExpressionAttributeValues": {":k": {"S.$": "$.key"}}},
                  "ResultPath": "$.query", "End": True},
    },
}


def _table() -> None:
    boto3.client("dynamodb", region_name=REGION).create_table(
        TableName=TABLE, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")


def _run(definition: dict[str, Any], key: str = "a") -> dict[str, Any]:
    arn = boto3.client("stepfunctions", region_name=REGION).start_execution(
        stateMachineArn=create_state_machine(definition, name=f"m-{uuid.uuid4().hex[:8]}"),
        name=str(uuid.uuid4()), input=json.dumps({"key": key}))["executionArn"]
    return wait_for_end(arn)


def _without_request_ids(text: str) -> str:
    return re.sub(r"Request ID: [^;,)]*", "Request ID: <id>", text)


@contextmanager
def http_requests_of_states() -> Iterator[list[str]]:
    """The HTTP requests (botocore's ``Endpoint.make_request``) that a state's call sent."""
    sent: list[str] = []
    original = Endpoint.make_request

    def make_request(self, operation_model, request_dict):  # type: ignore[no-untyped-def]
        if calling_state() is not None:
            sent.append(operation_model.name)
        return original(self, operation_model, request_dict)

    with mock.patch.object(Endpoint, "make_request", make_request):
        yield sent


@contextmanager
def whole_path() -> Iterator[None]:
    """The task clients take botocore's whole path again (the handler passes every call on)."""
    with mock.patch.object(direct_dynamodb.DirectCalls, "__call__", lambda self, *args, **kwargs: None):
        yield


def test_task_calls_send_no_http_request():
    with LocalCloud(), http_requests_of_states() as sent:
        _table()
        end = _run(CALLS)
    assert end["status"] == "SUCCEEDED", end
    assert sent == []


def test_without_the_fix_every_task_call_is_an_http_request():  # the negative control
    with LocalCloud(), whole_path(), http_requests_of_states() as sent:
        _table()
        end = _run(CALLS)
    assert end["status"] == "SUCCEEDED", end
    assert sent == ["PutItem", "UpdateItem", "UpdateItem", "TransactWriteItems", "GetItem", "Query"]


def _outcome() -> dict[str, Any]:
    _table()
    end = _run(CALLS)
    assert end["status"] == "SUCCEEDED", end
    return json.loads(_without_request_ids(end["output"]))


def test_the_answers_are_those_of_botocores_whole_path():
    with LocalCloud():
        direct = _outcome()
    with LocalCloud(), whole_path():
        whole = _outcome()
    assert direct == whole
    assert direct["update"]["Attributes"]["n"] == {"N": "2"}
    assert direct["update"]["ConsumedCapacity"] == {"TableName": TABLE, "CapacityUnits": 1.0}
    assert direct["refused"]["Error"] == "DynamoDB.ConditionalCheckFailedException"
    assert direct["cancelled"]["Error"] == "DynamoDb.TransactionCanceledException"
    assert "[ConditionalCheckFailed, None]" in direct["cancelled"]["Cause"]
    assert direct["get"]["Item"]["pk"] == {"S": "a"}
    assert direct["query"]["Count"] == 1


def test_faults_apply_to_the_direct_calls():
    lost = Fault("UpdateItem", "ProvisionedThroughputExceededException", after_call=True,
                 when=lambda params: params.get("UpdateExpression") == "ADD n :one")
    with LocalCloud(), dynamodb_faults(lost) as log:
        _table()
        end = _run(CALLS)
        stored = boto3.client("dynamodb", region_name=REGION).get_item(TableName=TABLE, Key={"pk": {"S": "a"}})
    assert end["status"] == "FAILED", end
    assert end["error"] == "DynamoDB.ProvisionedThroughputExceededException"
    assert log.injected == 1 and ("UpdateItem", "done, then ProvisionedThroughputExceededException") in log.calls
    assert stored["Item"]["n"] == {"N": "2"}  # the lost response's write was applied


def test_only_dynamodb_clients_answer_directly():
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    sqs = boto3.client("sqs", region_name=REGION)
    assert isinstance(direct_dynamodb.attach(dynamodb), direct_dynamodb.DirectCalls)
    assert direct_dynamodb.attach(sqs) is None
