"""Lambda handler: a locked workflow's WaitTime and HoldTime, from its execution log lines.

A CloudWatch Logs subscription filter delivers the lines (gzip + base64 in ``awslogs.data``)
of the workflow's log group - level ALL, execution data included - and each metric comes from
ONE line (lines arrive one at a time, in no guaranteed order):

* **WaitTime** (ms), from the exit of an acquisition (a state of ``$ACQUISITIONS``, of any
  section of any kind): the lock record it assigned (``assignedVariables[<its variable>]``)
  holds ``acquiredAt`` and ``requestedAt`` (the section's entry): wait = ``acquiredAt -
  requestedAt``. A re-entered section (``reentered``) waited for nothing and is skipped, and
  so is a record another execution holds (a fair waiter's read of the lock: not its acquisition).
* **HoldTime** (ms), from the exit of a release (a state of ``$RELEASES``, of any section of
  any kind): the hold's length it assigned (``assignedVariables[<lock variable>Held]``:
  ``$millis()`` at the release minus ``acquiredAt``). A release that found the lock taken
  fails and assigns nothing; a null (no ``acquiredAt``) is skipped.

Both ends of each difference come from the Step Functions service clock. Metrics go out as
CloudWatch embedded metric format in ``$POWERTOOLS_METRICS_NAMESPACE`` (one namespace per
workflow: the construct sets it), without dimensions.

Environment: ``POWERTOOLS_METRICS_NAMESPACE``, ``ACQUISITIONS`` (JSON: state name -> the lock
variable it assigns; default ``{"Lock.Acquire": "lock"}``), ``RELEASES`` (JSON: state name ->
the variable it assigns the hold's length to; default ``{"Lock.Release": "lockHeld"}``);
tracing turns itself off outside Lambda.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import CloudWatchLogsEvent, event_source
from aws_lambda_powertools.utilities.typing import LambdaContext

SERVICE = "lock-metrics"
#: Lock record / lock item fields (the same names as ``locked_workflow.state_machines.lock_protocol``; a test
#: keeps them equal - the protocol module is not deployed with this function).
ACQUIRED_AT = "acquiredAt"
REQUESTED_AT = "requestedAt"
FENCE = "fence"
OWNER = "owner"
WAIT_TIME = "WaitTime"
HOLD_TIME = "HoldTime"

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics()  # namespace: $POWERTOOLS_METRICS_NAMESPACE; no service dimension


@dataclass(frozen=True)
class Measurement:
    metric: str
    milliseconds: int
    execution_arn: str


DEFAULT_ACQUISITIONS = {"Lock.Acquire": "lock"}
DEFAULT_RELEASES = {"Lock.Release": "lockHeld"}


def measurement(message: str, *, acquisitions: Mapping[str, str], releases: Mapping[str, str]) -> Measurement | None:
    """The WaitTime or HoldTime one log line shows, or None (``acquisitions``: state name ->
    the lock variable it assigns; ``releases``: state name -> the hold's length variable)."""
    try:
        line = json.loads(message)
    except ValueError:
        return None
    if not isinstance(line, dict) or not isinstance(line.get("details"), dict):
        return None
    details, arn = line["details"], str(line.get("execution_arn", ""))
    name = details.get("name")
    if str(line.get("type", "")).endswith("StateExited") and isinstance(name, str) and name in acquisitions:
        lock = _json((details.get("assignedVariables") or {}).get(acquisitions[name]))
        if not isinstance(lock, dict) or lock.get("reentered"):
            return None
        if not str(lock.get(OWNER, "")).startswith(arn + "#"):
            return None  # a read of someone else's hold (a fair waiter's check), not an acquisition
        acquired, requested = lock.get(ACQUIRED_AT), lock.get(REQUESTED_AT)
        if _is_number(acquired) and _is_number(requested):
            return Measurement(WAIT_TIME, max(0, int(acquired) - int(requested)), arn)
        return None
    if str(line.get("type", "")).endswith("StateExited") and isinstance(name, str) and name in releases:
        held = _json((details.get("assignedVariables") or {}).get(releases[name]))
        if _is_number(held):
            return Measurement(HOLD_TIME, max(0, int(held)), arn)
    return None


def measurements(messages: Iterable[str], *, acquisitions: Mapping[str, str],
                 releases: Mapping[str, str]) -> list[Measurement]:
    found = (measurement(m, acquisitions=acquisitions, releases=releases) for m in messages)
    return [m for m in found if m is not None]


#: State name -> the lock variable it assigns (read once, at cold start).
ACQUISITIONS: Mapping[str, str] = json.loads(os.environ.get("ACQUISITIONS") or "null") or DEFAULT_ACQUISITIONS
#: State name -> the variable it assigns the hold's length to (read once, at cold start).
RELEASES: Mapping[str, str] = json.loads(os.environ.get("RELEASES") or "null") or DEFAULT_RELEASES


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_source(data_class=CloudWatchLogsEvent)
def handler(event: CloudWatchLogsEvent, context: LambdaContext) -> dict[str, int]:
    data = event.parse_logs_data()
    if data.message_type != "DATA_MESSAGE":  # CONTROL_MESSAGE: CloudWatch Logs checking the destination
        return {WAIT_TIME: 0, HOLD_TIME: 0}
    found = measurements(
        (e.message for e in data.log_events),
        acquisitions=ACQUISITIONS,
        releases=RELEASES,
    )
    for m in found:
        metrics.add_metric(name=m.metric, unit=MetricUnit.Milliseconds, value=m.milliseconds)
    counts = {name: sum(1 for m in found if m.metric == name) for name in (WAIT_TIME, HOLD_TIME)}
    logger.debug("measured", extra={"logGroup": data.log_group, "lines": len(data.log_events), **counts})
    return counts


def _json(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
