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
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from tools import scenario
from tools.scenario import DOLLARS_PER_TRANSITION, LoadSummary, RunMetrics
from locked_workflow.state_machines import errors
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines.lock_protocol import WaitPolicy

#: Name of the protected work state in every bench state machine.
WORK_STATE = "Work"
#: Candidate wait policies of ``--sweep`` (first, rate, max, jitter, retries per round).
SWEEP_POLICIES = (
    WaitPolicy(1, 1.5, 3, True, 4),
    WaitPolicy(1, 1.5, 4, True, 8),
    WaitPolicy(1, 2.0, 4, True, 8),
    WaitPolicy(2, 1.5, 5, True, 8),
    WaitPolicy(1, 2.0, 6, True, 8),
)
#: Sweep target: makespan within this factor of N x work.
SWEEP_MAKESPAN_TARGET = 1.3
#: Baseline lock (common samples): retry the held lock 6 times, 1 s doubling, then wait 3 s.
BASELINE_RETRY = {"interval_s": 1, "backoff_rate": 2.0, "max_attempts": 6}
BASELINE_LOOP_WAIT_S = 3
#: Lease of the baseline's acquisitions (never reached here).
BASELINE_LEASE_MS = 3_600_000

WORK_CODE = """\
import time


def handler(event, context):
    seconds = float(event.get("seconds") or 0)
    time.sleep(seconds)
    return {"slept": seconds}
"""


def policy_id(policy: WaitPolicy) -> str:
    rate = f"{policy.backoff_rate:g}".replace(".", "p")
    return (
        f"P{policy.first_interval}x{rate}m{policy.max_interval}{'j' if policy.jitter else 'n'}"
        f"r{policy.retries_per_round}"
    )


def policy_text(policy: WaitPolicy) -> str:
    return (
        f"({policy.first_interval}, {policy.backoff_rate:g}, {policy.max_interval}"
        f"{', jitter' if policy.jitter else ', no jitter'}, {policy.retries_per_round} retries/round)"
    )


