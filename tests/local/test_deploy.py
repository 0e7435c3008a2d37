"""Deploy a small hand-written template and run it end to end, on both DynamoDB backends.

Table (GSI, TTL) + JSONata state machine (conditional updateItem, then a Lambda) + event
bus + rule targeting the state machine + a Lambda from a temp asset folder, plus the
resources a CDK app always carries (IAM, logs, metadata), which are skipped.
"""

from __future__ import annotations

import json

import pytest
from moto.dynamodb.models import dynamodb_backends

from locked_workflow.testing import UnsupportedResourceError

COUNTER = '''
import os

import boto3


def handler(event, context):
    table = os.environ["TABLE_NAME"]
    item = boto3.client("dynamodb").update_item(
        TableName=table,
        Key={"pk": {"S": "counter#" + event["key"]}},
        UpdateExpression="ADD #n :one",
        ExpressionAttributeNames={"#n": "n"},
        ExpressionAttributeValues={":one": {"N": "1"}},
        ReturnValues="ALL_NEW",
    )["Attributes"]
    return {"key": event["key"], "fence": event["fence"], "count": int(item["n"]["N"])}
'''

DEFINITION = {
    "QueryLanguage": "JSONata",
    "StartAt": "Acquire",
    "States": {
        "Acquire": {
            "Type": "Task",
            "Resource": "arn:aws:states:::dynamodb:updateItem",
            "Arguments": {
                "TableName": "__TABLE__",
                "Key": {"pk": {"S": "{% 'order#' & $states.input.orderId %}"}},
                "UpdateExpression": "SET #owner = :me ADD #fence :one",
                "ConditionExpression": "attribute_not_exists(#owner) OR #owner = :me",
                "ExpressionAttributeNames": {"#owner": "owner", "#fence": "fence"},
                "ExpressionAttributeValues": {
                    ":me": {"S": "{% $states.context.Execution.Id %}"},
                    ":one": {"N": "1"},
                },
                "ReturnValues": "ALL_NEW",
            },
            "Assign": {"fence": "{% $number($states.result.Attributes.fence.N) %}", "key": "{% $states.input.orderId %}"},
            "Catch": [{"ErrorEquals": ["DynamoDB.ConditionalCheckFailedException"], "Next": "Held"}],
            "Next": "Work",
        },
        "Work": {
            "Type": "Task",
            "Resource": "arn:aws:states:::lambda:invoke",
            "Arguments": {"FunctionName": "__FUNCTION__", "Payload": {"key": "{% $key %}", "fence": "{% $fence %}"}},
            "Output": "{% $states.result.Payload %}",
            "End": True,
        },
        "Held": {"Type": "Fail", "Error": "Lock.Held"},
    },
}


def _join(definition: dict) -> dict:
    """The definition as CDK writes it: Fn::Join around Refs and GetAtts."""
    text = json.dumps(definition)
    before, rest = text.split("__TABLE__")
    middle, after = rest.split("__FUNCTION__")
    return {"Fn::Join": ["", [before, {"Ref": "LockTable"}, middle, {"Fn::GetAtt": ["CounterFn", "Arn"]}, after]]}


