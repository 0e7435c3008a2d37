"""Protocol-built UpdateItem arguments (DynamoDB JSON) as props of CDK's DynamoUpdateItem task."""

from __future__ import annotations

from typing import Mapping, Optional

from aws_cdk import Duration, aws_dynamodb as dynamodb, aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks
from constructs import Construct

from locked_workflow.state_machines import errors
from locked_workflow.state_machines.expressions import jsonata
from locked_workflow.state_machines.retry_policy import TRANSIENT_RETRY


def attribute_value(value: dict) -> tasks.DynamoAttributeValue:
    ((kind, text),) = value.items()
    if kind == "S":
        return tasks.DynamoAttributeValue.from_string(text)
    if kind == "N":
        return tasks.DynamoAttributeValue.number_from_string(text)
    if kind == "L":
        return tasks.DynamoAttributeValue.from_list([attribute_value(v) for v in text])
    if kind == "M":
        return tasks.DynamoAttributeValue.from_map({k: attribute_value(v) for k, v in text.items()})
    raise ValueError(f"unsupported attribute value {value!r}")  # the protocol builds only S, N, L, M


def update_item_props(arguments: dict) -> dict:
    """``DynamoUpdateItem`` keyword arguments for ``arguments`` built by the lock protocol."""
    return dict(
        key={k: attribute_value(v) for k, v in arguments["Key"].items()},
        update_expression=arguments["UpdateExpression"],
        condition_expression=arguments["ConditionExpression"],
        expression_attribute_names=arguments["ExpressionAttributeNames"],
        expression_attribute_values={
            k: attribute_value(v) for k, v in arguments["ExpressionAttributeValues"].items()
        },
        return_values=tasks.DynamoReturnValues(arguments.get("ReturnValues", "NONE")),
        return_consumed_capacity=tasks.DynamoConsumedCapacity(arguments.get("ReturnConsumedCapacity", "NONE")),
    )


def retry_transient(state: sfn.TaskStateBase) -> None:
    """Retry the protocol's transient DynamoDB errors on ``state``, with backoff and jitter."""
    _retry_transient(state, TRANSIENT_RETRY.errors)


def _retry_transient(state: sfn.TaskStateBase, error_names) -> None:
    """The protocol's transient retry policy (:data:`TRANSIENT_RETRY`) for ``error_names``."""
    r = TRANSIENT_RETRY
    state.add_retry(
        errors=list(error_names),
        interval=Duration.seconds(r.interval_s),
        backoff_rate=r.backoff_rate,
        max_attempts=r.max_attempts,
        max_delay=Duration.seconds(r.max_delay_s),
        jitter_strategy=sfn.JitterType.FULL,
    )


def update_item_task(
    scope: Construct,
    state_name: str,
    table: dynamodb.ITable,
    arguments: dict,
    *,
    assign: Optional[dict] = None,
    outputs: Optional[str] = None,
) -> tasks.DynamoUpdateItem:
    """An optimized-integration UpdateItem state from protocol-built arguments.

    Its output is its input unless ``outputs`` says otherwise: the lock states are
    transparent to the caller's data.
    """
    return tasks.DynamoUpdateItem.jsonata(
        scope,
        state_name,
        table=table,
        **update_item_props(arguments),
        assign=assign,
        outputs=outputs or jsonata("$states.input"),
    )


#: IAM action each aws-sdk call of the lock needs on the lock table: a transaction is
#: authorized per action inside it.
_IAM_ACTIONS = {"transactWriteItems": "dynamodb:UpdateItem", "transactGetItems": "dynamodb:GetItem"}


def sdk_task(
    scope: Construct, state_name: str, table: dynamodb.ITable, api: str, arguments: dict, *,
    assign: Mapping[str, str] | None = None, output: str | None = None,
) -> tasks.CallAwsService:
    """An aws-sdk DynamoDB call on the lock table (``api``: e.g. ``dynamodb:transactWriteItems``)."""
    service, action = api.split(":")
    return tasks.CallAwsService.jsonata(
        scope, state_name, service=service, action=action, parameters=arguments,
        iam_action=_IAM_ACTIONS[action], iam_resources=[table.table_arn],
        assign=dict(assign) if assign else None, outputs=output,
    )


def retry_transient_sdk(state: sfn.TaskStateBase) -> None:
    """Retry the protocol's transient errors, as the aws-sdk integration names them."""
    _retry_transient(state, errors.SDK_TRANSIENT_ERRORS)
