"""Fix ``patches/heartbeat_timeout``: a stopped heartbeat fails with States.HeartbeatTimeout."""

from __future__ import annotations

import boto3
import pytest

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.patches import jsonata_evaluator
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end


def _silent(catch: str) -> dict:
    """A callback task nobody answers, heartbeat 1 s; its error is caught by ``catch``."""
    return {
        "QueryLanguage": "JSONata",
        "StartAt": "Wait for a worker",
        "States": {
            "Wait for a worker": {
                "Type": "Task", "Resource": "arn:aws:states:::aws-sdk:sfn:listActivities.waitForTaskToken",
                "Arguments": {}, "HeartbeatSeconds": 1, "TimeoutSeconds": 30,
                "Catch": [{"ErrorEquals": [catch], "Output": "{% $states.errorOutput %}", "Next": "Caught"}],
                "End": True,
            },
            "Caught": {"Type": "Pass", "End": True},
        },
    }


def _error_of(output: str) -> str:
    import json

    return json.loads(output)["Error"]


def test_bare_moto_names_a_heartbeat_timeout_states_timeout():
    with bare_moto(jsonata_evaluator.apply):  # (JSONata: a prerequisite, not the gap)
        sfn = boto3.client("stepfunctions", region_name=REGION)
        arn = sfn.start_execution(stateMachineArn=create_state_machine(_silent("States.ALL")), name="x")["executionArn"]
        assert _error_of(wait_for_end(arn)["output"]) == "States.Timeout"


@pytest.mark.parametrize("catch", ["States.HeartbeatTimeout", "States.Timeout", "States.ALL"])
def test_a_heartbeat_timeout_is_states_heartbeat_timeout_and_states_timeout_still_catches_it(catch):
    with LocalCloud() as cloud:
        result = cloud.wait_for(cloud.start_execution(create_state_machine(_silent(catch)), {}), timeout=20)
        assert result.status == "SUCCEEDED"
        assert result.output["Error"] == "States.HeartbeatTimeout"
        timed_out = [e for e in result.history if e["type"] == "TaskTimedOut"]
        assert timed_out[0]["taskTimedOutEventDetails"]["error"] == "States.HeartbeatTimeout"


def test_a_task_timeout_is_still_states_timeout():
    definition = _silent("States.ALL")
    definition["States"]["Wait for a worker"].pop("HeartbeatSeconds")
    definition["States"]["Wait for a worker"]["TimeoutSeconds"] = 1
    with LocalCloud() as cloud:
        result = cloud.wait_for(cloud.start_execution(create_state_machine(definition), {}), timeout=20)
        assert result.output["Error"] == "States.Timeout"
