"""The fair bench's figures of a load, read from its runs' histories (pure): arrivals, tickets and
fences, overtakes, steady-state handoff gaps, percentiles.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from tools import scenario

LOCKS = {"Polling": "Ours", "Fair": "Fair", "Baseline": "Baseline"}
#: Where a run's place in line is fixed (the state whose acknowledged write marks arrival).
ARRIVAL = {"Fair": ("Lock.Enqueue", "TaskSucceeded"), "Polling": ("Lock.Acquire", "TaskFailed"),
           "Baseline": ("Baseline.Acquire", "TaskFailed")}


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def percentiles(values: Sequence[float]) -> dict:
    return {"n": len(values), "p50": percentile(values, 50), "p99": percentile(values, 99),
            "max": max(values) if values else float("nan"), "sum": sum(values)}


def arrival_ms(history: Sequence[dict], lock: str) -> int | None:
    """When the run joined the line (None: it never waited)."""
    state, kind = ARRIVAL[lock]
    inside = False
    for event in history:
        name = (event.get("stateEnteredEventDetails") or {}).get("name")
        if name is not None:
            inside = name == state
        if inside and event["type"] == kind:
            return scenario.epoch_ms(event["timestamp"])
    return None


def tickets_and_fences(history: Sequence[dict]) -> tuple[list[int], list[int]]:
    """The fair lock's tickets a run took (``Lock.Enqueue``'s assigned ``lockTicket``) and the
    fences it was granted (``$lock.fence``): the queue's own order, free of timestamp noise."""
    tickets, fences = [], []
    for event in history:
        assigned = (event.get("stateExitedEventDetails") or {}).get("assignedVariables") or {}
        if "lockTicket" in assigned:
            tickets.append(json.loads(assigned["lockTicket"]))
        if isinstance(assigned.get("lock"), str) and assigned["lock"] not in ("null",):
            value = json.loads(assigned["lock"])
            if isinstance(value, dict) and "fence" in value:
                fences.append(value["fence"])
    return tickets, fences


def ticket_overtakes(runs: Sequence[tuple[int, int]]) -> int:
    """Pairs (ticket, fence of the grant) where a later ticket was granted before an earlier one."""
    return sum(1 for a in runs for b in runs if a[0] < b[0] and b[1] < a[1])


#: Arrivals closer than this are not ordered by the measure: history timestamps are taken
#: after each write returns, on threads of one busy process, so two writes a few ms apart can
#: be stamped in either order.
ARRIVAL_RESOLUTION_MS = 100


def overtakes(arrivals: Sequence[tuple[int, int]], resolution_ms: int = ARRIVAL_RESOLUTION_MS) -> int:
    """Pairs (arrival, grant) where a later arrival (by ``resolution_ms`` or more) was granted
    first."""
    return sum(1 for a in arrivals for b in arrivals if a[0] + resolution_ms <= b[0] and b[1] < a[1])


#: The fair lock's states whose counts tell how its handoffs went: a grant and wake-up (the
#: direct path), a release that found no row yet (then a mark), a failed wake-up's claim
#: window, a head that took the lock itself, a fallback look.
FAIR_PATH_STATES = ("Lock.Release.Grant", "Lock.Release.Release", "Lock.Release.ReleaseQueued", "Lock.Release.Mark",
                    "Lock.Release.Reparking", "Lock.Release.WakeAgainEarly", "Lock.Release.ClaimWindow",
                    "Lock.Release.Revoke", "Lock.AcquireHead", "Lock.Inspect", "Lock.Help.Take")


def steady_gaps_ms(sections: Sequence[Any], after_ms: int) -> list[int]:
    """Handoff gaps (as ``scenario.handoff_gaps_ms``) whose earlier release was sent after
    ``after_ms`` (the last run's arrival): the queue's steady state, without the start burst in
    which this runtime is still starting the load's executions."""
    later = [s for s in sections if s.release_sent_ms is not None and s.release_sent_ms >= after_ms]
    firsts = {id(s) for s in later}
    gaps = []
    for group in scenario.by_key(sections).values():
        ordered = sorted((s for s in group if s.acquire_acked_ms is not None), key=lambda s: s.acquire_acked_ms)
        for before, after in zip(ordered, ordered[1:]):
            if id(before) in firsts:
                gaps.append(after.acquire_acked_ms - before.release_sent_ms)
    return gaps
