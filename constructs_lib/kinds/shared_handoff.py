"""The read/write kinds' handoff and a reader's leave (``Lock.shared`` / ``Lock.exclusive``):
:mod:`locked_workflow.state_machines.shared_protocol`'s GRANT_READ, GRANT_WRITE, SKIP, MARK,
RELEASE_WRITE, LEAVE_READ and LEAVE_LAST wired into states.

Handoff (c: the last served ticket): read row c + 1 -> a parked reader: GRANT_READ, wake it,
go on with c + 1 | a parked writer: GRANT_WRITE, wake it, stop | gone: SKIP, go on | nobody
parked: a holding writer RELEASEs and reads the row again; a helper MARKs a row that never came.
"""

from __future__ import annotations

from typing import Optional

from aws_cdk import Duration, aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks

from locked_workflow.constructs_lib.dynamodb_tasks import retry_transient
from locked_workflow.constructs_lib.kinds.items import item_number
from locked_workflow.constructs_lib.kinds.shared_hold import entry_of
from locked_workflow.constructs_lib.kinds.shared_states import READ, WRITE, SharedStates
from locked_workflow.state_machines import errors
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines import shared_protocol as shared
from locked_workflow.state_machines.lock_protocol import jsonata


def build_handoff(st: SharedStates, suffix: str, *, key: str, me: str, start: str, holding: bool,
                  then: Optional[sfn.State], self_grant: Optional[sfn.State] = None,
                  tickets: Optional[str] = None,
                  lost: Optional[sfn.State] = None, fence: str = "0") -> sfn.State:
    """Run the handoff from ticket ``start`` (the model's ``look`` .. ``release``): ``holding``,
    I am a writer still holding the key; ``self_grant``, a helper's way to its own row; ``tickets``, a helper's
    view of the last ticket out (a row that never came is marked). Ends in ``then``."""
    s, f = st.section, st.vars()
    h = "$" + f["handoff"]
    name = lambda x: s.state_name(f"{suffix}.{x}")  # noqa: E731
    end_state = then or sfn.Succeed(s, f"{suffix}.Done", state_name=name("Done"))
    row = "$states.result.Item"
    hole_ms = st.park_timeout_s * 1000
    nxt = f"{h}.row.owner.S"
    catch_all = dict(errors=["States.ALL"], outputs=jsonata("$states.input"))

    def look(state: str, first: bool) -> tasks.DynamoGetItem:
        c = start if first else f"{h}.c"
        base = f"{{'c': {start}, 'holding': {'true' if holding else 'false'}}}" if first else h
        return st.get(f"{suffix}.{state}", st.row_key(key, f"{c} + 1"), {f["handoff"]: jsonata(
            f"$merge([{base}, {{'row': {row}, 'st': {fair.row_state_expression(row, hole_ms=hole_ms)}}}])")})

    first, again = look("Look", True), look("LookAgain", False)
    # after a grant: the next ticket, and I hold nothing (a grant frees a writer runner)
    step = f"$merge([{h}, {{'c': {h}.c + 1, 'holding': false}}])"

    # where a handoff goes when it stops: a holding writer releases and looks again
    end = st.choice(f"{suffix}.End") if holding else end_state
    if holding:
        release = st.update(f"{suffix}.Release", key, shared.RELEASE_WRITE,
                            {":me": {"S": jsonata(me)}, ":fence": {"N": jsonata(f"$string({fence})")}},
                            assign={f["handoff"]: jsonata(f"$merge([{h}, {{'holding': false}}])"),
                                    **s.held_assign(name("Release"))}, retry=False)
        release_again = st.update(f"{suffix}.ReleaseAgain", key, shared.RELEASE_WRITE,
                                  {":me": {"S": jsonata(me)}, ":fence": {"N": jsonata(f"$string({fence})")}},
                                  assign={f["handoff"]: jsonata(f"$merge([{h}, {{'holding': false}}])"),
                                          **s.held_assign(name("ReleaseAgain"))})
        release.add_catch(release_again, errors=list(errors.TRANSIENT_ERRORS), outputs=jsonata("$states.input"))
        # a refused first release: the key was taken over (Lock.Lost) - unless a redrive reran
        # a release that had applied (as the mutex's); a retry's refusal is my own earlier
        # release - look again either way
        refused: sfn.State = end_state
        if lost is not None:
            refused = st.choice(f"{suffix}.ReleaseResumed").when(
                sfn.Condition.jsonata(jsonata(protocol.resumed_release_applied_expression(
                    s.variables["lock"], s.variables["done"]))),
                again, assign={f["handoff"]: jsonata(f"$merge([{h}, {{'holding': false}}])")},
            ).otherwise(lost)
        release.add_catch(refused, errors=[errors.CONDITION_FAILED], outputs=jsonata("$states.input"))
        release.add_catch(end_state, **catch_all)
        release_again.add_catch(again, errors=[errors.CONDITION_FAILED], outputs=jsonata("$states.input"),
                                assign={f["handoff"]: jsonata(f"$merge([{h}, {{'holding': false}}])")})
        release_again.add_catch(end_state, **catch_all)
        release.next(again)
        release_again.next(again)
        st.when(end, f"{h}.holding = true", release)
        end.otherwise(end_state)

    values = {**st.lock_values(me=me), ":one": {"N": "1"}, ":zero": {"N": "0"},
              ":prev": {"N": jsonata(f"$string({h}.c)")}, ":ticket": {"N": jsonata(f"$string({h}.c + 1)")}}
    claim_end = f"$string($millis() + {st.claim_window_ms})"

    # a holding writer's first grant ends its hold: its length for monitoring (held_assign)
    def grant(kind: str, polling: bool) -> sfn.TaskStateBase:
        """The grant to the waiter of row c + 1 - a parked one (woken next) or a polling one
        (a LockClient: it finds the grant at its next look, so the grant itself moves on)."""
        name_ = f"{suffix}.Grant{'Read' if kind == READ else 'Write'}{'Polling' if polling else ''}"
        held = s.held_assign(s.state_name(name_), when=f"{h}.holding = true") if holding else {}
        assign = {**held, **({f["handoff"]: jsonata(step)} if polling else {})} or None
        if kind == READ:  # its entry with a claim-window lease; then go on with c + 1
            return st.update(name_, key, shared.GRANT_READ, {
                **values, ":entry": shared.entry_value(expires_at=jsonata(claim_end),
                                                       acquired_at=jsonata(protocol.NOW_EXPRESSION),
                                                       grace=jsonata(f"{h}.row.`{fair.GRACE_MS}`.N"))},
                reader=nxt, retry=False, assign=assign)
        # (refused while readers hold: the last reader hands off)
        return st.update(name_, key, shared.GRANT_WRITE, {
            **values, ":next": {"S": jsonata(nxt)}, ":expiresAt": {"N": jsonata(claim_end)},
            ":grace": {"N": jsonata(f"{h}.row.`{fair.GRACE_MS}`.N")}}, retry=False, assign=assign)

    grant_read, grant_write = grant(READ, False), grant(WRITE, False)
    grant_read_polling, grant_write_polling = grant(READ, True), grant(WRITE, True)

    def wake(state: str, then_state: sfn.State) -> tasks.CallAwsService:
        send = tasks.CallAwsService.jsonata(
            s, f"{suffix}.{state}", state_name=name(state), service="sfn", action="sendTaskSuccess",
            parameters={"TaskToken": jsonata(f"{h}.row.token.S"), "Output": "{\"granted\": true}"},
            iam_action="states:SendTaskSuccess",
            # task tokens of service integrations cannot be scoped by IAM: the one resource is *
            iam_resources=["*"], outputs=jsonata("$states.input"),
            assign={f["handoff"]: jsonata(step)})
        send.add_retry(errors=[errors.WAKE_THROTTLED], interval=Duration.seconds(1), backoff_rate=2.0,
                       max_attempts=3, jitter_strategy=sfn.JitterType.FULL)
        # a failed wake-up: the grant is never worked under and lapses after the claim
        # window, unless its waiter finds it at its fallback
        send.add_catch(then_state, errors=["States.ALL"], outputs=jsonata("$states.input"),
                       assign={f["handoff"]: jsonata(step)})
        return send.next(then_state)

    wake_reader = wake("WakeReader", again)
    stop = sfn.Pass.jsonata(s, f"{suffix}.Stopped", state_name=name("Stopped"), outputs=jsonata("$states.input"),
                            assign={f["handoff"]: jsonata(f"$merge([{h}, {{'holding': false}}])")})
    stop.next(end)
    wake_writer = wake("WakeWriter", stop)
    grant_read.next(wake_reader)
    grant_write.next(wake_writer)
    grant_read_polling.next(again)
    grant_write_polling.next(stop)

    # a grant refused or its answer lost: granted after all (by this very write)? wake it
    recheck = st.get(f"{suffix}.Recheck", st.lock_key(key), {f["handoff"]: jsonata(
        f"$merge([{h}, {{'granted': $states.result.Item.`{fair.SERVED}`.N = $string({h}.c + 1) and "
        f"($exists({entry_of('$states.result.Item', nxt)}) or $states.result.Item.`{protocol.OWNER}`.S = {nxt})}}])")})
    recheck.add_catch(end, **catch_all)
    granted = st.choice(f"{suffix}.Granted")
    st.when(granted, f"{h}.granted = true and {h}.row.`{shared.KIND}`.S = '{READ}'", wake_reader)
    st.when(granted, f"{h}.granted = true", wake_writer)
    granted.otherwise(end)
    recheck.next(granted)
    for g in (grant_read, grant_write, grant_read_polling, grant_write_polling):
        g.add_catch(recheck, errors=[errors.CONDITION_FAILED, *errors.TRANSIENT_ERRORS],
                    outputs=jsonata("$states.input"))
        g.add_catch(end, **catch_all)

    # (a skip keeps a writer runner's hold; the row skipped - a waiter gone, or a hole - is
    # deleted: a served ticket's row is never read again, and nobody else would delete it)
    skip = st.update(f"{suffix}.Skip", key, shared.SKIP, values,
                     assign={f["handoff"]: jsonata(f"$merge([{h}, {{'c': {h}.c + 1}}])")})
    skip.add_catch(end, **catch_all)
    drop_skipped = tasks.DynamoDeleteItem.jsonata(s, s.state_name(f"{suffix}.DropSkipped"), table=s.table,
                                                  key=st.row_key(key, f"{h}.c"), outputs=jsonata("$states.input"))
    retry_transient(drop_skipped)
    drop_skipped.add_catch(again, **catch_all)
    skip.next(drop_skipped)
    drop_skipped.next(again)

    decide = st.choice(f"{suffix}.Next")
    if self_grant is not None:
        st.when(decide, f"{h}.st = 'wake' and {nxt} = {me}", self_grant)
    st.when(decide, f"{h}.st = 'wake' and {h}.row.`{shared.KIND}`.S = '{READ}'", grant_read)
    st.when(decide, f"{h}.st = 'wake'", grant_write)
    st.when(decide, f"{h}.st = 'grant' and {h}.row.`{shared.KIND}`.S = '{READ}'", grant_read_polling)
    st.when(decide, f"{h}.st = 'grant'", grant_write_polling)
    st.when(decide, f"{h}.st = 'skip'", skip)
    if tickets is not None:  # a helper: a row that never came is marked (skipped once old)
        mark = st.update(f"{suffix}.Mark", fair.row_key_expression(key, f"{h}.c + 1"), shared.MARK, {
            ":since": {"N": jsonata(f"$exists({h}.row.`{fair.READY}`.N) ? {h}.row.`{fair.READY}`.N : $string($millis())")}})
        mark.add_catch(end, **catch_all)
        mark.next(end)
        st.when(decide, f"{h}.c + 1 <= {tickets} and $not($exists({h}.row.`{fair.READY}`.N))", mark)
    decide.otherwise(end)
    for t in (first, again):
        t.add_catch(end, **catch_all)
        t.next(decide)
    return first

