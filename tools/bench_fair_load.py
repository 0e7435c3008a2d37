"""Running the fair bench's loads: N runs on one key per lock, work size and N, each load's
figures (:func:`load`), and the whole grid on one deployment (:func:`run`).
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from tools import scenario
from tools.bench import WORK_STATE, build_bench_stack, deploy_bench
from tools.bench_fair_cost import PRICE_PER_RRU, PRICE_PER_TRANSITION, PRICE_PER_WRU, CapacityMeter
from tools.bench_fair_figures import (
    FAIR_PATH_STATES,
    LOCKS,
    arrival_ms,
    overtakes,
    percentile,
    percentiles,
    steady_gaps_ms,
    ticket_overtakes,
    tickets_and_fences,
)
from tools.bench_fair_floor import FloorProbe, build_floor, measure_floor
from tools.bench_fair_runtime import RuntimeMeter, handoff_parts, runtime_figures
from locked_workflow.state_machines.lock_protocol import WaitPolicy


def load(cloud: Any, arn: str, lock: str, *, runs: int, work_s: float, key: str,
         meter: CapacityMeter | None = None, unlocked_transitions: int = 0,
         runtime: RuntimeMeter | None = None, floor_probe: Any = None) -> dict:
    from contextlib import nullcontext

    probe = floor_probe() if floor_probe is not None else None
    with probe if probe is not None else nullcontext():
        load_from_ms, cpu_from = time.time() * 1000, (time.process_time(), time.monotonic())
        arns = [cloud.start_execution(arn, {"key": key, "workSeconds": work_s}) for _ in range(runs)]
        statuses = scenario.wait_all(cloud, arns, timeout_s=1800,
                                     progress=scenario.stderr_progress(f"{lock} {runs}×{work_s:g}s".ljust(24)))
        load_to_ms, cpu_to = time.time() * 1000, (time.process_time(), time.monotonic())
    histories = {a: cloud.history(a) for a in arns}
    metrics = [scenario.run_metrics(a, histories[a], protected_state=WORK_STATE, status=statuses[a], key=key)
               for a in arns]
    summary = scenario.summarize_load(metrics)
    sections = [s for m in metrics for s in m.sections]
    gaps = scenario.handoff_gaps_ms(sections)
    lines = [(arrival_ms(histories[m.execution], lock), m.acquire_acked_ms) for m in metrics]
    waited = [(a, g) for a, g in lines if a is not None and g is not None]
    by_ticket = []  # (the last ticket a run took, its grant's fence): the fair queue's own order
    last_ticket = {}
    for m in metrics:
        tickets, fences = tickets_and_fences(histories[m.execution])
        if tickets:
            last_ticket[m.execution] = tickets[-1]
        if tickets and fences:
            by_ticket.append((tickets[-1], fences[-1]))
    wru, rru = meter.of(key + "") if meter is not None else (float("nan"), float("nan"))
    # how the fair lock's handoffs went (the tail's explanation): states entered, park timeouts
    paths: dict = {}
    for history in histories.values():
        for event in history:
            name = (event.get("stateEnteredEventDetails") or {}).get("name")
            if name in FAIR_PATH_STATES:
                paths[name] = paths.get(name, 0) + 1
            if event["type"] == "TaskTimedOut":
                paths["park timed out"] = paths.get("park timed out", 0) + 1
    lock_transitions = summary.transitions_per_run - unlocked_transitions
    arrivals = [a for a, _ in lines if a is not None]
    steady = steady_gaps_ms(sections, max(arrivals)) if arrivals else gaps
    held_s = sum(max(0, s.end_ms - s.start_ms) for s in sections) / 1000
    # where the makespan goes besides the work: before the first work starts (the first run's
    # start and acquire), between works (lock and handoff), after the last work ends
    lead_s = (min(s.start_ms for s in sections) - min(m.start_ms for m in metrics)) / 1000 if sections else float("nan")
    trail_s = (max(m.stop_ms for m in metrics) - max(s.end_ms for s in sections)) / 1000 if sections else float("nan")
    under_load: dict = {}
    if runtime is not None:
        burst_end = max(arrivals) if arrivals else load_to_ms
        under_load = {"runtime": runtime_figures(runtime, load_from_ms, load_to_ms, burst_end, (*cpu_from, *cpu_to)),
                      "handoff_parts": handoff_parts(sections, runtime, last_ticket, burst_end),
                      "burst_s": (burst_end - load_from_ms) / 1000}
    if probe is not None:
        floor = probe.gaps()
        burst_end = max(arrivals) if arrivals else load_to_ms
        under_load["floor"] = {"all": percentiles([g for _, g in floor]),
                               "burst": percentiles([g for t, g in floor if t < burst_end]),
                               "steady": percentiles([g for t, g in floor if t >= burst_end])}
    return {
        "under_load": under_load,
        "first_work_s": lead_s, "held_s": held_s, "gaps_sum_s": sum(gaps) / 1000,
        "succeeded": summary.succeeded, "runs": runs,
        "makespan_ratio": summary.makespan_s / (runs * work_s),
        "transitions_per_run": summary.transitions_per_run,
        "lock_transitions_per_run": lock_transitions,
        "wru_per_run": wru / runs, "rru_per_run": rru / runs,
        "dollars_per_run": lock_transitions * PRICE_PER_TRANSITION + wru / runs * PRICE_PER_WRU
        + rru / runs * PRICE_PER_RRU,
        "dynamodb_per_run": summary.dynamodb_per_run, "paths": paths,
        "handoff_p50_ms": percentile(gaps, 50), "handoff_p99_ms": percentile(gaps, 99),
        "steady_gaps": len(steady), "steady_p50_ms": percentile(steady, 50), "steady_p99_ms": percentile(steady, 99),
        "max_gap_ms": max(gaps) if gaps else float("nan"),
        # makespan / ideal = (work as run / work asked) x (makespan / work as run): the machine's
        # slowness running the work itself, apart from what the lock and the start cost
        "work_ratio": held_s / (runs * work_s), "makespan_over_work": summary.makespan_s / held_s if held_s else float("nan"),
        "start_spread_s": summary.start_spread_s, "lead_s": lead_s, "trail_s": trail_s,
        "between_s": summary.makespan_s - lead_s - trail_s - held_s,
        "overtakes": overtakes(waited), "overtakes_any_gap": overtakes(waited, 1), "waited": len(waited),
        "ticket_overtakes": ticket_overtakes(by_ticket) if by_ticket else None,
        "max_over_mean_wait": summary.fairness,
        "overlaps": summary.overlaps, "fence_violations": summary.fence_violations,
    }


def left_behind(cloud: Any, key_part: str) -> int:
    """Items of the load's key still holding someone: a held lock, queued tickets, queue rows."""
    from locked_workflow.state_machines import fair_protocol as fp

    count = 0
    for table in cloud.dynamodb.list_tables()["TableNames"]:
        for page in cloud.dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
            for item in page["Items"]:
                pk = str(item.get("pk", {}).get("S", ""))
                if key_part not in pk:
                    continue
                served, tickets = fp.counters(item)
                count += (pk.startswith(fp.ROW_MARK) and fp.TOKEN in item) + ("owner" in item and not pk.startswith(
                    fp.ROW_MARK)) + (tickets - served)
    return count


