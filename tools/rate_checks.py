"""Checks of a rate limit over executions (``Lock.rate``), shared by its tests, the fault
matrix and the bench: the admissions' stamps read from the histories, and the windows of
``period`` that hold more than ``limit`` of them."""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

from locked_workflow.state_machines import errors
from locked_workflow.state_machines import rate_protocol as rate


def crowded_windows(times_ms: Iterable[float], *, limit: int, period_ms: float) -> list[tuple[float, float]]:
    """Pairs of times ``limit`` apart (sorted) closer than ``period_ms``: each is a window of
    ``period_ms`` holding more than ``limit`` of them (empty: the limit held)."""
    t = sorted(times_ms)
    return [(t[i], t[i + limit]) for i in range(len(t) - limit) if t[i + limit] - t[i] < period_ms]


def refused_admissions(history: Iterable[Mapping[str, Any]], admit_state: str = "Lock.Admit") -> int:
    """How many of an execution's ADMITs (``admit_state``) were refused (their condition failed:
    another run was admitted since its read)."""
    refused, state = 0, None
    for event in history:
        if event["type"].endswith("StateEntered"):
            state = event["stateEnteredEventDetails"]["name"]
        elif event["type"] == "TaskFailed" and state == admit_state:
            refused += event["taskFailedEventDetails"].get("error") == errors.CONDITION_FAILED
    return refused


def admission_stamps(history: Iterable[Mapping[str, Any]], admit_state: str = "Lock.Admit") -> list[int]:
    """The stamps (epoch ms, service clock) of the admissions an execution's history shows: the
    ``admittedAt`` each successful ADMIT of ``admit_state`` returned (read with
    ``includeExecutionData``)."""
    stamps, state = [], None
    for event in history:
        if event["type"].endswith("StateEntered"):
            state = event["stateEnteredEventDetails"]["name"]
        elif event["type"] == "TaskSucceeded" and state == admit_state:
            attributes = json.loads(event["taskSucceededEventDetails"]["output"]).get("Attributes", {})
            if rate.ADMITTED_AT in attributes:  # (another kind's state of that name: not an ADMIT)
                stamps.append(int(attributes[rate.ADMITTED_AT]["N"]))
    return stamps
