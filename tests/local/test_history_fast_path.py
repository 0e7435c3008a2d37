"""``LocalCloud.history`` (the harness's fast path) returns what the API returns.

The harness reads every execution's history without moto's response serializer
(:mod:`locked_workflow.testing.history_fast_path`). These executions cover the event types the
lock's state machines produce (Pass, Choice, Wait, Map, Parallel, the DynamoDB SDK integration
succeeding and failing into a Catch, a task token parked then failed, a Fail, a stop), in both
query languages; each history is compared with the API's, event for event.
"""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from locked_workflow.testing import LocalCloud, history_fast_path
from tests.local.local_helpers import wait_until

TABLE = "HistoryFastPath"
ROLE_ARN = "arn:aws:iam::123456789012:role/history-fast-path"


def _machine(cloud: LocalCloud, name: str, definition: dict) -> str:
    return cloud.stepfunctions.create_state_machine(
        name=name, definition=json.dumps(definition), roleArn=ROLE_ARN)["stateMachineArn"]


JSONATA = {
    "QueryLanguage": "JSONata", "StartAt": "Pass",
    "States": {
        "Pass": {"Type": "Pass", "Output": {"n": "{% $states.input.n %}"}, "Next": "Write"},
        "Write": {
            "Type": "Task", "Resource": "arn:aws:states:::aws-sdk:dynamodb:updateItem",
            "Arguments": {"TableName": TABLE, "Key": {"pk": {"S": "{% $string($states.input.n) %}"}},
                          "UpdateExpression": "SET n = :n", "ConditionExpression": "attribute_not_exists(pk)",
                          "ExpressionAttributeValues": {":n": {"N": "1"}}},
            "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Refused", "Output": "{% $states.errorOutput %}"}],
            "Next": "Each",
        },
        "Refused": {"Type": "Fail", "Error": "Refused", "Cause": "written before"},
        "Each": {
            "Type": "Map", "Items": "{% [1, 2, 3] %}", "Next": "Both",
            "ItemProcessor": {"ProcessorConfig": {"Mode": "INLINE"}, "StartAt": "Item",
                              "States": {"Item": {"Type": "Pass", "End": True}}},
        },
        "Both": {
            "Type": "Parallel", "Next": "Short",
            "Branches": [{"StartAt": "A", "States": {"A": {"Type": "Pass", "End": True}}},
                         {"StartAt": "B", "States": {"B": {"Type": "Wait", "Seconds": 0, "End": True}}}],
        },
        "Short": {"Type": "Wait", "Seconds": 0, "Next": "Which"},
        "Which": {"Type": "Choice", "Choices": [{"Condition": "{% $count($states.input) = 2 %}", "Next": "Done"}],
                  "Default": "Done"},
        "Done": {"Type": "Succeed"},
    },
}

JSONPATH_PARK = {
    "StartAt": "Park",
    "States": {
        "Park": {
            "Type": "Task", "Resource": "arn:aws:states:::aws-sdk:dynamodb:putItem.waitForTaskToken",
            "Parameters": {"TableName": TABLE, "Item": {"pk": {"S": "park"}, "token": {"S.$": "$$.Task.Token"}}},
            "ResultPath": "$.woken", "End": True,
        },
    },
}

JSONPATH_WAIT = {"StartAt": "Long", "States": {"Long": {"Type": "Wait", "Seconds": 300, "End": True}}}


@pytest.fixture(scope="module")
def histories():
    """Several ended executions (ARNs) in one cloud, and the cloud."""
    with LocalCloud() as cloud:
        cloud.dynamodb.create_table(
            TableName=TABLE, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
        flow = _machine(cloud, "Flow", JSONATA)
        park = _machine(cloud, "Park", JSONPATH_PARK)
        wait = _machine(cloud, "Wait", JSONPATH_WAIT)
        first = cloud.start_execution(flow, {"n": 1})
        cloud.wait_for(first, timeout=60)
        refused = cloud.start_execution(flow, {"n": 1})  # its write is refused: the Catch, the Fail
        parked = cloud.start_execution(park, {"big": "x" * 20_000})
        item = wait_until(lambda: cloud.dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": "park"}}).get("Item"), 30)
        cloud.stepfunctions.send_task_failure(taskToken=item["token"]["S"], error="Woken.Failed", cause="by the test")
        stopped = cloud.start_execution(wait)
        wait_until(lambda: len(cloud.api_history(stopped)) >= 3, 30)
        cloud.stop_execution(stopped, error="Stopped.ByTest", cause="stop")
        arns = [first, refused, parked, stopped]
        results = cloud.wait_all(arns, timeout=60)
        assert [r.status for r in results] == ["SUCCEEDED", "FAILED", "FAILED", "ABORTED"]
        yield cloud, arns


def test_every_history_equals_the_apis_event_for_event(histories):
    cloud, arns = histories
    types: set[str] = set()
    for arn in arns:
        fast, api = cloud.history(arn), cloud.api_history(arn)
        assert fast == api
        types |= {event["type"] for event in api}
    assert {"MapStateStarted", "ParallelStateStarted", "WaitStateEntered", "ChoiceStateEntered", "TaskFailed",
            "TaskSucceeded", "ExecutionAborted", "ExecutionFailed", "ExecutionSucceeded"} <= types


def test_the_comparison_sees_timestamps_written_without_their_milliseconds(histories, monkeypatch):
    """Negative control: a wire form that drops the milliseconds moto writes gives other events."""
    cloud, arns = histories
    exact = history_fast_path._epoch
    monkeypatch.setattr(history_fast_path, "_epoch", lambda value: int(exact(value)))
    assert cloud.history(arns[0]) != cloud.api_history(arns[0])


def test_an_unknown_execution_raises_the_clients_error(histories):
    cloud, arns = histories
    unknown = arns[0].rsplit(":", 1)[0] + ":no-such-execution"
    with pytest.raises(ClientError) as raised:
        cloud.history(unknown)
    assert raised.value.response["Error"]["Code"] == "ExecutionDoesNotExist"


@pytest.mark.parametrize("value", [
    "2026-11-27T22:18:05.123Z", "2026-11-27T22:18:05.000Z", "2026-01-01T00:00:00.999Z",  # moto's form
    "2026-11-27T22:18:05Z", "2026-11-27T22:18:05.123456Z", "2026-11-27T22:18:05.123+02:00",  # others
    "2026-11-27 22:18:05.123", "1764281885.123",
])
def test_a_timestamp_reads_as_botocore_reads_it(value):
    """The fast read of moto's ISO 8601 form gives the instant botocore's parser gives."""
    from botocore.utils import parse_to_aware_datetime

    expected = parse_to_aware_datetime(value)
    assert history_fast_path._aware(value) == expected
    assert history_fast_path._epoch(value) == history_fast_path._epoch(expected)
