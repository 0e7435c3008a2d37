"""Fix ``patches/task_tokens``: task tokens of AWS's size (about 700 characters, up to 2,048)."""

from __future__ import annotations

import json

import boto3
import pytest

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.patches.task_tokens import TaskTokenSpaceExhausted, TokenFactory
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end, wait_until

#: Two callback tasks at once (a Parallel): each writes its token to the table, then waits.
WAITING = {
    "StartAt": "Both",
    "States": {
        "Both": {
            "Type": "Parallel",
            "Branches": [
                {
                    "StartAt": "Wait",
                    "States": {
                        "Wait": {
                            "Type": "Task", "Resource": "arn:aws:states:::aws-sdk:dynamodb:putItem.waitForTaskToken",
                            "Parameters": {"TableName": "tokens",
                                           "Item": {"pk": {"S": name}, "token": {"S.$": "$$.Task.Token"}}},
                            "TimeoutSeconds": 30,
                            "End": True,
                        }
                    },
                }
                for name in ("a", "b")
            ],
            "End": True,
        }
    },
}


def _table(dynamodb) -> None:
    dynamodb.create_table(TableName="tokens", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                          AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                          BillingMode="PAY_PER_REQUEST")


def _tokens_then_answer(dynamodb, sfn) -> list[str]:
    """The two parked tasks' tokens (each answered with SendTaskSuccess once read)."""
    tokens = []
    for name in ("a", "b"):
        item = wait_until(lambda: dynamodb.get_item(TableName="tokens", Key={"pk": {"S": name}}).get("Item"))
        assert item, f"task {name} never parked"
        tokens.append(item["token"]["S"])
    for token in tokens:
        sfn.send_task_success(taskToken=token, output=json.dumps({"len": len(token)}))
    return tokens


def test_bare_moto_hands_out_36_character_tokens():
    with bare_moto():
        sfn, dynamodb = boto3.client("stepfunctions", region_name=REGION), boto3.client("dynamodb", region_name=REGION)
        _table(dynamodb)
        arn = sfn.start_execution(stateMachineArn=create_state_machine(WAITING), name="x")["executionArn"]
        tokens = _tokens_then_answer(dynamodb, sfn)
        assert wait_for_end(arn)["status"] == "SUCCEEDED"
    assert [len(token) for token in tokens] == [36, 36]


@pytest.mark.parametrize("length", [None, 2048, 1])
def test_tokens_are_aws_sized_unique_and_accepted_back(length):
    options = {} if length is None else {"task_token_length": length}
    with LocalCloud(**options) as cloud:
        _table(cloud.dynamodb)
        arn = cloud.start_execution(create_state_machine(WAITING), {})
        tokens = _tokens_then_answer(cloud.dynamodb, cloud.stepfunctions)
        result = cloud.wait_for(arn, timeout=30)
    expected = length or 700
    assert result.status == "SUCCEEDED", result.cause
    assert result.output == [{"len": expected}, {"len": expected}]
    assert len(set(tokens)) == 2
    assert all(set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") for token in tokens)


@pytest.mark.parametrize("length", [0, 2049, 700.0, True])
def test_a_length_outside_the_api_bounds_is_refused(length):
    with pytest.raises(ValueError, match="task_token_length must be an integer from 1 to 2048"):
        LocalCloud(task_token_length=length)


def test_short_tokens_never_repeat_they_run_out():
    factory = TokenFactory(1)
    assert len({factory() for _ in range(64)}) == 64
    with pytest.raises(TaskTokenSpaceExhausted, match="all 64 task tokens of 1 characters are taken"):
        factory()
