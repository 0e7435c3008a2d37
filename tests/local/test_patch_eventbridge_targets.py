"""Fix ``patches/eventbridge_targets``: rules deliver events to state machines (and SQS)."""

from __future__ import annotations

import json

import boto3
import pytest

from locked_workflow.testing import LocalCloud
from local_helpers import REGION, ROLE_ARN, bare_moto, create_state_machine, wait_until

ECHO = {"StartAt": "Echo", "States": {"Echo": {"Type": "Pass", "End": True}}}
PATTERN = {"source": ["shop"], "detail-type": ["OrderPlaced"]}


def put_rule(events, name: str, targets: list[dict], *, state: str = "ENABLED", pattern: dict = PATTERN) -> None:
    events.put_rule(Name=name, EventPattern=json.dumps(pattern), State=state)
    events.put_targets(Rule=name, Targets=targets)


def order(detail: dict) -> dict:
    return {"Source": "shop", "DetailType": "OrderPlaced", "Detail": json.dumps(detail)}


def test_bare_moto_cannot_deliver_to_a_state_machine():
    with bare_moto():
        machine = create_state_machine(ECHO)
        events = boto3.client("events", region_name=REGION)
        put_rule(events, "orders", [{"Id": "sm", "Arn": machine, "RoleArn": ROLE_ARN}])
        with pytest.raises(NotImplementedError):
            events.put_events(Entries=[order({"id": 1})])


def test_runtime_starts_an_execution_per_matching_event():
    with LocalCloud() as cloud:
        machine = create_state_machine(ECHO)
        events = cloud.client("events")
        put_rule(events, "orders", [{"Id": "sm", "Arn": machine, "RoleArn": ROLE_ARN}])
        cloud.put_events([order({"id": 1}), order({"id": 2}), {**order({"id": 3}), "Source": "other"}])
        executions = wait_until(lambda: len(cloud.executions(machine)) >= 2 and cloud.executions(machine))
        results = [cloud.wait_for(e["executionArn"]) for e in executions]
    inputs = sorted((r.output for r in results), key=lambda event: event["detail"]["id"])
    assert [event["detail"] for event in inputs] == [{"id": 1}, {"id": 2}]
    assert inputs[0]["source"] == "shop" and inputs[0]["detail-type"] == "OrderPlaced"
    assert inputs[0]["time"].endswith("Z")  # ISO time, as EventBridge delivers it


def test_runtime_applies_input_and_input_path():
    with LocalCloud() as cloud:
        constant = create_state_machine(ECHO, "constant")
        detail = create_state_machine(ECHO, "detail")
        put_rule(
            cloud.client("events"),
            "orders",
            [
                {"Id": "c", "Arn": constant, "RoleArn": ROLE_ARN, "Input": json.dumps({"fixed": True})},
                {"Id": "d", "Arn": detail, "RoleArn": ROLE_ARN, "InputPath": "$.detail"},
            ],
        )
        cloud.put_events([order({"id": 7, "sku": "socks"})])
        first = wait_until(lambda: cloud.executions(constant))
        second = wait_until(lambda: cloud.executions(detail))
        outputs = [cloud.wait_for(first[0]["executionArn"]).output, cloud.wait_for(second[0]["executionArn"]).output]
    assert outputs == [{"fixed": True}, {"id": 7, "sku": "socks"}]


def test_runtime_skips_disabled_rules():
    with LocalCloud() as cloud:
        machine = create_state_machine(ECHO)
        put_rule(cloud.client("events"), "off", [{"Id": "sm", "Arn": machine, "RoleArn": ROLE_ARN}], state="DISABLED")
        cloud.put_events([order({"id": 1})])
        assert cloud.executions(machine) == []
        assert cloud.events.deliveries == []


