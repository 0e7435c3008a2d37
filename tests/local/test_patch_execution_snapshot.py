"""Fix ``patches/execution_snapshot``: a state machine runs more than one execution."""

from __future__ import annotations

import boto3
import pytest

from locked_workflow.testing import LocalCloud
from local_helpers import REGION, bare_moto, create_state_machine, gap_fixed_upstream, wait_until

WAIT = {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 1, "End": True}}}
#: Long enough that the first execution is still waiting when the second one starts.
WAITING = {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 5, "End": True}}}


def test_bare_moto_cannot_start_a_second_execution():
    gap_fixed_upstream((5, 2, 3), "StartExecution's copy of the state machine leaves its executions out")
    with bare_moto():
        machine = create_state_machine(WAITING)
        sfn = boto3.client("stepfunctions", region_name=REGION)
        first = sfn.start_execution(stateMachineArn=machine, name="first")["executionArn"]
        # the first execution's worker is running (its environment, and its locks, exist): on a
        # loaded machine its thread may not have started yet when the second start comes
        assert wait_until(lambda: any(e["type"] == "WaitStateEntered" for e in
                                      sfn.get_execution_history(executionArn=first)["events"]), timeout=60)
        with pytest.raises(TypeError, match="pickle"):
            sfn.start_execution(stateMachineArn=machine, name="second")


def test_runtime_runs_many_executions_of_one_state_machine():
    with LocalCloud() as cloud:
        machine = create_state_machine(WAIT)
        arns = [cloud.start_execution(machine, {"n": n}) for n in range(5)]
        results = cloud.wait_all(arns, timeout=20)
    assert [r.status for r in results] == ["SUCCEEDED"] * 5
    assert [r.output for r in results] == [{"n": n} for n in range(5)]
