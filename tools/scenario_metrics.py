"""A scenario's numbers (pure): per run (:func:`run_metrics`) and per load (:func:`summarize_load`,
:func:`handoff_gaps_ms`), what the bench reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import mean
from typing import Any, Iterable, Mapping, Sequence

from tools.scenario_history import (
    CriticalSection,
    DynamoDBCalls,
    Transitions,
    critical_sections,
    dynamodb_calls,
    epoch_ms,
    transition_count,
)
from tools.scenario_invariants import by_key, fence_order_violations, find_overlaps

#: Dollars per state transition of a Standard workflow ($0.025 per 1,000).
DOLLARS_PER_TRANSITION = 0.025 / 1000


@dataclass
class RunMetrics:
    execution: str
    status: str
    start_ms: int
    stop_ms: int
    transitions: Transitions
    dynamodb: DynamoDBCalls
    sections: list[CriticalSection] = field(default_factory=list)
    #: How the run ended when it did not succeed: the execution's error and cause (history).
    failure: str = ""

    @property
    def wall_ms(self) -> int:
        return self.stop_ms - self.start_ms

    @property
    def acquire_acked_ms(self) -> int | None:
        """When the winning acquire write was acknowledged; None without a lock."""
        return self.sections[0].acquire_acked_ms if self.sections else None

    @property
    def wait_ms(self) -> int | None:
        """Acquire succeeded minus execution started (the time spent getting the lock)."""
        return None if self.acquire_acked_ms is None else self.acquire_acked_ms - self.start_ms


def run_metrics(
    execution: str,
    history: Sequence[Mapping[str, Any]],
    *,
    protected_state: str,
    status: str = "",
    key: str | None = None,
    lock_variable: str = "lock",
) -> RunMetrics:
    if not history:
        raise ValueError(f"no history for {execution}")
    return RunMetrics(
        execution=execution,
        status=status or _status_from_history(history),
        start_ms=epoch_ms(history[0]["timestamp"]),
        stop_ms=epoch_ms(history[-1]["timestamp"]),
        transitions=transition_count(history),
        dynamodb=dynamodb_calls(history),
        sections=critical_sections(
            execution, history, protected_state=protected_state, key=key, lock_variable=lock_variable
        ),
        failure=_failure_from_history(history),
    )


def _failure_from_history(history: Sequence[Mapping[str, Any]]) -> str:
    """``error: cause`` of an execution that failed, timed out or was aborted (else "")."""
    for event in reversed(history):
        details = next((v for k, v in event.items() if k.startswith("execution") and k.endswith("EventDetails")
                        and event["type"] in ("ExecutionFailed", "ExecutionTimedOut", "ExecutionAborted")), None)
        if details is not None:
            return f"{details.get('error', event['type'])}: {str(details.get('cause', ''))[:300]}"
    return ""


def _status_from_history(history: Sequence[Mapping[str, Any]]) -> str:
    last = history[-1]["type"]
    for status in ("Succeeded", "Failed", "TimedOut", "Aborted"):
        if last == f"Execution{status}":
            return status.upper().replace("TIMEDOUT", "TIMED_OUT")
    return "RUNNING"


@dataclass(frozen=True)
class Distribution:
    mean: float
    max: float
    min: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> "Distribution":
        if not values:
            return cls(float("nan"), float("nan"), float("nan"), 0)
        return cls(float(mean(values)), float(max(values)), float(min(values)), len(values))


def handoff_gaps_ms(sections: Iterable[CriticalSection]) -> list[int]:
    """Per key, in acquisition order: next acquire acknowledged minus previous release sent.

    The time the lock sat free while someone wanted it, request latencies included: an
    upper bound of the true gap that is never negative. (``acquiredAt`` is not used: a
    waiter may evaluate it a few ms before the previous release lands.)
    """
    gaps = []
    for group in by_key(sections).values():
        ordered = sorted((s for s in group if s.acquire_acked_ms is not None), key=lambda s: s.acquire_acked_ms)
        for before, after in zip(ordered, ordered[1:]):
            if before.release_sent_ms is not None:
                gaps.append(after.acquire_acked_ms - before.release_sent_ms)  # type: ignore[operator]
    return gaps


@dataclass
class LoadSummary:
    """Numbers of one load (N runs started together)."""

    runs: int
    succeeded: int
    makespan_s: float
    transitions_per_run: float
    retries_per_run: float
    dynamodb_per_run: float
    dynamodb_failed_per_run: float
    wait_s: Distribution
    handoff_s: Distribution
    overlaps: int
    fence_violations: int
    mean_wall_s: float = float("nan")  # mean duration of one run
    start_spread_s: float = float("nan")  # last start minus first start

    @property
    def fairness(self) -> float:
        """Max wait / mean wait (1 = everyone waited as long; higher = less fair)."""
        return self.wait_s.max / self.wait_s.mean if self.wait_s.mean else float("nan")

    @property
    def dollars_per_run(self) -> float:
        return self.transitions_per_run * DOLLARS_PER_TRANSITION


def summarize_load(runs: Sequence[RunMetrics]) -> LoadSummary:
    """Makespan (first start to last stop), per-run costs (over completed runs), waits, gaps."""
    if not runs:
        raise ValueError("no runs to summarize")
    done = [r for r in runs if r.status == "SUCCEEDED"] or list(runs)
    sections = [s for r in runs for s in r.sections]
    waits = [r.wait_ms / 1000 for r in runs if r.wait_ms is not None]
    return LoadSummary(
        runs=len(runs),
        succeeded=sum(r.status == "SUCCEEDED" for r in runs),
        makespan_s=(max(r.stop_ms for r in runs) - min(r.start_ms for r in runs)) / 1000,
        transitions_per_run=mean(r.transitions.billed for r in done),
        retries_per_run=mean(r.transitions.retries for r in done),
        dynamodb_per_run=mean(r.dynamodb.total for r in done),
        dynamodb_failed_per_run=mean(r.dynamodb.failed for r in done),
        wait_s=Distribution.of(waits),
        handoff_s=Distribution.of([g / 1000 for g in handoff_gaps_ms(sections)]),
        overlaps=len(find_overlaps(sections)),
        fence_violations=len(fence_order_violations(sections)),
        mean_wall_s=mean(r.wall_ms for r in runs) / 1000,
        start_spread_s=(max(r.start_ms for r in runs) - min(r.start_ms for r in runs)) / 1000,
    )
