"""LockedSection: a fragment that runs any chainable under a lock, and the states it builds.

The states come from the protocol modules (:mod:`locked_workflow.state_machines.lock_protocol`
and one module per kind); the section validates its props, wires those states around the
caller's work with the kind's builder (:mod:`~locked_workflow.constructs_lib.lock_kinds`), and
checks the rendered work (:mod:`~locked_workflow.constructs_lib.section_work`).
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any, List, Mapping, Optional, Sequence, Union

import jsii
from aws_cdk import Duration, Stack, aws_dynamodb as dynamodb, aws_iam as iam
from aws_cdk import aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks
from constructs import Construct, IValidation

from locked_workflow.constructs_lib.custom_state import JsonataCustomState
from locked_workflow.constructs_lib.dynamodb_tasks import attribute_value, retry_transient, update_item_task
from locked_workflow.constructs_lib.janitor import LockJanitor, executions_of
from locked_workflow.constructs_lib.lock import A_LOCK, Lock
from locked_workflow.constructs_lib.section_work import (
    JSONATA_WORK_RULE,
    branches,
    catching,
    derive_stop_grace,
    guard_task,
    is_lock_state,
    jsonpath_states,
    reachable_states,
    task_states,
    work_tasks,
)
from locked_workflow.constructs_lib.lock_table import LockTable, check_lock_table
from locked_workflow.constructs_lib import lease_check, prop_types
from locked_workflow.state_machines import errors, fair_protocol
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines import multikey_protocol as multikey
from locked_workflow.state_machines.lock_protocol import WaitPolicy, jsonata

#: Default longest time a run waits for a held lock (or half the timeout, if shorter).
DEFAULT_MAX_WAIT = Duration.minutes(15)
#: Default: a waiter asks whether the holder still runs on every this-many-th round of polls.
DEFAULT_LIVENESS_CHECK_EVERY = 2
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,50}")
#: How the docs spell a kind's factory (messages).
_FACTORY = {"mutex": "mutex(key)", "fair": "fair(key)", "semaphore": "semaphore(key, limit=...)", "multi-key": "keys(keys)",
            "shared": "shared(key)", "exclusive": "exclusive(key)", "rate": "rate(key, limit=...)"}


# Sections being rendered, outermost first: a section rendered inside another one's branch
# learns here which sections enclose it (re-entrancy, variable clashes).
_rendering = threading.local()


def _enclosing_sections() -> list:
    return list(getattr(_rendering, "stack", []))


class _SectionState(sfn.Parallel):
    """The section's Parallel: its Arguments are known only when it is rendered, because
    only then is it known which sections enclose it."""

    def __init__(self, scope: Construct, construct_id: str, *, section: "LockedSection", **props: Any):
        super().__init__(scope, construct_id, **props)
        self._section = section

    def to_state_json(self, *args: Any) -> Any:
        enclosing = _enclosing_sections()
        problem = self._section._nesting_problem(enclosing)
        if problem:  # at synth: the state machine's definition is rendered
            raise ValueError(problem)
        stack = getattr(_rendering, "stack", [])
        stack.append(self._section)
        _rendering.stack = stack
        try:
            rendered = dict(super().to_state_json(*args))
        finally:
            stack.pop()
        grace = self._section.stop_grace_ms(rendered)
        rendered["Arguments"] = jsonata(self._section._entry_expression(enclosing, grace))
        self._section._assign_work_done(rendered, grace)
        problem = self._section._concurrent_reentry_problem(rendered)
        if problem:
            raise ValueError(problem)
        self._section._guard_work(rendered)
        return rendered


class LockedSection(sfn.StateMachineFragment):
    """A fragment that runs ``protected`` while holding an exclusive lock on a DynamoDB item.

    One Parallel state (named after the construct id) whose single branch is::

        Acquire --held--> Held? --waited max_wait--> Timeout (fails Lock.Timeout)
           ^                 |--every n-th round--> Inspect -> HolderIsExecution? -> DescribeHolder --.
           |                 \\--> Wait <---------------------------------------------------------'
           |--ok--> protected work --> Release --condition failed--> Lost (fails Lock.Lost)
                        \\--any error--> ReleaseAfterError --> Rethrow (the error, States.* renamed)

    The Parallel's entry draws the acquisition's owner (``<execution ARN>#<uuid>``) and
    validates the key (``Lock.InvalidKey`` before any DynamoDB call). Ownership is per
    acquisition: Map iterations, Parallel branches and repeated runs of one execution are
    separate holders and serialize like separate executions.

    The protected work reads the lock as ``$lock`` (or ``$<lock_variable>``): ``key``,
    ``owner``, ``fence``, ``acquiredAt``, ``expiresAt`` (epoch ms). The variable lives inside
    the section: states after it cannot read it. The work's input is the section's input; the
    section's output is the work's output.

    Nesting: a section inside another section's protected work, on the same table and the same
    key at run time, passes through (re-entrant): it writes nothing, its work runs under the
    enclosing hold and reads the same ``fence``, and leaving it does not free the enclosing
    lock. A different key is an ordinary nested lock. Nested sections need different
    ``lock_variable`` names (refused at synth otherwise).

    Redrive: a redriven execution that re-enters the section (stopped or failed inside it)
    acquires again, with a new owner, before any of its protected work runs again; the work
    runs from its start.

    :param lock: what to lock, and how - a lock kind as a value: ``Lock.mutex(key)``,
        ``Lock.fair(key, park_timeout=...)``, ``Lock.semaphore(key, limit=...)``,
        ``Lock.shared(key)`` / ``Lock.exclusive(key)`` (a read/write lock),
        ``Lock.keys(keys)`` or ``Lock.on_record(table, key, ...)`` (see
        :class:`~locked_workflow.constructs_lib.lock.Lock`).
    :param protected: the work to run under the lock (any ``IChainable``). A single task
        state with no Catch of its own gets the lock's Catch directly; anything else is
        wrapped in a one-branch Parallel (one more state transition).
    :param table: the lock table (partition key ``pk``, string; a ``LockTable`` or its
        ``table``); left unset with ``Lock.on_record``, whose lock lives on the record table.
    :param lease: how long an acquisition stays valid if never released. Set it longer than
        the longest time the section can run; a shorter lease trades safety (another run
        may take over a live holder, whose late writes only its fence can reject) for
        faster recovery from crashed holders.
    :param key_namespace: prefix of the stored key, ``<namespace>#<key>`` (also for ``""``:
        ``#<key>``); share it with any ``LockClient`` taking part in the same lock.
        Default: ``""``.
    :param max_wait: longest time to wait for a held lock before failing with
        ``Lock.Timeout``; ``Duration.seconds(0)`` fails at once. The timeout comes after
        ``max_wait`` and before ``max_wait`` + one round of polls (at most half of
        ``max_wait`` more), request latencies aside. Default: 15 minutes; with ``Lock.rate``,
        whose waits could outgrow ``history_event_budget`` in 15 minutes at a high ``limit``,
        the longest whole-second wait up to 15 minutes that fits it (the same worst case the
        check refuses by: at 100 per minute 599 s; at 10 per minute with ``at_once=2`` 808 s).
        A ``max_wait`` given past the budget is refused.
    :param wait_policy: how to poll a held lock. Default: ``WaitPolicy()`` - first wait 2 s,
        backoff 1.5, at most 5 s between attempts, jitter on, 8 retries per round.
    :param stop_grace: how long the lock of a holder whose execution ended without releasing
        it (stopped, timed out, failed past every Catch) stays held after that end: Step
        Functions does not stop a running Lambda invocation, activity or callback worker.
        The janitor's and the liveness check's retires never keep it past its lease.
        Default: the longest run a task of the protected work may have (a Lambda task: Lambda's
        10 s Init limit - a cold start, outside the function's timeout - plus its function's
        timeout, whatever its ``TimeoutSeconds``; other tasks: their ``TimeoutSeconds``) plus
        5 s; 15 minutes if some task's longest run cannot be seen.
    :param lock_variable: name of the variable holding the lock (the section also uses
        ``<name>Wait``, ``<name>Holder``, ``<name>Redrives``, ``<name>Lost``, ``<name>Presence``,
        ``<name>Held`` and ``<name>Done``). Default: ``"lock"``.
    :param liveness_check_every: on every this-many-th round of polls a waiter asks Step
        Functions whether the holder's execution still runs, and takes the lock over from one
        that ended longer than its stop grace ago; ``0`` leaves the states out. The check
        needs ``states:DescribeExecution`` on the holders' executions: see
        :meth:`recover_stale_holders`. Default: ``2``.
    :param history_event_budget: refuse a ``max_wait``/``wait_policy`` whose wait loop could
        record more history events than this (a Standard execution stops at 25,000); ``None``
        skips the check (Express). Default: 20,000.
    :param detect_cancellation: the holder keeps a presence branch beside its work - a
        callback task whose token it registers on the lock item (per hold: two more writes,
        one read and up to five more state transitions) - so that a waiter's liveness check learns at once
        when Step Functions cancelled the holding branch while the execution runs on (a sibling
        branch or iteration failed and the user caught the Parallel's or Map's failure: no
        Catch runs and no event is sent). The waiter's ``SendTaskHeartbeat`` on the token then
        fails with ``TaskTimedOut`` and the lock is held for the stop grace from that moment,
        not for the rest of the lease. Needs a STANDARD state machine (EXPRESS cannot park on a
        task token: set ``False`` there; refused at synth otherwise). A multi-key hold writes
        its token on every key it took, in one transaction; a read/write hold (``Lock.shared`` /
        ``Lock.exclusive``) on a presence row of its own, which its release deletes (one more
        write). Default: ``True``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        lock: Lock,
        protected: sfn.IChainable,
        table: Optional[Union[dynamodb.ITable, "LockTable"]] = None,
        lease: Duration,
        key_namespace: str = "",
        max_wait: Duration = DEFAULT_MAX_WAIT,
        wait_policy: Optional[WaitPolicy] = None,
        stop_grace: Optional[Duration] = None,
        lock_variable: str = "lock",
        liveness_check_every: int = DEFAULT_LIVENESS_CHECK_EVERY,
        history_event_budget: Optional[int] = protocol.WAIT_LOOP_EVENT_BUDGET,
        detect_cancellation: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        prop_types.instance("lock", lock, Lock, A_LOCK, required=True)
        protected = prop_types.chainable("protected", protected)
        jsonpath_tasks = jsonpath_states(protected, tasks_only=True)
        if jsonpath_tasks:
            raise ValueError(
                f"`protected` must use JSONata in its task states ({JSONATA_WORK_RULE}), got: JSONPath "
                f"task{'s' if len(jsonpath_tasks) > 1 else ''} {', '.join(map(repr, jsonpath_tasks))}"
            )
        table = prop_types.table("table", table)
        prop_types.instance("wait_policy", wait_policy, WaitPolicy, "a WaitPolicy")
        wait_policy = wait_policy or WaitPolicy()
        if not isinstance(detect_cancellation, bool):
            raise ValueError(f"`detect_cancellation` must be True or False, got: {detect_cancellation!r}")
        if not isinstance(liveness_check_every, int) or liveness_check_every < 0:
            raise ValueError(
                "`liveness_check_every` must be a whole number of rounds >= 0 (0 turns the check "
                f"off), got: {liveness_check_every!r}"
            )
        self.lock = lock
        self.kind = lock.builder()
        # waiters park on a task token (a fair lock but its EXPRESS form; the read/write lock)
        parks = self.kind.parks_on_token
        if parks and lock.is_fair and liveness_check_every == 0:
            raise ValueError(
                "`liveness_check_every` must be at least 1 with Lock.fair (a parked waiter's "
                "fallback asks whether the holder and the head of the queue still run), got: 0"
            )
        if lock.record_table is not None:
            if table is not None:
                raise ValueError(
                    "`table` must be left unset with Lock.on_record (the lock lives on the record "
                    f"table the lock names), got: {table!r}"
                )
            if key_namespace:
                raise ValueError(
                    "`key_namespace` must be empty with Lock.on_record (the key is the record's own), "
                    f"got: {key_namespace!r}"
                )
            table = lock.record_table
        elif table is None:
            raise ValueError(f"`table` must be given (the lock table) with Lock.{_FACTORY[lock.kind]}, got: None")
        else:
            check_lock_table("table", table)
        problem = protocol.namespace_problem(key_namespace)
        if problem:
            raise ValueError(f"`key_namespace` {problem}")
        if not _VARIABLE_NAME.fullmatch(lock_variable or "") or lock_variable == "states":
            raise ValueError(
                "`lock_variable` must be a JSONata variable name of at most 51 characters (a "
                f"letter or _, then letters, digits or _, not 'states'), got: {lock_variable!r}"
            )
        lease_ms = prop_types.concrete_ms("lease", lease)
        if lease_ms < 1000:
            raise ValueError(f"`lease` must be at least 1 second, got: {lease_ms / 1000} s")
        if max_wait is None and parks:  # wait as long as the history allows
            max_wait = Duration.seconds(fair_protocol.unlimited_wait_s(self.kind.park_timeout_s, history_event_budget))
        # a kind that waits its own way (Lock.rate; with at_once, after the wait loop for a slot)
        own_events = getattr(self.kind, "worst_case_events", None)

        def needed_events(max_wait_s: float) -> int:
            if parks:
                return fair_protocol.worst_case_park_events(self.kind.park_timeout_s, max_wait_s)
            loop = protocol.worst_case_wait_events(wait_policy, max_wait_s, liveness_check_every)
            if own_events is None:
                return loop
            return own_events(max_wait_s) + (0 if getattr(self.kind, "builds_own_wait_path", False) else loop)

        if max_wait is DEFAULT_MAX_WAIT and own_events is not None and history_event_budget is not None:
            # left unset: at most the default, the longest the history budget allows
            longest_s = protocol.longest_wait_s(needed_events, history_event_budget, int(max_wait.to_seconds()))
            if longest_s is not None:
                max_wait = Duration.seconds(longest_s)
        max_wait_ms = prop_types.concrete_ms("max_wait", max_wait)
        if max_wait_ms < 0:
            raise ValueError(f"`max_wait` must not be negative, got: {max_wait_ms / 1000} s")
        if history_event_budget is not None:
            needed = needed_events(max_wait_ms / 1000)
            if own_events is not None and needed > history_event_budget:
                raise ValueError(
                    f"`max_wait` must keep the wait under {history_event_budget} history events (of the "
                    f"{protocol.HISTORY_EVENT_LIMIT} a Standard execution may record), got: {max_wait_ms / 1000} s, "
                    f"which can take {needed} events with Lock.{lock.kind}(limit={self.kind.rate_limit}); lower "
                    "max_wait (a run waits at most one refusal per entry admitted meanwhile)"
                )
            if needed > history_event_budget and parks:
                raise ValueError(
                    f"`max_wait` must keep the queue's wait under {history_event_budget} history events "
                    f"(of the {protocol.HISTORY_EVENT_LIMIT} a Standard execution may record), got: "
                    f"{max_wait_ms / 1000} s, which can take {needed} events with park_timeout="
                    f"{self.kind.park_timeout_s} s; raise park_timeout or lower max_wait"
                )
            if needed > history_event_budget:
                raise ValueError(
                    f"`max_wait` must keep the wait loop under {history_event_budget} history events "
                    f"(of the {protocol.HISTORY_EVENT_LIMIT} a Standard execution may record), got: "
                    f"{max_wait_ms / 1000} s, which can take {needed} events with "
                    f"wait_policy.max_interval={wait_policy.max_interval} s and "
                    f"liveness_check_every={liveness_check_every}; raise wait_policy.max_interval "
                    "(or first_interval) or lower max_wait"
                )

        self.table = table
        self.lock_variable = lock_variable
        self.key_namespace = key_namespace
        self.max_wait = max_wait
        self.wait_policy = wait_policy
        self.lease = lease
        self.liveness_check_every = liveness_check_every
        self.variables = {
            "lock": lock_variable,
            "wait": f"{lock_variable}Wait",
            "holder": f"{lock_variable}{protocol.HOLDER_SUFFIX}",
            "redrives": f"{lock_variable}Redrives",
            "lost": f"{lock_variable}Lost",
            "presence": f"{lock_variable}Presence",
            "held": f"{lock_variable}Held",
            "done": f"{lock_variable}Done",
        }
        self._key_expression = self.kind.key_expression(key_namespace)
        self.max_wait_ms = max_wait_ms
        self._construct_id = construct_id
        self._state_names: set[str] = set()  # every lock state's name (see _name)
        self._liveness_grants: list = []
        self._janitor: Optional[LockJanitor] = None

        # (a fair lock's EXPRESS waiters poll: no task tokens there)
        self.detect_cancellation = detect_cancellation and self.kind.presence and not self.kind.polling
        self._lease_ms = lease_ms
        self._lost: Optional[sfn.State] = None
        self.protected = (
            self._build_hold(protected) if self.detect_cancellation
            else catching(self, protected, self.state_name("Protected"))
        )
        self._stop_grace = stop_grace
        if stop_grace is not None and prop_types.concrete_ms("stop_grace", stop_grace) < 0:
            raise ValueError(f"`stop_grace` must not be negative, got: {stop_grace.to_seconds()} s")

        self._pending_after_acquire: list = []
        self.rethrow = sfn.Fail.jsonata(
            self,
            "Rethrow",
            state_name=self.state_name("Rethrow"),
            error=jsonata(protocol.rethrow_error_expression()),
            cause=jsonata(protocol.rethrow_cause_expression()),
        )
        self._start, self.acquire, acquired = self.kind.build_acquire(self, lease_ms)
        if not self.kind.builds_own_wait_path:
            self._build_wait_path()
        self._build_error_path()
        self.release = self._build_release()
        acquired.next(self.protected).next(self.release)
        self.section_state = self._build_entry()
        self._parks = parks
        if self.detect_cancellation or parks:
            self.node.add_validation(_NotInExpress(self))

    # -- wiring -------------------------------------------------------------------------

    def state_name(self, suffix: str) -> str:
        """The name of one of this section's lock states (recorded: the work's tasks are
        guarded, the lock's own states are not)."""
        name = f"{self._construct_id}.{suffix}"
        self._state_names.add(name)
        return name

    def _build_wait_path(self) -> None:
        """Held: poll (bounded by max_wait) and try again, or fail with Lock.Timeout."""
        v, policy, max_wait_ms = self.variables, self.wait_policy, self.max_wait_ms
        timeout = sfn.Fail.jsonata(
            self,
            "Timeout",
            state_name=self.state_name("Timeout"),
            error=protocol.ERROR_TIMEOUT,
            cause=f"the lock was held by another run for longer than max_wait ({max_wait_ms} ms)",
        )
        refused = self.kind.refused
        if max_wait_ms == 0:
            self.acquire.add_catch(timeout, errors=[refused])
            return
        retries = policy.retries_for(max_wait_ms / 1000)
        if retries:  # fast polls: the acquire retries the refused write itself
            self.acquire.add_retry(
                errors=[refused],
                interval=Duration.seconds(policy.first_interval),
                backoff_rate=policy.backoff_rate,
                max_delay=Duration.seconds(policy.max_interval),
                max_attempts=retries,
                jitter_strategy=sfn.JitterType.FULL if policy.jitter else sfn.JitterType.NONE,
            )
        self._wait = JsonataCustomState(
            self,
            self.state_name("Wait"),
            state_json={
                "Type": "Wait",
                "QueryLanguage": "JSONata",
                "Seconds": jsonata(protocol.wait_seconds_expression(policy, v["wait"], max_wait_ms)),
            },
        )
        held = sfn.Choice.jsonata(self, "Held", state_name=self.state_name("Held?"))
        held.when(
            sfn.Condition.jsonata(jsonata(protocol.waited_enough_expression(v["wait"], max_wait_ms))),
            timeout,
        )
        if self.liveness_check_every:
            held.when(
                sfn.Condition.jsonata(
                    jsonata(protocol.liveness_due_expression(v["wait"], self.liveness_check_every))
                ),
                self._liveness_check(),
            )
        held.otherwise(self._wait.next(self.acquire))
        self.acquire.add_catch(
            held,
            errors=[refused],
            assign={v["wait"]: jsonata(protocol.wait_bookkeeping_expression(v["wait"]))},
            outputs=jsonata("$states.input"),
        )

    def _liveness_check(self) -> sfn.IChainable:
        """Inspect the lock; if its holder's execution ended longer than its grace ago, mark
        it stale. Every path goes through the Wait, so each round lets time pass."""
        v = self.variables
        holder = protocol.holder_expression(self.kind.item)
        if self.kind.meets_shared_holds:
            # the whole lock item (a read/write lock's reader entries have names of their own:
            # no projection can list them); a lock item is small, at most MAX_READERS entries
            shared_hold = self.kind.shared_hold_expression(self, "$states.result.Item")
            read = {"assign": {v["holder"]: jsonata(f"$merge([{holder}, {{'shared': {shared_hold}}}])")}}
        else:
            projection, projection_names = protocol.holder_projection(self.kind.item)
            read = {
                "projection_expression": [tasks.DynamoProjectionExpression().with_attribute(n) for n in projection],
                "expression_attribute_names": projection_names,
                "assign": {v["holder"]: jsonata(holder)},
            }
        inspect = tasks.DynamoGetItem.jsonata(
            self,
            self.state_name("Inspect"),
            table=self.table,
            key={self.kind.item.key_attribute: attribute_value({"S": jsonata(self.kind.inspect_key(self))})},
            consistent_read=True,
            outputs=jsonata("$states.input"),
            **read,
        )
        retry_transient(inspect)
        inspect.add_catch(self._wait, errors=["States.ALL"], outputs=jsonata("$states.input"))
        describe = JsonataCustomState(
            self,
            self.state_name("DescribeHolder"),
            state_json={
                "Type": "Task",
                "QueryLanguage": "JSONata",
                "Resource": f"arn:{Stack.of(self).partition}:states:::aws-sdk:sfn:describeExecution",
                "Arguments": {
                    "ExecutionArn": jsonata(protocol.holder_execution_expression(v["holder"]))
                },
                "Assign": {
                    v["wait"]: jsonata(protocol.after_liveness_check_expression(v["wait"], v["holder"]))
                },
                "Output": jsonata("$states.input"),
            },
        )
        describe.add_catch(self._wait, errors=["States.ALL"], outputs=jsonata("$states.input"))
        describe.next(self._wait)
        is_execution = sfn.Choice.jsonata(self, "HolderIsExecution", state_name=self.state_name("HolderIsExecution?"))
        if self.kind.meets_shared_holds:  # a shared hold (readers of a read/write lock) owns the key
            for condition, state in self.kind.shared_hold_branches(self, holder_variable=v["holder"], then=self._wait):
                is_execution.when(sfn.Condition.jsonata(jsonata(condition)), state)
        is_execution.when(
            sfn.Condition.jsonata(jsonata(protocol.holder_present_expression(v["holder"]))),
            self.probe_presence(describe, then=self._wait),
        ).when(
            sfn.Condition.jsonata(jsonata(protocol.holder_is_execution_expression(v["holder"]))),
            describe,
        ).otherwise(self._wait)
        return inspect.next(is_execution)

    def probe_presence(self, describe: sfn.State, *, then: sfn.State) -> sfn.State:
        """``SendTaskHeartbeat`` on the presence token of the holder in ``$holder``: accepted,
        the holding branch still runs (``then``: wait on); ``TaskTimedOut``, it ended without
        releasing - ABANDONED, the lock is held for its stop grace from now (then ``then``); any
        other answer: ``describe`` (ask about the execution). The mutex's liveness check and the
        fair lock's park fallback build it."""
        v = self.variables
        probe = tasks.CallAwsService.jsonata(
            self, "Probe", state_name=self.state_name("ProbeHolder"), service="sfn", action="sendTaskHeartbeat",
            parameters={"TaskToken": jsonata(f"${v['holder']}.presence")},
            iam_action="states:SendTaskHeartbeat",
            # task tokens cannot be scoped by IAM: the one resource is *
            iam_resources=["*"],
            outputs=jsonata("$states.input"),
        )
        abandoned = update_item_task(
            self, self.state_name("Abandoned"), self.table,
            protocol.abandoned_arguments(holder_variable=v["holder"], item=self.kind.item),
        )
        retry_transient(abandoned)
        abandoned.add_catch(then, errors=["States.ALL"], outputs=jsonata("$states.input"))
        probe.add_catch(abandoned, errors=[protocol.PRESENCE_GONE], outputs=jsonata("$states.input"))
        probe.add_catch(describe, errors=["States.ALL"], outputs=jsonata("$states.input"))
        probe.next(then)
        abandoned.next(then)
        return probe

    def _lost_state(self) -> sfn.State:
        """``Lock.Lost``: the lock was taken over before it was released."""
        if self._lost is None:
            lock = "$" + self.variables["lock"]
            self._lost = sfn.Fail.jsonata(
                self,
                "Lost",
                state_name=self.state_name("Lost"),
                error=protocol.ERROR_LOST,
                cause=jsonata(
                    f"'lock ' & ($exists({lock}.key) ? {lock}.key : $string({lock}.keys)) & ' (fence ' "
                    f"& $string($exists({lock}.fence) ? {lock}.fence : {lock}.fences)"
                    " & ') was taken over by another holder before it was released'"
                ),
            )
        return self._lost

    def _build_release(self) -> sfn.State:
        """Release on success (the kind's writes), ``Lock.Lost`` when the lock was taken over."""
        left = sfn.Succeed(self, "LeftReentered", state_name=self.state_name("LeftReentered"))
        return self.kind.build_release(self, self._lost_state(), left)

    def _build_hold(self, work: sfn.IChainable) -> sfn.Parallel:
        """The hold (``detect_cancellation``): a Parallel of the work and the presence branch.

        Work branch: ``work --> Depart --> Departed --> Dismiss``. DEPART (owner-conditioned)
        closes the acquisition's presence; ``Departed`` reads the token its presence branch
        registered, if any, and ``Dismiss`` (``SendTaskSuccess``) ends that branch. Presence branch: ``Presence``, a
        ``.waitForTaskToken`` UpdateItem (PRESENT) that parks until dismissed - its token, on the
        lock item, is what a waiter's liveness check probes. Both are writes on the one lock item,
        so whichever comes first, the other sees it: a presence registered after DEPART is
        refused (and its branch ends), one registered before is read after it.

        A cancelled hold - Step Functions cancels a branch when a sibling branch or iteration
        of a user's Parallel or Map fails, without running its Catch - closes the presence
        task with it: the token then answers ``TaskTimedOut`` (ABANDONED). The work runs in a
        Parallel of its own only if it has a ``Succeed`` state, which would end the work branch
        without DEPART.
        """
        v = self.variables
        item = self.kind.item
        if any(isinstance(s, sfn.Succeed) for s in reachable_states(work)):
            work = sfn.Parallel.jsonata(
                self, "Protected", state_name=self.state_name("Protected"), outputs=jsonata("$states.result[0]")
            ).branch(work)
        lost = sfn.Fail.jsonata(
            self, "LostInHold", state_name=self.state_name("LostInHold"), error=protocol.SIGNAL_LOST_IN_HOLD,
            cause="the lock was taken over before the work was over",
        )
        worked = sfn.Succeed(self, "Worked", state_name=self.state_name("Worked"))
        key = self.kind.presence_key(self)
        depart = update_item_task(
            self, self.state_name("Depart"), self.table,
            self.kind.depart_arguments(self),
        )
        retry_transient(depart)
        depart.add_catch(lost, errors=[protocol.CONDITION_FAILED])
        # a re-entered hold: nothing to depart; the work's output goes on (a Catch's default
        # output is the error object, which the state after the section would receive)
        depart.add_catch(worked, errors=[protocol.QUERY_EVALUATION_ERROR], outputs=jsonata("$states.input"))
        projection, projection_names = protocol.presence_projection(item)
        read = tasks.DynamoGetItem.jsonata(
            self, self.state_name("Departed"), table=self.table,
            key={item.key_attribute: attribute_value({"S": jsonata(key)})},
            consistent_read=True,
            projection_expression=[tasks.DynamoProjectionExpression().with_attribute(n) for n in projection],
            expression_attribute_names=projection_names,
            assign={v["presence"]: jsonata(protocol.departed_token_expression(v["lock"], item))},
            outputs=jsonata("$states.input"),
        )
        retry_transient(read)
        dismiss = tasks.CallAwsService.jsonata(
            self, "Dismiss", state_name=self.state_name("Dismiss"), service="sfn", action="sendTaskSuccess",
            parameters={"TaskToken": jsonata("$" + v["presence"]), "Output": "{}"},
            iam_action="states:SendTaskSuccess",
            # task tokens cannot be scoped by IAM: the one resource is *
            iam_resources=["*"],
            outputs=jsonata("$states.input"),
        )
        # no token registered, or its task is over already: nothing to end, no retry. Any other
        # error is tried again: until the presence branch ends, the hold (and the lock) stays on
        dismiss.add_retry(errors=list(protocol.DISMISS_OVER), max_attempts=0)
        r = protocol.DISMISS_RETRY
        dismiss.add_retry(errors=["States.ALL"], interval=Duration.seconds(r["interval_s"]),
                          backoff_rate=r["backoff_rate"], max_attempts=r["max_attempts"],
                          jitter_strategy=sfn.JitterType.FULL)
        dismiss.add_catch(worked, errors=["States.ALL"], outputs=jsonata("$states.input"))
        # (the read's errors: the branch fails, the hold's Catch releases - the lock is mine)
        work_branch = sfn.Chain.start(work).next(depart).next(read).next(dismiss)

        gone = sfn.Succeed(self, "PresenceOver", state_name=self.state_name("PresenceOver"))
        lease_s = -(-self._lease_ms // 1000)
        action, arguments = self.kind.presence_task(self)
        presence = JsonataCustomState(self, self.state_name("Presence"), state_json={
            "Type": "Task",
            "QueryLanguage": "JSONata",
            "Resource": f"arn:{Stack.of(self).partition}:states:::aws-sdk:dynamodb:{action}.waitForTaskToken",
            "Arguments": arguments,
            # past the lease the lock is anyone's: the presence need not outlive it. A heartbeat
            # timeout, so that AWS accepts the probes' heartbeats under any reading
            "TimeoutSeconds": lease_s + 1,
            "HeartbeatSeconds": lease_s,
            "Output": jsonata("$states.input"),
        })
        # short retries: they bound how long a closed token of a failed attempt can stand
        # (protocol.PRESENCE_SETTLE_MS); a multi-key hold's transaction refused (as below) or in
        # conflict with another one (a waiter's acquire) is tried again: it wrote nothing
        r = protocol.PRESENCE_RETRY
        presence.add_retry(errors=[*multikey.TRANSIENT_ERRORS, multikey.TRANSACTION_CANCELED],
                           interval=Duration.seconds(r["interval_s"]), backoff_rate=r["backoff_rate"],
                           max_attempts=r["max_attempts"], jitter_strategy=sfn.JitterType.FULL)
        presence.add_catch(gone, errors=[
            multikey.TRANSACTION_CANCELED,
            protocol.SDK_CONDITION_FAILED,  # DEPART came first, or the lock is not mine any more
            protocol.QUERY_EVALUATION_ERROR,  # a re-entered hold
            errors.STATES_TIMEOUT, errors.STATES_HEARTBEAT_TIMEOUT,
        ])
        # the registration failed (it may have written a token that is closed now): DEPART rules
        # any token of this acquisition out; if even that fails, the hold ends (retired)
        unsure = update_item_task(
            self, self.state_name("PresenceUnsure"), self.table,
            self.kind.depart_arguments(self),
        )
        r = protocol.PRESENCE_UNSURE_RETRY
        unsure.add_retry(errors=list(protocol.TRANSIENT_ERRORS), interval=Duration.seconds(r["interval_s"]),
                         backoff_rate=r["backoff_rate"], max_attempts=r["max_attempts"],
                         jitter_strategy=sfn.JitterType.FULL)
        unsure.add_catch(gone, errors=[protocol.CONDITION_FAILED, protocol.QUERY_EVALUATION_ERROR])
        unsure.add_catch(sfn.Fail.jsonata(
            self, "PresenceUnknown", state_name=self.state_name("PresenceUnknown"),
            error=protocol.ERROR_PRESENCE_UNKNOWN,
            cause="the holder's presence could neither be registered nor ruled out",
        ), errors=["States.ALL"])
        presence.add_catch(unsure, errors=["States.ALL"], outputs=jsonata("$states.input"))
        presence.next(gone)
        unsure.next(gone)

        hold = sfn.Parallel.jsonata(
            self, "Hold", state_name=self.state_name("Hold"), outputs=jsonata("$states.result[0]"),
        ).branch(work_branch).branch(presence)
        hold.add_catch(self._lost_state(), errors=[protocol.SIGNAL_LOST_IN_HOLD])
        return hold

    def build_mutex_release(
        self,
        lost: sfn.State,
        left: sfn.State,
        *,
        release_task=None,
        query_error_outputs: str = "$states.input",
        after_release: Optional[sfn.IChainable] = None,
    ) -> sfn.State:
        """The mutex's release. A failed condition means the lock is not mine - unless a retried
        release follows one whose response was lost, or a redrive resumed a release whose first
        run applied before the stop (then it was released before anyone could take it over: see
        ``lock_protocol.released_before_takeover_expression``).

        ``release_task(state_name, first, assign)``: the release write (default: the mutex's
        RELEASE), with ``assign`` (:meth:`held_assign`); a query error of the first one goes to
        ``left`` with ``query_error_outputs``."""
        v = self.variables

        def mutex_release(state_name: str, first: bool, assign: dict) -> sfn.TaskStateBase:
            return update_item_task(
                self, state_name, self.table,
                protocol.release_arguments(lock_variable=v["lock"], reentrant=first, item=self.kind.item),
                assign=assign,
            )

        release_task = release_task or mutex_release
        release = release_task(self.state_name("Release"), True, self.held_assign())
        release.add_catch(left, errors=[protocol.QUERY_EVALUATION_ERROR], outputs=jsonata(query_error_outputs))
        again = release_task(self.state_name("ReleaseAgain"), False, self.held_assign())
        retry_transient(again)
        release.add_catch(again, errors=list(protocol.TRANSIENT_ERRORS), outputs=jsonata("$states.input"))
        released = sfn.Succeed(self, "Released", state_name=self.state_name("Released"))

        def released_if(construct_id: str, expression: str) -> sfn.Choice:
            """A refused release: ``released`` when ``expression`` holds, else ``lost``."""
            return sfn.Choice.jsonata(self, construct_id, state_name=self.state_name(f"{construct_id}?")).when(
                sfn.Condition.jsonata(jsonata(expression)), released).otherwise(lost)

        released_before = released_if("ReleasedBefore", protocol.released_before_takeover_expression(v["lock"], v["done"]))
        again.add_catch(released_before, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
        # a first release refused: the lock was taken over (Lock.Lost) - unless a redrive resumed
        # this release, whose first run may have applied before the execution stopped
        resumed = released_if("ReleaseResumed", protocol.resumed_release_applied_expression(v["lock"], v["done"]))
        release.add_catch(resumed, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
        if after_release is not None:  # (a fair lock: wake the next waiter)
            release.next(after_release)
            again.next(after_release)
        return release

    def _build_error_path(self) -> None:
        """Every error of the work: release, then fail with it (States.* renamed)."""
        rethrow = self.rethrow
        self.release_after_error = self.kind.build_release_after_error(self, rethrow)
        # work that may still be in flight - a task timed out (Step Functions does not stop
        # the invocation or worker behind it), or a task refused to resume after a redrive
        # (the run before the stop may still be going): the acquisition is retired, held for
        # its stop grace from now, not released
        in_flight = sfn.Choice.jsonata(self, "InFlight", state_name=self.state_name("MayStillRun?"))
        in_flight.when(sfn.Condition.jsonata(jsonata(protocol.may_still_run_expression())),
                       self.kind.build_retire(self, rethrow))
        in_flight.otherwise(self.release_after_error)
        still_run = [*protocol.MAY_STILL_RUN_ERRORS] + ([protocol.ERROR_PRESENCE_UNKNOWN] if self.detect_cancellation else [])
        self.protected.add_catch(in_flight, errors=[protocol.QUERY_EVALUATION_ERROR, *still_run])
        self.protected.add_catch(self.release_after_error, errors=["States.ALL"])
        for state in self._pending_after_acquire:
            state.add_catch(self.release_after_error, errors=["States.ALL"])

    def after_acquire_failure(self, state: sfn.TaskStateBase) -> None:
        """``state`` runs while the lock is held (before the work): its errors release it too."""
        self._pending_after_acquire.append(state)

    def held_assign(self, when: Optional[str] = None) -> dict:
        """The Assign of a release: how long the lock was held (``<lock_variable>Held``, ms),
        which monitoring reads from the release's exit line (``when``: JSONata, true when the
        write ends the hold; see ``lock_protocol.held_ms_expression``)."""
        return {self.variables["held"]: jsonata(protocol.held_ms_expression(self.variables["lock"], when))}

    def build_mutex_release_after_error(self, rethrow: sfn.State) -> sfn.State:
        release_after_error = update_item_task(
            self,
            self.state_name("ReleaseAfterError"),
            self.table,
            protocol.release_arguments(lock_variable=self.variables["lock"], reentrant=True, item=self.kind.item),
            assign=self.held_assign(),
        )
        retry_transient(release_after_error)
        release_after_error.add_catch(
            rethrow,
            errors=[protocol.CONDITION_FAILED, protocol.QUERY_EVALUATION_ERROR],
            outputs=jsonata("$states.input"),
        )
        return release_after_error.next(rethrow)

    def _build_entry(self) -> sfn.Parallel:
        """The section's Parallel: entry record, bad keys, and the way back in for a section
        whose work refused to resume after a redrive."""
        v = self.variables
        section = _SectionState(
            self,
            "Section",
            section=self,
            state_name=self._construct_id,
            query_language=sfn.QueryLanguage.JSONATA,
            comment=f"Exclusive lock ({self.node.path})",
            outputs=jsonata("$states.result[0]"),
        ).branch(self._start)
        entry_failed = sfn.Choice.jsonata(self, "EntryFailed", state_name=self.state_name("EntryFailed?"))
        entry_failed.when(
            sfn.Condition.jsonata(jsonata(protocol.entry_error_is(protocol.ERROR_INVALID_KEY))),
            sfn.Fail.jsonata(
                self, "InvalidKey", state_name=self.state_name("InvalidKey"),
                error=protocol.ERROR_INVALID_KEY,
                cause=jsonata(protocol.message_of_expression(protocol.ERROR_INVALID_KEY)),
            ),
        )
        entry_failed.otherwise(
            sfn.Fail.jsonata(
                self, "Failed", state_name=self.state_name("Failed"),
                error=jsonata(protocol.rethrow_error_expression()),
                cause=jsonata(protocol.rethrow_cause_expression()),
            )
        )
        entry_failed.when(  # a task of the work refused to resume after a redrive
            sfn.Condition.jsonata(jsonata(protocol.resumed_again_expression(v["redrives"]))),
            section,
            assign={v["redrives"]: jsonata(protocol.redrives_after_restart_expression())},
            outputs=jsonata("$states.input.sectionInput"),
        )
        section.add_catch(
            entry_failed,
            errors=[protocol.QUERY_EVALUATION_ERROR, protocol.SIGNAL_RESUMED],
            outputs=jsonata("$merge([$states.errorOutput, {'sectionInput': $states.input}])"),
        )
        return section

    def _concurrent_reentry_problem(self, rendered_section: dict) -> str:
        """Re-entrancy is for sequential nesting only. A section nested in this one's work that
        could pass through on this section's lock (same table and namespace, neither a lock on
        records) must not run as concurrent children of one hold - iterations of a Map, or
        sections in two branches of a Parallel: each would pass through, and all would be
        inside at once with the same fence, which no fenced writer can tell apart. Such a shape
        is refused ("" if there is none)."""
        sections = {
            f"Exclusive lock ({c.node.path})": c
            for c in Stack.of(self).node.find_all() if isinstance(c, LockedSection) and c is not self
        }

        def could_pass_through(state: Mapping[str, Any]) -> "LockedSection | None":
            inner = sections.get(state.get("Comment")) if state.get("Type") == "Parallel" else None
            if (inner is not None and _same_table(inner.table, self.table)
                    and inner.key_namespace == self.key_namespace
                    and inner.lock.record_table is None and self.lock.record_table is None):
                return inner
            return None

        def found(states: Mapping[str, Any]) -> "LockedSection | None":
            """The first section in ``states`` (at any depth) that could pass through."""
            for state in states.values():
                inner = could_pass_through(state)
                if inner is not None:
                    return inner
                for branch in branches(state):
                    inner = found(branch.get("States", {}))
                    if inner is not None:
                        return inner
            return None

        def problem(states: Mapping[str, Any]) -> str:
            for name, state in states.items():
                children = branches(state)
                if state.get("Type") == "Map" and state.get("MaxConcurrency") != 1:
                    inner = found(children[0].get("States", {})) if children else None
                    if inner is not None:
                        return _concurrent_message(self, inner, f"the iterations of Map {name!r}")
                elif state.get("Type") == "Parallel" and len(children) > 1:
                    hits = [found(b.get("States", {})) for b in children]
                    hits = [h for h in hits if h is not None]
                    if len(hits) > 1:
                        return _concurrent_message(self, hits[0], f"the branches of Parallel {name!r}")
                for branch in children:
                    nested = problem(branch.get("States", {}))
                    if nested:
                        return nested
            return ""

        for branch in rendered_section.get("Branches", []):
            message = problem(branch.get("States", {}))
            if message:
                return message
        return ""

    def _assign_work_done(self, rendered_section: dict, grace_ms: int) -> None:
        """The protected work, when it succeeds, assigns ``<lock_variable>Done``
        (``lock_protocol.work_done_expression``: now + the stop grace, and the redrive generation
        it ended in), which a release resumed by a redrive reads to tell its own earlier write
        from a takeover. In the work's own state (the lock's Parallel, or the user's lone task):
        no state transition more."""
        (branch,) = rendered_section["Branches"]
        work = branch["States"][self.protected.state_id]
        assign = work.setdefault("Assign", {})
        if not isinstance(assign, dict) or self.variables["done"] in assign:
            raise ValueError(
                f"`protected` must leave its Assign an object without {self.variables['done']!r} (the lock "
                f"assigns it), got: {assign!r}"
            )
        assign[self.variables["done"]] = jsonata(protocol.work_done_expression(grace_ms))

    def _guard_work(self, rendered_section: dict) -> None:
        """Make every task of the protected work check, before it runs, that this section's
        acquisition belongs to the execution's current redrive generation
        (``lock_protocol.resumed_guard_expression``): a redrive resumes a branch at its
        unsuccessful step, past the acquire. The lock's own states (this section's and nested
        sections') are owner-conditioned writes and reads, safe at any time, and stay as they are;
        a nested section's work gets this guard on top of its own."""
        lock_states = set()
        for construct in Stack.of(self).node.find_all():
            if isinstance(construct, LockedSection):
                lock_states |= construct._state_names
        guard = protocol.resumed_guard_expression(self.lock_variable)
        for name, state in work_tasks(rendered_section, lock_states):
            guard_task(name, state, guard)

    # -- render time --------------------------------------------------------------------

    def _nesting_problem(self, enclosing: Sequence["LockedSection"]) -> str:
        for outer in enclosing:
            clash = set(self.variables.values()) & set(outer.variables.values())
            if clash:
                return (
                    f"`lock_variable` must differ from that of the enclosing section "
                    f"{outer.node.path!r} (an inner scope may not assign an outer scope's "
                    f"variable), got: {self.lock_variable!r} (clashing: {sorted(clash)})"
                )
        return ""

    def _entry_expression(self, enclosing: Sequence["LockedSection"], grace_ms: int) -> str:
        same_table = [s for s in enclosing if _same_table(s.table, self.table)]
        return protocol.section_entry_expression(
            key_expression_=self._key_expression,
            enclosing_lock_variables=[s.lock_variable for s in reversed(same_table)],
            grace_ms=grace_ms,
            key_field=self.kind.key_field,
            holds_same_lock=self.kind.holds_same_lock,
            extra_fields=self.kind.entry_fields([s.lock_variable for s in reversed(same_table)]),
        )

    def stop_grace_ms(self, rendered_section: Any = None) -> int:
        """The stop grace in ms: ``stop_grace`` if given, else derived from the protected
        work as rendered (branches of Parallel and Map states are only complete then)."""
        if self._stop_grace is not None:
            return prop_types.concrete_ms("stop_grace", self._stop_grace)
        if rendered_section is None:
            raise ValueError("`stop_grace` is derived when the state machine is rendered")
        work = [s for s in task_states(rendered_section) if not is_lock_state(s)]
        return int(derive_stop_grace(self, work).to_milliseconds())

    # -- recovery -----------------------------------------------------------------------

    def grant_liveness_check(self, state_machine: sfn.IStateMachine, *holders: str) -> None:
        """Let ``state_machine`` (which runs this section) describe the executions of the
        state machines named ``holders`` - the only IAM the liveness check needs. A separate
        policy, so a state machine may name itself without a dependency cycle."""
        if not self.liveness_check_every or not holders or state_machine.role is None or not self.kind.holds:
            return  # (a rate limit holds nothing: its waiters never ask about a holder)
        stack = Stack.of(self)
        iam.Policy(
            self,
            f"LivenessCheck{len(self._liveness_grants)}",
            roles=[state_machine.role],
            statements=[
                iam.PolicyStatement(actions=["states:DescribeExecution"], resources=executions_of(stack, holders))
            ],
        )
        self._liveness_grants.append(holders)

    def recover_stale_holders(
        self,
        state_machine: sfn.StateMachine,
        *,
        shares_lock_with: Sequence[sfn.IStateMachine] = (),
        logging: bool = True,
    ) -> LockJanitor:
        """Recover the locks of executions of ``state_machine`` that end without releasing:
        create a :class:`LockJanitor` for it and grant the liveness check. One line::

            section.recover_stale_holders(state_machine)

        :param shares_lock_with: other state machines whose executions may hold this lock
            (the liveness check may describe them). Default: none.

        A ``lease`` shorter than the longest run of ``state_machine`` (its timeout; without
        one, a year for STANDARD) gets a synth warning saying what it costs.
        """
        run_s, run = lease_check.machine_max_run(state_machine)
        lease_check.warn_if_shorter(self, lease_s=self._lease_ms / 1000, run_s=run_s, run=run)
        names = [state_machine.state_machine_name] + [m.state_machine_name for m in shares_lock_with]
        self.grant_liveness_check(state_machine, *names)
        self._janitor = LockJanitor(
            self, "Janitor", table=self.table, watched=[state_machine], logging=logging, lock=self.lock,
            detect_cancellation=self.detect_cancellation,
        )
        return self._janitor

    @property
    def janitor(self) -> Optional[LockJanitor]:
        """The janitor :meth:`recover_stale_holders` created (``None`` before, or without it):
        ``LockMonitoring(state_machine=..., sections=[...])`` reads it."""
        return self._janitor

    @property
    def start_state(self) -> sfn.State:
        return self.section_state

    @property
    def end_states(self) -> List[sfn.INextable]:
        return [self.section_state]

def _same_table(a: dynamodb.ITable, b: dynamodb.ITable) -> bool:
    if a is b:
        return True
    return Stack.of(a).resolve(a.table_name) == Stack.of(b).resolve(b.table_name)

def _concurrent_message(outer: "LockedSection", inner: "LockedSection", where: str) -> str:
    return (
        f"a section nested in {outer.node.path!r} on the same table and `key_namespace` must not "
        f"run in {where}: concurrent children of one hold would all re-enter it at once "
        f"(re-entrancy is for sequential nesting), got: {inner.node.path!r} in {where}. Give the "
        f"inner section another `key_namespace`, or set the Map's max_concurrency to 1"
    )

@jsii.implements(IValidation)
class _NotInExpress:
    """What parks on a task token - a fair lock's waiters (but ``polling=True``), a read/write
    lock's (``Lock.shared`` / ``Lock.exclusive``), a hold's presence task
    (``detect_cancellation``) - cannot run in an EXPRESS state machine
    (https://docs.aws.amazon.com/step-functions/latest/dg/integrate-optimized.html: EXPRESS
    supports Request Response only): found at synth, in the definitions of the stack's EXPRESS
    state machines."""

    def __init__(self, section: "LockedSection") -> None:
        self._section = section

    def validate(self) -> List[str]:
        section = self._section
        stack = Stack.of(section)
        marker = f"Exclusive lock ({section.node.path})"
        for machine in stack.node.find_all():
            if (isinstance(machine, sfn.CfnStateMachine)
                    and stack.resolve(machine.state_machine_type) == "EXPRESS"
                    and marker in json.dumps(stack.resolve(machine.definition_string))):
                where = f"{section.node.path!r} in {machine.node.path!r}"
                if section._parks and section.lock.is_fair:
                    return [
                        "`lock` must be Lock.fair(key, polling=True) in an EXPRESS state machine (its "
                        f"waiters would park on a task token, which EXPRESS cannot), got: Lock.fair(key) for {where}"
                    ]
                if section._parks:
                    return [
                        f"`lock` must not be Lock.{section.lock.kind} in an EXPRESS state machine (its waiters "
                        f"park on a task token, which EXPRESS cannot; use a STANDARD machine, or Lock.mutex / "
                        f"Lock.fair(key, polling=True)), got: Lock.{section.lock.kind}(key) for {where}"
                    ]
                return [
                    f"`detect_cancellation` must be False for a section in an EXPRESS state machine "
                    f"(it cannot park on a task token), got: True for {where}"
                ]
        return []
