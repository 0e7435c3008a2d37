"""Fix ``patches/late_callbacks``: a callback for a task that timed out fails and changes nothing.

The fair lock's releaser wakes its successor with the token it took from the successor's row;
if that park has just timed out, Step Functions answers ``TaskTimedOut`` and the releaser takes
its failed-wake path. Bare moto answers success (the releaser believes the waiter woken); when the task's own wait
is still running (its call took most of the timeout), it even appends the late
``TaskSucceeded`` to the history of an execution that has moved on."""

from __future__ import annotations

import time

import boto3
import pytest

from locked_workflow.testing import LocalCloud
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end, wait_until

#: A callback task that writes its token, times out after 1 s, then waits 4 s elsewhere.
PARKS_THEN_MOVES_ON = {
    "StartAt": "Park",
    "States": {
        "Park": {
            "Type": "Task", "Resource": "arn:aws:states:::aws-sdk:dynamodb:putItem.waitForTaskToken",
            "Parameters": {"TableName": "tokens", "Item": {"pk": {"S": "t"}, "token": {"S.$": "$$.Task.Token"}}},
            "TimeoutSeconds": 1,
            "Catch": [{"ErrorEquals": ["States.Timeout"], "Next": "Elsewhere"}],
            "End": True,
        },
        "Elsewhere": {"Type": "Wait", "Seconds": 4, "End": True},
    },
}


def _table(dynamodb) -> None:
    dynamodb.create_table(TableName="tokens", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                          AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                          BillingMode="PAY_PER_REQUEST")


def _late_success(sfn, dynamodb, history) -> Exception | None:
    """Wait until the park timed out, then send its token a success; the error, if any."""
    token = wait_until(lambda: dynamodb.get_item(TableName="tokens", Key={"pk": {"S": "t"}}).get("Item"))["token"]["S"]
    assert wait_until(lambda: any(e["type"] == "TaskTimedOut" for e in history()), timeout=20)
    time.sleep(0.2)
    try:
        sfn.send_task_success(taskToken=token, output="{}")
    except Exception as error:  # noqa: BLE001 - the API's answer is the point
        return error
    return None


def _succeeded_after_timeout(events) -> bool:
    kinds = [e["type"] for e in events]
    return "TaskSucceeded" in kinds[kinds.index("TaskTimedOut"):]


def test_bare_moto_accepts_a_late_callback():
    with bare_moto():
        sfn, dynamodb = boto3.client("stepfunctions", region_name=REGION), boto3.client("dynamodb", region_name=REGION)
        _table(dynamodb)
        arn = sfn.start_execution(stateMachineArn=create_state_machine(PARKS_THEN_MOVES_ON), name="x")["executionArn"]
        history = lambda: sfn.get_execution_history(executionArn=arn)["events"]  # noqa: E731
        assert _late_success(sfn, dynamodb, history) is None  # the sender believes it woke the task
        wait_for_end(arn)


@pytest.mark.parametrize("backend", ["moto", "dynamodb-local"])
def test_a_late_callback_fails_with_task_timed_out_and_changes_nothing(backend):
    from locked_workflow.testing.pytest_plugin import require_backend

    require_backend(backend)
    with LocalCloud(backend) as cloud:
        _table(cloud.dynamodb)
        arn = cloud.start_execution(create_state_machine(PARKS_THEN_MOVES_ON), {})
        error = _late_success(cloud.stepfunctions, cloud.dynamodb, lambda: cloud.history(arn))
        assert error is not None and "TaskTimedOut" in str(error), error
        result = cloud.wait_for(arn, timeout=30)
        assert result.status == "SUCCEEDED"
        assert not _succeeded_after_timeout(result.history)
