"""EventBridge delivery for the local runtime.

Two things bare moto does not do, both routed through moto's own rules (``EventPattern``
matching included):

* **Targets**: a rule whose target is a state machine starts an execution with the
  event, or with the target's ``Input`` / ``InputPath`` / ``InputTransformer`` applied.
  SQS targets get the same input handling; a target that cannot be delivered to goes to
  its ``DeadLetterConfig`` queue (an SQS ARN) when it has one. ``RetryPolicy`` is
  accepted and ignored: local deliveries fail for deterministic reasons only. A Lambda
  function target is invoked asynchronously (``InvocationType=Event``) through the runtime's
  in-process functions: the delivery succeeds once the function accepts the event, and
  the handler's own errors are the function's, not the rule's: Lambda retries them
  (``patches/async_invoke_retries``).
* **Execution status events**: when an execution of a Standard workflow ends
  (SUCCEEDED, FAILED, TIMED_OUT, ABORTED) an ``aws.states`` / ``Step Functions Execution
  Status Change`` event is put on the default bus of its account and region (Express
  workflows emit none, as on AWS).
* **At-least-once delivery, as a fault to inject.** EventBridge delivers an event to a
  target at least once, not exactly once: a delivery whose acknowledgment is lost is
  retried, by default for up to 24 hours and 185 times
  (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-retry-policy.html), and
  an AWS service whose event EventBridge did not accept retries it for up to 24 hours
  (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-service-event-delivery-level.html).
  A target can therefore receive the same event twice, or again long after it acted on
  it - e.g. a janitor's ``ABORTED`` event arriving after the execution was redriven and
  holds its lock again. ``duplicate_deliveries`` and ``late_copies_after`` make the router
  do that (to status-change events by default, to any routed event with
  ``delivery_fault_filter``); :meth:`EventRouter.deliver_late_copies` hands the held-back
  copies over when the test says so.

:class:`EventRouter` holds the switches tests flip (drop status events: "the janitor's
event was lost"; duplicate or late copies) and a log of what was delivered. The moto
hooks live in ``patches/eventbridge_targets.py`` and ``patches/execution_status_events.py``.

Proof: ``tests/local/test_events_routing.py``.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from jsonpath_ng.ext import parse as parse_json_path

LOG = logging.getLogger(__name__)

STATUS_SOURCE = "aws.states"
STATUS_DETAIL_TYPE = "Step Functions Execution Status Change"
#: Statuses that end an execution (each one emits a status event).
TERMINAL_STATUSES = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"})

_MISSING = object()


# ------------------------------------------------------------------------------------
# Target input: Input, InputPath, InputTransformer
# ------------------------------------------------------------------------------------


def _json_path_value(path: str, document: Any) -> Any:
    matches = parse_json_path(path).find(document)
    if not matches:
        return _MISSING
    return matches[0].value


def apply_input_transformer(transformer: dict[str, Any], event: dict[str, Any]) -> str:
    """The text an ``InputTransformer`` makes of ``event``, like EventBridge.

    A placeholder inside a JSON string gets the value's text (JSON-escaped); a placeholder
    outside quotes gets the value as JSON. Missing paths give ``null`` (an empty string
    inside quotes). ``<aws.events.event.json>`` and the other reserved names work too.
    """
    paths = transformer.get("InputPathsMap") or {}
    values: dict[str, Any] = {name: _json_path_value(path, event) for name, path in paths.items()}
    values.setdefault("aws.events.event", event)
    values.setdefault("aws.events.event.json", event)
    values.setdefault("aws.events.rule-arn", event.get("rule-arn", _MISSING))
    values.setdefault("aws.events.rule-name", event.get("rule-name", _MISSING))
    values.setdefault("aws.events.event.ingestion-time", event.get("time", _MISSING))
    template = transformer.get("InputTemplate")
    if template is None:
        return json.dumps(event)

    out: list[str] = []
    in_string = False
    i = 0
    while i < len(template):
        char = template[i]
        if char == "\\" and in_string:
            out.append(template[i : i + 2])
            i += 2
            continue
        if char == '"':
            in_string = not in_string
        elif char == "<":
            match = re.match(r"<([A-Za-z0-9_.\-]+)>", template[i:])
            if match and match.group(1) in values:
                value = values[match.group(1)]
                out.append(_placeholder_text(value, in_string))
                i += match.end()
                continue
        out.append(char)
        i += 1
    return "".join(out)


def _placeholder_text(value: Any, in_string: bool) -> str:
    if value is _MISSING:
        return "" if in_string else "null"
    if in_string:
        text = value if isinstance(value, str) else json.dumps(value)
        return json.dumps(text)[1:-1]
    return json.dumps(value)


def target_input(target: dict[str, Any], event: dict[str, Any]) -> str:
    """The payload EventBridge sends to ``target`` for ``event`` (a JSON text, usually)."""
    if "Input" in target:
        return target["Input"]
    if "InputPath" in target:
        value = _json_path_value(target["InputPath"], event)
        return json.dumps(None if value is _MISSING else value)
    if "InputTransformer" in target:
        return apply_input_transformer(target["InputTransformer"], event)
    return json.dumps(event)


def delivered_event(moto_event: dict[str, Any]) -> dict[str, Any]:
    """The event as EventBridge delivers it (moto keeps ``time`` as epoch seconds)."""
    event = {key: value for key, value in moto_event.items() if key != "ingestion-time"}
    when = event.get("time")
    if isinstance(when, (int, float)):
        event["time"] = datetime.datetime.fromtimestamp(when, tz=datetime.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )
    return event


# ------------------------------------------------------------------------------------
# Router
# ------------------------------------------------------------------------------------


def is_status_event(event: dict[str, Any]) -> bool:
    """True for a Step Functions Execution Status Change event (the default fault scope)."""
    return event.get("source") == STATUS_SOURCE and event.get("detail-type") == STATUS_DETAIL_TYPE


@dataclass
class Delivery:
    """One attempt to hand an event to a target.

    ``kind``: ``"first"``, ``"duplicate"`` (an extra copy delivered at once) or ``"late"``
    (a held-back copy, see :attr:`EventRouter.late_copies_after`).
    """

    rule_arn: str
    target_arn: str
    input: str
    ok: bool
    result: str | None = None  # execution ARN / message id, or the error
    dead_lettered: bool = False
    kind: str = "first"


@dataclass(eq=False)
class LateCopy:
    """A copy of a delivered event, held back to be delivered again later (compared by identity)."""

    rule: Any  # moto's Rule
    target: dict[str, Any]
    event: dict[str, Any]
    timer: threading.Timer | None = None


@dataclass
class EventRouter:
    """Switches and log of the local EventBridge delivery.

    ``emit_status_events``: put an execution status event on the default bus when an
    execution ends (default True). ``status_event_filter``: when set, a status event is
    emitted only if it returns True for the event's ``detail`` - fault injection for one
    execution or one status. Dropped events are kept in ``dropped_status_events``.

    Delivery faults (at least once, as EventBridge delivers), for the events
    ``delivery_fault_filter`` selects (default :func:`is_status_event`; it gets the event
    as delivered, e.g. ``lambda event: True`` for every routed event):

    * ``duplicate_deliveries``: this many extra copies of each delivery to a target, at
      once after the first (default 0);
    * ``late_copies_after``: one more copy of each delivery, held back: ``None`` (default)
      none; a number of seconds: a timer delivers it then; ``math.inf``: it waits in
      ``late_copies`` until :meth:`deliver_late_copies`, which also delivers the timed
      ones still pending.

    Every attempt is logged in ``deliveries`` with its ``kind``.
    """

    emit_status_events: bool = True
    status_event_filter: Callable[[dict[str, Any]], bool] | None = None
    duplicate_deliveries: int = 0
    late_copies_after: float | None = None
    delivery_fault_filter: Callable[[dict[str, Any]], bool] = is_status_event
    deliveries: list[Delivery] = field(default_factory=list)
    late_copies: list[LateCopy] = field(default_factory=list)
    status_events: list[dict[str, Any]] = field(default_factory=list)
    dropped_status_events: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _closed: bool = field(default=False, repr=False)

    # -- targets ----------------------------------------------------------------------

    def deliver(self, rule: Any, target: dict[str, Any], event: dict[str, Any]) -> Delivery:
        """Deliver ``event`` to one ``target`` of a moto ``Rule`` (states, SQS or Lambda),
        plus the duplicate and late copies the delivery faults ask for; returns the first
        attempt."""
        duplicates, late_after = self.duplicate_deliveries, self.late_copies_after
        faulted = (duplicates > 0 or late_after is not None) and self.delivery_fault_filter(event)
        first = self._deliver_once(rule, target, event, "first")
        if faulted:
            for _ in range(duplicates):
                self._deliver_once(rule, target, event, "duplicate")
            if late_after is not None:
                self._hold_late_copy(LateCopy(rule, dict(target), event), late_after)
        return first

    def deliver_late_copies(self) -> list[Delivery]:
        """Deliver every held-back copy now (timed ones too, cancelling their timers)."""
        with self._lock:
            pending, self.late_copies = self.late_copies, []
        for late in pending:
            if late.timer is not None:
                late.timer.cancel()
        return [self._deliver_once(late.rule, late.target, late.event, "late") for late in pending]

    def close(self) -> None:
        """Drop the held-back copies and stop their timers, and from now on drop the status
        events of this cloud's executions that end late (the cloud is going away)."""
        with self._lock:
            self._closed = True
            pending, self.late_copies = self.late_copies, []
        for late in pending:
            if late.timer is not None:
                late.timer.cancel()

    def _hold_late_copy(self, late: LateCopy, after: float) -> None:
        if math.isfinite(after):
            late.timer = threading.Timer(max(0.0, after), self._deliver_when_due, args=(late,))
            late.timer.daemon = True
        with self._lock:
            self.late_copies.append(late)
        if late.timer is not None:
            late.timer.start()

    def _deliver_when_due(self, late: LateCopy) -> None:
        with self._lock:
            if late not in self.late_copies:  # delivered on demand, or dropped by close()
                return
            self.late_copies.remove(late)
        self._deliver_once(late.rule, late.target, late.event, "late")

    def _deliver_once(self, rule: Any, target: dict[str, Any], event: dict[str, Any], kind: str) -> Delivery:
        arn = target["Arn"]
        payload = target_input(target, event)
        service = arn.split(":")[2]
        try:
            if service == "states":
                result = self._start_execution(arn, payload)
            elif service == "sqs":
                result = self._send_to_queue(arn, payload, target.get("SqsParameters", {}).get("MessageGroupId"))
            elif service == "lambda":
                result = self._invoke_function(arn, payload)
            else:  # pragma: no cover - callers only route states, sqs and lambda here
                raise ValueError(f"unsupported target {arn}")
            delivery = Delivery(rule.arn, arn, payload, ok=True, result=result, kind=kind)
        except Exception as error:  # noqa: BLE001 - any failure is a failed invocation
            LOG.warning("EventBridge target %s of rule %s failed: %s", arn, rule.arn, error)
            delivery = Delivery(rule.arn, arn, payload, ok=False, result=f"{type(error).__name__}: {error}", kind=kind)
            dlq = (target.get("DeadLetterConfig") or {}).get("Arn")
            if dlq:
                self._send_to_queue(
                    dlq,
                    json.dumps(event),
                    None,
                    attributes={
                        "RULE_ARN": rule.arn,
                        "TARGET_ARN": arn,
                        "ERROR_CODE": type(error).__name__,
                        "ERROR_MESSAGE": str(error)[:256] or type(error).__name__,
                    },
                )
                delivery.dead_lettered = True
        with self._lock:
            self.deliveries.append(delivery)
        return delivery

    @staticmethod
    def _start_execution(state_machine_arn: str, payload: str) -> str:
        from moto.stepfunctions.responses import get_backend

        _, _, _, region, account, *_ = state_machine_arn.split(":")
        json.loads(payload)  # StartExecution rejects input that is not JSON
        execution = get_backend(account, region).start_execution(
            state_machine_arn, name=None, execution_input=payload
        )
        return execution.execution_arn

    @staticmethod
    def _invoke_function(function_arn: str, payload: str) -> str:
        """Invoke a Lambda target asynchronously, as EventBridge does: the event is handed to
        the function (its in-process handler runs on a thread, see ``patches/lambda_in_process``)
        and the delivery is done; what the handler then does is the function's business
        (https://docs.aws.amazon.com/eventbridge/latest/userguide/rule-dlq.html: the rule's
        DLQ receives events that could not be delivered, not the target's own failures).
        An unknown function fails the delivery."""
        from moto.awslambda.models import lambda_backends

        _, _, _, region, account, _, name = function_arn.split(":")[:7]
        function = lambda_backends[account][region].get_function(name)
        function.invoke(payload, {"X-Amz-Invocation-Type": "Event"}, {})
        return function.function_arn

    @staticmethod
    def _send_to_queue(
        queue_arn: str,
        body: str,
        group_id: str | None,
        attributes: dict[str, str] | None = None,
    ) -> str:
        from moto.sqs import sqs_backends

        _, _, _, region, account, name = queue_arn.split(":", 5)
        message_attributes = {
            key: {"DataType": "String", "StringValue": value} for key, value in (attributes or {}).items()
        }
        message = sqs_backends[account][region].send_message(
            queue_name=name,
            message_body=body,
            message_attributes=message_attributes or None,
            group_id=group_id,
            deduplication_id=None,
        )
        return message.id

    # -- execution status events --------------------------------------------------------

    def execution_ended(self, execution: Any) -> None:
        """Put the status event of a finished moto parser ``Execution`` on the default bus.

        Express workflows emit no status events, as on AWS. Once this router is closed (its
        cloud closed), the event is dropped: an execution left running must not emit into
        whatever cloud is open when it ends.
        """
        if str(getattr(execution.sm_type, "value", execution.sm_type)) == "EXPRESS":
            return
        detail = status_event_detail(execution)
        if self._closed or not self.emit_status_events or (
            self.status_event_filter is not None and not self.status_event_filter(detail)
        ):
            with self._lock:
                self.dropped_status_events.append(detail)
            return
        with self._lock:
            self.status_events.append(detail)
        from moto.events.models import events_backends

        events_backends[execution.account_id][execution.region_name].put_events(
            [
                {
                    "Source": STATUS_SOURCE,
                    "DetailType": STATUS_DETAIL_TYPE,
                    "Detail": json.dumps(detail),
                    "Resources": [execution.exec_arn],
                }
            ]
        )


def _epoch_ms(value: datetime.datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def status_event_detail(execution: Any) -> dict[str, Any]:
    """``detail`` of a Step Functions Execution Status Change event."""
    status = execution.exec_status.value if execution.exec_status is not None else None
    output = None
    if status == "SUCCEEDED":
        output = json.dumps(execution.output, separators=(",", ":"), default=str)
    state_machine = execution.state_machine
    return {
        "executionArn": execution.exec_arn,
        "stateMachineArn": getattr(state_machine, "source_arn", None) or state_machine.arn,
        "name": execution.name,
        "status": status,
        "startDate": _epoch_ms(execution.start_date),
        "stopDate": _epoch_ms(execution.stop_date),
        "redriveCount": getattr(execution, "_local_redrive_count", 0),
        "input": json.dumps(execution.input_data, separators=(",", ":"), default=str),
        "output": output,
        "inputDetails": {"included": True},
        "outputDetails": {"included": True} if output is not None else None,
        "error": execution.error,
        "cause": execution.cause,
    }
