"""LockedSection (a fragment) and LockedWorkflow (a whole state machine) around any chainable.

The states come from :mod:`state_machines.lock_protocol`; this module only validates props,
wires those states together with the caller's work, and creates the AWS resources.
"""

from __future__ import annotations

import re
from typing import List, Optional, Sequence

from aws_cdk import (
    ArnFormat,
    Duration,
    Names,
    Stack,
    RemovalPolicy,
    aws_dynamodb as dynamodb,
    aws_events as events,
    aws_events_targets as targets,
    aws_iam as iam,
    aws_logs as logs,
    aws_sqs as sqs,
    aws_stepfunctions as sfn,
    aws_stepfunctions_tasks as tasks,
)
from constructs import Construct

from constructs_lib.dynamodb_tasks import attribute_value, retry_transient, update_item_props
from constructs_lib.janitor import LockJanitor
from constructs_lib.lock_table import LockTable
from state_machines import lock_protocol as protocol
from state_machines.lock_protocol import WaitPolicy, jsonata

#: Margin added to the state machine timeout to form the default lease.
LEASE_MARGIN = Duration.minutes(5)
#: Default state machine timeout of LockedWorkflow.
DEFAULT_TIMEOUT = Duration.hours(1)
#: Default longest time a run waits for a held lock.
DEFAULT_MAX_WAIT = Duration.minutes(15)
#: Default: a waiter asks whether the holder still runs on every this-many-th round of polls.
DEFAULT_LIVENESS_CHECK_EVERY = 2
#: Express workflows cannot run longer than this.
EXPRESS_MAX_DURATION = Duration.minutes(5)

_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,60}")
_NAMESPACE = re.compile(r"[A-Za-z0-9_.:/=+@-]{0,64}")


def _seconds(duration: Duration) -> Optional[float]:
    """The duration in seconds, or None while it is an unresolved token."""
    return None if duration.is_unresolved() else duration.to_milliseconds() / 1000


def _concrete_ms(name: str, duration: Duration) -> int:
    """Milliseconds of a duration that ends up inside a JSONata expression (no tokens)."""
    if duration.is_unresolved():
        raise ValueError(f"`{name}` must be a concrete duration, got: a token ({duration.to_string()})")
    return int(duration.to_milliseconds())


def _validate_wait_policy(policy: WaitPolicy) -> None:
    if not isinstance(policy.first_interval, int) or policy.first_interval < 1:
        raise ValueError(
            "`wait_policy.first_interval` must be a whole number of seconds >= 1, "
            f"got: {policy.first_interval!r}"
        )
    if not isinstance(policy.max_interval, int) or policy.max_interval < policy.first_interval:
        raise ValueError(
            "`wait_policy.max_interval` must be a whole number of seconds >= first_interval "
            f"({policy.first_interval}), got: {policy.max_interval!r}"
        )
    if not isinstance(policy.retries_per_round, int) or not 0 <= policy.retries_per_round <= 20:
        raise ValueError(
            "`wait_policy.retries_per_round` must be a whole number from 0 to 20, "
            f"got: {policy.retries_per_round!r}"
        )
    if not 1.0 <= float(policy.backoff_rate) <= 10.0:
        raise ValueError(
            f"`wait_policy.backoff_rate` must be between 1.0 and 10.0, got: {policy.backoff_rate!r}"
        )


