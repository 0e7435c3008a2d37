"""Fix ``patches/task_failure_cause``: SendTaskFailure keeps its cause."""

from __future__ import annotations

import json

import boto3

from locked_workflow.testing import LocalCloud
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end, wait_until

#: A callback task that writes its token to the table, then waits for it.
WAITING = {
    "StartAt": "Wait",
    "States": {
        "Wait": {
            "Type": "Task", "Resource": "arn:aws:states:::aws-sdk:dynamodb:putItem.waitForTaskToken",
            "Parameters": {"TableName": "tokens", "Item": {"pk": {"S": "t"}, "token": {"S.$": "$$.Task.Token"}}},
            "TimeoutSeconds": 30,
            "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}],
            "End": True,
        },
        "Caught": {"Type": "Pass", "End": True},
    },
}


def _fail_the_waiting_task(dynamodb, sfn) -> None:
    item = wait_until(lambda: dynamodb.get_item(TableName="tokens", Key={"pk": {"S": "t"}}).get("Item"))
    sfn.send_task_failure(taskToken=item["token"]["S"], error="Worker.Gone", cause="bye")


def _table(dynamodb) -> None:
    dynamodb.create_table(TableName="tokens", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                          AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                          BillingMode="PAY_PER_REQUEST")


def test_bare_moto_drops_the_cause():
    with bare_moto():
        sfn, dynamodb = boto3.client("stepfunctions", region_name=REGION), boto3.client("dynamodb", region_name=REGION)
        _table(dynamodb)
        arn = sfn.start_execution(stateMachineArn=create_state_machine(WAITING), name="x")["executionArn"]
        _fail_the_waiting_task(dynamodb, sfn)
        assert json.loads(wait_for_end(arn)["output"]) == {"Error": "Worker.Gone", "Cause": None}


def test_the_cause_reaches_the_catch():
    with LocalCloud() as cloud:
        _table(cloud.dynamodb)
        arn = cloud.start_execution(create_state_machine(WAITING), {})
        _fail_the_waiting_task(cloud.dynamodb, cloud.stepfunctions)
        assert cloud.wait_for(arn, timeout=20).output == {"Error": "Worker.Gone", "Cause": "bye"}
