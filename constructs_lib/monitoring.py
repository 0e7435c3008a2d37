"""LockMonitoring: metrics, alarms and a dashboard of a LockedWorkflow - or of a state machine built
around LockedSections - from its execution logs.

Nothing is added to the state machine - no state, no transition, no write. Every number comes
from the execution log lines Step Functions already writes (level ALL, with execution data),
and each from ONE line, because metric filters and subscription filters see lines one at a
time:

===================  ==============================================================  =========
metric               the line                                                        how
===================  ==============================================================  =========
Timeouts             ``FailStateEntered`` of a Fail state whose ``Error`` is         filter
                     ``Lock.Timeout`` (every section's ``<id>.Timeout``)
Lost                 ``FailStateEntered`` of a Fail state whose ``Error`` is         filter
                     ``Lock.Lost`` (every section's ``<id>.Lost``)
Superseded           ``FailStateEntered`` of a Fail state whose ``Error`` is         filter
                     ``Lock.Superseded`` (a coalescing fair lock's,
                     ``QueueLimit.keep_newest``; only where the machine has one)
QueueFull            ``FailStateEntered`` of a Fail state whose ``Error`` is         filter
                     ``Lock.QueueFull`` (``QueueLimit.keep_oldest``; likewise)
LivenessChecks       ``TaskStateEntered`` of a ``describeExecution`` task            filter
LivenessTakeovers    ``TaskStateExited`` of a section's liveness check whose wait    filter
                     record now names a stale holder (an ended execution, grace over)
JanitorRetires       published by the janitor function itself (locks it retired)      EMF
WaitTime (ms)        the exit of a state that assigns a lock record with             Lambda
                     ``acquiredAt`` and ``requestedAt`` (the section's entry)
HoldTime (ms)        the exit of a release, which assigns ``<lock variable>Held``    Lambda
                     (``$millis()`` - ``acquiredAt``: ``lock_protocol.held_ms_expression``)
===================  ==============================================================  =========

Every section counts - the workflow's own and every section nested in its work, named by
their construct ids, of every kind - because each kind records the role of every lock state
it builds (:mod:`~locked_workflow.constructs_lib.section_record`), and the monitoring reads the
records of the monitored sections and of those nested in them, finding each state by name in
the synthesized definition: a nested section that fails through ``Inner.Timeout`` is counted
there once, not again where the enclosing section re-raises it (``Lock.Rethrow``).

Every kind's release - the mutex's, the semaphore's, the fair lock's handoff, the multi-key
transaction, the record's update - assigns the hold's length when it succeeds (a lost lock's
release does not: it fails ``Lock.Lost``), after an error of the work too; a re-entered
section held nothing and assigns nothing.

Counts are CloudWatch Logs metric filters (no code in the path of the ``Lost`` alarm); the
two durations need a subtraction, which a filter cannot do, so a subscription filter sends
those lines to a small Lambda function (``lambdas/lock_metrics``) that publishes them in
embedded metric format. The janitor is a Lambda function too: it publishes ``JanitorRetires``
(each acquisition once, a duplicate event counts nothing) in this namespace, which the
monitoring sets on it. A janitor that could not recover a lock leaves the event in its
dead-letter queue: ``metric_janitor_failures`` and the ``janitor_failed_alarm``.

Metrics live in the namespace ``<namespace>/<state machine name>`` (default
``LockedWorkflow/<name>``) without dimensions: a metric filter cannot attach a constant
dimension, so the namespace is what tells two workflows' metrics apart - for all seven.
"""

from __future__ import annotations

import re
from typing import Any, Optional, Sequence

from aws_cdk import (
    Duration,
    aws_cloudwatch as cloudwatch,
    aws_lambda as lambda_,
    aws_logs as logs,
    aws_logs_destinations as destinations,
    aws_stepfunctions as sfn,
)
from constructs import Construct

from locked_workflow.constructs_lib import prop_types
from locked_workflow.constructs_lib.monitoring_dashboard import lock_dashboard
from locked_workflow.constructs_lib.monitoring_filters import (
    MAX_PATTERN_LENGTH,
    NO_EVENT,
    field_is,
    state_filter,
    states_filter,
)
from locked_workflow.constructs_lib.monitoring_function import metrics_function
from locked_workflow.constructs_lib.monitoring_sources import monitored_state_machine, monitored_workflow
from locked_workflow.constructs_lib.monitoring_states import LockStates
from locked_workflow.state_machines import errors

