"""LockedWorkflow: a whole state machine around any chainable, under a lock - the section,
its lock table, janitor, logs, monitoring and EventBridge triggers, with least-privilege IAM.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, Union

from aws_cdk import Duration, Names, RemovalPolicy
from aws_cdk import aws_cloudwatch as cloudwatch, aws_dynamodb as dynamodb, aws_events as events
from aws_cdk import aws_events_targets as targets, aws_iam as iam, aws_logs as logs, aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from locked_workflow.constructs_lib import lease_check, prop_types
from locked_workflow.constructs_lib.janitor import LockJanitor
from locked_workflow.constructs_lib.lock import A_LOCK, Lock
from locked_workflow.constructs_lib.lock_table import LockTable
from locked_workflow.constructs_lib.locked_section import DEFAULT_LIVENESS_CHECK_EVERY, DEFAULT_MAX_WAIT, LockedSection
from locked_workflow.constructs_lib.monitoring import LockMonitoring
from locked_workflow.constructs_lib.section_work import jsonpath_states
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines.lock_protocol import WaitPolicy

#: Margin added to the state machine timeout to form the default lease.
LEASE_MARGIN = Duration.minutes(5)
#: Default state machine timeout of LockedWorkflow.
DEFAULT_TIMEOUT = Duration.hours(1)
#: Express workflows cannot run longer than this.
EXPRESS_MAX_DURATION = Duration.minutes(5)


class LockedWorkflow(Construct):
    """A Step Functions state machine that runs ``protected`` under an exclusive DynamoDB lock.

    ``Acquire (⟲ Wait) → protected work → Release``, with the work's errors released and
    re-raised, EventBridge triggers, a lock table (created, or the one given) and
    least-privilege IAM. See :class:`LockedSection` for the states and the ``$lock`` record.

    :param lock: what to lock, and how: ``Lock.mutex(key)``, ``Lock.fair(key, ...)``,
        ``Lock.semaphore(key, limit=...)``, ``Lock.keys(keys)`` or ``Lock.on_record(table,
        key, ...)``, ``Lock.shared(key)`` / ``Lock.exclusive(key)`` (see
        :class:`~locked_workflow.constructs_lib.lock.Lock`). On EXPRESS a fair lock's waiters
        poll as the head of the queue (no task tokens there); the read/write lock is refused there.
    :param protected: the work to run while holding the lock (any ``IChainable``).
    :param table: an existing lock table (string partition key ``pk``; a ``LockTable`` or its
        ``table``). Default: a new :class:`LockTable` is created (exposed as ``lock_table``);
        none with ``Lock.on_record``, whose lock lives on the record table.
    :param table_removal_policy: removal policy of the created table; only with no ``table``.
        Default: ``RemovalPolicy.RETAIN``.
    :param key_namespace: stored key prefix, ``<namespace>#<key>``. Default: ``""``.
    :param max_wait: longest wait for a held lock; 0 fails at once with ``Lock.Timeout``.
        Default: 15 minutes, or half of ``timeout`` if that is shorter; with ``Lock.rate`` and
        the default ``timeout``, at most the longest wait its history budget allows (see
        :class:`LockedSection`).
    :param wait_policy: polling of a held lock. Default: ``WaitPolicy()`` (2 s, x1.5, max 5 s,
        jitter, 8 retries per round).
    :param timeout: state machine timeout. Default: 1 hour (STANDARD), 5 minutes (EXPRESS).
    :param lease: lease of an acquisition. Default: ``timeout`` + 5 minutes, so a live
        execution can never outlive its lease. Shorter leases are allowed (see LockedSection);
        one shorter than ``timeout`` gets a synth warning saying what it costs.
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
    :param stop_grace: how long a holder's lock stays held after its execution ended without
        releasing it (see :class:`LockedSection`; shorter than a Lambda task's longest run: a
        synth warning). Default: derived from the protected work's task timeouts.
    :param monitoring: metrics, alarms and a dashboard from the execution logs
        (:class:`~locked_workflow.constructs_lib.monitoring.LockMonitoring`; needs ``logging``): ``True``, a dict
        of its props, or ``False``. Default: ``False``.
    :param shares_lock_with: other Standard state machines using the same lock table, whose
        executions waiters may check. Default: ``()``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        lock: Lock,
        protected: sfn.IChainable,
        table: Optional[Union[dynamodb.ITable, "LockTable"]] = None,
        table_removal_policy: Optional[RemovalPolicy] = None,
        key_namespace: str = "",
        max_wait: Optional[Duration] = None,
        wait_policy: Optional[WaitPolicy] = None,
        timeout: Optional[Duration] = None,
        stop_grace: Optional[Duration] = None,
        lease: Optional[Duration] = None,
        state_machine_type: sfn.StateMachineType = sfn.StateMachineType.STANDARD,
        state_machine_name: Optional[str] = None,
        logging: bool = True,
        tracing: bool = True,
        lock_variable: str = "lock",
        janitor: bool = True,
        liveness_check_every: int = DEFAULT_LIVENESS_CHECK_EVERY,
        shares_lock_with: Sequence[sfn.IStateMachine] = (),
        monitoring: Union[bool, Mapping[str, Any]] = False,
    ) -> None:
        super().__init__(scope, construct_id)
        # (``protected`` is checked by the section; the tables and the policy are used here first)
        prop_types.chainable("protected", protected)
        jsonpath = jsonpath_states(protected, tasks_only=False)
        if jsonpath:  # (a JSONata state machine cannot hold a JSONPath state)
            raise ValueError(
                "`protected` must use JSONata in every state (the workflow's state machine is JSONata, "
                "which cannot hold JSONPath states: build them with the `.jsonata(...)` constructors, "
                "tasks.LambdaInvoke.jsonata(...), or query_language=sfn.QueryLanguage.JSONATA; for JSONPath "
                "states around the lock, put a LockedSection in your own JSONPath state machine), got: "
                f"JSONPath state{'s' if len(jsonpath) > 1 else ''} "
                f"{', '.join(map(repr, jsonpath))}"
            )
        prop_types.instance("lock", lock, Lock, A_LOCK, required=True)
        table = prop_types.table("table", table)
        on_records = lock.builder().lives_on_records  # no lock table: the lock lives on the records
        shares_lock_with = prop_types.state_machines("shares_lock_with", shares_lock_with)
        prop_types.instance("wait_policy", wait_policy, WaitPolicy, "a WaitPolicy")
        for name, value in (("logging", logging), ("tracing", tracing), ("janitor", janitor)):
            prop_types.boolean(name, value)
        monitoring_props = prop_types.flag_or_props("monitoring", monitoring, "LockMonitoring")
        express = state_machine_type == sfn.StateMachineType.EXPRESS

        if table is not None and table_removal_policy is not None:
            raise ValueError(
                "`table_removal_policy` must be left unset when an existing `table` is given "
                f"(the construct does not own it), got: {table_removal_policy}"
            )
        timeout = timeout or (EXPRESS_MAX_DURATION if express else DEFAULT_TIMEOUT)
        timeout_s = prop_types.seconds(timeout)
        if timeout_s is not None:
            if timeout_s < 1:
                raise ValueError(f"`timeout` must be at least 1 second, got: {timeout_s} s")
            if express and timeout_s > EXPRESS_MAX_DURATION.to_seconds():
                raise ValueError(
                    f"`timeout` must be at most 5 minutes for EXPRESS state machines, got: {timeout_s} s"
                )
        if max_wait is None:
            max_wait = DEFAULT_MAX_WAIT
            if timeout_s is not None and timeout_s / 2 < max_wait.to_seconds():
                max_wait = Duration.millis(int(timeout_s * 500))
        max_wait_s = prop_types.concrete_ms("max_wait", max_wait) / 1000
        if timeout_s is not None and max_wait_s >= timeout_s:
            raise ValueError(
                f"`max_wait` must be shorter than `timeout` ({timeout_s} s), got: {max_wait_s} s"
            )
        policy = wait_policy or WaitPolicy()
        if lease is None:
            if timeout_s is None:
                raise ValueError(
                    "`lease` must be given when `timeout` is a token (the default lease is "
                    "timeout + 5 minutes), got: None"
                )
            lease = Duration.millis(timeout.to_milliseconds() + LEASE_MARGIN.to_milliseconds())
        elif isinstance(lease, Duration) and not lease.is_unresolved():
            lease_check.warn_if_shorter(
                self, lease_s=lease.to_milliseconds() / 1000, run_s=timeout_s,
                run="`timeout`, the longest a run may last",
            )

        self.lock_table: Optional[LockTable] = None
        if on_records:
            if table is not None or table_removal_policy is not None:
                raise ValueError(
                    "`table` and `table_removal_policy` must be left unset with Lock.on_record (the "
                    f"lock lives on the records), got: table={table!r}, table_removal_policy={table_removal_policy}"
                )
        elif table is None:
            self.lock_table = LockTable(
                self, "LockTable", removal_policy=table_removal_policy or RemovalPolicy.RETAIN
            )
            table = self.lock_table.table
        self.table = lock.record_table if on_records else table

        # A name known before the state machine exists lets its own role describe its
        # executions (the liveness check) without a dependency cycle.
        state_machine_name = state_machine_name or Names.unique_resource_name(
            self, max_length=80, separator="-"
        )
        self.state_machine_name = state_machine_name
        self.section = LockedSection(
            self,
            "Lock",
            lock=lock.for_express() if express else lock,
            protected=protected,
            table=table,
            lease=lease,
            key_namespace=key_namespace,
            max_wait=max_wait,
            wait_policy=policy,
            stop_grace=stop_grace,
            lock_variable=lock_variable,
            liveness_check_every=0 if express else liveness_check_every,
            history_event_budget=None if express else protocol.WAIT_LOOP_EVENT_BUDGET,
            # the section is the whole state machine: nothing can cancel its branch alone
            detect_cancellation=False,
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
        if not express:  # Express executions can be neither described nor watched
            holders = [state_machine_name] + [m.state_machine_name for m in shares_lock_with]
            self.section.grant_liveness_check(self.state_machine, *holders)
            if janitor and self.section.kind.holds:  # (a rate limit holds nothing to recover)
                self.janitor = LockJanitor(
                    self, "Janitor", table=self.table, watched=[self.state_machine], logging=logging,
                    lock=self.section.lock, detect_cancellation=self.section.detect_cancellation,
                )

        self.monitoring: Optional[LockMonitoring] = None
        if monitoring_props is not None:
            self.monitoring = LockMonitoring(self, "Monitoring", workflow=self, **monitoring_props)

    def _monitoring(self) -> LockMonitoring:
        if self.monitoring is None:
            raise ValueError("`monitoring` must be enabled for lock metrics, got: monitoring=False")
        return self.monitoring

    def metric_wait_time(self, **props: Any) -> cloudwatch.Metric:
        """Time from entering the section to holding the lock (ms)."""
        return self._monitoring().metric_wait_time(**props)

    def metric_hold_time(self, **props: Any) -> cloudwatch.Metric:
        """Time from the acquire to the release (ms)."""
        return self._monitoring().metric_hold_time(**props)

    def metric_timeouts(self, **props: Any) -> cloudwatch.Metric:
        """Runs that failed with ``Lock.Timeout``."""
        return self._monitoring().metric_timeouts(**props)

    def metric_lost(self, **props: Any) -> cloudwatch.Metric:
        """Runs that failed with ``Lock.Lost``."""
        return self._monitoring().metric_lost(**props)

    def metric_liveness_checks(self, **props: Any) -> cloudwatch.Metric:
        return self._monitoring().metric_liveness_checks(**props)

    def metric_liveness_takeovers(self, **props: Any) -> cloudwatch.Metric:
        """Liveness checks that found the holder ended (its lock is then taken over)."""
        return self._monitoring().metric_liveness_takeovers(**props)

    def metric_janitor_retires(self, **props: Any) -> cloudwatch.Metric:
        """Locks the janitor retired."""
        return self._monitoring().metric_janitor_retires(**props)

    def metric_timeout_rate(self, **props: Any) -> cloudwatch.MathExpression:
        """``Lock.Timeout`` failures per execution started."""
        return self._monitoring().metric_timeout_rate(**props)

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
        age_s = prop_types.seconds(max_event_age)
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
