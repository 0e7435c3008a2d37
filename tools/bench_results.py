"""The bench's main run (``make bench``): uncontended overhead, contention and independence, ours
against the baseline, and its report (a table of rows, ours ÷ baseline; JSON).
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

from tools import scenario
from tools.bench_load import contention, run_load
from tools.bench_stack import BASELINE_LOOP_WAIT_S, BASELINE_RETRY, build_bench_stack, deploy_bench
from tools.scenario import DOLLARS_PER_TRANSITION, RunMetrics
from locked_workflow.state_machines.lock_protocol import WaitPolicy


@dataclass
class Row:
    metric: str
    ours: float
    baseline: float
    unit: str = ""
    digits: int = 2

    @property
    def ratio(self) -> float:
        if self.baseline == 0:
            return float("nan") if self.ours == 0 else float("inf")
        return self.ours / self.baseline

    def cells(self) -> list[str]:
        return [self.metric, _fmt(self.ours, self.digits), _fmt(self.baseline, self.digits), _fmt(self.ratio, 2)]


def _fmt(value: float, digits: int) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return f"{value:,.{digits}f}"


def table_text(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
    )
    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def table_markdown(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join(["---"] + ["---:"] * (len(headers) - 1)) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


HEADERS = ("metric", "ours", "baseline", "ours ÷ baseline")


def _overhead(locked: RunMetrics, unlocked: RunMetrics) -> tuple[int, int]:
    return (
        locked.transitions.billed - unlocked.transitions.billed,
        locked.dynamodb.total - unlocked.dynamodb.total,
    )


@dataclass
class BenchResults:
    config: dict[str, Any]
    uncontended: dict[str, dict[str, Any]]
    contention: dict[str, dict[str, Any]]
    independence: dict[str, dict[str, Any]]
    rows: list[Row] = field(default_factory=list)
    invariants: dict[str, Any] = field(default_factory=dict)

    def table(self) -> str:
        return table_text(HEADERS, [r.cells() for r in self.rows])

    def markdown(self) -> str:
        return table_markdown(HEADERS, [r.cells() for r in self.rows])

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "uncontended": self.uncontended,
            "contention": self.contention,
            "independence": self.independence,
            "invariants": self.invariants,
            "table": [
                {"metric": r.metric, "ours": r.ours, "baseline": r.baseline, "ours_over_baseline": r.ratio}
                for r in self.rows
            ],
        }


def _run_json(run: RunMetrics) -> dict[str, Any]:
    return {
        "status": run.status,
        "wall_s": run.wall_ms / 1000,
        "transitions": run.transitions.billed,
        "states_entered": run.transitions.entered,
        "retries": run.transitions.retries,
        "dynamodb_calls": run.dynamodb.total,
        "dynamodb_failed": run.dynamodb.failed,
    }


def run_bench(
    *,
    runs: int = 10,
    work_s: float = 2.0,
    keys: int = 50,
    ours: WaitPolicy | None = None,
    backend: str = "moto",
    repeats: int = 1,
    progress: bool = True,
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
) -> BenchResults:
    from locked_workflow.testing import LocalCloud
    from locked_workflow.testing.synth import synth_app

    ours = ours or WaitPolicy()
    started = time.monotonic()
    synthesized = synth_app(lambda app: build_bench_stack(app, "LockBench", ours=ours))
    log(f"synthesized the bench stack in {time.monotonic() - started:.1f} s")
    variants = ["Unlocked", "UnlockedChain", "Ours", "OursChain", "Baseline"]
    with LocalCloud(backend=backend) as cloud:
        app = deploy_bench(cloud, synthesized, variants)
        # Warm-up: load the Lambda and the JSONata evaluator before anything is timed.
        run_load(cloud, app.arn("Ours"), ["warm-up"], work_s=0, label="warm-up", progress=False)

        uncontended = {
            v: run_load(cloud, app.arn(v), [f"solo-{v}"], work_s=work_s, label=f"uncontended {v}", progress=progress)[0]
            for v in variants
        }
        contended = {
            v: contention(cloud, app.arn(v), runs=runs, work_s=work_s, key=f"hot-{v}",
                          label=f"contention {v} ({runs} runs)", progress=progress, repeats=repeats)
            for v in ("Ours", "Baseline")
        }
        independent = {}
        for v in ("Unlocked", "Ours", "Baseline"):  # Unlocked: what the runtime itself costs
            metrics = run_load(cloud, app.arn(v), [f"key-{v}-{i}" for i in range(keys)], work_s=work_s,
                               label=f"independence {v} ({keys} keys)", progress=progress)
            independent[v] = scenario.summarize_load(metrics)

    elapsed = time.monotonic() - started
    o_over, b_over = _overhead(uncontended["Ours"], uncontended["Unlocked"]), _overhead(
        uncontended["Baseline"], uncontended["Unlocked"]
    )
    chain_over = _overhead(uncontended["OursChain"], uncontended["UnlockedChain"])
    co, cb = contended["Ours"], contended["Baseline"]
    solo = {v: uncontended[v].wall_ms / 1000 for v in independent}
    indep = {v: independent[v].makespan_s / solo[v] for v in independent}
    indep_run = {v: independent[v].mean_wall_s / solo[v] for v in independent}
    rows = [
        Row("uncontended: extra transitions per run (task)", o_over[0], b_over[0], digits=0),
        Row("uncontended: extra DynamoDB calls per run", o_over[1], b_over[1], digits=0),
        Row(f"contention ({runs} runs, 1 key): transitions per run", co.transitions_per_run,
            cb.transitions_per_run, digits=1),
        Row("contention: $ per 1M runs (transitions)", co.dollars_per_run * 1e6, cb.dollars_per_run * 1e6, digits=0),
        Row("contention: DynamoDB calls per run", co.dynamodb_per_run, cb.dynamodb_per_run, digits=1),
        Row("contention: failed conditional writes per run", co.dynamodb_failed_per_run,
            cb.dynamodb_failed_per_run, digits=1),
        Row(f"contention: makespan ÷ (N × {work_s:g} s)", co.makespan_ratio, cb.makespan_ratio),
        Row("contention: mean wait (s)", co.mean_wait_s, cb.mean_wait_s, digits=1),
        Row("contention: max wait (s)", co.max_wait_s, cb.max_wait_s, digits=1),
        Row("contention: mean handoff gap (s)", co.mean_handoff_s, cb.mean_handoff_s),
        Row("contention: max handoff gap (s)", co.max_handoff_s, cb.max_handoff_s),
        Row("fairness: max wait ÷ mean wait (2.0 = first come, first served)", co.fairness, cb.fairness),
        Row(f"independence ({keys} keys × 1 run): wall ÷ one run", indep["Ours"], indep["Baseline"]),
        Row("independence: mean run duration ÷ one run", indep_run["Ours"], indep_run["Baseline"]),
        Row("independence: failed conditional writes", independent["Ours"].dynamodb_failed_per_run * keys,
            independent["Baseline"].dynamodb_failed_per_run * keys, digits=0),
    ]
    config = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": None,  # filled in by main()
        "runs": runs,
        "work_seconds": work_s,
        "keys": keys,
        "contention_loads": repeats,
        "backend": backend,
        "ours_wait_policy": asdict(ours),
        "baseline": {**BASELINE_RETRY, "jitter": False, "loop_wait_s": BASELINE_LOOP_WAIT_S},
        "dollars_per_transition": DOLLARS_PER_TRANSITION,
        "machine": f"{os.cpu_count()} cores, {platform.system()} {platform.machine()}, Python {platform.python_version()}",
        "elapsed_s": round(elapsed, 1),
        "chain_overhead": {"transitions": chain_over[0], "dynamodb_calls": chain_over[1]},
    }
    return BenchResults(
        config=config,
        uncontended={v: _run_json(r) for v, r in uncontended.items()},
        contention={v: c.to_json() for v, c in contended.items()},
        independence={
            v: {"wall_s": independent[v].makespan_s, "one_run_s": solo[v], "ratio": indep[v],
                "mean_run_s": independent[v].mean_wall_s, "mean_run_ratio": indep_run[v],
                "start_spread_s": independent[v].start_spread_s,
                "failed_conditional_writes": round(independent[v].dynamodb_failed_per_run * keys),
                "succeeded": independent[v].succeeded, "runs": independent[v].runs}
            for v in independent
        },
        rows=rows,
        invariants={
            v: {"overlaps": c.overlaps, "fence_violations": c.fence_violations,
                "succeeded": sum(l.succeeded for l in c.loads), "runs": sum(l.runs for l in c.loads)}
            for v, c in contended.items()
        },
    )
