"""LockJanitor: releases the locks of executions that ended without running their Catch.

Step Functions runs no Catch when an execution is stopped (ABORTED) or hits the state
machine's own timeout (TIMED_OUT). The janitor listens for those status-change events (and
FAILED, in case a failure skipped the release) and releases every lock the execution still
owns - owner-conditioned, so it never touches another holder's lock.

It is itself a small Express state machine of direct integrations (Query the owner index,
then one conditional UpdateItem per lock): no code to deploy, no cold start, and the release
is the protocol's own RELEASE expression. It needs only the event's ``detail.executionArn``,
which is present even when Step Functions drops a large input from the event.
"""

from __future__ import annotations

from typing import Sequence

from aws_cdk import Duration, RemovalPolicy, aws_dynamodb as dynamodb
from aws_cdk import aws_events as events, aws_events_targets as targets, aws_logs as logs
from aws_cdk import aws_sqs as sqs, aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks
from constructs import Construct

from constructs_lib.dynamodb_tasks import retry_transient, update_item_props
from state_machines import lock_protocol as protocol
from state_machines.lock_protocol import jsonata

#: Execution statuses after which an execution may still own a lock.
ENDED_WITHOUT_RELEASE = ("ABORTED", "TIMED_OUT", "FAILED")


class LockJanitor(Construct):
    """Release the locks of ended executions of ``watched`` state machines.

    :param table: the lock table (with the ``byOwner`` index that :class:`LockTable` creates).
    :param watched: state machines whose ended executions are cleaned up.
    :param logging: log the janitor's executions (level ALL). Default: ``True``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        table: dynamodb.ITable,
        watched: Sequence[sfn.IStateMachine],
        logging: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        if not watched:
            raise ValueError("`watched` must name at least one state machine, got: []")
        owner = "$states.input.detail.executionArn"
        find = tasks.CallAwsService.jsonata(
            self,
            "Find locks of the ended execution",
            service="dynamodb",
            action="query",
            parameters={
                "TableName": table.table_name,
                "IndexName": protocol.OWNER_INDEX,
                "KeyConditionExpression": protocol.LOCKS_OF_OWNER,
                "ExpressionAttributeNames": {f"#{protocol.OWNER}": protocol.OWNER},
                "ExpressionAttributeValues": {":owner": {"S": jsonata(owner)}},
            },
            iam_resources=[f"{table.table_arn}/index/{protocol.OWNER_INDEX}"],
            iam_action="dynamodb:Query",
            assign={"endedExecution": jsonata(owner)},
            outputs=jsonata("$states.result.Items"),
        )
        release = tasks.DynamoUpdateItem.jsonata(
            self,
            "Release",
            table=table,
            **update_item_props(
                protocol.janitor_release_arguments(
                    key_jsonata=f"$states.input.{protocol.KEY_ATTRIBUTE}.S",
                    owner_jsonata="$endedExecution",
                )
            ),
        )
        retry_transient(release)
        already_free = sfn.Succeed(self, "Taken over or released already")
        release.add_catch(already_free, errors=[protocol.CONDITION_FAILED])
        each = sfn.Map.jsonata(
            self, "Release each", items=sfn.ProvideItems.jsonata(jsonata("$states.input")),
            max_concurrency=10,
        ).item_processor(release)

        log_options = None
        if logging:
            log_options = sfn.LogOptions(
                destination=logs.LogGroup(
                    self, "Logs", retention=logs.RetentionDays.ONE_MONTH,
                    removal_policy=RemovalPolicy.DESTROY,
                ),
                level=sfn.LogLevel.ALL,
                include_execution_data=True,
            )
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            definition_body=sfn.DefinitionBody.from_chainable(find.next(each)),
            query_language=sfn.QueryLanguage.JSONATA,
            state_machine_type=sfn.StateMachineType.EXPRESS,
            timeout=Duration.minutes(1),
            logs=log_options,
            tracing_enabled=True,
        )
        self.dead_letter_queue = sqs.Queue(
            self, "DeadLetters", retention_period=Duration.days(14),
            encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True,
        )
        self.rule = events.Rule(
            self,
            "ExecutionEnded",
            description="Release the locks of executions that ended without releasing them",
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
            targets.SfnStateMachine(
                self.state_machine,
                retry_attempts=185,
                max_event_age=Duration.hours(24),
                dead_letter_queue=self.dead_letter_queue,
            )
        )
