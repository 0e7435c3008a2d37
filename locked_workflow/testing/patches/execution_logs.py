"""Execution logs: a state machine that logs to CloudWatch Logs gets its log lines.

Gap (moto 5.2.1): a state machine's ``loggingConfiguration`` is stored and never used - every
execution starts without a logging session (``cloud_watch_logging_session=None``), so its log
group stays empty. (moto's own, unused, session would not help: it writes one stream per state
machine, ``event_timestamp`` as a date, no ``redrive_count``.) The local deployer drops a
template's ``LoggingConfiguration`` as well.

Fix: every execution of a state machine whose logging configuration names a CloudWatch Logs
log group gets a session that writes each history event, as it is recorded, as one line in
the service's format::

    {"id": "7", "type": "TaskSucceeded",
     "details": {"resourceType": "dynamodb", "resource": "updateItem", "output": "{...}",
                 "outputDetails": {"truncated": false}},
     "previous_event_id": "6", "event_timestamp": "1713959670680",
     "execution_arn": "arn:aws:states:...:execution:<machine>:<name>", "redrive_count": "0"}

* ``details`` holds the fields the history event's details have (``name``/``input``/``output``
  for states, ``resourceType``/``resource``/``parameters``/``output`` for tasks, ``error``/
  ``cause`` for failures, ``assignedVariables`` for a state that assigned some); the
  top-level values are strings, as the service writes them;
* ``level`` ``ALL``/``ERROR``/``FATAL``/``OFF`` selects the event types as the service does;
  ``includeExecutionData: false`` leaves out the data (input, output, task parameters,
  assigned variables and their ``*Details``);
* one stream per execution, ``states/<machine>/<YYYY-MM-DD-HH-MM>/<8 hex digits>``; the log
  group and the stream are created when the first line is written (the deployer does not
  create log groups);
* ``redrive_count`` follows ``ExecutionRedriven``; events a stopped run records late stay out
  of the log as they stay out of the history;
* the deployer's state machine handler also applies the template's ``LoggingConfiguration``.

The lines are in moto's CloudWatch Logs: ``cloud.client("logs").filter_log_events(...)``. No
subscription filter or metric filter runs on them offline (the deployer skips both).

AWS: a state machine with a ``loggingConfiguration`` logs its execution history events to
the CloudWatch Logs group it names, filtered by ``level`` and with or without
``includeExecutionData``
(https://docs.aws.amazon.com/step-functions/latest/dg/cloudwatch-log-level.html,
https://docs.aws.amazon.com/step-functions/latest/apireference/API_LoggingConfiguration.html).

Proof: ``tests/local/test_patch_execution_logs.py``.
"""

from __future__ import annotations

import datetime
import json
import threading
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from moto.stepfunctions.parser.api import HistoryEventType, LogLevel
from moto.stepfunctions.parser.asl.eval.event.logging import is_logging_enabled_for
from moto.stepfunctions.parser.backend.execution import Execution

from locked_workflow.testing.seams import patch_attribute, patch_item

if TYPE_CHECKING:
    from locked_workflow.testing.function_logs import FunctionLog

#: Detail fields that are execution data: left out with ``includeExecutionData: false``.
DATA_FIELDS = (
    "input",
    "inputDetails",
    "output",
    "outputDetails",
    "parameters",
    "assignedVariables",
    "assignedVariablesDetails",
)

#: moto's log groups and streams are not thread-safe: creating a group or a stream takes
#: ``_CREATE``; appending to a stream takes the one of ``_STREAM_LOCKS`` its name hashes to (a
#: stream's events are its own; one lock for every line of every execution made the executions
#: that run together queue behind whichever thread was preempted while holding it).
_CREATE = threading.Lock()
_STREAM_LOCKS = tuple(threading.Lock() for _ in range(64))


@dataclass(frozen=True)
class LogTarget:
    """Where and what a state machine logs (from its logging configuration)."""

    account_id: str
    region: str
    log_group: str
    level: str
    include_execution_data: bool

    @classmethod
    def of(cls, configuration: Mapping[str, Any] | None) -> "LogTarget | None":
        """The target of an API-shaped ``loggingConfiguration``; None when nothing is logged."""
        if not configuration:
            return None
        level = str(configuration.get("level") or "OFF")
        destinations = configuration.get("destinations") or []
        if level == "OFF" or len(destinations) != 1:
            return None
        arn = ((destinations[0] or {}).get("cloudWatchLogsLogGroup") or {}).get("logGroupArn") or ""
        parts = arn.split(":")  # arn:aws:logs:<region>:<account>:log-group:<name>[:*]
        if len(parts) < 7 or parts[2] != "logs" or parts[5] != "log-group":
            return None
        return cls(
            account_id=parts[4],
            region=parts[3],
            log_group=parts[6],
            level=level,
            include_execution_data=bool(configuration.get("includeExecutionData", False)),
        )


