"""``make bench-fair``: the fair lock against the polling lock and the samples' baseline.

::

    python -m tools.bench_fair [--work 0.25,1,2] [--runs 10,30] [--loads 0.25:100]
        [--locks Polling,Fair,Baseline] [--backend moto|dynamodb-local] [--floor 30]
        [--out out/bench-fair]
    python -m tools.bench_fair --thousand      # 1,000 fair waiters on one key (DynamoDB Local)

The bench stack of :mod:`tools.bench` (a Lambda "Work" that sleeps), with three
locks around the same work: ``Polling`` (``LockedWorkflow`` defaults), ``Fair``
(``Lock.fair``) and ``Baseline`` (the samples' retry-and-wait loop). Task tokens are
AWS-sized (the runtime's default). For each work size and N, N runs start together on one
key. Reported per lock, from execution histories and every DynamoDB call the runs made:

* lock transitions per run (a run's billed state transitions minus an unlocked run's);
* write and read request units per run, as DynamoDB bills them (each call's
  ``ConsumedCapacity``: the item's size before and after a write, rounded up per KB; a
  refused condition: 1 unit);
* dollars per run: those transitions and request units at on-demand prices
  (:data:`PRICE_PER_TRANSITION`, :data:`PRICE_PER_WRU`, :data:`PRICE_PER_RRU`);
* handoff gap p50 / p99 (the next holder's acquire acknowledged - the previous holder's
  release or handoff write sent), and p50 against the *floor*: the engine's own
  write -> ``SendTaskSuccess`` -> parked task resumed, with no lock around it (``--floor``
  samples, measured first);
* overtakes: pairs of runs where the later arrival (by 100 ms or more: the resolution of
  history timestamps on this runtime) was granted first - arrival: when the run's place in
  line was fixed, the fair lock's ticket acknowledged, a polling lock's first refused
  acquire; also counted at any resolution;
* makespan ÷ ideal (N × work), and where it goes: before the first work, the work as run
  (against as asked), release to grant sent, handoff gaps, grant to work, after the last;
* the runtime under each load (:class:`RuntimeMeter`, :class:`FloorProbe`; ``--no-under-load``
  skips them): floor samples taken *during* the load, every DynamoDB request's time and its
  wait for the runtime's DynamoDB serialization, a tick thread's lateness (CPU and GIL
  saturation alone), each handoff split into grant, ``SendTaskSuccess`` and the rest - in the
  start burst (until the last arrival) and after it.

The loads run inside :class:`tools.scenario.QuietCollector`: the process's earlier objects (the
histories of every earlier load, which moto keeps) are frozen out of Python's full garbage
collections, whose pauses stall every execution at once and are no part of Step Functions.

The bench lives in modules of its own, one concept each: ``tools/bench_fair_figures.py`` (a
load's figures from its histories), ``tools/bench_fair_cost.py`` (request units and prices),
``tools/bench_fair_floor.py`` (the engine's floor), ``tools/bench_fair_runtime.py`` (the
runtime under load) and ``tools/bench_fair_load.py`` (running the loads). This module is the
command line and its report, and re-exports the names other tools and the tests use.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from tools.bench import table_markdown, table_text
from tools.bench_fair_cost import PRICE_PER_RRU, PRICE_PER_TRANSITION, PRICE_PER_WRU, CapacityMeter
from tools.bench_fair_figures import (
    LOCKS,
    overtakes,
    percentile,
    steady_gaps_ms,
    ticket_overtakes,
    tickets_and_fences,
)
from tools.bench_fair_floor import FloorProbe
from tools.bench_fair_load import run
from tools.bench_fair_runtime import RuntimeMeter, wait_covered

__all__ = [
    "DEFAULT_EXTRA_LOADS", "HEADERS", "LOCKS", "PRICE_PER_RRU", "PRICE_PER_TRANSITION", "PRICE_PER_WRU",
    "THOUSAND_WORK_S", "CapacityMeter", "FloorProbe", "RuntimeMeter", "main", "overtakes", "parse_loads",
    "percentile", "rows", "run", "steady_gaps_ms", "ticket_overtakes", "tickets_and_fences", "under_load_lines",
    "wait_covered",
]


def parse_loads(text: str, locks: Sequence[str]) -> list[tuple[float, int, tuple[str, ...]]]:
    """``--loads``: ``work:N[:Lock+Lock]`` entries, comma-separated (no locks named: ``locks``)."""
    out = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        parts = entry.split(":")
        if len(parts) not in (2, 3):
            raise ValueError(f"--loads entry {entry!r}: expected work:N[:Lock+Lock]")
        named = tuple(parts[2].split("+")) if len(parts) == 3 else tuple(locks)
        if any(name not in LOCKS for name in named):
            raise ValueError(f"--loads entry {entry!r}: locks among {', '.join(LOCKS)}")
        work, n = float(parts[0]), int(parts[1])
        if work <= 0 or n < 2:
            raise ValueError(f"--loads entry {entry!r}: work > 0 and N >= 2")
        out.append((work, n, named))
    return out


HEADERS = ("work", "N", "lock", "lock transitions/run", "write units/run", "read units/run", "$/run (lock)",
           "handoff p50 / p99 / max (ms)", "p50 ÷ floor", "steady p50 / p99 (ms) [gaps]",
           "overtakes (any gap) [by ticket]", "makespan ÷ ideal", "work ÷ asked", "makespan ÷ work", "succeeded")


def rows(results: dict) -> list[list[str]]:
    return [[f"{r['work_s']:g} s", str(r["n"]), r["lock"], f"{r['lock_transitions_per_run']:.1f}",
             f"{r['wru_per_run']:.1f}", f"{r['rru_per_run']:.1f}", f"{r['dollars_per_run'] * 1e6:.1f} µ$",
             f"{r['handoff_p50_ms']:.0f} / {r['handoff_p99_ms']:.0f} / {r['max_gap_ms']:.0f}",
             f"{r['handoff_p50_over_floor']:.2f}",
             f"{r['steady_p50_ms']:.0f} / {r['steady_p99_ms']:.0f} [{r['steady_gaps']}]",
             f"{r['overtakes']} ({r['overtakes_any_gap']})"
             + (f" [{r['ticket_overtakes']}]" if r.get("ticket_overtakes") is not None else ""),
             f"{r['makespan_ratio']:.2f}", f"{r['work_ratio']:.2f}", f"{r['makespan_over_work']:.2f}",
             f"{r['succeeded']}/{r['runs']}"] for r in results["loads"]]


#: ``--thousand``: the work of each of the 1,000 waiters (the run checks invariants and flat
#: cost per run; its makespan is this machine starting 1,000 executions).
THOUSAND_WORK_S = 0.1
#: Loads ``make bench-fair`` runs beyond the grid: every lock at N = 100 (0.25 s of work).
DEFAULT_EXTRA_LOADS = "0.25:100"


def under_load_lines(r: dict) -> list[str]:
    """The load's runtime figures, burst and steady: the floor under load beside the handoff,
    the handoff's parts, DynamoDB requests and their wait for the runtime's serialization, the
    tick thread's lateness."""
    u = r.get("under_load") or {}
    if not u:
        return []
    f = lambda d: f"{d['p50']:.0f} / {d['p99']:.0f} / {d['max']:.0f} [{d['n']}]"  # noqa: E731
    out = [f"burst (start -> last arrival) {u.get('burst_s', float('nan')):.1f} s; process CPU "
           f"{u['runtime']['process_cpu_cores']:.2f} cores" if "runtime" in u else ""]
    for phase in ("burst", "steady"):
        line = [f"{phase}:"]
        if "floor" in u:
            line.append(f"floor p50/p99/max [n] {f(u['floor'][phase])} ms")
        if "handoff_parts" in u:
            h = u["handoff_parts"][phase]
            line.append(f"handoff {f(h['gap'])} = grant {f(h['grant'])} (serialization wait "
                        f"{f(h['grant_lock_wait'])}) + SendTaskSuccess {f(h['wake'])} + rest {f(h['rest'])}; "
                        f"sums: take {h['take']['sum'] / 1000:.1f} s, gaps {h['gap']['sum'] / 1000:.1f} s, "
                        f"resume {h['resume']['sum'] / 1000:.1f} s")
        if "runtime" in u:
            t = u["runtime"][phase]
            line.append(f"DynamoDB request {f(t['ddb_request_ms'])} ms, serialization wait {f(t['ddb_lock_wait_ms'])}"
                        f" ms, serialization busy {t['ddb_lock_busy']:.0%} (held during waits > 100 ms: "
                        f"{t['wait_covered']:.0%}); SendTaskSuccess "
                        f"{f(t['send_task_success_ms'])} ms; tick late {f(t['tick_late_ms'])} ms")
        out.append("; ".join(line))
    return [line for line in out if line]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_fair", description=__doc__.split("\n")[0])
    parser.add_argument("--work", default="0.25,1,2", help="protected work sizes in seconds (default 0.25,1,2)")
    parser.add_argument("--runs", default="10,30", help="runs started together on one key (default 10,30)")
    parser.add_argument("--locks", default=",".join(LOCKS), help="which locks (default Polling,Fair,Baseline)")
    parser.add_argument("--loads", default=DEFAULT_EXTRA_LOADS,
                        help="more loads beyond the grid: work:N[:Lock+Lock], comma-separated "
                             f"(default {DEFAULT_EXTRA_LOADS!r}: every lock at N = 100; '' for none)")
    parser.add_argument("--floor", type=int, default=30, help="samples of the engine's floor (default 30)")
    parser.add_argument("--thousand", action="store_true",
                        help="the invariant run instead: 1,000 fair waiters with AWS-sized tokens on one key, "
                             f"{THOUSAND_WORK_S:g} s of work each, on DynamoDB Local (unless --backend says)")
    parser.add_argument("--no-under-load", action="store_true",
                        help="skip the runtime's figures during each load (the floor probe, request timing)")
    parser.add_argument("--backend", choices=("moto", "dynamodb-local"), default="moto")
    parser.add_argument("--out", type=Path, default=Path("out") / "bench-fair")
    args = parser.parse_args(argv)
    if args.thousand:
        args.work, args.runs, args.loads, args.locks = f"{THOUSAND_WORK_S:g}", "1000", "", "Fair"
        if "--backend" not in (argv if argv is not None else sys.argv):
            args.backend = "dynamodb-local"
    works = [float(w) for w in args.work.split(",")]
    runs = [int(n) for n in args.runs.split(",")]
    if any(w <= 0 for w in works) or any(n < 2 for n in runs):
        parser.error("--work > 0 and --runs >= 2")
    locks = [name for name in args.locks.split(",") if name]
    if any(name not in LOCKS for name in locks):
        parser.error(f"--locks: choose among {', '.join(LOCKS)}")
    try:
        extra_loads = parse_loads(args.loads, locks)
    except ValueError as error:
        parser.error(str(error))
    results = run(works=works, runs=runs, backend=args.backend, locks=locks, floor_samples=args.floor,
                  extra_loads=extra_loads, under_load=not args.no_under_load)
    extra = results["uncontended_extra_transitions"]
    print(f"Fair lock benchmark, backend {args.backend}, {results['elapsed_s']} s")
    print(f"floor (write -> SendTaskSuccess -> parked task resumed, no lock): p50 {results['floor_p50_ms']:.0f} ms, "
          f"p99 {results['floor_p99_ms']:.0f} ms")
    print("uncontended extra transitions per run: " + ", ".join(f"{k} {v}" for k, v in extra.items()))
    print(table_text(HEADERS, rows(results)))
    bad = [r for r in results["loads"] if r["overlaps"] or r["fence_violations"] or r["succeeded"] != r["runs"]
           or r.get("left_behind") or (r["lock"] == "Fair" and r.get("ticket_overtakes"))]
    for r in results["loads"]:
        print(f"{r['lock']} {r['work_s']:g} s x {r['n']}: makespan {r['makespan_ratio'] * r['n'] * r['work_s']:.1f} s = "
              f"{r['lead_s']:.1f} s before the first work + {r['work_ratio'] * r['n'] * r['work_s']:.1f} s of work "
              f"as run + {r['between_s']:.1f} s between works + {r['trail_s']:.1f} s after the last")
        if r["lock"] == "Fair":
            print(f"fair handoff paths, {r['work_s']:g} s x {r['n']}: {r['paths']}")
        for line in under_load_lines(r):
            print("  " + line)
    print("invariants: " + ("hold (all succeeded, no overlap, fences increase, the fair lock granted in ticket "
                            "order, nothing left held or queued)" if not bad else f"VIOLATED {bad}"))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    (args.out / "results.md").write_text(
        f"floor p50 {results['floor_p50_ms']:.0f} ms, p99 {results['floor_p99_ms']:.0f} ms; "
        "uncontended extra transitions per run: " + ", ".join(f"{k} {v}" for k, v in extra.items()) + "\n\n"
        + table_markdown(HEADERS, rows(results)) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
