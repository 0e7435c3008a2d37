"""The adversarial cases of the safety suite: one execution acquiring one key several times
(Map, Parallel, nesting), a stop while the protected Lambda still runs, EXPRESS defaults.

Every protected work is the probe Lambda (``lambdas/probe``): it counts the holders inside
the protected work at entry; a correct lock always reads 1.
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb, aws_lambda as lambda_
from aws_cdk import aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks
from constructs import Construct

from locked_workflow import Lock, LockedSection, LockedWorkflow, LockTable, WaitPolicy
from locked_workflow.constructs_lib.monitoring_function import powertools_layer
from locked_workflow.constructs_lib.section_work import LAMBDA_INIT_LIMIT_S, STOP_GRACE_MARGIN_S
from locked_workflow.state_machines.lock_protocol import jsonata

PROBE_CODE = Path(__file__).resolve().parents[2] / "lambdas" / "probe"
FAST = WaitPolicy(first_interval=1, backoff_rate=1.5, max_interval=2, jitter=True, retries_per_round=2)
#: The probe's Lambda timeout: a stopped holder's lock stays held this long, plus Lambda's Init
#: limit, + 5 s (:data:`PROBE_GRACE_S`).
PROBE_TIMEOUT_S = 8  # headroom for a 3.5 s work on a loaded machine
#: The stop grace a section derives from the probe's task (``section_work.derive_stop_grace``).
PROBE_GRACE_S = PROBE_TIMEOUT_S + LAMBDA_INIT_LIMIT_S + STOP_GRACE_MARGIN_S
LEASE = cdk.Duration.minutes(10)


def token_gate(scope: Construct, construct_id: str, *, table: dynamodb.ITable, pk: str,
               timeout_s: int = 240) -> sfn.CustomState:
    """A task that parks until the test completes (or fails) the task token it stores in
    ``table`` under the key the JSONata ``pk`` evaluates to; its output is its input. Grant the
    state machine write access to ``table``."""
    return sfn.CustomState(scope, construct_id, state_json={
        "Type": "Task", "QueryLanguage": "JSONata",
        "Resource": f"arn:{cdk.Stack.of(scope).partition}:states:::aws-sdk:dynamodb:putItem.waitForTaskToken",
        "Arguments": {"TableName": table.table_name, "Item": {
            "pk": {"S": jsonata(pk)}, "token": {"S": jsonata("$states.context.Task.Token")}}},
        "TimeoutSeconds": timeout_s, "Output": jsonata("$states.input")})


#: The table of the sibling branches' gates (one per stack), and the error a failed gate raises.
SIBLING_GATES, SIBLING_ERROR = "SiblingGates", "User.Boom"


def sibling_gates(scope: Construct) -> dynamodb.Table:
    """The stack's table of sibling gates (created on first use); grant the machines that run
    :func:`beside_failing_sibling` write access to it."""
    stack = cdk.Stack.of(scope)
    found = stack.node.try_find_child(SIBLING_GATES)
    return found or dynamodb.Table(
        stack, SIBLING_GATES, partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
        billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST, removal_policy=cdk.RemovalPolicy.DESTROY,
    )


def beside_failing_sibling(scope: Construct, prefix: str, branch: sfn.IChainable) -> sfn.Parallel:
    """A user's Parallel: ``branch`` beside one that fails with ``User.Boom`` when the test
    says (:func:`fail_sibling` fails the task token the sibling stored in :func:`sibling_gates`
    under ``$states.input.siblingGate``) - never after a fixed time, which a loaded machine
    could reach before ``branch`` got where the test needs it. The user catches the failure and
    waits 2 minutes more, so the execution stays RUNNING while Step Functions has cancelled
    ``branch`` (no Catch ran in it)."""
    both = sfn.Parallel.jsonata(scope, f"{prefix}Both")
    both.branch(branch)
    both.branch(token_gate(scope, f"{prefix}Sibling", table=sibling_gates(scope), pk="$states.input.siblingGate",
                           timeout_s=300))
    then = sfn.Wait.jsonata(scope, f"{prefix}GoesOn", time=sfn.WaitTime.duration(cdk.Duration.minutes(2)))
    both.add_catch(then, errors=[SIBLING_ERROR], outputs=jsonata("$states.input"))
    return both


def fail_sibling(cloud, app, gate: str, *, timeout: float = 60) -> None:
    """Fail the sibling branch of the execution started with ``siblingGate = gate`` (once its
    token is stored): Step Functions cancels the other branch of its Parallel."""
    from deployed import wait_until

    table = app.table_name(SIBLING_GATES)

    def token():
        item = cloud.dynamodb.get_item(TableName=table, Key={"pk": {"S": gate}}, ConsistentRead=True).get("Item")
        return item and item["token"]["S"]

    wait_until(lambda: token() is not None, timeout=timeout)
    cloud.stepfunctions.send_task_failure(taskToken=token(), error=SIBLING_ERROR, cause="a sibling branch failed")


def probe_resources(stack: cdk.Stack) -> tuple:
    """The lock table, the probe's table and the probe Lambda of a test stack."""
    locks = LockTable(stack, "Locks", removal_policy=cdk.RemovalPolicy.DESTROY).table
    probes = dynamodb.Table(
        stack, "Probes",
        partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
        billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST, removal_policy=cdk.RemovalPolicy.DESTROY,
    )
    probe_fn = lambda_.Function(
        stack, "Probe", runtime=lambda_.Runtime.PYTHON_3_13, handler="index.handler",
        code=lambda_.Code.from_asset(str(PROBE_CODE)), timeout=cdk.Duration.seconds(PROBE_TIMEOUT_S),
        environment={"PROBE_TABLE": probes.table_name, "POWERTOOLS_TRACE_DISABLED": "true"},
        layers=[powertools_layer(stack)],  # what the handler imports (Powertools), as on AWS
    )
    probes.grant_read_write_data(probe_fn)
    return locks, probe_fn


class SafetyStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.locks, self.probe_fn = probe_resources(self)

        # A plain locked workflow on namespace "s": the intruder of the other machines' keys.
        LockedWorkflow(
            self, "Plain", lock=Lock.mutex(jsonata("$states.input.key")), key_namespace="s",
            protected=self.probe("PlainProbe"), table=self.locks, wait_policy=FAST,
            max_wait=cdk.Duration.seconds(60), timeout=cdk.Duration.minutes(3), logging=False,
        )
        # Map: three iterations of one execution on the same key.
        iteration = self.section("MapLock", self.probe("MapProbe"), key="$states.input.key")
        mapped = sfn.Map.jsonata(
            self, "Each", items=sfn.ProvideItems.jsonata(jsonata("$states.input.items")), max_concurrency=0,
        ).item_processor(iteration)
        self.machine("MapSameKey", mapped)
        # Parallel: two branches of one execution on the same key.
        parallel = sfn.Parallel.jsonata(self, "Both")
        parallel.branch(self.section("LeftLock", self.probe("LeftProbe"), variable="left"))
        parallel.branch(self.section("RightLock", self.probe("RightProbe"), variable="right"))
        self.machine("ParallelSameKey", parallel)
        # Nesting: an inner section on the same key inside an outer one (re-entrant).
        inner = self.section("InnerLock", self.probe("InnerProbe"), variable="inner")
        outer_work = self.probe("OuterProbe").next(inner)
        self.machine("Nested", self.section("OuterLock", outer_work, variable="outer"))
        # Stop grace: derived from the probe's Lambda timeout (PROBE_GRACE_S).
        self.grace_workflow = LockedWorkflow(
            self, "Graceful", lock=Lock.mutex(jsonata("$states.input.key")), key_namespace="s",
            protected=self.probe("GracefulProbe"), table=self.locks, wait_policy=FAST,
            max_wait=cdk.Duration.seconds(60), timeout=cdk.Duration.minutes(3), logging=False,
        )

        # A section cancelled by a failing sibling branch, the failure caught by the user; and
        # the negative control, without the presence branch.
        self.cancelled_by_sibling("SeenCancelled")
        self.cancelled_by_sibling("BlindCancelled", detect_cancellation=False)

        # The work's own States.Timeout leaves the section as Lock.States.Timeout.
        LockedWorkflow(
            self, "TaskTimeout", lock=Lock.mutex(jsonata("$states.input.key")), key_namespace="s",
            protected=self.probe("SlowProbe", task_timeout=cdk.Duration.seconds(1)), table=self.locks,
            wait_policy=FAST, max_wait=cdk.Duration.seconds(60), timeout=cdk.Duration.minutes(3), logging=False,
        )

    def probe(self, construct_id: str, task_timeout: cdk.Duration | None = None) -> tasks.LambdaInvoke:
        return tasks.LambdaInvoke.jsonata(
            self, construct_id, lambda_function=self.probe_fn,
            task_timeout=sfn.Timeout.duration(task_timeout) if task_timeout else None,
            payload=sfn.TaskInput.from_object({
                "key": jsonata("$states.input.key"),
                "workMs": jsonata("$states.input.workMs"),
            }),
            outputs=jsonata("$merge([$states.input, {'probe': $states.result.Payload}])"),
            retry_on_service_exceptions=False,
        )

    def section(self, construct_id: str, work: sfn.IChainable, *, variable: str = "lock",
                key: str = "$states.input.key", **props) -> LockedSection:
        return LockedSection(
            self, construct_id, lock=Lock.mutex(jsonata(key)), key_namespace="s", protected=work,
            table=self.locks, lease=LEASE, wait_policy=FAST, max_wait=cdk.Duration.seconds(60),
            lock_variable=variable, **props,
        )

    def cancelled_by_sibling(self, construct_id: str, **props) -> None:
        """A section on the key in a branch that Step Functions cancels (beside_failing_sibling)."""
        section = self.section(f"{construct_id}Lock", self.probe(f"{construct_id}Probe"), **props)
        machine = self.machine(construct_id, beside_failing_sibling(self, construct_id, section))
        sibling_gates(self).grant_write_data(machine)

    def machine(self, construct_id: str, definition: sfn.IChainable) -> sfn.StateMachine:
        return sfn.StateMachine(
            self, construct_id, state_machine_name=construct_id,
            definition_body=sfn.DefinitionBody.from_chainable(definition),
            query_language=sfn.QueryLanguage.JSONATA, timeout=cdk.Duration.minutes(3),
        )