def test_runtime_dead_letters_an_undeliverable_event():
    with LocalCloud() as cloud:
        sqs = cloud.client("sqs")
        dlq_url = sqs.create_queue(QueueName="dlq")["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        missing = "arn:aws:states:us-east-1:123456789012:stateMachine:gone"
        put_rule(
            cloud.client("events"),
            "orders",
            [{"Id": "sm", "Arn": missing, "RoleArn": ROLE_ARN, "DeadLetterConfig": {"Arn": dlq_arn}}],
        )
        cloud.put_events([order({"id": 9})])
        messages = sqs.receive_message(QueueUrl=dlq_url, MessageAttributeNames=["All"]).get("Messages", [])
    assert len(messages) == 1
    assert json.loads(messages[0]["Body"])["detail"] == {"id": 9}
    assert messages[0]["MessageAttributes"]["TARGET_ARN"]["StringValue"] == missing
    assert cloud.events.deliveries[0].ok is False and cloud.events.deliveries[0].dead_lettered


def test_runtime_keeps_sqs_targets_working():
    with LocalCloud() as cloud:
        sqs = cloud.client("sqs")
        url = sqs.create_queue(QueueName="orders")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        put_rule(cloud.client("events"), "orders", [{"Id": "q", "Arn": arn, "InputPath": "$.detail.id"}])
        cloud.put_events([order({"id": 5})])
        messages = sqs.receive_message(QueueUrl=url).get("Messages", [])
    assert [m["Body"] for m in messages] == ["5"]


# ---- Lambda function targets ----------------------------------------------------------------

RECORDER = """import json, os


def handler(event, context):
    with open(os.path.join(os.path.dirname(__file__), "received.json"), "w") as out:
        json.dump(event, out)
"""


def _function(lambda_client, iam_client, name: str) -> str:
    """A moto Lambda function (an empty zip: bare moto could only run it in Docker)."""
    import io
    import zipfile

    role = iam_client.create_role(RoleName=f"{name}-role", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("index.py", RECORDER)
    return lambda_client.create_function(FunctionName=name, Runtime="python3.12", Role=role,
                                         Handler="index.handler", Code={"ZipFile": code.getvalue()})["FunctionArn"]


def test_bare_moto_cannot_deliver_to_a_lambda_function():
    with bare_moto():
        arn = _function(boto3.client("lambda", region_name=REGION), boto3.client("iam", region_name=REGION), "fn")
        events = boto3.client("events", region_name=REGION)
        put_rule(events, "orders", [{"Id": "fn", "Arn": arn}])
        with pytest.raises(NotImplementedError):
            events.put_events(Entries=[order({"id": 1})])


def test_runtime_invokes_a_lambda_target_asynchronously_with_the_event(tmp_path):
    from locked_workflow.testing.lambda_runtime import InProcessFunction
    from local_helpers import lambda_folder

    folder = lambda_folder(tmp_path, "recorder", RECORDER)
    with LocalCloud() as cloud:
        arn = _function(cloud.client("lambda"), cloud.client("iam"), "recorder")
        cloud.functions.add(InProcessFunction(name="recorder", code_dir=folder, handler="index.handler",
                                              region=REGION, account_id=arn.split(":")[4]))
        put_rule(cloud.client("events"), "orders", [{"Id": "fn", "Arn": arn}])
        cloud.put_events([order({"id": 4})])
        received = wait_until(lambda: (folder / "received.json").exists() and json.loads((folder / "received.json").read_text()))
        (delivery,) = cloud.events.deliveries
    assert received["detail"] == {"id": 4} and received["detail-type"] == "OrderPlaced"
    assert delivery.ok and delivery.target_arn == arn


def test_runtime_dead_letters_an_event_for_a_missing_function():
    with LocalCloud() as cloud:
        sqs = cloud.client("sqs")
        dlq_url = sqs.create_queue(QueueName="dlq")["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        missing = "arn:aws:lambda:us-east-1:123456789012:function:gone"
        put_rule(cloud.client("events"), "orders", [{"Id": "fn", "Arn": missing, "DeadLetterConfig": {"Arn": dlq_arn}}])
        cloud.put_events([order({"id": 8})])
        messages = sqs.receive_message(QueueUrl=dlq_url, MessageAttributeNames=["All"]).get("Messages", [])
    assert [json.loads(m["Body"])["detail"] for m in messages] == [{"id": 8}]
    assert messages[0]["MessageAttributes"]["TARGET_ARN"]["StringValue"] == missing
