"""The fault matrix's stack: one workflow per lock kind around the probe Lambda, with the
participants each kind shares its keys with.

Every kind the product offers is here, each on a namespace of its own, and every kind's
rows are read from these definitions (:mod:`tools.matrix.rows`):

- ``Mutex`` (``Lock.mutex``, namespace ``m``): beside another ``Mutex`` run and a
  :class:`LockClient` on ``m``; ``Nested``: a section nested in a section on the same key
  (re-entered), or on ``innerKey`` (the inner section's own states run);
- ``Reader`` / ``Writer`` (``Lock.shared`` / ``Lock.exclusive``, namespace ``rw``), with
  ``RwMutex`` (a mutex on their keys counts as a writer) and a read/write client;
- ``Fair`` (``Lock.fair``, namespace ``f``) with a fair client;
- ``FairNewest`` (``Lock.fair(key, queue=QueueLimit.keep_newest(1))``, namespace ``fn``): a
  run arriving behind a queued one supersedes it (``Lock.Superseded``, a documented outcome);
- ``Semaphore`` (``Lock.semaphore``, limit :data:`SEMAPHORE_LIMIT`, namespace ``sem``): more
  runs than slots;
- ``Transfer`` (``Lock.keys``, namespace ``acct``): overlapping pairs of keys;
- ``Record`` (``Lock.on_record``): the lock on the record, its work an increment;
- ``Rate`` (``Lock.rate``, limit :data:`RATE_LIMIT` per :data:`RATE_PERIOD_S`, namespace
  ``rate``): more runs than permits (its probe admits them all inside at once);
- ``RateSlots`` (``Lock.rate(..., at_once=...)``, the same limit and period, at most
  :data:`RATE_AT_ONCE` at once, namespace ``rs``): more runs than slots and permits; with
  ``RateSlotsBrief`` (the same lock, a ``max_wait`` of :data:`BRIEF_MAX_WAIT_S`: the third
  run's permit comes after it, so it releases its slot and fails with ``Lock.Timeout``) and
  ``RateSlotsSection`` (a holder whose presence the slot's waiters probe).

The probe counts holders inside at entry (readers and writers apart), the fences and a
read-modify-write counter; ``Unlocked`` is the same work with no lock (the negative control).
Every workflow keeps the default janitor (a status-change rule), so the janitor's writes run.
"""

from __future__ import annotations

from typing import Any

from locked_workflow.constructs_lib import section_work

#: The probe's Lambda timeout (s): the stop grace is this + Lambda's Init limit + 5 s (``LockedWorkflow``'s default);
#: room for a 2.5 s hold on a loaded machine (5 s timed out under a load average of 10).
PROBE_TIMEOUT_S = 10
#: Every lock's stop grace (s): the probe's timeout + Init + 5 s, ``LockedWorkflow``'s default, written
#: out so the cells know it. Not shorter: the runtime reports a timed-out invocation but cannot
#: stop its thread, which runs on for a while on a loaded machine (+ 1 s let a waiter enter beside
#: a probe that had timed out: shared:Lock.ReapLast x lost, the alone check).
STOP_GRACE_S = PROBE_TIMEOUT_S + section_work.LAMBDA_INIT_LIMIT_S + section_work.STOP_GRACE_MARGIN_S
#: A parked waiter's fallback (s), fair and read/write.
PARK_TIMEOUT_S = 3
#: Holders the semaphore admits at once.
SEMAPHORE_LIMIT = 2
#: Entries the rate limit admits per key and window, and its window (s).
RATE_LIMIT, RATE_PERIOD_S = 2, 6
#: Runs a rate limit with a concurrency limit admits into the work at once.
RATE_AT_ONCE = 2
#: ``RateSlotsBrief``'s ``max_wait`` (s): past the third run's slot wait (its first holder's
#: work), short of its permit (the first admission + ``RATE_PERIOD_S`` + the entry margin).
BRIEF_MAX_WAIT_S = 5
#: The longest wait for a lock (s).
MAX_WAIT_S = 90
#: The state machines' timeout (s); a cell times an execution out where it needs to
#: (``cells.time_out``), as its TimeoutSeconds would.
TIMEOUT_S = 240
#: The records table's partition key.
RECORD_KEY = "recordId"
#: Kind -> the workflow of that kind (its definition gives the kind's rows).
MACHINES = {"mutex": "Mutex", "nested": "Nested", "fair": "Fair", "semaphore": "Semaphore",
            "multikey": "Transfer", "shared": "Reader", "exclusive": "Writer", "record": "Record",
            "coalesce": "FairNewest", "rate": "Rate", "rate-slots": "RateSlots"}