class ExecutionLog:
    """The logging session of one execution (what moto's event manager publishes to)."""

    def __init__(self, execution: Execution, target: LogTarget) -> None:
        self.execution_arn = execution.exec_arn
        self.target = target
        # read by moto's event manager before it calls publish_history_log
        self.configuration = type("Configuration", (), {"include_execution_data": target.include_execution_data})()
        started = execution.start_date or datetime.datetime.now(tz=datetime.timezone.utc)
        self.log_stream = (
            f"states/{execution.state_machine.name}/{started:%Y-%m-%d-%H-%M}/{uuid.uuid4().hex[:8]}"
        )
        self.redrive_count = 0

    def log_level_filter(self, history_event_type: HistoryEventType) -> bool:
        return bool(is_logging_enabled_for(LogLevel(self.target.level), history_event_type))

    def publish_history_log(self, history_log: Mapping[str, Any]) -> None:
        event_type = _text(history_log["type"])
        details = dict(history_log.get("details") or {})  # top-level fields dropped below; nothing else changes
        if not self.target.include_execution_data:
            for field in DATA_FIELDS:
                details.pop(field, None)
        if event_type == HistoryEventType.ExecutionRedriven.value:
            self.redrive_count = int(details.get("redriveCount", self.redrive_count + 1))
        timestamp_ms = _epoch_ms(history_log["event_timestamp"])
        line = {
            "id": str(history_log["id"]),
            "type": event_type,
            "details": details,
            "previous_event_id": str(history_log["previous_event_id"]),
            "event_timestamp": str(timestamp_ms),
            "execution_arn": self.execution_arn,
            "redrive_count": str(self.redrive_count),
        }
        write_line(self.target, self.log_stream, timestamp_ms, json.dumps(line, default=_text))


def write_line(target: "LogTarget | FunctionLog", log_stream: str, timestamp_ms: int, message: str) -> None:
    """Append one log event to ``target``'s group and ``log_stream``, creating them if needed
    (a function's output too: :mod:`locked_workflow.testing.function_logs`)."""
    from moto.logs.models import logs_backends

    backend = logs_backends[target.account_id][target.region]
    group = backend.groups.get(target.log_group)
    if group is None or log_stream not in group.streams:
        with _CREATE:
            if target.log_group not in backend.groups:
                backend.create_log_group(target.log_group, tags={})
            group = backend.groups[target.log_group]
            if log_stream not in group.streams:
                group.create_log_stream(log_stream)
    with _STREAM_LOCKS[hash((target.account_id, target.region, target.log_group, log_stream)) % len(_STREAM_LOCKS)]:
        backend.put_log_events(target.log_group, log_stream, [{"timestamp": timestamp_ms, "message": message}])


def _text(value: Any) -> str:
    return str(getattr(value, "value", value))


def _epoch_ms(timestamp: Any) -> int:
    if isinstance(timestamp, datetime.datetime):
        moment = timestamp
    else:  # moto records "2024-04-24T11:54:30.680Z"
        moment = datetime.datetime.fromisoformat(str(timestamp).replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return int(round(moment.timestamp() * 1000))


def api_logging_configuration(template_value: Mapping[str, Any]) -> dict[str, Any]:
    """A template's ``LoggingConfiguration`` (resolved) in the API's shape."""
    return {
        "level": template_value.get("Level", "OFF"),
        "includeExecutionData": bool(template_value.get("IncludeExecutionData", False)),
        "destinations": [
            {"cloudWatchLogsLogGroup": {"logGroupArn": d["CloudWatchLogsLogGroup"]["LogGroupArn"]}}
            for d in template_value.get("Destinations", [])
            if (d.get("CloudWatchLogsLogGroup") or {}).get("LogGroupArn")
        ],
    }


def _with_logging_session(original):  # type: ignore[no-untyped-def]
    def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        original(self, *args, **kwargs)
        if self._cloud_watch_logging_session is None:
            machine = self.state_machine
            configuration = getattr(machine, "loggingConfiguration", None) or getattr(machine, "logging_config", None)
            target = LogTarget.of(configuration)
            if target is not None:
                self._cloud_watch_logging_session = ExecutionLog(self, target)

    return __init__


def _deploy_with_logging(original):  # type: ignore[no-untyped-def]
    def state_machine(deployer, logical_id, resource, props, physical, deployment):  # type: ignore[no-untyped-def]
        created = original(deployer, logical_id, resource, props, physical, deployment)
        configuration = props.get("LoggingConfiguration")
        if configuration:
            arn = (created or physical).ref
            deployer.client("stepfunctions").update_state_machine(
                stateMachineArn=arn, loggingConfiguration=api_logging_configuration(configuration)
            )
        return created

    return state_machine


def apply(stack: ExitStack) -> None:
    from locked_workflow.testing.deployer import Deployer

    patch_attribute(stack, Execution, "__init__", _with_logging_session(Execution.__init__), by=__name__)
    kind = "AWS::StepFunctions::StateMachine"
    patch_item(stack, Deployer._HANDLERS, kind, _deploy_with_logging(Deployer._HANDLERS[kind]), by=__name__,
               label="Deployer._HANDLERS")
