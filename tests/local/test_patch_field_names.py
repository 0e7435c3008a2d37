"""Fix ``patches/field_names``: a JSONata error's cause names the field, not a moto class."""

from __future__ import annotations

import boto3

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.patches import jsonata_evaluator, task_argument_errors
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end

#: A bad key fails inside the task's Arguments; a bad value inside a Pass state's Assign.
DEFINITION = {
    "QueryLanguage": "JSONata",
    "StartAt": "Check",
    "States": {
        "Check": {
            "Type": "Choice",
            "Choices": [{"Condition": "{% $exists($states.input.assign) %}", "Next": "Remember"}],
            "Default": "Put",
        },
        "Remember": {"Type": "Pass", "Assign": {"x": "{% $error('Bad.Value: nope') %}"}, "End": True},
        "Put": {
            "Type": "Task",
            "Resource": "arn:aws:states:::dynamodb:putItem",
            "Arguments": {
                "TableName": "locks",
                "Item": {"pk": {"S": "{% $error('Lock.InvalidKey: the lock key is missing') %}"}},
            },
            "End": True,
        },
    },
}


def run(sfn, machine: str, document: str) -> dict:
    arn = sfn.start_execution(stateMachineArn=machine, input=document)["executionArn"]
    return wait_for_end(arn)


def test_bare_moto_names_an_internal_class_as_the_field():
    with bare_moto(jsonata_evaluator.apply, task_argument_errors.apply):
        sfn = boto3.client("stepfunctions", region_name=REGION)
        result = run(sfn, create_state_machine(DEFINITION), "{}")
    assert "specified for the field 'JSONataTemplateValueTerminalStringJSONata'" in result["cause"]


def test_runtime_names_the_state_field():
    with LocalCloud() as cloud:
        machine = create_state_machine(DEFINITION)
        arguments = run(cloud.stepfunctions, machine, "{}")
        assign = run(cloud.stepfunctions, machine, '{"assign": true}')
    assert arguments["error"] == "States.QueryEvaluationError"
    assert "specified for the field 'Arguments'" in arguments["cause"]
    assert "Lock.InvalidKey: the lock key is missing" in arguments["cause"]
    assert "TemplateValue" not in arguments["cause"]
    assert "specified for the field 'Assign'" in assign["cause"], assign["cause"]
