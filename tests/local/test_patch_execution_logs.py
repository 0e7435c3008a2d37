"""Fix ``patches/execution_logs``: executions write Step Functions-format lines to their log group."""

from __future__ import annotations

import json
import re

import boto3

from locked_workflow.testing import LocalCloud
from local_helpers import REGION, ROLE_ARN, bare_moto, wait_for_end

ACCOUNT = "123456789012"
GROUP = "/aws/vendedlogs/states/logged"
#: A task (DynamoDB UpdateItem returning the new item), an assignment, then a failure.
LOGGED = {
    "QueryLanguage": "JSONata",
    "StartAt": "Count",
    "States": {
        "Count": {
            "Type": "Task",
            "Resource": "arn:aws:states:::dynamodb:updateItem",
            "Arguments": {
                "TableName": "counters",
                "Key": {"pk": {"S": "{% $states.input.id %}"}},
                "UpdateExpression": "ADD #n :one",
                "ExpressionAttributeNames": {"#n": "n"},
                "ExpressionAttributeValues": {":one": {"N": "1"}},
                "ReturnValues": "ALL_NEW",
            },
            "Assign": {"counted": "{% $number($states.result.Attributes.n.N) %}"},
            "Next": "Give up",
        },
        "Give up": {"Type": "Fail", "Error": "Work.Failed", "Cause": "on purpose"},
    },
}
LINE_KEYS = ["id", "type", "details", "previous_event_id", "event_timestamp", "execution_arn", "redrive_count"]


def logging(level: str = "ALL", data: bool = True, group: str = GROUP) -> dict:
    arn = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{group}:*"
    return {"level": level, "includeExecutionData": data, "destinations": [{"cloudWatchLogsLogGroup": {"logGroupArn": arn}}]}


def create(sfn, definition: dict, name: str, **logging_options) -> str:
    return sfn.create_state_machine(
        name=name, definition=json.dumps(definition), roleArn=ROLE_ARN, loggingConfiguration=logging(**logging_options)
    )["stateMachineArn"]


def lines(logs, group: str = GROUP) -> list[dict]:
    events = logs.filter_log_events(logGroupName=group)["events"]
    return [json.loads(e["message"]) for e in sorted(events, key=lambda e: (e["logStreamName"], int(json.loads(e["message"])["id"])))]


def create_table(dynamodb) -> None:
    dynamodb.create_table(
        TableName="counters", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST",
    )


def test_bare_moto_writes_no_execution_logs():
    with bare_moto():
        logs = boto3.client("logs", region_name=REGION)
        logs.create_log_group(logGroupName=GROUP)
        sfn = boto3.client("stepfunctions", region_name=REGION)
        machine = create(sfn, {"StartAt": "F", "States": {"F": {"Type": "Fail", "Error": "E"}}}, "bare")
        assert wait_for_end(sfn.start_execution(stateMachineArn=machine, name="x")["executionArn"])["status"] == "FAILED"
        assert logs.filter_log_events(logGroupName=GROUP)["events"] == []


def test_runtime_logs_every_history_event_as_one_service_format_line():
    with LocalCloud() as cloud:
        create_table(cloud.dynamodb)
        machine = create(cloud.stepfunctions, LOGGED, "logged")
        result = cloud.wait_for(cloud.start_execution(machine, {"id": "a"}, name="run-1"))
        logs = cloud.client("logs")
        found = lines(logs)  # the group was created on demand
        (stream,) = logs.describe_log_streams(logGroupName=GROUP)["logStreams"]
    assert result.status == "FAILED"
    assert re.fullmatch(r"states/logged/\d{4}-\d\d-\d\d-\d\d-\d\d/[0-9a-f]{8}", stream["logStreamName"])
    history = result.history
    assert [line["type"] for line in found] == [event["type"] for event in history]
    for line, event in zip(found, history):
        assert list(line) == LINE_KEYS
        assert line["id"] == str(event["id"]) and line["previous_event_id"] == str(event["previousEventId"])
        assert line["event_timestamp"] == str(int(event["timestamp"].timestamp() * 1000))
        assert line["execution_arn"] == result.arn and line["redrive_count"] == "0"
    by_type = {line["type"]: line["details"] for line in found}
    assert json.loads(by_type["ExecutionStarted"]["input"]) == {"id": "a"}
    assert by_type["TaskStateEntered"]["name"] == "Count"
    scheduled = by_type["TaskScheduled"]
    assert (scheduled["resourceType"], scheduled["resource"]) == ("dynamodb", "updateItem")
    assert json.loads(scheduled["parameters"])["ReturnValues"] == "ALL_NEW"
    succeeded = by_type["TaskSucceeded"]
    assert json.loads(succeeded["output"])["Attributes"]["n"] == {"N": "1"}
    assert by_type["TaskStateExited"]["assignedVariables"] == {"counted": "1"}
    assert by_type["FailStateEntered"]["name"] == "Give up"
    assert by_type["ExecutionFailed"] == {"error": "Work.Failed", "cause": "on purpose"}


