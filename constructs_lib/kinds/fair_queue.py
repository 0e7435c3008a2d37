"""The fair kind's waiters' path (``Lock.fair``): after a refused fast path, the ticket
(ENQUEUE, bounded with ``queue``), the park on a task token in the waiter's row (or, EXPRESS,
a polled lease on it), the confirm of a grant (CLAIM), and the fallback after a park timeout
or a nudge (Inspect: claim, requeue, acquire as the head, run the handoff for a head that does
not move, probe and describe a holder) - :mod:`locked_workflow.state_machines.fair_protocol`
wired into states.
"""

from __future__ import annotations

from typing import Optional

from aws_cdk import Duration, Stack, aws_iam as iam, aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks

from locked_workflow.constructs_lib.custom_state import JsonataCustomState
from locked_workflow.constructs_lib.dynamodb_tasks import attribute_value, retry_transient, update_item_task
from locked_workflow.constructs_lib.section_record import Role
from locked_workflow.constructs_lib.kinds.base import SectionContext
from locked_workflow.constructs_lib.kinds.fair_handoff import build_handoff, fair_vars, grant_arguments, row_key
from locked_workflow.constructs_lib.kinds.items import item_number, item_string
from locked_workflow.constructs_lib.queue_limit import QueueLimit
from locked_workflow.state_machines import errors
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines.errors import ERROR_QUEUE_FULL, ERROR_SUPERSEDED, TRANSACTION_CANCELED
from locked_workflow.state_machines.errors import SDK_CONDITION_FAILED  # the park is an aws-sdk call
from locked_workflow.state_machines.errors import SIGNAL_LOOK as LOOK  # a nudge ends a park with it
from locked_workflow.state_machines.lock_protocol import ENTRY, jsonata


class _ParkTask(tasks.CallAwsService):
    """An aws-sdk ``.waitForTaskToken`` task whose ``TimeoutSeconds`` is a JSONata expression
    (the park timeout grows with the distance to the head: ``fair.park_timeout_expression``)."""

    timeout_expression: str = ""

    def to_state_json(self, *args):
        rendered = dict(super().to_state_json(*args))
        rendered["TimeoutSeconds"] = self.timeout_expression
        return rendered


