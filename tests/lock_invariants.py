"""Test-side helpers over execution histories; the invariants themselves live in
``constructs_lib.local.scenario`` (shared with the demo and the bench)."""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Optional

from constructs_lib.local import scenario
from constructs_lib.local.scenario import CriticalSection, fence_order_violations, find_overlaps

__all__ = ["critical_sections", "fence_order_violations", "find_overlaps", "held_interval",
           "overlaps_across_keys", "state_entered"]


def state_entered(result) -> list[str]:
    """Names of the states an execution entered, in order."""
    return [
        e["stateEnteredEventDetails"]["name"] for e in result.history if e["type"].endswith("StateEntered")
    ]


def critical_sections(results: Iterable, state_name: str, key: Optional[str] = None) -> list[CriticalSection]:
    """The critical sections (``state_name`` entered → exited) of every result."""
    return [
        section
        for result in results
        for section in scenario.critical_sections(result.arn, result.history, protected_state=state_name, key=key)
    ]


def overlaps_across_keys(sections: list[CriticalSection]) -> list[tuple[CriticalSection, CriticalSection]]:
    """Pairs of sections of *different* keys that ran at the same time."""
    one_lane = [dataclasses.replace(s, key="*", lock_key=s.key) for s in sections]
    return [(a, b) for a, b in find_overlaps(one_lane) if a.lock_key != b.lock_key]


def held_interval(result) -> tuple[float, float]:
    """When the execution's lock was held (s): acquire state exited → release state exited."""
    exits: dict[Any, list[float]] = {}
    for event in result.history:
        if event["type"].endswith("StateExited"):
            exits.setdefault(event["stateExitedEventDetails"]["name"], []).append(event["timestamp"].timestamp())
    return exits["Lock.Acquire"][-1], exits["Lock.Release"][-1]
