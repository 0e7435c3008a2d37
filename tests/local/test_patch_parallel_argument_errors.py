"""Fix ``patches/parallel_argument_errors``: a Parallel's Arguments error is caught by its Catch."""

from __future__ import annotations

import boto3

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.patches import jsonata_evaluator
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end

#: The Parallel's Arguments fail for an input without ``key``; its Catch turns that into a Pass.
CHECKED_PARALLEL = {
    "QueryLanguage": "JSONata",
    "StartAt": "Section",
    "States": {
        "Section": {
            "Type": "Parallel",
            "Arguments": "{% $exists($states.input.key) ? $states.input : $error('Lock.InvalidKey: missing') %}",
            "Branches": [{"StartAt": "Work", "States": {"Work": {"Type": "Pass", "End": True}}}],
            "Catch": [{"ErrorEquals": ["States.QueryEvaluationError"], "Next": "Caught",
                       "Output": "{% $states.errorOutput %}"}],
            "End": True,
        },
        "Caught": {"Type": "Pass", "End": True},
    },
}


def run(sfn, machine: str, document: str) -> dict:
    arn = sfn.start_execution(stateMachineArn=machine, name="run", input=document)["executionArn"]
    return wait_for_end(arn)


def test_bare_moto_lets_a_parallel_arguments_error_escape_its_catch():
    with bare_moto(jsonata_evaluator.apply):  # prerequisite: JSONata at all
        result = run(boto3.client("stepfunctions", region_name=REGION), create_state_machine(CHECKED_PARALLEL), "{}")
    assert result["status"] == "FAILED" and result["error"] == "States.QueryEvaluationError"


def test_runtime_catches_it_and_still_passes_good_arguments_to_the_branches():
    with LocalCloud() as cloud:
        machine = create_state_machine(CHECKED_PARALLEL)
        caught = run(cloud.stepfunctions, machine, "{}")
        fine = cloud.wait_for(cloud.start_execution(machine, {"key": "k"}))
    assert caught["status"] == "SUCCEEDED"
    assert "Lock.InvalidKey: missing" in caught["output"]
    assert fine.status == "SUCCEEDED" and fine.output == [{"key": "k"}]
