"""Benchmark of the lock variants in the local runtime (``make bench-variants``).

1. Transfers: ``--transfers`` transfers among ``--accounts`` accounts, each holding both
   accounts for ``--work-seconds``, with the multi-key lock (one transaction) versus two nested
   single-key sections taken in key order (the classic deadlock-free alternative).
2. A record update: read-modify-write of one customer record, with the lock on the record
   (the acquire returns it, the release writes the update) versus a lock table plus a GetItem
   and an UpdateItem in the work.
3. A semaphore of ``--limit`` on ``--semaphore-runs`` runs: makespan against the ideal.

Figures are state transitions (state entries in the history) and DynamoDB calls per run, and
makespans, measured in one run; the runtime is in-process, so ratios matter, not seconds.
"""

from __future__ import annotations

import argparse
import random
import time
import uuid
from typing import Any, Sequence

TRANSITION_SUFFIX = "StateEntered"


def build_stack(app: Any, stack_id: str) -> Any:
    import aws_cdk as cdk
    from aws_cdk import aws_dynamodb as dynamodb, aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks

    from locked_workflow import Lock, LockedSection, LockedWorkflow, LockTable, WaitPolicy
    from locked_workflow.state_machines.lock_protocol import jsonata

    stack = cdk.Stack(app, stack_id)
    locks = LockTable(stack, "Locks", removal_policy=cdk.RemovalPolicy.DESTROY).table
    records = dynamodb.Table(
        stack, "Records",
        partition_key=dynamodb.Attribute(name="id", type=dynamodb.AttributeType.STRING),
        billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST, removal_policy=cdk.RemovalPolicy.DESTROY,
    )
    fast = WaitPolicy(first_interval=1, backoff_rate=1.5, max_interval=2, jitter=True, retries_per_round=2)
    common = dict(wait_policy=fast, max_wait=cdk.Duration.minutes(10), timeout=cdk.Duration.minutes(30),
                  logging=False, janitor=False)

    def hold(name: str) -> sfn.IChainable:
        return sfn.CustomState(stack, name, state_json={
            "Type": "Wait", "QueryLanguage": "JSONata", "Seconds": jsonata("$states.input.workS")})

    LockedWorkflow(stack, "MultiKey", lock=Lock.keys(jsonata("[$states.input.from, $states.input.to]")), key_namespace="acct", protected=hold("MultiWork"), table=locks, **common)
    lease = cdk.Duration.minutes(35)
    inner = LockedSection(stack, "Second", lock=Lock.mutex(jsonata("$states.input.second")), key_namespace="acct",
                          protected=hold("NestedWork"), table=locks, lease=lease, lock_variable="second",
                          wait_policy=fast, max_wait=cdk.Duration.minutes(10), liveness_check_every=0)
    outer = LockedSection(stack, "First", lock=Lock.mutex(jsonata("$states.input.first")), key_namespace="acct",
                          protected=inner, table=locks, lease=lease, lock_variable="first",
                          wait_policy=fast, max_wait=cdk.Duration.minutes(10), liveness_check_every=0)
    order = sfn.Pass.jsonata(stack, "Order", outputs=jsonata(
        "$merge([$states.input, {'first': $sort([$states.input.from, $states.input.to])[0], "
        "'second': $sort([$states.input.from, $states.input.to])[1]}])"))
    sfn.StateMachine(stack, "Nested", state_machine_name=f"{stack_id}-Nested",
                     definition_body=sfn.DefinitionBody.from_chainable(order.next(outer)),
                     query_language=sfn.QueryLanguage.JSONATA, timeout=cdk.Duration.minutes(30))

    increment = ("{'recordUpdate': {'set': {'n': {'N': $string(($exists($lock.item.n.N) ? "
                 "$number($lock.item.n.N) : 0) + 1)}}}}")
    LockedWorkflow(stack, "OnRecord", lock=Lock.on_record(records, jsonata("$states.input.id")), protected=sfn.Pass.jsonata(stack, "RecordWork", outputs=jsonata(increment)), **common)
    key = {"id": tasks.DynamoAttributeValue.from_string(jsonata("$states.input.id"))}
    read = tasks.DynamoGetItem.jsonata(stack, "Read", table=records, key=key, consistent_read=True,
                                       outputs=jsonata("$merge([$states.input, {'n': $exists($states.result.Item.n.N) "
                                                       "? $number($states.result.Item.n.N) : 0}])"))
    write = tasks.DynamoUpdateItem.jsonata(
        stack, "Write", table=records, key=key, update_expression="SET n = :n",
        expression_attribute_values={":n": tasks.DynamoAttributeValue.number_from_string(jsonata("$string($states.input.n + 1)"))})
    LockedWorkflow(stack, "OnLockTable", lock=Lock.mutex(jsonata("$states.input.id")), table=locks,
                   protected=read.next(write), **common)
    LockedWorkflow(stack, "Semaphore", lock=Lock.semaphore(jsonata("$states.input.key"), limit=3), key_namespace="sem",
                   protected=hold("SemaphoreWork"), table=locks, **common)
    return stack


