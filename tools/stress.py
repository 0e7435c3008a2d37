"""``make stress``: a randomized fault campaign against the lock, judged by invariants.

::

    python -m tools.stress --runs 500 --keys 5 --seed 1 --backend moto
    python -m tools.stress --redrive-readings strict   # one reading only
    python -m tools.stress --negative-control      # must FAIL: unlocked runs mixed in

One stack (:func:`build_stack`) holds every shape a user may build on one key, all on one lock
table and one key namespace (``x``), so they contend with each other: a plain ``LockedWorkflow``;
a Map whose iterations lock the same key; a Parallel whose branches do; a section nested in a
section on the same key; a workflow whose state machine times out while holding; a workflow
with a lease shorter than its work (its own keys: overlap is allowed there, by design); the fair
lock (``Lock.fair``); the coalescing fair lock (``Lock.fair(key, queue=QueueLimit.keep_newest(1))``,
the "Coalesce" shape, on keys of its own in namespace ``n``: every participant of a key must use
the same queue limit) whose work is the probe; a rate limit (``Lock.rate``, the "Rate" shape:
:data:`RATE_LIMIT` entries per :data:`RATE_PERIOD_S` on keys of its own in namespace ``r``; runs
admitted together work side by side, so the probe's exclusion checks do not apply there); a
workflow holding its key whose work is a Map of sections, or a Parallel
of two sections, each on a child key of namespace ``c`` (``C0``, ``C1`` ...: concurrent children
of one hold, on other keys - they contend with each other and with other holds' children);
a section beside a sibling branch that fails (the user catches it: Step Functions cancels the
section, which runs no Catch); the lock on the record itself (``Lock.on_record``) on records
seeded just under and over the size it reads into the workflow (:data:`RECORD_SIZES_KB`: the
run over the limit must fail ``Lock.RecordTooLarge`` and free the record at once), whose work
increments the record's balance through the release.
Python holders take part through :class:`LockClient`: a thread holding a key (sometimes
re-entering its own hold), and an asyncio event loop whose tasks each hold a key (tasks beside
a block are other holders: a task refused with ``LockHeldInThisThread`` retries after an
``await``). The protected work is the probe Lambda (``lambdas/probe``); the clients invoke it
in-process with their lease's fence.

Each run draws: a shape, a key, a work time (sometimes past the probe's function timeout: the
task fails with ``Sandbox.Timedout`` while the handler runs on), a failure of the work, a
padding field of 50-150 KB in its input (shapes whose output stays under 256 KiB), a stop -
after a random delay, once inside its work (a share of the padded runs: the janitor must read a
large history), as soon as the run waits for its key (before it acquires), or after a long wait
(many acquire attempts in its history) - and a redrive of a failed, stopped or
timed-out run. The lock's own writes get faults (throttles; lost responses of acquires,
releases, the fair lock's enqueues and acquires as head; lost wake-ups), and the janitor's
status-change events are delivered at least once: every one twice, and one more copy held back
and delivered at random moments and once at the end (after redrives too).

Redrive readings: RedriveExecution resumes mid-branch, as AWS documents; whether a redriven
Parallel's ``Arguments`` (a Map's ``Items``) are evaluated again is undocumented, so the
campaign runs under both readings (``--redrive-readings both``, the default): the first half
of the plan with ``redrive_reevaluates_arguments=False``, the second with ``True``.

Invariants (every one must hold; ``--negative-control`` must break the first):

1. the probe never finds another holder inside (``insideAtEntry`` is always 1), per key,
   child keys included;
2. no lost update: the probe's read-modify-write counter equals its accepted writes; a record's
   balance counts every run on it that succeeded (and at most those stopped besides), and a
   record over the limit is never updated;
3. fences at entry never go down, per key;
4. every run ends SUCCEEDED or with its documented outcome (the work's error or its function
   timeout, ``Lock.Timeout``, ABORTED when stopped, TIMED_OUT for the timing-out shape,
   ``Lock.Lost`` only for the short lease, ``Lock.Superseded`` only for "Coalesce");
5. once the janitor has settled and the graces passed, no lock is left held and no queue
   holds anyone; a free fair lock whose queue shows only holes (tickets whose waiter was
   stopped before it parked, or took another after a lost response) admits one more fair
   execution within :data:`NEXT_ARRIVAL_S`, which leaves the queue empty;
6. a client's re-entered hold yields the enclosing lease (same fence) and leaving it releases
   nothing;
7. handoff after an ended holder: when a run's execution ended (stopped, timed out, or after
   its section was cancelled) while
   it held a key and another participant was waiting for that key, the next entry into the
   key came within ``grace + round + HANDOFF_SLACK_S`` of the end - ``grace`` the stop grace
   stored with the acquisition (the probe's 3 s timeout + 5 s), ``round`` one liveness round of
   a polling waiter (:data:`LIVENESS_ROUND_S`) or one park timeout for a fair one
   (:data:`FAIR_PARK_TIMEOUT_S`), and :data:`HANDOFF_SLACK_S` for a loaded machine (for a
   cancelled section, plus the presence settle time, ``lock_protocol.PRESENCE_SETTLE_MS``). "Held" is
   read on the lock item right after the end (its owner names the execution); "waiting" is
   read from the waiter's own history (an acquire attempt on the key since its last entry,
   no entry until past the bound, still running) or, for a client, from its own clock;
8. coalescing ("Coalesce"): a run that ended ``Lock.Superseded`` never entered its work (no
   probe in its history since its last redrive: a run stopped at work and redriven is refused
   its resumed work, queues again and may then be superseded), and once settled (the next arrival sent at a
   queue of holes, as for the fair lock) no queue row is left on its keys;
9. rate limit ("Rate"): per key, no window of :data:`RATE_PERIOD_S` holds more than
   :data:`RATE_LIMIT` of the admissions' reserved times (``tools/rate_checks.py``, read from
   every Rate run's history, redriven and stopped ones included: a stopped run spends its
   permit).

The "Cancelled" shape runs a section beside a branch that fails 0-3 s after the start, the
failure caught: Step Functions cancels the section wherever it is (waiting, working, releasing;
no Catch runs) and the execution succeeds. Its lock, if still held when the execution ended,
is judged by invariant 7 like a stopped holder's (the cancel came before that end).

Faults reach the new shapes as they reach the others: their runs are stopped (after a delay,
once inside, as soon as they wait, after a long wait) and redriven, the coalescing enqueue's
response is lost (``ENQUEUE_NEWEST``, as the fair ``ENQUEUE``'s), its grants' and wake-ups'
as the fair lock's; a rate admission's response is lost (``rate_protocol.ADMIT``: its retry finds
the count moved and spends another permit, which the limit allows) or throttled.

Not yet covered: records near the payload limit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterator

from botocore.exceptions import ClientError

# imported once, before any in-process Lambda runs: the janitor function bundles its own copy of
# constructs_lib, and a lazy import racing with its invocation could bind that copy's exception
# classes, which the client here does not raise (two ClientAsync runs failed on LockHeld so)
from locked_workflow.constructs_lib import section_work
from locked_workflow.constructs_lib.lock_client import LockClient, LockError, LockHeld, LockHeldInThisThread, LockLost
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines import rate_protocol as rate
from locked_workflow.state_machines import record_protocol
from locked_workflow.state_machines.errors import (
    CONDITIONAL_CHECK_FAILED_CODE,
    ERROR_LOST,
    ERROR_RECORD_TOO_LARGE,
    ERROR_SUPERSEDED,
    ERROR_TIMEOUT,
    LAMBDA_TIMED_OUT,
)
from locked_workflow.state_machines.lock_protocol import WaitPolicy
from tools.rate_checks import admission_stamps, crowded_windows

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


@dataclass
class Hold:
    """A lock an ended execution still held at its end (read on the lock item right after)."""

    stored_key: str
    ended_ms: int
    grace_ms: int
    cancelled: bool = False  # held by a section Step Functions cancelled (the execution went on)


@dataclass
class Wait:
    """A time a participant waited for a stored key: from ``start_ms`` to ``end_ms`` (its entry,
    or the end of its wait), ``fair`` when it parked in a fair queue."""

    stored_key: str
    start_ms: int
    end_ms: int
    fair: bool = False


@dataclass
class Run:
    shape: str
    key: str
    document: dict
    stop: str | None = None  # "delay", "holding" (once inside), "waiting" (before it acquires), "long-wait"
    stop_after_s: float = 0.0
    redrive: bool = False
    reading: str = ""
    arn: str = ""
    status: str = ""
    error: str | None = None
    cause: str | None = None
    redriven: bool = False
    stopped: bool = False  # a stop landed while it ran
    stopped_waiting: bool = False  # ... before it had entered, after a refused acquire
    attempts_at_stop: int = 0
    holds: list[Hold] = field(default_factory=list)
    waits: list[Wait] = field(default_factory=list)
    events: list[tuple[int, str, str]] = field(default_factory=list)  # its timeline (diagnostics)
    task_errors: list[str | None] = field(default_factory=list)  # ClientAsync: each task's
    problems: list[str] = field(default_factory=list)  # a client's re-entrancy found broken
    trail: list[str] = field(default_factory=list)  # its last states entered (diagnostics)
    admissions: list[int] = field(default_factory=list)  # "Rate": the reserved times it was admitted at

    @property
    def padded(self) -> bool:
        return "padding" in self.document


@dataclass
class Report:
    runs: list[Run]
    probe: dict[str, dict]
    faults: Counter
    left_held: list[str]
    violations: dict[str, list[str]] = field(default_factory=dict)
    handoffs: list[tuple[str, int]] = field(default_factory=list)  # (stored key, ms to next entry)
    arrivals: list[tuple[str, float]] = field(default_factory=list)  # (a key of holes, s to pass it)
    records: dict[str, int] = field(default_factory=dict)  # the "Record" shape's: key -> balance
    coalesce_rows: list[str] = field(default_factory=list)  # queue rows left on the "Coalesce" keys

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())


def _work(rng: random.Random, shape: str) -> int:
    if shape == "Lease":
        return rng.choice([100, (SHORT_LEASE_S + 1) * 1000])
    if shape == "Timeout":  # the longest work outlasts the state machine after a wait
        return rng.choice([100, 200, PROBE_TIMEOUT_S * 1000 - 100])
    if rng.random() < 0.05:  # past the function's timeout: Sandbox.Timedout, the handler runs on
        return rng.randint(PROBE_TIMEOUT_S * 1000 + 300, PROBE_TIMEOUT_S * 1000 + 1500)
    return rng.randint(50, 400)


#: The key letter of the shapes whose keys are their own (the others': ``K``).
KEY_LETTER = {"Lease": "L", "Coalesce": "N", "Rate": "T"}


def plan(runs: int, keys: int, seed: int, negative_control: bool, shapes: dict[str, int] | None = None) -> list[Run]:
    """``runs`` runs drawn by ``seed`` from ``shapes`` (shape -> weight; default :data:`SHAPES`)."""
    rng = random.Random(seed)
    shapes = dict(shapes or SHAPES, **({"Unlocked": 25} if negative_control else {}))
    child_keys = max(2, keys - 2)
    planned = []
    for _ in range(runs):
        shape = rng.choices(list(shapes), weights=list(shapes.values()))[0]
        letter = KEY_LETTER.get(shape, "K")
        key = f"{letter}{rng.randrange(min(keys, FLOW_KEYS) if shape in ('Coalesce', 'Rate') else keys)}"
        if shape == "Record":  # each record in turn: near, over and under the limit
            key = sorted(RECORD_SIZES_KB)[sum(r.shape == "Record" for r in planned) % len(RECORD_SIZES_KB)]

        def item(key: str) -> dict:
            return {"key": key, "workMs": _work(rng, shape), "fail": rng.random() < 0.1}

        document = item(key)
        if shape == "Map":
            document = {"items": [item(key) for _ in range(rng.randint(2, 3))]}
        elif shape == "Children":
            document["fail"] = rng.random() < 0.05
            document["children"] = [item(f"C{rng.randrange(child_keys)}") for _ in range(rng.randint(2, 3))]
        elif shape == "ChildrenParallel":
            document["fail"] = rng.random() < 0.05
            document["left"], document["right"] = (item(f"C{rng.randrange(child_keys)}") for _ in range(2))
        elif shape == "Cancelled":  # the sibling fails while the section waits, works or releases
            document["failAfter"] = rng.randint(0, 3)
        elif shape == "Record":
            document = {"key": key, "waitS": rng.choice([0, 0, 1])}
        elif shape == "ClientAsync":  # several tasks of one event loop, on two keys (maybe one)
            pair = [key, f"K{rng.randrange(keys)}"]
            document = {"key": key, "tasks": [item(rng.choice(pair)) for _ in range(rng.randint(2, 4))]}
        run = Run(shape, key, document)
        if shape in PADDED_SHAPES and rng.random() < 0.08:
            run.document["padding"] = "p" * rng.randint(*PADDING_BYTES)
        if shape not in CLIENT_SHAPES and shape != "Unlocked":
            draw = rng.random()
            if shape == "Record" and draw >= 0.08:  # (no probe to stop it in: only after a delay)
                draw = 1.0
            if run.padded and draw < 0.4:  # a holder with a large input: the janitor reads its history
                run.stop = "holding"
            elif draw < (0.3 if run.padded else 0.08):
                run.stop, run.stop_after_s = "delay", rng.uniform(0.2, 2.0)
            elif draw < (0.3 if run.padded else 0.08) + 0.05:
                run.stop = "waiting"
            elif draw < (0.3 if run.padded else 0.08) + 0.08:
                run.stop = "long-wait"
            run.redrive = rng.random() < (0.8 if run.stop == "waiting" else 0.5)
        planned.append(run)
    return planned


# --------------------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------------------


def _faults(rng: random.Random, log: Counter) -> list:
    from locked_workflow.testing.faults import Fault

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
              when=draw(fair.GRANT, 0.05, "lost grant response")),
        Fault("UpdateItem", "InternalServerError", times=many, after_call=True,
              when=draw(fair.ENQUEUE, 0.05, "lost enqueue response")),
        Fault("UpdateItem", "InternalServerError", times=many, after_call=True,
              when=draw(fair.ENQUEUE_NEWEST, 0.05, "lost coalescing enqueue response")),
        Fault("UpdateItem", "InternalServerError", times=many, after_call=True,
              when=draw(rate.ADMIT, 0.05, "lost admission response")),
        Fault("UpdateItem", "ThrottlingException", times=many, when=draw(rate.ADMIT, 0.03, "throttled admission")),
        Fault("SendTaskSuccess", "ServiceUnavailable", times=many, service="stepfunctions",
              when=lambda params: _lost(rng, guard, log, 0.05, "lost wake-up")),
    ]


def _lost(rng: random.Random, guard: threading.Lock, log: Counter, probability: float, label: str) -> bool:
    with guard:
        hit = rng.random() < probability
        if hit:
            log[label] += 1
    return hit


# --------------------------------------------------------------------------------------
# Reading an execution's history
# --------------------------------------------------------------------------------------

#: Writes that try to take a lock, or to queue for it (a release, a retire or a dequeue does not).
_ATTEMPTS = (protocol.ACQUIRE.update, fair.FAST_ACQUIRE.update, fair.ENQUEUE.update, fair.PARK.update)
_ENDS = {"ExecutionSucceeded", "ExecutionFailed", "ExecutionAborted", "ExecutionTimedOut"}


def _ms(timestamp: Any) -> int:
    return int(timestamp.timestamp() * 1000)


#: Namespaces of the keys of their own (by key letter); every other key lives in ``x``.
NAMESPACES = {"C": "c", "N": COALESCE_NAMESPACE, "T": RATE_NAMESPACE}


def _stored_key(probe_key: str) -> str:
    """The lock item of a probe item: child keys (``C...``) live in namespace ``c``, the
    coalescing shape's (``N...``) in ``n``, the rate shape's (``T...``) in ``r``."""
    return protocol.namespaced(NAMESPACES.get(probe_key[:1], "x"), probe_key)


def _lock_writes(parameters: dict) -> Iterator[tuple[str, str]]:
    """(stored key, update expression) of each write of a DynamoDB task's parameters."""
    updates = [parameters] if "UpdateExpression" in parameters else [
        entry.get("Update", {}) for entry in parameters.get("TransactItems", [])
    ]
    for update in updates:
        key = (update.get("Key") or {}).get(protocol.KEY_ATTRIBUTE, {}).get("S")
        if key and update.get("UpdateExpression"):
            yield key, update["UpdateExpression"]


