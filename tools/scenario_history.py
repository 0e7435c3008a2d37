"""Reading a scenario's execution histories (pure): critical sections, transitions, DynamoDB calls.

* :func:`critical_sections` - the protected work of one execution, as the history saw it:
  the protected state's ``…StateEntered`` .. ``…StateExited`` timestamps, plus the lock the
  run held (``$lock``: key, fence, ``acquiredAt`` on the service clock), when the acquire
  write was acknowledged, and when the release write was sent and acknowledged.
* :func:`transition_count`, :func:`dynamodb_calls` - what an execution costs: state
  transitions (``…StateEntered`` events plus retry attempts, which AWS bills as
  transitions) and DynamoDB requests made by the state machine (every ``TaskScheduled`` on a
  DynamoDB resource, failed conditional writes included).

Why the protected state's own events define a critical section: the work runs strictly
inside the lock's hold (after the acquire write was acknowledged, before the release write
was sent), so with a working lock these intervals can never overlap - and without the lock
they are exactly the windows in which two read-modify-writes interleave. ``$lock.acquiredAt``
(the service clock's ``$millis()``, evaluated just before the winning acquire write) is
kept next to them but not used for the overlap check, the waits or the handoff gaps: a
waiter may evaluate it a few milliseconds before the previous holder's release lands
(seen here: -4 ms "gaps"), which would look like an overlap that never was. Waits and gaps
use the acquire's acknowledgement and the release's dispatch instead.
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

#: Suffixes of the lock's release states (``<section id>.Release`` / ``.ReleaseAfterError``;
#: a fair lock's handoff: the write that passes the lock on - ``.Release.Grant`` to the next
#: waiter, ``.Release.Release`` when nobody waits).
RELEASE_SUFFIXES = (".Release", ".ReleaseAfterError", ".Release.Grant", ".Release.GrantPoller",
                    ".ReleaseAfterError.Grant", ".ReleaseAfterError.Release")
#: Task history events that start one attempt of a task (a second one within a state is a retry).
_SCHEDULED = ("TaskScheduled", "LambdaFunctionScheduled", "ActivityScheduled")


def epoch_ms(timestamp: Any) -> int:
    """Epoch milliseconds of a history timestamp (datetime, or a number of ms already)."""
    if isinstance(timestamp, _dt.datetime):
        return round(timestamp.timestamp() * 1000)
    return int(timestamp)


def _entered_name(event: Mapping[str, Any]) -> str | None:
    if event["type"].endswith("StateEntered"):
        return (event.get("stateEnteredEventDetails") or {}).get("name")
    return None


def _exited_name(event: Mapping[str, Any]) -> str | None:
    if event["type"].endswith("StateExited"):
        return (event.get("stateExitedEventDetails") or {}).get("name")
    return None


def _state_entry(event: Mapping[str, Any], by_id: Mapping[Any, Mapping[str, Any]]) -> Any:
    """The id of the ``…StateEntered`` event that ``event``'s ``previousEventId`` chain reaches."""
    seen = 0
    while event is not None and seen <= len(by_id):
        if _entered_name(event) is not None:
            return event["id"]
        event = by_id.get(event.get("previousEventId"))
        seen += 1
    return None


@dataclass(frozen=True)
class Transitions:
    """State transitions of one execution: states entered, plus retry attempts."""

    entered: int
    retries: int

    @property
    def billed(self) -> int:
        return self.entered + self.retries


def transition_count(history: Sequence[Mapping[str, Any]]) -> Transitions:
    """``…StateEntered`` events, plus every task attempt after the first within one state entry.

    AWS bills each retry attempt as a state transition; in the history a retry is a further
    ``TaskScheduled`` (``LambdaFunctionScheduled``…) before the state is exited. Parallel
    branches interleave their events, so an attempt belongs to the state entry its
    ``previousEventId`` chain leads back to (a history without event ids: the latest entry).
    """
    by_id = {event["id"]: event for event in history if "id" in event}
    entered = retries = 0
    attempts: dict[Any, int] = {}
    latest: Any = None
    for event in history:
        if _entered_name(event) is not None:
            entered += 1
            latest = event.get("id", object())
        elif event["type"] in _SCHEDULED:
            entry = _state_entry(event, by_id) if by_id else latest
            attempts[entry] = attempts.get(entry, 0) + 1
            if attempts[entry] > 1:
                retries += 1
    return Transitions(entered=entered, retries=retries)


@dataclass(frozen=True)
class DynamoDBCalls:
    total: int
    failed: int  # of which failed (conditional check failures and any other error)


