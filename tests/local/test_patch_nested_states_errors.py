"""Fix ``patches/nested_states_errors``: Parallel/Map re-raise a branch's States.* error."""

from __future__ import annotations

import boto3

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.patches import jsonata_evaluator
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end

#: The branch fails with States.QueryEvaluationError ($error in JSONata).
FAILING_BRANCH = {
    "StartAt": "Boom",
    "States": {"Boom": {"Type": "Pass", "Output": "{% $error('boom') %}", "End": True}},
}
CATCH = [
    {
        "ErrorEquals": ["States.QueryEvaluationError"],
        "Output": "{% {'caught': $states.errorOutput.Error} %}",
        "Next": "Caught",
    }
]
PARALLEL = {
    "QueryLanguage": "JSONata",
    "StartAt": "Protected",
    "States": {
        "Protected": {"Type": "Parallel", "Branches": [FAILING_BRANCH], "Catch": CATCH, "End": True},
        "Caught": {"Type": "Pass", "End": True},
    },
}
MAP = {
    "QueryLanguage": "JSONata",
    "StartAt": "Each",
    "States": {
        "Each": {
            "Type": "Map",
            "Items": "{% [1, 2] %}",
            "ItemProcessor": FAILING_BRANCH,
            "Catch": CATCH,
            "End": True,
        },
        "Caught": {"Type": "Pass", "End": True},
    },
}


def test_bare_moto_turns_a_branch_states_error_into_states_runtime():
    with bare_moto(jsonata_evaluator.apply):  # prerequisite: JSONata at all
        sfn = boto3.client("stepfunctions", region_name=REGION)
        arn = sfn.start_execution(stateMachineArn=create_state_machine(PARALLEL), name="only")["executionArn"]
        result = wait_for_end(arn)
    assert result["status"] == "FAILED"
    assert result["error"] == "States.Runtime"
    assert "MUST NOT begin with the prefix 'States.'" in result["cause"]


def test_runtime_catches_the_branch_error_by_name():
    with LocalCloud() as cloud:
        parallel = cloud.wait_for(cloud.start_execution(create_state_machine(PARALLEL, "parallel"), {}))
        each = cloud.wait_for(cloud.start_execution(create_state_machine(MAP, "map"), {}))
    assert parallel.status == "SUCCEEDED", parallel.cause
    assert parallel.output == {"caught": "States.QueryEvaluationError"}
    assert each.status == "SUCCEEDED", each.cause
    assert each.output == {"caught": "States.QueryEvaluationError"}