# -- release ----------------------------------------------------------------------------


def build_leave_read(st: SharedStates, suffix: str, *, then: sfn.State, lost: Optional[sfn.State]) -> sfn.State:
    """A reader leaves: LEAVE_READ while other readers hold; refused, LEAVE_LAST (the last
    one: the shared hold ends in the same write); refused again, a read says which (the
    count moved) or that my entry is gone (reaped: ``Lock.Lost``; or by my own attempt whose
    answer was lost: go on). The last one runs the handoff. After
    ``shared_protocol.MAX_LEAVE_ROUNDS`` reads whose next write was refused again, the entry
    is retired (RETIRE_READER at now: it ends its stop grace from now) and the leave ends."""
    s, v = st.section, st.section.variables
    lock = "$" + v["lock"]
    key, me = f"{lock}.key", f"{lock}.owner"
    item = "$states.result.Attributes"
    values = {":one": {"N": "1"}, ":minusOne": {"N": "-1"}}
    retried = {v["lock"]: jsonata(f"$merge([{lock}, {{'leaveRetried': true}}])")}  # an answer may be lost

    def counts(item: str, mine: str = "false", more: str = "") -> dict:
        return {v["lock"]: jsonata(f"$merge([{lock}, {{'left': {{'readers': {item_number(item, shared.READERS)}, "
                                   f"'served': {item_number(item, fair.SERVED)}, 'mine': {mine}}}{more}}}])")}

    def write(name: str, leave: protocol.LockWrite, *, again: bool) -> sfn.TaskStateBase:
        return st.update(name, key, leave, values, reader=me, return_values="ALL_NEW",
                         assign={**counts(item), **s.held_assign(s.state_name(name))}, retry=again)

    leave, leave_again = write(suffix, shared.LEAVE_READ, again=False), write(f"{suffix}Again", shared.LEAVE_READ, again=True)
    last, last_again = (write(f"{suffix}Last", shared.LEAVE_LAST, again=False),
                        write(f"{suffix}LastAgain", shared.LEAVE_LAST, again=True))
    # (each read counts a round: a write of mine was refused since the last one)
    read = st.get(f"{suffix}Read", st.lock_key(key), counts(
        "$states.result.Item", f"$exists({entry_of('$states.result.Item', me)})",
        f", 'leaveRounds': ($exists({lock}.leaveRounds) ? {lock}.leaveRounds : 0) + 1"))
    which = st.choice(f"{suffix}Which")
    # the count moved between every read and write of mine, MAX_LEAVE_ROUNDS times: retire
    # my entry (it ends its stop grace from now, then anyone may reap it) and stop
    retire = st.update(f"{suffix}Retire", key, shared.RETIRE_READER,
                       {":endedAt": {"N": jsonata(protocol.NOW_EXPRESSION)}}, reader=me,
                       assign=s.held_assign(s.state_name(f"{suffix}Retire")))
    retire.add_catch(then, errors=["States.ALL"], outputs=jsonata("$states.input"))
    retire.next(then)
    st.when(which, f"{lock}.left.mine and {lock}.leaveRounds >= {shared.MAX_LEAVE_ROUNDS}", retire)
    st.when(which, f"{lock}.left.mine and {lock}.left.readers <= 1", last)
    st.when(which, f"{lock}.left.mine", leave)
    handed = st.choice(f"{suffix}.Last")
    # my lost answer took it, or my leave that a redrive reran had applied: was I the last?
    st.when(which, f"{lock}.leaveRetried = true or "
                      f"({protocol.resumed_release_applied_expression(v['lock'], v['done'])})", handed)
    which.otherwise(lost or then)  # gone, and no attempt of mine could have taken it: reaped
    leave.add_catch(last, errors=[errors.CONDITION_FAILED], outputs=jsonata("$states.input"))
    last.add_catch(read, errors=[errors.CONDITION_FAILED], outputs=jsonata("$states.input"))
    for first, again in ((leave, leave_again), (last, last_again)):
        first.add_catch(again, errors=list(errors.TRANSIENT_ERRORS), outputs=jsonata("$states.input"),
                        assign=retried)
        again.add_catch(read, errors=[errors.CONDITION_FAILED], outputs=jsonata("$states.input"))
    for t in (leave, leave_again, last, last_again, read):
        t.add_catch(then, errors=["States.ALL"], outputs=jsonata("$states.input"))
    read.next(which)
    handoff = build_handoff(st, f"{suffix}.Handoff", key=key, me=me, start=f"{lock}.left.served",
                            holding=False, then=then)
    # the last reader (its write ended the shared hold): hand off to whoever queues
    st.when(handed, f"{lock}.left.readers = 0", handoff)
    handed.otherwise(then)
    for t in (leave, leave_again, last, last_again):
        t.next(handed)
    return leave
