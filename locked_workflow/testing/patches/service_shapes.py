"""Task integrations speak the service's shapes (``aws-sdk:sfn:*``, ``states:startExecution``...).

Gap (moto 5.2.1): ``StateTaskService._normalise_parameters`` and ``_normalise_response``
are empty stubs (LocalStack, which moto ported, maps both through botocore's shapes).
Step Functions writes task parameters in PascalCase (``ExecutionArn``,
``StateMachineArn``) and returns PascalCase fields (``Status``, ``ExecutionArn``),
whatever the casing of the service's own API. For camelCase APIs - Step Functions itself -
the parameters never reach moto (its client disables validation, botocore drops the
unknown keys): ``aws-sdk:sfn:describeExecution`` and ``arn:aws:states:::states:startExecution``
fail with ``States.Runtime``, and a state reading ``$states.result.Status`` finds nothing.

Fix: match every parameter key case-insensitively to the member names of the operation's
input shape (botocore's service model, recursing through structures and lists - never
into map keys, which are data), and PascalCase the members of the response along the
output shape; timestamps in results become epoch milliseconds (moto leaves ``datetime``
objects that make ``DescribeExecution`` crash). Integrations whose API is already
PascalCase (DynamoDB, SQS, Lambda...) keep their keys.

AWS: "Parameters in Step Functions are expressed in PascalCase, even if the native service API is
in camelCase", and a task's result is the API's response
(https://docs.aws.amazon.com/step-functions/latest/dg/supported-services-awssdk.html;
https://docs.aws.amazon.com/step-functions/latest/dg/connect-stepfunctions.html).

Proof: ``tests/local/test_patch_service_shapes.py``.
"""

from __future__ import annotations

import datetime
import functools
from contextlib import ExitStack
from typing import Any

import botocore.session
from botocore.model import ListShape, MapShape, OperationModel, Shape, StructureShape
from botocore.response import StreamingBody
from botocore.exceptions import UnknownServiceError
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service import (
    StateTaskService,
)

from locked_workflow.testing.seams import patch_attribute


@functools.lru_cache(maxsize=None)
def operation_model(service_name: str, action: str) -> OperationModel | None:
    """botocore's model of ``action`` (any casing, e.g. ``describeExecution``)."""
    try:
        service_model = botocore.session.get_session().get_service_model(service_name)
    except UnknownServiceError:
        return None
    wanted = action.replace("_", "").lower()
    for name in service_model.operation_names:
        if name.lower() == wanted:
            return service_model.operation_model(name)
    return None


def to_request_shape(value: Any, shape: Shape | None) -> Any:
    """``value`` with structure keys renamed to the shape's member names (case-insensitive)."""
    if isinstance(shape, StructureShape) and isinstance(value, dict):
        members = {name.lower(): name for name in shape.members}
        renamed = {}
        for key, item in value.items():
            member = members.get(key.lower(), key)
            renamed[member] = to_request_shape(item, shape.members.get(member))
        return renamed
    if isinstance(shape, ListShape) and isinstance(value, list):
        return [to_request_shape(item, shape.member) for item in value]
    if isinstance(shape, MapShape) and isinstance(value, dict):
        return {key: to_request_shape(item, shape.value) for key, item in value.items()}
    return value


def to_sfn_response(value: Any, shape: Shape | None) -> Any:
    """``value`` with structure members PascalCased, as Step Functions returns them.

    Timestamps become epoch milliseconds (as in ``startExecution.sync`` outputs); left as
    ``datetime`` they would make the execution's output unserialisable.
    """
    if isinstance(value, StreamingBody):
        return value.read().decode("utf-8")
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(shape, StructureShape) and isinstance(value, dict):
        return {
            key[:1].upper() + key[1:]: to_sfn_response(item, shape.members.get(key))
            for key, item in value.items()
        }
    if isinstance(shape, ListShape) and isinstance(value, list):
        return [to_sfn_response(item, shape.member) for item in value]
    if isinstance(shape, MapShape) and isinstance(value, dict):
        return {key: to_sfn_response(item, shape.value) for key, item in value.items()}
    return value


def _operation(task: StateTaskService, service: str | None, action: str | None) -> OperationModel | None:
    return operation_model(task._get_boto_service_name(service), action or task.resource.api_action)


def _normalise_parameters(self, parameters, boto_service_name=None, service_action_name=None):  # type: ignore[no-untyped-def]
    operation = _operation(self, boto_service_name, service_action_name)
    if operation is None or operation.input_shape is None:
        return
    normalised = to_request_shape(parameters, operation.input_shape)
    parameters.clear()
    parameters.update(normalised)


def _normalise_response(self, response, boto_service_name=None, service_action_name=None):  # type: ignore[no-untyped-def]
    operation = _operation(self, boto_service_name, service_action_name)
    if operation is None or operation.output_shape is None or not isinstance(response, dict):
        return
    normalised = to_sfn_response(response, operation.output_shape)
    response.clear()
    response.update(normalised)


def apply(stack: ExitStack) -> None:
    patch_attribute(stack, StateTaskService, "_normalise_parameters", _normalise_parameters, by=__name__)
    patch_attribute(stack, StateTaskService, "_normalise_response", _normalise_response, by=__name__)
