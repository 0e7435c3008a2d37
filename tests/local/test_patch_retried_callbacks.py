"""Fix ``patches/retried_callbacks``: a callback task's retried attempt waits on its own token, and
the failed attempt's token is closed.

Seen by the fault matrix (``fair:Lock.Park`` x ``lost``): a park's first attempt wrote its row
(token T1) and its response was lost; a releaser took the row and woke T1 while the park's
``Retry`` waited; the retry wrote the row again (T2) and ended at once with T1's wake-up as its
output, so the re-created row stayed parked after the waiter was served. On Step Functions each
attempt of a ``.waitForTaskToken`` task is a task of its own (TaskScheduled, TaskStarted, then
TaskFailed or TaskSucceeded), and a token whose task has closed is refused: ``TaskTimedOut`` or
``TaskDoesNotExist``
(https://docs.aws.amazon.com/step-functions/latest/apireference/API_SendTaskSuccess.html#API_SendTaskSuccess_Errors).
Bare moto makes the token once per state: the retry hands out the same token, and the failed
attempt's callback ends the retry."""

from __future__ import annotations

import json

import boto3
import pytest

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.faults import Fault, dynamodb_faults
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end, wait_until

#: A callback task that writes its token; a 5xx is retried after 2 s.
PARKS_WITH_RETRY = {
    "StartAt": "Park",
    "States": {
        "Park": {
            "Type": "Task", "Resource": "arn:aws:states:::aws-sdk:dynamodb:putItem.waitForTaskToken",
            "Parameters": {"TableName": "tokens", "Item": {"pk": {"S": "t"}, "token": {"S.$": "$$.Task.Token"}}},
            "TimeoutSeconds": 30,
            "Retry": [{"ErrorEquals": ["DynamoDb.InternalServerErrorException", "DynamoDb.InternalServerError"],
                       "IntervalSeconds": 2, "MaxAttempts": 1}],
            "End": True,
        },
    },
}


def _table(dynamodb) -> None:
    dynamodb.create_table(TableName="tokens", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                          AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                          BillingMode="PAY_PER_REQUEST")


def _stored_token(dynamodb) -> str | None:
    return dynamodb.get_item(TableName="tokens", Key={"pk": {"S": "t"}}).get("Item", {}).get("token", {}).get("S")


def _answer(call) -> Exception | None:  # type: ignore[no-untyped-def]
    try:
        call()
    except Exception as error:  # noqa: BLE001 - the API's answer is the point
        return error
    return None


def _wake_the_failed_attempt(sfn, dynamodb, history) -> tuple[str, Exception | None]:
    """Wait until the first attempt wrote its token and failed (its response lost), then send
    that token a success while the retry waits: (the token, the API's error if any)."""
    first = wait_until(lambda: _stored_token(dynamodb))
    assert wait_until(lambda: any(e["type"] == "TaskFailed" for e in history()), timeout=20)
    return first, _answer(lambda: sfn.send_task_success(taskToken=first, output=json.dumps({"from": "first"})))


def _lost_put() -> Fault:
    return Fault("PutItem", "InternalServerError", after_call=True,
                 when=lambda params: params.get("TableName") == "tokens")


def test_bare_moto_wakes_the_retry_with_the_failed_attempts_callback():
    with bare_moto():
        sfn, dynamodb = boto3.client("stepfunctions", region_name=REGION), boto3.client("dynamodb", region_name=REGION)
        _table(dynamodb)
        with dynamodb_faults(_lost_put()):
            arn = sfn.start_execution(stateMachineArn=create_state_machine(PARKS_WITH_RETRY), name="x")["executionArn"]
            first, refused = _wake_the_failed_attempt(
                sfn, dynamodb, lambda: sfn.get_execution_history(executionArn=arn)["events"])
            ended = wait_for_end(arn)
        retried_with = _stored_token(dynamodb)
    assert refused is None  # the sender believes it woke a task that had failed
    assert retried_with == first  # the retry handed out the same token
    assert ended["status"] == "SUCCEEDED" and json.loads(ended["output"]) == {"from": "first"}, ended


@pytest.mark.parametrize("backend", ["moto", "dynamodb-local"])
def test_the_token_of_a_failed_attempt_is_refused_and_the_retry_waits_on_its_own(backend):
    from locked_workflow.testing.pytest_plugin import require_backend

    require_backend(backend)
    with LocalCloud(backend) as cloud:
        _table(cloud.dynamodb)
        with dynamodb_faults(_lost_put()):
            arn = cloud.start_execution(create_state_machine(PARKS_WITH_RETRY), {})
            first, refused = _wake_the_failed_attempt(cloud.stepfunctions, cloud.dynamodb, lambda: cloud.history(arn))
            second = wait_until(lambda: _stored_token(cloud.dynamodb) != first and _stored_token(cloud.dynamodb),
                                timeout=20)
            late = [_answer(lambda: cloud.stepfunctions.send_task_heartbeat(taskToken=first)),
                    _answer(lambda: cloud.stepfunctions.send_task_failure(taskToken=first, error="Late"))]
            if cloud.status(arn) == "RUNNING":
                cloud.stepfunctions.send_task_success(taskToken=second, output=json.dumps({"from": "second"}))
            result = cloud.wait_for(arn, timeout=30)
        for error in [refused, *late]:
            assert error is not None and ("TaskTimedOut" in str(error) or "TaskDoesNotExist" in str(error)), error
        assert result.status == "SUCCEEDED" and result.output == {"from": "second"}, result.output