#: Workflows besides :data:`MACHINES`' and the sections' that cells run (``with:``, ``as:``).
OTHER_MACHINES = ("RwMutex", "RateSlotsBrief")

#: Kinds also deployed as a LockedSection, ``<name>Section`` (a holder with a presence token).
SECTIONS = ("Fair", "Reader", "Writer", "Semaphore", "Transfer", "RateSlots")


def build_stack(scope: Any, construct_id: str) -> Any:
    """The matrix's stack (CDK imported here: the CLI imports it lazily)."""
    import aws_cdk as cdk
    from aws_cdk import aws_dynamodb as dynamodb
    from aws_cdk import aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks

    from locked_workflow import Lock, LockedSection, LockedWorkflow, QueueLimit
    from locked_workflow.state_machines.lock_protocol import jsonata
    from tools.probe_stack import probe_resources
    from tools.stress import FAST

    stack = cdk.Stack(scope, construct_id)
    locks, probe_fn = probe_resources(stack, timeout_s=PROBE_TIMEOUT_S)
    records = dynamodb.Table(
        stack, "Records", partition_key=dynamodb.Attribute(name=RECORD_KEY, type=dynamodb.AttributeType.STRING),
        billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST, removal_policy=cdk.RemovalPolicy.DESTROY,
    )
    key = jsonata("$states.input.key")
    park = cdk.Duration.seconds(PARK_TIMEOUT_S)
    grace = cdk.Duration.seconds(STOP_GRACE_S)

    def probe(construct_id: str, payload: dict) -> Any:
        return tasks.LambdaInvoke.jsonata(
            stack, construct_id, lambda_function=probe_fn,
            payload=sfn.TaskInput.from_object({"workMs": jsonata("$states.input.workMs"),
                                               "fail": jsonata("$exists($states.input.fail) and $states.input.fail"),
                                               **payload}),
            outputs=jsonata("$states.input"), retry_on_service_exceptions=False,
        )

    def one_key(role: str | None = None, variable: str = "lock", at: str = key) -> dict:
        payload = {"key": at, "fence": jsonata(f"${variable}.fence")}
        return {**payload, "role": role} if role else payload

    transfer_keys = jsonata("[$states.input.from, $states.input.to]")
    fences = "$merge($each($lock.fences, function($v, $k) { {$substringAfter($k, '#'): $v} }))"
    kinds = {  # name -> (a lock of its kind, its namespace, its work)
        "Mutex": (lambda: Lock.mutex(key), "m", lambda n: probe(n, one_key("write"))),
        "RwMutex": (lambda: Lock.mutex(key), "rw", lambda n: probe(n, one_key("write"))),
        "Reader": (lambda: Lock.shared(key, park_timeout=park), "rw", lambda n: probe(n, one_key("read"))),
        "Writer": (lambda: Lock.exclusive(key, park_timeout=park), "rw", lambda n: probe(n, one_key("write"))),
        "Fair": (lambda: Lock.fair(key, park_timeout=park), "f", lambda n: probe(n, one_key())),
        "FairNewest": (lambda: Lock.fair(key, park_timeout=park, queue=QueueLimit.keep_newest(1)), "fn",
                       lambda n: probe(n, one_key())),
        "Semaphore": (lambda: Lock.semaphore(key, limit=SEMAPHORE_LIMIT), "sem",
                      lambda n: probe(n, {"key": key, "limit": SEMAPHORE_LIMIT})),
        # (runs admitted together work side by side: the probe lets all of a cell's runs in)
        "Rate": (lambda: Lock.rate(key, limit=RATE_LIMIT, period=cdk.Duration.seconds(RATE_PERIOD_S)), "rate",
                 lambda n: probe(n, {"key": key, "limit": 3})),
        # (a slot held from before the permit's wait to after the work: RATE_AT_ONCE inside at most)
        "RateSlots": (lambda: Lock.rate(key, limit=RATE_LIMIT, period=cdk.Duration.seconds(RATE_PERIOD_S),
                                        at_once=RATE_AT_ONCE), "rs",
                      lambda n: probe(n, {"key": key, "limit": RATE_AT_ONCE})),
        "Transfer": (lambda: Lock.keys(transfer_keys), "acct",
                     lambda n: probe(n, {"keys": transfer_keys, "fences": jsonata(fences)})),
    }
    max_waits = {name: MAX_WAIT_S for name in kinds}
    kinds["RateSlotsBrief"], max_waits["RateSlotsBrief"] = kinds["RateSlots"], BRIEF_MAX_WAIT_S
    for name, (lock, namespace, work) in kinds.items():
        LockedWorkflow(
            stack, name, lock=lock(), key_namespace=namespace, protected=work(f"{name}Probe"), table=locks,
            wait_policy=FAST, max_wait=cdk.Duration.seconds(max_waits[name]), stop_grace=grace,
            timeout=cdk.Duration.seconds(TIMEOUT_S),
            logging=False, tracing=False, state_machine_name=name,
        )
    # The same kinds as a LockedSection (``<name>Section``), whose hold registers its presence
    # (``LockedWorkflow`` turns it off): a holder the waiters of its key probe (:data:`SECTIONS`).
    for name in SECTIONS:
        lock, namespace, work = kinds[name]
        section = LockedSection(
            stack, f"{name}Section", lock=lock(), key_namespace=namespace, table=locks, wait_policy=FAST,
            max_wait=cdk.Duration.seconds(MAX_WAIT_S), stop_grace=grace, lease=cdk.Duration.minutes(10),
            protected=work(f"{name}SectionProbe"),
        )
        machine = sfn.StateMachine(
            stack, f"{name}SectionMachine", state_machine_name=f"{name}Section",
            definition_body=sfn.DefinitionBody.from_chainable(section), query_language=sfn.QueryLanguage.JSONATA,
            timeout=cdk.Duration.seconds(TIMEOUT_S),
        )
        section.recover_stale_holders(machine)
    # A section nested in a section: on the same key (re-entered: the inner one passes through),
    # or on another (``innerKey``: the inner section's own states run).
    inner_key = jsonata("$exists($states.input.innerKey) ? $states.input.innerKey : $states.input.key")
    inner = LockedSection(
        stack, "Inner", lock=Lock.mutex(inner_key), key_namespace="m", table=locks, wait_policy=FAST,
        max_wait=cdk.Duration.seconds(MAX_WAIT_S), stop_grace=grace, lease=cdk.Duration.minutes(10), lock_variable="inner",
        protected=probe("InnerProbe", {**one_key("write", "inner", inner_key), "fail": jsonata(
            "$exists($states.input.innerFail) ? $states.input.innerFail : ($exists($states.input.fail) and "
            "$states.input.fail)")}),
    )
    outer = LockedSection(
        stack, "Outer", lock=Lock.mutex(key), key_namespace="m", table=locks, wait_policy=FAST,
        max_wait=cdk.Duration.seconds(MAX_WAIT_S), stop_grace=grace, lease=cdk.Duration.minutes(10), lock_variable="outer",
        protected=probe("OuterProbe", one_key("write", "outer")).next(inner),
    )
    machine = sfn.StateMachine(
        stack, "NestedMachine", state_machine_name="Nested", definition_body=sfn.DefinitionBody.from_chainable(outer),
        query_language=sfn.QueryLanguage.JSONATA, timeout=cdk.Duration.seconds(TIMEOUT_S),
    )
    outer.recover_stale_holders(machine)
    # The lock on the record itself: the work increments the record's balance.
    increment = sfn.Pass.jsonata(stack, "RecordWork", outputs=jsonata(
        "{'recordUpdate': {'set': {'balance': {'N': $string(($exists($lock.item.balance.N) "
        "? $number($lock.item.balance.N) : 0) + 1)}}}}"))
    hold = sfn.Wait.jsonata(stack, "RecordHold", time=sfn.WaitTime.seconds(jsonata("$states.input.waitS")))
    LockedWorkflow(
        stack, "Record", lock=Lock.on_record(records, key, must_exist=False), wait_policy=FAST,
        protected=hold.next(increment), max_wait=cdk.Duration.seconds(MAX_WAIT_S), stop_grace=grace,
        timeout=cdk.Duration.seconds(TIMEOUT_S), logging=False, tracing=False, state_machine_name="Record",
    )
    # The negative control: the probe with no lock.
    sfn.StateMachine(
        stack, "UnlockedMachine", state_machine_name="Unlocked",
        definition_body=sfn.DefinitionBody.from_chainable(probe("UnlockedProbe", {"key": key, "role": "write"})),
        query_language=sfn.QueryLanguage.JSONATA, timeout=cdk.Duration.seconds(TIMEOUT_S),
    )
    return stack