def timeline(history: list[dict]) -> list[tuple[int, str, str]]:
    """``(ms, kind, stored key)`` from an execution's history: ``attempt`` (a write that tries
    to take or queue for the lock), ``enter`` (the probe scheduled on its key), ``park`` (a
    fair waiter's park write); with no key: ``end`` (the execution ended), ``redriven``,
    ``work failed: <error>`` (a probe task failed)."""
    out = []
    for event in history:
        ms = _ms(event["timestamp"])
        if event["type"] in _ENDS:
            out.append((ms, "end", ""))
        elif event["type"] == "ExecutionRedriven":
            out.append((ms, "redriven", ""))
        elif event["type"] == "TaskFailed" and event["taskFailedEventDetails"].get("resourceType") == "lambda":
            out.append((ms, f"work failed: {event['taskFailedEventDetails'].get('error')}", ""))
        if event["type"] != "TaskScheduled":
            continue
        details = event["taskScheduledEventDetails"]
        parameters = json.loads(details.get("parameters") or "{}")
        if details.get("resourceType") == "lambda":
            key = (parameters.get("Payload") or {}).get("key")
            if isinstance(key, str):
                out.append((ms, "enter", _stored_key(key)))
        elif details.get("resourceType") in ("dynamodb", "aws-sdk:dynamodb"):  # the fair park: aws-sdk
            for key, update in _lock_writes(parameters):
                if update == fair.PARK.update:
                    out.append((ms, "park", key))
                elif update.startswith(_ATTEMPTS):
                    out.append((ms, "attempt", key))
    return out