class LockedSection(sfn.StateMachineFragment):
    """A fragment that runs ``protected`` while holding an exclusive lock on a DynamoDB item.

    States (prefixed with this construct's id)::

        Acquire --held--> Held? --waited max_wait--> Timeout (fails Lock.Timeout)
           ^                 \\--> Wait --------------------------^
           |--ok--> Protected --> Release --condition failed--> Lost (fails Lock.Lost)
           |            \\--any error--> Release after error --> Rethrow (original Error/Cause)
           \\--bad key--> InvalidKey (fails Lock.InvalidKey, no DynamoDB call made)

    The protected work reads the lock as ``$lock`` (or ``$<lock_variable>``): ``key``,
    ``owner`` (the execution ARN), ``fence``, ``acquiredAt``, ``expiresAt`` (epoch ms).
    Its input is the section's input; the section's output is the work's output.

    The lock states are CDK DynamoDB tasks, so any state machine built from the fragment
    gets ``dynamodb:UpdateItem`` on the lock table, and nothing more, in its role.

    :param lock_key: JSONata template whose value is the resource to serialize on, e.g.
        ``"{% $states.input.detail.customerId %}"``. At run time it must be a non-empty
        string of at most 500 characters, else the section fails with ``Lock.InvalidKey``
        before any DynamoDB call.
    :param protected: the work to run under the lock (any ``IChainable``). A single task
        state with no Catch of its own gets the lock's Catch directly (2 extra state
        transitions); anything else is wrapped in a one-branch Parallel (3 extra).
    :param table: the lock table (partition key ``pk``, string).
    :param lease: how long an acquisition stays valid if never released. Set it longer than
        the longest time the section can run; a shorter lease trades safety (another run
        may take over a live holder, whose late writes only its fence can reject) for
        faster recovery from crashed holders.
    :param key_namespace: prefix of the stored key, ``<namespace>#<key>``; share it with any
        ``LockClient`` taking part in the same lock. Default: ``""`` (the key as is).
    :param max_wait: longest time to wait for a held lock before failing with
        ``Lock.Timeout``; ``Duration.seconds(0)`` fails at once. Default: 15 minutes.
    :param wait_policy: how to poll a held lock. Default: ``WaitPolicy()`` - first wait 2 s,
        backoff 1.5, at most 5 s between attempts, jitter on, 8 retries per round.
    :param lock_variable: name of the variable holding the lock (the wait bookkeeping uses
        ``<name>Wait`` and ``<name>Holder``). Give nested sections different names.
        Default: ``"lock"``.
    :param holder_state_machine_names: names of the Standard state machines whose executions
        may hold this lock. A waiter may ask Step Functions whether such a holder still runs
        (``states:DescribeExecution``, scoped to these machines' executions) and take the lock
        over from one that ended. Default: ``()`` - no liveness check.
    :param liveness_check_every: check the holder on every this-many-th round of polls;
        ``0`` turns the check off. Default: ``2``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        lock_key: str,
        protected: sfn.IChainable,
        table: dynamodb.ITable,
        lease: Duration,
        key_namespace: str = "",
        max_wait: Duration = DEFAULT_MAX_WAIT,
        wait_policy: Optional[WaitPolicy] = None,
        lock_variable: str = "lock",
        holder_state_machine_names: Sequence[str] = (),
        liveness_check_every: int = DEFAULT_LIVENESS_CHECK_EVERY,
    ) -> None:
        super().__init__(scope, construct_id)
        wait_policy = wait_policy or WaitPolicy()
        if not isinstance(liveness_check_every, int) or liveness_check_every < 0:
            raise ValueError(
                "`liveness_check_every` must be a whole number of rounds >= 0 (0 turns the check "
                f"off), got: {liveness_check_every!r}"
            )
        key_jsonata = protocol.key_expression(protocol.unwrap_jsonata(lock_key), key_namespace)
        if not _NAMESPACE.fullmatch(key_namespace):
            raise ValueError(
                "`key_namespace` must be at most 64 letters, digits or _.:/=+@- characters, "
                f"got: {key_namespace!r}"
            )
        if not _VARIABLE_NAME.fullmatch(lock_variable) or lock_variable == "states":
            raise ValueError(
                "`lock_variable` must be a JSONata variable name (a letter or _, then letters, "
                f"digits or _, not 'states'), got: {lock_variable!r}"
            )
        lease_ms = _concrete_ms("lease", lease)
        if lease_ms < 1000:
            raise ValueError(f"`lease` must be at least 1 second, got: {lease_ms / 1000} s")
        _validate_wait_policy(wait_policy)

        self.table = table
        self.lock_variable = lock_variable
        self.max_wait = max_wait
        self.wait_policy = wait_policy
        wait_variable = f"{lock_variable}Wait"
        max_wait_ms = _concrete_ms("max_wait", max_wait)

        def name(suffix: str) -> str:
            return f"{construct_id}.{suffix}"

        # Acquire: validates the key, then one conditional UpdateItem.
        self.acquire = _update_item(
            self,
            name("Acquire"),
            table,
            protocol.acquire_arguments(
                key_jsonata=key_jsonata,
                lease_ms=lease_ms,
                stale_owner_jsonata=protocol.stale_owner_expression(wait_variable),
            ),
            assign={
                lock_variable: jsonata(protocol.lock_variable_expression()),
                wait_variable: jsonata("null"),
            },
        )
        retry_transient(self.acquire)
        invalid_key = sfn.Fail.jsonata(
            self,
            "InvalidKey",
            state_name=name("InvalidKey"),
            error=protocol.ERROR_INVALID_KEY,
            cause=jsonata("$states.input.Cause"),
        )
        self.acquire.add_catch(invalid_key, errors=[protocol.QUERY_EVALUATION_ERROR])

        # Held: wait (bounded by max_wait) and try again, or fail with Lock.Timeout.
        timeout = sfn.Fail.jsonata(
            self,
            "Timeout",
            state_name=name("Timeout"),
            error=protocol.ERROR_TIMEOUT,
            cause=f"the lock was held by another run for longer than max_wait ({max_wait_ms} ms)",
        )
        if max_wait_ms == 0:
            self.acquire.add_catch(timeout, errors=[protocol.CONDITION_FAILED])
        else:
            retries = wait_policy.retries_for(max_wait_ms / 1000)
            if retries:  # fast polls: the acquire retries the refused write itself
                self.acquire.add_retry(
                    errors=[protocol.CONDITION_FAILED],
                    interval=Duration.seconds(wait_policy.first_interval),
                    backoff_rate=wait_policy.backoff_rate,
                    max_delay=Duration.seconds(wait_policy.max_interval),
                    max_attempts=retries,
                    jitter_strategy=sfn.JitterType.FULL if wait_policy.jitter else sfn.JitterType.NONE,
                )
            wait = sfn.CustomState(
                self,
                name("Wait"),
                state_json={
                    "Type": "Wait",
                    "QueryLanguage": "JSONata",
                    "Seconds": jsonata(
                        protocol.wait_seconds_expression(wait_policy, wait_variable, max_wait_ms)
                    ),
                },
            )
            held = sfn.Choice.jsonata(self, "Held", state_name=name("Held?"))
            held.when(
                sfn.Condition.jsonata(
                    jsonata(protocol.waited_enough_expression(wait_variable, max_wait_ms))
                ),
                timeout,
            )
            if liveness_check_every and holder_state_machine_names:
                held.when(
                    sfn.Condition.jsonata(
                        jsonata(protocol.liveness_due_expression(wait_variable, liveness_check_every))
                    ),
                    self._liveness_check(
                        name, key_jsonata, wait_variable, holder_state_machine_names, wait
                    ),
                )
            held.otherwise(wait.next(self.acquire))
            self.acquire.add_catch(
                held,
                errors=[protocol.CONDITION_FAILED],
                assign={wait_variable: jsonata(protocol.wait_bookkeeping_expression(wait_variable))},
                outputs=jsonata("$states.input"),
            )

        # Release on success; a failed condition means the lock was taken over meanwhile.
        self.release = _update_item(
            self, name("Release"), table, protocol.release_arguments(lock_variable=lock_variable)
        )
        retry_transient(self.release)
        lost = sfn.Fail.jsonata(
            self,
            "Lost",
            state_name=name("Lost"),
            error=protocol.ERROR_LOST,
            cause=jsonata(
                f"'lock ' & ${lock_variable}.key & ' (fence ' & $string(${lock_variable}.fence)"
                " & ') was taken over by another holder before it was released'"
            ),
        )
        self.release.add_catch(lost, errors=[protocol.CONDITION_FAILED])

        # Every error of the work: release, then fail with the original Error and Cause.
        release_after_error = _update_item(
            self,
            name("ReleaseAfterError"),
            table,
            protocol.release_arguments(lock_variable=lock_variable),
        )
        retry_transient(release_after_error)
        rethrow = sfn.Fail.jsonata(
            self,
            "Rethrow",
            state_name=name("Rethrow"),
            error=jsonata("$states.input.Error"),
            cause=jsonata("$states.input.Cause"),
        )
        release_after_error.add_catch(
            rethrow, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input")
        )
        release_after_error.next(rethrow)

        self.protected = _catching(self, protected, name("Protected"))
        self.protected.add_catch(release_after_error, errors=["States.ALL"])
        self.acquire.next(self.protected).next(self.release)

    def _liveness_check(
        self,
        name,
        key_jsonata: str,
        wait_variable: str,
        holder_state_machine_names: Sequence[str],
        wait: sfn.State,
    ) -> sfn.IChainable:
        """Inspect the lock; if its holder is an execution that no longer runs, mark it stale.

        The next acquire may then take the lock over, conditioned on that exact owner.
        """
        holder_variable = f"{self.lock_variable}Holder"
        inspect = tasks.DynamoGetItem.jsonata(
            self,
            name("Inspect"),
            table=self.table,
            key={protocol.KEY_ATTRIBUTE: attribute_value({"S": jsonata(key_jsonata)})},
            consistent_read=True,
            assign={holder_variable: jsonata(protocol.holder_expression())},
            outputs=jsonata("$states.input"),
        )
        retry_transient(inspect)
        inspect.add_catch(wait, errors=["States.ALL"], outputs=jsonata("$states.input"))
        stack = Stack.of(self)
        describe = tasks.CallAwsService.jsonata(
            self,
            name("DescribeHolder"),
            service="sfn",
            action="describeExecution",
            iam_action="states:DescribeExecution",
            parameters={"ExecutionArn": jsonata("$" + holder_variable)},
            iam_resources=[
                stack.format_arn(
                    service="states",
                    resource="execution",
                    resource_name=f"{machine}:*",
                    arn_format=ArnFormat.COLON_RESOURCE_NAME,
                )
                for machine in holder_state_machine_names
            ],
            assign={
                wait_variable: jsonata(
                    protocol.after_liveness_check_expression(wait_variable, holder_variable)
                )
            },
            outputs=jsonata("$states.input"),
        )
        describe.add_catch(wait, errors=["States.ALL"], outputs=jsonata("$states.input"))
        describe.next(self.acquire)
        is_execution = sfn.Choice.jsonata(self, "HolderIsExecution", state_name=name("HolderIsExecution?"))
        is_execution.when(
            sfn.Condition.jsonata(jsonata(protocol.holder_is_execution_expression(holder_variable))),
            describe,
        ).otherwise(wait)
        return inspect.next(is_execution)

    @property
    def start_state(self) -> sfn.State:
        return self.acquire

    @property
    def end_states(self) -> List[sfn.INextable]:
        return [self.release]


def _update_item(
    scope: Construct,
    state_name: str,
    table: dynamodb.ITable,
    arguments: dict,
    *,
    assign: Optional[dict] = None,
) -> tasks.DynamoUpdateItem:
    """An optimized-integration UpdateItem state from protocol-built arguments.

    Its output is its input: the lock states are transparent to the caller's data.
    """
    return tasks.DynamoUpdateItem.jsonata(
        scope,
        state_name,
        table=table,
        **update_item_props(arguments),
        assign=assign,
        outputs=jsonata("$states.input"),
    )


def _catching(scope: Construct, work: sfn.IChainable, state_name: str) -> sfn.State:
    """A state that runs ``work`` and can carry the lock's Catch.

    A lone task state without a Catch or a successor of its own carries it directly (the
    cheapest form: no extra state); anything else runs in a one-branch Parallel, the only
    way to Catch every error of an arbitrary chain.
    """
    if isinstance(work, sfn.TaskStateBase):
        rendered = work.to_state_json()
        if not rendered.get("Catch") and "Next" not in rendered:
            return work
    return sfn.Parallel.jsonata(
        scope, "Protected", state_name=state_name, outputs=jsonata("$states.result[0]")
    ).branch(work)


class LockedWorkflow(Construct):
    """A Step Functions state machine that runs ``protected`` under an exclusive DynamoDB lock.

    ``Acquire (⟲ Wait) → protected work → Release``, with the work's errors released and
    re-raised, EventBridge triggers, a lock table (created, or the one given) and
    least-privilege IAM. See :class:`LockedSection` for the states and the ``$lock`` record.

    :param lock_key: JSONata template for the resource to serialize on, e.g.
        ``"{% $states.input.detail.customerId %}"``.
    :param protected: the work to run while holding the lock (any ``IChainable``).
    :param table: an existing lock table (string partition key ``pk``). Default: a new
        :class:`LockTable` is created (exposed as ``lock_table``).
    :param table_removal_policy: removal policy of the created table; only with no ``table``.
        Default: ``RemovalPolicy.RETAIN``.
    :param key_namespace: stored key prefix, ``<namespace>#<key>``. Default: ``""``.
    :param max_wait: longest wait for a held lock; 0 fails at once with ``Lock.Timeout``.
        Default: 15 minutes.
    :param wait_policy: polling of a held lock. Default: ``WaitPolicy()`` (2 s, x1.5, max 5 s,
        jitter, 8 retries per round).
    :param timeout: state machine timeout. Default: 1 hour (STANDARD), 5 minutes (EXPRESS).
    :param lease: lease of an acquisition. Default: ``timeout`` + 5 minutes, so a live
        execution can never outlive its lease. Shorter leases are allowed (see LockedSection).
    :param state_machine_type: ``STANDARD`` or ``EXPRESS``. Default: ``STANDARD``.
    :param state_machine_name: physical name. Default: generated.
    :param logging: send execution logs (level ALL, with execution data) to a new log group.
        Default: ``True``.
    :param tracing: X-Ray tracing. Default: ``True``.
    :param lock_variable: variable name of the lock record. Default: ``"lock"``.
    :param janitor: create a :class:`LockJanitor` that releases the locks of executions that
        were stopped, timed out or failed without releasing (STANDARD only: Express workflows
        emit no status events). Default: ``True``.
    :param liveness_check_every: a waiter checks whether the holder still runs on every
        this-many-th round of polls; ``0`` turns it off. Default: ``2``.
    :param shares_lock_with: other Standard state machines using the same lock table, whose
        executions waiters may check. Default: ``()``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        lock_key: str,
        protected: sfn.IChainable,
        table: Optional[dynamodb.ITable] = None,
        table_removal_policy: Optional[RemovalPolicy] = None,
        key_namespace: str = "",
        max_wait: Duration = DEFAULT_MAX_WAIT,
        wait_policy: Optional[WaitPolicy] = None,
        timeout: Optional[Duration] = None,
        lease: Optional[Duration] = None,
        state_machine_type: sfn.StateMachineType = sfn.StateMachineType.STANDARD,
        state_machine_name: Optional[str] = None,
        logging: bool = True,
        tracing: bool = True,
        lock_variable: str = "lock",
        janitor: bool = True,
        liveness_check_every: int = DEFAULT_LIVENESS_CHECK_EVERY,
        shares_lock_with: Sequence[sfn.IStateMachine] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        express = state_machine_type == sfn.StateMachineType.EXPRESS
        if table is not None and table_removal_policy is not None:
            raise ValueError(
                "`table_removal_policy` must be left unset when an existing `table` is given "
                f"(the construct does not own it), got: {table_removal_policy}"
            )
        timeout = timeout or (EXPRESS_MAX_DURATION if express else DEFAULT_TIMEOUT)
        timeout_s = _seconds(timeout)
        if timeout_s is not None:
            if timeout_s < 1:
                raise ValueError(f"`timeout` must be at least 1 second, got: {timeout_s} s")
            if express and timeout_s > EXPRESS_MAX_DURATION.to_seconds():
                raise ValueError(
                    f"`timeout` must be at most 5 minutes for EXPRESS state machines, got: {timeout_s} s"
                )
        max_wait_s = _concrete_ms("max_wait", max_wait) / 1000
        if timeout_s is not None and max_wait_s >= timeout_s:
            raise ValueError(
                f"`max_wait` must be shorter than `timeout` ({timeout_s} s), got: {max_wait_s} s"
            )
        policy = wait_policy or WaitPolicy()
        _validate_wait_policy(policy)
        if not express:
            events_needed = protocol.worst_case_wait_events(policy, max_wait_s)
            if events_needed > protocol.WAIT_LOOP_EVENT_BUDGET:
                raise ValueError(
                    f"`max_wait` must keep the wait loop under {protocol.WAIT_LOOP_EVENT_BUDGET} "
                    f"history events (of the {protocol.HISTORY_EVENT_LIMIT} a Standard execution "
                    f"may record), got: {max_wait_s} s, which can take {events_needed} events "
                    f"with wait_policy.max_interval={policy.max_interval} s; raise "
                    "wait_policy.max_interval (or first_interval) or lower max_wait"
                )
        if lease is None:
            if timeout_s is None:
                raise ValueError(
                    "`lease` must be given when `timeout` is a token (the default lease is "
                    "timeout + 5 minutes), got: None"
                )
            lease = Duration.millis(timeout.to_milliseconds() + LEASE_MARGIN.to_milliseconds())

        self.lock_table: Optional[LockTable] = None
        if table is None:
            self.lock_table = LockTable(
                self, "LockTable", removal_policy=table_removal_policy or RemovalPolicy.RETAIN
            )
            table = self.lock_table.table
        self.table = table

        # A name known before the state machine exists lets its own role describe its
        # executions (the liveness check) without a dependency cycle.
        state_machine_name = state_machine_name or Names.unique_resource_name(
            self, max_length=80, separator="-"
        )
        self.state_machine_name = state_machine_name
        holders = [state_machine_name] if not express else []
        holders += [m.state_machine_name for m in shares_lock_with]

        self.section = LockedSection(
            self,
            "Lock",
            lock_key=lock_key,
            protected=protected,
            table=table,
            lease=lease,
            key_namespace=key_namespace,
            max_wait=max_wait,
            wait_policy=policy,
            lock_variable=lock_variable,
            holder_state_machine_names=holders,
            liveness_check_every=liveness_check_every,
        )

        self.log_group: Optional[logs.LogGroup] = None
        log_options = None
        if logging:
            self.log_group = logs.LogGroup(
                self, "Logs", retention=logs.RetentionDays.ONE_MONTH,
                removal_policy=RemovalPolicy.DESTROY,
            )
            log_options = sfn.LogOptions(
                destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=True
            )
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            state_machine_name=state_machine_name,
            definition_body=sfn.DefinitionBody.from_chainable(self.section),
            query_language=sfn.QueryLanguage.JSONATA,
            state_machine_type=state_machine_type,
            timeout=timeout,
            logs=log_options,
            tracing_enabled=tracing,
        )
        self._dead_letter_queue: Optional[sqs.Queue] = None
        self.janitor: Optional[LockJanitor] = None
        if janitor and not express:  # Express executions emit no status-change events
            self.janitor = LockJanitor(
                self, "Janitor", table=table, watched=[self.state_machine], logging=logging
            )

    @property
    def dead_letter_queue(self) -> sqs.Queue:
        """SQS queue receiving trigger events that could not start an execution (created on first use)."""
        if self._dead_letter_queue is None:
            self._dead_letter_queue = sqs.Queue(
                self,
                "TriggerDeadLetters",
                retention_period=Duration.days(14),
                encryption=sqs.QueueEncryption.SQS_MANAGED,
                enforce_ssl=True,
            )
        return self._dead_letter_queue

    def trigger_from(
        self,
        rule: events.Rule,
        *,
        retry_attempts: int = 185,
        max_event_age: Duration = Duration.hours(24),
        input: Optional[events.RuleTargetInput] = None,
    ) -> None:
        """Start an execution for every event ``rule`` matches.

        :param retry_attempts: delivery retries. Default: 185 (EventBridge's maximum).
        :param max_event_age: give up on an event after this long. Default: 24 hours.
        :param input: what the execution receives. Default: the whole event.
        Undeliverable events go to :attr:`dead_letter_queue`.
        """
        if not 0 <= retry_attempts <= 185:
            raise ValueError(f"`retry_attempts` must be between 0 and 185, got: {retry_attempts}")
        age_s = _seconds(max_event_age)
        if age_s is not None and not 60 <= age_s <= 86400:
            raise ValueError(
                f"`max_event_age` must be between 60 seconds and 24 hours, got: {age_s} s"
            )
        rule.add_target(
            targets.SfnStateMachine(
                self.state_machine,
                input=input,
                retry_attempts=retry_attempts,
                max_event_age=max_event_age,
                dead_letter_queue=self.dead_letter_queue,
            )
        )

    def add_event_trigger(
        self,
        id: str,
        *,
        event_pattern: events.EventPattern,
        event_bus: Optional[events.IEventBus] = None,
        description: Optional[str] = None,
        retry_attempts: int = 185,
        max_event_age: Duration = Duration.hours(24),
    ) -> events.Rule:
        """Create a rule on ``event_bus`` (default: the account's default bus) that triggers this workflow."""
        rule = events.Rule(
            self, id, event_pattern=event_pattern, event_bus=event_bus, description=description
        )
        self.trigger_from(rule, retry_attempts=retry_attempts, max_event_age=max_event_age)
        return rule

    def grant_start_execution(self, grantee: iam.IGrantable) -> iam.Grant:
        """Allow ``grantee`` to start executions of the locked workflow."""
        return self.state_machine.grant_start_execution(grantee)
