"""Fix ``patches/task_clients``: the interpreter's tasks reuse one client per service."""

from __future__ import annotations

import json
import uuid
from contextlib import contextmanager
from typing import Iterator
from unittest import mock

import boto3
import pytest
from moto.stepfunctions.parser.asl.utils import boto_client

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.patches import execution_output, execution_snapshot, task_clients
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end

TABLE = "items"
#: Two DynamoDB tasks: a write, then a read of what it wrote.
WRITE_THEN_READ = {  # JSONPath: bare moto has no JSONata evaluator
    "StartAt": "Write",
    "States": {
        "Write": {"Type": "Task", "Resource": "arn:aws:states:::dynamodb:putItem",
                  "Parameters": {"TableName": TABLE, "Item": {"pk": {"S.$": "$.key"}}},
                  "ResultPath": None, "Next": "Read"},
        "Read": {"Type": "Task", "Resource": "arn:aws:states:::dynamodb:getItem",
                 "Parameters": {"TableName": TABLE, "Key": {"pk": {"S.$": "$.key"}}, "ConsistentRead": True},
                 "OutputPath": "$.Item.pk.S", "End": True},
    },
}


@contextmanager
def counting_dynamodb_clients() -> Iterator[list[str]]:
    """The DynamoDB clients the interpreter creates (it names the service by keyword)."""
    created: list[str] = []
    original = boto3.client

    def client(*args, **kwargs):  # type: ignore[no-untyped-def]
        if kwargs.get("service_name") == "dynamodb":
            created.append(kwargs["region_name"])
        return original(*args, **kwargs)

    with mock.patch.object(boto_client.boto3, "client", client):
        yield created


def run_twice() -> list[str]:
    boto3.client("dynamodb", region_name=REGION).create_table(
        TableName=TABLE, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
    machine = create_state_machine(WRITE_THEN_READ)
    sfn = boto3.client("stepfunctions", region_name=REGION)
    outputs = []
    for key in ("a", "b"):
        arn = sfn.start_execution(stateMachineArn=machine, name=str(uuid.uuid4()),
                                  input=json.dumps({"key": key}))["executionArn"]
        end = wait_for_end(arn)
        assert end["status"] == "SUCCEEDED", end
        outputs.append(json.loads(end["output"]))
    return outputs


def test_bare_moto_creates_a_client_for_every_task():
    with bare_moto(execution_snapshot.apply, execution_output.apply), counting_dynamodb_clients() as created:
        assert run_twice() == ["a", "b"]
    assert len(created) == 4


def test_runtime_reuses_the_client_of_each_service():
    with LocalCloud(), counting_dynamodb_clients() as created:
        assert run_twice() == ["a", "b"]
    assert created == [REGION]


def test_every_interpreter_module_that_creates_clients_is_patched():
    import sys

    original = boto_client.boto_client_for
    with LocalCloud():
        left = [name for name, module in list(sys.modules.items()) if name.startswith("moto.stepfunctions.parser")
                and getattr(module, "boto_client_for", None) is original]
    assert left == []
    assert len(task_clients.users()) >= 10  # the service integrations, Lambda, the Map's S3 reader and writer


def test_a_client_per_region_service_and_endpoint(monkeypatch: pytest.MonkeyPatch):
    clients = task_clients.TaskClients(lambda region, service, credentials: object())
    first = clients.client("us-east-1", "dynamodb")
    assert clients.client("us-east-1", "dynamodb") is first
    assert clients.client("eu-west-1", "dynamodb") is not first
    assert clients.client("us-east-1", "sqs") is not first
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:1")
    assert clients.client("us-east-1", "dynamodb") is not first  # DynamoDB Local's endpoint: its own client
    assert clients.created == 4
