"""The fair lock kind (``fair=True``): the mutex's lock item with a FIFO queue and event-driven
handoff - :mod:`state_machines.fair_protocol` wired into a section's states::

    Acquire (fast path) --ok--> work --> Release --(a head parked)--> Wake head
       |--held or queued--> Enqueue --> Park (.waitForTaskToken) --woken / refused--> AcquireHead --ok--> work
                                          |--park timeout--> waited max_wait? --> Leave --> Timeout
                                          |                   \\--> Inspect --> DescribeHolder / DescribeHead
                                          |                          --(dead head of a free lock)--> RemoveHead --> Wake next
                                          |                          \\--> Enqueue (again: dropped waiters re-queue)
                                          \\--error--> Leave --> fail with the error
       AcquireHead --refused--> Confirm (read: mine already? -> work) --> Park

A parked waiter costs no transitions while it waits: the release that frees the lock wakes the
head of the queue with ``SendTaskSuccess``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Duration, Stack, aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks

from constructs_lib.custom_state import JsonataCustomState
from constructs_lib.dynamodb_tasks import attribute_value, retry_transient, update_item_task
from constructs_lib.lock_kinds import Mutex
from state_machines import fair_protocol as fair
from state_machines import lock_protocol as protocol
from state_machines import multikey_protocol as multikey
from state_machines.lock_protocol import ENTRY, jsonata

if TYPE_CHECKING:  # pragma: no cover
    from constructs_lib.locked_workflow import LockedSection

#: The aws-sdk integration's name of a refused condition (the park is an aws-sdk call).
SDK_CONDITION_FAILED = "DynamoDb.ConditionalCheckFailedException"


class FairMutex(Mutex):
    """One holder per key, granted in queue order, handed off by a wake-up."""

    name = "fair"
    builds_own_wait_path = True

    def __init__(self, user_key: str, *, park_timeout_s: int, polling: bool = False) -> None:
        super().__init__(user_key)
        self.park_timeout_s = park_timeout_s
        #: EXPRESS: no task tokens - poll as the head, keeping a lease on the queue place
        self.polling = polling

    # -- acquire --------------------------------------------------------------------------

    def build_acquire(self, section: "LockedSection", lease_ms: int):
        v = section.variables
        stale = protocol.stale_owner_expression(v["wait"])
        # the fast path: the mutex's acquire when nobody queues (re-entrancy as the mutex's)
        fast = update_item_task(
            section, section._name("Acquire"), section.table,
            {**fair.fast_acquire_arguments(
                key_jsonata=protocol.reentered_or(f"{ENTRY}.key", reentered_expression=f"$exists({ENTRY}.reentered)"),
                lease_ms=lease_ms, stale_owner_jsonata=stale)},
            assign={v["lock"]: jsonata(protocol.lock_variable_expression()), v["wait"]: jsonata("null")},
            outputs=jsonata(f"{ENTRY}.input"),
        )
        retry_transient(fast)
        self.catch_reentered(section, fast)
        self._section, self._lease_ms = section, lease_ms
        self._build_queue(fast)
        return fast, fast, fast

    def _build_queue(self, fast: sfn.TaskStateBase) -> None:
        section, v = self._section, self._section.variables
        stale = protocol.stale_owner_expression(v["wait"])
        timeout = sfn.Fail.jsonata(
            section, "Timeout", state_name=section._name("Timeout"), error=protocol.ERROR_TIMEOUT,
            cause=f"the lock was held by another run for longer than max_wait ({section._max_wait_ms} ms)",
        )
        if section._max_wait_ms == 0:
            fast.add_catch(timeout, errors=[protocol.CONDITION_FAILED])
            return
        failed = sfn.Fail.jsonata(
            section, "QueueFailed", state_name=section._name("QueueFailed"),
            error=jsonata(f"${v['wait']}.error.Error"), cause=jsonata(f"${v['wait']}.error.Cause"),
        )
        left = sfn.Choice.jsonata(section, "Left", state_name=section._name("Left?"))
        left.when(sfn.Condition.jsonata(jsonata(f"$exists(${v['wait']}.error)")), failed).otherwise(timeout)
        self._leave = self._build_leave(left)
        on_error = dict(
            errors=["States.ALL"],
            assign={v["wait"]: jsonata(f"$merge([${v['wait']}, {{'error': $states.errorOutput}}])")},
            outputs=jsonata("$states.input"),
        )

        enqueue = update_item_task(section, section._name("Enqueue"), section.table, fair.enqueue_arguments())
        retry_transient(enqueue)
        if self.polling:
            return self._build_polling(fast, enqueue, timeout, on_error)
        park = JsonataCustomState(section, section._name("Park"), state_json={
            "Type": "Task",
            "QueryLanguage": "JSONata",
            "Resource": f"arn:{Stack.of(section).partition}:states:::aws-sdk:dynamodb:updateItem.waitForTaskToken",
            "Arguments": {"TableName": section.table.table_name, **fair.park_arguments(stale_owner_jsonata=stale)},
            "TimeoutSeconds": jsonata(fair.park_timeout_expression(
                park_timeout_s=self.park_timeout_s, wait_variable=v["wait"], max_wait_ms=section._max_wait_ms)),
            "Output": jsonata("$states.input"),
        })
        park.add_retry(errors=list(multikey.TRANSIENT_ERRORS), interval=Duration.seconds(protocol.TRANSIENT_RETRY["interval_s"]), backoff_rate=2.0,
                       max_attempts=protocol.TRANSIENT_RETRY["max_attempts"], jitter_strategy=sfn.JitterType.FULL)
        head, confirm = self._build_head(otherwise=park)

        parked_out = sfn.Choice.jsonata(section, "WaitedEnough", state_name=section._name("WaitedEnough?"))
        parked_out.when(
            sfn.Condition.jsonata(jsonata(protocol.waited_enough_expression(v["wait"], section._max_wait_ms))),
            self._leave,
        ).otherwise(self._build_recheck(enqueue))
        park.add_catch(head, errors=[SDK_CONDITION_FAILED], outputs=jsonata("$states.input"))
        park.add_catch(parked_out, errors=["States.Timeout"], outputs=jsonata("$states.input"),
                       assign={v["wait"]: jsonata(protocol.wait_bookkeeping_expression(v["wait"]))})
        park.add_catch(self._leave, **on_error)
        park.next(head)
        enqueue.add_catch(park, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
        enqueue.add_catch(self._leave, **on_error)
        enqueue.next(park)
        for state in (head, confirm):
            state.add_catch(self._leave, **on_error)
        fast.add_catch(
            enqueue, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"),
            assign={v["wait"]: jsonata(protocol.wait_bookkeeping_expression(v["wait"]))},
        )

    def _build_head(self, *, otherwise: sfn.State):
        """AcquireHead -> the work; refused: Confirm (a retry whose first try took the lock finds
        itself the owner) -> Mine? -> the work, or ``otherwise``."""
        section, v = self._section, self._section.variables
        stale = protocol.stale_owner_expression(v["wait"])
        head = update_item_task(
            section, section._name("AcquireHead"), section.table,
            fair.acquire_head_arguments(lease_ms=self._lease_ms, stale_owner_jsonata=stale),
            assign={v["lock"]: jsonata(protocol.lock_variable_expression()), v["wait"]: jsonata("null")},
            outputs=jsonata(f"{ENTRY}.input"),
        )
        retry_transient(head)
        head.next(section.protected)
        confirm = self._get_item("Confirm", f"{ENTRY}.key", assign={
            v["holder"]: jsonata(protocol.holder_expression()),
            v["lock"]: jsonata(protocol.lock_variable_expression(of="$states.result.Item")),
        })
        mine = sfn.Choice.jsonata(section, "Mine", state_name=section._name("Mine?"))
        mine.when(
            sfn.Condition.jsonata(jsonata(f"${v['holder']}.owner = {ENTRY}.owner")),
            sfn.Pass.jsonata(section, "Taken", state_name=section._name("Taken"),
                             assign={v["wait"]: jsonata("null")}, outputs=jsonata(f"{ENTRY}.input")).next(section.protected),
        ).otherwise(otherwise)
        head.add_catch(confirm.next(mine), errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"),
                       assign={v["wait"]: jsonata(protocol.wait_bookkeeping_expression(v["wait"]))})
        return head, confirm

    def _build_polling(self, fast, enqueue, timeout, on_error) -> None:
        """EXPRESS (no task tokens): keep the place alive (a lease in the token slot), try as the
        head, wait a round of the wait policy, dequeue a head whose lease ended, again."""
        section, v = self._section, self._section.variables
        policy = section.wait_policy
        poll = update_item_task(section, section._name("Poll"), section.table,
                                fair.client_poll_arguments(poll_s=policy.max_interval))
        retry_transient(poll)
        wait = JsonataCustomState(section, section._name("Wait"), state_json={
            "Type": "Wait", "QueryLanguage": "JSONata",
            "Seconds": jsonata(protocol.wait_seconds_expression(policy, v["wait"], section._max_wait_ms)),
        })
        waited = sfn.Choice.jsonata(section, "WaitedEnough", state_name=section._name("WaitedEnough?"))
        waited.when(
            sfn.Condition.jsonata(jsonata(protocol.waited_enough_expression(v["wait"], section._max_wait_ms))),
            self._leave,
        ).otherwise(wait)
        head, confirm = self._build_head(otherwise=waited)
        wait.next(self._build_recheck(poll, describe=False))
        poll.add_catch(enqueue, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
        enqueue.add_catch(poll, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
        for state in (poll, enqueue, head, confirm):
            state.add_catch(self._leave, **on_error)
        enqueue.next(poll)
        poll.next(head)
        fast.add_catch(
            enqueue, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"),
            assign={v["wait"]: jsonata(protocol.wait_bookkeeping_expression(v["wait"]))},
        )

    def _build_recheck(self, enqueue: sfn.State, *, describe: bool = True) -> sfn.State:
        """The park's fallback: read the lock; ask whether a live-looking holder, or the head of
        a free lock, still runs; dequeue a dead head (waking the next); then queue again."""
        section, v = self._section, self._section.variables
        head_var = v["holder"] + "Head"
        lapsed = v["holder"] + "HeadLapsed"
        inspect = self._get_item("Inspect", f"{ENTRY}.key", assign={
            v["holder"]: jsonata(protocol.holder_expression()),
            head_var: jsonata(f"{fair.queue_expression('$states.result.Item')}[0]"),
            lapsed: jsonata(fair.head_lease_ended_expression("$states.result.Item")),
        }, catch_to=enqueue)
        remove = self._remove_at("RemoveHead", who=f"${head_var}", index="0", then=enqueue)
        suspect = sfn.Choice.jsonata(section, "Suspect", state_name=section._name("Suspect?"))
        lease_ended = sfn.Condition.jsonata(jsonata(f"${v['holder']}.owner = '' and ${lapsed}"))
        if not describe:  # (EXPRESS executions cannot be described: only leases tell the dead)
            return inspect.next(suspect.when(lease_ended, remove).otherwise(enqueue))
        describe_holder = _describe(section, "DescribeHolder", protocol.holder_execution_expression(v["holder"]), {
            v["wait"]: jsonata(protocol.after_liveness_check_expression(v["wait"], v["holder"])),
        })
        describe_holder.add_catch(enqueue, errors=["States.ALL"], outputs=jsonata("$states.input"))
        describe_holder.next(enqueue)
        dead_head = "$states.result.Status != 'RUNNING' and $states.result.Status != 'PENDING_REDRIVE'"
        describe_head = _describe(section, "DescribeHead", f"$substringBefore(${head_var}, '{protocol.OWNER_SEPARATOR}')", {
            head_var: jsonata(f"{dead_head} ? ${head_var} : null"),
        })
        describe_head.add_catch(enqueue, errors=["States.ALL"], outputs=jsonata("$states.input"))
        head_ended = sfn.Choice.jsonata(section, "HeadEnded", state_name=section._name("HeadEnded?"))
        head_ended.when(sfn.Condition.jsonata(jsonata(f"$type(${head_var}) = 'string'")), remove).otherwise(enqueue)
        describe_head.next(head_ended)
        suspect.when(
            sfn.Condition.jsonata(jsonata(
                f"${v['holder']}.owner != '' and {protocol.holder_is_execution_expression(v['holder'])}")),
            describe_holder,
        ).when(
            sfn.Condition.jsonata(jsonata(
                f"${v['holder']}.owner = '' and $type(${head_var}) = 'string' and ${head_var} != {ENTRY}.owner "
                f"and $contains(${head_var}, ':execution:')")),
            describe_head,
        ).when(lease_ended, remove).otherwise(enqueue)  # lease ended: a polling waiter at the head, dead
        return inspect.next(suspect)

    def _build_leave(self, then: sfn.State) -> sfn.State:
        """Leave the queue (max_wait spent, or an error while queued): read my place, dequeue
        me there (a place moved by another dequeue: read again), wake the new head of a free
        lock."""
        section, v = self._section, self._section.variables
        place = v["holder"] + "Place"
        read = self._get_item("Place", f"{ENTRY}.key", assign={place: jsonata(fair.my_index_expression("$states.result.Item"))},
                              catch_to=then)
        queued = sfn.Choice.jsonata(section, "Queued", state_name=section._name("Queued?"))
        remove = self._remove_at("LeaveQueue", who=f"{ENTRY}.owner", index=f"${place}", then=then, on_refused=read)
        queued.when(sfn.Condition.jsonata(jsonata(f"${place} >= 0")), remove).otherwise(then)
        return read.next(queued)

    # -- release ---------------------------------------------------------------------------

    def build_release(self, section: "LockedSection", lost: sfn.State, left: sfn.State) -> sfn.State:
        return section.build_mutex_release(lost, left, release_task=self._release_task(section),
                                           after_release=self._wake_head("Release", then=None))

    def build_release_after_error(self, section: "LockedSection", rethrow: sfn.State) -> sfn.State:
        release = self._release_task(section)(section._name("ReleaseAfterError"), True)
        retry_transient(release)
        release.add_catch(rethrow, errors=[protocol.CONDITION_FAILED, protocol.QUERY_EVALUATION_ERROR],
                          outputs=jsonata("$states.input"))
        return release.next(self._wake_head("ReleaseAfterError", then=rethrow))

    def _release_task(self, section: "LockedSection"):
        wake = section.variables["holder"] + "Wake"

        def release(state_name: str, first: bool) -> sfn.TaskStateBase:
            arguments = {**protocol.release_arguments(lock_variable=section.variables["lock"], reentrant=first),
                         "ReturnValues": "ALL_OLD"}
            return update_item_task(section, state_name, section.table, arguments,
                                    assign={wake: jsonata(fair.head_token_expression("$states.result.Attributes"))})
        return release

    def _wake_head(self, suffix: str, *, then: sfn.State | None, token_variable: str | None = None) -> sfn.State:
        """Wake the waiter whose token ``$<token_variable>`` holds, if any: a Map over zero or
        one token, so that nobody to wake costs one state transition (not a Choice and a
        Succeed)."""
        section = self._section
        token = "$" + (token_variable or section.variables["holder"] + "Wake")
        send = tasks.CallAwsService.jsonata(
            section, section._name(f"{suffix}.Wake"), service="sfn", action="sendTaskSuccess",
            parameters={"TaskToken": jsonata("$states.input"), "Output": "{\"woken\":true}"},
            iam_action="states:SendTaskSuccess",
            # task tokens of service integrations cannot be scoped by IAM: the one resource is *
            iam_resources=["*"],
        )
        send.add_retry(errors=[fair.WAKE_THROTTLED], interval=Duration.seconds(1), backoff_rate=2.0, max_attempts=3,
                       jitter_strategy=sfn.JitterType.FULL)
        # a waiter gone (stopped, or its park timed out and it looks by itself): nothing to do
        send.add_catch(sfn.Succeed(section, f"{suffix}.Gone", state_name=section._name(f"{suffix}.Gone")),
                       errors=["States.ALL"])
        wake = sfn.Map.jsonata(
            section, f"{suffix}.WakeNext", state_name=section._name(f"{suffix}.WakeNext"),
            items=sfn.ProvideItems.jsonata(jsonata(f"$type({token}) = 'string' ? [{token}] : []")),
            outputs=jsonata("$states.input"),
        ).item_processor(send)
        return wake.next(then) if then is not None else wake

    # -- pieces ----------------------------------------------------------------------------

    def _get_item(self, suffix: str, key: str, *, assign: dict, catch_to: sfn.State | None = None) -> sfn.TaskStateBase:
        section = self._section
        get = tasks.DynamoGetItem.jsonata(
            section, section._name(suffix), table=section.table,
            key={protocol.KEY_ATTRIBUTE: attribute_value({"S": jsonata(key)})},
            consistent_read=True, assign=assign, outputs=jsonata("$states.input"),
        )
        retry_transient(get)
        if catch_to is not None:
            get.add_catch(catch_to, errors=["States.ALL"], outputs=jsonata("$states.input"))
        return get

    def _remove_at(self, suffix: str, *, who: str, index: str, then: sfn.State,
                   on_refused: sfn.State | None = None) -> sfn.State:
        """REMOVE_AT ``who`` from place ``index``; wake the new head of a free lock; go on."""
        section = self._section
        token = section.variables["holder"] + suffix + "Wake"
        remove = update_item_task(
            section, section._name(suffix), section.table,
            fair.remove_at_arguments(key_jsonata=f"{ENTRY}.key", who_jsonata=who, index_jsonata=index),
            assign={token: jsonata(fair.wake_after_dequeue_expression("$states.result.Attributes"))},
        )
        retry_transient(remove)
        remove.add_catch(on_refused or then, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
        remove.add_catch(then, errors=["States.ALL"], outputs=jsonata("$states.input"))
        return remove.next(self._wake_head(suffix, then=then, token_variable=token))


def _describe(section: "LockedSection", suffix: str, execution: str, assign: dict) -> JsonataCustomState:
    return JsonataCustomState(section, section._name(suffix), state_json={
        "Type": "Task",
        "QueryLanguage": "JSONata",
        "Resource": f"arn:{Stack.of(section).partition}:states:::aws-sdk:sfn:describeExecution",
        "Arguments": {"ExecutionArn": jsonata(execution)},
        "Assign": assign,
        "Output": jsonata("$states.input"),
    })
