"""Fix ``patches/service_shapes``: task parameters and results follow the API's shapes."""

from __future__ import annotations

import boto3

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.patches import service_shapes
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end

#: Describes its own execution through the AWS SDK integration (PascalCase in and out).
DESCRIBE_SELF = {
    "StartAt": "Describe",
    "States": {
        "Describe": {
            "Type": "Task",
            "Resource": "arn:aws:states:::aws-sdk:sfn:describeExecution",
            "Parameters": {"ExecutionArn.$": "$$.Execution.Id"},
            "ResultSelector": {"status.$": "$.Status", "arn.$": "$.ExecutionArn", "started.$": "$.StartDate"},
            "End": True,
        }
    },
}


def test_bare_moto_drops_pascal_case_sdk_parameters():
    with bare_moto():
        machine = create_state_machine(DESCRIBE_SELF)
        sfn = boto3.client("stepfunctions", region_name=REGION)
        arn = sfn.start_execution(stateMachineArn=machine, name="only")["executionArn"]
        result = wait_for_end(arn)
    assert result["status"] == "FAILED"
    assert result["error"] == "States.Runtime"


def test_runtime_maps_sdk_parameters_and_results():
    with LocalCloud() as cloud:
        machine = create_state_machine(DESCRIBE_SELF)
        arn = cloud.start_execution(machine, {})
        result = cloud.wait_for(arn)
    assert result.status == "SUCCEEDED", result.cause
    assert result.output["status"] == "RUNNING"
    assert result.output["arn"] == arn
    assert isinstance(result.output["started"], int)  # epoch ms, not a datetime


def test_runtime_maps_optimized_start_execution():
    with LocalCloud() as cloud:
        child = create_state_machine({"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}, "child")
        parent = create_state_machine(
            {
                "StartAt": "Start",
                "States": {
                    "Start": {
                        "Type": "Task",
                        "Resource": "arn:aws:states:::states:startExecution",
                        "Parameters": {"StateMachineArn": child, "Input": {"from": "parent"}},
                        "End": True,
                    }
                },
            },
            "parent",
        )
        result = cloud.wait_for(cloud.start_execution(parent, {}))
        child_arn = result.output["ExecutionArn"]
        child_result = cloud.wait_for(child_arn)
    assert result.status == "SUCCEEDED", result.cause
    assert child_result.output == {"from": "parent"}


def test_request_keys_follow_the_shape_but_map_keys_stay():
    operation = service_shapes.operation_model("dynamodb", "updateItem")
    request = {
        "tablename": "t",
        "Key": {"PK": {"s": "a"}},
        "ExpressionAttributeValues": {":Me": {"S": "x"}},
    }
    assert service_shapes.to_request_shape(request, operation.input_shape) == {
        "TableName": "t",
        "Key": {"PK": {"S": "a"}},
        "ExpressionAttributeValues": {":Me": {"S": "x"}},
    }