def run(*, works: Sequence[float], runs: Sequence[int], backend: str, locks: Sequence[str] = tuple(LOCKS),
        floor_samples: int = 30, extra_loads: Sequence[tuple[float, int, tuple[str, ...]]] = (),
        under_load: bool = True) -> dict:
    from contextlib import nullcontext

    from locked_workflow.testing import LocalCloud
    from locked_workflow.testing.synth import synth_app

    def stack(app: Any) -> Any:
        built = build_bench_stack(app, "FairBench", ours=WaitPolicy(), fair=True)
        build_floor(built)
        return built

    synthesized = synth_app(stack)
    started = time.monotonic()
    chosen = {name: LOCKS[name] for name in locks}
    results: dict = {"backend": backend, "uncontended_extra_transitions": {}, "loads": []}
    with LocalCloud(backend=backend) as cloud:
        app = deploy_bench(cloud, synthesized, ["Unlocked", *chosen.values()])
        floor = measure_floor(cloud, app.deployment, synthesized.stack_name, floor_samples) if floor_samples else []
        results["floor_p50_ms"], results["floor_p99_ms"] = percentile(floor, 50), percentile(floor, 99)
        solo = {}
        for name, variant in {"Unlocked": "Unlocked", **chosen}.items():
            arn = cloud.start_execution(app.arn(variant), {"key": f"solo-{name}", "workSeconds": 0})
            cloud.wait_for(arn, timeout=120)
            solo[name] = scenario.transition_count(cloud.history(arn)).billed
        results["uncontended_extra_transitions"] = {n: solo[n] - solo["Unlocked"] for n in chosen}
        plan = [(w, n, tuple(chosen)) for w in works for n in runs] + list(extra_loads)
        for _, _, named in extra_loads:
            missing = [x for x in named if x not in chosen]
            if missing:
                raise ValueError(f"--loads names {missing}: add them to --locks")
        floor_table = next(v for k, v in app.deployment.resources.items() if k.startswith("FloorTable"))
        probe = (lambda: FloorProbe(cloud, app.deployment, synthesized.stack_name, floor_table)) \
            if under_load else None
        with scenario.QuietCollector(), CapacityMeter() as meter, \
                (RuntimeMeter() if under_load else nullcontext()) as runtime:
            for index, (work_s, n, named) in enumerate(plan):
                for name in named:
                    key = f"hot-{index}-{name}-{n}-{work_s}#"
                    figures = load(cloud, app.arn(chosen[name]), name, runs=n, work_s=work_s, key=key, meter=meter,
                                   unlocked_transitions=solo["Unlocked"], runtime=runtime, floor_probe=probe)
                    figures["left_behind"] = left_behind(cloud, key)
                    figures["handoff_p50_over_floor"] = figures["handoff_p50_ms"] / results["floor_p50_ms"] \
                        if floor else float("nan")
                    loaded = figures["under_load"].get("floor", {}).get("all", {}).get("p50")
                    figures["handoff_p50_over_loaded_floor"] = figures["handoff_p50_ms"] / loaded \
                        if loaded else float("nan")
                    results["loads"].append({"lock": name, "work_s": work_s, "n": n, **figures})
    results["elapsed_s"] = round(time.monotonic() - started, 1)
    return results
