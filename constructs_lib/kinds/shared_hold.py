"""A read/write lock's item as the others read it (``Lock.shared`` / ``Lock.exclusive``): the
JSONata readers of its reader entries and of the holder to ask about, and the sweep a plain
mutex waiter's liveness check runs on a key a *shared hold* owns (readers that ended without
leaving) - :mod:`locked_workflow.state_machines.shared_protocol`'s REAP_READ, REAP_LAST,
FREE_EMPTY and RETIRE_READER wired into states.
"""

from __future__ import annotations

from typing import Optional

from aws_cdk import Stack, aws_stepfunctions as sfn

from locked_workflow.constructs_lib.custom_state import JsonataCustomState
from locked_workflow.constructs_lib.dynamodb_tasks import retry_transient, update_item_task
from locked_workflow.constructs_lib.section_record import Role
from locked_workflow.constructs_lib.kinds.base import SectionContext
from locked_workflow.constructs_lib.kinds.items import item_number, item_string
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines import shared_protocol as shared
from locked_workflow.state_machines.lock_protocol import jsonata


def entry_of(item: str, owner: str) -> str:
    """JSONata: the reader entry of ``owner`` on the lock item ``item`` (DynamoDB JSON), maybe absent."""
    return f"$lookup({item}, {shared.reader_attribute_expression(owner)}).M"


def expired_reader(item: str) -> str:
    """JSONata: the owner of one reader entry of ``item`` whose lease is over, or ''."""
    prefix = shared.READER_PREFIX
    return (
        f"( $i := {item}; $k := $filter($keys($i), function($n) {{ $substring($n, 0, {len(prefix)}) = '{prefix}' "
        f"and $number($lookup($i, $n).M.`{protocol.EXPIRES_AT}`.N) < $millis() }}); "
        f"$count($k) > 0 ? $substringAfter($k[0], '{prefix}') : '' )"
    )


#: What an execution's acquisition's owner contains (``<execution ARN>#<uuid>``; a client's does not).
EXECUTION = ":execution:"


def suspect(item: str, owner: str, me: str, wait_variable: str, turn: Optional[str] = None) -> str:
    """JSONata: whose execution the fallback's liveness check asks about - ``{owner, reader,
    expiresAt, grace, acquiredAt}`` (its lease, stop grace and acquisition as read), or null: the writer holder (an execution's acquisition, not mine), else one of the reader
    entries of executions whose lease runs, in turn (sorted, the ``rounds``-th - or the
    ``turn``-th - modulo their number: every reader is asked about within as many checks as
    there are readers)."""
    prefix, execution = shared.READER_PREFIX, EXECUTION
    turn = turn or f"${wait_variable}.rounds"
    return (
        f"( $i := {item}; $o := {owner}; "
        f"$r := $sort($append([], $filter($keys($i), function($n) {{ $substring($n, 0, {len(prefix)}) = '{prefix}' "
        f"and $contains($n, '{execution}') and $number($lookup($i, $n).M.`{protocol.EXPIRES_AT}`.N) >= $millis() }}))); "
        f"$o != '' and $o != '{shared.SHARED}' and $o != {me} and $contains($o, '{execution}') "
        f"? {{'owner': $o, 'reader': false, 'expiresAt': {item_number('$i', protocol.EXPIRES_AT)}, "
        f"'grace': {item_number('$i', protocol.GRACE)}, 'acquiredAt': {item_number('$i', protocol.ACQUIRED_AT)}}} "
        f": ($count($r) > 0 ? ( $n := $r[({turn}) % $count($r)]; $e := $lookup($i, $n).M; "
        f"{{'owner': $substringAfter($n, '{prefix}'), 'reader': true, "
        f"'expiresAt': $number($e.`{protocol.EXPIRES_AT}`.N), 'grace': {item_number('$e', protocol.GRACE)}, "
        f"'acquiredAt': {item_number('$e', protocol.ACQUIRED_AT)}}} ) "
        f": null) )"
    )


def presence_token(row: str, acquired: str) -> str:
    """JSONata: the token to probe on the presence row ``row`` (DynamoDB JSON, maybe absent) -
    registered for the acquisition ``acquired``, which did not depart - or null."""
    token, of, closed = (f"{row}.`{a}`" for a in (protocol.PRESENCE, protocol.PRESENCE_OF, protocol.PRESENCE_CLOSED))
    condition = protocol.probe_token_condition(token=token, of=of, closed=closed, acquired=acquired)
    return f"({condition}) ? {token}.S : null"


def shared_hold_expression(item: str, turn: str) -> str:
    """JSONata over a lock item ``item`` (DynamoDB JSON) read by a *plain mutex* waiter's
    liveness check: null unless a shared hold owns it, else ``{readers, expired, suspect}`` -
    the reader count, one reader entry whose lease is over (its owner, or ''), and the reader
    entry of an execution to ask Step Functions about (``turn``-th in turn, as
    :func:`_suspect`; null if none)."""
    owner = item_string(item, protocol.OWNER)
    return (
        f"({owner} = '{shared.SHARED}' ? {{'readers': {item_number(item, shared.READERS)}, "
        f"'expired': {expired_reader(item)}, 'suspect': {suspect(item, owner, chr(39) * 2, '', turn)}}} : null)"
    )


