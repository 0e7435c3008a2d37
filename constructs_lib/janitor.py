"""LockJanitor: retires the locks of executions that ended without releasing them.

Step Functions runs no Catch when an execution is stopped (ABORTED) or hits the state
machine's own timeout (TIMED_OUT), and ``States.ALL`` does not catch ``States.Runtime`` or
``States.DataLimitExceeded`` (FAILED). The janitor listens for those status-change events and
*retires* every acquisition the execution made: the lock stays held for the acquisition's stop
grace after the execution ended (work it started - a Lambda invocation, an activity or
callback worker - may still run), then any waiter takes it over. Owner-conditioned and
end-conditioned: it never touches another holder's lock, nor an acquisition the same
execution made after its end (a redriven execution acquires again under the same owner, and
EventBridge may deliver the end's event late - it retries for up to 24 hours).

Which acquisitions: the execution's own history, read after it ended (``GetExecutionHistory``,
every page): each ``TaskScheduled`` of the protocol's ACQUIRE on this table at or before the
end. Unlike an index on ``owner`` (eventually consistent), the history cannot miss a lock taken
just before the stop - not even one whose response was lost.

It is a small Python Lambda function (``lambdas/lock_janitor``), not a state machine: a
Step Functions task's result is limited to 256 KiB (``States.DataLimitExceeded``), and one
history page - one event, even: an ``ExecutionStarted`` with a 256 KiB input - can exceed it,
so a state machine reading the history cannot be made safe by any page size. The function
reads the pages with boto3, where no such limit applies. Its code is deployed with the
``state_machines`` protocol modules and ``LockClient``, so every expression it writes is the
protocol's own. The event reaches it with retries (EventBridge's, for delivery; Lambda's, for
a failed invocation), and an event it could not handle lands in :attr:`dead_letter_queue`
after the function logged one line naming the execution and the lock key.
"""

from __future__ import annotations

from pathlib import Path
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence

from aws_cdk import ArnFormat, Duration
from aws_cdk import RemovalPolicy, Stack, aws_dynamodb as dynamodb
from aws_cdk import aws_events as events, aws_events_targets as targets, aws_iam as iam
from aws_cdk import aws_lambda as lambda_, aws_logs as logs
from aws_cdk import aws_sqs as sqs, aws_stepfunctions as sfn
from constructs import Construct

from locked_workflow.constructs_lib import code_closure
from locked_workflow.constructs_lib.assets import bundled_code
from locked_workflow.constructs_lib.monitoring_function import powertools_layer
from locked_workflow.lambdas.lock_janitor import settings as janitor_settings
from locked_workflow.lambdas.lock_janitor.settings import ENDED_WITHOUT_RELEASE, ENV_METRICS_NAMESPACE, JanitorSettings
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines import shared_protocol

if TYPE_CHECKING:
    from locked_workflow.constructs_lib.lock import Lock

#: The function's own code (handler and logic), deployed with :func:`bundled_modules`.
JANITOR_CODE = Path(janitor_settings.__file__).resolve().parent


def bundled_modules() -> dict[str, Path]:
    """What the function imports from this package, copied beside its code at synth (path in
    the bundle -> source): the closure of its handler's imports of ``locked_workflow`` (the
    protocol modules - one spelling of every expression - and the lock client with what it
    imports), under the package's one import name."""
    start = [(source.stem, source) for source in sorted(JANITOR_CODE.glob("*.py"))]
    return code_closure.package_files(start)


#: EventBridge's delivery retries of a janitor event (its maximum) and their time limit.
DELIVERY_RETRY_ATTEMPTS = 185
DELIVERY_MAX_EVENT_AGE = Duration.hours(24)
#: Lambda's retries of a failed invocation (its maximum) and their time limit (its maximum).
INVOKE_RETRY_ATTEMPTS = 2
INVOKE_MAX_EVENT_AGE = Duration.hours(6)


def janitor_files() -> dict[str, Path]:
    """The function's code folder (path in it -> source): the handler and logic, with
    :func:`bundled_modules`."""
    return {**{source.name: source for source in JANITOR_CODE.glob("*.py")}, **bundled_modules()}


def janitor_code() -> lambda_.Code:
    """The janitor function's code asset (hashed on its bundled output): :func:`janitor_files`."""
    return bundled_code(JANITOR_CODE, lambda: janitor_files())