class FairQueue:
    """The fair kind's waiters' path for one section, built once per
    :meth:`~locked_workflow.constructs_lib.kinds.fair.FairKind.build_acquire` call (its states refer to each other while they are built;
    the kind itself keeps nothing between calls): the ticket, the park (or the EXPRESS poll),
    the fallback's look, the leave."""

    def __init__(self, section: SectionContext, *, lease_ms: int, values: dict, park_timeout_s: int,
                 polling: bool, queue: Optional[QueueLimit]) -> None:
        self._section, self._lease_ms, self._values = section, lease_ms, values
        #: The kind's settings (see ``Lock.fair``).
        self.park_timeout_s, self.polling, self.queue = park_timeout_s, polling, queue
        #: Coalescing (``QueueLimit.keep_newest``): a newcomer supersedes the oldest waiter.
        self.supersedes = queue is not None and queue.supersedes

    def _lock_record(self, of: str, *, key: str, owner: str, ticket: str) -> str:
        """JSONata: the ``$lock`` record of a grant read from ``of`` (a lock item), plus its ticket."""
        return (
            f"{{'key': {key}, 'owner': {owner}, 'fence': {item_number(of, protocol.FENCE)}, "
            f"'acquiredAt': {item_number(of, protocol.ACQUIRED_AT)}, 'expiresAt': {item_number(of, protocol.EXPIRES_AT)}, "
            f"'ticket': {ticket}, '{protocol.REQUESTED_AT}': {ENTRY}.{protocol.REQUESTED_AT}, {protocol.generation_field()}}}"
        )

    def build(self, fast: sfn.TaskStateBase) -> None:
        """The waiters' path after a refused fast path ``fast``."""
        section, v, f = self._section, self._section.variables, fair_vars(self._section)
        timeout = sfn.Fail.jsonata(
            section, "Timeout", state_name=section.state_name("Timeout"), error=protocol.ERROR_TIMEOUT,
            cause=f"the lock was held by another run for longer than max_wait ({section.max_wait_ms} ms)",
        )
        section.record(timeout, Role.TIMEOUT)
        if section.max_wait_ms == 0:
            fast.add_catch(timeout, errors=[protocol.CONDITION_FAILED])
            return
        failed = sfn.Fail.jsonata(
            section, "QueueFailed", state_name=section.state_name("QueueFailed"),
            error=jsonata(f"${v['wait']}.error.Error"), cause=jsonata(f"${v['wait']}.error.Cause"),
        )
        left = sfn.Choice.jsonata(section, "Left", state_name=section.state_name("Left?"))
        left.when(sfn.Condition.jsonata(jsonata(f"$exists(${v['wait']}.error)")), failed).otherwise(timeout)
        self._on_error = dict(
            errors=["States.ALL"],
            assign={v["wait"]: jsonata(f"$merge([${v['wait']}, {{'error': $states.errorOutput}}])")},
            outputs=jsonata("$states.input"),
        )
        ticket = f"${f['ticket']}"

        # the ticket (refused: the lock is free with nobody queued - the fast path again)
        enqueue, to_queue = self._build_enqueue(fast, left)
        enqueue.add_catch(left, **self._on_error)
        fast.add_catch(to_queue, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"),
                       assign={v["wait"]: jsonata(protocol.wait_bookkeeping_expression(v["wait"]))})

        # leaving (max_wait spent, or an error while queued): mark my row left; granted
        # meanwhile -> the work after all
        self._leave = self._build_leave(left)

        # the head takes the lock itself, then drops its row
        drop = self._delete_row("DropRow", f"{ENTRY}.key", ticket, outputs=f"{ENTRY}.input")
        drop.add_catch(section.protected, errors=["States.ALL"], outputs=jsonata(f"{ENTRY}.input"))
        drop.next(section.protected)
        head = update_item_task(
            section, section.state_name("AcquireHead"), section.table,
            grant_arguments(key=f"{ENTRY}.key", me=f"{ENTRY}.owner", nxt=f"{ENTRY}.owner",
                            stale=protocol.stale_owner_expression(v["wait"]), prev=f"{ticket} - 1",
                            expires=protocol.lease_end_expression(self._lease_ms), grace=f"$string({ENTRY}.grace)"),
            assign={v["lock"]: jsonata(self._lock_record("$states.result.Attributes", key=f"{ENTRY}.key",
                                                         owner=f"{ENTRY}.owner", ticket=ticket)),
                    v["wait"]: jsonata("null")},
        )
        section.record(head, Role.ACQUISITION, v["lock"])
        retry_transient(head)
        head.next(drop)
        claim = self._claim("Claim", ticket)
        claim.next(drop)
        requeue = self._delete_row("Requeue", f"{ENTRY}.key", ticket)
        requeue.next(to_queue)

        if self.polling:
            wait_again = self._build_polling(head)
        else:
            wait_again = self._build_park(head)
        inspect = self._build_inspect(claim=claim, requeue=requeue, head=head, wait_again=wait_again)
        if not self.polling:  # the park ends by a timeout (look, or leave) or a nudge (look)
            park = self._park
            if self.supersedes:  # a newer run superseded me (its wake-up): leave, never work
                park.add_catch(self._superseded(jsonata("$states.input.Cause")), errors=[ERROR_SUPERSEDED])
            park.add_catch(inspect, errors=[LOOK], outputs=jsonata("$states.input"))
            park.add_catch(self._waited_enough(inspect), errors=["States.Timeout"], outputs=jsonata("$states.input"),
                           assign={v["wait"]: jsonata(protocol.wait_bookkeeping_expression(v["wait"]))})
            park.add_catch(self._leave, **self._on_error)
        for state in (head, claim) + ((self._confirm,) if not self.polling else ()):
            state.add_catch(self._inspect_state, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
            state.add_catch(self._leave, **self._on_error)
        requeue.add_catch(to_queue, errors=["States.ALL"], outputs=jsonata("$states.input"))
        enqueue.next(self._build_supersede(self._first_wait) if self.supersedes else self._first_wait)

    def _build_enqueue(self, fast: sfn.TaskStateBase, left: sfn.State) -> tuple:
        """The ticket: ENQUEUE (ENQUEUE_NEWEST with ``keep_newest``; ENQUEUE_BOUNDED after a read of
        the lock item with ``keep_oldest``). Returns (the enqueue, the state a refused fast path goes to)."""
        section, f = self._section, fair_vars(self._section)
        result = "$states.result.Attributes"
        write, values = fair.ENQUEUE, {k: self._values[k] for k in fair.ENQUEUE.value_names()}
        assign = {f["ticket"]: jsonata(item_number(result, fair.TICKETS)),
                  f["seen"]: jsonata(f"{{'served': {item_number(result, fair.SERVED)}}}")}
        if self.supersedes:
            write, values = fair.ENQUEUE_NEWEST, {**values, ":kept": {"N": str(self.queue.waiters - 1)}}
            free = f"($not($exists({result}.`{protocol.OWNER}`.S)) or {item_number(result, protocol.EXPIRES_AT)} < $millis())"
            assign[f["superseded"]] = jsonata(
                f"{{'ticket': {fair.superseded_ticket_expression(item_number(result, fair.TICKETS), item_number(result, fair.SERVED), self.queue.waiters)}, "
                f"'free': {free}}}")
        elif self.queue is not None:
            write = fair.ENQUEUE_BOUNDED
            values = {**values, ":served": {"N": jsonata(f"$string(${f['seen']}.served)")},
                      ":bound": {"N": jsonata(f"$string(${f['seen']}.served + {self.queue.waiters})")}}
        enqueue = update_item_task(
            section, section.state_name("Enqueue"), section.table,
            fair.arguments(jsonata(f"{ENTRY}.key"), write, values, return_values="ALL_NEW"), assign=assign)
        retry_transient(enqueue)
        if self.queue is None or self.supersedes:
            enqueue.add_catch(fast, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
            return enqueue, enqueue
        # keep_oldest: count the queue (a consistent read), then enqueue only if it is not full as
        # read - refused, it was full (QueueFull) or it moved on (count again)
        item = "$states.result.Item"
        count = tasks.DynamoGetItem.jsonata(
            section, section.state_name("CountQueue"), table=section.table,
            key={protocol.KEY_ATTRIBUTE: attribute_value({"S": jsonata(f"{ENTRY}.key")})}, consistent_read=True,
            assign={f["seen"]: jsonata(
                f"{{'served': {item_number(item, fair.SERVED)}, 'tickets': {item_number(item, fair.TICKETS)}, "
                f"'free': ($not($exists({item}.`{protocol.OWNER}`.S)) or {item_number(item, protocol.EXPIRES_AT)} < $millis())}}")},
            outputs=jsonata("$states.input"))
        retry_transient(count)
        full = sfn.Fail.jsonata(section, "QueueFull", state_name=section.state_name("QueueFull"), error=ERROR_QUEUE_FULL,
                                cause=fair.queue_full_cause(self.queue.waiters))
        section.record(full, Role.QUEUE_FULL)
        seen = f"${f['seen']}"
        room = sfn.Choice.jsonata(section, "Room", state_name=section.state_name("Room?"))
        room.when(sfn.Condition.jsonata(jsonata(f"{seen}.free and {seen}.served = {seen}.tickets")), fast)
        room.when(sfn.Condition.jsonata(jsonata(f"{seen}.tickets - {seen}.served >= {self.queue.waiters}")), full)
        room.otherwise(enqueue)
        count.next(room)
        count.add_catch(left, **self._on_error)
        enqueue.add_catch(count, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
        return enqueue, count

    def _build_supersede(self, then: sfn.State) -> sfn.State:
        """After ENQUEUE_NEWEST: the ticket it superseded (if any) - take its row (a DeleteItem
        returning it) and wake a parked waiter with ``Lock.Superseded`` (its response lost or
        not: the ticket's fate was decided by ENQUEUE_NEWEST). Then ``then`` (my park) - or, when
        the enqueue found the lock free, look first (the release that freed it may have marked
        the ticket I superseded ready: nobody else would hand the lock on)."""
        section, f = self._section, fair_vars(self._section)
        sup = f"${f['superseded']}"
        take = tasks.DynamoDeleteItem.jsonata(
            section, section.state_name("TakeSuperseded"), table=section.table,
            key=row_key(f"{ENTRY}.key", f"{sup}.ticket"), return_values=tasks.DynamoReturnValues.ALL_OLD,
            assign={f["superseded"]: jsonata(f"$merge([{sup}, {{'row': $states.result.Attributes}}])")},
            outputs=jsonata("$states.input"))
        retry_transient(take)
        wake = tasks.CallAwsService.jsonata(
            section, section.state_name("WakeSuperseded"), service="sfn", action="sendTaskFailure",
            parameters={"TaskToken": jsonata(f"{sup}.row.token.S"), "Error": ERROR_SUPERSEDED,
                        "Cause": jsonata(fair.superseded_cause_expression(f"{ENTRY}.owner"))},
            iam_action="states:SendTaskFailure", iam_resources=["*"], outputs=jsonata("$states.input"))
        wake.add_retry(errors=[fair.WAKE_THROTTLED], interval=Duration.seconds(1), backoff_rate=2.0, max_attempts=3,
                       jitter_strategy=sfn.JitterType.FULL)
        after = sfn.Choice.jsonata(section, "FreeAtEnqueue", state_name=section.state_name("FreeAtEnqueue?"))
        after.when(sfn.Condition.jsonata(jsonata(f"{sup}.free")), self._inspect_state).otherwise(then)
        for t in (take, wake):
            t.add_catch(after, errors=["States.ALL"], outputs=jsonata("$states.input"))
        wake.next(after)
        parked = sfn.Choice.jsonata(section, "SupersededParked", state_name=section.state_name("SupersededParked?"))
        parked.when(sfn.Condition.jsonata(jsonata(
            f"$exists({sup}.row.token.S) and $substring({sup}.row.token.S, 0, {len(fair.CLIENT_LEASE_PREFIX)}) "
            f"!= '{fair.CLIENT_LEASE_PREFIX}'")), wake).otherwise(after)
        take.next(parked)
        supersedes = sfn.Choice.jsonata(section, "Supersedes", state_name=section.state_name("Supersedes?"))
        supersedes.when(sfn.Condition.jsonata(jsonata(f"{sup}.ticket > 0")), take).otherwise(after)
        return supersedes

    def _superseded(self, cause: str, suffix: str = "") -> sfn.State:
        """My ticket was superseded: drop my row (if any), then fail ``Lock.Superseded``."""
        section, f = self._section, fair_vars(self._section)
        fail = sfn.Fail.jsonata(section, f"Superseded{suffix}", state_name=section.state_name(f"Superseded{suffix}"),
                                error=ERROR_SUPERSEDED, cause=cause)
        section.record(fail, Role.SUPERSEDED)
        drop = self._delete_row(f"DropSuperseded{suffix}", f"{ENTRY}.key", f"${f['ticket']}")
        drop.add_catch(fail, errors=["States.ALL"], outputs=jsonata("$states.input"))
        return drop.next(fail)

    def _build_park(self, head: sfn.State) -> sfn.State:
        """Park on a task token in my row; woken = granted: confirm it (CLAIM), then the work."""
        section, v, f = self._section, self._section.variables, fair_vars(self._section)
        ticket = f"${f['ticket']}"
        values = {
            ":me": {"S": jsonata(f"{ENTRY}.owner")}, ":token": {"S": jsonata("$states.context.Task.Token")},
            ":lease": {"N": str(int(self._lease_ms))}, ":grace": {"N": jsonata(f"$string({ENTRY}.grace)")},
        }
        args = fair.arguments("", fair.PARK, values)
        args.pop("ReturnValues")
        args["Key"] = {protocol.KEY_ATTRIBUTE: {"S": jsonata(fair.row_key_expression(f"{ENTRY}.key", ticket))}}
        max_wait_ms = section.max_wait_ms
        distance = f"({ticket} - ${f['seen']}.served)"
        if self.supersedes:  # the tickets between are superseded, not waiting: at most ``waiters`` ahead
            distance = f"$min([{distance}, {self.queue.waiters}])"
        timeout = jsonata(fair.park_timeout_expression(
            park_timeout_s=self.park_timeout_s, distance=distance, wait_variable=v["wait"], max_wait_ms=max_wait_ms))
        if self.supersedes:
            park = self._park_unless_superseded(args, ticket, timeout)
        else:
            park = JsonataCustomState(section, section.state_name("Park"), state_json={
                "Type": "Task",
                "QueryLanguage": "JSONata",
                "Resource": f"arn:{Stack.of(section).partition}:states:::aws-sdk:dynamodb:updateItem.waitForTaskToken",
                "Arguments": {"TableName": section.table.table_name, **args},
                "TimeoutSeconds": timeout,
                "Output": jsonata("$states.input"),  # (the entry record, for the confirm)
            })
        park.add_retry(errors=list(errors.SDK_TRANSIENT_ERRORS), interval=Duration.seconds(protocol.TRANSIENT_RETRY["interval_s"]),
                       backoff_rate=2.0, max_attempts=protocol.TRANSIENT_RETRY["max_attempts"],
                       jitter_strategy=sfn.JitterType.FULL)
        # refused (the ticket was marked ready, or passed - or, coalescing, superseded): try as the head
        park.add_catch(head, errors=[TRANSACTION_CANCELED if self.supersedes else SDK_CONDITION_FAILED],
                       outputs=jsonata("$states.input"))
        # woken = granted, unconfirmed: CLAIM it before the work. The releaser cannot tell a
        # wake-up whose response was lost from one that failed, and revokes an unconfirmed
        # grant after its claim window; CLAIM and REVOKE are serialized on the lock item, so
        # exactly one wins - refused, the grant was taken back: look again, never work
        confirm = self._claim("Confirm", ticket, outputs=jsonata(f"{ENTRY}.input"))
        confirm.next(section.protected)
        park.next(confirm)
        self._confirm = confirm
        self._park = park
        self._first_wait = park
        return park

    def _park_unless_superseded(self, row_args: dict, ticket: str, timeout: str) -> sfn.TaskStateBase:
        """A coalescing waiter's park: PARK on my row and PARK_UNLESS_CUT on the lock item, in one
        transaction (``transactWriteItems.waitForTaskToken``; each item needs its action:
        ``UpdateItem``, ``ConditionCheckItem``)."""
        section = self._section
        table = section.table.table_name
        check = fair.arguments(jsonata(f"{ENTRY}.key"), fair.PARK_UNLESS_CUT,
                               {":ticket": {"N": jsonata(f"$string({ticket})")}})
        del check["ReturnValues"], check["UpdateExpression"]
        park = _ParkTask(
            section, section.state_name("Park"), query_language=sfn.QueryLanguage.JSONATA,
            service="dynamodb", action="transactWriteItems",
            parameters={"TransactItems": [{"ConditionCheck": {"TableName": table, **check}},
                                          {"Update": {"TableName": table, **row_args}}]},
            integration_pattern=sfn.IntegrationPattern.WAIT_FOR_TASK_TOKEN,
            iam_action="dynamodb:UpdateItem", iam_resources=[section.table.table_arn],
            additional_iam_statements=[iam.PolicyStatement(actions=["dynamodb:ConditionCheckItem"],
                                                           resources=[section.table.table_arn])],
            outputs=jsonata("$states.input"),
        )
        park.timeout_expression = timeout
        return park

    def _build_polling(self, head: sfn.State) -> sfn.State:
        """EXPRESS (no task tokens): keep my row's lease alive, wait a round of the wait policy,
        try as the head (a handoff to me: the refused try finds me the owner and claims)."""
        section, v, f = self._section, self._section.variables, fair_vars(self._section)
        policy = section.wait_policy
        ticket = f"${f['ticket']}"
        poll = update_item_task(section, section.state_name("Poll"), section.table, {
            **fair.arguments(jsonata(fair.row_key_expression(f"{ENTRY}.key", ticket)), fair.PARK, {
                ":me": {"S": jsonata(f"{ENTRY}.owner")},
                ":token": {"S": jsonata(fair.lease_token_expression(policy.max_interval))},
                ":lease": {"N": str(int(self._lease_ms))}, ":grace": {"N": jsonata(f"$string({ENTRY}.grace)")}})})
        retry_transient(poll)
        wait = JsonataCustomState(section, section.state_name("Wait"), state_json={
            "Type": "Wait", "QueryLanguage": "JSONata",
            "Seconds": jsonata(protocol.wait_seconds_expression(policy, v["wait"], section.max_wait_ms)),
        })
        poll.add_catch(head, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
        poll.add_catch(self._leave, **self._on_error)
        poll.next(wait)
        wait.next(head)
        again = self._waited_enough(poll, bookkeeping=True)
        self._first_wait = poll
        return again

    def _waited_enough(self, otherwise: sfn.State, bookkeeping: bool = False) -> sfn.State:
        section, v = self._section, self._section.variables
        if section.max_wait_ms is None:
            return otherwise
        waited = sfn.Choice.jsonata(section, f"WaitedEnough{'Poll' if bookkeeping else ''}",
                                    state_name=section.state_name(f"WaitedEnough{'Poll' if bookkeeping else ''}?"))
        waited.when(
            sfn.Condition.jsonata(jsonata(protocol.waited_enough_expression(v["wait"], section.max_wait_ms))),
            self._leave,
        ).otherwise(otherwise)
        if bookkeeping:
            return sfn.Pass.jsonata(section, "Round", state_name=section.state_name("Round"), outputs=jsonata("$states.input"),
                                    assign={v["wait"]: jsonata(protocol.wait_bookkeeping_expression(v["wait"]))}).next(waited)
        return waited

    def _build_inspect(self, *, claim, requeue, head, wait_again) -> sfn.State:
        """The fallback: read the lock item and decide."""
        section, v, f = self._section, self._section.variables, fair_vars(self._section)
        seen, ticket = f"${f['seen']}", f"${f['ticket']}"
        item = "$states.result.Item"
        read = tasks.DynamoGetItem.jsonata(
            section, section.state_name("Inspect"), table=section.table,
            key={protocol.KEY_ATTRIBUTE: attribute_value({"S": jsonata(f"{ENTRY}.key")})}, consistent_read=True,
            assign={
                f["seen"]: jsonata(
                    f"{{'owner': {item_string(item, protocol.OWNER)}, 'expiresAt': {item_number(item, protocol.EXPIRES_AT)}, "
                    f"'served': {item_number(item, fair.SERVED)}, 'tickets': {item_number(item, fair.TICKETS)}, "
                    f"'cut': {item_number(item, fair.CUT)}, 'cutBy': {item_string(item, fair.CUT_BY)}}}"),
                v["holder"]: jsonata(protocol.holder_expression()),
            },
            outputs=jsonata("$states.input"),
        )
        retry_transient(read)
        read.add_catch(wait_again, errors=["States.ALL"], outputs=jsonata("$states.input"))
        self._inspect_state = read
        stale = protocol.stale_owner_expression(v["wait"])
        free = f"({seen}.owner = '' or {seen}.owner = ({stale}) or {seen}.expiresAt < $millis())"
        helper = build_handoff(section, "Help", park_timeout_s=self.park_timeout_s, supersedes=self.supersedes,
                               key=f"{ENTRY}.key", me=f"{ENTRY}.owner", start=f"{seen}.served",
                               holding=False, then=read, stale=stale, self_grant=head, after_mark=wait_again)
        look = sfn.Choice.jsonata(section, "Decide", state_name=section.state_name("Decide?"))
        look.when(sfn.Condition.jsonata(jsonata(f"{seen}.owner = {ENTRY}.owner and {seen}.served = {ticket}")), claim)
        if self.supersedes:  # not granted, and superseded (GRANT can never grant my ticket now)
            look.when(sfn.Condition.jsonata(jsonata(f"{seen}.cut >= {ticket}")),
                      self._superseded(jsonata(fair.superseded_cause_expression(f"{seen}.cutBy")), "OnLook"))
        look.when(sfn.Condition.jsonata(jsonata(f"{seen}.served >= {ticket}")), requeue)
        look.when(sfn.Condition.jsonata(jsonata(f"{seen}.served = {ticket} - 1 and {free}")), head)
        look.when(sfn.Condition.jsonata(jsonata(free)), helper)
        if not self.polling:
            describe = JsonataCustomState(section, section.state_name("DescribeHolder"), state_json={
                "Type": "Task", "QueryLanguage": "JSONata",
                "Resource": f"arn:{Stack.of(section).partition}:states:::aws-sdk:sfn:describeExecution",
                "Arguments": {"ExecutionArn": jsonata(protocol.holder_execution_expression(v["holder"]))},
                "Assign": {v["wait"]: jsonata(protocol.after_liveness_check_expression(v["wait"], v["holder"]))},
                "Output": jsonata("$states.input"),
            })
            section.record(describe, Role.LIVENESS_CHECK)
            section.record(describe, Role.TAKEOVER, v["wait"])
            describe.add_catch(wait_again, errors=["States.ALL"], outputs=jsonata("$states.input"))
            stale_now = sfn.Choice.jsonata(section, "HolderEnded", state_name=section.state_name("HolderEnded?"))
            stale_now.when(sfn.Condition.jsonata(jsonata(f"$type(${v['wait']}.stale) = 'string'")), look).otherwise(wait_again)
            describe.next(stale_now)
            # a holder whose hold registered a presence token is probed first (the mutex's
            # probe): a hold cancelled with its branch (a sibling failed, the user caught it)
            # leaves its execution RUNNING, which DescribeExecution cannot tell from a live one
            # (``$not(... = ...)``: a comparison with a missing value is false in JSONata, so
            # ``$type(missing) != 'string'`` never held and no fallback ever asked about a holder)
            unproven = f"{seen}.owner != '' and $not($type(${v['wait']}.stale) = 'string')"
            look.when(sfn.Condition.jsonata(jsonata(
                f"{unproven} and {protocol.holder_present_expression(v['holder'])}")),
                section.probe_presence(describe, then=wait_again))
            look.when(sfn.Condition.jsonata(jsonata(
                f"{unproven} and {protocol.holder_is_execution_expression(v['holder'])}")), describe)
        look.otherwise(wait_again)
        return read.next(look)

    def _build_leave(self, then: sfn.State) -> sfn.State:
        """Give up my place: mark my row left, then read the lock - handed to me meanwhile: the
        work after all (confirmed by CLAIM)."""
        section, f = self._section, fair_vars(self._section)
        ticket = f"${f['ticket']}"
        leave = update_item_task(
            section, section.state_name("Leave"), section.table,
            {**fair.arguments(jsonata(fair.row_key_expression(f"{ENTRY}.key", ticket)), fair.LEAVE,
                              {":me": {"S": jsonata(f"{ENTRY}.owner")}, ":one": {"N": "1"}})},
        )
        retry_transient(leave)
        leave.add_catch(then, errors=["States.ALL"], outputs=jsonata("$states.input"))
        claim = self._claim("ClaimOnLeave", ticket, outputs=jsonata(f"{ENTRY}.input"))
        claim.add_catch(then, errors=["States.ALL"], outputs=jsonata("$states.input"))
        claim.next(section.protected)
        has_ticket = sfn.Choice.jsonata(section, "Queued", state_name=section.state_name("Queued?"))
        has_ticket.when(sfn.Condition.jsonata(jsonata(f"$type({ticket}) = 'number'")), leave).otherwise(then)
        leave.next(claim)
        return has_ticket


    # -- pieces ----------------------------------------------------------------------------

    def _claim(self, suffix: str, ticket: str, *, outputs: Optional[str] = None) -> sfn.TaskStateBase:
        """CLAIM of a grant handed to my ticket (``ticket``: JSONata): the lock is mine, read
        as my ``$lock`` record."""
        section, v = self._section, self._section.variables
        claim = update_item_task(
            section, section.state_name(suffix), section.table,
            fair.arguments(jsonata(f"{ENTRY}.key"), fair.CLAIM,
                           {":me": {"S": jsonata(f"{ENTRY}.owner")}, ":ticket": {"N": jsonata(f"$string({ticket})")}},
                           return_values="ALL_NEW"),
            assign={v["lock"]: jsonata(self._lock_record("$states.result.Attributes", key=f"{ENTRY}.key",
                                                         owner=f"{ENTRY}.owner", ticket=ticket)),
                    v["wait"]: jsonata("null")},
            outputs=outputs,
        )
        section.record(claim, Role.ACQUISITION, v["lock"])
        retry_transient(claim)
        return claim

    def _delete_row(self, suffix: str, key: str, ticket: str, *, outputs: str = "$states.input") -> tasks.DynamoDeleteItem:
        section = self._section
        d = tasks.DynamoDeleteItem.jsonata(section, suffix, state_name=section.state_name(suffix), table=section.table,
                                           key=row_key(key, ticket), outputs=jsonata(outputs))
        retry_transient(d)
        return d