def trail(history: list[dict], last: int = 12) -> list[str]:
    """The ``last`` states an execution entered, each with its second since the start, and
    how it ended (what an unexpected outcome's diagnostics print)."""
    if not history:
        return []
    start = _ms(history[0]["timestamp"])
    out = []
    for event in history:
        if event["type"].endswith("StateEntered"):
            out.append(f"{(_ms(event['timestamp']) - start) / 1000:.1f}s {event['stateEnteredEventDetails']['name']}")
        elif event["type"] in _ENDS or event["type"] == "ExecutionRedriven":
            out.append(f"{(_ms(event['timestamp']) - start) / 1000:.1f}s {event['type']}")
    return out[-last:]


def waits_of(events: list[tuple[int, str, str]]) -> list[Wait]:
    """The waits an execution's timeline shows, per key: from its first attempt since its last
    entry (or end) to its next entry (or end). Concurrent branches on one key blur this only
    towards fewer waits (a wait whose first attempt came before a sibling's entry is not
    counted), so the handoff check reads no wait that did not happen."""
    waits: list[Wait] = []
    since: dict[str, tuple[int, bool]] = {}
    for ms, kind, key in sorted(events, key=lambda event: event[0]):
        if kind == "end":
            waits += [Wait(k, start, ms, parked) for k, (start, parked) in since.items()]
            since.clear()
        elif kind == "enter":
            if key in since:
                start, parked = since.pop(key)
                waits.append(Wait(key, start, ms, parked))
        elif kind in ("attempt", "park") and key not in since:
            since[key] = (ms, kind == "park")
        elif kind == "park":
            since[key] = (since[key][0], True)
    return waits


def _progress(history: list[dict]) -> tuple[int, int, bool]:
    """(acquire attempts so far, refused writes, whether the run has entered the probe)."""
    events = timeline(history)
    refused = sum(
        event["type"] == "TaskFailed"
        and event["taskFailedEventDetails"].get("error", "").endswith(CONDITIONAL_CHECK_FAILED_CODE)
        for event in history
    )
    return sum(kind == "attempt" for _, kind, _ in events), refused, any(kind == "enter" for _, kind, _ in events)


# --------------------------------------------------------------------------------------
# The campaign
# --------------------------------------------------------------------------------------


