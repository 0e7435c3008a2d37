"""The read/write waiters' liveness check (``Lock.shared`` / ``Lock.exclusive``), part of their
park fallback: once a round, ask about the holder they suspect (the writer holder, else a reader
entry in turn) - its hold's presence row and token first (``SendTaskHeartbeat``), then
``DescribeExecution`` - and retire an ended holder (RETIRE / RETIRE_READER from its end) or
abandon a cancelled one (``shared_protocol.gone_transaction``, from now).
"""

from __future__ import annotations

from typing import Optional

from aws_cdk import Stack, aws_iam as iam, aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks

from locked_workflow.constructs_lib.custom_state import JsonataCustomState
from locked_workflow.constructs_lib.dynamodb_tasks import attribute_value, retry_transient_sdk
from locked_workflow.constructs_lib.section_record import Role
from locked_workflow.constructs_lib.kinds.items import item_number
from locked_workflow.constructs_lib.kinds.shared_hold import entry_of, presence_token
from locked_workflow.constructs_lib.kinds.shared_states import SharedStates
from locked_workflow.state_machines import errors
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines import shared_protocol as shared
from locked_workflow.state_machines.lock_protocol import jsonata


def build_liveness_check(st: SharedStates, *, key: str, seen: str, read: sfn.State, park: sfn.State) -> Optional[sfn.State]:
    """The fallback's liveness check (every ``liveness_check_every``-th round, once a round):
    ask Step Functions whether the holder the waiter suspects (``seen.suspect``: the writer
    holder, else one reader entry in turn - both executions' acquisitions, never a client)
    still runs; one that ended is retired - the mutex's RETIRE for a writer, RETIRE_READER for
    a reader: held for its stop grace from its end, that acquisition only, unless its lease
    ends sooner (a retire never lengthens a lease) - and looked at again at once when that
    grace is already over (else at the next round)."""
    s, v = st.section, st.section.variables
    if not s.liveness_check_every:
        return None
    wait = "$" + v["wait"]
    stop = "$states.result.StopDate"
    alive = " or ".join(f"$states.result.Status = '{status}'" for status in protocol.ALIVE_STATUSES)
    ended = (f"({alive} or $not($exists({stop}))) ? null "
             f": ($type({stop}) = 'number' ? {stop} : $toMillis({stop}))")
    describe = JsonataCustomState(s, s.state_name("DescribeHolder"), state_json={
        "Type": "Task", "QueryLanguage": "JSONata",
        "Resource": f"arn:{Stack.of(s).partition}:states:::aws-sdk:sfn:describeExecution",
        "Arguments": {"ExecutionArn": jsonata(
            f"$substringBefore({seen}.suspect.owner, '{protocol.OWNER_SEPARATOR}')")},
        "Assign": {st.vars()["seen"]: jsonata(f"$merge([{seen}, {{'endedAt': {ended}}}])"),
                   v["wait"]: jsonata(f"$merge([{wait}, {{'checked': true}}])")},
        "Output": jsonata("$states.input"),
    })
    s.record(describe, Role.LIVENESS_CHECK)
    # (asked once this round whatever the answer: no second DescribeExecution before a park)
    describe.add_catch(park, errors=["States.ALL"], outputs=jsonata("$states.input"),
                       assign={v["wait"]: jsonata(f"$merge([{wait}, {{'checked': true}}])")})
    ended_at = {":endedAt": {"N": jsonata(f"$string({seen}.endedAt)")}}
    item = "$states.result.Attributes"
    retire_writer = st.update("RetireHolder", key, protocol.RETIRE,
                              {":owner": {"S": jsonata(f"{seen}.suspect.owner")}, **ended_at},
                              return_values="ALL_NEW", outputs="$states.input", assign={
                                     st.vars()["seen"]: jsonata(f"$merge([{seen}, {{'until': "
                                                                f"{item_number(item, protocol.EXPIRES_AT)}}}])")})
    retire_reader = st.update("RetireReader", key, shared.RETIRE_READER, ended_at,
                              reader=f"{seen}.suspect.owner", return_values="ALL_NEW",
                              outputs="$states.input", assign={
                                     st.vars()["seen"]: jsonata(
                                         f"$merge([{seen}, {{'until': $number("
                                         f"{entry_of(item, f'{seen}.suspect.owner')}.`{protocol.EXPIRES_AT}`.N)}}])")})
    over = st.choice("RetiredOver")
    st.when(over, f"{seen}.until < $millis()", read)  # its grace is over: look again now
    over.otherwise(park)
    for retire in (retire_writer, retire_reader):
        retire.add_catch(park, errors=["States.ALL"], outputs=jsonata("$states.input"))
        retire.next(over)
    ended_now = st.choice("HolderEnded")
    # (a retire only ever shortens a lease: one that ends before the grace after the end
    # is left to end by itself)
    shortens = f"$type({seen}.endedAt) = 'number' and {seen}.endedAt + {seen}.suspect.grace < {seen}.suspect.expiresAt"
    st.when(ended_now, f"{shortens} and {seen}.suspect.reader", retire_reader)
    st.when(ended_now, shortens, retire_writer)
    # its execution runs on, and its hold's presence token is closed: a cancelled branch
    st.when(ended_now, f"$type({seen}.endedAt) != 'number' and {seen}.gone = true",
            build_abandon(st, key=key, seen=seen, over=over, park=park))
    ended_now.otherwise(park)
    describe.next(ended_now)
    return build_presence_probe(st, seen=seen, describe=describe, park=park)


