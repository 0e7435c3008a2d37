"""The shared (read) and exclusive (write) lock kinds (``Lock.shared`` / ``Lock.exclusive``):
:mod:`locked_workflow.state_machines.shared_protocol` wired into a section's states (STANDARD
state machines: waiters park on a task token)::

    Fast (FAST_READ | FAST_WRITE) --ok--> work --> release
       |--refused--> Enqueue (ticket) --> Park (transactWriteItems.waitForTaskToken)
                                           |--woken--> Claim (CLAIM_*) --> DropRow --> work
                                           |--refused (admissible)--> Admit (GRANT_* to me)
                                           |--park timeout--> Inspect (the fallback)
       (a reader whose Enqueue is refused: CountReaders -> at the cap, Fail Lock.TooManyReaders)
       Inspect: granted -> Claim | passed -> Requeue | head of a free key -> Admit (a reader at
                the cap: TooManyQueued -> Leave -> Lock.TooManyReaders)
                | an expired reader holds back the head -> Reap | behind a head that does not
                move, free of writers -> the handoff for it | a liveness check due (once a
                round) -> ReadPresence (the suspect - the writer holder, else a reader entry in
                turn - its hold's presence row) -> a token of that acquisition: ProbeHolder
                (SendTaskHeartbeat; accepted -> Park) -> DescribeHolder -> its execution ended:
                RetireHolder / RetireReader (RETIRE / RETIRE_READER from its end) | running on
                with its token closed (a cancelled branch): AbandonHolder / AbandonReader (the
                row's conditional Delete + RETIRE_GONE_*, from now) -> Inspect again if that
                grace is over | else -> Park

    The hold (``detect_cancellation``): a Parallel of the work (then DEPART_ROW, read the row,
    dismiss) and the presence branch (PRESENT_ROW.waitForTaskToken on the row
    ``!presence!<owner>``); the release first deletes the row (Forget).

    Release of a writer: the handoff from its ticket, holding (its first grant or RELEASE frees
    the key). Release of a reader: LEAVE_READ, or LEAVE_LAST as the last one (which ends the
    shared hold) and runs the handoff. A reader that admitted itself runs the handoff before its work, so
    the readers queued behind it go in too.

    Handoff (c: the last served ticket): read row c + 1 -> a parked reader: GRANT_READ, wake it,
    go on with c + 1 | a parked writer: GRANT_WRITE, wake it, stop | gone: SKIP, go on | nobody
    parked: a holding writer RELEASEs and reads the row again; a
    helper MARKs a row that never came.

Every DynamoDB expression is the protocol module's; this module only wires them.
"""

from __future__ import annotations

from typing import Optional

from aws_cdk import Duration, Stack, aws_iam as iam, aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks

from locked_workflow.constructs_lib.custom_state import JsonataCustomState
from locked_workflow.constructs_lib.dynamodb_tasks import attribute_value, retry_transient, update_item_task
from locked_workflow.constructs_lib.fair_mutex import _item_number, _item_string
from locked_workflow.constructs_lib.lock_kinds import LockedSection, Mutex, retry_transient_sdk
from locked_workflow.state_machines import errors
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines import shared_protocol as shared
from locked_workflow.state_machines.lock_protocol import ENTRY, jsonata

READ, WRITE = shared.READ, shared.WRITE


def _entry_of(item: str, owner: str) -> str:
    """JSONata: the reader entry of ``owner`` on the lock item ``item`` (DynamoDB JSON), maybe absent."""
    return f"$lookup({item}, {shared.reader_attribute_expression(owner)}).M"


def _expired_reader(item: str) -> str:
    """JSONata: the owner of one reader entry of ``item`` whose lease is over, or ''."""
    prefix = shared.READER_PREFIX
    return (
        f"( $i := {item}; $k := $filter($keys($i), function($n) {{ $substring($n, 0, {len(prefix)}) = '{prefix}' "
        f"and $number($lookup($i, $n).M.`{protocol.EXPIRES_AT}`.N) < $millis() }}); "
        f"$count($k) > 0 ? $substringAfter($k[0], '{prefix}') : '' )"
    )


#: What an execution's acquisition's owner contains (``<execution ARN>#<uuid>``; a client's does not).
_EXECUTION = ":execution:"


def _suspect(item: str, owner: str, me: str, wait_variable: str, turn: Optional[str] = None) -> str:
    """JSONata: whose execution the fallback's liveness check asks about - ``{owner, reader,
    expiresAt, grace, acquiredAt}`` (its lease, stop grace and acquisition as read), or null: the writer holder (an execution's acquisition, not mine), else one of the reader
    entries of executions whose lease runs, in turn (sorted, the ``rounds``-th - or the
    ``turn``-th - modulo their number: every reader is asked about within as many checks as
    there are readers)."""
    prefix, execution = shared.READER_PREFIX, _EXECUTION
    turn = turn or f"${wait_variable}.rounds"
    return (
        f"( $i := {item}; $o := {owner}; "
        f"$r := $sort($append([], $filter($keys($i), function($n) {{ $substring($n, 0, {len(prefix)}) = '{prefix}' "
        f"and $contains($n, '{execution}') and $number($lookup($i, $n).M.`{protocol.EXPIRES_AT}`.N) >= $millis() }}))); "
        f"$o != '' and $o != '{shared.SHARED}' and $o != {me} and $contains($o, '{execution}') "
        f"? {{'owner': $o, 'reader': false, 'expiresAt': {_item_number('$i', protocol.EXPIRES_AT)}, "
        f"'grace': {_item_number('$i', protocol.GRACE)}, 'acquiredAt': {_item_number('$i', protocol.ACQUIRED_AT)}}} "
        f": ($count($r) > 0 ? ( $n := $r[({turn}) % $count($r)]; $e := $lookup($i, $n).M; "
        f"{{'owner': $substringAfter($n, '{prefix}'), 'reader': true, "
        f"'expiresAt': $number($e.`{protocol.EXPIRES_AT}`.N), 'grace': {_item_number('$e', protocol.GRACE)}, "
        f"'acquiredAt': {_item_number('$e', protocol.ACQUIRED_AT)}}} ) "
        f": null) )"
    )


def _presence_token(row: str, acquired: str) -> str:
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
    owner = _item_string(item, protocol.OWNER)
    return (
        f"({owner} = '{shared.SHARED}' ? {{'readers': {_item_number(item, shared.READERS)}, "
        f"'expired': {_expired_reader(item)}, 'suspect': {_suspect(item, owner, chr(39) * 2, '', turn)}}} : null)"
    )


