"""A locked section's wait path for the kinds that poll (``Lock.mutex``, ``Lock.semaphore``,
``Lock.keys``, ``Lock.on_record``): the acquire's fast retries, then Wait-state rounds bounded by
``max_wait``, with a liveness check every ``liveness_check_every``-th round (the holder's presence
token probed, else its execution described) - and the probe the fair kind's fallback shares.
"""

from __future__ import annotations

from typing import Sequence

from aws_cdk import Duration, Stack, aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks

from locked_workflow.constructs_lib.custom_state import JsonataCustomState
from locked_workflow.constructs_lib.dynamodb_tasks import attribute_value, retry_transient, update_item_task
from locked_workflow.constructs_lib.kinds.base import SectionContext
from locked_workflow.constructs_lib.section_record import Role
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines.lock_protocol import jsonata


def build_wait_path(section: SectionContext, acquire: sfn.TaskStateBase,
                    also: Sequence[sfn.TaskStateBase] = ()) -> None:
    """Held: poll (bounded by max_wait) and try again, or fail with Lock.Timeout. ``also``:
    other states of the same acquisition (a semaphore's ``AcquireAgain``), whose refusal is
    caught the same way (the fast polls are ``acquire``'s Retry alone)."""
    v, policy, max_wait_ms = section.variables, section.wait_policy, section.max_wait_ms
    timeout = sfn.Fail.jsonata(
        section,
        "Timeout",
        state_name=section.state_name("Timeout"),
        error=protocol.ERROR_TIMEOUT,
        cause=f"the lock was held by another run for longer than max_wait ({max_wait_ms} ms)",
    )
    section.record(timeout, Role.TIMEOUT)
    refused = section.kind.refused
    if max_wait_ms == 0:
        for attempt in (acquire, *also):
            attempt.add_catch(timeout, errors=[refused])
        return
    retries = policy.retries_for(max_wait_ms / 1000)
    if retries:  # fast polls: the acquire retries the refused write itself
        acquire.add_retry(
            errors=[refused],
            interval=Duration.seconds(policy.first_interval),
            backoff_rate=policy.backoff_rate,
            max_delay=Duration.seconds(policy.max_interval),
            max_attempts=retries,
            jitter_strategy=sfn.JitterType.FULL if policy.jitter else sfn.JitterType.NONE,
        )
    wait = JsonataCustomState(
        section,
        section.state_name("Wait"),
        state_json={
            "Type": "Wait",
            "QueryLanguage": "JSONata",
            "Seconds": jsonata(protocol.wait_seconds_expression(policy, v["wait"], max_wait_ms)),
        },
    )
    held = sfn.Choice.jsonata(section, "Held", state_name=section.state_name("Held?"))
    held.when(
        sfn.Condition.jsonata(jsonata(protocol.waited_enough_expression(v["wait"], max_wait_ms))),
        timeout,
    )
    if section.liveness_check_every:
        held.when(
            sfn.Condition.jsonata(
                jsonata(protocol.liveness_due_expression(v["wait"], section.liveness_check_every))
            ),
            _liveness_check(section, wait),
        )
    held.otherwise(wait.next(acquire))
    for attempt in (acquire, *also):
        attempt.add_catch(
            held,
            errors=[refused],
            assign={v["wait"]: jsonata(protocol.wait_bookkeeping_expression(v["wait"]))},
            outputs=jsonata("$states.input"),
        )


