"""The stress campaign's stack and the parameters of its shapes (``make stress``: ``tools/stress.py``).

:func:`build_stack` holds every shape a user may build on one key, on one lock table; the
constants here size those shapes (timeouts, leases, waits, keys, records) and name the outcomes
the campaign allows, for the plan, the campaign and its judge alike.
"""

from __future__ import annotations

from typing import Any

from locked_workflow.constructs_lib import section_work
from locked_workflow.state_machines import record_protocol
from locked_workflow.state_machines.errors import ERROR_TIMEOUT, LAMBDA_TIMED_OUT
from locked_workflow.state_machines.lock_protocol import WaitPolicy

#: The probe's Lambda timeout (s); the stop grace derived from it (``section_work.derive_stop_grace``).
PROBE_TIMEOUT_S = 3
PROBE_GRACE_S = PROBE_TIMEOUT_S + section_work.LAMBDA_INIT_LIMIT_S + section_work.STOP_GRACE_MARGIN_S
#: The short lease of the "Lease" shape (s) and the state machine timeout of "Timeout" (s).
SHORT_LEASE_S = 2
SHORT_TIMEOUT_S = 4
SHAPES = {  # shape -> weight in the mix
    "Plain": 30, "Map": 10, "Parallel": 8, "Nested": 8, "Timeout": 8, "Lease": 6, "Fair": 12,
    "Children": 8, "ChildrenParallel": 6, "Cancelled": 6, "ClientThread": 6, "ClientNested": 4, "ClientAsync": 4,
    "Record": 6, "Coalesce": 14, "Rate": 10,
}
#: The "Coalesce" shape's keys (``N0`` ...) live in this namespace, and the "Rate" shape's
#: (``T0`` ...) in that one: a coalescing key's participants must share its queue limit, and a
#: rate limit admits several at once (the probe's exclusion checks skip its keys).
COALESCE_NAMESPACE, RATE_NAMESPACE = "n", "r"
#: The "Rate" shape's limit: this many entries per key in any window of this many seconds.
RATE_LIMIT, RATE_PERIOD_S = 2, 4
#: The coalescing and rate shapes draw their keys from this many (fewer than the others: a
#: burst on one key is what they are about - a newcomer superseding a queued run, a run waiting
#: for its permit).
FLOW_KEYS = 1
#: The "Record" shape's records (the lock on the record itself): each seeded at the campaign's
#: start with a padding of this many KB - just under the record lock's limit, over it (the
#: run fails ``Lock.RecordTooLarge`` and frees the lock at once), and small.
RECORD_SIZES_KB = {"R0": 124, "R1": 200, "R2": 1}
#: Record keys whose record is over ``record_protocol.RECORD_SIZE_LIMIT_KB``.
OVER_LIMIT_RECORDS = {key for key, kb in RECORD_SIZES_KB.items() if kb > record_protocol.RECORD_SIZE_LIMIT_KB}
#: The records table's partition key.
RECORD_KEY = "recordId"
#: Shapes run by a Python client (no state machine: never stopped nor redriven).
CLIENT_SHAPES = {"ClientThread", "ClientNested", "ClientAsync"}
#: Shapes whose output stays under 256 KiB with a padded input (a Parallel's output holds
#: each branch's copy of its input; records near the payload limit are not covered here).
PADDED_SHAPES = {"Plain", "Map", "Nested", "Timeout", "Lease", "Fair", "Children", "Coalesce", "Rate"}
#: Padding of a large input (bytes).
PADDING_BYTES = (50_000, 150_000)
#: A fair waiter's park fallback (s): the polling shapes on its keys never wake it.
FAIR_PARK_TIMEOUT_S = 3
#: How every polling section waits: rounds of 2 polls (1 s, 1.5 s), then at most 2 s.
FAST = WaitPolicy(first_interval=1, backoff_rate=1.5, max_interval=2, jitter=True, retries_per_round=2)
#: Longest wait for a lock (s), every shape but "Timeout".
MAX_WAIT_S = 90
#: The state machine timeout of the shapes with child sections (s): two waits, two works and
#: room for a loaded machine (the others: 4 minutes); the campaign waits a little longer.
CHILDREN_TIMEOUT_S = 2 * MAX_WAIT_S + 180
RUN_TIMEOUT_S = CHILDREN_TIMEOUT_S + 60
#: One liveness round of a polling waiter (s): the time between two of its liveness checks
#: (every 2nd round: ``liveness_check_every``'s default), each round its polls and its wait.
LIVENESS_ROUND_S = 2 * (FAST.round_polling_s(MAX_WAIT_S) + FAST.max_interval)
#: Added to a handoff's bound for a loaded machine (threads sharing one GIL, two cores).
HANDOFF_SLACK_S = 20
#: A "long wait" stop waits for this many acquire attempts in the run's history.
LONG_WAIT_ATTEMPTS = 8
#: A client's lease and wait (s).
CLIENT_LEASE_S, CLIENT_WAIT_S = 60, 60
#: The work's own errors (the probe's requested failure; its function timeout, as the runtime
#: reports it - ``Sandbox.Timedout`` - or as the probe names it when it stopped itself just
#: before) and a waiter's timeout.
ALLOWED_ERRORS = {"RuntimeError", LAMBDA_TIMED_OUT, "TimedOut", ERROR_TIMEOUT}
#: Errors of an injected fault a client retries (botocore's own retries are past: the fault
#: hook sits upstream of them).
TRANSIENT_ERRORS = {"ThrottlingException", "InternalServerError"}
#: Redrive readings: name -> ``redrive_reevaluates_arguments``.
READINGS = {"strict": False, "reevaluate": True}


