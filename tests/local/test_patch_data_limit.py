"""Fix ``patches/data_limit``: a state's input, a task's input and Assign are held to the 256 KiB quota."""

from __future__ import annotations

import json

import boto3
import pytest

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.patches import execution_snapshot, jsonata_evaluator
from locked_workflow.testing.patches.data_limit import MAX_BYTES, size
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end

TABLE = "items"
#: Half the quota and a bit: two of them are over it, one is not.
HALF = "h" * 140_000


def _machine(first: dict) -> dict:
    """``first`` (named First) then an end; every output stays small."""
    return {"QueryLanguage": "JSONata", "StartAt": "First",
            "States": {"First": dict(first, Next="Done"), "Done": {"Type": "Pass", "Output": "done", "End": True}}}


CASES = {
    # The Parallel's Arguments double its input: its branch's input is over the quota.
    "branch-input": {
        "Type": "Parallel", "Arguments": {"a": "{% $states.input.half %}", "b": "{% $states.input.half %}"},
        "Branches": [{"StartAt": "Small", "States": {"Small": {"Type": "Pass", "Output": "small", "End": True}}}],
        "Output": "small",
    },
    # A task's input (its Arguments) over the quota; the item is under DynamoDB's 400 KB.
    "task-input": {
        "Type": "Task", "Resource": "arn:aws:states:::dynamodb:putItem",
        "Arguments": {"TableName": TABLE, "Item": {"pk": {"S": "k"}, "a": {"S": "{% $states.input.half %}"},
                                                   "b": {"S": "{% $states.input.half %}"}}},
        "Output": "small",
    },
    # One variable over the quota.
    "variable": {"Type": "Pass", "Assign": {"v": "{% $states.input.half & $states.input.half %}"}, "Output": "small"},
    # Two variables under it, together over it.
    "assign": {"Type": "Pass", "Assign": {"a": "{% $states.input.half %}", "b": "{% $states.input.half %}"},
               "Output": "small"},
}


def _table(dynamodb) -> None:
    dynamodb.create_table(TableName=TABLE, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                          AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                          BillingMode="PAY_PER_REQUEST")


def test_bare_moto_lets_them_through():
    with bare_moto(execution_snapshot.apply, jsonata_evaluator.apply):  # (prerequisites, not the gap)
        sfn = boto3.client("stepfunctions", region_name=REGION)
        _table(boto3.client("dynamodb", region_name=REGION))
        for name, first in CASES.items():
            machine = create_state_machine(_machine(first), name)
            arn = sfn.start_execution(stateMachineArn=machine, name=name, input=json.dumps({"half": HALF}))["executionArn"]
            assert wait_for_end(arn)["status"] == "SUCCEEDED", name
        # An execution input over the quota, a first state that drops it.
        machine = create_state_machine(_machine({"Type": "Pass", "Output": "small"}), "input")
        arn = sfn.start_execution(stateMachineArn=machine, name="input", input=json.dumps({"x": HALF * 2}))["executionArn"]
        assert wait_for_end(arn)["status"] == "SUCCEEDED"


@pytest.mark.parametrize("case", sorted(CASES))
def test_over_the_quota_fails_with_data_limit_exceeded(case):
    with LocalCloud() as cloud:
        _table(cloud.dynamodb)
        result = cloud.wait_for(cloud.start_execution(create_state_machine(_machine(CASES[case])), {"half": HALF}))
        item = cloud.dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": "k"}}).get("Item")
    assert (result.status, result.error) == ("FAILED", "States.DataLimitExceeded"), result.cause
    assert "maximum number of bytes" in result.cause
    assert item is None  # the task never ran
    assert not any(event.get("stateExitedEventDetails", {}).get("assignedVariables") for event in result.history)


def test_an_execution_input_over_the_quota_fails_at_the_first_state():
    with LocalCloud() as cloud:
        machine = create_state_machine(_machine({"Type": "Pass", "Output": "small"}))
        result = cloud.wait_for(cloud.start_execution(machine, {"x": HALF * 2}))
    assert (result.status, result.error) == ("FAILED", "States.DataLimitExceeded"), result.cause
    assert [event["type"] for event in result.history] == ["ExecutionStarted", "ExecutionFailed"]


@pytest.mark.parametrize(("extra", "status"), [(0, "SUCCEEDED"), (1, "FAILED")])
def test_the_quota_is_262144_bytes_of_utf8_json(extra, status):
    """An output of exactly 262,144 bytes passes; one byte more fails. 'é' is two bytes."""
    half = "é" * 500 + "x" * 100_000
    pad = "p" * (MAX_BYTES - size({"v": half + half}) + extra)
    assert size({"v": half + half + pad}) == MAX_BYTES + extra
    grow = {"QueryLanguage": "JSONata", "StartAt": "Grow", "States": {
        "Grow": {"Type": "Pass", "Output": {"v": "{% $states.input.half & $states.input.half & $states.input.pad %}"},
                 "End": True}}}
    with LocalCloud() as cloud:
        result = cloud.wait_for(cloud.start_execution(create_state_machine(grow), {"half": half, "pad": pad}))
    assert result.status == status, result.cause
