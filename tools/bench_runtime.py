"""``make bench-runtime``: the offline runtime's speed, this tree against a baseline commit.

    python -m tools.bench_runtime                      # against 8ae37f4 (the baseline of issue 27)
    python -m tools.bench_runtime --baseline main --only states,wakeups --repeat 2

The baseline is checked out with ``git worktree add --detach`` into a temporary folder (removed
at the end). Every measurement runs in a process of its own, with ``PYTHONPATH`` naming the tree
it measures; the two trees alternate (baseline first, then this tree, then the other way round),
so a machine that gets busier halfway hurts both alike. The figures, each for both trees and as
the ratio this/baseline:

* ``quickstart``: the README's quick-start test, step by step, in a fresh process: the imports
  (``locked_workflow.testing`` and the stack), ``synth_app``, ``LocalCloud`` + ``deploy``, the
  test's three events until every run ended, and its whole wall time (those four); then one
  uncontended run (one event, 0.2 s of work);
* ``states``: the time per state entered of a mutex-locked workflow of Pass states (no work,
  distinct keys: nothing waits on the lock), one execution at a time, and with 30 running; and
  the process's CPU time (``time.process_time``: every thread, the harness's polls included)
  per state entered over the same runs - a figure a busy machine disturbs far less than the
  wall time (other processes' load stretches the wall time, not this process's CPU time);
* ``wakeups``: a ``SendTaskSuccess`` (a wake-up) as the session grows: the call's latency and
  the time until the woken execution's next state, with 10, 100 and 1,000 executions parked;
* ``dynamodb``: DynamoDB request latency in a burst: 30 threads, each a conditional UpdateItem
  and a GetItem on an item of its own, 20 times, all at once (median and p95 latency; makespan).

Every input is fixed (keys, counts, order), so runs repeat; the whole takes a few minutes.
Times are medians of the samples of a run, in milliseconds unless named otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BASELINE = "8ae37f4"
MEASUREMENTS = ("quickstart", "states", "wakeups", "dynamodb")
RESULT_MARK = "BENCH-RESULT "
#: The README's blocks the quick-start test needs (its stack, its Lambda function).
QUICK_START_FILES = ("updates_stack.py", "functions/apply_update/index.py")
FILE_BLOCK = re.compile(r"^<!-- file: (\S+) -->\n```[a-z]*\n(.*?)^```$", re.MULTILINE | re.DOTALL)

WAKE_SIZES = (10, 100, 1000)
WAKE_SAMPLES = 7
CONCURRENT = 30
BURST_THREADS = 30
BURST_ROUNDS = 20
PASS_STATES = 8
ALONE_RUNS = 12


# -- the measurements (each in a child process; only the standard library and the tree measured) --


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 2)


def _entered(history: list[dict[str, Any]]) -> int:
    return sum(1 for event in history if event["type"].endswith("StateEntered"))


def _per_state_ms(history: list[dict[str, Any]]) -> float:
    entered = _entered(history)
    span = history[-1]["timestamp"] - history[0]["timestamp"]
    return _ms(span.total_seconds() / max(entered, 1))


def measure_quickstart(work: Path) -> dict[str, float]:
    app_dir = work / "app"
    os.chdir(app_dir)  # the stack's asset path is relative to the app's folder, as under `cdk`
    sys.path.insert(0, str(app_dir))
    start = time.perf_counter()
    from locked_workflow.testing import LocalCloud
    from locked_workflow.testing.synth import synth_app
    from updates_stack import UpdatesStack  # aws_cdk, the constructs

    imported = time.perf_counter()
    synthesized = synth_app(lambda app: UpdatesStack(app, "Updates"))
    synthesized_at = time.perf_counter()
    cloud = LocalCloud().__enter__()
    try:
        app = cloud.deploy(synthesized.template, assets_dir=synthesized.assets_dir)
        deployed = time.perf_counter()
        workflow = app.state_machine_arn("ApplyCustomerUpdate")

        def run(customer: str, count: int) -> None:
            cloud.put_events([{
                "EventBusName": app.event_bus_name("Bus"), "Source": "example.customers",
                "DetailType": "CustomerUpdated", "Detail": {"customerId": customer},
            } for _ in range(count)])
            arns = [e["executionArn"] for e in cloud.executions(workflow)
                    if json.loads(cloud.describe(e["executionArn"])["input"])["detail"]["customerId"] == customer]
            results = cloud.wait_all(arns, timeout=120, poll_s=0.01)
            assert [r.status for r in results] == ["SUCCEEDED"] * count, [r.status for r in results]

        run("42", 3)
        ran = time.perf_counter()
        one_start = time.perf_counter()
        run("7", 1)
        one = time.perf_counter() - one_start
    finally:
        cloud.__exit__(None, None, None)
    return {
        "import (s)": round(imported - start, 2),
        "synth_app (s)": round(synthesized_at - imported, 2),
        "LocalCloud + deploy (s)": round(deployed - synthesized_at, 2),
        "the test's 3 runs (s)": round(ran - deployed, 2),
        "quick-start test, whole (s)": round(ran - start, 2),
        "one uncontended run (s)": round(one, 3),
    }


def _deploy(cloud: Any, work: Path) -> Any:
    from locked_workflow.testing.synth import read_cdk_out

    synthesized = read_cdk_out(work / "bench.out", "RuntimeBench")
    return cloud.deploy(synthesized.template, assets_dir=synthesized.assets_dir)


def measure_states(work: Path) -> dict[str, float]:
    from locked_workflow.testing import LocalCloud

    with LocalCloud() as cloud:
        app = _deploy(cloud, work)
        workflow = app.state_machine_arn("Passes")
        cloud.wait_for(cloud.start_execution(workflow, {"id": "warm-up"}), timeout=60)
        alone, entered_alone = [], 0
        cpu = time.process_time()
        for n in range(ALONE_RUNS):
            result = cloud.wait_for(cloud.start_execution(workflow, {"id": f"alone-{n}"}), timeout=60, poll_s=0.01)
            assert result.status == "SUCCEEDED", result
            alone.append(_per_state_ms(result.history))
            entered_alone += _entered(result.history)
        cpu_alone = time.process_time() - cpu
        cpu = time.process_time()
        arns = [cloud.start_execution(workflow, {"id": f"together-{n}"}) for n in range(CONCURRENT)]
        results = cloud.wait_all(arns, timeout=300)
        cpu_together = time.process_time() - cpu
        assert all(r.status == "SUCCEEDED" for r in results), [r.status for r in results]
        together = [_per_state_ms(r.history) for r in results]
        entered_together = sum(_entered(r.history) for r in results)
    return {
        "per state entered, alone (ms)": round(statistics.median(alone), 2),
        f"per state entered, {CONCURRENT} running (ms)": round(statistics.median(together), 2),
        "CPU per state entered, alone (ms)": _ms(cpu_alone / max(entered_alone, 1)),
        f"CPU per state entered, {CONCURRENT} running (ms)": _ms(cpu_together / max(entered_together, 1)),
    }


def measure_wakeups(work: Path) -> dict[str, float]:
    from locked_workflow.testing import LocalCloud

    figures: dict[str, float] = {}
    with LocalCloud() as cloud:
        app = _deploy(cloud, work)
        workflow = app.state_machine_arn("Parks")
        table = app.table_name("Tokens")
        sfn = cloud.stepfunctions
        parked: list[tuple[str, str]] = []  # (id, execution arn), in start order

        def park_until(count: int) -> None:
            for n in range(len(parked), count):
                parked.append((f"p{n:05d}", cloud.start_execution(workflow, {"id": f"p{n:05d}"})))
            deadline = time.monotonic() + 300
            while cloud.dynamodb.scan(TableName=table, Select="COUNT")["Count"] < count:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"fewer than {count} executions parked after 300 s")
                time.sleep(0.1)

        woken = 0
        for size in WAKE_SIZES:
            park_until(size + woken)
            calls, wakes = [], []
            for _ in range(WAKE_SAMPLES):
                ident, arn = parked[woken]
                woken += 1
                token = cloud.dynamodb.get_item(TableName=table, Key={"pk": {"S": ident}})["Item"]["token"]["S"]
                sent = time.time()
                before = time.perf_counter()
                sfn.send_task_success(taskToken=token, output="{}")
                calls.append(_ms(time.perf_counter() - before))
                result = cloud.wait_for(arn, timeout=60, poll_s=0.01)
                assert result.status == "SUCCEEDED", result
                done = next(e for e in result.history if e["type"] == "PassStateEntered")
                wakes.append(_ms(done["timestamp"].timestamp() - sent))
            figures[f"SendTaskSuccess call, {size} parked (ms)"] = statistics.median(calls)
            figures[f"wake-up to next state, {size} parked (ms)"] = statistics.median(wakes)
    return figures


def measure_dynamodb(work: Path) -> dict[str, float]:
    from locked_workflow.testing import LocalCloud

    with LocalCloud() as cloud:
        client = cloud.dynamodb
        client.create_table(
            TableName="burst", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST",
        )
        barrier = threading.Barrier(BURST_THREADS)
        latencies: list[float] = []
        errors: list[BaseException] = []

        def worker(n: int) -> None:
            key = {"pk": {"S": f"item-{n}"}}
            mine = []
            try:
                barrier.wait()
                for _ in range(BURST_ROUNDS):
                    t = time.perf_counter()
                    client.update_item(TableName="burst", Key=key, UpdateExpression="ADD n :one",
                                       ConditionExpression="attribute_not_exists(holder)",
                                       ExpressionAttributeValues={":one": {"N": "1"}})
                    mine.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    client.get_item(TableName="burst", Key=key, ConsistentRead=True)
                    mine.append(time.perf_counter() - t)
            except BaseException as error:  # noqa: BLE001 - reported below
                errors.append(error)
            latencies.extend(mine)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(BURST_THREADS)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        makespan = time.perf_counter() - started
        assert not errors, errors
        counts = [int(client.get_item(TableName="burst", Key={"pk": {"S": f"item-{n}"}})["Item"]["n"]["N"])
                  for n in range(BURST_THREADS)]
        assert counts == [BURST_ROUNDS] * BURST_THREADS, counts
    latencies.sort()
    return {
        f"request in a burst of {BURST_THREADS} threads, median (ms)": _ms(statistics.median(latencies)),
        "request in the burst, p95 (ms)": _ms(latencies[int(len(latencies) * 0.95)]),
        f"burst makespan ({BURST_THREADS * BURST_ROUNDS * 2} requests) (s)": round(makespan, 2),
    }


def synth_bench_stack(work: Path) -> dict[str, float]:
    """The stack of ``states``, ``wakeups``: a mutex-locked workflow of Pass states, and a
    workflow that parks on ``.waitForTaskToken`` (its token in a table) - synthesized once."""
    import aws_cdk as cdk
    from aws_cdk import aws_dynamodb as dynamodb, aws_stepfunctions as sfn

    from locked_workflow import Lock, LockedWorkflow
    from locked_workflow.testing.synth import synth_app

    class RuntimeBench(cdk.Stack):
        def __init__(self, scope: Any, construct_id: str) -> None:
            super().__init__(scope, construct_id)
            chain = sfn.Pass.jsonata(self, "Pass0")
            tail = chain
            for n in range(1, PASS_STATES):
                step = sfn.Pass.jsonata(self, f"Pass{n}")
                tail.next(step)
                tail = step
            LockedWorkflow(self, "Passes", lock=Lock.mutex("{% $states.input.id %}"), protected=chain)
            tokens = dynamodb.Table(
                self, "Tokens", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
                billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST, removal_policy=cdk.RemovalPolicy.DESTROY,
            )
            park = sfn.CustomState(self, "Park", state_json={
                "Type": "Task", "QueryLanguage": "JSONata",
                "Resource": "arn:aws:states:::aws-sdk:dynamodb:putItem.waitForTaskToken",
                "Arguments": {"TableName": tokens.table_name, "Item": {
                    "pk": {"S": "{% $states.input.id %}"}, "token": {"S": "{% $states.context.Task.Token %}"}}},
            })
            done = sfn.Pass.jsonata(self, "Woken")
            machine = sfn.StateMachine(self, "Parks", definition_body=sfn.DefinitionBody.from_chainable(park.next(done)),
                                       query_language=sfn.QueryLanguage.JSONATA)
            tokens.grant_write_data(machine)

    synth_app(lambda app: RuntimeBench(app, "RuntimeBench"), outdir=work / "bench.out")
    return {}


CHILDREN: dict[str, Callable[[Path], dict[str, float]]] = {
    "quickstart": measure_quickstart, "states": measure_states, "wakeups": measure_wakeups,
    "dynamodb": measure_dynamodb, "synth": synth_bench_stack,
}


def child_main(name: str, tree: Path, work: Path) -> int:
    import locked_workflow

    where = Path(locked_workflow.__file__).resolve()
    if tree.resolve() not in where.parents:
        print(f"bench_runtime: locked_workflow came from {where}, not from {tree}", file=sys.stderr)
        return 2
    figures = CHILDREN[name](work)
    print(RESULT_MARK + json.dumps(figures), flush=True)
    return 0


# -- the parent: two trees, alternating; the table --------------------------------------------------


def run_child(name: str, tree: Path, work: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.setdefault("JSII_NODE", str(ROOT / "node_modules" / ".bin" / "node"))
    if not Path(env["JSII_NODE"]).exists():
        env["JSII_NODE"] = str(Path(os.environ.get("BENCH_NODE_MODULES", "/work/main/node_modules")) / ".bin" / "node")
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", name, "--tree", str(tree), "--work", str(work)],
        cwd=work, env=env, capture_output=True, text=True, timeout=900,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARK)]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-6000:])
        raise SystemExit(f"bench_runtime: {name} on {tree} failed (exit {proc.returncode})")
    print(f"  {name:<10} {tree.name:<10} {time.perf_counter() - started:6.1f} s", flush=True)
    return json.loads(lines[-1][len(RESULT_MARK):])


def write_quick_start(app_dir: Path) -> None:
    files = dict(FILE_BLOCK.findall((ROOT / "README.md").read_text()))
    for path in QUICK_START_FILES:
        target = app_dir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(files[path])


def table(rows: list[tuple[str, float, float]], baseline: str) -> str:
    width = max(len(name) for name, _, _ in rows)
    lines = [f"{'figure':<{width}}  {'baseline ' + baseline:>16}  {'this tree':>10}  {'ratio':>6}"]
    lines.append("-" * len(lines[0]))
    for name, base, this in rows:
        ratio = f"{this / base:.2f}" if base else "-"
        lines.append(f"{name:<{width}}  {base:>16g}  {this:>10g}  {ratio:>6}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default=DEFAULT_BASELINE, help=f"the commit to compare with (default {DEFAULT_BASELINE})")
    parser.add_argument("--only", default=",".join(MEASUREMENTS), help=f"comma-separated of {', '.join(MEASUREMENTS)}")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each measurement per tree (the median is shown)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args.child, args.tree, args.work)
    only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in only if name not in MEASUREMENTS]
    if unknown or not only:
        parser.error(f"`--only` must name some of {', '.join(MEASUREMENTS)}, got: {args.only!r}")
    if args.repeat < 1:
        parser.error(f"`--repeat` must be at least 1, got: {args.repeat}")

    temp = Path(tempfile.mkdtemp(prefix="bench-runtime-"))
    baseline_tree = temp / "baseline"
    this_tree = ROOT
    try:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--quiet", "--detach", str(baseline_tree), args.baseline],
                       check=True)
        rev = subprocess.run(["git", "-C", str(baseline_tree), "rev-parse", "--short", "HEAD"], check=True,
                             capture_output=True, text=True).stdout.strip()
        work = temp / "work"
        write_quick_start(work / "app")
        print(f"bench-runtime: this tree ({ROOT}) against {args.baseline} ({rev}); work in {temp}", flush=True)
        if any(name in only for name in ("states", "wakeups")):
            run_child("synth", this_tree, work)  # the bench's own stack, once: an input, not measured
        trees = {"baseline": baseline_tree, "this": this_tree}
        samples: dict[str, dict[str, list[dict[str, float]]]] = {}
        turn = 0
        for name in only:
            for _ in range(args.repeat):
                order = ("baseline", "this") if turn % 2 == 0 else ("this", "baseline")
                turn += 1
                for which in order:
                    samples.setdefault(name, {}).setdefault(which, []).append(run_child(name, trees[which], work))
        rows = []
        for name in only:
            for figure in samples[name]["this"][0]:
                base = statistics.median(s[figure] for s in samples[name]["baseline"])
                this = statistics.median(s[figure] for s in samples[name]["this"])
                rows.append((figure, base, this))
        print()
        print(table(rows, rev))
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(baseline_tree)], check=False)
        shutil.rmtree(temp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
