"""The fair lock's handoff (``Lock.fair``): from a release, or from a waiter's fallback for a
head that does not move, hand the lock to the next live waiter of the ticket queue -
:mod:`locked_workflow.state_machines.fair_protocol`'s TAKE_PARKED, GRANT, SKIP, MARK, REVOKE,
JUMP and RELEASE_ALONE wired into states::

    Take (the next row, if parked) --> Grant --> Wake (the next one's confirm)
       |--none--> Release (alone) | --queued--> TakeAny --> Next? --> Grant | Skip | Mark | ...

The handoff is built from its arguments alone (the section, the kind's settings): the fair
kind (:mod:`~locked_workflow.constructs_lib.kinds.fair`) calls it from its release and from
its waiters' fallback.
"""

from __future__ import annotations

from typing import Optional

from aws_cdk import Duration, Stack, aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks

from locked_workflow.constructs_lib.custom_state import JsonataCustomState
from locked_workflow.constructs_lib.dynamodb_tasks import attribute_value, retry_transient, update_item_task
from locked_workflow.constructs_lib.section_record import Role
from locked_workflow.constructs_lib.kinds.base import SectionContext
from locked_workflow.constructs_lib.kinds.items import item_number, item_string
from locked_workflow.constructs_lib.kinds.ticket_queue import queue_vars, row_key
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines.errors import ERROR_SUPERSEDED
from locked_workflow.state_machines.errors import SIGNAL_LOOK as LOOK  # a nudge ends a park with it
from locked_workflow.state_machines.lock_protocol import jsonata


def grant_arguments(*, key: str, me: str, nxt: str, stale: str, prev: str, expires: str, grace: str) -> dict:
    """GRANT's arguments: hand the lock on ``key`` to ``nxt``, the owner of ticket ``prev`` + 1."""
    return fair.arguments(jsonata(key), fair.GRANT, {
        ":me": {"S": jsonata(me)}, ":next": {"S": jsonata(nxt)}, ":stale": {"S": jsonata(stale)},
        ":now": {"N": jsonata(protocol.NOW_EXPRESSION)}, ":expiresAt": {"N": jsonata(expires)},
        ":grace": {"N": jsonata(grace)}, ":one": {"N": "1"}, ":prev": {"N": jsonata(f"$string({prev})")},
        ":ticket": {"N": jsonata(f"$string({prev} + 1)")},
    }, return_values="ALL_NEW")


