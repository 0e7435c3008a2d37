"""Fix ``patches/history_limit``: a Standard execution fails when its history reaches 25,000 events."""

from __future__ import annotations

import json
from unittest import mock

import boto3
import pytest

from locked_workflow.testing import LocalCloud
from moto.stepfunctions.parser.asl.eval.event.event_manager import EventIdGenerator
from local_helpers import REGION, ROLE_ARN, bare_moto, create_state_machine, wait_for_end

#: Counts to ``$.n`` (10 loops of Inc and Check: 40 events, 44 in all), or forever without it.
LOOP = {
    "StartAt": "Inc",
    "States": {
        "Inc": {"Type": "Pass", "Parameters": {"i.$": "States.MathAdd($.i, 1)", "n.$": "$.n"}, "Next": "Check"},
        "Check": {"Type": "Choice", "Choices": [{"Variable": "$.i", "NumericLessThanPath": "$.n", "Next": "Inc"}],
                  "Default": "Done"},
        "Done": {"Type": "Succeed"},
    },
}


def _passes(count: int) -> dict:
    """``count`` Pass states in a row: 2 + 2 * count events."""
    names = [f"P{i}" for i in range(count)]
    states = {name: {"Type": "Pass", "Next": after} for name, after in zip(names, names[1:] + [None])}
    states[names[-1]] = {"Type": "Pass", "End": True}
    return {"StartAt": names[0], "States": states}


def _near_the_limit():  # type: ignore[no-untyped-def]
    """Number every execution's events from 24,990: its 11th event is number 25,000."""

    def start_late(self):  # type: ignore[no-untyped-def]
        self._next_id = 24_990

    return mock.patch.object(EventIdGenerator, "__init__", start_late)


def _last_event_id(arn: str) -> int:
    sfn = boto3.client("stepfunctions", region_name=REGION)
    return max(event["id"] for event in sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"])


def test_bare_moto_has_no_history_limit():
    with bare_moto(), _near_the_limit():
        sfn = boto3.client("stepfunctions", region_name=REGION)
        arn = sfn.start_execution(stateMachineArn=create_state_machine(LOOP), name="x",
                                  input=json.dumps({"i": 0, "n": 10}))["executionArn"]
        assert wait_for_end(arn)["status"] == "SUCCEEDED"
        assert _last_event_id(arn) > 25_000


def test_the_execution_fails_at_event_25000():
    with LocalCloud() as cloud, _near_the_limit():
        result = cloud.wait_for(cloud.start_execution(create_state_machine(LOOP), {"i": 0, "n": 10}))
    assert (result.status, result.error) == ("FAILED", "States.Runtime")
    assert result.cause == "The execution reached the maximum number of history events (25000)."
    last = result.history[-1]
    assert (last["id"], last["type"]) == (25_000, "ExecutionFailed")
    assert [event["id"] for event in result.history] == list(range(24_990, 25_001))


def test_a_small_limit_fails_a_loop_and_the_execution_cannot_be_redriven():
    with LocalCloud(history_event_limit=20) as cloud:
        forever = create_state_machine({**LOOP, "States": {**LOOP["States"], "Done": {"Type": "Pass", "Next": "Inc"}}})
        arn = cloud.start_execution(forever, {"i": 0, "n": 1})
        result = cloud.wait_for(arn, timeout=30)
        with pytest.raises(cloud.stepfunctions.exceptions.ClientError, match="ExecutionNotRedrivable"):
            cloud.stepfunctions.redrive_execution(executionArn=arn)
    assert (result.status, result.error) == ("FAILED", "States.Runtime")
    assert result.cause == "The execution reached the maximum number of history events (20)."
    assert [event["id"] for event in result.history] == list(range(1, 21))
    assert result.history[-1]["type"] == "ExecutionFailed"


@pytest.mark.parametrize(("passes", "status"), [(9, "SUCCEEDED"), (10, "FAILED")])
def test_event_number_limit_may_be_execution_succeeded(passes, status):
    """9 Pass states: event 20 is ExecutionSucceeded. 10: event 20 would be a state's."""
    with LocalCloud(history_event_limit=20) as cloud:
        result = cloud.wait_for(cloud.start_execution(create_state_machine(_passes(passes)), {}))
    assert result.status == status, result.cause
    assert len(result.history) == 20


def test_express_executions_have_no_history_limit():
    with LocalCloud(history_event_limit=20) as cloud:
        machine = cloud.stepfunctions.create_state_machine(
            name="express", definition=json.dumps(_passes(10)), roleArn=ROLE_ARN, type="EXPRESS"
        )["stateMachineArn"]
        result = cloud.wait_for(cloud.start_execution(machine, {}))
    assert result.status == "SUCCEEDED", result.cause


@pytest.mark.parametrize("limit", [2, 0, 20.0, True])
def test_a_limit_too_small_to_hold_an_execution_is_refused(limit):
    with pytest.raises(ValueError, match="history_event_limit must be an integer of at least 3"):
        LocalCloud(history_event_limit=limit)
