"""Lambda handler: the LockJanitor, invoked by EventBridge with a Step Functions
``Execution Status Change`` event of a watched state machine (ABORTED, TIMED_OUT, FAILED).

It retires every lock the ended execution took and, for a fair lock, dequeues its queue
entries (see ``logic``). Returns what it did; publishes ``JanitorRetires`` (acquisitions
retired by this event; 0 for a duplicate) in CloudWatch embedded metric format, in the
namespace ``$METRICS_NAMESPACE_PREFIX/<state machine name>`` - ``LockMonitoring``'s - without
dimensions.

When it cannot recover (a malformed event, an API error that outlasted botocore's retries,
a history that does not show an acquire's parameters) it logs ONE error line naming the
execution and the lock key, and raises: Lambda retries the event, then sends it to the
function's dead-letter queue.

Environment: ``LOCK_TABLE``, ``LOCK_KEY_ATTRIBUTE``, ``LOCK_ATTRIBUTE_PREFIX``, ``FAIR_LOCK``
(``true``/``false``), ``METRICS_NAMESPACE_PREFIX`` (default ``LockedWorkflow``). Tracing turns
itself off outside Lambda.
"""

from __future__ import annotations

import os
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent, event_source
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.config import Config

try:  # imported as a package module (tests)
    from .logic import (
        JANITOR_RETIRES,
        SERVICE,
        EndedExecution,
        InvalidJanitorEvent,
        RecoveryFailed,
        recover,
    )
    from .settings import JanitorSettings
except ImportError:  # deployed: the asset folder is the import root ("index.handler")
    from logic import (  # type: ignore[no-redef]
        JANITOR_RETIRES,
        SERVICE,
        EndedExecution,
        InvalidJanitorEvent,
        RecoveryFailed,
        recover,
    )
    from settings import JanitorSettings  # type: ignore[no-redef]

__all__ = ["InvalidJanitorEvent", "RecoveryFailed", "handler"]

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics()  # namespace: per event (the ended execution's state machine); no dimensions

#: Throttling and 5xx errors: botocore's standard retries, generously (every write is idempotent).
_RETRIES = Config(retries={"mode": "standard", "max_attempts": 8})
_clients: dict[str, Any] = {}


def client(service: str) -> Any:
    """A boto3 client, created on first use and reused across invocations."""
    if service not in _clients:
        _clients[service] = boto3.client(service, config=_RETRIES)
    return _clients[service]


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_source(data_class=EventBridgeEvent)
def handler(event: EventBridgeEvent, context: LambdaContext) -> dict[str, Any]:
    try:
        ended = EndedExecution.from_detail(event.get("detail"))
    except InvalidJanitorEvent as invalid:
        logger.error(f"not an ended execution's status change (event {event.get('id')!r}): {invalid}")
        raise
    settings = JanitorSettings.from_environment(os.environ)
    logger.append_keys(executionArn=ended.execution_arn, status=ended.status, endedAt=ended.ended_at_ms)
    tracer.put_annotation(key="executionArn", value=ended.execution_arn)
    try:
        recovery = recover(ended, settings, dynamodb=client("dynamodb"), stepfunctions=client("stepfunctions"))
    except RecoveryFailed as failed:
        logger.error(str(failed), extra={"lockKey": failed.key})
        raise
    metrics.namespace = settings.metrics_namespace_of(ended.state_machine_name)
    metrics.add_metric(name=JANITOR_RETIRES, unit=MetricUnit.Count, value=len(recovery.retired))
    summary = recovery.summary()
    logger.info("recovered the ended execution's locks", extra=summary)
    return summary
