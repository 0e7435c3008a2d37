"""Fix ``patches/redrive``: RedriveExecution continues an ended execution under its ARN."""

from __future__ import annotations

import time

import boto3
import pytest
from botocore.exceptions import ClientError

from constructs_lib.local import LocalCloud
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end

#: Prepare (a Pass) runs once; Work fails in the first run and succeeds once redriven.
FLAKY = {
    "QueryLanguage": "JSONata",
    "StartAt": "Prepare",
    "States": {
        "Prepare": {"Type": "Pass", "Assign": {"prepared": "{% $states.input.n %}"}, "Next": "Work"},
        "Work": {
            "Type": "Pass",
            "Output": "{% $states.context.Execution.RedriveCount = 0 ? $error('Work.Broken: first run') "
                      ": {'prepared': $prepared, 'redrives': $states.context.Execution.RedriveCount} %}",
            "End": True,
        },
    },
}
#: A Parallel whose Arguments read RedriveCount, then waits: stopped, then redriven.
WAITING = {
    "QueryLanguage": "JSONata",
    "StartAt": "Section",
    "States": {
        "Section": {
            "Type": "Parallel",
            "Arguments": "{% {'seenRedrives': $states.context.Execution.RedriveCount, 'in': $states.input} %}",
            "Branches": [{"StartAt": "Nap", "States": {"Nap": {"Type": "Wait", "Seconds": "{% $states.input.seenRedrives = 0 ? 30 : 0 %}", "End": True}}}],
            "End": True,
        }
    },
}


def test_bare_moto_cannot_redrive():
    with bare_moto():
        sfn = boto3.client("stepfunctions", region_name=REGION)
        arn = sfn.start_execution(stateMachineArn=create_state_machine({
            "StartAt": "F", "States": {"F": {"Type": "Fail", "Error": "E"}}}), name="x")["executionArn"]
        wait_for_end(arn)
        with pytest.raises(Exception):
            sfn.redrive_execution(executionArn=arn)


def test_a_failed_execution_continues_from_its_failed_state_with_its_variables():
    with LocalCloud() as cloud:
        arn = cloud.start_execution(create_state_machine(FLAKY), {"n": 7})
        first = cloud.wait_for(arn)
        assert first.status == "FAILED" and "Work.Broken: first run" in first.cause
        assert cloud.describe(arn)["redriveStatus"] == "REDRIVABLE"
        cloud.stepfunctions.redrive_execution(executionArn=arn)
        again = cloud.wait_for(arn)
        description = cloud.describe(arn)
    assert again.status == "SUCCEEDED" and again.output == {"prepared": 7, "redrives": 1}
    entered = [e["stateEnteredEventDetails"]["name"] for e in again.history if e["type"].endswith("StateEntered")]
    assert entered.count("Prepare") == 1  # the successful step is not run again
    assert entered.count("Work") == 2  # the failed one is
    types = [e["type"] for e in again.history]
    assert types.index("ExecutionRedriven") > types.index("ExecutionFailed")
    redriven = next(e for e in again.history if e["type"] == "ExecutionRedriven")
    assert redriven["executionRedrivenEventDetails"]["redriveCount"] == 1
    assert description["redriveCount"] == 1 and "redriveDate" in description
    assert description["redriveStatus"] == "NOT_REDRIVABLE"


def test_a_stopped_parallel_is_re_entered_and_its_arguments_evaluated_again():
    with LocalCloud() as cloud:
        arn = cloud.start_execution(create_state_machine(WAITING), {"k": 1})
        time.sleep(0.5)
        cloud.stop_execution(arn)
        assert cloud.wait_for(arn).status == "ABORTED"
        cloud.stepfunctions.redrive_execution(executionArn=arn)
        again = cloud.wait_for(arn, timeout=10)
        events = cloud.events.status_events
    assert again.status == "SUCCEEDED"
    assert again.output == [{"seenRedrives": 1, "in": {"k": 1}}]
    assert [e["status"] for e in events if e["executionArn"] == arn][-1] == "SUCCEEDED"
    assert [e["redriveCount"] for e in events if e["executionArn"] == arn][-1] == 1


def test_running_and_succeeded_executions_are_not_redrivable():
    with LocalCloud() as cloud:
        machine = create_state_machine(WAITING)
        running = cloud.start_execution(machine, {})
        time.sleep(0.2)
        with pytest.raises(ClientError, match="ExecutionNotRedrivable"):
            cloud.stepfunctions.redrive_execution(executionArn=running)
        cloud.stop_execution(running)
        done = cloud.start_execution(create_state_machine({
            "StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}, name="ok"), {})
        assert cloud.wait_for(done).status == "SUCCEEDED"
        with pytest.raises(ClientError, match="ExecutionNotRedrivable"):
            cloud.stepfunctions.redrive_execution(executionArn=done)
