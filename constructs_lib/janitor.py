"""LockJanitor: retires the locks of executions that ended without releasing them.

Step Functions runs no Catch when an execution is stopped (ABORTED) or hits the state
machine's own timeout (TIMED_OUT), and ``States.ALL`` does not catch ``States.Runtime`` or
``States.DataLimitExceeded`` (FAILED). The janitor listens for those status-change events and
*retires* every acquisition the execution made: the lock stays held for the acquisition's stop
grace after the execution ended (work it started - a Lambda invocation, an activity or
callback worker - may still run), then any waiter takes it over. Owner-conditioned: it never
touches another holder's lock, nor a later acquisition of the same execution after a redrive.

Which acquisitions: the execution's own history, read after it ended (``GetExecutionHistory``,
every page): each ``TaskScheduled`` of the protocol's ACQUIRE on this table before the end.
Unlike an index on ``owner`` (eventually consistent), the history cannot miss a lock taken
just before the stop - not even one whose response was lost.

It is itself a small Express state machine of direct integrations: no code to deploy, no cold
start, and the write is the protocol's own RETIRE expression. It needs only the event's
``detail.executionArn`` and ``detail.stopDate``, present even when Step Functions drops a large
input from the event.
"""

from __future__ import annotations

from typing import Sequence

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack, aws_dynamodb as dynamodb
from aws_cdk import aws_events as events, aws_events_targets as targets, aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs, aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks
from constructs import Construct

from constructs_lib.dynamodb_tasks import attribute_value, retry_transient, update_item_props
from state_machines import fair_protocol
from state_machines import lock_protocol as protocol
from state_machines.lock_protocol import jsonata

#: Execution statuses after which an execution may still own a lock.
ENDED_WITHOUT_RELEASE = ("ABORTED", "TIMED_OUT", "FAILED")
#: History events per GetExecutionHistory page (the API's maximum).
HISTORY_PAGE_SIZE = 1000


