"""Benchmark of coalescing (``make bench-flow``, with ``tools.bench_rate``): a burst of ``--runs``
runs started together on one key, each ``--work`` seconds of work, under three locks side by
side in one run on one LocalCloud:

* ``Polling``: ``Lock.mutex`` (waiters poll);
* ``Fair``: ``Lock.fair`` (waiters park in arrival order);
* ``Newest``: ``Lock.fair(queue=QueueLimit.keep_newest(1))`` (the run at work plus the newest
  queued one; every other queued run ends ``Lock.Superseded`` without entering its work).

Figures per lock: how many runs entered the work, how they ended, the key's makespan (first start
to last end), the most runs at work at once (the histories' work intervals, service clock: must
be 1) and whether the fences of the work runs strictly increase in their order of entry, state
transitions (billed: states entered plus retry attempts) per event, DynamoDB
write and read units per event, and dollars per event and for the whole burst (the lock's own
cost: the work's - a Lambda call, an API's - comes on top, once per work run) at on-demand prices (Step Functions
STANDARD, DynamoDB on demand: ``tools.bench_fair``'s prices). Exits 1 when the coalescing lock
ran the work more often than the run at work, the newest and the runs that arrived after the
work began (it cannot be fewer than two), when a superseded run entered its work, when two
runs of any lock were at work at once, or when a work run's fence did not rise.
"""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any, Sequence

from tools import scenario
from tools.bench_fair import PRICE_PER_RRU, PRICE_PER_TRANSITION, PRICE_PER_WRU, CapacityMeter

WORK = "Work"  # the work's Wait state is <lock>Work (a CustomState is named by its construct id)
LOCKS = ("Polling", "Fair", "Newest")


def build_stack(app: Any, stack_id: str) -> Any:
    import aws_cdk as cdk
    from aws_cdk import aws_stepfunctions as sfn

    from locked_workflow import Lock, LockedWorkflow, LockTable, QueueLimit
    from locked_workflow.state_machines.lock_protocol import jsonata

    stack = cdk.Stack(app, stack_id)
    locks = LockTable(stack, "Locks", removal_policy=cdk.RemovalPolicy.DESTROY).table
    key = jsonata("$states.input.key")
    kinds = {"Polling": Lock.mutex(key), "Fair": Lock.fair(key),
             "Newest": Lock.fair(key, queue=QueueLimit.keep_newest(1))}
    for name, lock in kinds.items():
        work = sfn.CustomState(stack, f"{name}{WORK}", state_json={
            "Type": "Wait", "QueryLanguage": "JSONata", "Seconds": jsonata("$states.input.workSeconds")})
        done = sfn.Pass.jsonata(stack, f"{name}Done", outputs=jsonata("{'fence': $lock.fence}"))
        LockedWorkflow(stack, name, lock=lock, protected=work.next(done), table=locks,
                       max_wait=cdk.Duration.minutes(10), logging=False, tracing=False)
    return stack


def _is_work(event: dict) -> bool:
    return str((event.get("stateEnteredEventDetails") or {}).get("name", "")).endswith(WORK)


def _entered_work(history: Sequence[dict]) -> bool:
    return any(_is_work(e) for e in history)


def _work_started_ms(history: Sequence[dict]) -> float | None:
    return next((scenario.epoch_ms(e["timestamp"]) for e in history if _is_work(e)), None)


