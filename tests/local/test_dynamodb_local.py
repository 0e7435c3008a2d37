"""The DynamoDB Local backend: discovery, clear errors, and routing of every DynamoDB call."""

from __future__ import annotations

import boto3
import pytest
from moto.dynamodb.models import dynamodb_backends

from constructs_lib.local import DynamoDBLocalUnavailable, LocalCloud
from constructs_lib.local.dynamodb_local import DynamoDBLocal, find_emulator_dir, unavailable_reason
from constructs_lib.local.pytest_plugin import require_backend
from local_helpers import create_state_machine

PUT = {
    "StartAt": "Put",
    "States": {
        "Put": {
            "Type": "Task",
            "Resource": "arn:aws:states:::dynamodb:putItem",
            "Parameters": {"TableName": "things", "Item": {"pk": {"S.$": "$.id"}}, "ConditionExpression": "attribute_not_exists(pk)"},
            "End": True,
        }
    },
}


def test_missing_jar_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("DYNAMODB_LOCAL_DIR", str(tmp_path))
    assert find_emulator_dir() is None
    assert "DYNAMODB_LOCAL_DIR" in unavailable_reason()
    with pytest.raises(DynamoDBLocalUnavailable, match="DynamoDBLocal.jar"):
        DynamoDBLocal().start()


def test_missing_backend_fails_on_ci_and_skips_elsewhere(monkeypatch, tmp_path):
    monkeypatch.setenv("DYNAMODB_LOCAL_DIR", str(tmp_path))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="required on CI"):
        require_backend("dynamodb-local")
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception):
        require_backend("dynamodb-local")
    require_backend("moto")  # never skipped


def test_every_dynamodb_client_goes_to_dynamodb_local():
    require_backend("dynamodb-local")
    with LocalCloud("dynamodb-local") as cloud:
        cloud.dynamodb.create_table(
            TableName="things",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        machine = create_state_machine(PUT)
        first = cloud.wait_for(cloud.start_execution(machine, {"id": "a"}))
        again = cloud.wait_for(cloud.start_execution(machine, {"id": "a"}))
        direct = boto3.client(  # the server's own view, through an unrelated client
            "dynamodb",
            endpoint_url=cloud.dynamodb_endpoint_url,
            region_name="eu-west-3",
            aws_access_key_id="x",
            aws_secret_access_key="y",
        )
        stored = direct.scan(TableName="things")["Items"]
        in_moto = "things" in dynamodb_backends[cloud.account_id][cloud.region].tables
    assert first.status == "SUCCEEDED", first.cause
    assert (again.status, again.error) == ("FAILED", "DynamoDB.ConditionalCheckFailedException")
    assert stored == [{"pk": {"S": "a"}}]  # -sharedDb: any credentials and region see it
    assert not in_moto