def dynamodb_calls(history: Sequence[Mapping[str, Any]]) -> DynamoDBCalls:
    """DynamoDB requests made by the state machine itself (not by Lambdas it invokes).

    Every ``TaskScheduled`` on a DynamoDB resource (``dynamodb`` optimized integrations and
    ``aws-sdk:dynamodb``) is one request; a ``TaskFailed`` on one is a failed request.
    """
    total = failed = 0
    for event in history:
        details = event.get("taskScheduledEventDetails") or event.get("taskFailedEventDetails")
        if not details or "dynamodb" not in details.get("resourceType", "").lower():
            continue
        if event["type"] == "TaskScheduled":
            total += 1
        elif event["type"] == "TaskFailed":
            failed += 1
    return DynamoDBCalls(total=total, failed=failed)


def _assigned(event: Mapping[str, Any], variable: str) -> Any:
    details = event.get("stateExitedEventDetails") or {}
    assigned = details.get("assignedVariables") or {}
    if variable not in assigned:
        return None
    value = assigned[variable]
    try:
        return json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return value


@dataclass
class CriticalSection:
    """One run of the protected work, and the lock held around it.

    ``start_ms``/``end_ms``: the protected state entered/exited (history timestamps, epoch ms;
    ``end_ms`` is the execution's last event when the work never exited).

    With a lock (all None without one): ``fence``, ``lock_key`` and ``acquired_ms``
    (``$lock.acquiredAt``: the service clock's ``$millis()`` just before the winning acquire
    write) come from the lock record; ``acquire_acked_ms`` is when that write was
    acknowledged (its ``TaskSucceeded``), ``release_sent_ms`` when the release write was sent
    (``TaskStarted``) and ``released_ms`` when it was acknowledged. The lock is certainly held
    from ``acquire_acked_ms`` to ``release_sent_ms`` - an interval that can never overlap
    another holder's, whatever the request latencies.
    """

    execution: str
    key: str
    start_ms: int
    end_ms: int
    fence: int | None = None
    lock_key: str | None = None
    acquired_ms: int | None = None
    acquire_acked_ms: int | None = None
    release_sent_ms: int | None = None
    released_ms: int | None = None
    completed: bool = True

    @property
    def duration_ms(self) -> int:
        return self.end_ms - self.start_ms


def critical_sections(
    execution: str,
    history: Sequence[Mapping[str, Any]],
    *,
    protected_state: str,
    key: str | None = None,
    lock_variable: str = "lock",
) -> list[CriticalSection]:
    """The critical sections of one execution (normally one).

    ``key``: what the section is serialized on (a lane of the timeline); default the lock
    key from ``$lock`` - pass it for runs without a lock.
    """
    sections: list[CriticalSection] = []
    lock: Mapping[str, Any] | None = None
    lock_acked: int | None = None
    last_succeeded: int | None = None  # last TaskSucceeded within the current state
    open_section: CriticalSection | None = None
    awaiting_release: CriticalSection | None = None
    in_release = False
    for event in history:
        kind = event["type"]
        ts = epoch_ms(event["timestamp"])
        entered, exited = _entered_name(event), _exited_name(event)
        if entered is not None:
            last_succeeded = None
        if kind == "TaskSucceeded":
            last_succeeded = ts
        if exited is not None:
            value = _assigned(event, lock_variable)
            if isinstance(value, Mapping) and "fence" in value:
                lock, lock_acked = value, last_succeeded
        if entered == protected_state:
            open_section = CriticalSection(
                execution=execution,
                key=key if key is not None else str((lock or {}).get("key")),
                start_ms=ts,
                end_ms=ts,
                fence=_int_or_none((lock or {}).get("fence")),
                lock_key=(lock or {}).get("key"),
                acquired_ms=_int_or_none((lock or {}).get("acquiredAt")),
                acquire_acked_ms=lock_acked if lock else None,
            )
        elif exited == protected_state and open_section is not None:
            open_section.end_ms = ts
            sections.append(open_section)
            awaiting_release, open_section = open_section, None
        elif entered is not None and entered.endswith(RELEASE_SUFFIXES):
            if open_section is not None:  # the work failed without exiting: released on Catch
                open_section.end_ms, open_section.completed = ts, False
                sections.append(open_section)
                awaiting_release, open_section = open_section, None
            in_release = awaiting_release is not None
        elif in_release and kind == "TaskStarted" and awaiting_release is not None:
            awaiting_release.release_sent_ms = ts
        elif in_release and kind == "TaskSucceeded" and awaiting_release is not None:
            awaiting_release.released_ms = ts
            awaiting_release, in_release = None, False
        elif exited is not None and exited.endswith(RELEASE_SUFFIXES):
            in_release = False
    if open_section is not None and history:  # never exited (execution failed or stopped)
        open_section.end_ms = epoch_ms(history[-1]["timestamp"])
        open_section.completed = False
        sections.append(open_section)
    return sections


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)