def build_stack(scope: Any, construct_id: str) -> Any:
    """The campaign's stack (CDK imported here: the module's CLI imports it lazily)."""
    import aws_cdk as cdk
    from aws_cdk import aws_dynamodb as dynamodb
    from aws_cdk import aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks

    from locked_workflow import Lock, LockedSection, LockedWorkflow, QueueLimit
    from locked_workflow.state_machines.lock_protocol import jsonata
    from tools.probe_stack import probe_resources

    stack = cdk.Stack(scope, construct_id)
    locks, probe_fn = probe_resources(stack, timeout_s=PROBE_TIMEOUT_S)

    def probe(construct_id: str, fence: str, at: str = "$states.input") -> Any:
        """The probe on the work item at ``at`` (its key, work time and failure)."""
        return tasks.LambdaInvoke.jsonata(
            stack, construct_id, lambda_function=probe_fn,
            payload=sfn.TaskInput.from_object({
                "key": jsonata(f"{at}.key"), "workMs": jsonata(f"{at}.workMs"),
                "fail": jsonata(f"{at}.fail"), "fence": jsonata(fence),
            }),
            outputs=jsonata("$states.input"), retry_on_service_exceptions=False,
        )

    def section(construct_id: str, work: Any, variable: str, *, key: str = "$states.input.key",
                namespace: str = "x") -> Any:
        return LockedSection(
            stack, construct_id, lock=Lock.mutex(jsonata(key)), key_namespace=namespace,
            protected=work, table=locks, lease=cdk.Duration.minutes(10), wait_policy=FAST,
            max_wait=cdk.Duration.seconds(MAX_WAIT_S), lock_variable=variable,
        )

    def workflow(construct_id: str, protected: Any = None, namespace: str = "x", **props: Any) -> Any:
        props = {"timeout": cdk.Duration.minutes(4), "max_wait": cdk.Duration.seconds(MAX_WAIT_S),
                 "lock": Lock.mutex(jsonata("$states.input.key")), **props}
        return LockedWorkflow(
            stack, construct_id, key_namespace=namespace,
            protected=protected or probe(f"{construct_id}Probe", "$lock.fence"), table=locks, wait_policy=FAST,
            logging=False, tracing=False, state_machine_name=construct_id, **props,
        )

    def machine(construct_id: str, definition: Any) -> Any:
        return sfn.StateMachine(
            stack, construct_id, state_machine_name=construct_id,
            definition_body=sfn.DefinitionBody.from_chainable(definition),
            query_language=sfn.QueryLanguage.JSONATA, timeout=cdk.Duration.minutes(4),
        )

    workflow("Plain")
    workflow("Fair", lock=Lock.fair(jsonata("$states.input.key"), park_timeout=cdk.Duration.seconds(FAIR_PARK_TIMEOUT_S)))
    workflow("Timeout", timeout=cdk.Duration.seconds(SHORT_TIMEOUT_S), max_wait=cdk.Duration.seconds(2))
    # coalescing: a newcomer supersedes the run queued before it (Lock.Superseded), keys of its own
    workflow("Coalesce", namespace=COALESCE_NAMESPACE, lock=Lock.fair(
        jsonata("$states.input.key"), park_timeout=cdk.Duration.seconds(FAIR_PARK_TIMEOUT_S),
        queue=QueueLimit.keep_newest(1)))
    # a rate limit: RATE_LIMIT entries per RATE_PERIOD_S per key, keys of its own
    workflow("Rate", namespace=RATE_NAMESPACE, lock=Lock.rate(
        jsonata("$states.input.key"), limit=RATE_LIMIT, period=cdk.Duration.seconds(RATE_PERIOD_S)))
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
    # Concurrent children of one hold, on other keys (namespace "c"): a Map of sections ...
    children = sfn.Map.jsonata(stack, "EachChild", items=sfn.ProvideItems.jsonata(jsonata("$states.input.children")))
    child = section("ChildLock", probe("ChildProbe", "$child.fence"), "child", namespace="c")
    # (a child waits up to MAX_WAIT_S after its hold's own wait: room for both, on a loaded machine)
    workflow("Children", probe("ChildrenProbe", "$lock.fence").next(children.item_processor(child)),
             timeout=cdk.Duration.seconds(CHILDREN_TIMEOUT_S))
    # ... and a Parallel of two sections.
    pair = sfn.Parallel.jsonata(stack, "BothChildren")
    pair.branch(section("LeftChildLock", probe("LeftChildProbe", "$leftChild.fence", "$states.input.left"),
                        "leftChild", key="$states.input.left.key", namespace="c"))
    pair.branch(section("RightChildLock", probe("RightChildProbe", "$rightChild.fence", "$states.input.right"),
                        "rightChild", key="$states.input.right.key", namespace="c"))
    workflow("ChildrenParallel", probe("ChildrenParallelProbe", "$lock.fence").next(pair),
             timeout=cdk.Duration.seconds(CHILDREN_TIMEOUT_S))
    # A section beside a branch that fails, the failure caught by the user: Step Functions
    # cancels the section's branch (waiting, holding or releasing) and the execution succeeds.
    beside = sfn.Parallel.jsonata(stack, "SectionAndSibling")
    cancelled = section("CancelledLock", probe("CancelledProbe", "$lock.fence"), "lock")
    beside.branch(cancelled)
    beside.branch(sfn.Wait.jsonata(stack, "Sibling", time=sfn.WaitTime.seconds(jsonata("$states.input.failAfter")))
                  .next(sfn.Fail(stack, "SiblingFails", error="Stress.Sibling", cause="a sibling branch failed")))
    beside.add_catch(sfn.Pass(stack, "SiblingCaught"), errors=["Stress.Sibling"])
    cancelled.recover_stale_holders(machine("Cancelled", beside))
    machine("Unlocked", probe("UnlockedProbe", "null"))
    # The lock on the record itself, on records near and over the limit it reads into the
    # workflow: the work increments ``balance`` (read at the acquire, written by the release)
    records = dynamodb.Table(
        stack, "Records", partition_key=dynamodb.Attribute(name=RECORD_KEY, type=dynamodb.AttributeType.STRING),
        billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST, removal_policy=cdk.RemovalPolicy.DESTROY,
    )
    increment = sfn.Pass.jsonata(stack, "RecordWork", outputs=jsonata(
        "{'recordUpdate': {'set': {'balance': {'N': $string(($exists($lock.item.balance.N) "
        "? $number($lock.item.balance.N) : 0) + 1)}}}}"))
    LockedWorkflow(
        stack, "Record", lock=Lock.on_record(records, jsonata("$states.input.key")), wait_policy=FAST,
        protected=sfn.Wait.jsonata(stack, "RecordWait", time=sfn.WaitTime.seconds(jsonata("$states.input.waitS")))
        .next(increment),
        max_wait=cdk.Duration.seconds(MAX_WAIT_S), timeout=cdk.Duration.minutes(4),
        logging=False, tracing=False, state_machine_name="Record",
    )
    return stack