def template(asset: str) -> dict:
    def meta(path: str) -> dict:
        return {"aws:cdk:path": f"Orders/{path}"}

    return {
        "Resources": {
            "LockTable": {
                "Type": "AWS::DynamoDB::Table",
                "Properties": {
                    "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
                    "AttributeDefinitions": [
                        {"AttributeName": "pk", "AttributeType": "S"},
                        {"AttributeName": "owner", "AttributeType": "S"},
                    ],
                    "BillingMode": "PAY_PER_REQUEST",
                    "GlobalSecondaryIndexes": [
                        {
                            "IndexName": "byOwner",
                            "KeySchema": [{"AttributeName": "owner", "KeyType": "HASH"}],
                            "Projection": {"ProjectionType": "KEYS_ONLY"},
                        }
                    ],
                    "TimeToLiveSpecification": {"AttributeName": "ttl", "Enabled": True},
                },
                "Metadata": meta("Locks/Resource"),
            },
            "Bus": {"Type": "AWS::Events::EventBus", "Properties": {"Name": "orders"}, "Metadata": meta("Bus/Resource")},
            "Role": {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": {}}},
            "RolePolicy": {"Type": "AWS::IAM::Policy", "Properties": {"Roles": [{"Ref": "Role"}], "PolicyDocument": {}}},
            "Logs": {"Type": "AWS::Logs::LogGroup", "Properties": {}},
            "CDKMetadata": {"Type": "AWS::CDK::Metadata", "Properties": {"Analytics": "v2:deflate64:x"}},
            "CounterFn": {
                "Type": "AWS::Lambda::Function",
                "Properties": {
                    "Handler": "index.handler",
                    "Runtime": "python3.12",
                    "Role": {"Fn::GetAtt": ["Role", "Arn"]},
                    "Code": {"S3Bucket": {"Fn::Sub": "cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}"}, "S3Key": "x.zip"},
                    "Environment": {"Variables": {"TABLE_NAME": {"Ref": "LockTable"}}},
                },
                "DependsOn": ["RolePolicy"],
                "Metadata": {**meta("Counter/Resource"), "aws:asset:path": asset, "aws:asset:property": "Code"},
            },
            "Machine": {
                "Type": "AWS::StepFunctions::StateMachine",
                "Properties": {"RoleArn": {"Fn::GetAtt": ["Role", "Arn"]}, "DefinitionString": _join(DEFINITION)},
                "DependsOn": ["RolePolicy"],
                "Metadata": meta("Workflow/Resource"),
            },
            "Trigger": {
                "Type": "AWS::Events::Rule",
                "Properties": {
                    "EventBusName": {"Ref": "Bus"},
                    "EventPattern": {"source": ["shop"], "detail-type": ["OrderPlaced"]},
                    "State": "ENABLED",
                    "Targets": [
                        {
                            "Id": "Target0",
                            "Arn": {"Ref": "Machine"},
                            "RoleArn": {"Fn::GetAtt": ["Role", "Arn"]},
                            "InputPath": "$.detail",
                        }
                    ],
                },
                "Metadata": meta("Trigger/Resource"),
            },
        }
    }


@pytest.fixture
def asset_dir(tmp_path):
    folder = tmp_path / "cdk.out" / "asset.counter"
    folder.mkdir(parents=True)
    (folder / "index.py").write_text(COUNTER)
    return tmp_path / "cdk.out"


@pytest.mark.parametrize("local_cloud", ["moto", "dynamodb-local"], indirect=True)
def test_deploy_and_run_from_an_event(local_cloud, asset_dir):
    cloud = local_cloud
    app = cloud.deploy(template("asset.counter"), assets_dir=asset_dir, stack_name="Orders")

    assert sorted(app.skipped) == [
        ("CDKMetadata", "AWS::CDK::Metadata"),
        ("Logs", "AWS::Logs::LogGroup"),
        ("Role", "AWS::IAM::Role"),
        ("RolePolicy", "AWS::IAM::Policy"),
    ]
    machine = app.state_machine_arn("Workflow")  # by CDK path
    assert machine == app.resources["Machine"]
    table = app.table_name("Locks")
    description = cloud.dynamodb.describe_table(TableName=table)["Table"]
    assert [index["IndexName"] for index in description["GlobalSecondaryIndexes"]] == ["byOwner"]
    ttl = cloud.dynamodb.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
    assert ttl["AttributeName"] == "ttl"

    cloud.put_events(
        [{"Source": "shop", "DetailType": "OrderPlaced", "EventBusName": app.event_bus_name("Bus"), "Detail": {"orderId": "o-1"}}]
    )
    (run,) = cloud.executions(machine)
    result = cloud.wait_for(run["executionArn"], timeout=30)
    assert result.status == "SUCCEEDED", result.cause
    assert result.output == {"key": "o-1", "fence": 1, "count": 1}

    lock = cloud.dynamodb.get_item(TableName=table, Key={"pk": {"S": "order#o-1"}})["Item"]
    assert lock["owner"]["S"] == run["executionArn"] and lock["fence"]["N"] == "1"
    counter = cloud.dynamodb.get_item(TableName=table, Key={"pk": {"S": "counter#o-1"}})["Item"]
    assert counter["n"]["N"] == "1"

    # A second execution finds the lock held by the first and fails with the Catch's error.
    second = cloud.wait_for(cloud.start_execution(machine, {"orderId": "o-1"}))
    assert (second.status, second.error) == ("FAILED", "Lock.Held")

    moto_tables = dynamodb_backends[cloud.account_id][cloud.region].tables
    if cloud.backend == "dynamodb-local":
        assert table not in moto_tables  # every DynamoDB call went to DynamoDB Local
    else:
        assert table in moto_tables


def test_definition_object_with_substitutions(local_cloud):
    app = local_cloud.deploy(
        {
            "Resources": {
                "Machine": {
                    "Type": "AWS::StepFunctions::StateMachine",
                    "Properties": {
                        "RoleArn": "arn:aws:iam::123456789012:role/x",
                        "StateMachineName": "greeter",
                        "Definition": {
                            "StartAt": "Hi",
                            "States": {"Hi": {"Type": "Pass", "Result": {"region": "${Region}"}, "End": True}},
                        },
                        "DefinitionSubstitutions": {"Region": {"Ref": "AWS::Region"}},
                    },
                }
            }
        }
    )
    arn = app.state_machine_arn()
    assert arn.endswith(":stateMachine:greeter")
    assert local_cloud.wait_for(local_cloud.start_execution(arn)).output == {"region": local_cloud.region}


def test_unsupported_resource_types_are_named(local_cloud):
    with pytest.raises(UnsupportedResourceError, match=r"Topic \(AWS::Pipes::Pipe\)"):
        local_cloud.deploy({"Resources": {"Topic": {"Type": "AWS::Pipes::Pipe", "Properties": {}}}})


WAITING = {
    "StartAt": "Prepare",
    "States": {
        "Prepare": {"Type": "Pass", "Next": "Hold"},
        "Hold": {"Type": "Wait", "Seconds": 30, "End": True},
    },
}


def test_a_wait_that_times_out_names_each_execution_still_running_and_its_state(local_cloud, caplog):
    """Issue 26, part 3.5: a hanging test says what it waits for - which executions, in which
    state, for how long - and the deploy and the wait log their progress."""
    import logging

    from locked_workflow.testing import ExecutionsStillRunning

    template = {"Resources": {
        "Quick": {"Type": "AWS::StepFunctions::StateMachine", "Properties": {
            "DefinitionString": json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}),
            "RoleArn": "arn:aws:iam::123456789012:role/sfn"}},
        "Slow": {"Type": "AWS::StepFunctions::StateMachine", "Properties": {
            "DefinitionString": json.dumps(WAITING), "RoleArn": "arn:aws:iam::123456789012:role/sfn"}},
    }}
    with caplog.at_level(logging.INFO, logger="locked_workflow.testing"):
        app = local_cloud.deploy(template)
        quick = local_cloud.start_execution(app.state_machine_arn("Quick"))
        slow = [local_cloud.start_execution(app.state_machine_arn("Slow")) for _ in range(2)]
        with pytest.raises(ExecutionsStillRunning) as timed_out:
            # (several reports before the deadline: the first may come before the runs reach
            # 'Hold' on a loaded machine, and a single slow poll must not skip the only one)
            local_cloud.wait_all([quick, *slow], timeout=6, progress_s=0.5)
    message = str(timed_out.value)
    assert message.startswith("2 of 3 executions still running after 6 s: ")
    assert [w.split(" ")[0] for w in timed_out.value.whereabouts] == [arn.rsplit(":", 1)[1] for arn in slow]
    assert all(" RUNNING in state 'Hold' for " in w for w in timed_out.value.whereabouts)
    assert quick.rsplit(":", 1)[1] not in message  # ended: not named
    assert isinstance(timed_out.value, TimeoutError)
    logged = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("deployed LocalStack: 2 resources in ") for m in logged)
    assert any(m.startswith("waiting for 2 of 3 executions: ") and "'Hold'" in m for m in logged)
    for arn in slow:
        local_cloud.stop_execution(arn)
