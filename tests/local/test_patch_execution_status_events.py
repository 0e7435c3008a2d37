"""Fix ``patches/execution_status_events``: ending executions emit status-change events."""

from __future__ import annotations

import json

import boto3

from locked_workflow.testing import LocalCloud
from local_helpers import REGION, ROLE_ARN, bare_moto, create_state_machine, wait_for_end, wait_until

FAIL = {"StartAt": "Fail", "States": {"Fail": {"Type": "Fail", "Error": "Work.Failed", "Cause": "on purpose"}}}
SLEEP = {"StartAt": "Sleep", "TimeoutSeconds": 1, "States": {"Sleep": {"Type": "Wait", "Seconds": 30, "End": True}}}
ECHO = {"StartAt": "Echo", "States": {"Echo": {"Type": "Pass", "End": True}}}


def status_rule(events, name: str, machine_arns: list[str], target: dict, statuses=("FAILED", "TIMED_OUT", "ABORTED")) -> None:
    events.put_rule(
        Name=name,
        EventPattern=json.dumps(
            {
                "source": ["aws.states"],
                "detail-type": ["Step Functions Execution Status Change"],
                "detail": {"status": list(statuses), "stateMachineArn": machine_arns},
            }
        ),
    )
    events.put_targets(Rule=name, Targets=[target])


def test_bare_moto_emits_no_status_events():
    with bare_moto():
        sqs = boto3.client("sqs", region_name=REGION)
        url = sqs.create_queue(QueueName="status")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        machine = create_state_machine(FAIL)
        status_rule(boto3.client("events", region_name=REGION), "status", [machine], {"Id": "q", "Arn": queue_arn})
        sfn = boto3.client("stepfunctions", region_name=REGION)
        assert wait_for_end(sfn.start_execution(stateMachineArn=machine, name="x")["executionArn"])["status"] == "FAILED"
        assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0).get("Messages", []) == []


def test_runtime_routes_failed_timed_out_and_aborted_to_the_janitor():
    with LocalCloud() as cloud:
        failing = create_state_machine(FAIL, "failing")
        sleepy = create_state_machine(SLEEP, "sleepy")
        janitor = create_state_machine(ECHO, "janitor")
        status_rule(cloud.client("events"), "janitor", [failing, sleepy], {"Id": "j", "Arn": janitor, "RoleArn": ROLE_ARN})
        failed = cloud.start_execution(failing, {"job": 1})
        timed_out = cloud.start_execution(sleepy, {})
        aborted = cloud.start_execution(sleepy, {})
        cloud.stop_execution(aborted)
        ends = {arn: cloud.wait_for(arn, timeout=10).status for arn in (failed, timed_out, aborted)}
        runs = wait_until(lambda: len(cloud.executions(janitor)) == 3 and cloud.executions(janitor))
        details = [cloud.wait_for(run["executionArn"]).output["detail"] for run in runs]
    assert ends == {failed: "FAILED", timed_out: "TIMED_OUT", aborted: "ABORTED"}
    by_arn = {detail["executionArn"]: detail for detail in details}
    assert {arn: by_arn[arn]["status"] for arn in ends} == ends
    assert by_arn[failed]["stateMachineArn"] == failing
    assert by_arn[failed]["error"] == "Work.Failed" and by_arn[failed]["cause"] == "on purpose"
    assert json.loads(by_arn[failed]["input"]) == {"job": 1}
    assert by_arn[failed]["stopDate"] >= by_arn[failed]["startDate"] > 0
    assert by_arn[failed]["name"] == failed.rsplit(":", 1)[1]


def test_runtime_emits_succeeded_with_output_once():
    with LocalCloud() as cloud:
        machine = create_state_machine(ECHO)
        arn = cloud.start_execution(machine, {"a": 1})
        cloud.wait_for(arn)
        sent = wait_until(lambda: cloud.events.status_events)
    assert len(sent) == 1
    assert sent[0]["status"] == "SUCCEEDED"
    assert json.loads(sent[0]["output"]) == {"a": 1}


def test_status_events_can_be_dropped():
    with LocalCloud(emit_status_events=False) as cloud:
        failing = create_state_machine(FAIL, "failing")
        janitor = create_state_machine(ECHO, "janitor")
        status_rule(cloud.client("events"), "janitor", [failing], {"Id": "j", "Arn": janitor, "RoleArn": ROLE_ARN})
        cloud.wait_for(cloud.start_execution(failing, {}))
        assert wait_until(lambda: cloud.events.dropped_status_events, timeout=2)
        assert cloud.executions(janitor) == []