def executions_of(stack: Stack, state_machine_names: Sequence[str]) -> list[str]:
    """ARNs matching every execution of the named state machines (IAM resources)."""
    return [
        stack.format_arn(
            service="states", resource="execution", resource_name=f"{name}:*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        for name in state_machine_names
    ]


@dataclass(frozen=True)
class RecoveryNeeds:
    """What a janitor must clean up after an ended execution of a lock kind."""

    #: Where the lock attributes live.
    item: protocol.LockItem
    #: Ended executions leave queue entries (taken out; a free lock's new head is woken).
    queue: bool
    #: Ended holds leave presence rows of their own (deleted).
    presence_rows: bool


def _recovery_needs(lock: Optional["Lock"], detect_cancellation: bool, *, item: Optional[protocol.LockItem],
                    fair: Optional[bool], presence_rows: Optional[bool]) -> RecoveryNeeds:
    """The janitor's :class:`RecoveryNeeds` from the ``lock`` value (or, deprecated, from the
    flags that spelled them before it took one)."""
    flags = {name: value for name, value in (("item", item), ("fair", fair), ("presence_rows", presence_rows))
             if value is not None}
    if not isinstance(detect_cancellation, bool):
        raise ValueError(f"`detect_cancellation` must be True or False, got: {detect_cancellation!r}")
    if flags:
        if lock is not None:
            raise ValueError(f"`lock` says what the janitor cleans up: leave out {', '.join(f'`{n}`' for n in flags)}, "
                             f"got: {', '.join(flags)} beside lock={lock!r}")
        warnings.warn(f"LockJanitor's {', '.join(f'`{n}`' for n in flags)} are deprecated: pass the watched "
                      "sections' `lock` (and `detect_cancellation`) instead", DeprecationWarning, stacklevel=4)
        return RecoveryNeeds(item or protocol.LOCK_TABLE_ITEM, bool(fair), bool(presence_rows))
    if lock is None:
        return RecoveryNeeds(protocol.LOCK_TABLE_ITEM, False, False)
    kind = lock.builder()
    if not kind.holds:
        raise ValueError(f"`lock` must be a kind that holds its key (a rate limit holds nothing to recover), "
                         f"got: {lock!r}")
    return RecoveryNeeds(kind.item, kind.janitor_dequeues, detect_cancellation and kind.presence_rows)


class LockJanitor(Construct):
    """Retire the locks of ended executions of ``watched`` state machines.

    :param table: the lock table (for :meth:`Lock.on_record`, the record table). Default: the
        record table of a ``Lock.on_record`` value; required for every other kind.
    :param watched: state machines whose ended executions are cleaned up (they must run in
        this stack's account and region).
    :param lock: the lock the watched machines take (the same value their sections were given):
        what the janitor must clean up follows from its kind - where the lock attributes live,
        whether ended executions leave queue entries (the fair lock: take them out and wake the
        new head of a free lock) or presence rows (the read/write kinds with
        ``detect_cancellation``: delete them, ``DeleteItem`` granted on presence rows only).
        A rate limit holds nothing to recover and is refused. Default: ``Lock.mutex`` (any
        key: the lock table's item, no queue, no presence rows).
    :param detect_cancellation: the watched sections' ``detect_cancellation`` (it decides
        whether the read/write kinds leave presence rows). Default: ``True``, as the sections'.
    :param logging: log each recovery (level INFO) besides failures, which are always logged.
        Default: ``True``.
    :param item: deprecated, say ``lock``: where the lock attributes live.
    :param fair: deprecated, say ``lock=Lock.fair(...)``.
    :param presence_rows: deprecated, say ``lock`` (a read/write kind) and
        ``detect_cancellation``.

    Exposes ``function``, ``rule`` and ``dead_letter_queue`` (events that could not be
    delivered, or whose recovery failed after Lambda's retries).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        table: Optional[dynamodb.ITable] = None,
        watched: Sequence[sfn.IStateMachine],
        lock: Optional["Lock"] = None,
        detect_cancellation: bool = True,
        logging: bool = True,
        item: Optional[protocol.LockItem] = None,
        fair: Optional[bool] = None,
        presence_rows: Optional[bool] = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if not watched:
            raise ValueError("`watched` must name at least one state machine, got: []")
        needs = _recovery_needs(lock, detect_cancellation, item=item, fair=fair, presence_rows=presence_rows)
        item, fair, presence_rows = needs.item, needs.queue, needs.presence_rows
        table = table if table is not None else (lock.record_table if lock is not None else None)
        if table is None:
            raise ValueError("`table` must be the lock table (or the record table), got: None")

        stack = Stack.of(self)
        self.dead_letter_queue = sqs.Queue(
            self, "DeadLetters", retention_period=Duration.days(14),
            encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True,
        )
        log_group = logs.LogGroup(
            self, "Logs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=RemovalPolicy.DESTROY,
        )
        role = iam.Role(
            self, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="Reads ended executions' histories and retires their locks",
        )
        log_group.grant_write(role)  # logs:CreateLogStream, logs:PutLogEvents on that group only
        self.function = lambda_.Function(
            self,
            "Function",
            description="Retires the locks of executions that ended without releasing them",
            runtime=lambda_.Runtime.PYTHON_3_13,
            handler="index.handler",
            code=janitor_code(),
            timeout=Duration.minutes(2),
            memory_size=256,
            role=role,
            log_group=log_group,
            layers=[powertools_layer(self)],
            tracing=lambda_.Tracing.ACTIVE,
            dead_letter_queue=self.dead_letter_queue,
            retry_attempts=INVOKE_RETRY_ATTEMPTS,
            max_event_age=INVOKE_MAX_EVENT_AGE,
            environment={
                **JanitorSettings(table_name=table.table_name, item=item, fair=fair).environment(),
                "POWERTOOLS_LOG_LEVEL": "INFO" if logging else "WARNING",
            },
        )
        # Pinned to python3.13, the newest runtime the pinned Powertools layer is published for
        # (cdk-nag's own metadata format: no cdk-nag import in the library).
        self.function.node.default_child.add_metadata("cdk_nag", {"rules_to_suppress": [{
            "id": "AwsSolutions-L1",
            "reason": "Pinned to Python 3.13, the newest runtime the pinned Powertools layer is published for.",
        }]})
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=["states:GetExecutionHistory"],
            resources=executions_of(stack, [machine.state_machine_name for machine in watched]),
        ))
        table_arn = stack.format_arn(service="dynamodb", resource="table", resource_name=table.table_name)
        # (reading a lock item before its retire; fair: a queue row too, and taking the next row
        # in a handoff)
        for action in ["dynamodb:UpdateItem", "dynamodb:GetItem"] + (["dynamodb:DeleteItem"] if fair else []):
            role.add_to_principal_policy(iam.PolicyStatement(actions=[action], resources=[table_arn]))
        if presence_rows:  # deleting an ended hold's presence row: those rows only
            role.add_to_principal_policy(iam.PolicyStatement(
                actions=["dynamodb:DeleteItem"], resources=[table_arn],
                conditions={"ForAllValues:StringLike": {
                    "dynamodb:LeadingKeys": [f"{shared_protocol.PRESENCE_ROW_MARK}*"]}}))
        if fair:  # handing the lock to a parked waiter: IAM cannot scope a task token
            role.add_to_principal_policy(iam.PolicyStatement(
                actions=["states:SendTaskSuccess", "states:SendTaskFailure"], resources=["*"]))
            role.add_to_principal_policy(iam.PolicyStatement(  # is a grantee whose wake-up failed dead?
                actions=["states:DescribeExecution"],
                resources=executions_of(stack, [machine.state_machine_name for machine in watched])))

        self.rule = events.Rule(
            self,
            "ExecutionEnded",
            description="Retire the locks of executions that ended without releasing them",
            event_pattern=events.EventPattern(
                source=["aws.states"],
                detail_type=["Step Functions Execution Status Change"],
                detail={
                    "status": list(ENDED_WITHOUT_RELEASE),
                    "stateMachineArn": [m.state_machine_arn for m in watched],
                },
            ),
        )
        self.rule.add_target(
            targets.LambdaFunction(
                self.function,
                retry_attempts=DELIVERY_RETRY_ATTEMPTS,
                max_event_age=DELIVERY_MAX_EVENT_AGE,
                dead_letter_queue=self.dead_letter_queue,
            )
        )

    def publish_metrics_under(self, namespace: str) -> None:
        """Publish ``JanitorRetires`` in ``<namespace>/<state machine name>`` (``LockMonitoring``
        calls this with its own namespace). Default: ``LockedWorkflow``."""
        self.function.add_environment(ENV_METRICS_NAMESPACE, namespace)
