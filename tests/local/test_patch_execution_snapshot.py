"""Fix ``patches/execution_snapshot``: a state machine runs more than one execution."""

from __future__ import annotations

import boto3
import pytest

from locked_workflow.testing import LocalCloud
from local_helpers import REGION, bare_moto, create_state_machine, gap_fixed_upstream

WAIT = {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 1, "End": True}}}


def test_bare_moto_cannot_start_a_second_execution():
    gap_fixed_upstream((5, 2, 3), "StartExecution's copy of the state machine leaves its executions out")
    with bare_moto():
        machine = create_state_machine(WAIT)
        sfn = boto3.client("stepfunctions", region_name=REGION)
        sfn.start_execution(stateMachineArn=machine, name="first")
        with pytest.raises(TypeError, match="pickle"):
            sfn.start_execution(stateMachineArn=machine, name="second")


def test_runtime_runs_many_executions_of_one_state_machine():
    with LocalCloud() as cloud:
        machine = create_state_machine(WAIT)
        arns = [cloud.start_execution(machine, {"n": n}) for n in range(5)]
        results = cloud.wait_all(arns, timeout=20)
    assert [r.status for r in results] == ["SUCCEEDED"] * 5
    assert [r.output for r in results] == [{"n": n} for n in range(5)]