def _transitions(cloud: Any, arn: str) -> tuple[int, int]:
    events = cloud.stepfunctions.get_execution_history(executionArn=arn, maxResults=1000)["events"]
    entered = sum(1 for e in events if e["type"].endswith(TRANSITION_SUFFIX))
    dynamodb = sum(1 for e in events if e["type"] == "TaskScheduled"
                   and "dynamodb" in e.get("taskScheduledEventDetails", {}).get("resourceType", ""))
    return entered, dynamodb


def _load(cloud: Any, arn: str, documents: Sequence[dict]) -> dict:
    started = time.monotonic()
    arns = [cloud.start_execution(arn, d) for d in documents]
    results = [cloud.wait_for(a, timeout=1800) for a in arns]
    makespan = time.monotonic() - started
    counts = [_transitions(cloud, a) for a in arns]
    return {
        "succeeded": sum(r.status == "SUCCEEDED" for r in results),
        "runs": len(results),
        "makespan": makespan,
        "transitions": sum(c[0] for c in counts) / len(counts),
        "dynamodb": sum(c[1] for c in counts) / len(counts),
    }


def run(args: argparse.Namespace) -> list[list[str]]:
    from locked_workflow.testing import LocalCloud
    from locked_workflow.testing.synth import synth_app

    synthesized = synth_app(lambda app: build_stack(app, "Variants"))
    rng = random.Random(args.seed)
    rows = []
    with LocalCloud(args.backend) as cloud:
        app = cloud.deploy(synthesized.template, assets_dir=synthesized.assets_dir)
        machine = lambda name: app.state_machine_arn(name)  # noqa: E731
        accounts = [f"a{i}-{uuid.uuid4().hex[:6]}" for i in range(args.accounts)]
        transfers = [dict(zip(("from", "to"), rng.sample(accounts, 2)), workS=args.work_seconds)
                     for _ in range(args.transfers)]
        for label, name in (("transfers: multi-key lock", "MultiKeyStateMachine"),
                            ("transfers: nested single-key sections", "Nested")):
            m = _load(cloud, machine(name), transfers)
            rows.append([label, f"{m['succeeded']}/{m['runs']}", f"{m['makespan']:.1f}",
                         f"{m['transitions']:.1f}", f"{m['dynamodb']:.1f}"])
        for label, name in (("record update: lock on the record", "OnRecordStateMachine"),
                            ("record update: lock table + read + write", "OnLockTableStateMachine")):
            record = f"r-{uuid.uuid4().hex[:6]}"
            table = next(v for k, v in app.resources.items() if k.startswith("Records"))
            cloud.dynamodb.put_item(TableName=table, Item={"id": {"S": record}, "n": {"N": "0"}})
            m = _load(cloud, machine(name), [{"id": record}] * args.record_runs)
            final = cloud.dynamodb.get_item(TableName=table, Key={"id": {"S": record}}, ConsistentRead=True)["Item"]["n"]["N"]
            rows.append([label + f" (n = {final})", f"{m['succeeded']}/{m['runs']}", f"{m['makespan']:.1f}",
                         f"{m['transitions']:.1f}", f"{m['dynamodb']:.1f}"])
        key = f"s-{uuid.uuid4().hex[:6]}"
        m = _load(cloud, machine("SemaphoreStateMachine"), [{"key": key, "workS": args.work_seconds}] * args.semaphore_runs)
        ideal = args.semaphore_runs * args.work_seconds / 3
        rows.append([f"semaphore of 3 (ideal {ideal:.0f} s, makespan/ideal {m['makespan'] / ideal:.2f})",
                     f"{m['succeeded']}/{m['runs']}", f"{m['makespan']:.1f}", f"{m['transitions']:.1f}",
                     f"{m['dynamodb']:.1f}"])
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accounts", type=int, default=4)
    parser.add_argument("--transfers", type=int, default=12)
    parser.add_argument("--work-seconds", type=int, default=1)
    parser.add_argument("--record-runs", type=int, default=6)
    parser.add_argument("--semaphore-runs", type=int, default=9)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--backend", choices=("moto", "dynamodb-local"), default="moto")
    args = parser.parse_args(argv)
    rows = run(args)
    headers = ["workload", "succeeded", "makespan s", "transitions/run", "DynamoDB calls/run"]
    print("| " + " | ".join(headers) + " |")
    print("|" + "---|" * len(headers))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
