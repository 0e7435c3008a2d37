"""Fix ``patches/state_machine_type``: Express workflows are created as Express."""

from __future__ import annotations

import json

import boto3

from locked_workflow.testing import LocalCloud
from local_helpers import REGION, ROLE_ARN, bare_moto, gap_fixed_upstream

PASS = json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}})


def create_express(client) -> str:
    return client.create_state_machine(name="fast", definition=PASS, roleArn=ROLE_ARN, type="EXPRESS")["stateMachineArn"]


def test_bare_moto_creates_every_state_machine_standard():
    gap_fixed_upstream((5, 2, 5), "CreateStateMachine keeps its type")
    with bare_moto():
        client = boto3.client("stepfunctions", region_name=REGION)
        assert client.describe_state_machine(stateMachineArn=create_express(client))["type"] == "STANDARD"


def test_runtime_keeps_the_requested_type():
    with LocalCloud() as cloud:
        arn = create_express(cloud.stepfunctions)
        described = cloud.stepfunctions.describe_state_machine(stateMachineArn=arn)["type"]
        result = cloud.wait_for(cloud.start_execution(arn, {"x": 1}))
    assert described == "EXPRESS"
    assert (result.status, result.output) == ("SUCCEEDED", {"x": 1})