class _Campaign:
    """One campaign's runs over one deployment: executions, clients, stops and redrives."""

    def __init__(self, cloud: Any, app: Any, rng: random.Random) -> None:

        self.cloud, self.app, self.rng = cloud, app, rng
        self.rng_guard = threading.Lock()
        self.arns = {  # every shape's state machine is named after it
            shape: f"arn:aws:states:{cloud.region}:{cloud.account_id}:stateMachine:{shape}"
            for shape in set(SHAPES) - CLIENT_SHAPES | {"Unlocked"}
        }
        self.locks_table = _table(app, "LocksTable")
        self.probe_name = app.function_name("Probe")
        self.client = LockClient(self.locks_table, namespace="x", dynamodb=cloud.dynamodb)
        self.lambda_client = cloud.client("lambda")
        self.counts: Counter = Counter()

    def uniform(self, low: float, high: float) -> float:
        with self.rng_guard:
            return self.rng.uniform(low, high)

    def count(self, label: str) -> None:
        with self.rng_guard:
            self.counts[label] += 1

    # -- executions ---------------------------------------------------------------------

    def execution(self, run: Run) -> None:
        cloud = self.cloud
        run.arn = cloud.start_execution(self.arns[run.shape], run.document, name=f"{run.shape}-{uuid.uuid4()}")
        if run.stop is not None:
            self.stop_when_due(run)
        result = cloud.wait_for(run.arn, timeout=RUN_TIMEOUT_S)
        if result.status == "TIMED_OUT" or run.shape == "Cancelled":  # (a cancelled section's lock)
            run.holds += self.holds_at_end(run)
        if run.redrive and result.status in ("FAILED", "ABORTED", "TIMED_OUT") and run.shape != "Unlocked":
            try:
                cloud.stepfunctions.redrive_execution(executionArn=run.arn)
                run.redriven = True
                result = cloud.wait_for(run.arn, timeout=RUN_TIMEOUT_S)
            except ClientError as refused:  # e.g. ExecutionNotRedrivable: the history limit reached
                self.count(f"redrive refused: {refused.response['Error']['Code']}")
        run.status, run.error, run.cause = result.status, result.error, result.cause
        run.events = timeline(result.history)
        run.waits = waits_of(run.events)
        if run.shape == "Rate":
            run.admissions = admission_stamps(result.history)
        run.trail = trail(result.history)

    def stop_when_due(self, run: Run) -> None:
        """Stop ``run`` after its delay, once it is inside its work, as soon as it waits for its
        key, or after a long wait."""
        cloud = self.cloud
        if run.stop == "delay":
            time.sleep(run.stop_after_s)
        else:
            deadline = time.monotonic() + (75 if run.stop == "long-wait" else 30)
            while time.monotonic() < deadline and cloud.status(run.arn) == "RUNNING":
                attempts, refused, entered = _progress(cloud.history(run.arn))
                due = {"holding": entered, "waiting": entered or refused > 0,
                       "long-wait": entered or attempts >= LONG_WAIT_ATTEMPTS}[run.stop]
                if due:
                    break
                time.sleep(1.0 if run.stop == "long-wait" else 0.3)
        if cloud.status(run.arn) != "RUNNING":
            return
        attempts, refused, entered = _progress(cloud.history(run.arn))
        cloud.stop_execution(run.arn, error="Stress.Stop", cause="stopped by the campaign")
        if cloud.status(run.arn) == "ABORTED":
            run.stopped, run.attempts_at_stop = True, attempts
            run.stopped_waiting = refused > 0 and not entered
            run.holds += self.holds_at_end(run)

    def holds_at_end(self, run: Run) -> list[Hold]:
        """The locks ``run``'s execution held when it ended: its keys' lock items whose owner
        is one of its acquisitions (read before any redrive; a takeover waits for the grace)."""
        ended_ms = _ms(self.cloud.describe(run.arn)["stopDate"])
        keys = {run.key} | {c["key"] for c in run.document.get("children", [])}
        keys |= {run.document[side]["key"] for side in ("left", "right") if side in run.document}
        holds = []
        for key in sorted(keys):
            stored = _stored_key(key)
            item = self.cloud.dynamodb.get_item(
                TableName=self.locks_table, Key=protocol.lock_item_key(stored), ConsistentRead=True,
            ).get("Item", {})
            owner = item.get(protocol.OWNER, {}).get("S")
            if protocol.owner_execution(owner) == run.arn and protocol.GRACE in item:
                holds.append(Hold(stored, ended_ms, int(item[protocol.GRACE]["N"]), run.shape == "Cancelled"))
        return holds

    # -- clients ------------------------------------------------------------------------

    def invoke_probe(self, item: dict, fence: int) -> str | None:
        """Run the probe in-process with ``fence``; the function's error type, if any."""
        payload = {"key": item["key"], "workMs": item["workMs"], "fail": item["fail"], "fence": fence}
        response = self.lambda_client.invoke(FunctionName=self.probe_name, Payload=json.dumps(payload).encode())
        body = response["Payload"].read()
        if not response.get("FunctionError"):
            return None
        error = json.loads(body).get("errorType", "Unknown")
        if error == LAMBDA_TIMED_OUT:
            # AWS stops the handler at its timeout; the in-process runtime cannot and lets it
            # run on: a client that releases now would let the next holder in beside it. The
            # probe's own count of holders inside tells when it is over.
            self.wait_probe_left(item["key"])
        return error

    def wait_probe_left(self, key: str, deadline_s: float = 60.0) -> None:
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            inside = self.cloud.dynamodb.get_item(
                TableName=_table(self.app, "Probes"), Key={"pk": {"S": key}}, ConsistentRead=True,
            ).get("Item", {}).get("inside", {}).get("N", "0")
            if int(inside) <= 0:
                return
            time.sleep(0.1)

    def _release_again(self, lease: Any, error: ClientError) -> None:
        """Release ``lease`` after its release failed with a transient error (an injected
        fault: botocore's retries exhausted). A lost response (``InternalServerError``) may
        have released it already; a waiter may have taken it since, which is no loss."""

        for _ in range(20):
            try:
                self.client.release(lease)
                return
            except LockLost:
                if error.response["Error"]["Code"] == "InternalServerError":
                    return
                raise
            except ClientError as again:
                if again.response["Error"]["Code"] not in TRANSIENT_ERRORS:
                    raise
                error = again
                time.sleep(0.2)
        raise error

    def client_thread(self, run: Run) -> None:
        """A thread holding its key (``ClientNested``: re-entering its own hold around the work,
        then working again under the outer block - leaving the inner one released nothing).
        A transient error is retried as an application would: the acquire with the same owner
        (one whose response was lost is ours), the release until it is done."""

        item, started = run.document, _now_ms()
        owner = f"{self.client.owner}:{uuid.uuid4()}"  # repeatable (no "#": not one of its own)
        deadline = time.monotonic() + CLIENT_WAIT_S
        while run.status == "":
            held: dict[str, Any] = {}
            try:
                wait = max(0.0, deadline - time.monotonic())
                with self.client.hold(run.key, owner=owner, lease=CLIENT_LEASE_S, wait=wait) as lease:
                    held["lease"] = lease
                    run.waits.append(Wait(_stored_key(run.key), started, _now_ms()))
                    run.events.append((_now_ms(), "enter", _stored_key(run.key)))
                    if run.shape == "ClientNested":
                        with self.client.hold(run.key, lease=CLIENT_LEASE_S, wait=CLIENT_WAIT_S) as inner:
                            if inner.fence != lease.fence or inner.owner != lease.owner:
                                run.problems.append(f"re-entered hold got fence {inner.fence}, enclosing {lease.fence}")
                            first = self.invoke_probe(item, inner.fence)
                        second = self.invoke_probe(dict(item, fail=False), lease.fence)  # still held
                        held["error"] = first or second
                    else:
                        held["error"] = self.invoke_probe(item, lease.fence)
            except LockHeld:  # still held at the deadline (a wait of 0 once it passed)
                run.waits.append(Wait(_stored_key(run.key), started, _now_ms()))
                held["error"] = ERROR_TIMEOUT
            except LockError as error:  # e.g. LockLost on release: no documented outcome
                held["error"] = f"{type(error).__name__}: {error}"
            except ClientError as error:
                if error.response["Error"]["Code"] not in TRANSIENT_ERRORS or ("lease" in held) != ("error" in held):
                    raise
                self.count("client: transient error retried")
                if "lease" in held:  # the work ran; its release failed
                    self._release_again(held["lease"], error)
                else:
                    time.sleep(0.1)
                    continue
            run.error = held["error"]
            run.status = "FAILED" if run.error else "SUCCEEDED"

    def client_async(self, run: Run) -> None:
        """An event loop whose tasks each hold a key: a task refused because another task of
        the loop holds it (``LockHeldInThisThread``) or because someone else does
        (``LockHeld``) awaits and tries again, up to its wait (transient errors: as in
        :meth:`client_thread`)."""

        async def task(item: dict) -> str | None:
            started = _now_ms()
            owner = f"{self.client.owner}:{uuid.uuid4()}"  # repeatable (no "#": not one of its own)
            deadline = time.monotonic() + CLIENT_WAIT_S
            while True:
                held: dict[str, Any] = {}
                try:
                    with self.client.hold(item["key"], owner=owner, lease=CLIENT_LEASE_S, wait=0) as lease:
                        held["lease"] = lease
                        run.waits.append(Wait(_stored_key(item["key"]), started, _now_ms()))
                        run.events.append((_now_ms(), "enter", _stored_key(item["key"])))
                        held["error"] = await asyncio.to_thread(self.invoke_probe, item, lease.fence)
                    return held["error"]
                except LockHeldInThisThread:
                    self.count("same-thread refusals (asyncio)")
                    pause = self.uniform(0.05, 0.3)
                except LockHeld:
                    pause = self.uniform(0.2, 1.0)
                except LockError as error:  # e.g. LockLost on release: no documented outcome
                    return f"{type(error).__name__}: {error}"
                except ClientError as error:
                    if error.response["Error"]["Code"] not in TRANSIENT_ERRORS or ("lease" in held) != ("error" in held):
                        raise
                    self.count("client: transient error retried")
                    if "lease" in held:
                        self._release_again(held["lease"], error)
                        return held["error"]
                    pause = 0.1
                if time.monotonic() + pause > deadline:
                    run.waits.append(Wait(_stored_key(item["key"]), started, _now_ms()))
                    return ERROR_TIMEOUT
                await asyncio.sleep(pause)

        async def main() -> list[str | None]:
            return list(await asyncio.gather(*(task(item) for item in run.document["tasks"])))

        run.task_errors = asyncio.run(main())
        run.error = next((error for error in run.task_errors if error), None)
        run.status = "FAILED" if run.error else "SUCCEEDED"

    def one(self, run: Run) -> Run:
        try:
            if run.shape == "ClientAsync":
                self.client_async(run)
            elif run.shape in CLIENT_SHAPES:
                self.client_thread(run)
            else:
                self.execution(run)
        except Exception as error:  # noqa: BLE001 - the run's outcome: judged, not a crash
            run.status, run.error = "FAILED", f"campaign error {type(error).__name__}: {error}"
        return run