def test_status_events_can_be_dropped_selectively():
    with LocalCloud() as cloud:
        failing = create_state_machine(FAIL, "failing")
        janitor = create_state_machine(ECHO, "janitor")
        status_rule(cloud.client("events"), "janitor", [failing], {"Id": "j", "Arn": janitor, "RoleArn": ROLE_ARN})
        cloud.events.status_event_filter = lambda detail: "lose" not in json.loads(detail["input"])
        lost = cloud.start_execution(failing, {"lose": True})
        kept = cloud.start_execution(failing, {})
        cloud.wait_all([lost, kept])
        runs = wait_until(lambda: cloud.executions(janitor))
        delivered = [cloud.wait_for(r["executionArn"]).output["detail"]["executionArn"] for r in runs]
    assert delivered == [kept]
    assert [d["executionArn"] for d in cloud.events.dropped_status_events] == [lost]


def test_express_workflows_emit_no_status_events():
    with LocalCloud() as cloud:
        express = cloud.stepfunctions.create_state_machine(
            name="express", definition=json.dumps(FAIL), roleArn=ROLE_ARN, type="EXPRESS"
        )["stateMachineArn"]
        standard = create_state_machine(FAIL, "standard")
        cloud.wait_all([cloud.start_execution(express, {}), cloud.start_execution(standard, {})])
        sent = wait_until(lambda: [d["stateMachineArn"] for d in cloud.events.status_events])
    # (only this cloud's executions announce themselves here: an execution an earlier test
    # left running emits nothing into this cloud, see the test below)
    assert sent == [standard]


#: An asynchronous invocation in flight while its cloud closes: once the cloud has stopped its
#: executions (``watch`` is no longer RUNNING), it starts one more - which runs on after the close.
LATE_STARTER = '''
import pathlib
import time

import boto3


def handler(event, context):
    sfn = boto3.client("stepfunctions")
    deadline = time.monotonic() + 30
    while sfn.describe_execution(executionArn=event["watch"])["status"] == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.05)
    arn = sfn.start_execution(stateMachineArn=event["machine"], input="{}")["executionArn"]
    pathlib.Path(event["out"]).write_text(arn)
'''

PAUSE = {"StartAt": "Pause", "States": {"Pause": {"Type": "Wait", "Seconds": 2, "End": True}}}
LONG = {"StartAt": "Long", "States": {"Long": {"Type": "Wait", "Seconds": 600, "End": True}}}


def test_an_execution_of_a_closed_cloud_emits_nothing_into_the_next_cloud(tmp_path):
    """An execution that ends after its cloud closed - started by work still in flight as the
    cloud stopped its executions - must not put its status event on a later cloud's bus, where
    a janitor rule for a same-named state machine would act on it. Its cloud's router, closed,
    drops it (``dropped_status_events``). Before, the later cloud emitted it (seen in a suite
    as a foreign event in ``test_express_workflows_emit_no_status_events``)."""
    folder = tmp_path / "Starter"
    folder.mkdir()
    (folder / "index.py").write_text(LATE_STARTER)
    out = tmp_path / "late-execution"
    template = {"Resources": {"Starter": {
        "Type": "AWS::Lambda::Function",
        "Properties": {"Handler": "index.handler", "Runtime": "python3.12", "Timeout": 30,
                       "Code": {"S3Bucket": "cdk-assets", "S3Key": "Starter.zip"}},
        "Metadata": {"aws:asset:path": "Starter"},
    }}}
    with LocalCloud() as first:
        app = first.deploy(template, assets_dir=tmp_path)
        pause = create_state_machine(PAUSE, "pause")
        watch = first.start_execution(create_state_machine(LONG, "long"), {})
        response = first.client("lambda").invoke(
            FunctionName=app.function_name("Starter"), InvocationType="Event",
            Payload=json.dumps({"watch": watch, "machine": pause, "out": str(out)}))
        assert response["StatusCode"] == 202
    late = out.read_text()  # started during the close, after the cloud stopped its executions
    assert late.startswith(pause.replace(":stateMachine:", ":execution:") + ":")
    with LocalCloud() as second:
        def seen() -> list[str]:
            return ([f"second: {d['status']}" for d in second.events.status_events if d["executionArn"] == late]
                    + [f"first, dropped: {d['status']}" for d in first.events.dropped_status_events
                       if d["executionArn"] == late])

        ended = wait_until(seen, timeout=30)
    assert ended == ["first, dropped: SUCCEEDED"]
