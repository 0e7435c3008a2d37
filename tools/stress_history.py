"""Reading a stress run's execution history: its timeline of lock attempts, entries and ends.

What the campaign and its judge know of an execution comes from here: :func:`timeline` (per
stored key: attempts, entries, parks), :func:`waits_of` (the waits it shows), :func:`trail`
(its last states, for diagnostics) and :func:`run_progress` (for a stop that waits for a
moment of the run).
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterator

from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines.errors import CONDITIONAL_CHECK_FAILED_CODE
from tools.stress_plan import Wait
from tools.stress_stack import COALESCE_NAMESPACE, RATE_NAMESPACE

#: Writes that try to take a lock, or to queue for it (a release, a retire or a dequeue does not).
_ATTEMPTS = (protocol.ACQUIRE.update, fair.FAST_ACQUIRE.update, fair.ENQUEUE.update, fair.PARK.update)
_ENDS = {"ExecutionSucceeded", "ExecutionFailed", "ExecutionAborted", "ExecutionTimedOut"}


def event_ms(timestamp: Any) -> int:
    return int(timestamp.timestamp() * 1000)


#: Namespaces of the keys of their own (by key letter); every other key lives in ``x``.
NAMESPACES = {"C": "c", "N": COALESCE_NAMESPACE, "T": RATE_NAMESPACE}


def stored_key(probe_key: str) -> str:
    """The lock item of a probe item: child keys (``C...``) live in namespace ``c``, the
    coalescing shape's (``N...``) in ``n``, the rate shape's (``T...``) in ``r``."""
    return protocol.namespaced(NAMESPACES.get(probe_key[:1], "x"), probe_key)


def _lock_writes(parameters: dict) -> Iterator[tuple[str, str]]:
    """(stored key, update expression) of each write of a DynamoDB task's parameters."""
    updates = [parameters] if "UpdateExpression" in parameters else [
        entry.get("Update", {}) for entry in parameters.get("TransactItems", [])
    ]
    for update in updates:
        key = (update.get("Key") or {}).get(protocol.KEY_ATTRIBUTE, {}).get("S")
        if key and update.get("UpdateExpression"):
            yield key, update["UpdateExpression"]


def timeline(history: list[dict]) -> list[tuple[int, str, str]]:
    """``(ms, kind, stored key)`` from an execution's history: ``attempt`` (a write that tries
    to take or queue for the lock), ``enter`` (the probe scheduled on its key), ``park`` (a
    fair waiter's park write); with no key: ``end`` (the execution ended), ``redriven``,
    ``work failed: <error>`` (a probe task failed)."""
    out = []
    for event in history:
        ms = event_ms(event["timestamp"])
        if event["type"] in _ENDS:
            out.append((ms, "end", ""))
        elif event["type"] == "ExecutionRedriven":
            out.append((ms, "redriven", ""))
        elif event["type"] == "TaskFailed" and event["taskFailedEventDetails"].get("resourceType") == "lambda":
            out.append((ms, f"work failed: {event['taskFailedEventDetails'].get('error')}", ""))
        if event["type"] != "TaskScheduled":
            continue
        details = event["taskScheduledEventDetails"]
        parameters = json.loads(details.get("parameters") or "{}")
        if details.get("resourceType") == "lambda":
            key = (parameters.get("Payload") or {}).get("key")
            if isinstance(key, str):
                out.append((ms, "enter", stored_key(key)))
        elif details.get("resourceType") in ("dynamodb", "aws-sdk:dynamodb"):  # the fair park: aws-sdk
            for key, update in _lock_writes(parameters):
                if update == fair.PARK.update:
                    out.append((ms, "park", key))
                elif update.startswith(_ATTEMPTS):
                    out.append((ms, "attempt", key))
    return out


def trail(history: list[dict], last: int = 12) -> list[str]:
    """The ``last`` states an execution entered, each with its second since the start, and
    how it ended (what an unexpected outcome's diagnostics print)."""
    if not history:
        return []
    start = event_ms(history[0]["timestamp"])
    out = []
    for event in history:
        if event["type"].endswith("StateEntered"):
            out.append(f"{(event_ms(event['timestamp']) - start) / 1000:.1f}s {event['stateEnteredEventDetails']['name']}")
        elif event["type"] in _ENDS or event["type"] == "ExecutionRedriven":
            out.append(f"{(event_ms(event['timestamp']) - start) / 1000:.1f}s {event['type']}")
    return out[-last:]


def waits_of(events: list[tuple[int, str, str]]) -> list[Wait]:
    """The waits an execution's timeline shows, per key: from its first attempt since its last
    entry (or end) to its next entry (or end). Concurrent branches on one key blur this only
    towards fewer waits (a wait whose first attempt came before a sibling's entry is not
    counted), so the handoff check reads no wait that did not happen."""
    waits: list[Wait] = []
    since: dict[str, tuple[int, bool]] = {}
    for ms, kind, key in sorted(events, key=lambda event: event[0]):
        if kind == "end":
            waits += [Wait(k, start, ms, parked) for k, (start, parked) in since.items()]
            since.clear()
        elif kind == "enter":
            if key in since:
                start, parked = since.pop(key)
                waits.append(Wait(key, start, ms, parked))
        elif kind in ("attempt", "park") and key not in since:
            since[key] = (ms, kind == "park")
        elif kind == "park":
            since[key] = (since[key][0], True)
    return waits


def run_progress(history: list[dict]) -> tuple[int, int, bool]:
    """(acquire attempts so far, refused writes, whether the run has entered the probe)."""
    events = timeline(history)
    refused = sum(
        event["type"] == "TaskFailed"
        and event["taskFailedEventDetails"].get("error", "").endswith(CONDITIONAL_CHECK_FAILED_CODE)
        for event in history
    )
    return sum(kind == "attempt" for _, kind, _ in events), refused, any(kind == "enter" for _, kind, _ in events)


def now_ms() -> int:
    return int(time.time() * 1000)