def parse_policy(text: str) -> WaitPolicy:
    """``first,rate,max[,jitter[,retries]]`` (jitter 1/0, default 1) -> WaitPolicy."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) not in (3, 4, 5):
        raise ValueError(f"a wait policy is first,rate,max[,jitter[,retries]], got: {text!r}")
    jitter = parts[3].lower() in ("1", "true", "yes", "on") if len(parts) >= 4 else True
    retries = int(parts[4]) if len(parts) == 5 else WaitPolicy().retries_per_round
    return WaitPolicy(int(parts[0]), float(parts[1]), int(parts[2]), jitter, retries)


# ----------------------------------------------------------------------------------------
# The bench stack
# ----------------------------------------------------------------------------------------


def build_bench_stack(
    app: Any, stack_id: str, *, ours: WaitPolicy, extra_policies: Sequence[WaitPolicy] = (), fair: bool = False
) -> Any:
    """One stack with every variant; state machine logical ids start with the variant name.
    ``fair``: also ``Fair``, the fair lock (``Lock.fair``) around the same work."""
    from aws_cdk import Duration, RemovalPolicy, Stack
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk import aws_stepfunctions as sfn
    from aws_cdk import aws_stepfunctions_tasks as tasks

    from locked_workflow.constructs_lib.dynamodb_tasks import update_item_props
    from locked_workflow.constructs_lib.lock_table import LockTable
    from locked_workflow import Lock, LockedWorkflow
    from locked_workflow.state_machines.lock_protocol import jsonata

    stack = Stack(app, stack_id)
    function = lambda_.Function(
        stack,
        "WorkFunction",
        runtime=lambda_.Runtime.PYTHON_3_12,
        handler="index.handler",
        code=lambda_.Code.from_inline(WORK_CODE),
        timeout=Duration.seconds(120),
    )

    def work(scope_id: str) -> Any:
        return tasks.LambdaInvoke.jsonata(
            stack,
            f"{scope_id}Work",
            state_name=WORK_STATE,
            lambda_function=function,
            payload=sfn.TaskInput.from_object({"seconds": jsonata("$states.input.workSeconds")}),
            outputs=jsonata("$states.result.Payload"),
        )

    def chain(scope_id: str) -> Any:
        return sfn.Pass.jsonata(stack, f"{scope_id}Prepare", state_name="Prepare").next(work(scope_id))

    def unlocked(name: str, body: Any) -> None:
        sfn.StateMachine(
            stack,
            name,
            definition_body=sfn.DefinitionBody.from_chainable(body),
            query_language=sfn.QueryLanguage.JSONATA,
        )

    def locked(name: str, body: Any, policy: WaitPolicy, **extra: Any) -> None:
        LockedWorkflow(
            stack,
            name,
            **{"lock": Lock.mutex(jsonata("$states.input.key")), "protected": body, "wait_policy": policy,
               "max_wait": Duration.minutes(10), "timeout": Duration.minutes(30), "logging": False,
               "tracing": False, "table_removal_policy": RemovalPolicy.DESTROY, **extra},
        )

    unlocked("Unlocked", work("Unlocked"))
    if fair:
        # the fair lock: N up to 1,000 waiters (a park round is cheap: a long wait fits the history)
        locked("Fair", work("Fair"), ours, lock=Lock.fair(jsonata("$states.input.key")), max_wait=Duration.minutes(90),
               timeout=Duration.hours(3))
    unlocked("UnlockedChain", chain("UnlockedChain"))
    locked("Ours", work("Ours"), ours)
    locked("OursChain", chain("OursChain"), ours)
    for policy in extra_policies:
        locked(f"Sweep{policy_id(policy)}", work(f"Sweep{policy_id(policy)}"), policy)

    # The baseline: the protocol's own acquire/release UpdateItems, the samples' retry loop.
    table = LockTable(stack, "BaselineLocks", removal_policy=RemovalPolicy.DESTROY).table
    acquire = tasks.DynamoUpdateItem.jsonata(
        stack,
        "BaselineAcquire",
        state_name="Baseline.Acquire",
        table=table,
        **update_item_props(
            protocol.acquire_arguments(  # the samples' owner: the execution ARN
                key_jsonata="$states.input.key", owner_jsonata="$states.context.Execution.Id",
                lease_ms=BASELINE_LEASE_MS, grace_ms=0,
            )
        ),
        assign={"lock": jsonata(protocol.lock_variable_expression())},
        outputs=jsonata("$states.input"),
    )
    acquire.add_retry(
        errors=[errors.CONDITION_FAILED],
        interval=Duration.seconds(BASELINE_RETRY["interval_s"]),
        backoff_rate=BASELINE_RETRY["backoff_rate"],
        max_attempts=BASELINE_RETRY["max_attempts"],
    )
    wait = sfn.Wait.jsonata(
        stack,
        "BaselineWait",
        state_name="Baseline.Wait",
        time=sfn.WaitTime.duration(Duration.seconds(BASELINE_LOOP_WAIT_S)),
    )
    acquire.add_catch(wait, errors=[errors.CONDITION_FAILED], outputs=jsonata("$states.input"))
    wait.next(acquire)
    release = tasks.DynamoUpdateItem.jsonata(
        stack,
        "BaselineRelease",
        state_name="Baseline.Release",
        table=table,
        **update_item_props(protocol.release_arguments(lock_variable="lock")),
        outputs=jsonata("$states.input"),
    )
    sfn.StateMachine(
        stack,
        "Baseline",
        definition_body=sfn.DefinitionBody.from_chainable(acquire.next(work("Baseline")).next(release)),
        query_language=sfn.QueryLanguage.JSONATA,
    )
    return stack


@dataclass
class BenchApp:
    machines: dict[str, str]  # variant -> state machine ARN

    def arn(self, variant: str) -> str:
        return self.machines[variant]


def deploy_bench(cloud: Any, synthesized: Any, variants: Sequence[str]) -> BenchApp:
    deployment = cloud.deploy(synthesized.template, assets_dir=synthesized.assets_dir)
    machines = {}
    stack = synthesized.stack_name
    for variant in variants:
        # By CDK path: LockedWorkflow's machine is <variant>/StateMachine, a plain one <variant>.
        inner = "/StateMachine" if variant.startswith(("Ours", "Sweep", "Fair")) else ""
        machines[variant] = deployment.state_machine_arn(f"{stack}/{variant}{inner}/Resource")
    app = BenchApp(machines)
    app.deployment = deployment  # (more of the stack: bench_fair's floor machines)
    return app


# ----------------------------------------------------------------------------------------
# Running loads
# ----------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------


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


def _load_json(summary: LoadSummary, work_s: float) -> dict[str, Any]:
    data = asdict(summary)
    data["makespan_ratio"] = summary.makespan_s / (summary.runs * work_s)
    data["fairness"] = summary.fairness
    data["dollars_per_run"] = summary.dollars_per_run
    return data


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


# ----------------------------------------------------------------------------------------
# The sweep
# ----------------------------------------------------------------------------------------


@dataclass
class SweepEntry:
    policy: WaitPolicy
    makespan_ratio: float
    transitions_per_run: float
    dynamodb_per_run: float
    mean_wait_s: float
    max_wait_s: float
    mean_handoff_s: float
    overlaps: int
    repeats: int

    @property
    def meets_target(self) -> bool:
        return self.makespan_ratio <= SWEEP_MAKESPAN_TARGET


def choose_policy(entries: Sequence[SweepEntry]) -> SweepEntry | None:
    """The entry meeting the makespan target with the fewest transitions per run (None: none does)."""
    meeting = [e for e in entries if e.meets_target]
    return min(meeting, key=lambda e: (e.transitions_per_run, e.makespan_ratio)) if meeting else None


SWEEP_HEADERS = ("policy (first, rate, max)", "makespan ÷ N×work", "transitions/run", "$ per 1M runs",
                 "DynamoDB/run", "mean wait s", "max wait s", "mean handoff s", "meets ≤ 1.3")


def sweep_rows(entries: Sequence[SweepEntry]) -> list[list[str]]:
    return [
        [policy_text(e.policy), f"{e.makespan_ratio:.2f}", f"{e.transitions_per_run:.1f}",
         f"{e.transitions_per_run * DOLLARS_PER_TRANSITION * 1e6:,.0f}", f"{e.dynamodb_per_run:.1f}",
         f"{e.mean_wait_s:.1f}", f"{e.max_wait_s:.1f}", f"{e.mean_handoff_s:.2f}",
         "yes" if e.meets_target else "no"]
        for e in entries
    ]


def run_sweep(
    *,
    policies: Sequence[WaitPolicy] = SWEEP_POLICIES,
    runs: int = 10,
    work_s: float = 2.0,
    repeats: int = 1,
    backend: str = "moto",
    progress: bool = True,
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
) -> list[SweepEntry]:
    """The contention case for each policy, one policy at a time (``repeats`` loads each)."""
    from locked_workflow.testing import LocalCloud
    from locked_workflow.testing.synth import synth_app

    started = time.monotonic()
    synthesized = synth_app(
        lambda app: build_bench_stack(app, "LockBench", ours=WaitPolicy(), extra_policies=policies)
    )
    log(f"synthesized the sweep stack in {time.monotonic() - started:.1f} s")
    variants = [f"Sweep{policy_id(p)}" for p in policies]
    entries = []
    with LocalCloud(backend=backend) as cloud:
        app = deploy_bench(cloud, synthesized, variants)
        run_load(cloud, app.arn(variants[0]), ["warm-up"], work_s=0, label="warm-up", progress=False)
        for policy, variant in zip(policies, variants):
            load = contention(cloud, app.arn(variant), runs=runs, work_s=work_s, key="hot",
                              label=policy_text(policy), progress=progress, repeats=repeats)
            entries.append(
                SweepEntry(
                    policy=policy,
                    makespan_ratio=load.makespan_ratio,
                    transitions_per_run=load.transitions_per_run,
                    dynamodb_per_run=load.dynamodb_per_run,
                    mean_wait_s=load.mean_wait_s,
                    max_wait_s=load.max_wait_s,
                    mean_handoff_s=load.mean_handoff_s,
                    overlaps=load.overlaps,
                    repeats=repeats,
                )
            )
    return entries


def _mean(values: Any) -> float:
    values = list(values)
    return sum(values) / len(values)


# ----------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------


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
