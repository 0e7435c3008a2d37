"""Fix ``patches/terminal_errors``: no Catch or Retry handles States.DataLimitExceeded or States.Runtime."""

from __future__ import annotations

import boto3
import pytest

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.patches import execution_snapshot, nested_states_errors
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end

TABLE, QUEUE = "big", "messages"
#: A string whose item is over the 256 KiB payload quota, and under DynamoDB's 400 KB item limit.
BIG = "x" * 300_000
INPUT = '{"items": [1]}'


def _catching(state: dict, errors: list[str], retry: bool = False) -> dict:
    """``state`` (named Risky) with a Catch on ``errors`` (and a Retry on States.ALL)."""
    state = dict(state, End=True)
    state["Catch"] = [{"ErrorEquals": errors, "ResultPath": "$.caught", "Next": "Caught"}]
    if retry:
        state["Retry"] = [{"ErrorEquals": ["States.ALL"], "IntervalSeconds": 1, "MaxAttempts": 2}]
    return {"StartAt": "Risky", "States": {"Risky": state, "Caught": {"Type": "Pass", "End": True}}}


#: A task result over the quota (a connector's output).
BIG_RESULT = {
    "Type": "Task", "Resource": "arn:aws:states:::dynamodb:getItem",
    "Parameters": {"TableName": TABLE, "Key": {"pk": {"S": "big"}}}, "ResultPath": None,
}
#: States.Runtime: the ResultSelector's path is not in the task's result.
RUNTIME_ERROR = {
    "Type": "Task", "Resource": "arn:aws:states:::sqs:sendMessage",
    "Parameters": {"QueueUrl": f"https://sqs.{REGION}.amazonaws.com/123456789012/{QUEUE}", "MessageBody": "m"},
    "ResultSelector": {"missing.$": "$.Missing"},
}
#: A Parallel whose branch's output is over the quota.
BIG_BRANCH = {
    "Type": "Parallel", "ResultPath": None,
    "Branches": [{"StartAt": "Big", "States": {"Big": {"Type": "Pass", "Result": BIG, "End": True}}}],
}
#: A Map whose iteration's output is over the quota.
BIG_ITERATION = {
    "Type": "Map", "ItemsPath": "$.items", "ResultPath": None,
    "ItemProcessor": {"StartAt": "Big", "States": {"Big": {"Type": "Pass", "Result": BIG, "End": True}}},
}
#: A branch failing with an error of its own: States.ALL catches it.
CUSTOM_ERROR = {
    "Type": "Parallel",
    "Branches": [{"StartAt": "Boom", "States": {"Boom": {"Type": "Fail", "Error": "Custom.Boom", "Cause": "c"}}}],
}


def _resources(dynamodb, sqs) -> None:
    sqs.create_queue(QueueName=QUEUE)
    dynamodb.create_table(TableName=TABLE, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                          AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                          BillingMode="PAY_PER_REQUEST")
    dynamodb.put_item(TableName=TABLE, Item={"pk": {"S": "big"}, "v": {"S": BIG}})
    dynamodb.put_item(TableName=TABLE, Item={"pk": {"S": "small"}, "v": {"S": "y"}})


def test_bare_moto_lets_states_all_catch_them():
    with bare_moto(execution_snapshot.apply, nested_states_errors.apply):  # (prerequisites, not the gap)
        sfn = boto3.client("stepfunctions", region_name=REGION)
        _resources(boto3.client("dynamodb", region_name=REGION), boto3.client("sqs", region_name=REGION))
        cases = (("result", BIG_RESULT), ("runtime", RUNTIME_ERROR), ("branch", BIG_BRANCH), ("iteration", BIG_ITERATION))
        for name, state in cases:
            machine = create_state_machine(_catching(state, ["States.ALL"]), name)
            arn = sfn.start_execution(stateMachineArn=machine, name=name, input=INPUT)["executionArn"]
            result = wait_for_end(arn)
            assert result["status"] == "SUCCEEDED", (name, result)
            assert '"caught"' in result["output"], name


@pytest.mark.parametrize(
    ("state", "error"),
    [(BIG_RESULT, "States.DataLimitExceeded"), (RUNTIME_ERROR, "States.Runtime"),
     (BIG_BRANCH, "States.DataLimitExceeded"), (BIG_ITERATION, "States.DataLimitExceeded")],
    ids=["task-result", "runtime-error", "parallel-branch", "map-iteration"],
)
@pytest.mark.parametrize("catch", ["States.ALL", "named"])
def test_no_catch_or_retry_handles_them_the_execution_fails(state, error, catch):
    errors = ["States.ALL"] if catch == "States.ALL" else [error, "States.TaskFailed"]
    with LocalCloud() as cloud:
        _resources(cloud.dynamodb, cloud.client("sqs"))
        result = cloud.wait_for(cloud.start_execution(create_state_machine(_catching(state, errors, retry=True)), INPUT))
    assert (result.status, result.error) == ("FAILED", error), result.cause
    entered = [event["stateEnteredEventDetails"]["name"] for event in result.history if "stateEnteredEventDetails" in event]
    assert "Caught" not in entered
    types = [event["type"] for event in result.history]
    started = ("TaskScheduled", "ParallelStateStarted", "MapStateStarted")
    assert sum(types.count(started_type) for started_type in started) == 1  # not retried


def test_states_all_still_catches_other_errors():
    with LocalCloud() as cloud:
        result = cloud.wait_for(cloud.start_execution(create_state_machine(_catching(CUSTOM_ERROR, ["States.ALL"])), {}))
    assert result.status == "SUCCEEDED", result.cause
    assert result.output["caught"]["Error"] == "Custom.Boom"
