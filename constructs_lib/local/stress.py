"""``make stress``: a randomized fault campaign against the lock, judged by invariants.

::

    python -m constructs_lib.local.stress --runs 500 --keys 5 --seed 1 --backend moto
    python -m constructs_lib.local.stress --negative-control      # must FAIL: unlocked runs mixed in

One stack (:class:`StressStack`) holds every shape a user may build on one key, all on one lock
table and one key namespace, so they contend with each other: a plain ``LockedWorkflow``; a Map
whose iterations lock the same key; a Parallel whose branches do; a section nested in a section
on the same key; a workflow whose state machine times out while holding; a workflow with a
lease shorter than its work (its own keys: overlap is allowed there, by design); the fair lock
(``fair=True``) among them. The protected
work is the probe Lambda (``lambdas/probe``).

Each run draws: a shape, a key, a work time, a failure of the work, a stop after a random
delay (the probe's Lambda runs on: the stop grace must cover it), a redrive of a failed,
stopped or timed-out run, and faults on the lock's own writes (throttles; lost responses of
acquires, releases, the fair lock's enqueues and acquires as head; lost wake-ups).

Invariants (every one must hold; ``--negative-control`` must break the first):

1. the probe never finds another holder inside (``insideAtEntry`` is always 1);
2. no lost update: the probe's read-modify-write counter equals its accepted writes;
3. fences at entry never go down, per key;
4. every run ends SUCCEEDED or with its documented outcome (the work's error, ABORTED when
   stopped, TIMED_OUT for the timing-out shape, ``Lock.Lost`` only for the short lease);
5. once the janitor has settled and the graces passed, no lock is left held and no queue
   holds anyone.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The probe's Lambda timeout (s); the stop grace derived from it is this + 5 s.
PROBE_TIMEOUT_S = 3
#: The short lease of the "Lease" shape (s) and the state machine timeout of "Timeout" (s).
SHORT_LEASE_S = 2
SHORT_TIMEOUT_S = 4
SHAPES = {  # shape -> weight in the mix
    "Plain": 40, "Map": 12, "Parallel": 10, "Nested": 10, "Timeout": 10, "Lease": 8, "Fair": 15,
}
#: A fair waiter's park fallback (s): the polling shapes on its keys never wake it.
FAIR_PARK_TIMEOUT_S = 3
#: The work's own errors (the probe's requested failure, and its function timeout - reached
#: only when the machine is slow: the probe's own TimedOut, or the runtime's Sandbox.Timedout
#: when the deadline comes first) and a waiter's timeout.
ALLOWED_ERRORS = {"RuntimeError", "TimedOut", "Sandbox.Timedout", "Lock.Timeout"}


def build_stack(scope: Any, construct_id: str) -> Any:
    """The campaign's stack (CDK imported here: the module's CLI imports it lazily)."""
    import aws_cdk as cdk
    from aws_cdk import aws_dynamodb as dynamodb, aws_lambda as lambda_
    from aws_cdk import aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks

    from constructs_lib import LockedSection, LockedWorkflow, LockTable, WaitPolicy
    from state_machines.lock_protocol import jsonata

    fast = WaitPolicy(first_interval=1, backoff_rate=1.5, max_interval=2, jitter=True, retries_per_round=2)
    stack = cdk.Stack(scope, construct_id)
    locks = LockTable(stack, "Locks", removal_policy=cdk.RemovalPolicy.DESTROY).table
    probes = dynamodb.Table(
        stack, "Probes", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
        billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST, removal_policy=cdk.RemovalPolicy.DESTROY,
    )
    probe_fn = lambda_.Function(
        stack, "Probe", runtime=lambda_.Runtime.PYTHON_3_13, handler="index.handler",
        code=lambda_.Code.from_asset(str(Path(__file__).resolve().parents[2] / "lambdas" / "probe")),
        timeout=cdk.Duration.seconds(PROBE_TIMEOUT_S),
        environment={"PROBE_TABLE": probes.table_name, "POWERTOOLS_TRACE_DISABLED": "true"},
    )
    probes.grant_read_write_data(probe_fn)

    def probe(construct_id: str, fence: str) -> Any:
        return tasks.LambdaInvoke.jsonata(
            stack, construct_id, lambda_function=probe_fn,
            payload=sfn.TaskInput.from_object({
                "key": jsonata("$states.input.key"), "workMs": jsonata("$states.input.workMs"),
                "fail": jsonata("$states.input.fail"), "fence": jsonata(fence),
            }),
            outputs=jsonata("$states.input"), retry_on_service_exceptions=False,
        )

    def section(construct_id: str, work: Any, variable: str) -> Any:
        return LockedSection(
            stack, construct_id, lock_key=jsonata("$states.input.key"), key_namespace="x",
            protected=work, table=locks, lease=cdk.Duration.minutes(10), wait_policy=fast,
            max_wait=cdk.Duration.seconds(90), lock_variable=variable,
        )

    def workflow(construct_id: str, **props: Any) -> Any:
        props = {"timeout": cdk.Duration.minutes(4), "max_wait": cdk.Duration.seconds(90), **props}
        return LockedWorkflow(
            stack, construct_id, lock_key=jsonata("$states.input.key"), key_namespace="x",
            protected=probe(f"{construct_id}Probe", "$lock.fence"), table=locks, wait_policy=fast,
            logging=False, tracing=False, state_machine_name=construct_id, **props,
        )

    def machine(construct_id: str, definition: Any) -> Any:
        return sfn.StateMachine(
            stack, construct_id, state_machine_name=construct_id,
            definition_body=sfn.DefinitionBody.from_chainable(definition),
            query_language=sfn.QueryLanguage.JSONATA, timeout=cdk.Duration.minutes(4),
        )

    workflow("Plain")
    workflow("Fair", fair=True, park_timeout=cdk.Duration.seconds(FAIR_PARK_TIMEOUT_S))
    workflow("Timeout", timeout=cdk.Duration.seconds(SHORT_TIMEOUT_S), max_wait=cdk.Duration.seconds(2))
    workflow("Lease", lease=cdk.Duration.seconds(SHORT_LEASE_S))
    mapped = sfn.Map.jsonata(stack, "Each", items=sfn.ProvideItems.jsonata(jsonata("$states.input.items")))
    map_section = section("MapLock", probe("MapProbe", "$lock.fence"), "lock")
    map_section.recover_stale_holders(machine("Map", mapped.item_processor(map_section)))
    both = sfn.Parallel.jsonata(stack, "Both")
    left = section("LeftLock", probe("LeftProbe", "$left.fence"), "left")
    right = section("RightLock", probe("RightProbe", "$right.fence"), "right")
    left.recover_stale_holders(machine("Parallel", both.branch(left).branch(right)))
    inner = section("InnerLock", probe("InnerProbe", "$inner.fence"), "inner")
    outer = section("OuterLock", probe("OuterProbe", "$outer.fence").next(inner), "outer")
    outer.recover_stale_holders(machine("Nested", outer))
    machine("Unlocked", probe("UnlockedProbe", "null"))
    return stack


@dataclass
class Run:
    shape: str
    key: str
    document: dict
    stop_after_s: float | None
    redrive: bool
    arn: str = ""
    status: str = ""
    error: str | None = None
    redriven: bool = False


@dataclass
class Report:
    runs: list[Run]
    probe: dict[str, dict]
    faults: Counter
    left_held: list[str]
    violations: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())


def plan(runs: int, keys: int, seed: int, negative_control: bool) -> list[Run]:
    rng = random.Random(seed)
    shapes = dict(SHAPES, **({"Unlocked": 25} if negative_control else {}))
    planned = []
    for _ in range(runs):
        shape = rng.choices(list(shapes), weights=list(shapes.values()))[0]
        key = (f"L{rng.randrange(keys)}" if shape == "Lease" else f"K{rng.randrange(keys)}")
        work_ms = rng.randint(50, 400) if shape != "Lease" else rng.choice([100, (SHORT_LEASE_S + 1) * 1000])
        if shape == "Timeout":  # the longest work outlasts the state machine after a wait
            work_ms = rng.choice([100, 200, PROBE_TIMEOUT_S * 1000 - 100])
        document = {"key": key, "workMs": work_ms, "fail": rng.random() < 0.1}
        if shape == "Map":
            document = {"items": [dict(document) for _ in range(rng.randint(2, 3))]}
        stop = rng.uniform(0.2, 2.0) if rng.random() < 0.1 and shape != "Unlocked" else None
        planned.append(Run(shape, key, document, stop, redrive=rng.random() < 0.5))
    return planned


def _faults(rng: random.Random, log: Counter) -> list:
    from constructs_lib.local.faults import Fault
    from state_machines import fair_protocol as fair
    from state_machines import lock_protocol as protocol

    guard = threading.Lock()

    def draw(write, probability: float, label: str):
        def when(params: dict) -> bool:
            if params.get("UpdateExpression") != write.update:
                return False
            with guard:
                hit = rng.random() < probability
                if hit:
                    log[label] += 1
            return hit
        return when

    many = 10**9
    return [
        Fault("UpdateItem", "ThrottlingException", times=many, when=draw(protocol.ACQUIRE, 0.03, "throttled acquire")),
        Fault("UpdateItem", "ThrottlingException", times=many, when=draw(protocol.RELEASE, 0.03, "throttled release")),
        Fault("UpdateItem", "InternalServerError", times=many, after_call=True,
              when=draw(protocol.ACQUIRE, 0.03, "lost acquire response")),
        Fault("UpdateItem", "InternalServerError", times=many, after_call=True,
              when=draw(protocol.RELEASE, 0.03, "lost release response")),
        Fault("UpdateItem", "InternalServerError", times=many, after_call=True,
              when=draw(fair.ACQUIRE_HEAD, 0.05, "lost acquire-as-head response")),
        Fault("UpdateItem", "InternalServerError", times=many, after_call=True,
              when=draw(fair.ENQUEUE, 0.05, "lost enqueue response")),
        Fault("SendTaskSuccess", "ServiceUnavailable", times=many, service="stepfunctions",
              when=lambda params: _lost(rng, guard, log, 0.05, "lost wake-up")),
    ]


def _lost(rng: random.Random, guard: threading.Lock, log: Counter, probability: float, label: str) -> bool:
    with guard:
        hit = rng.random() < probability
        if hit:
            log[label] += 1
    return hit


def run_campaign(cloud: Any, app: Any, planned: list[Run], *, seed: int, settle_s: float = 20.0,
                 progress: bool = False) -> Report:
    from constructs_lib.local.faults import dynamodb_faults
    from state_machines import lock_protocol as protocol

    rng = random.Random(seed + 1)
    fault_log: Counter = Counter()
    arns = {  # every shape's state machine is named after it
        shape: f"arn:aws:states:{cloud.region}:{cloud.account_id}:stateMachine:{shape}"
        for shape in list(SHAPES) + ["Unlocked"]
    }

    def one(run: Run) -> Run:
        run.arn = cloud.start_execution(arns[run.shape], run.document, name=f"{run.shape}-{uuid.uuid4()}")
        if run.stop_after_s is not None:
            time.sleep(run.stop_after_s)
            if cloud.status(run.arn) == "RUNNING":
                cloud.stop_execution(run.arn, error="Stress.Stop", cause="stopped by the campaign")
        result = cloud.wait_for(run.arn, timeout=300)
        if run.redrive and result.status in ("FAILED", "ABORTED", "TIMED_OUT") and run.shape != "Unlocked":
            try:
                cloud.stepfunctions.redrive_execution(executionArn=run.arn)
                run.redriven = True
                result = cloud.wait_for(run.arn, timeout=300)
            except Exception:  # noqa: BLE001 - not redrivable (or no redrive in this runtime)
                pass
        run.status, run.error = result.status, result.error
        return run

    with dynamodb_faults(*_faults(rng, fault_log)):
        with ThreadPoolExecutor(max_workers=24) as pool:
            futures = []
            for run in planned:
                futures.append(pool.submit(one, run))
                time.sleep(rng.uniform(0, 0.05))
            done = 0
            for future in futures:
                future.result()
                done += 1
                if progress and done % 25 == 0:
                    print(f"  {done}/{len(planned)} runs ended", file=sys.stderr)
    # the janitor retires stopped holders' locks; their graces then pass
    time.sleep(settle_s)
    report = Report(planned, _probe_items(cloud, app), fault_log, _left_held(cloud, app, protocol))
    report.violations = _judge(report)
    return report


def _table(app: Any, prefix: str) -> str:
    return next(v for k, v in app.resources.items() if k.startswith(prefix))


def _probe_items(cloud: Any, app: Any) -> dict[str, dict]:
    items = {}
    for page in cloud.dynamodb.get_paginator("scan").paginate(TableName=_table(app, "Probes"), ConsistentRead=True):
        for item in page["Items"]:
            items[item["pk"]["S"]] = {
                k: (int(v["N"]) if "N" in v else [int(x["N"]) for x in v.get("L", [])]) for k, v in item.items() if k != "pk"
            }
    return items


def _left_held(cloud: Any, app: Any, protocol: Any) -> list[str]:
    now = int(time.time() * 1000)
    held = []
    for page in cloud.dynamodb.get_paginator("scan").paginate(TableName=_table(app, "LocksTable"), ConsistentRead=True):
        for item in page["Items"]:
            if protocol.OWNER in item and int(item[protocol.EXPIRES_AT]["N"]) > now:
                held.append(f"{item['pk']['S']} by {item[protocol.OWNER]['S']}")
            if item.get("queue", {}).get("L"):  # a fair lock's queue: every waiter left it
                held.append(f"{item['pk']['S']} queued: {[o['S'] for o in item['queue']['L']]}")
    return held


def _judge(report: Report) -> dict[str, list[str]]:
    violations: dict[str, list[str]] = {"alone": [], "lost update": [], "fence order": [], "outcome": [], "left held": []}
    for key, item in report.probe.items():
        if key.startswith("L"):
            continue  # the short lease overlaps by design: only its fence guards writes
        if item.get("violations", 0):
            violations["alone"].append(f"{key}: {item['violations']} entries found another holder inside")
        if item.get("counter", 0) != item.get("accepted", 0):
            violations["lost update"].append(f"{key}: counter {item.get('counter', 0)} != accepted {item.get('accepted', 0)}")
        fences = item.get("fences", [])
        if any(b < a for a, b in zip(fences, fences[1:])):
            violations["fence order"].append(f"{key}: {fences}")
    for run in report.runs:
        allowed = run.status == "SUCCEEDED" or run.error in ALLOWED_ERRORS
        allowed |= run.status == "ABORTED" and run.stop_after_s is not None
        allowed |= run.status == "TIMED_OUT" and run.shape == "Timeout"
        allowed |= run.error == "Lock.Lost" and run.shape == "Lease"
        if not allowed:
            violations["outcome"].append(f"{run.shape} {run.arn}: {run.status} {run.error}")
    violations["left held"] = list(report.left_held)
    return violations


def summary(report: Report) -> str:
    outcomes = Counter((r.shape, r.status if r.status != "FAILED" else f"FAILED {r.error}") for r in report.runs)
    lines = ["| shape | outcome | runs |", "|---|---|---:|"]
    lines += [f"| {shape} | {outcome} | {n} |" for (shape, outcome), n in sorted(outcomes.items())]
    entries = sum(i.get("entries", 0) for k, i in report.probe.items() if not k.startswith("L"))
    lease_entries = sum(i.get("entries", 0) for k, i in report.probe.items() if k.startswith("L"))
    rejected = sum(i.get("rejected", 0) for i in report.probe.values())
    lines += [
        "", "| injected | count |", "|---|---:|",
        f"| stops | {sum(r.stop_after_s is not None for r in report.runs)} |",
        f"| redrives | {sum(r.redriven for r in report.runs)} |",
    ] + [f"| {name} | {n} |" for name, n in sorted(report.faults.items())]
    lines += [
        "", "| invariant | result |", "|---|---|",
        f"| protected entries checked (short-lease keys apart) | {entries} (+{lease_entries} short-lease) |",
        f"| fenced writes rejected (zombies) | {rejected} |",
    ] + [f"| {name} | {'ok' if not found else f'VIOLATED ({len(found)})'} |" for name, found in report.violations.items()]
    for name, found in report.violations.items():
        for line in found[:5]:
            lines.append(f"  {name}: {line}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--keys", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--backend", choices=["moto", "dynamodb-local", "both"], default="both")
    parser.add_argument("--negative-control", action="store_true", help="mix unlocked runs in: must fail")
    args = parser.parse_args(argv)

    from constructs_lib.local import LocalCloud
    from constructs_lib.local.synth import synth_app

    synthesized = synth_app(lambda app: build_stack(app, "Stress"))
    backends = ["moto", "dynamodb-local"] if args.backend == "both" else [args.backend]
    failed = False
    for backend in backends:
        with LocalCloud(backend) as cloud:
            app = cloud.deploy(synthesized.template, assets_dir=synthesized.assets_dir)
            started = time.time()
            report = run_campaign(cloud, app, plan(args.runs, args.keys, args.seed, args.negative_control),
                                  seed=args.seed, progress=True)
            print(f"\n## {backend}: {args.runs} runs over {args.keys} keys, seed {args.seed}, "
                  f"{time.time() - started:.0f} s\n")
            print(summary(report))
            failed |= not report.ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
