"""Lambda handler: the protected work of the locked customer-update workflow.

Event (from the state machine; ``fence`` is ``$lock.fence``)::

    {"customerId": "123", "fence": 7, "update": {"balanceDelta": 10, "email": "a@b.c"},
     "workMs": 0}

Returns ``{"customerId", "balance", "updates", "lastFence"}``. Errors the state machine
can Catch by name: ``InvalidUpdateError`` (bad event), ``StaleFenceError`` (the write was
refused: a newer lock holder has written), ``ConcurrentUpdateError``.

Environment: ``CUSTOMERS_TABLE`` (partition key ``customerId`` (S)). ``AWS_ENDPOINT_URL_DYNAMODB``
is honoured by boto3 itself. Tracing turns itself off outside Lambda (no ``LAMBDA_TASK_ROOT``)
or with ``POWERTOOLS_TRACE_DISABLED=true``, so the handler also runs offline.
"""

from __future__ import annotations

import os
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

try:  # imported as a package module (tests, the in-process runtime)
    from .logic import (
        SERVICE,
        ConcurrentUpdateError,
        CustomerUpdate,
        InvalidUpdateError,
        StaleFenceError,
        apply_update,
    )
except ImportError:  # deployed: the asset folder is the import root ("index.handler")
    from logic import (  # type: ignore[no-redef]
        SERVICE,
        ConcurrentUpdateError,
        CustomerUpdate,
        InvalidUpdateError,
        StaleFenceError,
        apply_update,
    )

NAMESPACE = "LockedWorkflow"

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)

__all__ = [
    "ConcurrentUpdateError",
    "InvalidUpdateError",
    "StaleFenceError",
    "handler",
]

_dynamodb: Any = None


def dynamodb_client() -> Any:
    """The DynamoDB client, created on first use and reused across invocations."""
    global _dynamodb
    if _dynamodb is None:
        _dynamodb = boto3.client("dynamodb")
    return _dynamodb


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    try:
        update = CustomerUpdate.from_event(event)
    except InvalidUpdateError:
        metrics.add_metric(name="InvalidUpdateRejected", unit=MetricUnit.Count, value=1)
        raise
    table_name = os.environ.get("CUSTOMERS_TABLE")
    if not table_name:
        raise RuntimeError("the CUSTOMERS_TABLE environment variable is not set")

    logger.append_keys(customerId=update.customer_id, fence=update.fence)
    tracer.put_annotation(key="customerId", value=update.customer_id)
    try:
        record = apply_update(update, table_name=table_name, dynamodb=dynamodb_client())
    except StaleFenceError:
        metrics.add_metric(name="StaleFenceRejected", unit=MetricUnit.Count, value=1)
        logger.warning("Write refused: stale fence (the lock was taken over)", exc_info=True)
        raise
    metrics.add_metric(
        name="CustomerUpdateApplied" if update.fenced else "LocklessUpdateApplied",
        unit=MetricUnit.Count,
        value=1,
    )
    return record.summary()