def _liveness_check(section: SectionContext, wait: sfn.State) -> sfn.IChainable:
    """Inspect the lock; if its holder's execution ended longer than its grace ago, mark
    it stale. Every path goes through the Wait, so each round lets time pass."""
    v = section.variables
    holder = protocol.holder_expression(section.kind.item)
    if section.kind.meets_shared_holds:
        # the whole lock item (a read/write lock's reader entries have names of their own:
        # no projection can list them); a lock item is small, at most MAX_READERS entries
        shared_hold = section.kind.shared_hold_expression(section, "$states.result.Item")
        read = {"assign": {v["holder"]: jsonata(f"$merge([{holder}, {{'shared': {shared_hold}}}])")}}
    else:
        projection, projection_names = protocol.holder_projection(section.kind.item)
        read = {
            "projection_expression": [tasks.DynamoProjectionExpression().with_attribute(n) for n in projection],
            "expression_attribute_names": projection_names,
            "assign": {v["holder"]: jsonata(holder)},
        }
    inspect = tasks.DynamoGetItem.jsonata(
        section,
        section.state_name("Inspect"),
        table=section.table,
        key={section.kind.item.key_attribute: attribute_value({"S": jsonata(section.kind.inspect_key(section))})},
        consistent_read=True,
        outputs=jsonata("$states.input"),
        **read,
    )
    retry_transient(inspect)
    inspect.add_catch(wait, errors=["States.ALL"], outputs=jsonata("$states.input"))
    describe = JsonataCustomState(
        section,
        section.state_name("DescribeHolder"),
        state_json={
            "Type": "Task",
            "QueryLanguage": "JSONata",
            "Resource": f"arn:{Stack.of(section).partition}:states:::aws-sdk:sfn:describeExecution",
            "Arguments": {
                "ExecutionArn": jsonata(protocol.holder_execution_expression(v["holder"]))
            },
            "Assign": {
                v["wait"]: jsonata(protocol.after_liveness_check_expression(v["wait"], v["holder"]))
            },
            "Output": jsonata("$states.input"),
        },
    )
    section.record(describe, Role.LIVENESS_CHECK)
    section.record(describe, Role.TAKEOVER, v["wait"])
    describe.add_catch(wait, errors=["States.ALL"], outputs=jsonata("$states.input"))
    describe.next(wait)
    is_execution = sfn.Choice.jsonata(section, "HolderIsExecution", state_name=section.state_name("HolderIsExecution?"))
    if section.kind.meets_shared_holds:  # a shared hold (readers of a read/write lock) owns the key
        for condition, state in section.kind.shared_hold_branches(section, holder_variable=v["holder"], then=wait):
            is_execution.when(sfn.Condition.jsonata(jsonata(condition)), state)
    is_execution.when(
        sfn.Condition.jsonata(jsonata(protocol.holder_present_expression(v["holder"]))),
        probe_presence(section, describe, then=wait),
    ).when(
        sfn.Condition.jsonata(jsonata(protocol.holder_is_execution_expression(v["holder"]))),
        describe,
    ).otherwise(wait)
    return inspect.next(is_execution)


def probe_presence(section: SectionContext, describe: sfn.State, *, then: sfn.State) -> sfn.State:
    """``SendTaskHeartbeat`` on the presence token of the holder in ``$holder``: accepted,
    the holding branch still runs (``then``: wait on); ``TaskTimedOut``, it ended without
    releasing - ABANDONED, the lock is held for its stop grace from now (then ``then``); any
    other answer: ``describe`` (ask about the execution). The mutex's liveness check and the
    fair lock's park fallback build it."""
    v = section.variables
    probe = tasks.CallAwsService.jsonata(
        section, "Probe", state_name=section.state_name("ProbeHolder"), service="sfn", action="sendTaskHeartbeat",
        parameters={"TaskToken": jsonata(f"${v['holder']}.presence")},
        iam_action="states:SendTaskHeartbeat",
        # task tokens cannot be scoped by IAM: the one resource is *
        iam_resources=["*"],
        outputs=jsonata("$states.input"),
    )
    abandoned = update_item_task(
        section, section.state_name("Abandoned"), section.table,
        protocol.abandoned_arguments(holder_variable=v["holder"], item=section.kind.item),
    )
    retry_transient(abandoned)
    abandoned.add_catch(then, errors=["States.ALL"], outputs=jsonata("$states.input"))
    probe.add_catch(abandoned, errors=[protocol.PRESENCE_GONE], outputs=jsonata("$states.input"))
    probe.add_catch(describe, errors=["States.ALL"], outputs=jsonata("$states.input"))
    probe.next(then)
    abandoned.next(then)
    return probe
