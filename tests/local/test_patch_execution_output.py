"""Fix ``patches/execution_output``: DescribeExecution's output is always JSON."""

from __future__ import annotations

import json

import boto3

from locked_workflow.testing import LocalCloud
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end

#: Ends with a bare JSON string.
STRING_OUTPUT = {"StartAt": "Pick", "States": {"Pick": {"Type": "Pass", "InputPath": "$.word", "End": True}}}


def test_bare_moto_describes_a_string_output_unencoded():
    with bare_moto():
        sfn = boto3.client("stepfunctions", region_name=REGION)
        arn = sfn.start_execution(
            stateMachineArn=create_state_machine(STRING_OUTPUT), name="only", input='{"word": "k"}'
        )["executionArn"]
        result = wait_for_end(arn)
    assert result["status"] == "SUCCEEDED"
    assert result["output"] == "k"  # not JSON


def test_runtime_describes_outputs_as_json():
    with LocalCloud() as cloud:
        machine = create_state_machine(STRING_OUTPUT)
        word = cloud.wait_for(cloud.start_execution(machine, {"word": "k"}))
        nothing = cloud.wait_for(cloud.start_execution(machine, {"word": None}))
        raw = cloud.describe(word.arn)["output"]
        raw_null = cloud.describe(nothing.arn).get("output")
    assert word.output == "k"
    assert json.loads(raw) == "k"
    assert nothing.status == "SUCCEEDED"
    assert raw_null == "null"
