"""Running the bench's loads: N executions started together, read from their histories; the
contention case (one or more loads of N runs on one key) and its per-load means.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

from tools import scenario
from tools.bench_stack import WORK_STATE
from tools.scenario import DOLLARS_PER_TRANSITION, LoadSummary, RunMetrics


def run_load(
    cloud: Any,
    state_machine_arn: str,
    keys: Sequence[str],
    *,
    work_s: float,
    label: str,
    timeout_s: float = 900,
    progress: bool = True,
) -> list[RunMetrics]:
    """Start one execution per entry of ``keys`` (all at once), wait, read their histories."""
    arns = [
        (key, cloud.start_execution(state_machine_arn, {"key": key, "workSeconds": work_s}))
        for key in keys
    ]
    statuses = scenario.wait_all(
        cloud,
        [arn for _, arn in arns],
        timeout_s=timeout_s,
        progress=scenario.stderr_progress(f"{label:<28}") if progress else None,
    )
    running = [arn for arn, status in statuses.items() if status not in scenario.TERMINAL]
    if running:
        raise TimeoutError(f"{label}: {len(running)} executions still running after {timeout_s} s")
    return [
        scenario.run_metrics(
            arn, cloud.history(arn), protected_state=WORK_STATE, status=statuses[arn], key=key
        )
        for key, arn in arns
    ]


@dataclass
class Contention:
    """The contention case, one or more loads of N runs on one key; figures are per-load means
    (max wait and max handoff gap: the largest seen)."""

    loads: list[LoadSummary]
    work_s: float

    def _mean(self, figure: Callable[[LoadSummary], float]) -> float:
        return _mean(figure(load) for load in self.loads)

    @property
    def makespan_ratio(self) -> float:
        return self._mean(lambda l: l.makespan_s / (l.runs * self.work_s))

    @property
    def transitions_per_run(self) -> float:
        return self._mean(lambda l: l.transitions_per_run)

    @property
    def dollars_per_run(self) -> float:
        return self.transitions_per_run * DOLLARS_PER_TRANSITION

    @property
    def dynamodb_per_run(self) -> float:
        return self._mean(lambda l: l.dynamodb_per_run)

    @property
    def dynamodb_failed_per_run(self) -> float:
        return self._mean(lambda l: l.dynamodb_failed_per_run)

    @property
    def mean_wait_s(self) -> float:
        return self._mean(lambda l: l.wait_s.mean)

    @property
    def max_wait_s(self) -> float:
        return max(l.wait_s.max for l in self.loads)

    @property
    def mean_handoff_s(self) -> float:
        return self._mean(lambda l: l.handoff_s.mean)

    @property
    def max_handoff_s(self) -> float:
        return max(l.handoff_s.max for l in self.loads)

    @property
    def fairness(self) -> float:
        return self._mean(lambda l: l.fairness)

    @property
    def overlaps(self) -> int:
        return sum(l.overlaps for l in self.loads)

    @property
    def fence_violations(self) -> int:
        return sum(l.fence_violations for l in self.loads)

    def to_json(self) -> dict[str, Any]:
        figures = ("makespan_ratio", "transitions_per_run", "dollars_per_run", "dynamodb_per_run",
                   "dynamodb_failed_per_run", "mean_wait_s", "max_wait_s", "mean_handoff_s",
                   "max_handoff_s", "fairness", "overlaps", "fence_violations")
        return {
            **{name: getattr(self, name) for name in figures},
            "loads": [_load_json(load, self.work_s) for load in self.loads],
        }


def contention(
    cloud: Any, arn: str, *, runs: int, work_s: float, key: str, label: str, progress: bool, repeats: int = 1
) -> Contention:
    loads = []
    for r in range(repeats):
        name = f"{label} #{r + 1}" if repeats > 1 else label
        metrics = run_load(cloud, arn, [f"{key}-{r}"] * runs, work_s=work_s, label=name, progress=progress)
        loads.append(scenario.summarize_load(metrics))
    return Contention(loads, work_s)


def _load_json(summary: LoadSummary, work_s: float) -> dict[str, Any]:
    data = asdict(summary)
    data["makespan_ratio"] = summary.makespan_s / (summary.runs * work_s)
    data["fairness"] = summary.fairness
    data["dollars_per_run"] = summary.dollars_per_run
    return data


def _mean(values: Any) -> float:
    values = list(values)
    return sum(values) / len(values)