def shared_hold_sweep(section: SectionContext, *, holder_variable: str, then: sfn.State) -> list[tuple[str, sfn.State]]:
    """A plain mutex waiter's liveness check on a key a shared hold owns (readers of
    ``Lock.shared`` / a read/write ``LockClient``; ``$<holder_variable>.shared``:
    :func:`shared_hold_expression`, ``.key``: the item read): a mutex cannot take a shared
    hold over (its ACQUIRE refuses ``owner = shared``), so without this a reader that ended
    without leaving - stopped right after its claim, failed past its release - kept the key
    from a plain mutex until this module's own participants came by, for ever if none did.
    The branches (JSONata condition, first state) of the check's choice, each ending in
    ``then``:

    - a reader entry whose lease is over -> ``ReapReader`` (``REAP_READ``; ``ReapLastReader``,
      ``REAP_LAST`` for the last one, which ends the shared hold: the next acquire takes the key);
    - no reader entry (an item the first protocol's two-write leave left) -> ``FreeEmptyShared``
      (``FREE_EMPTY``);
    - else one reader entry of an execution in turn -> ``DescribeReader``
      (``DescribeExecution``) -> ``ReaderEnded?`` -> ended, and its stop grace from its end is
      sooner than its lease's end -> ``RetireEndedReader`` (``RETIRE_READER``: held for the
      grace from its end, that acquisition only), reaped at a later round.

    Every one of them runs on the check's rounds only: the mutex's uncontended path is
    unchanged. Refused or failed: nothing changes, the next round looks again. A reader's
    cancelled branch (its execution running on) is not probed here: its lease, the janitor
    or this module's own waiters' presence probe end it."""
    s, h = section, "$" + holder_variable
    key = f"{h}.key"

    def update(name: str, write: protocol.LockWrite, values: dict, reader: Optional[str]) -> sfn.State:
        args = shared.arguments(jsonata(key), write, values, reader=reader and "")
        if reader:  # the entry's attribute, evaluated at run time from the reader's owner
            args["ExpressionAttributeNames"][shared.READER_PLACEHOLDER] = jsonata(shared.reader_attribute_expression(reader))
        task = update_item_task(s, s.state_name(name), s.table, args, outputs=jsonata("$states.input"))
        retry_transient(task)
        task.add_catch(then, errors=["States.ALL"], outputs=jsonata("$states.input"))
        return task.next(then)

    now = {":now": {"N": jsonata(protocol.NOW_EXPRESSION)}}
    counts = {":one": {"N": "1"}, ":minusOne": {"N": "-1"}}
    expired = f"{h}.shared.expired"
    reap_last = update("ReapLastReader", shared.REAP_LAST, {**now, **counts}, expired)
    reap = update("ReapReader", shared.REAP_READ, {**now, **counts}, expired)
    free = update("FreeEmptyShared", shared.FREE_EMPTY, {":shared": {"S": shared.SHARED}, ":zero": {"N": "0"}}, None)
    stop = "$states.result.StopDate"
    alive = " or ".join(f"$states.result.Status = '{status}'" for status in protocol.ALIVE_STATUSES)
    ended = f"({alive} or $not($exists({stop}))) ? null : ($type({stop}) = 'number' ? {stop} : $toMillis({stop}))"
    suspect = f"{h}.shared.suspect"
    describe = JsonataCustomState(s, s.state_name("DescribeReader"), state_json={
        "Type": "Task", "QueryLanguage": "JSONata",
        "Resource": f"arn:{Stack.of(s).partition}:states:::aws-sdk:sfn:describeExecution",
        "Arguments": {"ExecutionArn": jsonata(f"$substringBefore({suspect}.owner, '{protocol.OWNER_SEPARATOR}')")},
        "Assign": {holder_variable: jsonata(f"$merge([{h}, {{'endedAt': {ended}}}])")},
        "Output": jsonata("$states.input"),
    })
    s.record(describe, Role.LIVENESS_CHECK)
    describe.add_catch(then, errors=["States.ALL"], outputs=jsonata("$states.input"))
    retire = update("RetireEndedReader", shared.RETIRE_READER,
                    {":endedAt": {"N": jsonata(f"$string({h}.endedAt)")}}, f"{suspect}.owner")
    reader_ended = sfn.Choice.jsonata(s, "ReaderEnded", state_name=s.state_name("ReaderEnded?"))
    # (a retire only ever shortens a lease: one that ends before the grace after the end is left to end by itself)
    reader_ended.when(sfn.Condition.jsonata(jsonata(
        f"$type({h}.endedAt) = 'number' and {h}.endedAt + {suspect}.grace < {suspect}.expiresAt")), retire)
    reader_ended.otherwise(then)
    describe.next(reader_ended)
    held = f"$type({h}.shared) = 'object'"
    return [
        (f"{held} and {expired} != '' and {h}.shared.readers <= 1", reap_last),
        (f"{held} and {expired} != ''", reap),
        (f"{held} and {h}.shared.readers = 0", free),
        (f"{held} and $type({suspect}) = 'object'", describe),
    ]
