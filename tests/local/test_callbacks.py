"""What the fair lock needs of the runtime, on both DynamoDB backends: an aws-sdk DynamoDB call
with ``.waitForTaskToken`` (the write lands, the task waits for its token), SendTaskSuccess,
SendTaskFailure and SendTaskHeartbeat, a JSONata ``TimeoutSeconds``, and TransactWriteItems
with a ConditionCheck. Bare moto 5.2.1 already does these (no patch); the heartbeat timeout's
error name is ``patches/heartbeat_timeout``."""

from __future__ import annotations

import json

import pytest

from local_helpers import create_state_machine, wait_until

TABLE = "callbacks"


def _parked(extra: dict | None = None) -> dict:
    """Write my task token to the item ``me`` if item ``pred`` exists, then wait for it."""
    return {
        "QueryLanguage": "JSONata",
        "StartAt": "Park",
        "States": {
            "Park": {
                "Type": "Task", "Resource": "arn:aws:states:::aws-sdk:dynamodb:transactWriteItems.waitForTaskToken",
                "Arguments": {"TransactItems": [
                    {"ConditionCheck": {"TableName": TABLE, "Key": {"pk": {"S": "pred"}},
                                        "ConditionExpression": "attribute_exists(pk)"}},
                    {"Put": {"TableName": TABLE, "Item": {"pk": {"S": "{% $states.input.me %}"},
                                                          "token": {"S": "{% $states.context.Task.Token %}"}}}},
                ]},
                "TimeoutSeconds": "{% $states.input.timeoutS %}",
                **(extra or {}),
                "Catch": [{"ErrorEquals": ["States.ALL"], "Output": "{% {'caught': $states.errorOutput} %}",
                           "Next": "Caught"}],
                "End": True,
            },
            "Caught": {"Type": "Pass", "End": True},
        },
    }


@pytest.fixture(params=["moto", "dynamodb-local"])
def cloud(request, local_cloud_factory):
    cloud = local_cloud_factory(request.param)
    cloud.dynamodb.create_table(
        TableName=TABLE, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
    cloud.dynamodb.put_item(TableName=TABLE, Item={"pk": {"S": "pred"}})
    return cloud


def _token(cloud, me: str) -> str:
    item = wait_until(lambda: cloud.dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": me}}).get("Item"), timeout=10)
    assert item, "the parked task's write never landed"
    return item["token"]["S"]


def test_send_task_success_resumes_the_parked_task_with_its_output(cloud):
    arn = cloud.start_execution(create_state_machine(_parked()), {"me": "a", "timeoutS": 30})
    cloud.stepfunctions.send_task_success(taskToken=_token(cloud, "a"), output=json.dumps({"woken": True}))
    result = cloud.wait_for(arn, timeout=20)
    assert (result.status, result.output) == ("SUCCEEDED", {"woken": True})
    with pytest.raises(cloud.stepfunctions.exceptions.InvalidToken):  # a token is good once
        cloud.stepfunctions.send_task_success(taskToken=_token(cloud, "a"), output="{}")


def test_send_task_failure_fails_the_task_with_its_error_and_cause(cloud):
    arn = cloud.start_execution(create_state_machine(_parked()), {"me": "b", "timeoutS": 30})
    cloud.stepfunctions.send_task_failure(taskToken=_token(cloud, "b"), error="Worker.Gone", cause="bye")
    assert cloud.wait_for(arn, timeout=20).output == {"caught": {"Error": "Worker.Gone", "Cause": "bye"}}


def test_heartbeats_keep_a_task_alive_past_heartbeat_seconds(cloud):
    import time

    arn = cloud.start_execution(create_state_machine(_parked({"HeartbeatSeconds": 3})), {"me": "c", "timeoutS": 30})
    token = _token(cloud, "c")
    for _ in range(12):  # 6 s in all: twice HeartbeatSeconds (a late heartbeat has 2.5 s to spare)
        time.sleep(0.5)
        cloud.stepfunctions.send_task_heartbeat(taskToken=token)
    cloud.stepfunctions.send_task_success(taskToken=token, output="{}")
    assert cloud.wait_for(arn, timeout=20).output == {}


def test_a_jsonata_timeout_seconds_ends_the_wait(cloud):
    result = cloud.wait_for(cloud.start_execution(create_state_machine(_parked()), {"me": "d", "timeoutS": 1}), timeout=20)
    assert result.output["caught"]["Error"] == "States.Timeout"


def test_a_failed_condition_check_cancels_the_transaction_before_it_parks(cloud):
    cloud.dynamodb.delete_item(TableName=TABLE, Key={"pk": {"S": "pred"}})
    result = cloud.wait_for(cloud.start_execution(create_state_machine(_parked()), {"me": "e", "timeoutS": 30}), timeout=20)
    caught = result.output["caught"]
    assert caught["Error"] == "DynamoDb.TransactionCanceledException" and "ConditionalCheckFailed" in caught["Cause"]
    assert "Item" not in cloud.dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": "e"}})