def _now_ms() -> int:
    return int(time.time() * 1000)


def run_campaign(cloud: Any, app: Any, planned: list[Run], *, seed: int, settle_s: float = 20.0,
                 readings: tuple[str, ...] = ("strict", "reevaluate"), progress: bool = False) -> Report:
    """Run ``planned`` (split in one contiguous share per redrive reading, in order), with the
    faults on, the janitor's events duplicated and late; settle; judge. A run is redriven as
    soon as it ended: within its stop grace, its Lambda maybe still running."""
    from locked_workflow.testing.faults import dynamodb_faults

    rng = random.Random(seed + 1)
    fault_log: Counter = Counter()
    campaign = _Campaign(cloud, app, random.Random(seed + 2))
    events = cloud.events
    saved = (events.duplicate_deliveries, events.late_copies_after, cloud.redrive_options.reevaluates_arguments)
    delivered_before = len(events.deliveries)
    events.duplicate_deliveries, events.late_copies_after = 1, math.inf
    finished = threading.Event()

    def late_copies() -> None:  # at random moments: janitor events long after their execution ended
        while not finished.wait(rng.uniform(3, 15)):
            events.deliver_late_copies()

    deliverer = threading.Thread(target=late_copies, name="stress-late-copies", daemon=True)
    deliverer.start()
    share = math.ceil(len(planned) / len(readings))
    if any(run.shape == "Record" for run in planned):
        _seed_records(cloud, app)
    try:
        with dynamodb_faults(*_faults(rng, fault_log)):
            for index, reading in enumerate(readings):
                cloud.redrive_options.reevaluates_arguments = READINGS[reading]
                part = planned[index * share:(index + 1) * share]
                for run in part:
                    run.reading = reading
                with ThreadPoolExecutor(max_workers=24) as pool:
                    futures = []
                    for run in part:
                        futures.append(pool.submit(campaign.one, run))
                        time.sleep(rng.uniform(0, 0.05))
                    for done, future in enumerate(futures, 1):
                        future.result()
                        if progress and done % 25 == 0:
                            print(f"  {reading}: {done}/{len(part)} runs ended", file=sys.stderr)
        finished.set()
        deliverer.join()
        events.deliver_late_copies()  # once more at the end, before settling
        # the janitor retires stopped holders' locks; their graces then pass
        time.sleep(settle_s)
    finally:
        finished.set()
        events.duplicate_deliveries, events.late_copies_after, cloud.redrive_options.reevaluates_arguments = saved
    fault_log.update(campaign.counts)
    for delivery in events.deliveries[delivered_before:]:
        if delivery.kind != "first":
            fault_log[f"{delivery.kind} janitor event"] += 1
    probe = _probe_items(cloud, app)
    held, to_pass = _left_held(cloud, app)
    late, arrivals = _next_arrivals(cloud, app, to_pass)
    records, records_held = _records(cloud, app)
    report = Report(planned, probe, fault_log, held + records_held + late, arrivals=arrivals, records=records,
                    coalesce_rows=_rows_left(cloud, app, COALESCE_NAMESPACE))
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


