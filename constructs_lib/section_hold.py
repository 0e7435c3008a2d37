"""A locked section's hold (``detect_cancellation``): the protected work beside a presence
branch whose task token, registered where the kind keeps presence, lets a waiter's liveness
check learn at once that a cancelled branch holds the lock.
"""

from __future__ import annotations

from typing import Callable

from aws_cdk import Duration, Stack, aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks

from locked_workflow.constructs_lib.custom_state import JsonataCustomState
from locked_workflow.constructs_lib.dynamodb_tasks import attribute_value, retry_transient, update_item_task
from locked_workflow.constructs_lib.kinds.base import SectionContext
from locked_workflow.constructs_lib.section_work import reachable_states
from locked_workflow.state_machines import errors
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines.lock_protocol import jsonata


def build_hold(section: SectionContext, work: sfn.IChainable, *, lease_ms: int,
               lost_state: Callable[[], sfn.State]) -> sfn.Parallel:
    """The hold (``detect_cancellation``): a Parallel of the work and the presence branch.

    Work branch: ``work --> Depart --> Departed --> Dismiss``. DEPART (owner-conditioned)
    closes the acquisition's presence; ``Departed`` reads the token its presence branch
    registered, if any, and ``Dismiss`` (``SendTaskSuccess``) ends that branch. Presence branch: ``Presence``, a
    ``.waitForTaskToken`` UpdateItem (PRESENT) that parks until dismissed - its token, on the
    lock item, is what a waiter's liveness check probes. Both are writes on the one lock item,
    so whichever comes first, the other sees it: a presence registered after DEPART is
    refused (and its branch ends), one registered before is read after it.

    A cancelled hold - Step Functions cancels a branch when a sibling branch or iteration
    of a user's Parallel or Map fails, without running its Catch - closes the presence
    task with it: the token then answers ``TaskTimedOut`` (ABANDONED). The work runs in a
    Parallel of its own only if it has a ``Succeed`` state, which would end the work branch
    without DEPART.
    """
    v = section.variables
    item = section.kind.item
    if any(isinstance(s, sfn.Succeed) for s in reachable_states(work)):
        work = sfn.Parallel.jsonata(
            section, "Protected", state_name=section.state_name("Protected"), outputs=jsonata("$states.result[0]")
        ).branch(work)
    lost = sfn.Fail.jsonata(
        section, "LostInHold", state_name=section.state_name("LostInHold"), error=protocol.SIGNAL_LOST_IN_HOLD,
        cause="the lock was taken over before the work was over",
    )
    worked = sfn.Succeed(section, "Worked", state_name=section.state_name("Worked"))
    key = section.kind.presence_key(section)
    depart = update_item_task(
        section, section.state_name("Depart"), section.table,
        section.kind.depart_arguments(section),
    )
    retry_transient(depart)
    depart.add_catch(lost, errors=[protocol.CONDITION_FAILED])
    # a re-entered hold: nothing to depart; the work's output goes on (a Catch's default
    # output is the error object, which the state after the section would receive)
    depart.add_catch(worked, errors=[protocol.QUERY_EVALUATION_ERROR], outputs=jsonata("$states.input"))
    projection, projection_names = protocol.presence_projection(item)
    read = tasks.DynamoGetItem.jsonata(
        section, section.state_name("Departed"), table=section.table,
        key={item.key_attribute: attribute_value({"S": jsonata(key)})},
        consistent_read=True,
        projection_expression=[tasks.DynamoProjectionExpression().with_attribute(n) for n in projection],
        expression_attribute_names=projection_names,
        assign={v["presence"]: jsonata(protocol.departed_token_expression(v["lock"], item))},
        outputs=jsonata("$states.input"),
    )
    retry_transient(read)
    dismiss = tasks.CallAwsService.jsonata(
        section, "Dismiss", state_name=section.state_name("Dismiss"), service="sfn", action="sendTaskSuccess",
        parameters={"TaskToken": jsonata("$" + v["presence"]), "Output": "{}"},
        iam_action="states:SendTaskSuccess",
        # task tokens cannot be scoped by IAM: the one resource is *
        iam_resources=["*"],
        outputs=jsonata("$states.input"),
    )
    # no token registered, or its task is over already: nothing to end, no retry. Any other
    # error is tried again: until the presence branch ends, the hold (and the lock) stays on
    dismiss.add_retry(errors=list(protocol.DISMISS_OVER), max_attempts=0)
    r = protocol.DISMISS_RETRY
    dismiss.add_retry(errors=["States.ALL"], interval=Duration.seconds(r["interval_s"]),
                      backoff_rate=r["backoff_rate"], max_attempts=r["max_attempts"],
                      jitter_strategy=sfn.JitterType.FULL)
    dismiss.add_catch(worked, errors=["States.ALL"], outputs=jsonata("$states.input"))
    # (the read's errors: the branch fails, the hold's Catch releases - the lock is mine)
    work_branch = sfn.Chain.start(work).next(depart).next(read).next(dismiss)

    gone = sfn.Succeed(section, "PresenceOver", state_name=section.state_name("PresenceOver"))
    lease_s = -(-lease_ms // 1000)
    action, arguments = section.kind.presence_task(section)
    presence = JsonataCustomState(section, section.state_name("Presence"), state_json={
        "Type": "Task",
        "QueryLanguage": "JSONata",
        "Resource": f"arn:{Stack.of(section).partition}:states:::aws-sdk:dynamodb:{action}.waitForTaskToken",
        "Arguments": arguments,
        # past the lease the lock is anyone's: the presence need not outlive it. A heartbeat
        # timeout, so that AWS accepts the probes' heartbeats under any reading
        "TimeoutSeconds": lease_s + 1,
        "HeartbeatSeconds": lease_s,
        "Output": jsonata("$states.input"),
    })
    # short retries: they bound how long a closed token of a failed attempt can stand
    # (protocol.PRESENCE_SETTLE_MS); a multi-key hold's transaction refused (as below) or in
    # conflict with another one (a waiter's acquire) is tried again: it wrote nothing
    r = protocol.PRESENCE_RETRY
    presence.add_retry(errors=[*errors.SDK_TRANSIENT_ERRORS, errors.TRANSACTION_CANCELED],
                       interval=Duration.seconds(r["interval_s"]), backoff_rate=r["backoff_rate"],
                       max_attempts=r["max_attempts"], jitter_strategy=sfn.JitterType.FULL)
    presence.add_catch(gone, errors=[
        errors.TRANSACTION_CANCELED,
        protocol.SDK_CONDITION_FAILED,  # DEPART came first, or the lock is not mine any more
        protocol.QUERY_EVALUATION_ERROR,  # a re-entered hold
        errors.STATES_TIMEOUT, errors.STATES_HEARTBEAT_TIMEOUT,
    ])
    # the registration failed (it may have written a token that is closed now): DEPART rules
    # any token of this acquisition out; if even that fails, the hold ends (retired)
    unsure = update_item_task(
        section, section.state_name("PresenceUnsure"), section.table,
        section.kind.depart_arguments(section),
    )
    r = protocol.PRESENCE_UNSURE_RETRY
    unsure.add_retry(errors=list(protocol.TRANSIENT_ERRORS), interval=Duration.seconds(r["interval_s"]),
                     backoff_rate=r["backoff_rate"], max_attempts=r["max_attempts"],
                     jitter_strategy=sfn.JitterType.FULL)
    unsure.add_catch(gone, errors=[protocol.CONDITION_FAILED, protocol.QUERY_EVALUATION_ERROR])
    unsure.add_catch(sfn.Fail.jsonata(
        section, "PresenceUnknown", state_name=section.state_name("PresenceUnknown"),
        error=protocol.ERROR_PRESENCE_UNKNOWN,
        cause="the holder's presence could neither be registered nor ruled out",
    ), errors=["States.ALL"])
    presence.add_catch(unsure, errors=["States.ALL"], outputs=jsonata("$states.input"))
    presence.next(gone)
    unsure.next(gone)

    hold = sfn.Parallel.jsonata(
        section, "Hold", state_name=section.state_name("Hold"), outputs=jsonata("$states.result[0]"),
    ).branch(work_branch).branch(presence)
    hold.add_catch(lost_state(), errors=[protocol.SIGNAL_LOST_IN_HOLD])
    return hold
