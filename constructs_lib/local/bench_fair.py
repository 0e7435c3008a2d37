"""``make bench-fair``: the fair lock against the polling lock and the samples' baseline.

::

    python -m constructs_lib.local.bench_fair [--work 0.25,1,2] [--runs 10,30]
        [--backend moto|dynamodb-local] [--out out/bench-fair]

The bench stack of :mod:`constructs_lib.local.bench` (a Lambda "Work" that sleeps), with three
locks around the same work: ``Polling`` (``LockedWorkflow`` defaults), ``Fair``
(``fair=True``) and ``Baseline`` (the samples' retry-and-wait loop). For each work size and
N, N runs start together on one key. Reported per lock, all from execution histories:

* makespan ÷ ideal (N × work);
* state transitions and DynamoDB calls per run;
* handoff gap p50 / p99 (next acquire acknowledged - previous release sent);
* overtakes: pairs of runs where the later arrival (by 100 ms or more: the resolution of
  history timestamps on this runtime) was granted first - arrival: when the run's place in
  line was fixed, the fair lock's enqueue acknowledged, a polling lock's first refused
  acquire; also counted at any resolution; max wait ÷ mean wait;
* extra transitions of one uncontended run (locked minus unlocked).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from constructs_lib.local import scenario
from constructs_lib.local.bench import WORK_STATE, build_bench_stack, deploy_bench, table_markdown, table_text
from state_machines.lock_protocol import WaitPolicy

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


#: Arrivals closer than this are not ordered by the measure: history timestamps are taken
#: after each write returns, on threads of one busy process, so two writes a few ms apart can
#: be stamped in either order.
ARRIVAL_RESOLUTION_MS = 100


def overtakes(arrivals: Sequence[tuple[int, int]], resolution_ms: int = ARRIVAL_RESOLUTION_MS) -> int:
    """Pairs (arrival, grant) where a later arrival (by ``resolution_ms`` or more) was granted
    first."""
    return sum(1 for a in arrivals for b in arrivals if a[0] + resolution_ms <= b[0] and b[1] < a[1])


def load(cloud: Any, arn: str, lock: str, *, runs: int, work_s: float, key: str) -> dict:
    arns = [cloud.start_execution(arn, {"key": key, "workSeconds": work_s}) for _ in range(runs)]
    statuses = scenario.wait_all(cloud, arns, timeout_s=1800,
                                 progress=scenario.stderr_progress(f"{lock} {runs}×{work_s:g}s".ljust(24)))
    histories = {a: cloud.history(a) for a in arns}
    metrics = [scenario.run_metrics(a, histories[a], protected_state=WORK_STATE, status=statuses[a], key=key)
               for a in arns]
    summary = scenario.summarize_load(metrics)
    sections = [s for m in metrics for s in m.sections]
    gaps = scenario.handoff_gaps_ms(sections)
    lines = [(arrival_ms(histories[m.execution], lock), m.acquire_acked_ms) for m in metrics]
    waited = [(a, g) for a, g in lines if a is not None and g is not None]
    return {
        "succeeded": summary.succeeded, "runs": runs,
        "makespan_ratio": summary.makespan_s / (runs * work_s),
        "transitions_per_run": summary.transitions_per_run,
        "dynamodb_per_run": summary.dynamodb_per_run,
        "handoff_p50_ms": percentile(gaps, 50), "handoff_p99_ms": percentile(gaps, 99),
        "overtakes": overtakes(waited), "overtakes_any_gap": overtakes(waited, 1), "waited": len(waited),
        "max_over_mean_wait": summary.fairness,
        "overlaps": summary.overlaps, "fence_violations": summary.fence_violations,
    }


def run(*, works: Sequence[float], runs: Sequence[int], backend: str) -> dict:
    from constructs_lib.local import LocalCloud
    from constructs_lib.local.synth import synth_app

    synthesized = synth_app(lambda app: build_bench_stack(app, "FairBench", ours=WaitPolicy(), fair=True))
    started = time.monotonic()
    results: dict = {"backend": backend, "uncontended_extra_transitions": {}, "loads": []}
    with LocalCloud(backend=backend) as cloud:
        app = deploy_bench(cloud, synthesized, ["Unlocked", *LOCKS.values()])
        solo = {}
        for name, variant in {"Unlocked": "Unlocked", **LOCKS}.items():
            arn = cloud.start_execution(app.arn(variant), {"key": f"solo-{name}", "workSeconds": 0})
            cloud.wait_for(arn, timeout=120)
            solo[name] = scenario.transition_count(cloud.history(arn)).billed
        results["uncontended_extra_transitions"] = {n: solo[n] - solo["Unlocked"] for n in LOCKS}
        for work_s in works:
            for n in runs:
                for name, variant in LOCKS.items():
                    figures = load(cloud, app.arn(variant), name, runs=n, work_s=work_s,
                                   key=f"hot-{name}-{n}-{work_s}")
                    results["loads"].append({"lock": name, "work_s": work_s, "n": n, **figures})
    results["elapsed_s"] = round(time.monotonic() - started, 1)
    return results


HEADERS = ("work", "N", "lock", "makespan ÷ ideal", "transitions/run", "DynamoDB calls/run",
           "handoff p50 (ms)", "handoff p99 (ms)", "overtakes (any gap)", "max ÷ mean wait")


def rows(results: dict) -> list[list[str]]:
    return [[f"{r['work_s']:g} s", str(r["n"]), r["lock"], f"{r['makespan_ratio']:.2f}",
             f"{r['transitions_per_run']:.1f}", f"{r['dynamodb_per_run']:.1f}",
             f"{r['handoff_p50_ms']:.0f}", f"{r['handoff_p99_ms']:.0f}", f"{r['overtakes']} ({r['overtakes_any_gap']})",
             f"{r['max_over_mean_wait']:.2f}"] for r in results["loads"]]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m constructs_lib.local.bench_fair", description=__doc__.split("\n")[0])
    parser.add_argument("--work", default="0.25,1,2", help="protected work sizes in seconds (default 0.25,1,2)")
    parser.add_argument("--runs", default="10,30", help="runs started together on one key (default 10,30)")
    parser.add_argument("--backend", choices=("moto", "dynamodb-local"), default="moto")
    parser.add_argument("--out", type=Path, default=Path("out") / "bench-fair")
    args = parser.parse_args(argv)
    works = [float(w) for w in args.work.split(",")]
    runs = [int(n) for n in args.runs.split(",")]
    if any(w <= 0 for w in works) or any(n < 2 for n in runs):
        parser.error("--work > 0 and --runs >= 2")
    results = run(works=works, runs=runs, backend=args.backend)
    extra = results["uncontended_extra_transitions"]
    print(f"Fair lock benchmark, backend {args.backend}, {results['elapsed_s']} s")
    print("uncontended extra transitions per run: " + ", ".join(f"{k} {v}" for k, v in extra.items()))
    print(table_text(HEADERS, rows(results)))
    bad = [r for r in results["loads"] if r["overlaps"] or r["fence_violations"] or r["succeeded"] != r["runs"]]
    print("invariants: " + ("hold (all succeeded, no overlap, fences increase)" if not bad else f"VIOLATED {bad}"))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    (args.out / "results.md").write_text(
        "uncontended extra transitions per run: " + ", ".join(f"{k} {v}" for k, v in extra.items()) + "\n\n"
        + table_markdown(HEADERS, rows(results)) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