def most_at_once(intervals: Sequence[tuple[float, float]]) -> int:
    """The most of ``intervals`` (start, end) open at one time (an end and a start at the same
    instant do not overlap)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = current = 0
    for _, step in events:  # at one instant the ends (-1) sort before the starts (+1)
        current += step
        most = max(most, current)
    return most


def burst(cloud: Any, arn: str, *, runs: int, work_s: float, meter: CapacityMeter, work_state: str) -> dict:
    key = f"burst-{uuid.uuid4().hex[:8]}"
    started = time.time() * 1000
    arns = [cloud.start_execution(arn, {"key": key, "workSeconds": work_s}) for _ in range(runs)]
    results = cloud.wait_all(arns, timeout=1800)
    ended = max(scenario.epoch_ms(r.stop_date) for r in results if r.stop_date is not None)
    billed = sum(scenario.transition_count(r.history).billed for r in results)
    wru, rru = meter.of(key)
    starts = [r.history[0] for r in results]  # ExecutionStarted (wait_all read each history once)
    worked = [r for r in results if _entered_work(r.history)]
    first_work = min((_work_started_ms(r.history) for r in worked), default=None)
    # runs that arrived after the first work began: each could be the newest when the work ended
    after = sum(1 for s in starts if first_work is not None and scenario.epoch_ms(s["timestamp"]) > first_work)
    sections = [s for r in results for s in scenario.critical_sections(r.arn, r.history, protected_state=work_state)]
    fences = [s.fence for s in sorted(sections, key=lambda s: s.start_ms)]
    outcomes: dict[str, int] = {}
    for r in results:
        outcome = r.status if r.status == "SUCCEEDED" else f"{r.status} {r.error}"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return {
        "runs": runs, "work runs": len(worked), "outcomes": outcomes, "arrived after the work began": after,
        "makespan s": round((ended - started) / 1000, 1),
        "transitions/event": round(billed / runs, 1),
        "WRU/event": round(wru / runs, 1), "RRU/event": round(rru / runs, 1),
        "µ$/event": round((billed * PRICE_PER_TRANSITION + wru * PRICE_PER_WRU + rru * PRICE_PER_RRU) / runs * 1e6, 1),
        "µ$ for the burst": round((billed * PRICE_PER_TRANSITION + wru * PRICE_PER_WRU + rru * PRICE_PER_RRU) * 1e6),
        "superseded entered the work": sum(1 for r in worked if r.status != "SUCCEEDED"),
        "most at work at once": most_at_once([(s.start_ms, s.end_ms) for s in sections]),
        "fences": fences,
        "fences rise": None not in fences and all(a < b for a, b in zip(fences, fences[1:])),
    }


def run(args: argparse.Namespace) -> dict[str, dict]:
    from locked_workflow.testing import LocalCloud
    from locked_workflow.testing.synth import synth_app

    synthesized = synth_app(lambda app: build_stack(app, "CoalesceBench"))
    figures: dict[str, dict] = {}
    with LocalCloud(backend=args.backend) as cloud:
        app = cloud.deploy(synthesized.template, assets_dir=synthesized.assets_dir)
        with scenario.QuietCollector(), CapacityMeter() as meter:
            for name in LOCKS:
                figures[name] = burst(cloud, app.state_machine_arn(name), runs=args.runs, work_s=args.work,
                                      meter=meter, work_state=f"{name}{WORK}")
    return figures


def table(figures: dict[str, dict]) -> str:
    rows = ["work runs", "outcomes", "most at work at once", "fences rise", "makespan s", "transitions/event", "WRU/event", "RRU/event", "µ$/event",
            "µ$ for the burst"]
    out = [f"{'':20}" + "".join(f"{name:>36}" for name in figures)]
    for row in rows:
        cells = []
        for name in figures:
            value = figures[name][row]
            text = "; ".join(f"{k.split()[-1]} {v}" for k, v in sorted(value.items())) if isinstance(value, dict) else str(value)
            cells.append(f"{text:>36}")
        out.append(f"{row:20}" + "".join(cells))
    return "\n".join(out)


def broken(figures: dict[str, dict]) -> list[str]:
    newest = figures["Newest"]
    bound = 2 + newest["arrived after the work began"]
    problems = []
    if not 2 <= newest["work runs"] <= bound:
        problems.append(f"the coalescing lock ran the work {newest['work runs']} times (bound {bound})")
    if newest["superseded entered the work"]:
        problems.append(f"{newest['superseded entered the work']} superseded runs entered the work")
    for name, figure in figures.items():
        if figure["most at work at once"] > 1:
            problems.append(f"{name}: {figure['most at work at once']} runs at work at once")
        if not figure["fences rise"]:
            problems.append(f"{name}: the work runs' fences did not strictly increase: {figure['fences']}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--work", type=int, default=1, help="whole seconds of work per run (a Wait state)")
    parser.add_argument("--backend", choices=("moto", "dynamodb-local"), default="moto")
    args = parser.parse_args(argv)
    figures = run(args)
    print(f"\nA burst of {args.runs} runs on one key, {args.work:g} s of work each ({args.backend}):\n")
    print(table(figures))
    problems = broken(figures)
    for problem in problems:
        print(f"BROKEN: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
