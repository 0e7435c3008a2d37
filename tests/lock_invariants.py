"""Invariants over execution histories: critical sections, overlaps, fence order."""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Iterable, Optional


@dataclass(frozen=True)
class Section:
    """One execution's time inside a state (the critical section), service-clock seconds."""

    execution: str
    key: Any
    start: float
    end: float
    fence: Optional[int]


def _seconds(event: dict) -> float:
    return event["timestamp"].timestamp()


def _name(event: dict) -> Optional[str]:
    details = event.get("stateEnteredEventDetails") or event.get("stateExitedEventDetails") or {}
    return details.get("name")


def state_entered(result) -> list[str]:
    """Names of the states an execution entered, in order."""
    return [_name(e) for e in result.history if e["type"].endswith("StateEntered")]


def _payload_fence(event: dict) -> Optional[int]:
    parameters = json.loads(event.get("taskScheduledEventDetails", {}).get("parameters") or "{}")
    fence = (parameters.get("Payload") or {}).get("fence")
    return int(fence) if fence is not None else None


def critical_sections(results: Iterable, state_name: str, key: Any = None) -> list[Section]:
    """Every entered→exited (or entered→failed) span of ``state_name`` across ``results``."""
    sections = []
    for result in results:
        start = fence = None
        for event in result.history:
            if event["type"].endswith("StateEntered") and _name(event) == state_name:
                start, fence = _seconds(event), None
            elif start is not None and event["type"] == "TaskScheduled" and fence is None:
                fence = _payload_fence(event)
            elif start is not None and (
                (event["type"].endswith("StateExited") and _name(event) == state_name)
                or event["type"] in ("TaskFailed", "TaskTimedOut")
            ):
                sections.append(Section(result.arn, key, start, _seconds(event), fence))
                start = None
    return sections


def overlapping_pairs(sections: list[Section]) -> list[tuple[Section, Section]]:
    """Pairs of sections whose time spans intersect."""
    return [(a, b) for a, b in combinations(sections, 2) if a.start < b.end and b.start < a.end]


def fences_in_order(sections: list[Section]) -> bool:
    """Fences strictly increase in the order the sections began."""
    fences = [s.fence for s in sorted(sections, key=lambda s: s.start)]
    return all(f is not None for f in fences) and all(a < b for a, b in zip(fences, fences[1:]))


def held_interval(result) -> tuple[float, float]:
    """When the execution's lock was held: acquire succeeded → release succeeded."""
    exits = {}
    for event in result.history:
        if event["type"].endswith("StateExited"):
            exits.setdefault(_name(event), []).append(_seconds(event))
    return exits["Lock.Acquire"][-1], exits["Lock.Release"][-1]
