"""Fix ``patches/unique_execution_names``: unnamed executions get unique ARNs."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.patches import execution_snapshot
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end

PASS = {"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}


def test_bare_moto_names_every_unnamed_execution_none():
    with bare_moto(execution_snapshot.apply):  # prerequisite: a second start at all
        machine = create_state_machine(PASS)
        sfn = boto3.client("stepfunctions", region_name=REGION)
        first = sfn.start_execution(stateMachineArn=machine)["executionArn"]
        wait_for_end(first)
        assert first.endswith(":None")
        with pytest.raises(ClientError, match="ExecutionAlreadyExists"):
            sfn.start_execution(stateMachineArn=machine)


def test_runtime_gives_unnamed_executions_unique_names():
    with LocalCloud() as cloud:
        machine = create_state_machine(PASS)
        arns = [cloud.stepfunctions.start_execution(stateMachineArn=machine)["executionArn"] for _ in range(3)]
        statuses = [cloud.wait_for(arn).status for arn in arns]
    assert len(set(arns)) == 3
    assert not any(arn.endswith(":None") for arn in arns)
    assert statuses == ["SUCCEEDED"] * 3


def test_runtime_names_executions_started_by_a_state_machine():
    with LocalCloud() as cloud:
        child = create_state_machine(PASS, name="child")
        parent = create_state_machine(
            {
                "StartAt": "Start",
                "States": {
                    "Start": {
                        "Type": "Task",
                        "Resource": "arn:aws:states:::states:startExecution",
                        "Parameters": {"StateMachineArn": child, "Input": {"from": "parent"}},
                        "End": True,
                    }
                },
            },
            name="parent",
        )
        runs = [cloud.wait_for(cloud.start_execution(parent, {})) for _ in range(2)]
        children = cloud.executions(child)
    assert [run.status for run in runs] == ["SUCCEEDED", "SUCCEEDED"]
    assert len({c["executionArn"] for c in children}) == 2
    assert not any(c["executionArn"].endswith(":None") for c in children)
