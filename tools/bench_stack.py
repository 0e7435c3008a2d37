"""The bench's stack: the work ("Work", a Lambda that sleeps) alone, locked by ours, and locked by
the common samples' baseline; one variant per wait policy a sweep tries (``tools/bench.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from locked_workflow.state_machines import errors
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines.lock_protocol import WaitPolicy

#: Name of the protected work state in every bench state machine.
WORK_STATE = "Work"
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