DEFAULT_NAMESPACE = "LockedWorkflow"
DEFAULT_TIMEOUT_RATE_THRESHOLD = 0.05
DEFAULT_ALARM_PERIOD = Duration.minutes(5)
#: Default period of the ``metric_*`` methods.
DEFAULT_METRIC_PERIOD = Duration.minutes(5)

_NAMESPACE = re.compile(r"[A-Za-z0-9_.\-/#:]{1,200}")
_DASHBOARD_NAME = re.compile(r"[A-Za-z0-9_\-]{1,255}")

#: Metric names (in the workflow's namespace).
WAIT_TIME = "WaitTime"
HOLD_TIME = "HoldTime"
TIMEOUTS = "Timeouts"
LOST = "Lost"
SUPERSEDED = "Superseded"
QUEUE_FULL = "QueueFull"
LIVENESS_CHECKS = "LivenessChecks"
LIVENESS_TAKEOVERS = "LivenessTakeovers"
JANITOR_RETIRES = "JanitorRetires"


class LockMonitoring(Construct):
    """Metrics, alarms and a dashboard of a :class:`~locked_workflow.constructs_lib.LockedWorkflow`,
    or of a state machine you built around :class:`~locked_workflow.constructs_lib.LockedSection` s.

    ::

        workflow = LockedWorkflow(self, "Orders", lock=Lock.mutex(...), protected=...)
        monitoring = LockMonitoring(self, "OrdersLock", workflow=workflow)
        monitoring.metric_wait_time(statistic="p99")      # cloudwatch.Metric

        # or: a bigger state machine with a section in it (logging level ALL, with execution data)
        section.recover_stale_holders(machine)            # first: its janitor is read here
        LockMonitoring(self, "OrdersLock", state_machine=machine, sections=[section])

    Give exactly one of ``workflow`` and ``state_machine``. The state machine must log its
    executions at level ALL with execution data (``LockedWorkflow(logging=True)``, the default;
    a hand-built one: ``logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ALL,
    include_execution_data=True)``). Metrics without events (e.g. no janitor, or an Express
    workflow's liveness checks) have no data.

    :param workflow: the locked workflow; read through its ``state_machine``,
        ``state_machine_name``, ``log_group``, ``section`` and ``janitor`` attributes.
        Default: none (then ``state_machine``).
    :param state_machine: a state machine of this app holding ``sections``; its log group is
        read from its logging configuration, its name (the namespace's end) may be a token.
        Every lock state in its definition counts, whatever section built it. Default: none.
    :param sections: with ``state_machine``, its sections (at least one); the janitors their
        ``recover_stale_holders`` created publish ``JanitorRetires`` here and have the janitor
        alarm. Default: none.
    :param namespace: prefix of the metrics' namespace ``<namespace>/<state machine name>``.
        Default: ``"LockedWorkflow"``.
    :param alarm_lost: alarm when any run's lock was taken over before it released it
        (``Lock.Lost`` > 0 in an ``alarm_period``). Default: ``True``.
    :param timeout_rate_threshold: alarm when ``Lock.Timeout`` failures divided by executions
        started exceed this share (0 to 1) in an ``alarm_period``; ``None``: no alarm.
        Default: ``0.05``.
    :param alarm_period: period of both alarms (whole minutes). Default: 5 minutes.
    :param alarm_evaluation_periods: periods over the threshold before an alarm fires.
        Default: ``1``.
    :param alarm_janitor_failures: alarm when the workflow's janitor could not recover the
        locks of an ended execution (an event in its dead-letter queue: that lock stays held
        until its lease ends); no alarm without a janitor. Default: ``True``.
    :param alarm_actions: actions of both alarms (e.g. an SNS topic's). Default: none.
    :param dashboard: create a CloudWatch dashboard of every metric and alarm.
        Default: ``True``.
    :param dashboard_name: its name (letters, digits, ``-`` and ``_``). Default: generated.
    :param powertools_layer: the Powertools for AWS Lambda (Python) v3 layer of the metrics
        function (python3.13). Default: the published layer, version 27, in the stack's region.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        workflow: Any = None,
        state_machine: Optional[sfn.StateMachine] = None,
        sections: Sequence[Any] = (),
        namespace: str = DEFAULT_NAMESPACE,
        alarm_lost: bool = True,
        timeout_rate_threshold: Optional[float] = DEFAULT_TIMEOUT_RATE_THRESHOLD,
        alarm_period: Duration = DEFAULT_ALARM_PERIOD,
        alarm_evaluation_periods: int = 1,
        alarm_janitor_failures: bool = True,
        alarm_actions: Sequence[cloudwatch.IAlarmAction] = (),
        dashboard: bool = True,
        dashboard_name: Optional[str] = None,
        powertools_layer: Optional[lambda_.ILayerVersion] = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if workflow is not None and state_machine is not None:
            raise ValueError("`workflow` or `state_machine` must be given (exactly one), got: both")
        monitored = (monitored_workflow(workflow, sections) if state_machine is None
                     else monitored_state_machine(self, state_machine, sections))
        log_group = monitored.log_group
        for name, value in (("alarm_lost", alarm_lost), ("alarm_janitor_failures", alarm_janitor_failures),
                            ("dashboard", dashboard)):
            prop_types.boolean(name, value)
        if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace) or namespace.startswith("AWS/"):
            raise ValueError(
                "`namespace` must be 1 to 200 letters, digits or _.-/#: characters, not starting "
                f"with 'AWS/', got: {namespace!r}"
            )
        if timeout_rate_threshold is not None and (
            isinstance(timeout_rate_threshold, bool)
            or not isinstance(timeout_rate_threshold, (int, float))
            or not 0 < timeout_rate_threshold <= 1
        ):
            raise ValueError(
                "`timeout_rate_threshold` must be a share above 0 and at most 1 (or None: no "
                f"alarm), got: {timeout_rate_threshold!r}"
            )
        if not isinstance(alarm_period, Duration) or alarm_period.is_unresolved():
            raise ValueError(f"`alarm_period` must be a concrete Duration, got: {alarm_period!r}")
        period_s = alarm_period.to_seconds()
        if period_s < 60 or period_s % 60:
            raise ValueError(f"`alarm_period` must be a whole number of minutes, got: {period_s} s")
        if isinstance(alarm_evaluation_periods, bool) or not isinstance(alarm_evaluation_periods, int) \
                or alarm_evaluation_periods < 1:
            raise ValueError(
                f"`alarm_evaluation_periods` must be a whole number >= 1, got: {alarm_evaluation_periods!r}"
            )
        if dashboard_name is not None and (
            not isinstance(dashboard_name, str) or not _DASHBOARD_NAME.fullmatch(dashboard_name)
        ):
            raise ValueError(
                f"`dashboard_name` must be 1 to 255 letters, digits, - or _, got: {dashboard_name!r}"
            )

        #: The monitored LockedWorkflow (None with ``state_machine``).
        self.workflow = workflow
        self.state_machine = monitored.state_machine
        #: Name of the monitored state machine (a token when CloudFormation generates it).
        self.state_machine_name = monitored.name
        #: Namespace of every metric of this workflow.
        self.namespace = f"{namespace}/{monitored.name}"
        self._period = alarm_period
        #: The lock states of the monitored sections (and those nested in them), from their
        #: records, found by name in the synthesized definition.
        self.lock_states = LockStates.recorded(monitored.definition, monitored.sections)
        found = self.lock_states

        # -- counts: metric filters on the workflow's (and its janitor's) log group ----------
        self.metric_filters: dict[str, logs.MetricFilter] = {}
        takeover_patterns = [
            # the check's wait record names the stale holder: an execution ARN (else null)
            state_filter("TaskStateExited", name,
                         field_is(f"$.details.assignedVariables.{variable}", "*:execution:*"))
            for name, variable in found.takeovers
        ]
        self.filter_patterns: dict[str, logs.IFilterPattern] = {
            TIMEOUTS: states_filter("FailStateEntered", found.timeouts),
            LOST: states_filter("FailStateEntered", found.lost),
            LIVENESS_CHECKS: states_filter("TaskStateEntered", found.liveness_checks),
            LIVENESS_TAKEOVERS: (
                takeover_patterns[0] if len(takeover_patterns) == 1
                else logs.FilterPattern.any(*takeover_patterns) if takeover_patterns
                else field_is("$.type", NO_EVENT)
            ),
        }
        # a coalescing fair lock's outcomes: counted where the machine has their Fail states
        for name, states in ((SUPERSEDED, found.superseded), (QUEUE_FULL, found.queue_full)):
            if states:
                self.filter_patterns[name] = states_filter("FailStateEntered", states)
        for name, pattern in self.filter_patterns.items():
            self._count(name, log_group, pattern)
        #: The janitors of the workflow or of the sections: each publishes JanitorRetires here.
        self.janitors: tuple = monitored.janitors
        #: The first of ``janitors`` (None without one).
        self.janitor = self.janitors[0] if self.janitors else None
        for janitor in self.janitors:
            janitor.publish_metrics_under(namespace)

        # -- durations: a subscription filter to the metrics function -------------------------
        self.metrics_function = metrics_function(self, powertools_layer)
        #: Lines the metrics function receives: the exits of the acquisitions and the releases.
        by_event: dict[str, list[str]] = {}
        for name, (event, _) in [*found.acquisitions.items(), *found.releases.items()]:
            by_event.setdefault(event, []).append(name)
        self.subscription_pattern = logs.FilterPattern.any(
            *[states_filter(event, sorted(names)) for event, names in sorted(by_event.items())],
        )
        if len(self.subscription_pattern.log_pattern_string) > MAX_PATTERN_LENGTH:
            # many sections: every exit of those types (the function picks the states by name)
            self.subscription_pattern = logs.FilterPattern.any(
                *[field_is("$.type", event) for event in sorted(by_event)])
        self.subscription = logs.SubscriptionFilter(
            self,
            "DurationsSubscription",
            log_group=log_group,
            destination=destinations.LambdaDestination(self.metrics_function),
            filter_pattern=self.subscription_pattern,
        )

        # -- alarms and dashboard ----------------------------------------------------------
        self.lost_alarm: Optional[cloudwatch.Alarm] = None
        if alarm_lost:
            self.lost_alarm = self.metric_lost(period=alarm_period).create_alarm(
                self,
                "LostAlarm",
                alarm_description=(
                    f"{errors.ERROR_LOST}: a run of {self.state_machine_name} lost its lock to "
                    "another holder before releasing it (its work may have overlapped another's)"
                ),
                threshold=0,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=alarm_evaluation_periods,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
        self.timeout_rate_alarm: Optional[cloudwatch.Alarm] = None
        if timeout_rate_threshold is not None:
            self.timeout_rate_alarm = self.metric_timeout_rate(period=alarm_period).create_alarm(
                self,
                "TimeoutRateAlarm",
                alarm_description=(
                    f"{errors.ERROR_TIMEOUT}: more than {timeout_rate_threshold:.0%} of the runs of "
                    f"{self.state_machine_name} started gave up waiting for the lock"
                ),
                threshold=float(timeout_rate_threshold),
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=alarm_evaluation_periods,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
        self.janitor_failed_alarm: Optional[cloudwatch.Alarm] = None
        if self.janitor is not None and alarm_janitor_failures:
            self.janitor_failed_alarm = self.metric_janitor_failures(period=alarm_period).create_alarm(
                self,
                "JanitorFailedAlarm",
                alarm_description=(
                    f"The lock janitor of {self.state_machine_name} could not recover the locks of an "
                    "ended execution (the event is in its dead-letter queue; the function's log names "
                    "the execution and the key): that lock stays held until its lease ends"
                ),
                threshold=0,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=1,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
        self.alarms = [a for a in (self.lost_alarm, self.timeout_rate_alarm, self.janitor_failed_alarm)
                       if a is not None]
        for alarm in self.alarms:
            alarm.add_alarm_action(*alarm_actions)
        self.dashboard: Optional[cloudwatch.Dashboard] = None
        if dashboard:
            self.dashboard = lock_dashboard(self, dashboard_name)

    # -- metrics --------------------------------------------------------------------------

    def metric(self, metric_name: str, **props: Any) -> cloudwatch.Metric:
        """A metric of this workflow's namespace (``props``: ``cloudwatch.MetricOptions``;
        default period: 5 minutes)."""
        return cloudwatch.Metric(
            namespace=self.namespace, metric_name=metric_name, **{"period": DEFAULT_METRIC_PERIOD, **props}
        )

    def metric_wait_time(self, **props: Any) -> cloudwatch.Metric:
        """How long acquisitions waited for the lock (ms: acquired - requested). Default: Average."""
        return self.metric(WAIT_TIME, **{"statistic": "Average", **props})

    def metric_hold_time(self, **props: Any) -> cloudwatch.Metric:
        """How long released locks were held (ms: released - acquired). Default: Average."""
        return self.metric(HOLD_TIME, **{"statistic": "Average", **props})

    def metric_timeouts(self, **props: Any) -> cloudwatch.Metric:
        """Runs that gave up waiting (``Lock.Timeout``). Default: Sum."""
        return self.metric(TIMEOUTS, **{"statistic": "Sum", **props})

    def metric_lost(self, **props: Any) -> cloudwatch.Metric:
        """Runs whose lock was taken over before they released it (``Lock.Lost``). Default: Sum."""
        return self.metric(LOST, **{"statistic": "Sum", **props})

    def metric_superseded(self, **props: Any) -> cloudwatch.Metric:
        """Queued runs a newer run superseded (``Lock.Superseded``, ``QueueLimit.keep_newest``):
        counted only when the machine has such a lock. Default: Sum."""
        return self.metric(SUPERSEDED, **{"statistic": "Sum", **props})

    def metric_queue_full(self, **props: Any) -> cloudwatch.Metric:
        """Runs refused by a full queue (``Lock.QueueFull``, ``QueueLimit.keep_oldest``): counted
        only when the machine has such a lock. Default: Sum."""
        return self.metric(QUEUE_FULL, **{"statistic": "Sum", **props})

    def metric_liveness_checks(self, **props: Any) -> cloudwatch.Metric:
        """Waiters' checks whether the holder's execution still runs. Default: Sum."""
        return self.metric(LIVENESS_CHECKS, **{"statistic": "Sum", **props})

    def metric_liveness_takeovers(self, **props: Any) -> cloudwatch.Metric:
        """Liveness checks that found the holder ended (and its stop grace over): the waiter
        takes the lock over on its next attempt. Default: Sum."""
        return self.metric(LIVENESS_TAKEOVERS, **{"statistic": "Sum", **props})

    def metric_janitor_retires(self, **props: Any) -> cloudwatch.Metric:
        """Locks the janitor retired (their holder ended without releasing; each acquisition
        once). Default: Sum."""
        return self.metric(JANITOR_RETIRES, **{"statistic": "Sum", **props})

    def metric_janitor_failures(self, **props: Any) -> cloudwatch.IMetric:
        """Janitor events that could not be handled - not delivered, or the recovery failed
        after Lambda's retries: the messages in the janitor's dead-letter queue. Default:
        Maximum. Several sections' janitors: the sum of their queues (a ``MathExpression``).
        Raises ``ValueError`` for a workflow without a janitor."""
        if self.janitor is None:
            raise ValueError(
                "`metric_janitor_failures` needs a workflow with a janitor (or a section's, from "
                "recover_stale_holders), got: none"
            )
        if len(self.janitors) == 1:
            return self.janitor.dead_letter_queue.metric_approximate_number_of_messages_visible(
                **{"period": DEFAULT_METRIC_PERIOD, "statistic": "Maximum", **props}
            )
        # several sections' janitors: the sum of their queues (a queue without data counts 0)
        period, statistic = props.pop("period", DEFAULT_METRIC_PERIOD), props.pop("statistic", "Maximum")
        queues = {
            f"janitor{n}": janitor.dead_letter_queue.metric_approximate_number_of_messages_visible(
                period=period, statistic=statistic)
            for n, janitor in enumerate(self.janitors)
        }
        return cloudwatch.MathExpression(
            expression=" + ".join(f"FILL({name}, 0)" for name in queues), using_metrics=queues, period=period,
            **{"label": "Janitor failures", **props},
        )

    def metric_timeout_rate(self, **props: Any) -> cloudwatch.MathExpression:
        """``Lock.Timeout`` failures per execution started (0 to 1, 0 with no starts);
        ``props``: ``period``, ``label``, ``color``."""
        period = props.pop("period", DEFAULT_METRIC_PERIOD)
        return cloudwatch.MathExpression(
            expression="IF(started > 0, timeouts / started, 0)",
            using_metrics={
                "timeouts": self.metric_timeouts(period=period),
                "started": self.state_machine.metric_started(period=period, statistic="Sum"),
            },
            period=period,
            **{"label": f"{errors.ERROR_TIMEOUT} rate", **props},
        )

    # -- internals --------------------------------------------------------------------------

    def _count(self, name: str, log_group: logs.ILogGroup, pattern: logs.IFilterPattern) -> None:
        if len(pattern.log_pattern_string) > MAX_PATTERN_LENGTH:
            raise ValueError(
                f"`workflow` must have lock states whose {name} filter pattern fits CloudWatch Logs' "
                f"{MAX_PATTERN_LENGTH} characters (shorter section ids, or fewer nested sections), got: "
                f"{len(pattern.log_pattern_string)} characters"
            )
        self.metric_filters[name] = logs.MetricFilter(
            self,
            f"{name}Filter",
            log_group=log_group,
            filter_pattern=pattern,
            metric_namespace=self.namespace,
            metric_name=name,
            metric_value="1",
            default_value=0,
            unit=cloudwatch.Unit.COUNT,
        )