def build_presence_probe(st: SharedStates, *, seen: str, describe: sfn.State, park: sfn.State) -> sfn.State:
    """Before asking Step Functions about the suspect's execution: its hold's presence row
    (``shared_protocol.PRESENT_ROW``: its own token for that very acquisition, not departed)
    -> ``SendTaskHeartbeat`` on the token. Accepted: its branch runs - park (no
    DescribeExecution). ``TaskTimedOut`` (the branch's task is over): the execution is
    described with that noted - ended: retired from its end as before; running on: the
    branch was cancelled (a user's Parallel or Map), :meth:`_build_abandon`. No row, no token
    of that acquisition, or any other answer (throttled, unknown): described as before - a
    probe counts a holder gone on ``TaskTimedOut`` alone."""
    s, v, f = st.section, st.section.variables, st.vars()
    wait, r = "$" + v["wait"], "$states.result.Item"
    token = presence_token(r, f"{seen}.suspect.acquiredAt")
    checked = {v["wait"]: jsonata(f"$merge([{wait}, {{'checked': true}}])")}
    read_row = st.get("ReadPresence", {protocol.KEY_ATTRIBUTE: attribute_value({"S": jsonata(
        shared.presence_row_key_expression(f"{seen}.suspect.owner"))})},
        {f["seen"]: jsonata(f"$merge([{seen}, {{'presence': {token}}}])"), **checked})
    read_row.add_catch(describe, errors=["States.ALL"], outputs=jsonata("$states.input"), assign=checked)
    probe = tasks.CallAwsService.jsonata(
        s, "ProbeHolder", state_name=s.state_name("ProbeHolder"), service="sfn", action="sendTaskHeartbeat",
        parameters={"TaskToken": jsonata(f"{seen}.presence")}, iam_action="states:SendTaskHeartbeat",
        # task tokens cannot be scoped by IAM: the one resource is *
        iam_resources=["*"], outputs=jsonata("$states.input"))
    probe.next(park)  # accepted: the holding branch runs
    probe.add_catch(describe, errors=[errors.PRESENCE_GONE], outputs=jsonata("$states.input"),
                    assign={f["seen"]: jsonata(f"$merge([{seen}, {{'gone': true}}])")})
    probe.add_catch(describe, errors=["States.ALL"], outputs=jsonata("$states.input"))
    present = st.choice("HolderPresent")
    st.when(present, f"$type({seen}.presence) = 'string'", probe)
    present.otherwise(describe)
    return read_row.next(present)


def build_abandon(st: SharedStates, *, key: str, seen: str, over: sfn.State, park: sfn.State) -> sfn.State:
    """The suspect's branch was cancelled (its presence token closed, its execution running):
    retire that acquisition from now - held for its stop grace (a Lambda it invoked may
    still run), only if that shortens its lease - while its row still holds that token,
    settled (``PRESENCE_SETTLE_MS``: not a failed registration attempt) and not departed:
    ``shared_protocol.gone_transaction``, the row's conditional Delete beside the lock
    item's RETIRE_GONE_READER / RETIRE_GONE_WRITER, all or nothing. Refused or failed:
    nothing was written, the next round looks again. Then as a retire by the execution's
    end (``over``: look again at once when that grace is over)."""
    s, f = st.section, st.vars()
    acquired, owner = f"{seen}.suspect.acquiredAt", f"{seen}.suspect.owner"
    table, row_key = s.table.table_name, shared.presence_row_key_expression(owner)
    row_values = {":token": {"S": jsonata(f"{seen}.presence")}, ":acquiredAt": {"N": jsonata(f"$string({acquired})")},
                  ":settledBefore": {"N": jsonata(f"$string($millis() - {protocol.PRESENCE_SETTLE_MS})")}}
    until = f"$millis() + {seen}.suspect.grace"
    lock_values = {":acquiredAt": {"N": jsonata(f"$string({acquired})")}, ":until": {"N": jsonata(f"$string({until})")}}

    def abandon(name: str, reader: bool) -> sfn.State:
        items = shared.gone_transaction(
            table, jsonata(key), jsonata(row_key), reader="" if reader else None, row_values=row_values,
            lock_values={**lock_values, **({} if reader else {":owner": {"S": jsonata(owner)}})})
        if reader:  # the entry's attribute, evaluated at run time from the suspect's owner
            items[1]["Update"]["ExpressionAttributeNames"][shared.READER_PLACEHOLDER] = jsonata(
                shared.reader_attribute_expression(owner))
        task = tasks.CallAwsService.jsonata(
            s, name, state_name=s.state_name(name), service="dynamodb", action="transactWriteItems",
            parameters={"TransactItems": items}, iam_action="dynamodb:UpdateItem",
            iam_resources=[s.table.table_arn],
            additional_iam_statements=[iam.PolicyStatement(actions=["dynamodb:DeleteItem"],
                                                           resources=[s.table.table_arn])],
            outputs=jsonata("$states.input"),
            # (read a moment after the write's own :until: RetiredOver looks again no sooner)
            assign={f["seen"]: jsonata(f"$merge([{seen}, {{'until': {until}}}])")})
        retry_transient_sdk(task)
        task.add_catch(park, errors=["States.ALL"], outputs=jsonata("$states.input"))
        return task.next(over)

    gone = st.choice("HolderGone")
    shortens = f"{until} < {seen}.suspect.expiresAt"
    st.when(gone, f"{shortens} and {seen}.suspect.reader", abandon("AbandonReader", True))
    st.when(gone, shortens, abandon("AbandonHolder", False))
    gone.otherwise(park)
    return gone