def build_handoff(section: SectionContext, suffix: str, *, park_timeout_s: int, supersedes: bool, key: str, me: str,
                  start: str, holding: bool, then: Optional[sfn.State], stale: str,
                  self_grant: Optional[sfn.State] = None, lost: Optional[sfn.State] = None,
                  left: Optional[sfn.State] = None, fence: str = "0",
                  after_mark: Optional[sfn.State] = None) -> sfn.State:
    """Hand the lock to the next live waiter: take row ``c + 1`` (c: ``start`` at first),
    then grant and wake it, skip it, or release and mark. ``holding``: I hold the lock
    (a release); else the lock is free and I run the handoff for a head that does not move
    (``self_grant``: where to go when that head is me). Ends in ``then`` (None: an end), or
    after a mark that stands (the marked ticket not served meanwhile) in ``after_mark``
    (default ``then``). A helper passes its park: a mark may be skipped only once it is a
    park timeout old, so a helper that looked again at once would take and mark the same row
    again and again until then."""
    f = queue_vars(section)
    h = "$" + f["handoff"]
    name = lambda s: section.state_name(f"{suffix}.{s}")  # noqa: E731
    end = then or sfn.Succeed(section, f"{suffix}.Done", state_name=name("Done"))
    # a write of my release refused by a lock that is not mine (a grant, a skip, a jump - not
    # explained by a grant of mine, which the grant's recheck looks for): read as the retried
    # RELEASE reads its refusal. Nobody could have taken this acquisition over yet: my own
    # earlier write freed it (a lost response), ``end``; else it was taken over - after a
    # redrive, the stopped release may find the taker's row still stored (the head takes the
    # lock, then drops its row) and grant it, refused: ``Lock.Lost``, never "released"
    settled = end
    if holding and lost is not None:
        released_before = protocol.released_before_takeover_expression(
            section.variables["lock"], section.variables["done"])
        settled = sfn.Choice.jsonata(section, f"{suffix}.TakenOver", state_name=name("TakenOver?")).when(
            sfn.Condition.jsonata(jsonata(f"{h}.holding = true and $not({released_before})")), lost).otherwise(end)
    row = "$states.result.Attributes"
    hole_ms = park_timeout_s * 1000

    # (the release: a re-entered section writes nothing)
    reentered = protocol.reentered_or(key, reentered_expression=f"${section.variables['lock']}.reentered = true")

    def take(state: str, c: str, first: bool) -> tasks.DynamoDeleteItem:
        k = key
        if first and lost is not None and not holding:
            k = reentered
        t = tasks.DynamoDeleteItem.jsonata(
            section, f"{suffix}.{state}", state_name=name(state), table=section.table,
            key=row_key(k, f"{c} + 1"), return_values=tasks.DynamoReturnValues.ALL_OLD,
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
    if supersedes:
        jump = update_item_task(section, name("Jump"), section.table, fair.arguments(jsonata(key), fair.JUMP, {
            ":me": {"S": jsonata(me)}, ":stale": {"S": jsonata(stale)}, ":now": {"N": jsonata(protocol.NOW_EXPRESSION)},
            ":prev": {"N": jsonata(f"$string({h}.c)")}}, return_values="ALL_NEW"),
            assign={f["handoff"]: jsonata(f"$merge([{h}, {{'c': {item_number(row, fair.SERVED)}}}])")})
        retry_transient(jump)
        no_jump = sfn.Choice.jsonata(section, f"{suffix}.NoJump", state_name=name("NoJump?"))
        jump.add_catch(no_jump, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
        jump.add_catch(end, errors=["States.ALL"], outputs=jsonata("$states.input"))
        jump.next(again)
    quick = None
    if holding:
        quick = tasks.DynamoDeleteItem.jsonata(
            section, f"{suffix}.Take", state_name=name("Take"), table=section.table,
            key=row_key(reentered if lost is not None else key, f"{start} + 1"),
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
    grant_args = grant_arguments(
        key=key, me=me, nxt=nxt, stale=stale, prev=f"{h}.c",
        expires=f"$string($millis() + $number({h}.row.`{fair.LEASE}`.N))", grace=f"{h}.row.`{fair.GRACE_MS}`.N")
    grant_record = (
        f"{{'owner': {item_string(row, protocol.OWNER)}, 'fence': {item_number(row, protocol.FENCE)}, "
        f"'acquiredAt': {item_number(row, protocol.ACQUIRED_AT)}, 'expiresAt': {item_number(row, protocol.EXPIRES_AT)}}}")
    # a grant that hands on my own hold ends it: its length for monitoring (see held_assign)
    def held(state: str) -> dict:
        return section.held_assign(state, when=f"{h}.holding = true") if holding else {}

    grant = update_item_task(section, name("Grant"), section.table, grant_args,
                             assign={f["handoff"]: jsonata(f"$merge([{h}, {{'grant': {grant_record}}}])"),
                                     **held(name("Grant"))})
    # (the grantee's record: the metrics function measures a wait only from its own execution's)
    section.record(grant, Role.ACQUISITION, f["handoff"])
    retry_transient(grant)
    poller = update_item_task(section, name("GrantPoller"), section.table, grant_args,
                              assign=held(name("GrantPoller")) or None)
    retry_transient(poller)
    if jump is not None:
        poller.add_catch(jump, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
    elif settled is not end:
        poller.add_catch(settled, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
    poller.add_catch(end, errors=["States.ALL"], outputs=jsonata("$states.input"))
    poller.next(end)
    skip = update_item_task(section, name("Skip"), section.table, fair.arguments(jsonata(key), fair.SKIP, {
        ":me": {"S": jsonata(me)}, ":stale": {"S": jsonata(stale)}, ":now": {"N": jsonata(protocol.NOW_EXPRESSION)},
        ":prev": {"N": jsonata(f"$string({h}.c)")}, ":ticket": {"N": jsonata(f"$string({h}.c + 1)")}}),
        assign={f["handoff"]: jsonata(f"$merge([{h}, {{'c': {h}.c + 1}}])")})
    retry_transient(skip)
    if settled is not end:
        skip.add_catch(settled, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
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
                      time=sfn.WaitTime.duration(Duration.seconds(park_timeout_s)))

    def retake_and_wake(label: str, otherwise: sfn.State, wake_failed: Optional[sfn.State] = None) -> sfn.TaskStateBase:
        """Take row c + 1 again; the grantee parked there anew (its park ended just as its
        row was taken, and it parked again): wake that park; else ``otherwise`` (a failed
        wake-up: ``wake_failed``, default ``otherwise``)."""
        retake = tasks.DynamoDeleteItem.jsonata(
            section, f"{suffix}.Retake{label}", state_name=name(f"Retake{label}"), table=section.table,
            key=row_key(key, f"{h}.c + 1"), return_values=tasks.DynamoReturnValues.ALL_OLD,
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
    # and a refused confirm queues it again behind later tickets (tests/protocol/fair_model.py)
    last_look = sfn.Wait(section, f"{suffix}.LastLook", state_name=name("LastLook"),
                         time=sfn.WaitTime.duration(Duration.seconds(fair.REPARK_LOOK_S)))
    last_look.next(revoke)
    window.next(retake_and_wake("", revoke, last_look))
    # first a short look (the usual case: the grantee's park timed out just as its row was
    # taken, and it parks again at once; or it was woken, its response lost, or it looked by
    # itself, and has confirmed meanwhile: then my grant can no longer be revoked and I am
    # done), then the claim window
    confirmed = tasks.DynamoGetItem.jsonata(
        section, f"{suffix}.Confirmed", state_name=name("Confirmed"), table=section.table,
        key={protocol.KEY_ATTRIBUTE: attribute_value({"S": jsonata(key)})}, consistent_read=True,
        assign={f["handoff"]: jsonata(f"$merge([{h}, {{'revocable': " + fair.revocable_expression(
            "$states.result.Item", nxt=nxt, me=me, fence=f"{h}.grant.fence") + "}])")},
        outputs=jsonata("$states.input"))
    retry_transient(confirmed)
    confirmed.add_catch(window, errors=["States.ALL"], outputs=jsonata("$states.input"))
    unconfirmed = sfn.Choice.jsonata(section, f"{suffix}.Unconfirmed", state_name=name("Unconfirmed?"))
    unconfirmed.when(sfn.Condition.jsonata(jsonata(f"{h}.revocable = true")), window).otherwise(end)
    confirmed.next(unconfirmed)
    early = sfn.Wait(section, f"{suffix}.Reparking", state_name=name("Reparking"),
                     time=sfn.WaitTime.duration(Duration.seconds(fair.REPARK_LOOK_S)))
    early.next(retake_and_wake("Early", confirmed))
    describe = JsonataCustomState(section, name("DescribeGrantee"), state_json={
        "Type": "Task", "QueryLanguage": "JSONata",
        "Resource": f"arn:{Stack.of(section).partition}:states:::aws-sdk:sfn:describeExecution",
        "Arguments": {"ExecutionArn": jsonata(f"$substringBefore({nxt}, '{protocol.OWNER_SEPARATOR}')")},
        "Output": jsonata("$states.input"),
        "Assign": {f["handoff"]: jsonata(f"$merge([{h}, {{'ended': " + " and ".join(
            f"$states.result.Status != '{s}'" for s in protocol.ALIVE_STATUSES) + "}])")},
    })
    section.record(describe, Role.LIVENESS_CHECK)
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
                                      f"'handed': {item_string('$states.result.Item', fair.HANDED)}, "
                                      f"'cut': {item_number('$states.result.Item', fair.CUT)}, "
                                      f"'cutBy': {item_string('$states.result.Item', fair.CUT_BY)}, "
                                      f"'served': {item_number('$states.result.Item', fair.SERVED)}}}])")},
        outputs=jsonata("$states.input"))
    section.record(recheck, Role.ACQUISITION, f["handoff"])  # (the holder's record, as the grant's)
    retry_transient(recheck)
    nudge = tasks.CallAwsService.jsonata(
        section, f"{suffix}.Nudge", state_name=name("Nudge"), service="sfn", action="sendTaskFailure",
        parameters={"TaskToken": jsonata(f"{h}.row.token.S"), "Error": LOOK,
                    "Cause": "the lock moved on while this waiter's row was taken: look again"},
        iam_action="states:SendTaskFailure", iam_resources=["*"], outputs=jsonata("$states.input"))
    # ... and a release whose lock is still its own (the queue moved under it: a ticket was
    # passed by a runner of the handoff that found me stale) goes on from the new ``served``:
    # ended here, it would leave the lock held until its lease
    after_nudge = settled
    if holding:
        resume = sfn.Pass.jsonata(section, f"{suffix}.Resume", state_name=name("Resume"),
                                  outputs=jsonata("$states.input"),
                                  assign={f["handoff"]: jsonata(f"$merge([{h}, {{'c': {h}.served}}])")})
        after_nudge = sfn.Choice.jsonata(section, f"{suffix}.StillMine", state_name=name("StillMine?")).when(
            sfn.Condition.jsonata(jsonata(
                f"{h}.holding = true and {h}.grant.owner = {me} and {h}.served > {h}.c")), resume).otherwise(settled)
    nudge.add_catch(after_nudge, errors=["States.ALL"], outputs=jsonata("$states.input"))
    nudge.next(after_nudge)
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
            f"$merge([{h}, {{'served': {item_number('$states.result.Item', fair.SERVED)}}}])")},
        outputs=jsonata("$states.input"))
    unmark = tasks.DynamoDeleteItem.jsonata(
        section, f"{suffix}.Unmark", state_name=name("Unmark"), table=section.table,
        key=row_key(key, f"{h}.c + 1"), condition_expression=fair.UNMARK.condition,
        expression_attribute_names=fair.UNMARK.attribute_names(), outputs=jsonata("$states.input"))
    litter = sfn.Choice.jsonata(section, f"{suffix}.Litter", state_name=name("Litter?"))
    litter.when(sfn.Condition.jsonata(jsonata(f"{h}.served > {h}.c")), unmark).otherwise(after_mark or end)
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
        no_jump.when(sfn.Condition.jsonata(jsonata(f"{h}.st != 'mark'")), settled)
    decide.when(sfn.Condition.jsonata(jsonata(f"{h}.st = 'skip'")), skip)
    if holding:
        v = section.variables

        def release_task(state_suffix: str) -> sfn.TaskStateBase:
            return update_item_task(
                section, name(state_suffix), section.table,
                {**protocol.release_arguments(lock_variable=v["lock"]), "ReturnValues": "ALL_NEW"},
                assign={f["handoff"]: jsonata(
                    f"$merge([{h}, {{'holding': false, 'tickets': {item_number(row, fair.TICKETS)}, "
                    f"'cut': {item_number(row, fair.CUT)}}}])"),
                    **section.held_assign(name(state_suffix))})

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
            assign=section.held_assign(name("Release")))
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
    if holding:
        resume.next(again)
    for t in (first, again):
        t.add_catch(end, errors=["States.ALL"], outputs=jsonata("$states.input"))
        t.next(decide)
    return quick or first
