"""The fair lock kind (``Lock.fair``): the mutex's lock item with a ticket queue of one row per
waiter and direct handoff - :mod:`locked_workflow.state_machines.fair_protocol` wired into a section's states::

    Acquire (fast path) --ok--> work --> Take (the next row, if parked) --> Grant --> Wake (the next one's confirm)
       |                                  |--none--> Release (alone) | --queued--> TakeAny --> Next? --> ...
       |--held or queued--> Enqueue (ticket) --> Park (.waitForTaskToken) --woken--> Confirm (CLAIM) --> work
                                                  |--refused (ready)--> AcquireHead --> work
                                                  |--park timeout / Lock.Look--> Inspect (the fallback)
       Inspect: granted -> Claim -> work | skipped -> Requeue | head of a free lock -> AcquireHead
                | behind a free lock -> the handoff for its head | else -> Park

The woken waiter confirms its grant (``CLAIM``) before its work, so a releaser that saw its
wake-up fail - or lose its response after it was delivered - may take back only a grant nobody
works under: between two holders the critical path is two writes (GRANT, CLAIM) and one
wake-up (``SendTaskSuccess``).
"""

from __future__ import annotations

from typing import Optional

from aws_cdk import Duration, Stack, aws_iam as iam, aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks

from locked_workflow.constructs_lib.custom_state import JsonataCustomState
from locked_workflow.constructs_lib.dynamodb_tasks import attribute_value, retry_transient, update_item_task
from locked_workflow.constructs_lib.lock_kinds import LockedSection, Mutex
from locked_workflow.constructs_lib.queue_limit import QueueLimit
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines import multikey_protocol as multikey
from locked_workflow.state_machines.errors import ERROR_QUEUE_FULL, ERROR_SUPERSEDED, TRANSACTION_CANCELED
from locked_workflow.state_machines.errors import SDK_CONDITION_FAILED  # the park is an aws-sdk call
from locked_workflow.state_machines.errors import SIGNAL_LOOK as LOOK  # a nudge ends a park with it
from locked_workflow.state_machines.lock_protocol import ENTRY, jsonata


def _item_number(item: str, name: str, default: str = "0") -> str:
    return f"($exists({item}.`{name}`.N) ? $number({item}.`{name}`.N) : {default})"


def _item_string(item: str, name: str) -> str:
    return f"($exists({item}.`{name}`.S) ? {item}.`{name}`.S : '')"


class _ParkTask(tasks.CallAwsService):
    """An aws-sdk ``.waitForTaskToken`` task whose ``TimeoutSeconds`` is a JSONata expression
    (the park timeout grows with the distance to the head: ``fair.park_timeout_expression``)."""

    timeout_expression: str = ""

    def to_state_json(self, *args):
        rendered = dict(super().to_state_json(*args))
        rendered["TimeoutSeconds"] = self.timeout_expression
        return rendered