class LockJanitor(Construct):
    """Retire the locks of ended executions of ``watched`` state machines.

    :param table: the lock table.
    :param watched: state machines whose ended executions are cleaned up (they must run in
        this stack's account and region).
    :param logging: log the janitor's executions (level ALL). Default: ``True``.
    :param item: where the lock attributes live on ``table``'s items. Default: the lock
        table's (``pk``, unprefixed names); a lock on records: ``record_protocol.record_item``.
    :param fair: the watched machines use the fair lock: also take every queue entry of the
        ended execution out of its queue, and wake the new head of a free lock. Default:
        ``False``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        table: dynamodb.ITable,
        watched: Sequence[sfn.IStateMachine],
        logging: bool = True,
        item: protocol.LockItem = protocol.LOCK_TABLE_ITEM,
        fair: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        if not watched:
            raise ValueError("`watched` must name at least one state machine, got: []")
        stack = Stack.of(self)
        detail = "$states.context.Execution.Input.detail"
        # the end as the event tells it; else now, which is later: a longer grace, never shorter
        ended_ms = f"($type({detail}.stopDate) = 'number' ? {detail}.stopDate : $millis())"
        read = sfn.CustomState(
            self,
            "Read the ended execution's history",
            state_json={
                "Type": "Task",
                "QueryLanguage": "JSONata",
                "Resource": f"arn:{stack.partition}:states:::aws-sdk:sfn:getExecutionHistory",
                "Arguments": jsonata(
                    f"$merge([{{'ExecutionArn': {detail}.executionArn, "
                    f"'MaxResults': {HISTORY_PAGE_SIZE}, 'IncludeExecutionData': true}}, "
                    "$type($nextPage) = 'string' ? {'NextToken': $nextPage} : {}])"
                ),
                "Assign": {
                    "nextPage": jsonata(
                        "$type($states.result.NextToken) = 'string' ? $states.result.NextToken : null"
                    )
                },
                "Output": jsonata(
                    "{'retire': " + protocol.acquisitions_in_history_expression(
                        table_name=table.table_name, ended_ms=ended_ms
                    ) + ", 'dequeue': " + (
                        fair_protocol.enqueues_in_history_expression(table_name=table.table_name, ended_ms=ended_ms)
                        if fair else "[]"
                    ) + "}"
                ),
                "Retry": [
                    {
                        "ErrorEquals": ["Sfn.ThrottlingException", "States.TaskFailed"],
                        "IntervalSeconds": 1,
                        "BackoffRate": 2,
                        "MaxAttempts": 5,
                        "JitterStrategy": "FULL",
                    }
                ],
            },
        )
        retire = tasks.DynamoUpdateItem.jsonata(
            self,
            "Retire",
            table=table,
            **update_item_props(
                protocol.retire_arguments(
                    key_jsonata="$states.input.key",
                    owner_jsonata="$states.input.owner",
                    ended_at_jsonata=f"$string({ended_ms})",
                    item=item,
                )
            ),
        )
        retry_transient(retire)
        retire.add_catch(
            sfn.Succeed(self, "Released or taken over already"), errors=[protocol.CONDITION_FAILED]
        )
        each = sfn.Map.jsonata(
            self, "Retire each", items=sfn.ProvideItems.jsonata(jsonata("$states.input.retire")),
            max_concurrency=10, outputs=jsonata("$states.input"),
        ).item_processor(retire)
        more = sfn.Choice.jsonata(self, "More history?")
        more.when(sfn.Condition.jsonata(jsonata("$type($nextPage) = 'string'")), read)
        more.otherwise(sfn.Succeed(self, "Done"))
        chain = read.next(each)
        if fair:
            chain = chain.next(sfn.Map.jsonata(
                self, "Dequeue each", items=sfn.ProvideItems.jsonata(jsonata("$states.input.dequeue")),
                max_concurrency=10,
            ).item_processor(self._dequeue(table)))
        definition = chain.next(more)

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
            definition_body=sfn.DefinitionBody.from_chainable(definition),
            query_language=sfn.QueryLanguage.JSONATA,
            state_machine_type=sfn.StateMachineType.EXPRESS,
            timeout=Duration.minutes(5),
            logs=log_options,
            tracing_enabled=True,
        )
        self.state_machine.add_to_role_policy(
            iam.PolicyStatement(
                actions=["states:GetExecutionHistory"],
                resources=[
                    stack.format_arn(
                        service="states", resource="execution",
                        resource_name=f"{machine.state_machine_name}:*",
                        arn_format=ArnFormat.COLON_RESOURCE_NAME,
                    )
                    for machine in watched
                ],
            )
        )
        self.dead_letter_queue = sqs.Queue(
            self, "DeadLetters", retention_period=Duration.days(14),
            encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True,
        )
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
            targets.SfnStateMachine(
                self.state_machine,
                retry_attempts=185,
                max_event_age=Duration.hours(24),
                dead_letter_queue=self.dead_letter_queue,
            )
        )

    def _dequeue(self, table: dynamodb.ITable) -> sfn.IChainable:
        """Take ``$states.input.owner`` out of the queue of ``$states.input.key`` (wherever it
        stands: read, then remove at that place; a place moved meanwhile: read again), and wake
        the new head of a free lock."""
        done = sfn.Succeed(self, "Not queued")
        read = tasks.DynamoGetItem.jsonata(
            self, "Read the queue", table=table, key={protocol.KEY_ATTRIBUTE: attribute_value({"S": jsonata("$states.input.key")})},
            consistent_read=True, outputs=jsonata("$states.input"),
            assign={"place": jsonata(fair_protocol.my_index_expression("$states.result.Item", "$states.input.owner"))},
        )
        retry_transient(read)
        remove = tasks.DynamoUpdateItem.jsonata(
            self, "Dequeue", table=table,
            **update_item_props(fair_protocol.remove_at_arguments(
                key_jsonata="$states.input.key", who_jsonata="$states.input.owner", index_jsonata="$place")),
            assign={"wake": jsonata(fair_protocol.wake_after_dequeue_expression("$states.result.Attributes"))},
            outputs=jsonata("$states.input"),
        )
        retry_transient(remove)
        remove.add_catch(read, errors=[protocol.CONDITION_FAILED])
        wake = tasks.CallAwsService.jsonata(
            self, "Wake the new head", service="sfn", action="sendTaskSuccess",
            parameters={"TaskToken": jsonata("$wake"), "Output": "{\"woken\":true}"},
            iam_action="states:SendTaskSuccess",
            iam_resources=["*"],  # IAM cannot scope a service integration's task token
        )
        wake.add_retry(errors=[fair_protocol.WAKE_THROTTLED], interval=Duration.seconds(1), backoff_rate=2.0,
                       max_attempts=3, jitter_strategy=sfn.JitterType.FULL)
        wake.add_catch(sfn.Succeed(self, "Head gone"), errors=["States.ALL"])
        woken = sfn.Choice.jsonata(self, "New head to wake?")
        woken.when(sfn.Condition.jsonata(jsonata("$type($wake) = 'string'")), wake).otherwise(
            sfn.Succeed(self, "Dequeued"))
        queued = sfn.Choice.jsonata(self, "Queued?")
        queued.when(sfn.Condition.jsonata(jsonata("$place >= 0")), remove.next(woken)).otherwise(done)
        return read.next(queued)