def _seed_records(cloud: Any, app: Any) -> None:
    """The "Record" shape's records, each with its padding (:data:`RECORD_SIZES_KB`)."""
    for key, kb in RECORD_SIZES_KB.items():
        cloud.dynamodb.put_item(TableName=_table(app, "Records"), Item={
            RECORD_KEY: {"S": key}, "balance": {"N": "0"}, "padding": {"S": "p" * (kb * 1024 - 100)}})


def _records(cloud: Any, app: Any) -> tuple[dict[str, int], list[str]]:
    """The records' balances, and the records still locked (their lease running)."""
    item = record_protocol.record_item(RECORD_KEY)
    owner, expires = item.attribute(protocol.OWNER), item.attribute(protocol.EXPIRES_AT)
    balances, held = {}, []
    for key in RECORD_SIZES_KB:
        record = cloud.dynamodb.get_item(TableName=_table(app, "Records"), Key={RECORD_KEY: {"S": key}},
                                         ConsistentRead=True).get("Item")
        if record is None:
            continue
        balances[key] = int(record["balance"]["N"])
        if owner in record and int(record[expires]["N"]) > _now_ms():
            held.append(f"record {key} by {record[owner]['S']}")
    return balances, held


def _left_held(cloud: Any, app: Any) -> tuple[list[str], dict[str, str]]:
    """What the settled table still holds: ``(held, to_pass)`` - locks held and queue rows still
    waiting (violations), and the locks the next arrival must get past (stored key -> the
    shape sent at it). Those are the free fair locks whose queue shows only holes (tickets
    whose waiter never parked: it was stopped between its ticket and its park, or its
    ticket's response was lost and it took another; fair_protocol, step 6), and the locks
    whose holder's execution ended without a status-change event the janitor watches (a
    section Step Functions cancelled in an execution that then SUCCEEDED): a waiter's
    liveness check frees those, so nobody does until a waiter comes. :func:`_next_arrivals`
    checks both."""
    now = _now_ms()
    held, queued, parked, to_pass = [], {}, set(), {}
    for page in cloud.dynamodb.get_paginator("scan").paginate(TableName=_table(app, "LocksTable"), ConsistentRead=True):
        for item in page["Items"]:
            key = item["pk"]["S"]
            if key.startswith(fair.ROW_MARK):  # a fair queue row: every waiter's was taken
                if fair.TOKEN in item:
                    held.append(f"{key} queued: {item[protocol.OWNER]['S']}")
                    parked.add(key.partition(fair.ROW_MARK)[2].partition(fair.ROW_MARK)[2])
                continue
            if protocol.OWNER in item and int(item[protocol.EXPIRES_AT]["N"]) > now:
                execution = protocol.owner_execution(item[protocol.OWNER]["S"])
                if key.startswith("x#") and execution and cloud.status(execution) == "SUCCEEDED":
                    to_pass[key] = "Plain"
                else:
                    held.append(f"{key} by {item[protocol.OWNER]['S']}")
                continue
            served, tickets = fair.counters(item)
            if served != tickets:  # a fair lock's queue: every ticket was served or skipped
                queued[key] = f"{key} queued: tickets {served + 1}..{tickets}"
    held += [line for key, line in queued.items() if key in parked]
    to_pass.update({key: "Coalesce" if key.startswith(f"{COALESCE_NAMESPACE}#") else "Fair"
                    for key in queued if key not in parked})
    return held, to_pass


def _rows_left(cloud: Any, app: Any, namespace: str) -> list[str]:
    """Every fair queue row still on a key of ``namespace`` (a mark, a row marked left, a park)."""
    left = []
    for page in cloud.dynamodb.get_paginator("scan").paginate(TableName=_table(app, "LocksTable"), ConsistentRead=True):
        for item in page["Items"]:
            key = item["pk"]["S"]
            if key.startswith(fair.ROW_MARK) and key.partition(fair.ROW_MARK)[2].partition(fair.ROW_MARK)[2].startswith(
                    f"{namespace}#"):
                left.append(f"{key}: " + ", ".join(sorted(k for k in item if k != "pk")))
    return left


#: How long the next arrival at a queue of holes, or at a lock of an ended execution, may
#: take to enter (s): a few park timeouts (its own, then one to mark the hole and one to skip
#: it), or a liveness round, the stop grace and the presence settle time, on a loaded machine.
NEXT_ARRIVAL_S = 120


def _next_arrivals(cloud: Any, app: Any, to_pass: dict[str, str]) -> tuple[list[str], list[tuple[str, float]]]:
    """Send one execution of the given shape at each lock of ``to_pass``: it must enter and
    leave the lock free and its queue empty. Returns ``(violations, [(stored key, seconds to
    succeed)])``."""
    violations, passed = [], []
    for stored_key, shape in to_pass.items():
        arn = f"arn:aws:states:{cloud.region}:{cloud.account_id}:stateMachine:{shape}"
        started = time.monotonic()
        key = stored_key.partition("#")[2]
        execution = cloud.start_execution(arn, {"key": key, "workMs": 50, "fail": False},
                                          name=f"NextArrival-{uuid.uuid4()}")
        try:
            result = cloud.wait_for(execution, timeout=NEXT_ARRIVAL_S)
        except TimeoutError:
            violations.append(f"{stored_key}: the next arrival did not get past it in {NEXT_ARRIVAL_S} s")
            continue
        item = cloud.dynamodb.get_item(TableName=_table(app, "LocksTable"), Key=protocol.lock_item_key(stored_key),
                                       ConsistentRead=True).get("Item", {})
        served, tickets = fair.counters(item)
        held = protocol.OWNER in item and int(item[protocol.EXPIRES_AT]["N"]) > _now_ms()
        if result.status != "SUCCEEDED" or served != tickets or held:
            violations.append(f"{stored_key}: the next arrival {result.status} {result.error}, then "
                              f"tickets {served + 1}..{tickets} queued, held: {held}")
        else:
            passed.append((stored_key, time.monotonic() - started))
    return violations, passed


def handoff_bound_ms(grace_ms: int, fair_waiter: bool, cancelled: bool = False) -> int:
    """How long a key may stay blocked after its holder's execution ended, with someone waiting
    (``cancelled``: its section was cancelled - its presence token is trusted once it has stood
    ``PRESENCE_SETTLE_MS``, which may end after the execution)."""
    round_s = FAIR_PARK_TIMEOUT_S if fair_waiter else LIVENESS_ROUND_S
    settle_ms = protocol.PRESENCE_SETTLE_MS if cancelled else 0
    return grace_ms + settle_ms + int((round_s + HANDOFF_SLACK_S) * 1000)


