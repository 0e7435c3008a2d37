"""An execution's history for the test harness, without moto's response serializer.

``LocalCloud.history`` (and so every ``ExecutionResult``) reads an execution's whole history.
Through the API, moto builds the response with its generic serializer (each member of the
~70-member ``HistoryEvent`` shape looked up under several aliases: about 3 ms an event on this
project's machines, 112 ms for a 36-event run), and botocore parses it back. Here the backend's
events (what that response is built from: the same method, the same objects) are written as the
JSON the ``json`` protocol carries - timestamps as moto writes them, epoch seconds with
milliseconds - and parsed by botocore's parser for the operation's output shape, as boto3 parses
the real response. Only the harness reads this way; code under test (the janitor's history
reads, a user's boto3 client) goes through the API as before.
"""

from __future__ import annotations

import calendar
import datetime
import json
from typing import Any

from botocore import parsers
from botocore.utils import parse_to_aware_datetime

_OPERATION = "GetExecutionHistory"


def _aware(value: Any) -> datetime.datetime:
    """``value`` as botocore's ``parse_to_aware_datetime`` reads it. moto writes
    ``2024-04-24T11:54:30.680Z`` (``iso_8601_datetime_with_milliseconds``), which
    ``datetime.fromisoformat`` reads to the same instant ~30 times faster than dateutil's
    parser (the cost of the harness's history reads: 58 % of ``wait_all`` in a burst of 60 runs);
    any other form goes to botocore's function."""
    if isinstance(value, str) and len(value) == 24 and value[10] == "T" and value.endswith("Z"):
        try:
            return datetime.datetime.fromisoformat(value[:-1]).replace(tzinfo=datetime.timezone.utc)
        except ValueError:
            pass
    return parse_to_aware_datetime(value)


def _epoch(value: Any) -> int | float:
    """An event's ``timestamp`` as moto's ``json`` protocol serializer writes it
    (``unixtimestamp``): the backend keeps an ISO 8601 string (or a datetime); a naive time is
    UTC; milliseconds are kept, finer digits truncated."""
    aware = _aware(value)
    seconds = calendar.timegm(aware.timetuple())
    return seconds + (aware.microsecond // 1000) / 1000.0 if aware.microsecond else seconds


def _wire(event: dict[str, Any]) -> dict[str, Any]:
    """One backend event as it goes on the wire (only ``timestamp`` is a timestamp in the
    ``HistoryEvent`` shape; its other members are strings, numbers and structures of them)."""
    return {**event, "timestamp": _epoch(event["timestamp"])} if "timestamp" in event else dict(event)


def parsed_history(client: Any, backend: Any, execution_arn: str) -> list[dict[str, Any]] | None:
    """The events of ``execution_arn`` as ``client.get_execution_history`` returns them (all
    pages), or ``None`` when the backend does not know the execution (the caller asks the API,
    whose error is the one to raise)."""
    try:
        output = backend.get_execution_history(execution_arn)
    except Exception:  # noqa: BLE001 - the API call raises the client's own error for it
        return None
    try:
        body = json.dumps({"events": [_wire(event) for event in output["events"]]}).encode()
    except (TypeError, ValueError):  # a value with no JSON form here: the API path has one
        return None
    operation = client.meta.service_model.operation_model(_OPERATION)
    parser = parsers.create_parser(client.meta.service_model.protocol)
    parsed = parser.parse({"status_code": 200, "headers": {}, "body": body}, operation.output_shape)
    return parsed["events"]
