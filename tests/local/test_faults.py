"""The fault hook (``locked_workflow.testing.faults``) raises what botocore raises for a real
error response: the service's modeled exception class, so a Step Functions task names an
injected error as it names a real one (aws-sdk integration: ``DynamoDb.<code>``; optimized:
``DynamoDB.<code>``). Before, a plain ``ClientError`` surfaced from an aws-sdk task as
``DynamoDb.DynamoDbException``, which no Retry on a named error - the lock's transient list -
ever matched, so a fault matrix cell injecting throttling into an aws-sdk state tested a fault
AWS never produces."""

from __future__ import annotations

import uuid

import pytest

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.faults import Fault, dynamodb_faults

from local_helpers import create_state_machine

THROTTLED = "ProvisionedThroughputExceededException"


@pytest.fixture(scope="module")
def cloud():
    with LocalCloud("moto") as local:
        yield local


def test_an_injected_error_is_the_services_modeled_exception(cloud):
    with dynamodb_faults(Fault("GetItem", THROTTLED)) as log:
        with pytest.raises(cloud.dynamodb.exceptions.ProvisionedThroughputExceededException) as raised:
            cloud.dynamodb.get_item(TableName="any", Key={"pk": {"S": "x"}})
    assert log.injected == 1 and raised.value.response["Error"]["Code"] == THROTTLED


@pytest.mark.parametrize("resource,name", [
    ("aws-sdk:dynamodb:updateItem", f"DynamoDb.{THROTTLED}"),
    ("dynamodb:updateItem", f"DynamoDB.{THROTTLED}"),
])
def test_a_state_machine_task_names_an_injected_error_as_step_functions_does(cloud, resource, name):
    table = f"faults-{uuid.uuid4().hex[:8]}"
    cloud.dynamodb.create_table(
        TableName=table, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
    machine = create_state_machine({
        "QueryLanguage": "JSONata", "StartAt": "Write",
        "States": {"Write": {
            "Type": "Task", "Resource": f"arn:aws:states:::{resource}",
            "Arguments": {"TableName": table, "Key": {"pk": {"S": "k"}}, "UpdateExpression": "ADD n :one",
                          "ExpressionAttributeValues": {":one": {"N": "1"}}},
            "Catch": [{"ErrorEquals": ["States.ALL"], "Output": "{% $states.errorOutput %}", "Next": "Caught"}],
            "End": True},
            "Caught": {"Type": "Pass", "End": True}},
    }, name=table)
    with dynamodb_faults(Fault("UpdateItem", THROTTLED)) as log:
        result = cloud.wait_for(cloud.start_execution(machine, {}), timeout=60)
    assert log.injected == 1 and result.output["Error"] == name, result.output
