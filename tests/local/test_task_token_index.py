"""A wake-up (``SendTaskSuccess``) finds its token's execution at once: its cost does not grow
with the executions the session keeps (``late_callbacks`` notes each token's execution,
``unique_execution_names`` each started execution, ``cancelled_branches`` looks them up).

Counted, not timed: the callback pools consulted by one wake-up with 1 and with 25 executions
parked. Moto's own walk asks every execution's pool; the index asks the token's only. The
answers stay those of the walk: the woken execution goes on, an unknown token and a token of
an ended task are refused as before.
"""

from __future__ import annotations

import json
import time
from unittest import mock

import pytest
from botocore.exceptions import ClientError
from moto.stepfunctions.parser.asl.eval.callback.callback import CallbackPoolManager

from locked_workflow.testing import LocalCloud

ROLE = "arn:aws:iam::123456789012:role/local-test"
PARKS = {
    "StartAt": "Park",
    "States": {
        "Park": {
            "Type": "Task", "Resource": "arn:aws:states:::aws-sdk:dynamodb:putItem.waitForTaskToken",
            "Parameters": {"TableName": "tokens", "Item": {"pk": {"S.$": "$.id"}, "token": {"S.$": "$$.Task.Token"}}},
            "Next": "Woken",
        },
        "Woken": {"Type": "Pass", "End": True},
    },
}
DEADLINE_S = 60.0


def _park(cloud, machine: str, ids: list[str]) -> dict[str, tuple[str, str]]:
    """Start one execution per id; id -> (execution ARN, its token) once all are parked."""
    arns = {i: cloud.start_execution(machine, {"id": i}) for i in ids}
    deadline = time.monotonic() + DEADLINE_S
    tokens: dict[str, str] = {}
    while len(tokens) < len(ids):
        assert time.monotonic() < deadline, f"only {len(tokens)} of {len(ids)} parked"
        for i in ids:
            item = cloud.dynamodb.get_item(TableName="tokens", Key={"pk": {"S": i}}).get("Item")
            if item:
                tokens[i] = item["token"]["S"]
        time.sleep(0.05)
    return {i: (arns[i], tokens[i]) for i in ids}


def _pools_asked(cloud, token: str) -> int:
    """The callback pools one SendTaskSuccess of ``token`` consulted (lookups and notifies)."""
    asked: set[int] = set()
    get, notify = CallbackPoolManager.get, CallbackPoolManager.notify

    def counting_get(self, callback_id):  # type: ignore[no-untyped-def]
        asked.add(id(self))
        return get(self, callback_id)

    def counting_notify(self, callback_id, outcome):  # type: ignore[no-untyped-def]
        asked.add(id(self))
        return notify(self, callback_id, outcome)

    with mock.patch.object(CallbackPoolManager, "get", counting_get), \
            mock.patch.object(CallbackPoolManager, "notify", counting_notify):
        cloud.stepfunctions.send_task_success(taskToken=token, output=json.dumps({}))
    return len(asked)


@pytest.fixture
def parking_cloud():
    with LocalCloud() as cloud:
        cloud.dynamodb.create_table(
            TableName="tokens", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST",
        )
        machine = cloud.stepfunctions.create_state_machine(
            name="parks", definition=json.dumps(PARKS), roleArn=ROLE)["stateMachineArn"]
        yield cloud, machine


def test_a_wake_up_asks_only_its_executions_pool_however_many_are_parked(parking_cloud):
    cloud, machine = parking_cloud
    parked = _park(cloud, machine, [f"p{n:02d}" for n in range(25)])
    asked = []
    for i in ("p00", "p12", "p24"):
        arn, token = parked[i]
        asked.append(_pools_asked(cloud, token))
        assert cloud.wait_for(arn, timeout=DEADLINE_S).status == "SUCCEEDED"
    assert asked == [1, 1, 1], f"pools consulted per wake-up with 25 parked: {asked}"


def test_the_answers_stay_those_of_the_walk(parking_cloud):
    cloud, machine = parking_cloud
    parked = _park(cloud, machine, ["a", "b"])
    arn, token = parked["a"]
    cloud.stepfunctions.send_task_success(taskToken=token, output="{}")
    result = cloud.wait_for(arn, timeout=DEADLINE_S)
    assert result.status == "SUCCEEDED"
    assert [e["type"] for e in result.history].count("TaskSucceeded") == 1
    for stale in (token, "no-such-token"):
        with pytest.raises(ClientError) as refused:
            cloud.stepfunctions.send_task_success(taskToken=stale, output="{}")
        assert refused.value.response["Error"]["Code"] == "InvalidToken"
    assert cloud.status(parked["b"][0]) == "RUNNING"  # the other waiter was not woken
    cloud.stepfunctions.send_task_success(taskToken=parked["b"][1], output="{}")
    assert cloud.wait_for(parked["b"][0], timeout=DEADLINE_S).status == "SUCCEEDED"