def _judge(report: Report) -> dict[str, list[str]]:
    violations: dict[str, list[str]] = {
        "alone": [], "lost update": [], "fence order": [], "outcome": [], "left held": [],
        "re-entrant hold": [], "handoff": [], "coalesce": [], "rate": [],
    }
    for key, item in report.probe.items():
        if key.startswith(("L", "T")):
            continue  # the short lease overlaps by design (only its fence guards writes); a rate limit admits several
        if item.get("violations", 0):
            violations["alone"].append(f"{key}: {item['violations']} entries found another holder inside"
                                       + _overlap_suspects(report, key, item))
        if item.get("counter", 0) != item.get("accepted", 0):
            violations["lost update"].append(f"{key}: counter {item.get('counter', 0)} != accepted {item.get('accepted', 0)}")
        fences = item.get("fences", [])
        if any(b < a for a, b in zip(fences, fences[1:])):
            violations["fence order"].append(f"{key}: {fences}")
    for run in report.runs:
        errors = run.task_errors or [run.error]
        if run.task_errors:  # ClientAsync: each task's outcome
            allowed = all(error is None or error in ALLOWED_ERRORS for error in errors)
        else:
            allowed = run.status == "SUCCEEDED" or (run.status == "FAILED" and run.error in ALLOWED_ERRORS)
            if run.shape == "Record":  # over the limit: refused, typed, whatever else happens
                over = run.key in OVER_LIMIT_RECORDS
                allowed = (run.status == "SUCCEEDED" and not over) or (run.status == "FAILED" and run.error in (
                    {ERROR_RECORD_TOO_LARGE} if over else {ERROR_TIMEOUT}))
            allowed |= run.status == "ABORTED" and run.stopped
            allowed |= run.status == "TIMED_OUT" and run.shape == "Timeout"
            allowed |= run.error == ERROR_LOST and run.shape == "Lease"
            allowed |= run.status == "FAILED" and run.error == ERROR_SUPERSEDED and run.shape == "Coalesce"
        if not allowed:
            cause = f" ({run.cause[:300]})" if run.cause else ""
            waited = ", ".join(f"{w.stored_key} {(w.end_ms - w.start_ms) / 1000:.0f} s" for w in run.waits)
            violations["outcome"].append(
                f"{run.shape} {run.arn or run.key}: {run.status} {errors}{cause}; waits: {waited or 'none'}; "
                f"stop: {run.stop}, redriven: {run.redriven}; last states: {' | '.join(run.trail)}"
            )
        violations["re-entrant hold"] += [f"{run.shape} {run.key}: {problem}" for problem in run.problems]
    for key, balance in report.records.items():  # each increment applied by a release of its own
        on_key = [run for run in report.runs if run.shape == "Record" and run.key == key]
        done = sum(run.status == "SUCCEEDED" for run in on_key)
        maybe = sum(run.status != "SUCCEEDED" for run in on_key)  # stopped after its release, maybe
        if key in OVER_LIMIT_RECORDS and balance != 0:
            violations["lost update"].append(f"record {key} over the limit was updated: balance {balance}")
        elif not done <= balance <= done + maybe:
            violations["lost update"].append(f"record {key}: balance {balance}, {done} runs succeeded, {maybe} others")
    violations["left held"] = list(report.left_held)
    for run in report.runs:  # a superseded run never entered its work (since its last redrive: a run
        # stopped at work and redriven is refused its resumed work, queues again, and may be superseded)
        since = max((ms for ms, k, _ in run.events if k == "redriven"), default=0)
        if run.shape == "Coalesce" and run.error == ERROR_SUPERSEDED and any(
                k == "enter" and ms >= since for ms, k, _ in run.events):
            violations["coalesce"].append(f"{run.arn} ended {ERROR_SUPERSEDED} after entering its work; "
                                          f"last states: {' | '.join(run.trail)}")
    violations["coalesce"] += [f"queue row left: {row}" for row in report.coalesce_rows]
    for key in sorted({run.key for run in report.runs if run.shape == "Rate"}):
        stamps = [ms for run in report.runs if run.shape == "Rate" and run.key == key for ms in run.admissions]
        for first, last in crowded_windows(stamps, limit=RATE_LIMIT, period_ms=RATE_PERIOD_S * 1000):
            violations["rate"].append(f"{key}: {RATE_LIMIT + 1} admissions within {last - first} ms "
                                      f"({first}..{last}; period {RATE_PERIOD_S * 1000} ms)")
    report.handoffs = []
    violations["handoff"] = _judge_handoffs(report)
    return violations


def _overlap_suspects(report: Report, key: str, item: dict) -> str:
    """Diagnostics of an overlap: each entry that found another holder inside, and the runs
    that entered ``key`` in the probe timeout before it, with what happened to them since."""
    stored, lines = _stored_key(key), []
    crowded = [at for at, seen in zip(item.get("enteredAt", []), item.get("seen", [])) if seen > 1]
    for at in crowded:
        lines.append(f"\n    entry at {at}:")
        for run in report.runs:
            entered = [ms for ms, kind, k in run.events if kind == "enter" and k == stored
                       and at - (PROBE_TIMEOUT_S + 2) * 1000 <= ms <= at]
            if entered:
                since = [f"{kind} {ms - at:+d} ms" for ms, kind, _ in run.events
                         if entered[0] <= ms and kind not in ("attempt", "park") and ms <= at + 10_000]
                lines.append(f"\n      {run.shape} {run.arn or run.key} (stop: {run.stop}, redriven: {run.redriven}, "
                             f"{run.status} {run.error}): {', '.join(since)}")
    return "".join(lines)


def _judge_handoffs(report: Report) -> list[str]:
    """Invariant 7 (see the module notes); fills ``report.handoffs`` with each handoff checked."""
    entries = {
        _stored_key(key): sorted(item.get("enteredAt", [])) for key, item in report.probe.items()
    }
    waits = [(run, wait) for run in report.runs for wait in run.waits]
    found = []
    for holder in report.runs:
        for hold in holder.holds:
            waiting = [
                (run, wait) for run, wait in waits
                if wait.stored_key == hold.stored_key and wait.start_ms <= hold.ended_ms
                # a cancelled section's lock is found by a state machine's liveness check: a
                # LockClient waiter does not probe (it waits for one, or for the lease)
                and not (hold.cancelled and run.shape in CLIENT_SHAPES)
                and wait.end_ms >= hold.ended_ms + handoff_bound_ms(hold.grace_ms, wait.fair, hold.cancelled)
            ]
            if not waiting:
                continue
            later = [ms for ms in entries.get(hold.stored_key, []) if ms > hold.ended_ms]
            blocked_ms = (later[0] if later else _now_ms()) - hold.ended_ms
            report.handoffs.append((hold.stored_key, blocked_ms))
            for run, wait in waiting:
                bound = handoff_bound_ms(hold.grace_ms, wait.fair, hold.cancelled)
                if blocked_ms > bound:
                    found.append(
                        f"{hold.stored_key}: {holder.shape} {holder.arn} ended at {hold.ended_ms} holding it "
                        f"(grace {hold.grace_ms} ms); {run.shape} {run.arn or '(client)'} waited from "
                        f"{wait.start_ms} to {wait.end_ms}; next entry {blocked_ms} ms after the end "
                        f"(bound {bound} ms)"
                    )
                    break
    return found