def shared_hold_sweep(section: "LockedSection", *, holder_variable: str, then: sfn.State) -> list[tuple[str, sfn.State]]:
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


class SharedLockKind(Mutex):
    """Many readers or one writer per key, in ticket order, with direct handoff."""

    name = "shared"
    builds_own_wait_path = True
    #: The hold registers a presence token on a row of its own (``shared_protocol.PRESENT_ROW``:
    #: a token per reader on the one lock item would make it grow ~1 KB per concurrent reader),
    #: which the waiters' liveness check probes.
    presence = True
    presence_rows = True
    #: Waiters park on a task token (the section's history budget counts park rounds).
    parks_on_token = True
    polling = False
    READ_MODE, WRITE_MODE = READ, WRITE

    def __init__(self, user_key: str, *, mode: str, park_timeout_s: int) -> None:
        super().__init__(user_key)
        if mode not in (READ, WRITE):
            raise ValueError(f"`mode` must be {READ!r} or {WRITE!r}, got: {mode!r}")
        self.mode = mode
        self.park_timeout_s = park_timeout_s

    def key_expression(self, namespace: str) -> str:
        return protocol.key_expression(self.user_key, namespace, fair.ROW_KEY_RESERVE_BYTES)

    def holds_same_lock(self, variable: str) -> str:
        # not re-entrant: a nested section on the same key takes its own hold (a writer inside a
        # reader's work must not pass through on a shared hold); one on the same key expression
        # is refused at synth (entry_fields)
        return "false"

    def entry_fields(self, enclosing_lock_variables=()):
        """(At render, with the enclosing sections known.) Refuse a section nested in one that
        holds the same key - the same key expression, table and namespace: not re-entrant, its
        hold would wait for the enclosing one (a writer for its own reader or writer; a reader
        for its own writer, or behind a writer queued meanwhile) until ``max_wait``."""
        from locked_workflow.constructs_lib.locked_section import _enclosing_sections, _same_table

        me = self._section
        for outer in _enclosing_sections():
            if (getattr(outer.kind, "user_key", None) == self.user_key and outer.lock.record_table is None
                    and outer.key_namespace == me.key_namespace and _same_table(outer.table, me.table)):
                factory = "shared" if self.mode == READ else "exclusive"
                raise ValueError(
                    f"`lock` must not be Lock.{factory} on the key its enclosing section {outer.node.path!r} "
                    f"holds (same key, table and `key_namespace`: the read/write kinds are not re-entrant, "
                    f"and the nested hold would wait for the enclosing one), got: Lock.{factory}"
                    f"({self.user_key!r}) in {me.node.path!r}. Give it another key or `key_namespace`, "
                    "or move it out of the enclosing section's work")
        return {}

    # -- names and values -------------------------------------------------------------------

    def _vars(self) -> dict:
        lock = self._section.variables["lock"]
        return {"ticket": lock + "Ticket", "seen": lock + "Seen", "handoff": lock + "Handoff"}

    @property
    def _claim_window_ms(self) -> int:
        """How long a handoff's grant lasts unconfirmed (a woken waiter claims within it)."""
        return max(self.park_timeout_s, 10) * 1000

    def _lock_values(self, *, me: str, stale: Optional[str] = None) -> dict:
        """Values of the free conditions (WRITER_FREE / ALL_FREE): ``me`` is ACQUIRE's ``:me``."""
        return {":me": {"S": jsonata(me)}, ":stale": {"S": jsonata(stale or me)},
                ":now": {"N": jsonata(protocol.NOW_EXPRESSION)}, ":shared": {"S": shared.SHARED},
                **shared.MAX_READERS_VALUES}

    @staticmethod
    def _pick(write: protocol.LockWrite, values: dict) -> dict:
        names = set(write.value_names())
        return {k: v for k, v in values.items() if k in names}

    def _args(self, key: str, write: protocol.LockWrite, values: dict, *, reader: Optional[str] = None,
              return_values: str = "NONE") -> dict:
        args = shared.arguments(jsonata(key), write, self._pick(write, values), reader=reader and "",
                                return_values=return_values)
        if reader:  # the entry's attribute, evaluated at run time from the reader's owner
            args["ExpressionAttributeNames"][shared.READER_PLACEHOLDER] = jsonata(
                shared.reader_attribute_expression(reader))
        return args

    def _row_key(self, key: str, ticket: str) -> dict:
        return {protocol.KEY_ATTRIBUTE: attribute_value({"S": jsonata(fair.row_key_expression(key, ticket))})}

    def _lock_key(self, key: str) -> dict:
        return {protocol.KEY_ATTRIBUTE: attribute_value({"S": jsonata(key)})}

    # -- presence (a row of the hold's own: shared_protocol.PRESENT_ROW) -----------------------

    def presence_key(self, section: "LockedSection") -> str:
        return shared.presence_row_key_expression(f"${section.variables['lock']}.owner")

    def presence_task(self, section: "LockedSection") -> tuple[str, dict]:
        """The hold's presence registration: PRESENT_ROW on its row (``.waitForTaskToken``)."""
        lock = "$" + section.variables["lock"]
        args = shared.arguments(jsonata(self.presence_key(section)), shared.PRESENT_ROW, {
            ":token": {"S": jsonata("$states.context.Task.Token")},
            ":acquiredAt": {"N": jsonata(f"$string({lock}.acquiredAt)")}, ":now": {"N": jsonata(protocol.NOW_EXPRESSION)}})
        del args["ReturnValues"]
        return "updateItem", {"TableName": section.table.table_name, **args}

    def depart_arguments(self, section: "LockedSection") -> dict:
        """DEPART_ROW on the hold's row (never refused: a hold's own work is not lost here -
        its release finds that out)."""
        lock = "$" + section.variables["lock"]
        return shared.arguments(jsonata(self.presence_key(section)), shared.DEPART_ROW,
                                {":acquiredAt": {"N": jsonata(f"$string({lock}.acquiredAt)")}})

    def _forget(self, suffix: str, then: sfn.State) -> sfn.State:
        """After the hold (both of its branches are over): its presence row goes, then ``then``
        (best effort: a row left behind is read only while its acquisition's hold is on the lock
        item, and its token, departed, is never probed)."""
        s = self._section
        if not s.detect_cancellation:
            return then
        forget = tasks.DynamoDeleteItem.jsonata(
            s, s.state_name(suffix), table=s.table, outputs=jsonata("$states.input"),
            key={protocol.KEY_ATTRIBUTE: attribute_value({"S": jsonata(self.presence_key(s))})})
        retry_transient(forget)
        forget.add_catch(then, errors=["States.ALL"], outputs=jsonata("$states.input"))
        return forget.next(then)

    def _record(self, item: str, *, ticket: str) -> str:
        """JSONata: the ``$lock`` record read from the lock item ``item`` after my acquisition."""
        if self.mode == READ:
            entry = _entry_of(item, f"{ENTRY}.owner")
            acquired, expires = f"$number({entry}.`{protocol.ACQUIRED_AT}`.N)", f"$number({entry}.`{protocol.EXPIRES_AT}`.N)"
        else:
            acquired, expires = _item_number(item, protocol.ACQUIRED_AT), _item_number(item, protocol.EXPIRES_AT)
        return (
            f"{{'key': {ENTRY}.key, 'owner': {ENTRY}.owner, 'mode': '{self.mode}', "
            f"'fence': {_item_number(item, protocol.FENCE)}, 'acquiredAt': {acquired}, 'expiresAt': {expires}, "
            f"'ticket': {ticket}, '{protocol.REQUESTED_AT}': {ENTRY}.{protocol.REQUESTED_AT}, "
            f"{protocol.generation_field()}}}"
        )

    def _own_entry(self) -> dict:
        return shared.entry_value(expires_at=jsonata(protocol.lease_end_expression(self._lease_ms)),
                                  acquired_at=jsonata(protocol.NOW_EXPRESSION), grace=jsonata(f"$string({ENTRY}.grace)"))

    def _update(self, suffix: str, key: str, write: protocol.LockWrite, values: dict, *, reader: Optional[str] = None,
                return_values: str = "NONE", assign: Optional[dict] = None, outputs: Optional[str] = None,
                retry: bool = True) -> sfn.TaskStateBase:
        s = self._section
        task = update_item_task(s, s.state_name(suffix), s.table,
                                self._args(key, write, values, reader=reader, return_values=return_values),
                                assign=assign, outputs=jsonata(outputs) if outputs else None)
        if retry:
            retry_transient(task)
        return task

    def _get(self, suffix: str, key: dict, assign: dict) -> tasks.DynamoGetItem:
        s = self._section
        get = tasks.DynamoGetItem.jsonata(s, s.state_name(suffix), table=s.table, key=key, consistent_read=True,
                                          assign=assign, outputs=jsonata("$states.input"))
        retry_transient(get)
        return get

    def _choice(self, suffix: str) -> sfn.Choice:
        return sfn.Choice.jsonata(self._section, suffix, state_name=self._section.state_name(f"{suffix}?"))

    @staticmethod
    def _when(choice: sfn.Choice, condition: str, then: sfn.IChainable) -> sfn.Choice:
        return choice.when(sfn.Condition.jsonata(jsonata(condition)), then)

    # -- acquire ----------------------------------------------------------------------------

    def build_acquire(self, section: "LockedSection", lease_ms: int):
        self._section, self._lease_ms = section, lease_ms
        v, f = section.variables, self._vars()
        me, key, ticket = f"{ENTRY}.owner", f"{ENTRY}.key", f"${f['ticket']}"
        values = {**self._lock_values(me=me), ":entry": self._own_entry(), ":one": {"N": "1"}, ":zero": {"N": "0"},
                  ":expiresAt": {"N": jsonata(protocol.lease_end_expression(lease_ms))},
                  ":grace": {"N": jsonata(f"$string({ENTRY}.grace)")}}
        result = "$states.result.Attributes"
        enter = {v["lock"]: None, v["wait"]: jsonata("null")}

        def entered(ticket_expression: str) -> dict:
            return {**enter, v["lock"]: jsonata(self._record(result, ticket=ticket_expression))}

        # 1. the fast path (a lost response of a fast read: CLAIM_READ finds my entry - never
        # a second entry)
        if self.mode == READ:
            fast = self._update("Acquire", key, shared.FAST_READ, values, reader=me, return_values="ALL_NEW",
                                assign=entered("null"), outputs=f"{ENTRY}.input", retry=False)
            rejoin = self._update("Rejoin", key, shared.CLAIM_READ, values, reader=me, return_values="ALL_NEW",
                                  assign=entered("null"), outputs=f"{ENTRY}.input")
            rejoin.add_catch(fast, errors=[errors.CONDITION_FAILED], outputs=jsonata("$states.input"))
            rejoin.next(section.protected)
            fast.add_catch(rejoin, errors=list(errors.TRANSIENT_ERRORS), outputs=jsonata("$states.input"))
        else:
            fast = self._update("Acquire", key, shared.FAST_WRITE, values, return_values="ALL_NEW",
                                assign=entered(_item_number(result, fair.SERVED)), outputs=f"{ENTRY}.input")
            rejoin = None
        self._fast = fast

        timeout = sfn.Fail.jsonata(
            section, "Timeout", state_name=section.state_name("Timeout"), error=errors.ERROR_TIMEOUT,
            cause=f"the lock was held by another run for longer than max_wait ({section.max_wait_ms} ms)")
        # (a reader refused by the cap: FAST_READ and ENQUEUE_READ are refused; a read tells)
        crowded = self._build_crowded(otherwise=fast if section.max_wait_ms else timeout) if self.mode == READ else None
        if section.max_wait_ms == 0:
            fast.add_catch(crowded or timeout, errors=[errors.CONDITION_FAILED])
            return fast, fast, fast
        failed = sfn.Fail.jsonata(section, "QueueFailed", state_name=section.state_name("QueueFailed"),
                                  error=jsonata(f"${v['wait']}.error.Error"), cause=jsonata(f"${v['wait']}.error.Cause"))
        why = self._choice("Left")
        self._when(why, f"$exists(${v['wait']}.error)", failed).otherwise(timeout)
        on_error = dict(errors=["States.ALL"], outputs=jsonata("$states.input"),
                        assign={v["wait"]: jsonata(f"$merge([${v['wait']}, {{'error': $states.errorOutput}}])")})

        # 2. the ticket (refused: my fast path would enter now - try it again)
        enqueue = self._update(
            "Enqueue", key, shared.ENQUEUE_READ if self.mode == READ else shared.ENQUEUE_WRITE, values,
            return_values="ALL_NEW", outputs="$states.input",
            assign={f["ticket"]: jsonata(_item_number(result, fair.TICKETS))})
        enqueue.add_catch(crowded or fast, errors=[errors.CONDITION_FAILED], outputs=jsonata("$states.input"))
        enqueue.add_catch(why, **on_error)
        fast.add_catch(enqueue, errors=[errors.CONDITION_FAILED], outputs=jsonata("$states.input"),
                       assign={v["wait"]: jsonata(protocol.wait_bookkeeping_expression(v["wait"]))})
        if rejoin is not None:
            rejoin.add_catch(why, **on_error)

        # the work, after my row is gone (best effort: a row of a served ticket is never read)
        drop = tasks.DynamoDeleteItem.jsonata(section, section.state_name("DropRow"), table=section.table,
                                              key=self._row_key(key, ticket), outputs=jsonata(f"{ENTRY}.input"))
        retry_transient(drop)
        drop.add_catch(section.protected, errors=["States.ALL"], outputs=jsonata(f"{ENTRY}.input"))
        drop.next(section.protected)

        # 3. admit myself (the head of a key free for me)
        admitted = entered(ticket)
        if self.mode == READ:
            admit = self._update("Admit", key, shared.GRANT_READ,
                                 {**values, ":prev": {"N": jsonata(f"$string({ticket} - 1)")},
                                  ":ticket": {"N": jsonata(f"$string({ticket})")}},
                                 reader=me, return_values="ALL_NEW", assign=admitted, retry=False)
        else:
            admit = self._update("Admit", key, shared.GRANT_WRITE,
                                 {**values, ":next": {"S": jsonata(me)}, ":prev": {"N": jsonata(f"$string({ticket} - 1)")},
                                  ":ticket": {"N": jsonata(f"$string({ticket})")}},
                                 return_values="ALL_NEW", assign=admitted, retry=False)

        # 4. claim a grant handed to me
        if self.mode == READ:
            claim = self._update("Claim", key, shared.CLAIM_READ, values, reader=me, return_values="ALL_NEW",
                                 assign=admitted)
        else:
            claim = self._update("Claim", key, shared.CLAIM_WRITE,
                                 {**values, ":ticket": {"N": jsonata(f"$string({ticket})")}},
                                 return_values="ALL_NEW", assign=admitted)
        claim.next(drop)

        requeue = tasks.DynamoDeleteItem.jsonata(section, section.state_name("Requeue"), table=section.table,
                                                 key=self._row_key(key, ticket), outputs=jsonata("$states.input"))
        retry_transient(requeue)
        requeue.add_catch(enqueue, errors=["States.ALL"], outputs=jsonata("$states.input"))
        requeue.next(enqueue)

        # giving up (max_wait spent, or an error while queued): my row is marked left; granted
        # meanwhile -> the work after all
        leave = self._update("Leave", fair.row_key_expression(key, ticket), shared.LEAVE,
                             {":me": {"S": jsonata(me)}, ":one": {"N": "1"}})
        leave.add_catch(why, errors=["States.ALL"], outputs=jsonata("$states.input"))
        if self.mode == READ:
            claim_on_leave = self._update("ClaimOnLeave", key, shared.CLAIM_READ, values, reader=me,
                                          return_values="ALL_NEW", assign=admitted)
        else:
            claim_on_leave = self._update("ClaimOnLeave", key, shared.CLAIM_WRITE,
                                          {**values, ":ticket": {"N": jsonata(f"$string({ticket})")}},
                                          return_values="ALL_NEW", assign=admitted)
        claim_on_leave.add_catch(why, errors=["States.ALL"], outputs=jsonata("$states.input"))
        # (my row goes, as after any claim: DropRow takes the entry, as from Claim and Admit, and
        # unwraps the section's input itself)
        claim_on_leave.next(drop)
        leave.next(claim_on_leave)
        self._leave = leave

        # 5. park
        park = self._build_park(key=key, me=me, ticket=ticket)
        enqueue.next(park)
        park.next(claim)
        park.add_catch(admit, errors=[errors.TRANSACTION_CANCELED], outputs=jsonata("$states.input"))

        # 6. the fallback (a reader at the head of a key with no room for it gives up its place)
        too_many = sfn.Pass.jsonata(section, "TooManyQueued", state_name=section.state_name("TooManyQueued"),
                                    outputs=jsonata("$states.input"), assign={v["wait"]: jsonata(
                                        f"$merge([${v['wait']}, {{'error': {self._too_many_error()}}}])")})
        too_many.next(leave)
        inspect = self._build_inspect(key=key, me=me, ticket=ticket, claim=claim, requeue=requeue, admit=admit,
                                      park=park, too_many=too_many)
        waited = self._choice("WaitedEnough")
        self._when(waited, protocol.waited_enough_expression(v["wait"], section.max_wait_ms), leave)
        waited.otherwise(inspect)
        park.add_catch(waited, errors=[errors.STATES_TIMEOUT], outputs=jsonata("$states.input"),
                       assign={v["wait"]: jsonata(protocol.wait_bookkeeping_expression(v["wait"]))})
        park.add_catch(leave, **on_error)
        for state in (admit, claim):
            state.add_catch(inspect, errors=[errors.CONDITION_FAILED, *errors.TRANSIENT_ERRORS],
                            outputs=jsonata("$states.input"))
            state.add_catch(leave, **on_error)
        if self.mode == READ:  # a reader admitted from the queue admits the readers behind it
            cascade = self._build_handoff("Admitted", key=key, me=me, start=ticket, holding=False, then=drop)
            admit.next(cascade)
        else:
            admit.next(drop)
        return fast, fast, fast

    @staticmethod
    def _too_many_cause() -> str:
        return (f"the key already has {shared.MAX_READERS} readers, as many as a read/write lock allows at once "
                "(shared_protocol.MAX_READERS); nothing was written")

    def _too_many_error(self) -> str:
        """JSONata: the error object of a reader refused at the cap (as ``$states.errorOutput``)."""
        return f"{{'Error': '{errors.ERROR_TOO_MANY_READERS}', 'Cause': '{self._too_many_cause()}'}}"

    def _build_crowded(self, *, otherwise: sfn.State) -> sfn.State:
        """A reader whose first writes were refused: is the key at the cap (``readers`` >=
        ``shared_protocol.MAX_READERS``, read alone - never the whole item, which may be large)?
        Then ``Lock.TooManyReaders``, before any write of its own; else ``otherwise``."""
        s = self._section
        count = "$states.result.Item"
        read = tasks.DynamoGetItem.jsonata(
            s, s.state_name("CountReaders"), table=s.table, key=self._lock_key(f"{ENTRY}.key"), consistent_read=True,
            projection_expression=[tasks.DynamoProjectionExpression().with_attribute("#r")],
            expression_attribute_names={"#r": shared.READERS},
            assign={self._vars()["seen"]: jsonata(f"{{'readers': {_item_number(count, shared.READERS)}}}")},
            outputs=jsonata("$states.input"))
        retry_transient(read)
        read.add_catch(otherwise, errors=["States.ALL"], outputs=jsonata("$states.input"))
        refused = sfn.Fail.jsonata(s, "TooManyReaders", state_name=s.state_name("TooManyReaders"),
                                   error=errors.ERROR_TOO_MANY_READERS, cause=self._too_many_cause())
        full = self._choice("Crowded")
        self._when(full, f"${self._vars()['seen']}.readers >= {shared.MAX_READERS}", refused)
        full.otherwise(otherwise)
        return read.next(full)

    def _build_park(self, *, key: str, me: str, ticket: str) -> sfn.State:
        """My task token and kind on my row, unless my ticket may be admitted now or was passed
        (``park_transaction``'s two writes, with JSONata keys)."""
        s = self._section
        table = s.table.table_name
        lock_values = {**self._lock_values(me=me), ":zero": {"N": "0"},
                       ":ticket": {"N": jsonata(f"$string({ticket})")}, ":prev": {"N": jsonata(f"$string({ticket} - 1)")}}
        check = self._args(key, shared.PARK_UNLESS[self.mode], lock_values)
        row = self._args(fair.row_key_expression(key, ticket), shared.PARK, {
            ":me": {"S": jsonata(me)}, ":token": {"S": jsonata("$states.context.Task.Token")},
            ":lease": {"N": str(int(self._lease_ms))}, ":grace": {"N": jsonata(f"$string({ENTRY}.grace)")},
            ":kind": {"S": self.mode}})
        del row["ReturnValues"]
        park = tasks.CallAwsService.jsonata(
            s, s.state_name("Park"), service="dynamodb", action="transactWriteItems",
            parameters={"TransactItems": [{"ConditionCheck": {"TableName": table, **check}},
                                          {"Update": {"TableName": table, **row}}]},
            integration_pattern=sfn.IntegrationPattern.WAIT_FOR_TASK_TOKEN,
            task_timeout=sfn.Timeout.duration(Duration.seconds(self.park_timeout_s)),
            iam_action="dynamodb:UpdateItem", iam_resources=[s.table.table_arn],
            additional_iam_statements=[iam.PolicyStatement(actions=["dynamodb:ConditionCheckItem"],
                                                           resources=[s.table.table_arn])],
            outputs=jsonata("$states.input"),
        )
        retry_transient_sdk(park)
        return park

    def _build_inspect(self, *, key: str, me: str, ticket: str, claim, requeue, admit, park,
                       too_many: sfn.State) -> sfn.State:
        """The fallback: read the lock item and decide (the model's ``inspect``)."""
        f = self._vars()
        item, seen = "$states.result.Item", f"${f['seen']}"
        owner = _item_string(item, protocol.OWNER)
        read = self._get("Inspect", self._lock_key(key), {f["seen"]: jsonata(
            f"{{'owner': {owner}, 'expiresAt': {_item_number(item, protocol.EXPIRES_AT, '-1')}, "
            f"'served': {_item_number(item, fair.SERVED)}, 'tickets': {_item_number(item, fair.TICKETS)}, "
            f"'readers': {_item_number(item, shared.READERS)}, "
            f"'mine': $exists({_entry_of(item, me)}), 'expired': {_expired_reader(item)}, "
            f"'suspect': {_suspect(item, owner, me, self._section.variables['wait'])}}}")})
        read.add_catch(park, errors=["States.ALL"], outputs=jsonata("$states.input"))
        lease_over = f"({seen}.expiresAt >= 0 and {seen}.expiresAt < $millis())"
        writer_free = f"({seen}.owner = '' or {seen}.owner = '{shared.SHARED}' or {seen}.owner = {me} or {lease_over})"
        all_free = (f"({seen}.owner = '' or {seen}.owner = {me} or {lease_over} "
                    f"or ({seen}.owner = '{shared.SHARED}' and {seen}.readers = 0))")
        granted = (f"{seen}.mine" if self.mode == READ else f"({seen}.owner = {me} and {seen}.served = {ticket})")
        # (the last reader's removal ends the shared hold: REAP_LAST; refused, the next look decides)
        reap = self._choice("ReapWhich")
        for name, write in (("ReapLast", shared.REAP_LAST), ("Reap", shared.REAP_READ)):
            task = self._update(name, key, write, {**self._lock_values(me=me), ":one": {"N": "1"},
                                                   ":minusOne": {"N": "-1"}}, reader=f"{seen}.expired")
            task.add_catch(read, errors=["States.ALL"], outputs=jsonata("$states.input"))
            task.next(read)
            if write is shared.REAP_LAST:
                self._when(reap, f"{seen}.readers <= 1", task)
            else:
                reap.otherwise(task)
        # (the helper then parks again: its park is refused if the handoff made it admissible)
        helper = self._build_handoff("Help", key=key, me=me, start=f"{seen}.served", holding=False, then=park,
                                     self_grant=admit, tickets=f"{seen}.tickets")
        decide = self._choice("Decide")
        self._when(decide, granted, claim)
        self._when(decide, f"{seen}.served >= {ticket}", requeue)
        if self.mode == READ:  # the head, but GRANT_READ refuses it at the cap
            self._when(decide, f"{seen}.served = {ticket} - 1 and {writer_free} and "
                               f"{seen}.readers >= {shared.MAX_READERS}", too_many)
        self._when(decide, f"{seen}.served = {ticket} - 1 and {writer_free if self.mode == READ else all_free}", admit)
        # an expired reader entry holds back the head: me (a writer), or a head that does not move
        held_back = "true" if self.mode == WRITE else f"{seen}.served < {ticket} - 1"
        self._when(decide, f"{seen}.expired != '' and ({held_back})", reap)
        self._when(decide, f"{seen}.served < {ticket} - 1 and {writer_free}", helper)
        liveness = self._build_liveness_check(key=key, seen=seen, read=read, park=park)
        if liveness is not None:  # (at most one DescribeExecution per round of the fallback)
            v = self._section.variables
            self._when(decide, f"{protocol.liveness_due_expression(v['wait'], self._section.liveness_check_every)} "
                               f"and $not($exists(${v['wait']}.checked)) and $type({seen}.suspect) = 'object'", liveness)
        decide.otherwise(park)
        return read.next(decide)

    def _build_liveness_check(self, *, key: str, seen: str, read: sfn.State, park: sfn.State) -> Optional[sfn.State]:
        """The fallback's liveness check (every ``liveness_check_every``-th round, once a round):
        ask Step Functions whether the holder the waiter suspects (``seen.suspect``: the writer
        holder, else one reader entry in turn - both executions' acquisitions, never a client)
        still runs; one that ended is retired - the mutex's RETIRE for a writer, RETIRE_READER for
        a reader: held for its stop grace from its end, that acquisition only, unless its lease
        ends sooner (a retire never lengthens a lease) - and looked at again at once when that
        grace is already over (else at the next round)."""
        s, v = self._section, self._section.variables
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
            "Assign": {self._vars()["seen"]: jsonata(f"$merge([{seen}, {{'endedAt': {ended}}}])"),
                       v["wait"]: jsonata(f"$merge([{wait}, {{'checked': true}}])")},
            "Output": jsonata("$states.input"),
        })
        # (asked once this round whatever the answer: no second DescribeExecution before a park)
        describe.add_catch(park, errors=["States.ALL"], outputs=jsonata("$states.input"),
                           assign={v["wait"]: jsonata(f"$merge([{wait}, {{'checked': true}}])")})
        ended_at = {":endedAt": {"N": jsonata(f"$string({seen}.endedAt)")}}
        item = "$states.result.Attributes"
        retire_writer = self._update("RetireHolder", key, protocol.RETIRE,
                                     {":owner": {"S": jsonata(f"{seen}.suspect.owner")}, **ended_at},
                                     return_values="ALL_NEW", outputs="$states.input", assign={
                                         self._vars()["seen"]: jsonata(f"$merge([{seen}, {{'until': "
                                                                       f"{_item_number(item, protocol.EXPIRES_AT)}}}])")})
        retire_reader = self._update("RetireReader", key, shared.RETIRE_READER, ended_at,
                                     reader=f"{seen}.suspect.owner", return_values="ALL_NEW",
                                     outputs="$states.input", assign={
                                         self._vars()["seen"]: jsonata(
                                             f"$merge([{seen}, {{'until': $number("
                                             f"{_entry_of(item, f'{seen}.suspect.owner')}.`{protocol.EXPIRES_AT}`.N)}}])")})
        over = self._choice("RetiredOver")
        self._when(over, f"{seen}.until < $millis()", read)  # its grace is over: look again now
        over.otherwise(park)
        for retire in (retire_writer, retire_reader):
            retire.add_catch(park, errors=["States.ALL"], outputs=jsonata("$states.input"))
            retire.next(over)
        ended_now = self._choice("HolderEnded")
        # (a retire only ever shortens a lease: one that ends before the grace after the end
        # is left to end by itself)
        shortens = f"$type({seen}.endedAt) = 'number' and {seen}.endedAt + {seen}.suspect.grace < {seen}.suspect.expiresAt"
        self._when(ended_now, f"{shortens} and {seen}.suspect.reader", retire_reader)
        self._when(ended_now, shortens, retire_writer)
        # its execution runs on, and its hold's presence token is closed: a cancelled branch
        self._when(ended_now, f"$type({seen}.endedAt) != 'number' and {seen}.gone = true",
                   self._build_abandon(key=key, seen=seen, over=over, park=park))
        ended_now.otherwise(park)
        describe.next(ended_now)
        return self._build_presence_probe(seen=seen, describe=describe, park=park)

    def _build_presence_probe(self, *, seen: str, describe: sfn.State, park: sfn.State) -> sfn.State:
        """Before asking Step Functions about the suspect's execution: its hold's presence row
        (``shared_protocol.PRESENT_ROW``: its own token for that very acquisition, not departed)
        -> ``SendTaskHeartbeat`` on the token. Accepted: its branch runs - park (no
        DescribeExecution). ``TaskTimedOut`` (the branch's task is over): the execution is
        described with that noted - ended: retired from its end as before; running on: the
        branch was cancelled (a user's Parallel or Map), :meth:`_build_abandon`. No row, no token
        of that acquisition, or any other answer (throttled, unknown): described as before - a
        probe counts a holder gone on ``TaskTimedOut`` alone."""
        s, v, f = self._section, self._section.variables, self._vars()
        wait, r = "$" + v["wait"], "$states.result.Item"
        token = _presence_token(r, f"{seen}.suspect.acquiredAt")
        checked = {v["wait"]: jsonata(f"$merge([{wait}, {{'checked': true}}])")}
        read_row = self._get("ReadPresence", {protocol.KEY_ATTRIBUTE: attribute_value({"S": jsonata(
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
        present = self._choice("HolderPresent")
        self._when(present, f"$type({seen}.presence) = 'string'", probe)
        present.otherwise(describe)
        return read_row.next(present)

    def _build_abandon(self, *, key: str, seen: str, over: sfn.State, park: sfn.State) -> sfn.State:
        """The suspect's branch was cancelled (its presence token closed, its execution running):
        retire that acquisition from now - held for its stop grace (a Lambda it invoked may
        still run), only if that shortens its lease - while its row still holds that token,
        settled (``PRESENCE_SETTLE_MS``: not a failed registration attempt) and not departed:
        ``shared_protocol.gone_transaction``, the row's conditional Delete beside the lock
        item's RETIRE_GONE_READER / RETIRE_GONE_WRITER, all or nothing. Refused or failed:
        nothing was written, the next round looks again. Then as a retire by the execution's
        end (``over``: look again at once when that grace is over)."""
        s, f = self._section, self._vars()
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

        gone = self._choice("HolderGone")
        shortens = f"{until} < {seen}.suspect.expiresAt"
        self._when(gone, f"{shortens} and {seen}.suspect.reader", abandon("AbandonReader", True))
        self._when(gone, shortens, abandon("AbandonHolder", False))
        gone.otherwise(park)
        return gone

    # -- the handoff ------------------------------------------------------------------------

    def _build_handoff(self, suffix: str, *, key: str, me: str, start: str, holding: bool,
                       then: Optional[sfn.State], self_grant: Optional[sfn.State] = None,
                       tickets: Optional[str] = None,
                       lost: Optional[sfn.State] = None, fence: str = "0") -> sfn.State:
        """Run the handoff from ticket ``start`` (the model's ``look`` .. ``release``): ``holding``,
        I am a writer still holding the key; ``self_grant``, a helper's way to its own row; ``tickets``, a helper's
        view of the last ticket out (a row that never came is marked). Ends in ``then``."""
        s, f = self._section, self._vars()
        h = "$" + f["handoff"]
        name = lambda x: s.state_name(f"{suffix}.{x}")  # noqa: E731
        end_state = then or sfn.Succeed(s, f"{suffix}.Done", state_name=name("Done"))
        row = "$states.result.Item"
        hole_ms = self.park_timeout_s * 1000
        nxt = f"{h}.row.owner.S"
        catch_all = dict(errors=["States.ALL"], outputs=jsonata("$states.input"))

        def look(state: str, first: bool) -> tasks.DynamoGetItem:
            c = start if first else f"{h}.c"
            base = f"{{'c': {start}, 'holding': {'true' if holding else 'false'}}}" if first else h
            return self._get(f"{suffix}.{state}", self._row_key(key, f"{c} + 1"), {f["handoff"]: jsonata(
                f"$merge([{base}, {{'row': {row}, 'st': {fair.row_state_expression(row, hole_ms=hole_ms)}}}])")})

        first, again = look("Look", True), look("LookAgain", False)
        # after a grant: the next ticket, and I hold nothing (a grant frees a writer runner)
        step = f"$merge([{h}, {{'c': {h}.c + 1, 'holding': false}}])"

        # where a handoff goes when it stops: a holding writer releases and looks again
        end = self._choice(f"{suffix}.End") if holding else end_state
        if holding:
            release = self._update(f"{suffix}.Release", key, shared.RELEASE_WRITE,
                                   {":me": {"S": jsonata(me)}, ":fence": {"N": jsonata(f"$string({fence})")}},
                                   assign={f["handoff"]: jsonata(f"$merge([{h}, {{'holding': false}}])"),
                                           **s.held_assign()}, retry=False)
            release_again = self._update(f"{suffix}.ReleaseAgain", key, shared.RELEASE_WRITE,
                                         {":me": {"S": jsonata(me)}, ":fence": {"N": jsonata(f"$string({fence})")}},
                                         assign={f["handoff"]: jsonata(f"$merge([{h}, {{'holding': false}}])"),
                                                 **s.held_assign()})
            release.add_catch(release_again, errors=list(errors.TRANSIENT_ERRORS), outputs=jsonata("$states.input"))
            # a refused first release: the key was taken over (Lock.Lost) - unless a redrive reran
            # a release that had applied (as the mutex's); a retry's refusal is my own earlier
            # release - look again either way
            refused: sfn.State = end_state
            if lost is not None:
                refused = self._choice(f"{suffix}.ReleaseResumed").when(
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
            self._when(end, f"{h}.holding = true", release)
            end.otherwise(end_state)

        values = {**self._lock_values(me=me), ":one": {"N": "1"}, ":zero": {"N": "0"},
                  ":prev": {"N": jsonata(f"$string({h}.c)")}, ":ticket": {"N": jsonata(f"$string({h}.c + 1)")}}
        claim_end = f"$string($millis() + {self._claim_window_ms})"

        # a holding writer's first grant ends its hold: its length for monitoring (held_assign)
        held = s.held_assign(when=f"{h}.holding = true") if holding else {}
        def grant(kind: str, polling: bool) -> sfn.TaskStateBase:
            """The grant to the waiter of row c + 1 - a parked one (woken next) or a polling one
            (a LockClient: it finds the grant at its next look, so the grant itself moves on)."""
            name_ = f"{suffix}.Grant{'Read' if kind == READ else 'Write'}{'Polling' if polling else ''}"
            assign = {**held, **({f["handoff"]: jsonata(step)} if polling else {})} or None
            if kind == READ:  # its entry with a claim-window lease; then go on with c + 1
                return self._update(name_, key, shared.GRANT_READ, {
                    **values, ":entry": shared.entry_value(expires_at=jsonata(claim_end),
                                                           acquired_at=jsonata(protocol.NOW_EXPRESSION),
                                                           grace=jsonata(f"{h}.row.`{fair.GRACE_MS}`.N"))},
                    reader=nxt, retry=False, assign=assign)
            # (refused while readers hold: the last reader hands off)
            return self._update(name_, key, shared.GRANT_WRITE, {
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
        recheck = self._get(f"{suffix}.Recheck", self._lock_key(key), {f["handoff"]: jsonata(
            f"$merge([{h}, {{'granted': $states.result.Item.`{fair.SERVED}`.N = $string({h}.c + 1) and "
            f"($exists({_entry_of('$states.result.Item', nxt)}) or $states.result.Item.`{protocol.OWNER}`.S = {nxt})}}])")})
        recheck.add_catch(end, **catch_all)
        granted = self._choice(f"{suffix}.Granted")
        self._when(granted, f"{h}.granted = true and {h}.row.`{shared.KIND}`.S = '{READ}'", wake_reader)
        self._when(granted, f"{h}.granted = true", wake_writer)
        granted.otherwise(end)
        recheck.next(granted)
        for g in (grant_read, grant_write, grant_read_polling, grant_write_polling):
            g.add_catch(recheck, errors=[errors.CONDITION_FAILED, *errors.TRANSIENT_ERRORS],
                        outputs=jsonata("$states.input"))
            g.add_catch(end, **catch_all)

        # (a skip keeps a writer runner's hold; the row skipped - a waiter gone, or a hole - is
        # deleted: a served ticket's row is never read again, and nobody else would delete it)
        skip = self._update(f"{suffix}.Skip", key, shared.SKIP, values,
                            assign={f["handoff"]: jsonata(f"$merge([{h}, {{'c': {h}.c + 1}}])")})
        skip.add_catch(end, **catch_all)
        drop_skipped = tasks.DynamoDeleteItem.jsonata(s, s.state_name(f"{suffix}.DropSkipped"), table=s.table,
                                                      key=self._row_key(key, f"{h}.c"), outputs=jsonata("$states.input"))
        retry_transient(drop_skipped)
        drop_skipped.add_catch(again, **catch_all)
        skip.next(drop_skipped)
        drop_skipped.next(again)

        decide = self._choice(f"{suffix}.Next")
        if self_grant is not None:
            self._when(decide, f"{h}.st = 'wake' and {nxt} = {me}", self_grant)
        self._when(decide, f"{h}.st = 'wake' and {h}.row.`{shared.KIND}`.S = '{READ}'", grant_read)
        self._when(decide, f"{h}.st = 'wake'", grant_write)
        self._when(decide, f"{h}.st = 'grant' and {h}.row.`{shared.KIND}`.S = '{READ}'", grant_read_polling)
        self._when(decide, f"{h}.st = 'grant'", grant_write_polling)
        self._when(decide, f"{h}.st = 'skip'", skip)
        if tickets is not None:  # a helper: a row that never came is marked (skipped once old)
            mark = self._update(f"{suffix}.Mark", fair.row_key_expression(key, f"{h}.c + 1"), shared.MARK, {
                ":since": {"N": jsonata(f"$exists({h}.row.`{fair.READY}`.N) ? {h}.row.`{fair.READY}`.N : $string($millis())")}})
            mark.add_catch(end, **catch_all)
            mark.next(end)
            self._when(decide, f"{h}.c + 1 <= {tickets} and $not($exists({h}.row.`{fair.READY}`.N))", mark)
        decide.otherwise(end)
        for t in (first, again):
            t.add_catch(end, **catch_all)
            t.next(decide)
        return first

    # -- release ----------------------------------------------------------------------------

    def _build_leave_read(self, suffix: str, *, then: sfn.State, lost: Optional[sfn.State]) -> sfn.State:
        """A reader leaves: LEAVE_READ while other readers hold; refused, LEAVE_LAST (the last
        one: the shared hold ends in the same write); refused again, a read says which (the
        count moved) or that my entry is gone (reaped: ``Lock.Lost``; or by my own attempt whose
        answer was lost: go on). The last one runs the handoff. After
        ``shared_protocol.MAX_LEAVE_ROUNDS`` reads whose next write was refused again, the entry
        is retired (RETIRE_READER at now: it ends its stop grace from now) and the leave ends."""
        s, v = self._section, self._section.variables
        lock = "$" + v["lock"]
        key, me = f"{lock}.key", f"{lock}.owner"
        item = "$states.result.Attributes"
        values = {":one": {"N": "1"}, ":minusOne": {"N": "-1"}}
        retried = {v["lock"]: jsonata(f"$merge([{lock}, {{'leaveRetried': true}}])")}  # an answer may be lost

        def counts(item: str, mine: str = "false", more: str = "") -> dict:
            return {v["lock"]: jsonata(f"$merge([{lock}, {{'left': {{'readers': {_item_number(item, shared.READERS)}, "
                                       f"'served': {_item_number(item, fair.SERVED)}, 'mine': {mine}}}{more}}}])")}

        def write(name: str, leave: protocol.LockWrite, *, again: bool) -> sfn.TaskStateBase:
            return self._update(name, key, leave, values, reader=me, return_values="ALL_NEW",
                                assign={**counts(item), **s.held_assign()}, retry=again)

        leave, leave_again = write(suffix, shared.LEAVE_READ, again=False), write(f"{suffix}Again", shared.LEAVE_READ, again=True)
        last, last_again = (write(f"{suffix}Last", shared.LEAVE_LAST, again=False),
                            write(f"{suffix}LastAgain", shared.LEAVE_LAST, again=True))
        # (each read counts a round: a write of mine was refused since the last one)
        read = self._get(f"{suffix}Read", self._lock_key(key), counts(
            "$states.result.Item", f"$exists({_entry_of('$states.result.Item', me)})",
            f", 'leaveRounds': ($exists({lock}.leaveRounds) ? {lock}.leaveRounds : 0) + 1"))
        which = self._choice(f"{suffix}Which")
        # the count moved between every read and write of mine, MAX_LEAVE_ROUNDS times: retire
        # my entry (it ends its stop grace from now, then anyone may reap it) and stop
        retire = self._update(f"{suffix}Retire", key, shared.RETIRE_READER,
                              {":endedAt": {"N": jsonata(protocol.NOW_EXPRESSION)}}, reader=me, assign=s.held_assign())
        retire.add_catch(then, errors=["States.ALL"], outputs=jsonata("$states.input"))
        retire.next(then)
        self._when(which, f"{lock}.left.mine and {lock}.leaveRounds >= {shared.MAX_LEAVE_ROUNDS}", retire)
        self._when(which, f"{lock}.left.mine and {lock}.left.readers <= 1", last)
        self._when(which, f"{lock}.left.mine", leave)
        handed = self._choice(f"{suffix}.Last")
        # my lost answer took it, or my leave that a redrive reran had applied: was I the last?
        self._when(which, f"{lock}.leaveRetried = true or "
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
        handoff = self._build_handoff(f"{suffix}.Handoff", key=key, me=me, start=f"{lock}.left.served",
                                      holding=False, then=then)
        # the last reader (its write ended the shared hold): hand off to whoever queues
        self._when(handed, f"{lock}.left.readers = 0", handoff)
        handed.otherwise(then)
        for t in (leave, leave_again, last, last_again):
            t.next(handed)
        return leave

    def build_release(self, section: "LockedSection", lost: sfn.State, left: sfn.State) -> sfn.State:
        done = sfn.Succeed(section, "Released", state_name=section.state_name("Released"))
        if self.mode == READ:
            return self._forget("Forget", self._build_leave_read("Release", then=done, lost=lost))
        lock = "$" + section.variables["lock"]
        return self._forget("Forget", self._build_handoff(
            "Release", key=f"{lock}.key", me=f"{lock}.owner", start=f"{lock}.ticket", holding=True, then=done,
            lost=lost, fence=f"{lock}.fence"))

    def build_release_after_error(self, section: "LockedSection", rethrow: sfn.State) -> sfn.State:
        if self.mode == READ:
            return self._forget("ForgetAfterError", self._build_leave_read("ReleaseAfterError", then=rethrow, lost=None))
        lock = "$" + section.variables["lock"]
        return self._forget("ForgetAfterError", self._build_handoff(
            "ReleaseAfterError", key=f"{lock}.key", me=f"{lock}.owner", start=f"{lock}.ticket", holding=True,
            then=rethrow, fence=f"{lock}.fence"))

    def build_retire(self, section: "LockedSection", then: sfn.State) -> sfn.State:
        """A task refused to resume after a redrive: the hold is retired (held for its stop
        grace from now), not released - a writer with the mutex's RETIRE, a reader with
        RETIRE_READER on its entry."""
        if self.mode == WRITE:
            return super().build_retire(section, then)
        lock = "$" + section.variables["lock"]
        retire = self._update("Retire", f"{lock}.key", shared.RETIRE_READER,
                              {":endedAt": {"N": jsonata(protocol.NOW_EXPRESSION)}}, reader=f"{lock}.owner")
        retire.add_catch(then, errors=["States.ALL"], outputs=jsonata("$states.input"))
        return retire.next(then)
