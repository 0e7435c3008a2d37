"""The fair kind's driver of the ticket queue (``Lock.fair``;
:mod:`~locked_workflow.constructs_lib.kinds.ticket_queue` builds the queue): what the fair
lock decides in it - its ticket (ENQUEUE, bounded or coalescing with ``queue``), the head's
own grant (GRANT to me), its claim (CLAIM), its park on a task token in the waiter's row (or,
EXPRESS, a polled lease on it), its look at the lock item and what a look finds besides the
queue's cases (superseded; the handoff for a head that does not move; a holder to probe and
describe) - :mod:`locked_workflow.state_machines.fair_protocol` wired into states.
"""

from __future__ import annotations

from typing import Optional

from aws_cdk import Duration, Stack, aws_iam as iam, aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks

from locked_workflow.constructs_lib.custom_state import JsonataCustomState
from locked_workflow.constructs_lib.dynamodb_tasks import attribute_value, retry_transient, update_item_task
from locked_workflow.constructs_lib.section_record import Role
from locked_workflow.constructs_lib.kinds.fair_handoff import build_handoff, grant_arguments
from locked_workflow.constructs_lib.kinds.items import item_number, item_string
from locked_workflow.constructs_lib.kinds.ticket_queue import QueueDriver, TicketQueue, Wait, row_key
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


