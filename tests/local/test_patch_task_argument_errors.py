"""Fix ``patches/task_argument_errors``: an Arguments error is not a DynamoDB error."""

from __future__ import annotations

import boto3

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.patches import jsonata_evaluator
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end

#: The key is validated inside the DynamoDB task's Arguments, before any call.
VALIDATED_PUT = {
    "QueryLanguage": "JSONata",
    "StartAt": "Put",
    "States": {
        "Put": {
            "Type": "Task",
            "Resource": "arn:aws:states:::dynamodb:putItem",
            "Arguments": {
                "TableName": "locks",
                "Item": {"pk": {"S": "{% $exists($states.input.key) ? $states.input.key : $error('Lock.InvalidKey: missing') %}"}},
            },
            "End": True,
        }
    },
}


def run(sfn, machine: str) -> dict:
    arn = sfn.start_execution(stateMachineArn=machine, name="bad", input="{}")["executionArn"]
    return wait_for_end(arn)


def test_bare_moto_reports_an_arguments_error_as_a_dynamodb_error():
    with bare_moto(jsonata_evaluator.apply):  # prerequisite: JSONata at all
        result = run(boto3.client("stepfunctions", region_name=REGION), create_state_machine(VALIDATED_PUT))
    assert result["error"] == "DynamoDB.AmazonDynamoDBException"


def test_runtime_reports_the_query_evaluation_error():
    with LocalCloud() as cloud:
        result = run(cloud.stepfunctions, create_state_machine(VALIDATED_PUT))
        history = [event["type"] for event in cloud.history(result["executionArn"])]
    assert result["status"] == "FAILED"
    assert result["error"] == "States.QueryEvaluationError"
    assert "Lock.InvalidKey: missing" in result["cause"]
    assert "TaskScheduled" not in history