def test_log_level_and_execution_data_are_honoured():
    with LocalCloud() as cloud:
        create_table(cloud.dynamodb)
        sfn = cloud.stepfunctions
        machines = {
            "errors": create(sfn, LOGGED, "errors", level="ERROR", group="/errors"),
            "fatal": create(sfn, LOGGED, "fatal", level="FATAL", group="/fatal"),
            "no-data": create(sfn, LOGGED, "no-data", data=False, group="/no-data"),
            "off": create(sfn, LOGGED, "off", level="OFF", group="/off"),
        }
        cloud.wait_all([cloud.start_execution(arn, {"id": name}) for name, arn in machines.items()])
        logs = cloud.client("logs")
        errors, fatal, no_data = lines(logs, "/errors"), lines(logs, "/fatal"), lines(logs, "/no-data")
        groups = {g["logGroupName"] for g in logs.describe_log_groups()["logGroups"]}
    assert [line["type"] for line in errors] == ["FailStateEntered", "ExecutionFailed"]
    assert [line["type"] for line in fatal] == ["ExecutionFailed"]
    assert "/off" not in groups  # OFF: nothing written, nothing created
    assert len(no_data) == 8  # every event, as at level ALL
    data_fields = {"input", "inputDetails", "output", "outputDetails", "parameters", "assignedVariables"}
    assert all(not data_fields & set(line["details"]) for line in no_data)
    scheduled = next(line for line in no_data if line["type"] == "TaskScheduled")
    assert scheduled["details"]["resource"] == "updateItem"  # the rest of the details stay
    assert next(line for line in no_data if line["type"] == "ExecutionFailed")["details"]["error"] == "Work.Failed"


def test_redriven_lines_count_the_redrive():
    flaky = {
        "QueryLanguage": "JSONata",
        "StartAt": "Work",
        "States": {"Work": {"Type": "Pass", "End": True,
                            "Output": "{% $states.context.Execution.RedriveCount = 0 ? $error('Work.Broken: first') : 'ok' %}"}},
    }
    with LocalCloud() as cloud:
        machine = create(cloud.stepfunctions, flaky, "flaky")
        arn = cloud.start_execution(machine, {})
        assert cloud.wait_for(arn).status == "FAILED"
        cloud.stepfunctions.redrive_execution(executionArn=arn)
        assert cloud.wait_for(arn).status == "SUCCEEDED"
        found = lines(cloud.client("logs"))
    types = [line["type"] for line in found]
    redriven = types.index("ExecutionRedriven")
    assert {line["redrive_count"] for line in found[:redriven]} == {"0"}
    assert {line["redrive_count"] for line in found[redriven:]} == {"1"}
    assert types[-1] == "ExecutionSucceeded"


def test_deployed_template_keeps_its_logging_configuration():
    template = {
        "Resources": {
            "Logs": {"Type": "AWS::Logs::LogGroup", "Properties": {"LogGroupName": "/deployed"}},
            "Machine": {
                "Type": "AWS::StepFunctions::StateMachine",
                "Properties": {
                    "DefinitionString": json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}),
                    "LoggingConfiguration": {
                        "Level": "ALL",
                        "IncludeExecutionData": True,
                        "Destinations": [{"CloudWatchLogsLogGroup": {"LogGroupArn": {"Fn::GetAtt": ["Logs", "Arn"]}}}],
                    },
                },
            },
        }
    }
    with LocalCloud() as cloud:
        app = cloud.deploy(template)
        cloud.wait_for(cloud.start_execution(app.state_machine_arn("Machine"), {"k": 1}))
        found = lines(cloud.client("logs"), "/deployed")
    assert [line["type"] for line in found] == ["ExecutionStarted", "PassStateEntered", "PassStateExited", "ExecutionSucceeded"]
    assert json.loads(found[-1]["details"]["output"]) == {"k": 1}


def test_lines_written_at_once_to_streams_of_one_group_are_all_kept():
    """Threads writing at once (several streams of one group, several threads a stream, the
    group and streams created by whichever comes first) lose no line and no stream."""
    import threading
    import time

    from locked_workflow.testing.patches.execution_logs import LogTarget, write_line

    target = LogTarget(account_id="123456789012", region=REGION, log_group="/concurrent/lines", level="ALL",
                       include_execution_data=True)
    streams, writers, each = 6, 4, 25
    barrier = threading.Barrier(streams * writers)
    now_ms = int(time.time() * 1000)  # moto keeps lines of the last 14 days only

    def write(stream: int, writer: int) -> None:
        barrier.wait()
        for n in range(each):
            write_line(target, f"stream-{stream}", now_ms + n, f"{writer}:{n}")

    with LocalCloud() as cloud:
        threads = [threading.Thread(target=write, args=(s, w)) for s in range(streams) for w in range(writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        logs = cloud.client("logs")
        for stream in range(streams):
            events = logs.get_log_events(logGroupName=target.log_group, logStreamName=f"stream-{stream}",
                                         startFromHead=True, limit=10_000)["events"]
            assert sorted(e["message"] for e in events) == sorted(f"{w}:{n}" for w in range(writers) for n in range(each))