class FairMutex(Mutex):
    """One holder per key, granted in ticket order, handed off directly to the next waiter."""

    name = "fair"
    builds_own_wait_path = True

    def __init__(self, user_key: str, *, park_timeout_s: int, polling: bool = False,
                 queue: Optional[QueueLimit] = None) -> None:
        super().__init__(user_key)
        self.park_timeout_s = park_timeout_s
        #: EXPRESS: no task tokens - poll as the head, keeping a lease on the queue place
        self.polling = polling
        #: the bound on the queue per key (None: unbounded)
        self.queue = queue

    @property
    def parks_on_token(self) -> bool:  # type: ignore[override] - but its EXPRESS form, which polls
        return not self.polling

    @property
    def supersedes(self) -> bool:
        """Coalescing (``QueueLimit.keep_newest``): a newcomer supersedes the oldest waiter."""
        return self.queue is not None and self.queue.supersedes

    def key_expression(self, namespace: str) -> str:
        # the rows' keys add up to ROW_KEY_RESERVE_BYTES to the stored key
        return protocol.key_expression(self.user_key, namespace, fair.ROW_KEY_RESERVE_BYTES)

    # -- variables ---------------------------------------------------------------------------

    def _vars(self, section: "LockedSection") -> dict:
        v = section.variables
        return {"ticket": v["lock"] + "Ticket", "seen": v["lock"] + "Seen", "handoff": v["lock"] + "Handoff",
                "superseded": v["lock"] + "Superseded"}

    def _row(self, key: str, ticket: str) -> dict:
        return {protocol.KEY_ATTRIBUTE: attribute_value({"S": jsonata(fair.row_key_expression(key, ticket))})}

    def _lock_record(self, of: str, *, key: str, owner: str, ticket: str) -> str:
        """JSONata: the ``$lock`` record of a grant read from ``of`` (a lock item), plus its ticket."""
        return (
            f"{{'key': {key}, 'owner': {owner}, 'fence': {_item_number(of, protocol.FENCE)}, "
            f"'acquiredAt': {_item_number(of, protocol.ACQUIRED_AT)}, 'expiresAt': {_item_number(of, protocol.EXPIRES_AT)}, "
            f"'ticket': {ticket}, '{protocol.REQUESTED_AT}': {ENTRY}.{protocol.REQUESTED_AT}, {protocol.generation_field()}}}"
        )

    # -- acquire --------------------------------------------------------------------------

    def build_acquire(self, section: "LockedSection", lease_ms: int):
        v = section.variables
        stale = protocol.stale_owner_expression(v["wait"])
        values = {
            ":me": {"S": jsonata(f"{ENTRY}.owner")}, ":stale": {"S": jsonata(stale)},
            ":now": {"N": jsonata(protocol.NOW_EXPRESSION)},
            ":expiresAt": {"N": jsonata(protocol.lease_end_expression(lease_ms))},
            ":grace": {"N": jsonata(f"$string({ENTRY}.grace)")}, ":one": {"N": "1"}, ":zero": {"N": "0"},
        }
        fast = update_item_task(
            section, section.state_name("Acquire"), section.table,
            fair.arguments(jsonata(protocol.reentered_or(f"{ENTRY}.key", reentered_expression=f"$exists({ENTRY}.reentered)")),
                           fair.FAST_ACQUIRE, values, return_values="ALL_NEW"),
            assign={v["lock"]: jsonata(f"$merge([{protocol.lock_variable_expression()}, "
                                       f"{{'ticket': {_item_number('$states.result.Attributes', fair.SERVED)}}}])"),
                    v["wait"]: jsonata("null")},
            outputs=jsonata(f"{ENTRY}.input"),
        )
        retry_transient(fast)
        self.catch_reentered(section, fast)
        self._section, self._lease_ms, self._values = section, lease_ms, values
        self._build_queue(fast)
        return fast, fast, fast

    def _build_queue(self, fast: sfn.TaskStateBase) -> None:
        section, v, f = self._section, self._section.variables, self._vars(self._section)
        timeout = sfn.Fail.jsonata(
            section, "Timeout", state_name=section.state_name("Timeout"), error=protocol.ERROR_TIMEOUT,
            cause=f"the lock was held by another run for longer than max_wait ({section.max_wait_ms} ms)",
        )
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
            self._grant_arguments(key=f"{ENTRY}.key", me=f"{ENTRY}.owner", nxt=f"{ENTRY}.owner",
                                  stale=protocol.stale_owner_expression(v["wait"]), prev=f"{ticket} - 1",
                                  expires=protocol.lease_end_expression(self._lease_ms), grace=f"$string({ENTRY}.grace)"),
            assign={v["lock"]: jsonata(self._lock_record("$states.result.Attributes", key=f"{ENTRY}.key",
                                                         owner=f"{ENTRY}.owner", ticket=ticket)),
                    v["wait"]: jsonata("null")},
        )
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
        section, f = self._section, self._vars(self._section)
        result = "$states.result.Attributes"
        write, values = fair.ENQUEUE, {k: self._values[k] for k in fair.ENQUEUE.value_names()}
        assign = {f["ticket"]: jsonata(_item_number(result, fair.TICKETS)),
                  f["seen"]: jsonata(f"{{'served': {_item_number(result, fair.SERVED)}}}")}
        if self.supersedes:
            write, values = fair.ENQUEUE_NEWEST, {**values, ":kept": {"N": str(self.queue.waiters - 1)}}
            free = f"($not($exists({result}.`{protocol.OWNER}`.S)) or {_item_number(result, protocol.EXPIRES_AT)} < $millis())"
            assign[f["superseded"]] = jsonata(
                f"{{'ticket': {fair.superseded_ticket_expression(_item_number(result, fair.TICKETS), _item_number(result, fair.SERVED), self.queue.waiters)}, "
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
                f"{{'served': {_item_number(item, fair.SERVED)}, 'tickets': {_item_number(item, fair.TICKETS)}, "
                f"'free': ($not($exists({item}.`{protocol.OWNER}`.S)) or {_item_number(item, protocol.EXPIRES_AT)} < $millis())}}")},
            outputs=jsonata("$states.input"))
        retry_transient(count)
        full = sfn.Fail.jsonata(section, "QueueFull", state_name=section.state_name("QueueFull"), error=ERROR_QUEUE_FULL,
                                cause=fair.queue_full_cause(self.queue.waiters))
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
        section, f = self._section, self._vars(self._section)
        sup = f"${f['superseded']}"
        take = tasks.DynamoDeleteItem.jsonata(
            section, section.state_name("TakeSuperseded"), table=section.table,
            key=self._row(f"{ENTRY}.key", f"{sup}.ticket"), return_values=tasks.DynamoReturnValues.ALL_OLD,
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
        section, f = self._section, self._vars(self._section)
        fail = sfn.Fail.jsonata(section, f"Superseded{suffix}", state_name=section.state_name(f"Superseded{suffix}"),
                                error=ERROR_SUPERSEDED, cause=cause)
        drop = self._delete_row(f"DropSuperseded{suffix}", f"{ENTRY}.key", f"${f['ticket']}")
        drop.add_catch(fail, errors=["States.ALL"], outputs=jsonata("$states.input"))
        return drop.next(fail)

    def _grant_arguments(self, *, key: str, me: str, nxt: str, stale: str, prev: str, expires: str, grace: str) -> dict:
        return fair.arguments(jsonata(key), fair.GRANT, {
            ":me": {"S": jsonata(me)}, ":next": {"S": jsonata(nxt)}, ":stale": {"S": jsonata(stale)},
            ":now": {"N": jsonata(protocol.NOW_EXPRESSION)}, ":expiresAt": {"N": jsonata(expires)},
            ":grace": {"N": jsonata(grace)}, ":one": {"N": "1"}, ":prev": {"N": jsonata(f"$string({prev})")},
            ":ticket": {"N": jsonata(f"$string({prev} + 1)")},
        }, return_values="ALL_NEW")

    def _build_park(self, head: sfn.State) -> sfn.State:
        """Park on a task token in my row; woken = granted: confirm it (CLAIM), then the work."""
        section, v, f = self._section, self._section.variables, self._vars(self._section)
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
        park.add_retry(errors=list(multikey.TRANSIENT_ERRORS), interval=Duration.seconds(protocol.TRANSIENT_RETRY["interval_s"]),
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
        section, v, f = self._section, self._section.variables, self._vars(self._section)
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
        section, v, f = self._section, self._section.variables, self._vars(self._section)
        seen, ticket = f"${f['seen']}", f"${f['ticket']}"
        item = "$states.result.Item"
        read = tasks.DynamoGetItem.jsonata(
            section, section.state_name("Inspect"), table=section.table,
            key={protocol.KEY_ATTRIBUTE: attribute_value({"S": jsonata(f"{ENTRY}.key")})}, consistent_read=True,
            assign={
                f["seen"]: jsonata(
                    f"{{'owner': {_item_string(item, protocol.OWNER)}, 'expiresAt': {_item_number(item, protocol.EXPIRES_AT)}, "
                    f"'served': {_item_number(item, fair.SERVED)}, 'tickets': {_item_number(item, fair.TICKETS)}, "
                    f"'cut': {_item_number(item, fair.CUT)}, 'cutBy': {_item_string(item, fair.CUT_BY)}}}"),
                v["holder"]: jsonata(protocol.holder_expression()),
            },
            outputs=jsonata("$states.input"),
        )
        retry_transient(read)
        read.add_catch(wait_again, errors=["States.ALL"], outputs=jsonata("$states.input"))
        self._inspect_state = read
        stale = protocol.stale_owner_expression(v["wait"])
        free = f"({seen}.owner = '' or {seen}.owner = ({stale}) or {seen}.expiresAt < $millis())"
        helper = self._build_handoff("Help", key=f"{ENTRY}.key", me=f"{ENTRY}.owner", start=f"{seen}.served",
                                     holding=False, then=read, stale=stale, self_grant=head)
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
        section, f = self._section, self._vars(self._section)
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

    # -- the handoff -----------------------------------------------------------------------

    def _build_handoff(self, suffix: str, *, key: str, me: str, start: str, holding: bool, then: Optional[sfn.State],
                       stale: str, self_grant: Optional[sfn.State] = None, lost: Optional[sfn.State] = None,
                       left: Optional[sfn.State] = None, fence: str = "0") -> sfn.State:
        """Hand the lock to the next live waiter: take row ``c + 1`` (c: ``start`` at first),
        then grant and wake it, skip it, or release and mark. ``holding``: I hold the lock
        (a release); else the lock is free and I run the handoff for a head that does not move
        (``self_grant``: where to go when that head is me). Ends in ``then`` (None: an end)."""
        section, f = self._section, self._vars(self._section)
        h = "$" + f["handoff"]
        name = lambda s: section.state_name(f"{suffix}.{s}")  # noqa: E731
        end = then or sfn.Succeed(section, f"{suffix}.Done", state_name=name("Done"))
        row = "$states.result.Attributes"
        hole_ms = self.park_timeout_s * 1000

        # (the release: a re-entered section writes nothing)
        reentered = protocol.reentered_or(key, reentered_expression=f"${section.variables['lock']}.reentered = true")

        def take(state: str, c: str, first: bool) -> tasks.DynamoDeleteItem:
            k = key
            if first and lost is not None and not holding:
                k = reentered
            t = tasks.DynamoDeleteItem.jsonata(
                section, f"{suffix}.{state}", state_name=name(state), table=section.table,
                key=self._row(k, f"{c} + 1"), return_values=tasks.DynamoReturnValues.ALL_OLD,
                assign={f["handoff"]: jsonata(
                    f"{{'c': {c}, 'holding': {('true' if holding else 'false') if first else f'{h}.holding'}, "
                    f"'row': {row}, 'st': {fair.row_state_expression(row, hole_ms=hole_ms)}}}")},
                outputs=jsonata("$states.input"),
            )
            retry_transient(t)
            return t

        # a release tries the common cases first: the next row's waiter is parked (take it and
        # grant it: no decision to make), else nobody queues (RELEASE_ALONE: the whole release);
        # else the full handoff from ``first`` (take whatever row is there, then decide)
        first = take("TakeAny" if holding else "Take", start, True)
        again = take("TakeNext", f"{h}.c", False)
        # coalescing: pass every superseded ticket at once (JUMP) before a skip, a mark or a
        # release's mark, and after a refused grant of one (its waiter woken: superseded)
        jump = no_jump = None
        if self.supersedes:
            jump = update_item_task(section, name("Jump"), section.table, fair.arguments(jsonata(key), fair.JUMP, {
                ":me": {"S": jsonata(me)}, ":stale": {"S": jsonata(stale)}, ":now": {"N": jsonata(protocol.NOW_EXPRESSION)},
                ":prev": {"N": jsonata(f"$string({h}.c)")}}, return_values="ALL_NEW"),
                assign={f["handoff"]: jsonata(f"$merge([{h}, {{'c': {_item_number(row, fair.SERVED)}}}])")})
            retry_transient(jump)
            no_jump = sfn.Choice.jsonata(section, f"{suffix}.NoJump", state_name=name("NoJump?"))
            jump.add_catch(no_jump, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
            jump.add_catch(end, errors=["States.ALL"], outputs=jsonata("$states.input"))
            jump.next(again)
        quick = None
        if holding:
            quick = tasks.DynamoDeleteItem.jsonata(
                section, f"{suffix}.Take", state_name=name("Take"), table=section.table,
                key=self._row(reentered if lost is not None else key, f"{start} + 1"),
                condition_expression=fair.TAKE_PARKED.condition,
                expression_attribute_names=fair.attribute_names(fair.TAKE_PARKED),
                expression_attribute_values={k: attribute_value(v) for k, v in fair.TAKE_PARKED_VALUES.items()},
                return_values=tasks.DynamoReturnValues.ALL_OLD,
                assign={f["handoff"]: jsonata(f"{{'c': {start}, 'holding': true, 'row': {row}, 'st': 'wake'}}")},
                outputs=jsonata("$states.input"),
            )
            retry_transient(quick)
            if left is not None:
                quick.add_catch(left, errors=[protocol.QUERY_EVALUATION_ERROR], outputs=jsonata("$states.input"))
        elif left is not None:
            first.add_catch(left, errors=[protocol.QUERY_EVALUATION_ERROR], outputs=jsonata("$states.input"))
        nxt = f"{h}.row.owner.S"
        grant_args = self._grant_arguments(
            key=key, me=me, nxt=nxt, stale=stale, prev=f"{h}.c",
            expires=f"$string($millis() + $number({h}.row.`{fair.LEASE}`.N))", grace=f"{h}.row.`{fair.GRACE_MS}`.N")
        grant_record = (
            f"{{'owner': {_item_string(row, protocol.OWNER)}, 'fence': {_item_number(row, protocol.FENCE)}, "
            f"'acquiredAt': {_item_number(row, protocol.ACQUIRED_AT)}, 'expiresAt': {_item_number(row, protocol.EXPIRES_AT)}}}")
        # a grant that hands on my own hold ends it: its length for monitoring (see held_assign)
        held = section.held_assign(when=f"{h}.holding = true") if holding else {}
        grant = update_item_task(section, name("Grant"), section.table, grant_args,
                                 assign={f["handoff"]: jsonata(f"$merge([{h}, {{'grant': {grant_record}}}])"), **held})
        retry_transient(grant)
        poller = update_item_task(section, name("GrantPoller"), section.table, grant_args, assign=held or None)
        retry_transient(poller)
        if jump is not None:
            poller.add_catch(jump, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
        poller.add_catch(end, errors=["States.ALL"], outputs=jsonata("$states.input"))
        poller.next(end)
        skip = update_item_task(section, name("Skip"), section.table, fair.arguments(jsonata(key), fair.SKIP, {
            ":me": {"S": jsonata(me)}, ":stale": {"S": jsonata(stale)}, ":now": {"N": jsonata(protocol.NOW_EXPRESSION)},
            ":prev": {"N": jsonata(f"$string({h}.c)")}, ":ticket": {"N": jsonata(f"$string({h}.c + 1)")}}),
            assign={f["handoff"]: jsonata(f"$merge([{h}, {{'c': {h}.c + 1}}])")})
        retry_transient(skip)
        skip.add_catch(end, errors=["States.ALL"], outputs=jsonata("$states.input"))
        skip.next(again)

        def wake(state: str, record: str) -> tasks.CallAwsService:
            send = tasks.CallAwsService.jsonata(
                section, f"{suffix}.{state}", state_name=name(state), service="sfn", action="sendTaskSuccess",
                parameters={"TaskToken": jsonata(f"{h}.row.token.S"), "Output": jsonata(f"$string({record})")},
                iam_action="states:SendTaskSuccess",
                # task tokens of service integrations cannot be scoped by IAM: the one resource is *
                iam_resources=["*"], outputs=jsonata("$states.input"),
            )
            send.add_retry(errors=[fair.WAKE_THROTTLED], interval=Duration.seconds(1), backoff_rate=2.0, max_attempts=3,
                           jitter_strategy=sfn.JitterType.FULL)
            return send

        woken = wake("Wake", f"$merge([{h}.grant, {{'served': {h}.c + 1}}])")
        if then is not None:
            woken.next(end)
        # a failed wake-up: a dead grantee is revoked at once; a live-looking one gets one claim
        # window (its park may have just timed out: it finds itself the owner and claims)
        revoke = update_item_task(section, name("Revoke"), section.table, fair.arguments(jsonata(key), fair.REVOKE, {
            ":next": {"S": jsonata(nxt)}, ":me": {"S": jsonata(me)},
            ":fence": {"N": jsonata(f"$string({h}.grant.fence)")}}),
            assign={f["handoff"]: jsonata(f"$merge([{h}, {{'c': {h}.c + 1, 'holding': false}}])")})
        retry_transient(revoke)
        revoke.add_catch(end, errors=["States.ALL"], outputs=jsonata("$states.input"))
        revoke.next(again)
        window = sfn.Wait(section, f"{suffix}.ClaimWindow", state_name=name("ClaimWindow"),
                          time=sfn.WaitTime.duration(Duration.seconds(self.park_timeout_s)))

        def retake_and_wake(label: str, otherwise: sfn.State, wake_failed: Optional[sfn.State] = None) -> sfn.TaskStateBase:
            """Take row c + 1 again; the grantee parked there anew (its park ended just as its
            row was taken, and it parked again): wake that park; else ``otherwise`` (a failed
            wake-up: ``wake_failed``, default ``otherwise``)."""
            retake = tasks.DynamoDeleteItem.jsonata(
                section, f"{suffix}.Retake{label}", state_name=name(f"Retake{label}"), table=section.table,
                key=self._row(key, f"{h}.c + 1"), return_values=tasks.DynamoReturnValues.ALL_OLD,
                assign={f["handoff"]: jsonata(f"$merge([{h}, {{'again': {row}}}])")}, outputs=jsonata("$states.input"))
            retry_transient(retake)
            retake.add_catch(otherwise, errors=["States.ALL"], outputs=jsonata("$states.input"))
            rewake = tasks.CallAwsService.jsonata(
                section, f"{suffix}.WakeAgain{label}", state_name=name(f"WakeAgain{label}"), service="sfn",
                action="sendTaskSuccess",
                parameters={"TaskToken": jsonata(f"{h}.again.token.S"),
                            "Output": jsonata(f"$string($merge([{h}.grant, {{'served': {h}.c + 1}}]))")},
                iam_action="states:SendTaskSuccess", iam_resources=["*"], outputs=jsonata("$states.input"))
            rewake.add_catch(wake_failed or otherwise, errors=["States.ALL"], outputs=jsonata("$states.input"))
            if then is not None:
                rewake.next(end)
            reparked = sfn.Choice.jsonata(section, f"{suffix}.Reparked{label}", state_name=name(f"Reparked{label}?"))
            reparked.when(sfn.Condition.jsonata(jsonata(
                f"$exists({h}.again.token.S) and {h}.again.owner.S = {nxt} "
                f"and $substring({h}.again.token.S, 0, {len(fair.CLIENT_LEASE_PREFIX)}) != '{fair.CLIENT_LEASE_PREFIX}'")),
                rewake).otherwise(otherwise)
            retake.next(reparked)
            return retake

        # a failed wake-up of the new park may have been delivered (its response lost), or its
        # park may have just ended (then its waiter finds itself the owner): a short last look
        # lets that waiter confirm before the revoke - else the revoke would race its confirm,
        # and a refused confirm queues it again behind later tickets (tests/fair_model.py)
        last_look = sfn.Wait(section, f"{suffix}.LastLook", state_name=name("LastLook"),
                             time=sfn.WaitTime.duration(Duration.seconds(fair.REPARK_LOOK_S)))
        last_look.next(revoke)
        window.next(retake_and_wake("", revoke, last_look))
        # first a short look (the usual case: the grantee's park timed out just as its row was
        # taken, and it parks again at once), then the claim window
        early = sfn.Wait(section, f"{suffix}.Reparking", state_name=name("Reparking"),
                         time=sfn.WaitTime.duration(Duration.seconds(fair.REPARK_LOOK_S)))
        early.next(retake_and_wake("Early", window))
        describe = JsonataCustomState(section, name("DescribeGrantee"), state_json={
            "Type": "Task", "QueryLanguage": "JSONata",
            "Resource": f"arn:{Stack.of(section).partition}:states:::aws-sdk:sfn:describeExecution",
            "Arguments": {"ExecutionArn": jsonata(f"$substringBefore({nxt}, '{protocol.OWNER_SEPARATOR}')")},
            "Output": jsonata("$states.input"),
            "Assign": {f["handoff"]: jsonata(f"$merge([{h}, {{'ended': " + " and ".join(
                f"$states.result.Status != '{s}'" for s in protocol.ALIVE_STATUSES) + "}])")},
        })
        describe.add_catch(window, errors=["States.ALL"], outputs=jsonata("$states.input"))
        ended = sfn.Choice.jsonata(section, f"{suffix}.GranteeEnded", state_name=name("GranteeEnded?"))
        ended.when(sfn.Condition.jsonata(jsonata(f"{h}.ended = true")), revoke).otherwise(early)
        describe.next(ended)
        failed = sfn.Choice.jsonata(section, f"{suffix}.WakeFailed", state_name=name("WakeFailed?"))
        failed.when(sfn.Condition.jsonata(jsonata(f"$contains({nxt}, ':execution:')")), describe).otherwise(window)
        woken.add_catch(failed, errors=["States.ALL"], outputs=jsonata("$states.input"))
        grant.next(woken)

        # a refused grant: mine after all (a lost response)? else someone else handed it: tell
        # the waiter whose token I took to look by itself
        recheck = tasks.DynamoGetItem.jsonata(
            section, f"{suffix}.Recheck", state_name=name("Recheck"), table=section.table,
            key={protocol.KEY_ATTRIBUTE: attribute_value({"S": jsonata(key)})}, consistent_read=True,
            assign={f["handoff"]: jsonata(f"$merge([{h}, {{'grant': {grant_record.replace(row, '$states.result.Item')}, "
                                          f"'handed': {_item_string('$states.result.Item', fair.HANDED)}, "
                                          f"'cut': {_item_number('$states.result.Item', fair.CUT)}, "
                                          f"'cutBy': {_item_string('$states.result.Item', fair.CUT_BY)}, "
                                          f"'served': {_item_number('$states.result.Item', fair.SERVED)}}}])")},
            outputs=jsonata("$states.input"))
        retry_transient(recheck)
        nudge = tasks.CallAwsService.jsonata(
            section, f"{suffix}.Nudge", state_name=name("Nudge"), service="sfn", action="sendTaskFailure",
            parameters={"TaskToken": jsonata(f"{h}.row.token.S"), "Error": LOOK,
                        "Cause": "the lock moved on while this waiter's row was taken: look again"},
            iam_action="states:SendTaskFailure", iam_resources=["*"], outputs=jsonata("$states.input"))
        nudge.add_catch(end, errors=["States.ALL"], outputs=jsonata("$states.input"))
        nudge.next(end)
        recheck.add_catch(nudge, errors=["States.ALL"], outputs=jsonata("$states.input"))
        mine = sfn.Choice.jsonata(section, f"{suffix}.GrantedByMe", state_name=name("GrantedByMe?"))
        mine.when(sfn.Condition.jsonata(jsonata(
            f"{h}.grant.owner = {nxt} and {h}.served = {h}.c + 1 and {h}.handed = {me}")), woken).otherwise(nudge)
        if jump is None:
            recheck.next(mine)
        else:  # the ticket I took was superseded: wake its waiter so (its response lost or not), pass it
            wake_superseded = tasks.CallAwsService.jsonata(
                section, f"{suffix}.WakeSuperseded", state_name=name("WakeSuperseded"), service="sfn",
                action="sendTaskFailure",
                parameters={"TaskToken": jsonata(f"{h}.row.token.S"), "Error": ERROR_SUPERSEDED,
                            "Cause": jsonata(fair.superseded_cause_expression(f"{h}.cutBy"))},
                iam_action="states:SendTaskFailure", iam_resources=["*"], outputs=jsonata("$states.input"))
            wake_superseded.add_catch(jump, errors=["States.ALL"], outputs=jsonata("$states.input"))
            wake_superseded.next(jump)
            cut = sfn.Choice.jsonata(section, f"{suffix}.Superseded", state_name=name("Superseded?"))
            cut.when(sfn.Condition.jsonata(jsonata(f"{h}.cut >= {h}.c + 1")), wake_superseded).otherwise(mine)
            recheck.next(cut)
        grant.add_catch(recheck, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
        grant.add_catch(end, errors=["States.ALL"], outputs=jsonata("$states.input"))

        # nobody parked yet: release (if I hold it) and mark the row ready for its waiter
        mark = update_item_task(section, name("Mark"), section.table, fair.arguments(
            jsonata(fair.row_key_expression(key, f"{h}.c + 1")), fair.MARK,
            {":since": {"N": jsonata(f"$exists({h}.row.`{fair.READY}`.N) ? {h}.row.`{fair.READY}`.N : $string($millis())")}}))
        retry_transient(mark)
        mark.add_catch(again, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
        mark.add_catch(end, errors=["States.ALL"], outputs=jsonata("$states.input"))
        # the ticket may have been served meanwhile (its waiter looked by itself and took the free
        # lock): then the mark is litter - take it away (never a row its waiter parked in)
        served = tasks.DynamoGetItem.jsonata(
            section, f"{suffix}.Served", state_name=name("Served"), table=section.table,
            key={protocol.KEY_ATTRIBUTE: attribute_value({"S": jsonata(key)})}, consistent_read=True,
            assign={f["handoff"]: jsonata(
                f"$merge([{h}, {{'served': {_item_number('$states.result.Item', fair.SERVED)}}}])")},
            outputs=jsonata("$states.input"))
        unmark = tasks.DynamoDeleteItem.jsonata(
            section, f"{suffix}.Unmark", state_name=name("Unmark"), table=section.table,
            key=self._row(key, f"{h}.c + 1"), condition_expression=f"attribute_not_exists(#{fair.TOKEN})",
            expression_attribute_names={f"#{fair.TOKEN}": fair.TOKEN}, outputs=jsonata("$states.input"))
        litter = sfn.Choice.jsonata(section, f"{suffix}.Litter", state_name=name("Litter?"))
        litter.when(sfn.Condition.jsonata(jsonata(f"{h}.served > {h}.c")), unmark).otherwise(end)
        for t in (served, unmark):
            t.add_catch(end, errors=["States.ALL"], outputs=jsonata("$states.input"))
        unmark.next(end)
        mark.next(served)
        served.next(litter)
        decide = sfn.Choice.jsonata(section, f"{suffix}.Next", state_name=name("Next?"))
        if self_grant is not None:
            decide.when(sfn.Condition.jsonata(jsonata(f"{h}.st = 'wake' and {nxt} = {me}")), self_grant)
        decide.when(sfn.Condition.jsonata(jsonata(f"{h}.st = 'wake'")), grant)
        decide.when(sfn.Condition.jsonata(jsonata(f"{h}.st = 'grant'")), poller)
        if jump is not None:
            decide.when(sfn.Condition.jsonata(jsonata(f"{h}.st = 'skip' or {h}.st = 'mark'")), jump)
            no_jump.when(sfn.Condition.jsonata(jsonata(f"{h}.st = 'skip'")), skip)
            no_jump.when(sfn.Condition.jsonata(jsonata(f"{h}.st != 'mark'")), end)
        decide.when(sfn.Condition.jsonata(jsonata(f"{h}.st = 'skip'")), skip)
        if holding:
            v = section.variables

            def release_task(state_suffix: str) -> sfn.TaskStateBase:
                return update_item_task(
                    section, name(state_suffix), section.table,
                    {**protocol.release_arguments(lock_variable=v["lock"]), "ReturnValues": "ALL_NEW"},
                    assign={f["handoff"]: jsonata(
                        f"$merge([{h}, {{'holding': false, 'tickets': {_item_number(row, fair.TICKETS)}, "
                        f"'cut': {_item_number(row, fair.CUT)}}}])"),
                        **section.held_assign()})

            # as the mutex's: a refused first release means the lock was taken over (Lock.Lost),
            # unless a redrive resumed this release, whose first run may have applied before the
            # execution stopped; a retry after a transient error may find its own earlier release done
            release, release_again = release_task("ReleaseQueued"), release_task("ReleaseQueuedAgain")
            retry_transient(release_again)
            release.add_catch(release_again, errors=list(protocol.TRANSIENT_ERRORS), outputs=jsonata("$states.input"))
            if lost is not None:
                def released_if(state_suffix: str, expression: str) -> sfn.Choice:
                    """A refused release: ``end`` (released) when ``expression`` holds, else ``lost``."""
                    return sfn.Choice.jsonata(section, f"{suffix}.{state_suffix}", state_name=name(f"{state_suffix}?")).when(
                        sfn.Condition.jsonata(jsonata(expression)), end).otherwise(lost)

                released_before = released_if("ReleasedBefore", protocol.released_before_takeover_expression(v["lock"], v["done"]))
                resumed = released_if("ReleaseResumed", protocol.resumed_release_applied_expression(v["lock"], v["done"]))
                release.add_catch(resumed, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
                release_again.add_catch(released_before, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
            else:
                for t in (release, release_again):
                    t.add_catch(end, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
            for t in (release, release_again):
                t.add_catch(end, errors=["States.ALL"], outputs=jsonata("$states.input"))
            queued = sfn.Choice.jsonata(section, f"{suffix}.Queued", state_name=name("Queued?"))
            if jump is not None:  # superseded tickets ahead: pass them (the lock is free now) and go on
                queued.when(sfn.Condition.jsonata(jsonata(f"{h}.cut > {h}.c")), jump)
            queued.when(sfn.Condition.jsonata(jsonata(f"{h}.tickets > {h}.c")), mark).otherwise(end)
            release.next(queued)
            release_again.next(queued)
            decide.when(sfn.Condition.jsonata(jsonata(f"{h}.holding = true")), release)
            if no_jump is not None:
                no_jump.when(sfn.Condition.jsonata(jsonata(f"{h}.holding = true")), release)

            # nobody queues: the release is one write (a refused one: a ticket is out, or the
            # lock is not mine - the full handoff, whose RELEASE tells a lost lock)
            alone = update_item_task(
                section, name("Release"), section.table,
                fair.arguments(jsonata(f"${v['lock']}.key"), fair.RELEASE_ALONE, {
                    k: val for k, val in protocol.release_arguments(lock_variable=v["lock"])["ExpressionAttributeValues"].items()
                    if k in fair.RELEASE_ALONE.value_names()}),
                assign=section.held_assign())
            alone.add_catch(first, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
            # (a transient error: the retried RELEASE - which tells "released before" - then the queue check)
            alone.add_catch(release_again, errors=list(protocol.TRANSIENT_ERRORS), outputs=jsonata("$states.input"))
            alone.add_catch(end, errors=["States.ALL"], outputs=jsonata("$states.input"))
            if then is not None:
                alone.next(end)
            quick.add_catch(alone, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"),
                            assign={f["handoff"]: jsonata(f"{{'c': {start}, 'holding': true}}")})
            quick.add_catch(end, errors=["States.ALL"], outputs=jsonata("$states.input"))
            quick.next(grant)
        decide.otherwise(mark)
        if no_jump is not None:
            no_jump.otherwise(mark)
        for t in (first, again):
            t.add_catch(end, errors=["States.ALL"], outputs=jsonata("$states.input"))
            t.next(decide)
        return quick or first

    # -- release ---------------------------------------------------------------------------

    def build_release(self, section: "LockedSection", lost: sfn.State, left: sfn.State) -> sfn.State:
        v = section.variables
        return self._build_handoff("Release", key=f"${v['lock']}.key", me=f"${v['lock']}.owner",
                                   start=f"${v['lock']}.ticket", holding=True, then=None,
                                   stale=f"${v['lock']}.owner", lost=lost, left=left)

    def build_release_after_error(self, section: "LockedSection", rethrow: sfn.State) -> sfn.State:
        v = section.variables
        return self._build_handoff("ReleaseAfterError", key=f"${v['lock']}.key", me=f"${v['lock']}.owner",
                                   start=f"${v['lock']}.ticket", holding=True, then=rethrow,
                                   stale=f"${v['lock']}.owner", lost=None, left=rethrow)

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
        retry_transient(claim)
        return claim

    def _delete_row(self, suffix: str, key: str, ticket: str, *, outputs: str = "$states.input") -> tasks.DynamoDeleteItem:
        section = self._section
        d = tasks.DynamoDeleteItem.jsonata(section, suffix, state_name=section.state_name(suffix), table=section.table,
                                           key=self._row(key, ticket), outputs=jsonata(outputs))
        retry_transient(d)
        return d