def summary(report: Report) -> str:
    def outcome(run: Run, error: str | None) -> str:
        if run.status == "ABORTED":
            return "ABORTED (stopped)"
        if run.status == "FAILED" and error is not None:
            return f"FAILED {error}"
        return "SUCCEEDED" if error is None else f"{run.status} {error}"

    outcomes = Counter()
    for run in report.runs:
        for error in run.task_errors or [run.error]:  # ClientAsync: each task
            outcomes[(run.shape, outcome(run, error))] += 1
    lines = ["| shape | outcome | runs |", "|---|---|---:|"]
    lines += [f"| {shape} | {result} | {n} |" for (shape, result), n in sorted(outcomes.items())]
    entries = sum(i.get("entries", 0) for k, i in report.probe.items() if not k.startswith(("L", "C", "T")))
    rate_entries = sum(i.get("entries", 0) for k, i in report.probe.items() if k.startswith("T"))
    child_entries = sum(i.get("entries", 0) for k, i in report.probe.items() if k.startswith("C"))
    lease_entries = sum(i.get("entries", 0) for k, i in report.probe.items() if k.startswith("L"))
    rejected = sum(i.get("rejected", 0) for i in report.probe.values())
    readings = Counter(r.reading for r in report.runs if r.redriven)
    stops = [r for r in report.runs if r.stopped]
    long_waits = [r for r in stops if r.stop == "long-wait"]
    lines += [
        "", "| injected | count |", "|---|---:|",
        f"| stops: after a delay / once inside / as soon as waiting / after a long wait | "
        f"{sum(r.stop == 'delay' for r in stops)} / {sum(r.stop == 'holding' for r in stops)} / "
        f"{sum(r.stop == 'waiting' for r in stops)} / {len(long_waits)} |",
        f"| stopped before acquiring (a refused acquire, no entry); of them redriven | "
        f"{sum(r.stopped_waiting for r in stops)}; {sum(r.stopped_waiting and r.redriven for r in stops)} |",
        f"| acquire attempts in a long wait's history at the stop (most) | "
        f"{max((r.attempts_at_stop for r in long_waits), default=0)} |",
        f"| redrives: strict / reevaluate reading | {readings['strict']} / {readings['reevaluate']} |",
        f"| padded inputs (50-150 KB); stopped while holding | {sum(r.padded for r in report.runs)}; "
        f"{sum(r.padded and bool(r.holds) for r in report.runs)} |",
        f"| works past the function timeout (planned) | {sum(_past_timeout(r) for r in report.runs)} |",
        f"| ended holders (stopped or timed out while holding) | {sum(bool(r.holds) for r in report.runs)} |",
    ] + [f"| {name} | {n} |" for name, n in sorted(report.faults.items())]
    longest = max((ms for _, ms in report.handoffs), default=0)
    lines += [
        "", "| invariant | result |", "|---|---|",
        f"| protected entries checked (short-lease keys apart) | {entries} + {child_entries} on child keys "
        f"(+{lease_entries} short-lease, +{rate_entries} rate-limited) |",
        f"| fenced writes rejected (zombies) | {rejected} |",
        f"| handoffs after an ended holder checked; longest | {len(report.handoffs)}; {longest / 1000:.1f} s "
        f"(bound {handoff_bound_ms(PROBE_GRACE_S * 1000, False) / 1000:.0f} s polling, "
        f"{handoff_bound_ms(PROBE_GRACE_S * 1000, True) / 1000:.0f} s fair) |",
        "| records (KB): balance / runs succeeded / refused as too large | " + "; ".join(
            f"{key} ({RECORD_SIZES_KB[key]}): {balance} / "
            f"{sum(r.shape == 'Record' and r.key == key and r.status == 'SUCCEEDED' for r in report.runs)} / "
            f"{sum(r.shape == 'Record' and r.key == key and r.error == ERROR_RECORD_TOO_LARGE for r in report.runs)}"
            for key, balance in sorted(report.records.items())) + " |",
        f"| coalescing runs: superseded / succeeded; queue rows left | "
        f"{sum(r.shape == 'Coalesce' and r.error == ERROR_SUPERSEDED for r in report.runs)} / "
        f"{sum(r.shape == 'Coalesce' and r.status == 'SUCCEEDED' for r in report.runs)}; {len(report.coalesce_rows)} |",
        f"| rate-limited runs: admissions read from the histories ({RATE_LIMIT} per {RATE_PERIOD_S} s per key) | "
        f"{sum(len(r.admissions) for r in report.runs if r.shape == 'Rate')} over "
        f"{len({r.key for r in report.runs if r.shape == 'Rate'})} keys |",
        f"| fair queues of holes, locks of a cancelled section: passed by the next arrival; longest | {len(report.arrivals)}; "
        f"{max((s for _, s in report.arrivals), default=0):.1f} s (bound {NEXT_ARRIVAL_S} s) |",
    ] + [f"| {name} | {'ok' if not found else f'VIOLATED ({len(found)})'} |" for name, found in report.violations.items()]
    for name, found in report.violations.items():
        for line in found[:5]:
            lines.append(f"  {name}: {line}")
    return "\n".join(lines)


def _past_timeout(run: Run) -> int:
    items = [run.document] + run.document.get("items", []) + run.document.get("children", []) + run.document.get("tasks", [])
    items += [run.document[side] for side in ("left", "right") if side in run.document]
    return sum(isinstance(i.get("workMs"), int) and i["workMs"] > PROBE_TIMEOUT_S * 1000 for i in items)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--keys", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--backend", choices=["moto", "dynamodb-local", "both"], default="both")
    parser.add_argument("--redrive-readings", choices=["both", *READINGS], default="both",
                        help="what a redriven Parallel's Arguments do (undocumented): both readings, half the runs each")
    parser.add_argument("--negative-control", action="store_true", help="mix unlocked runs in: must fail")
    args = parser.parse_args(argv)

    from locked_workflow.testing import LocalCloud
    from locked_workflow.testing.synth import synth_app

    synthesized = synth_app(lambda app: build_stack(app, "Stress"))
    backends = ["moto", "dynamodb-local"] if args.backend == "both" else [args.backend]
    readings = tuple(READINGS) if args.redrive_readings == "both" else (args.redrive_readings,)
    failed = False
    for backend in backends:
        with LocalCloud(backend) as cloud:
            app = cloud.deploy(synthesized.template, assets_dir=synthesized.assets_dir)
            started = time.time()
            report = run_campaign(cloud, app, plan(args.runs, args.keys, args.seed, args.negative_control),
                                  seed=args.seed, readings=readings, progress=True)
            print(f"\n## {backend}: {args.runs} runs over {args.keys} keys, seed {args.seed}, redrive readings "
                  f"{', '.join(readings)}, {time.time() - started:.0f} s\n")
            print(summary(report))
            failed |= not report.ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
