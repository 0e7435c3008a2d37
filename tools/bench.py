"""``make bench``: what the lock costs and how it behaves under contention, offline.

::

    python -m tools.bench [--runs N=10] [--work-seconds 2] [--keys K=50]
        [--wait-policy first,rate,max,jitter] [--sweep] [--backend moto|dynamodb-local]
        [--out out/bench]

Deploys one purpose-built stack into a :class:`~locked_workflow.testing.LocalCloud`. Its
protected work is a Lambda task ("Work") that sleeps ``--work-seconds``:

* ``Unlocked`` - the work alone; ``Ours`` - ``LockedWorkflow`` around it (the construct's
  defaults, or ``--wait-policy``); ``UnlockedChain`` / ``OursChain`` - a two-state chain
  (Pass, Work), which the construct wraps in a one-branch Parallel;
* ``Baseline`` - the lock as common samples write it, on the *same* acquire/release
  UpdateItem expressions (imported from ``locked_workflow.state_machines.lock_protocol``): acquire retries
  ``DynamoDB.ConditionalCheckFailedException`` 6 times doubling from 1 s (no jitter), then a
  Catch goes to a fixed 3 s Wait and back to acquire.

Measured (all from execution histories; see ``scenario``):

* **uncontended overhead** - state transitions (states entered + retry attempts, as AWS
  bills them) and DynamoDB calls of one run, locked minus unlocked;
* **contention** - N runs started together on one key: transitions and DynamoDB calls per
  completed run (failed conditional writes included), makespan / (N x work), mean and max
  wait (lock acquired - execution started), handoff gap (release acknowledged - next
  acquire), fairness (max wait / mean wait);
* **independence** - K keys x 1 run started together: wall time / one run's wall time.

Every figure is reported for ours and the baseline, and as ours / baseline; transitions
also as dollars at $0.025 per 1,000. ``--sweep`` runs the contention case for a few
candidate wait policies and names the one meeting makespan ratio <= 1.3 with the fewest
transitions per run. Results: a table on stdout, ``<out>/results.json``,
``<out>/results.md`` (``sweep.json`` / ``sweep.md`` for ``--sweep``).

The bench lives in modules of its own, one concept each: ``tools/bench_stack.py`` (the stack
and its variants), ``tools/bench_load.py`` (running loads, the contention case),
``tools/bench_results.py`` (the main run and its report) and ``tools/bench_sweep.py`` (the
wait-policy sweep). This module is the command line and re-exports the names other tools and
the tests use.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

from tools.bench_load import Contention, contention, run_load
from tools.bench_results import HEADERS, BenchResults, Row, run_bench, table_markdown, table_text
from tools.bench_stack import (
    BASELINE_LEASE_MS,
    BASELINE_LOOP_WAIT_S,
    BASELINE_RETRY,
    WORK_CODE,
    WORK_STATE,
    BenchApp,
    build_bench_stack,
    deploy_bench,
    parse_policy,
    policy_id,
    policy_text,
)
from tools.bench_sweep import (
    SWEEP_HEADERS,
    SWEEP_MAKESPAN_TARGET,
    SWEEP_POLICIES,
    SweepEntry,
    choose_policy,
    run_sweep,
    sweep_rows,
)
from locked_workflow.state_machines.lock_protocol import WaitPolicy

__all__ = [
    "BASELINE_LEASE_MS", "BASELINE_LOOP_WAIT_S", "BASELINE_RETRY", "HEADERS", "SWEEP_HEADERS",
    "SWEEP_MAKESPAN_TARGET", "SWEEP_POLICIES", "WORK_CODE", "WORK_STATE", "BenchApp", "BenchResults",
    "Contention", "Row", "SweepEntry", "build_bench_stack", "choose_policy", "contention", "deploy_bench",
    "main", "parse_args", "parse_policy", "policy_id", "policy_text", "run_bench", "run_load", "run_sweep",
    "sweep_rows", "table_markdown", "table_text",
]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench",
        description="Benchmark the lock on the local runtime (ours vs a common-samples baseline).",
    )
    parser.add_argument("--runs", type=int, default=10, help="runs on one key in the contention case (default 10)")
    parser.add_argument("--work-seconds", type=float, default=2.0, help="duration of the protected work (default 2)")
    parser.add_argument("--keys", type=int, default=50, help="keys in the independence case (default 50)")
    parser.add_argument("--wait-policy", type=parse_policy, default=None, metavar="FIRST,RATE,MAX,JITTER",
                        help="override our wait policy, e.g. 1,1.5,4,1 (default: the construct's WaitPolicy())")
    parser.add_argument("--sweep", action="store_true",
                        help="run the contention case for candidate wait policies instead, and pick one")
    parser.add_argument("--sweep-policies", default=None, metavar="P;P;...",
                        help="candidates for --sweep, e.g. '1,1.5,4,1;1,1,1,1' (default: 4 built in)")
    parser.add_argument("--repeats", type=int, default=1, help="loads of the contention case (per policy with --sweep); figures are means (default 1)")
    parser.add_argument("--backend", choices=("moto", "dynamodb-local"), default="moto")
    parser.add_argument("--out", type=Path, default=Path("out") / "bench", help="results folder (default out/bench)")
    args = parser.parse_args(argv)
    if args.runs < 2 or args.keys < 1 or args.work_seconds < 0 or args.repeats < 1:
        parser.error("--runs >= 2, --keys >= 1, --work-seconds >= 0, --repeats >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    given = list(sys.argv[1:] if argv is None else argv)
    command = " ".join(["python -m tools.bench", *given])
    args.out.mkdir(parents=True, exist_ok=True)
    if args.sweep:
        policies = (
            [parse_policy(p) for p in args.sweep_policies.split(";") if p.strip()]
            if args.sweep_policies
            else list(SWEEP_POLICIES)
        )
        entries = run_sweep(policies=policies, runs=args.runs, work_s=args.work_seconds,
                            repeats=args.repeats, backend=args.backend)
        rows = sweep_rows(entries)
        chosen = choose_policy(entries)
        verdict = (
            f"chosen: {policy_text(chosen.policy)} - makespan ratio {chosen.makespan_ratio:.2f} "
            f"<= {SWEEP_MAKESPAN_TARGET} at the fewest transitions per run ({chosen.transitions_per_run:.1f})"
            if chosen
            else f"no candidate met makespan ratio <= {SWEEP_MAKESPAN_TARGET}"
        )
        print(f"Wait-policy sweep: {args.runs} runs on one key, {args.work_seconds:g} s of work, "
              f"{args.repeats} load(s) each, backend {args.backend}")
        print(table_text(SWEEP_HEADERS, rows))
        print(verdict)
        overlaps = sum(e.overlaps for e in entries)
        print(f"overlapping critical sections in all loads: {overlaps}")
        (args.out / "sweep.json").write_text(json.dumps({
            "command": command, "runs": args.runs, "work_seconds": args.work_seconds,
            "repeats": args.repeats, "backend": args.backend, "target_makespan_ratio": SWEEP_MAKESPAN_TARGET,
            "entries": [{**asdict(e), "meets_target": e.meets_target} for e in entries],
            "chosen": asdict(chosen.policy) if chosen else None,
        }, indent=2))
        (args.out / "sweep.md").write_text(table_markdown(SWEEP_HEADERS, rows) + f"\n\n{verdict}\n")
        print(f"wrote {args.out / 'sweep.json'} and {args.out / 'sweep.md'}")
        return 1 if overlaps else 0

    results = run_bench(runs=args.runs, work_s=args.work_seconds, keys=args.keys,
                        ours=args.wait_policy, backend=args.backend, repeats=args.repeats)
    results.config["command"] = command
    policy = WaitPolicy(**results.config["ours_wait_policy"])
    print(f"Lock benchmark ({results.config['date']}): ours = LockedWorkflow, wait policy {policy_text(policy)}; "
          f"baseline = retry 6× from 1 s ×2, then 3 s wait loop; backend {args.backend}; "
          f"{results.config['elapsed_s']} s")
    print(results.table())
    chain = results.config["chain_overhead"]
    print(f"(a two-state chain, wrapped in a Parallel: {chain['transitions']} extra transitions, "
          f"{chain['dynamodb_calls']} DynamoDB calls per uncontended run)")
    control = results.independence["Unlocked"]
    print(f"(independence control - the unlocked workflow, {args.keys} keys: wall ÷ one run "
          f"{control['ratio']:.2f}; starting {args.keys} executions took {control['start_spread_s']:.1f} s unlocked, "
          f"{results.independence['Ours']['start_spread_s']:.1f} s ours, "
          f"{results.independence['Baseline']['start_spread_s']:.1f} s baseline: the in-process runtime's CPU on "
          f"{os.cpu_count()} cores, not the lock)")
    bad = {v: i for v, i in results.invariants.items() if i["overlaps"] or i["fence_violations"]}
    print("invariants under contention: " + ("hold (no overlap, fences increase)" if not bad else f"VIOLATED {bad}"))
    (args.out / "results.json").write_text(json.dumps(results.to_json(), indent=2))
    (args.out / "results.md").write_text(results.markdown() + "\n")
    print(f"wrote {args.out / 'results.json'} and {args.out / 'results.md'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