class FairQueueDriver(QueueDriver):
    """The fair kind's driver of the ticket queue
    (:class:`~locked_workflow.constructs_lib.kinds.ticket_queue.TicketQueue`), made for one
    :meth:`~locked_workflow.constructs_lib.kinds.fair.FairKind.build_acquire` call: my turn is
    ``served + 1`` on a free lock (ACQUIRE's condition), granted is ``owner = me`` at my
    ticket. The granter takes my row (TAKE) and may revoke an unconfirmed grant, so a woken
    waiter confirms (``Confirm``) straight into its work."""

    granter_takes_row = True

    def __init__(self, *, values: dict, park_timeout_s: int, polling: bool, queue: Optional[QueueLimit]) -> None:
        #: The fast path's values (the ticket's are among them).
        self.values = values
        #: The kind's settings (see ``Lock.fair``).
        self.park_timeout_s, self.polling, self.queue = park_timeout_s, polling, queue
        #: Coalescing (``QueueLimit.keep_newest``): a newcomer supersedes the oldest waiter.
        self.supersedes = queue is not None and queue.supersedes
        # (a coalescing park is a transaction with PARK_UNLESS_CUT; a coalescing ticket may
        # have found the lock free: it looks before it parks)
        self.park_refused = TRANSACTION_CANCELED if self.supersedes else SDK_CONDITION_FAILED
        self.looks_after_ticket = self.supersedes

    @staticmethod
    def _lock_record(of: str, *, ticket: str) -> str:
        """JSONata: the ``$lock`` record of a grant read from ``of`` (a lock item), plus its ticket."""
        return (
            f"{{'key': {ENTRY}.key, 'owner': {ENTRY}.owner, 'fence': {item_number(of, protocol.FENCE)}, "
            f"'acquiredAt': {item_number(of, protocol.ACQUIRED_AT)}, 'expiresAt': {item_number(of, protocol.EXPIRES_AT)}, "
            f"'ticket': {ticket}, '{protocol.REQUESTED_AT}': {ENTRY}.{protocol.REQUESTED_AT}, {protocol.generation_field()}}}"
        )

    @staticmethod
    def _free(q: TicketQueue) -> str:
        stale = protocol.stale_owner_expression(q.section.variables["wait"])
        return f"({q.seen}.owner = '' or {q.seen}.owner = ({stale}) or {q.seen}.expiresAt < $millis())"

    def granted(self, q: TicketQueue) -> str:
        return f"{q.seen}.owner = {ENTRY}.owner and {q.seen}.served = {q.ticket}"

    def my_turn(self, q: TicketQueue) -> str:
        return self._free(q)

    def build_admit(self, q: TicketQueue) -> sfn.TaskStateBase:
        """The head takes the lock itself (GRANT to me), then drops its row."""
        section, v = q.section, q.section.variables
        head = update_item_task(
            section, section.state_name("AcquireHead"), section.table,
            grant_arguments(key=f"{ENTRY}.key", me=f"{ENTRY}.owner", nxt=f"{ENTRY}.owner",
                            stale=protocol.stale_owner_expression(v["wait"]), prev=f"{q.ticket} - 1",
                            expires=protocol.lease_end_expression(q.lease_ms), grace=f"$string({ENTRY}.grace)"),
            assign={v["lock"]: jsonata(self._lock_record("$states.result.Attributes", ticket=q.ticket)),
                    v["wait"]: jsonata("null")},
        )
        section.record(head, Role.ACQUISITION, v["lock"])
        retry_transient(head)
        return head

    def build_wait(self, q: TicketQueue) -> Wait:
        if self.polling:
            return self._build_polling(q)
        park = self._build_park(q)
        return Wait(first=park, again=park, park=park)

    def park_catches(self, q: TicketQueue, park: sfn.TaskStateBase) -> None:
        # a newer run superseded me (its wake-up): leave, never work; a nudge: look
        if self.supersedes:
            park.add_catch(self._superseded(q, jsonata("$states.input.Cause")), errors=[ERROR_SUPERSEDED])
        park.add_catch(q.inspect, errors=[LOOK], outputs=jsonata("$states.input"))

    def after_enqueue(self, q: TicketQueue, wait: sfn.State) -> sfn.State:
        return self._build_supersede(q, wait) if self.supersedes else wait

    def leave_entry(self, q: TicketQueue, leave: sfn.State) -> sfn.State:
        """A leave with no ticket (a coalescing run refused before its ticket) has no row to mark."""
        has_ticket = sfn.Choice.jsonata(q.section, "Queued", state_name=q.section.state_name("Queued?"))
        return has_ticket.when(sfn.Condition.jsonata(jsonata(f"$type({q.ticket}) = 'number'")), leave).otherwise(q.left)

    def build_enqueue(self, q: TicketQueue, fast: sfn.TaskStateBase) -> tuple:
        """The ticket: ENQUEUE (ENQUEUE_NEWEST with ``keep_newest``; ENQUEUE_BOUNDED after a read of
        the lock item with ``keep_oldest``). Returns (the enqueue, the state a refused fast path goes to)."""
        section, f = q.section, q.vars
        result = "$states.result.Attributes"
        write, values = fair.ENQUEUE, {k: self.values[k] for k in fair.ENQUEUE.value_names()}
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
        count.add_catch(q.left, **q.on_error)
        enqueue.add_catch(count, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
        return enqueue, count

    def _build_supersede(self, q: TicketQueue, then: sfn.State) -> sfn.State:
        """After ENQUEUE_NEWEST: the ticket it superseded (if any) - take its row (a DeleteItem
        returning it) and wake a parked waiter with ``Lock.Superseded`` (its response lost or
        not: the ticket's fate was decided by ENQUEUE_NEWEST). Then ``then`` (my park) - or, when
        the enqueue found the lock free, look first (the release that freed it may have marked
        the ticket I superseded ready: nobody else would hand the lock on)."""
        section, f = q.section, q.vars
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
        after.when(sfn.Condition.jsonata(jsonata(f"{sup}.free")), q.inspect).otherwise(then)
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

    @staticmethod
    def _superseded(q: TicketQueue, cause: str, suffix: str = "") -> sfn.State:
        """My ticket was superseded: drop my row (if any), then fail ``Lock.Superseded``."""
        section = q.section
        fail = sfn.Fail.jsonata(section, f"Superseded{suffix}", state_name=section.state_name(f"Superseded{suffix}"),
                                error=ERROR_SUPERSEDED, cause=cause)
        section.record(fail, Role.SUPERSEDED)
        drop = q.delete_row(f"DropSuperseded{suffix}")
        drop.add_catch(fail, errors=["States.ALL"], outputs=jsonata("$states.input"))
        return drop.next(fail)

    def _build_park(self, q: TicketQueue) -> sfn.TaskStateBase:
        """Park on a task token in my row (woken = granted: the queue confirms it, CLAIM, then
        the work - the releaser cannot tell a wake-up whose response was lost from one that
        failed, and revokes an unconfirmed grant after its claim window; CLAIM and REVOKE are
        serialized on the lock item, so exactly one wins - refused, the grant was taken back:
        look again, never work)."""
        section, v, ticket = q.section, q.section.variables, q.ticket
        values = {
            ":me": {"S": jsonata(f"{ENTRY}.owner")}, ":token": {"S": jsonata("$states.context.Task.Token")},
            ":lease": {"N": str(int(q.lease_ms))}, ":grace": {"N": jsonata(f"$string({ENTRY}.grace)")},
        }
        args = fair.arguments("", fair.PARK, values)
        args.pop("ReturnValues")
        args["Key"] = {protocol.KEY_ATTRIBUTE: {"S": jsonata(fair.row_key_expression(f"{ENTRY}.key", ticket))}}
        max_wait_ms = section.max_wait_ms
        distance = f"({ticket} - {q.seen}.served)"
        if self.supersedes:  # the tickets between are superseded, not waiting: at most ``waiters`` ahead
            distance = f"$min([{distance}, {self.queue.waiters}])"
        timeout = jsonata(fair.park_timeout_expression(
            park_timeout_s=self.park_timeout_s, distance=distance, wait_variable=v["wait"], max_wait_ms=max_wait_ms))
        if self.supersedes:
            park = self._park_unless_superseded(q, args, timeout)
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
        return park

    @staticmethod
    def _park_unless_superseded(q: TicketQueue, row_args: dict, timeout: str) -> sfn.TaskStateBase:
        """A coalescing waiter's park: PARK on my row and PARK_UNLESS_CUT on the lock item, in one
        transaction (``transactWriteItems.waitForTaskToken``; each item needs its action:
        ``UpdateItem``, ``ConditionCheckItem``)."""
        section = q.section
        table = section.table.table_name
        check = fair.arguments(jsonata(f"{ENTRY}.key"), fair.PARK_UNLESS_CUT,
                               {":ticket": {"N": jsonata(f"$string({q.ticket})")}})
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

    @staticmethod
    def _build_polling(q: TicketQueue) -> Wait:
        """EXPRESS (no task tokens): keep my row's lease alive, wait a round of the wait policy,
        try as the head (a handoff to me: the refused try finds me the owner and claims)."""
        section, v = q.section, q.section.variables
        policy = section.wait_policy
        poll = update_item_task(section, section.state_name("Poll"), section.table, {
            **fair.arguments(jsonata(fair.row_key_expression(f"{ENTRY}.key", q.ticket)), fair.PARK, {
                ":me": {"S": jsonata(f"{ENTRY}.owner")},
                ":token": {"S": jsonata(fair.lease_token_expression(policy.max_interval))},
                ":lease": {"N": str(int(q.lease_ms))}, ":grace": {"N": jsonata(f"$string({ENTRY}.grace)")}})})
        retry_transient(poll)
        wait = JsonataCustomState(section, section.state_name("Wait"), state_json={
            "Type": "Wait", "QueryLanguage": "JSONata",
            "Seconds": jsonata(protocol.wait_seconds_expression(policy, v["wait"], section.max_wait_ms)),
        })
        poll.add_catch(q.admit, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
        poll.add_catch(q.leave, **q.on_error)
        poll.next(wait)
        wait.next(q.admit)
        again = q.waited_enough(poll, suffix="WaitedEnoughPoll")
        if again is not poll:  # (a round: the wait's bookkeeping, then max_wait)
            again = sfn.Pass.jsonata(section, "Round", state_name=section.state_name("Round"), outputs=jsonata("$states.input"),
                                     assign={v["wait"]: jsonata(protocol.wait_bookkeeping_expression(v["wait"]))}).next(again)
        return Wait(first=poll, again=again, park=None)

    @staticmethod
    def build_inspect(q: TicketQueue) -> sfn.TaskStateBase:
        """The fallback's read: the lock item (its owner, lease, counters and cut) and its holder."""
        section, v = q.section, q.section.variables
        item = "$states.result.Item"
        read = tasks.DynamoGetItem.jsonata(
            section, section.state_name("Inspect"), table=section.table,
            key={protocol.KEY_ATTRIBUTE: attribute_value({"S": jsonata(f"{ENTRY}.key")})}, consistent_read=True,
            assign={
                q.vars["seen"]: jsonata(
                    f"{{'owner': {item_string(item, protocol.OWNER)}, 'expiresAt': {item_number(item, protocol.EXPIRES_AT)}, "
                    f"'served': {item_number(item, fair.SERVED)}, 'tickets': {item_number(item, fair.TICKETS)}, "
                    f"'cut': {item_number(item, fair.CUT)}, 'cutBy': {item_string(item, fair.CUT_BY)}}}"),
                v["holder"]: jsonata(protocol.holder_expression()),
            },
            outputs=jsonata("$states.input"),
        )
        retry_transient(read)
        return read

    def ended_branches(self, q: TicketQueue) -> list:
        if not self.supersedes:
            return []
        # not granted, and superseded (GRANT can never grant my ticket now)
        return [(f"{q.seen}.cut >= {q.ticket}",
                 self._superseded(q, jsonata(fair.superseded_cause_expression(f"{q.seen}.cutBy")), "OnLook"))]

    def behind_branches(self, q: TicketQueue, decide: sfn.Choice) -> list:
        """Behind a free lock: the handoff for its head; held by a holder whose hold registered
        a presence token: probe it; held by another execution: describe it."""
        section, v, seen = q.section, q.section.variables, q.seen
        free = self._free(q)
        helper = build_handoff(section, "Help", park_timeout_s=self.park_timeout_s, supersedes=self.supersedes,
                               key=f"{ENTRY}.key", me=f"{ENTRY}.owner", start=f"{seen}.served", holding=False,
                               then=q.inspect, stale=protocol.stale_owner_expression(v["wait"]), self_grant=q.admit,
                               after_mark=q.wait_again)
        branches = [(free, helper)]
        if self.polling:
            return branches
        describe = JsonataCustomState(section, section.state_name("DescribeHolder"), state_json={
            "Type": "Task", "QueryLanguage": "JSONata",
            "Resource": f"arn:{Stack.of(section).partition}:states:::aws-sdk:sfn:describeExecution",
            "Arguments": {"ExecutionArn": jsonata(protocol.holder_execution_expression(v["holder"]))},
            "Assign": {v["wait"]: jsonata(protocol.after_liveness_check_expression(v["wait"], v["holder"]))},
            "Output": jsonata("$states.input"),
        })
        section.record(describe, Role.LIVENESS_CHECK)
        section.record(describe, Role.TAKEOVER, v["wait"])
        describe.add_catch(q.wait_again, errors=["States.ALL"], outputs=jsonata("$states.input"))
        stale_now = sfn.Choice.jsonata(section, "HolderEnded", state_name=section.state_name("HolderEnded?"))
        stale_now.when(sfn.Condition.jsonata(jsonata(f"$type(${v['wait']}.stale) = 'string'")), decide).otherwise(q.wait_again)
        describe.next(stale_now)
        # a holder whose hold registered a presence token is probed first (the mutex's
        # probe): a hold cancelled with its branch (a sibling failed, the user caught it)
        # leaves its execution RUNNING, which DescribeExecution cannot tell from a live one
        # (``$not(... = ...)``: a comparison with a missing value is false in JSONata, so
        # ``$type(missing) != 'string'`` never held and no fallback ever asked about a holder)
        unproven = f"{seen}.owner != '' and $not($type(${v['wait']}.stale) = 'string')"
        return branches + [
            (f"{unproven} and {protocol.holder_present_expression(v['holder'])}",
             section.probe_presence(describe, then=q.wait_again)),
            (f"{unproven} and {protocol.holder_is_execution_expression(v['holder'])}", describe),
        ]

    def build_claim(self, q: TicketQueue, suffix: str, *, outputs: Optional[str] = None) -> sfn.TaskStateBase:
        """CLAIM of a grant handed to my ticket: the lock is mine, read as my ``$lock`` record."""
        section, v = q.section, q.section.variables
        claim = update_item_task(
            section, section.state_name(suffix), section.table,
            fair.arguments(jsonata(f"{ENTRY}.key"), fair.CLAIM,
                           {":me": {"S": jsonata(f"{ENTRY}.owner")}, ":ticket": {"N": jsonata(f"$string({q.ticket})")}},
                           return_values="ALL_NEW"),
            assign={v["lock"]: jsonata(self._lock_record("$states.result.Attributes", ticket=q.ticket)),
                    v["wait"]: jsonata("null")},
            outputs=outputs,
        )
        section.record(claim, Role.ACQUISITION, v["lock"])
        retry_transient(claim)
        return claim
