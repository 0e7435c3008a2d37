"""``make bench-shared``: the read/write lock against the mutex for all, on a read-mostly load.

::

    python -m tools.bench_shared [--runs 30] [--reads 0.9] [--work 1] [--seed 18]
        [--backend moto|dynamodb-local] [--out out/bench-shared]

One key, ``--runs`` runs started together, a ``--reads`` share of them readers (the rest
writers, shuffled with ``--seed``), each holding the key for ``--work`` seconds of protected
work (a Lambda that sleeps). Two locks around the same work, one after the other on fresh keys:

* ``Shared``: readers take ``Lock.shared``, writers ``Lock.exclusive`` (STANDARD, parked
  waiters);
* ``Mutex``: every run takes ``Lock.mutex`` (the ``LockedWorkflow`` defaults: waiters poll);
* ``Unlocked``: no lock - what the runtime itself takes to run the load (the floor).

Reported per lock: makespan (first start to last end) and makespan ÷ the mutex's ideal
(N × work); state transitions per run as billed (states entered plus retries) and the lock's
share of them (minus an unlocked run's); DynamoDB requests per run made by the state machines;
write and read request units per run (each call's ``ConsumedCapacity``, as in
:mod:`tools.bench_fair`); the most readers seen inside together (from the runs' histories); how
many parks ended by a wake-up and how many by their timeout (the fallback).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any, Sequence

from tools import scenario
from tools.bench import WORK_CODE, WORK_STATE, table_markdown, table_text
from tools.bench_fair import CapacityMeter

#: ``Unlocked``: the same runs with no lock - the runtime's own makespan for the load (its floor).
LOCKS = ("Unlocked", "Shared", "Mutex")


def build_stack(app: Any) -> Any:
    from aws_cdk import Duration, RemovalPolicy, Stack
    from aws_cdk import aws_lambda as lambda_, aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks

    from locked_workflow import Lock, LockedWorkflow
    from locked_workflow.state_machines.lock_protocol import jsonata

    stack = Stack(app, "SharedBench")
    function = lambda_.Function(stack, "WorkFunction", runtime=lambda_.Runtime.PYTHON_3_12, handler="index.handler",
                                code=lambda_.Code.from_inline(WORK_CODE), timeout=Duration.seconds(120))

    def work(scope_id: str) -> Any:
        return tasks.LambdaInvoke.jsonata(
            stack, f"{scope_id}Work", state_name=WORK_STATE, lambda_function=function,
            payload=sfn.TaskInput.from_object({"seconds": jsonata("$states.input.workSeconds")}),
            outputs=jsonata("$states.result.Payload"))

    key = jsonata("$states.input.key")
    common = dict(max_wait=Duration.minutes(10), timeout=Duration.minutes(30), logging=False, tracing=False,
                  table_removal_policy=RemovalPolicy.DESTROY)
    sfn.StateMachine(stack, "Unlocked", definition_body=sfn.DefinitionBody.from_chainable(work("Unlocked")),
                     query_language=sfn.QueryLanguage.JSONATA)
    reader = LockedWorkflow(stack, "Reader", lock=Lock.shared(key), protected=work("Reader"), **common)
    LockedWorkflow(stack, "Writer", lock=Lock.exclusive(key), protected=work("Writer"), table=reader.table,
                   shares_lock_with=[reader.state_machine],
                   **{k: v for k, v in common.items() if k != "table_removal_policy"})
    LockedWorkflow(stack, "Mutex", lock=Lock.mutex(key), protected=work("Mutex"), **common)
    return stack


def _max_together(sections: Sequence[Any]) -> int:
    """The most protected works inside at once (history timestamps of the work's state)."""
    events = sorted([(s.start_ms, 1) for s in sections] + [(s.end_ms, -1) for s in sections])
    inside = best = 0
    for _, step in events:
        inside += step
        best = max(best, inside)
    return best


def load(cloud: Any, arns: dict, plan: Sequence[str], *, lock: str, work_s: float, key: str,
         meter: CapacityMeter, unlocked_transitions: int) -> dict:
    machine = {"Shared": {"read": arns["Reader"], "write": arns["Writer"]},
               "Mutex": {"read": arns["Mutex"], "write": arns["Mutex"]},
               "Unlocked": {"read": arns["Unlocked"], "write": arns["Unlocked"]}}[lock]
    runs = [cloud.start_execution(machine[role], {"key": key, "workSeconds": work_s}) for role in plan]
    statuses = scenario.wait_all(cloud, runs, timeout_s=1800,
                                 progress=scenario.stderr_progress(f"{lock} {len(plan)}×{work_s:g}s".ljust(20)))
    histories = {a: cloud.history(a) for a in runs}
    metrics = [scenario.run_metrics(a, histories[a], protected_state=WORK_STATE, status=statuses[a], key=key)
               for a in runs]
    # how the waits ended: woken by a handoff, or by the park's timeout (the fallback)
    woken = sum(1 for h in histories.values() for e in h if e["type"] == "TaskSucceeded"
                and (e.get("taskSucceededEventDetails") or {}).get("resource") == "transactWriteItems.waitForTaskToken")
    timed_out = sum(1 for h in histories.values() for e in h if e["type"] == "TaskTimedOut")
    summary = scenario.summarize_load(metrics)
    readers = [s for m, role in zip(metrics, plan) if role == "read" for s in m.sections]
    wru, rru = meter.of(key)
    return {
        "lock": lock, "runs": len(plan), "succeeded": summary.succeeded, "makespan_s": summary.makespan_s,
        "makespan_over_ideal": summary.makespan_s / (len(plan) * work_s),
        "transitions_per_run": summary.transitions_per_run,
        "lock_transitions_per_run": summary.transitions_per_run - unlocked_transitions,
        "dynamodb_per_run": summary.dynamodb_per_run, "wru_per_run": wru / len(plan), "rru_per_run": rru / len(plan),
        "max_readers_together": _max_together(readers), "woken": woken, "park_timeouts": timed_out,
    }


def run(*, runs: int, reads: float, work_s: float, seed: int, backend: str) -> dict:
    from locked_workflow.testing import LocalCloud
    from locked_workflow.testing.synth import synth_app

    plan = ["read"] * round(runs * reads) + ["write"] * (runs - round(runs * reads))
    random.Random(seed).shuffle(plan)
    synthesized = synth_app(build_stack)
    started = time.monotonic()
    results: dict = {"backend": backend, "runs": runs, "reads": plan.count("read"), "writes": plan.count("write"),
                     "work_s": work_s, "seed": seed, "loads": []}
    with LocalCloud(backend=backend) as cloud:
        deployment = cloud.deploy(synthesized.template, assets_dir=synthesized.assets_dir)
        stack = synthesized.stack_name
        arns = {name: deployment.state_machine_arn(f"{stack}/{name}/StateMachine/Resource")
                for name in ("Reader", "Writer", "Mutex")}
        arns["Unlocked"] = deployment.state_machine_arn(f"{stack}/Unlocked/Resource")
        solo = cloud.start_execution(arns["Unlocked"], {"key": "solo", "workSeconds": 0})
        cloud.wait_for(solo, timeout=120)
        unlocked = scenario.transition_count(cloud.history(solo)).billed
        with CapacityMeter() as meter:
            for lock in LOCKS:
                results["loads"].append(load(cloud, arns, plan, lock=lock, work_s=work_s, key=f"hot-{lock}#",
                                             meter=meter, unlocked_transitions=unlocked))
    results["elapsed_s"] = round(time.monotonic() - started, 1)
    return results


HEADERS = ("lock", "runs (read/write)", "makespan (s)", "makespan ÷ N×work", "transitions/run", "lock transitions/run",
           "DynamoDB requests/run", "write units/run", "read units/run", "readers together (max)",
           "woken / park timeouts", "succeeded")


def rows(results: dict) -> list[list[str]]:
    mix = f"{results['runs']} ({results['reads']}/{results['writes']})"
    what = {"Shared": " (shared/exclusive)", "Mutex": " (for all)", "Unlocked": " (no lock: the floor)"}
    return [[r["lock"] + what[r["lock"]], mix,
             f"{r['makespan_s']:.1f}", f"{r['makespan_over_ideal']:.2f}", f"{r['transitions_per_run']:.1f}",
             f"{r['lock_transitions_per_run']:.1f}", f"{r['dynamodb_per_run']:.1f}", f"{r['wru_per_run']:.1f}",
             f"{r['rru_per_run']:.1f}", str(r["max_readers_together"]), f"{r['woken']} / {r['park_timeouts']}",
             f"{r['succeeded']}/{r['runs']}"]
            for r in results["loads"]]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_shared", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="runs started together on one key (default 30)")
    parser.add_argument("--reads", type=float, default=0.9, help="share of readers, 0 to 1 (default 0.9)")
    parser.add_argument("--work", type=float, default=1.0, help="protected work in seconds (default 1)")
    parser.add_argument("--seed", type=int, default=18, help="seed of the readers' and writers' order (default 18)")
    parser.add_argument("--backend", choices=("moto", "dynamodb-local"), default="moto")
    parser.add_argument("--out", type=Path, default=Path("out") / "bench-shared")
    args = parser.parse_args(argv)
    if args.runs < 2 or not 0 <= args.reads <= 1 or args.work <= 0:
        parser.error("--runs >= 2, --reads from 0 to 1, --work > 0")
    results = run(runs=args.runs, reads=args.reads, work_s=args.work, seed=args.seed, backend=args.backend)
    print(f"Read/write lock benchmark, backend {args.backend}, {args.work:g} s of work, {results['elapsed_s']} s")
    print(table_text(HEADERS, rows(results)))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    (args.out / "results.md").write_text(table_markdown(HEADERS, rows(results)) + "\n")
    return 0 if all(r["succeeded"] == r["runs"] for r in results["loads"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
