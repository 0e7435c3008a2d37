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

The kind's states are built by :class:`~locked_workflow.constructs_lib.kinds.shared_states.SharedStates`;
its waiters' path is the ticket queue (:mod:`~locked_workflow.constructs_lib.kinds.ticket_queue`,
the fair lock's too) driven by :class:`SharedQueueDriver`; its liveness check and its handoff
live in ``shared_liveness`` and ``shared_handoff``.
Every DynamoDB expression is the protocol module's; this module only wires them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from aws_cdk import Duration, aws_iam as iam, aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks

from locked_workflow.constructs_lib.client_kind import ClientKind
from locked_workflow.constructs_lib.dynamodb_tasks import retry_transient, retry_transient_sdk
from locked_workflow.constructs_lib.section_record import Role
from locked_workflow.constructs_lib.kinds.base import AcquireStates, KindBuilder, SectionContext
from locked_workflow.constructs_lib.kinds.fair import park_timeout_seconds
from locked_workflow.constructs_lib.kinds.items import item_number, item_string
from locked_workflow.constructs_lib.kinds.mutex import MutexKind
from locked_workflow.constructs_lib.kinds.shared_handoff import build_handoff, build_leave_read
from locked_workflow.constructs_lib.kinds.shared_hold import entry_of, expired_reader, suspect
from locked_workflow.constructs_lib.kinds.shared_liveness import build_liveness_check
from locked_workflow.constructs_lib.kinds.shared_states import READ, WRITE, SharedStates, presence_row_key
from locked_workflow.constructs_lib.kinds.ticket_queue import QueueDriver, TicketQueue, Wait
from locked_workflow.constructs_lib.kinds.value import LockValue, unwrapped_key
from locked_workflow.state_machines import errors
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines import shared_protocol as shared
from locked_workflow.state_machines.lock_protocol import ENTRY, jsonata


class SharedKind(MutexKind):
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

    def check_nesting(self, section: SectionContext, enclosing: Sequence[SectionContext]) -> None:
        """Refuse a section nested in one that holds the same key - the same key expression,
        table and namespace: not re-entrant, its hold would wait for the enclosing one (a writer
        for its own reader or writer; a reader for its own writer, or behind a writer queued
        meanwhile) until ``max_wait``."""
        for outer in enclosing:
            if (outer.kind.user_key == self.user_key and not outer.kind.lives_on_records
                    and outer.key_namespace == section.key_namespace):
                factory = "shared" if self.mode == READ else "exclusive"
                raise ValueError(
                    f"`lock` must not be Lock.{factory} on the key its enclosing section {outer.node.path!r} "
                    f"holds (same key, table and `key_namespace`: the read/write kinds are not re-entrant, "
                    f"and the nested hold would wait for the enclosing one), got: Lock.{factory}"
                    f"({self.user_key!r}) in {section.node.path!r}. Give it another key or `key_namespace`, "
                    "or move it out of the enclosing section's work")


    # -- presence (a row of the hold's own: shared_protocol.PRESENT_ROW) -----------------------

    def presence_key(self, section: SectionContext) -> str:
        return presence_row_key(section)

    def presence_task(self, section: SectionContext) -> tuple[str, dict]:
        """The hold's presence registration: PRESENT_ROW on its row (``.waitForTaskToken``)."""
        lock = "$" + section.variables["lock"]
        args = shared.arguments(jsonata(self.presence_key(section)), shared.PRESENT_ROW, {
            ":token": {"S": jsonata("$states.context.Task.Token")},
            ":acquiredAt": {"N": jsonata(f"$string({lock}.acquiredAt)")}, ":now": {"N": jsonata(protocol.NOW_EXPRESSION)}})
        del args["ReturnValues"]
        return "updateItem", {"TableName": section.table.table_name, **args}

    def depart_arguments(self, section: SectionContext) -> dict:
        """DEPART_ROW on the hold's row (never refused: a hold's own work is not lost here -
        its release finds that out)."""
        lock = "$" + section.variables["lock"]
        return shared.arguments(jsonata(self.presence_key(section)), shared.DEPART_ROW,
                                {":acquiredAt": {"N": jsonata(f"$string({lock}.acquiredAt)")}})
    # -- acquire ----------------------------------------------------------------------------

    def build_acquire(self, section: SectionContext, lease_ms: int):
        """The fast path (FAST_READ, with CLAIM_READ after a lost response; FAST_WRITE), then
        the ticket queue (:class:`SharedQueueDriver`)."""
        st = SharedStates(section, mode=self.mode, park_timeout_s=self.park_timeout_s, lease_ms=lease_ms)
        driver = SharedQueueDriver(st, mode=self.mode)
        v, me, key = section.variables, f"{ENTRY}.owner", f"{ENTRY}.key"
        result = "$states.result.Attributes"
        # (a lost response of a fast read: CLAIM_READ finds my entry - never a second entry)
        if self.mode == READ:
            fast = st.update("Acquire", key, shared.FAST_READ, driver.values, reader=me, return_values="ALL_NEW",
                             assign=driver.entered("null"), outputs=f"{ENTRY}.input", retry=False)
            driver.rejoin = st.update("Rejoin", key, shared.CLAIM_READ, driver.values, reader=me,
                                      return_values="ALL_NEW", assign=driver.entered("null"), outputs=f"{ENTRY}.input")
            driver.rejoin.add_catch(fast, errors=[errors.CONDITION_FAILED], outputs=jsonata("$states.input"))
            driver.rejoin.next(section.protected)
            fast.add_catch(driver.rejoin, errors=list(errors.TRANSIENT_ERRORS), outputs=jsonata("$states.input"))
        else:
            fast = st.update("Acquire", key, shared.FAST_WRITE, driver.values, return_values="ALL_NEW",
                             assign=driver.entered(item_number(result, fair.SERVED)), outputs=f"{ENTRY}.input")
        for state in (fast, driver.rejoin):
            if state is not None:
                section.record(state, Role.ACQUISITION, v["lock"])
        TicketQueue(section, driver, lease_ms=lease_ms).build(fast)
        return AcquireStates(first=fast, attempt=fast, acquired=fast)

    def build_release(self, section: SectionContext, lost: sfn.State, left: sfn.State) -> sfn.State:
        st = SharedStates(section, mode=self.mode, park_timeout_s=self.park_timeout_s)
        done = sfn.Succeed(section, "Released", state_name=section.state_name("Released"))
        if self.mode == READ:
            return st.forget("Forget", build_leave_read(st, "Release", then=done, lost=lost))
        lock = "$" + section.variables["lock"]
        return st.forget("Forget", build_handoff(
            st, "Release", key=f"{lock}.key", me=f"{lock}.owner", start=f"{lock}.ticket", holding=True, then=done,
            lost=lost, fence=f"{lock}.fence"))

    def build_release_after_error(self, section: SectionContext, rethrow: sfn.State) -> sfn.State:
        st = SharedStates(section, mode=self.mode, park_timeout_s=self.park_timeout_s)
        if self.mode == READ:
            return st.forget("ForgetAfterError", build_leave_read(st, "ReleaseAfterError", then=rethrow, lost=None))
        lock = "$" + section.variables["lock"]
        return st.forget("ForgetAfterError", build_handoff(
            st, "ReleaseAfterError", key=f"{lock}.key", me=f"{lock}.owner", start=f"{lock}.ticket", holding=True,
            then=rethrow, fence=f"{lock}.fence"))

    def build_retire(self, section: SectionContext, then: sfn.State) -> sfn.State:
        """A task refused to resume after a redrive: the hold is retired (held for its stop
        grace from now), not released - a writer with the mutex's RETIRE, a reader with
        RETIRE_READER on its entry."""
        if self.mode == WRITE:
            return super().build_retire(section, then)
        st = SharedStates(section, mode=self.mode, park_timeout_s=self.park_timeout_s)
        lock = "$" + section.variables["lock"]
        retire = st.update("Retire", f"{lock}.key", shared.RETIRE_READER,
                           {":endedAt": {"N": jsonata(protocol.NOW_EXPRESSION)}}, reader=f"{lock}.owner")
        retire.add_catch(then, errors=["States.ALL"], outputs=jsonata("$states.input"))
        return retire.next(then)

class SharedQueueDriver(QueueDriver):
    """The read/write kinds' driver of the ticket queue
    (:class:`~locked_workflow.constructs_lib.kinds.ticket_queue.TicketQueue`), one per mode and
    ``build_acquire`` call: my turn is ``served + 1`` on a key free of writers (a reader: it
    goes in with the other readers) or free of all (a writer: alone). The granter reads my
    row and grants with a claim-window lease that lapses unconfirmed, so every claim drops my
    row first; a reader at the cap gives up its place."""

    look_again_errors = (errors.CONDITION_FAILED, *errors.TRANSIENT_ERRORS)
    #: (a park is a transaction: PARK on my row with the lock item's PARK_UNLESS[mode])
    park_refused = errors.TRANSACTION_CANCELED

    def __init__(self, st: SharedStates, *, mode: str) -> None:
        self.st, self.mode = st, mode
        me = f"{ENTRY}.owner"
        #: The values of the queue's writes on the lock item.
        self.values = {**st.lock_values(me=me), ":entry": st.own_entry(), ":one": {"N": "1"}, ":zero": {"N": "0"},
                       ":expiresAt": {"N": jsonata(protocol.lease_end_expression(st.lease_ms))},
                       ":grace": {"N": jsonata(f"$string({ENTRY}.grace)")}}
        #: A reader's CLAIM_READ after a fast read whose response was lost (the kind sets it).
        self.rejoin: Optional[sfn.TaskStateBase] = None
        self._crowded: Optional[sfn.State] = None

    def entered(self, ticket: str) -> dict:
        """The assignments of an acquisition (``ticket``: JSONata, my ticket or null)."""
        v = self.st.section.variables
        return {v["lock"]: jsonata(self.st.record("$states.result.Attributes", ticket=ticket)),
                v["wait"]: jsonata("null")}

    # -- my turn ---------------------------------------------------------------------------

    @staticmethod
    def _lease_over(seen: str) -> str:
        return f"({seen}.expiresAt >= 0 and {seen}.expiresAt < $millis())"

    def _writer_free(self, q: TicketQueue) -> str:
        return f"({q.seen}.owner = '' or {q.seen}.owner = '{shared.SHARED}' or {q.seen}.owner = {q.me} or {self._lease_over(q.seen)})"

    def granted(self, q: TicketQueue) -> str:
        return f"{q.seen}.mine" if self.mode == READ else f"({q.seen}.owner = {q.me} and {q.seen}.served = {q.ticket})"

    def my_turn(self, q: TicketQueue) -> str:
        if self.mode == READ:
            return self._writer_free(q)
        seen = q.seen
        return (f"({seen}.owner = '' or {seen}.owner = {q.me} or {self._lease_over(seen)} "
                f"or ({seen}.owner = '{shared.SHARED}' and {seen}.readers = 0))")

    # -- the writes ------------------------------------------------------------------------

    def _crowded_or(self, q: TicketQueue, otherwise: sfn.State) -> sfn.State:
        """A reader refused by the cap (FAST_READ and ENQUEUE_READ are refused; a read tells),
        else ``otherwise``; a writer: ``otherwise``."""
        if self.mode != READ:
            return otherwise
        if self._crowded is None:
            self._crowded = _build_crowded(self.st, otherwise=otherwise)
        return self._crowded

    def refused_at_once(self, q: TicketQueue) -> sfn.State:
        return self._crowded_or(q, q.timeout)

    def build_enqueue(self, q: TicketQueue, fast: sfn.TaskStateBase) -> tuple:
        """ENQUEUE_READ / ENQUEUE_WRITE (refused: my fast path would enter now - try it again)."""
        enqueue = self.st.update(
            "Enqueue", q.key, shared.ENQUEUE_READ if self.mode == READ else shared.ENQUEUE_WRITE, self.values,
            return_values="ALL_NEW", outputs="$states.input",
            assign={q.vars["ticket"]: jsonata(item_number("$states.result.Attributes", fair.TICKETS))})
        enqueue.add_catch(self._crowded_or(q, fast), errors=[errors.CONDITION_FAILED], outputs=jsonata("$states.input"))
        return enqueue, enqueue

    def leaving_before_ticket(self, q: TicketQueue) -> Sequence[sfn.State]:
        return () if self.rejoin is None else (self.rejoin,)

    def build_admit(self, q: TicketQueue) -> sfn.TaskStateBase:
        """The head admits itself: GRANT_READ / GRANT_WRITE to me."""
        turn = {":prev": {"N": jsonata(f"$string({q.ticket} - 1)")}, ":ticket": {"N": jsonata(f"$string({q.ticket})")}}
        if self.mode == READ:
            admit = self.st.update("Admit", q.key, shared.GRANT_READ, {**self.values, **turn}, reader=q.me,
                                   return_values="ALL_NEW", assign=self.entered(q.ticket), retry=False)
        else:
            admit = self.st.update("Admit", q.key, shared.GRANT_WRITE,
                                   {**self.values, ":next": {"S": jsonata(q.me)}, **turn},
                                   return_values="ALL_NEW", assign=self.entered(q.ticket), retry=False)
        q.section.record(admit, Role.ACQUISITION, q.section.variables["lock"])
        return admit

    def after_admit(self, q: TicketQueue) -> sfn.State:
        if self.mode == READ:  # a reader admitted from the queue admits the readers behind it
            return build_handoff(self.st, "Admitted", key=q.key, me=q.me, start=q.ticket, holding=False, then=q.drop)
        return q.drop

    def build_claim(self, q: TicketQueue, suffix: str, *, outputs: Optional[str] = None) -> sfn.TaskStateBase:
        """CLAIM_READ (my entry is there) / CLAIM_WRITE (I am the owner at my ticket)."""
        if self.mode == READ:
            claim = self.st.update(suffix, q.key, shared.CLAIM_READ, self.values, reader=q.me,
                                   return_values="ALL_NEW", assign=self.entered(q.ticket))
        else:
            claim = self.st.update(suffix, q.key, shared.CLAIM_WRITE,
                                   {**self.values, ":ticket": {"N": jsonata(f"$string({q.ticket})")}},
                                   return_values="ALL_NEW", assign=self.entered(q.ticket))
        q.section.record(claim, Role.ACQUISITION, q.section.variables["lock"])
        return claim

    def build_wait(self, q: TicketQueue) -> Wait:
        """My task token and kind on my row, unless my ticket may be admitted now or was passed
        (``park_transaction``'s two writes, with JSONata keys)."""
        st, s = self.st, self.st.section
        table = s.table.table_name
        lock_values = {**st.lock_values(me=q.me), ":zero": {"N": "0"}, ":ticket": {"N": jsonata(f"$string({q.ticket})")},
                       ":prev": {"N": jsonata(f"$string({q.ticket} - 1)")}}
        check = st.args(q.key, shared.PARK_UNLESS[self.mode], lock_values)
        row = st.args(fair.row_key_expression(q.key, q.ticket), shared.PARK, {
            ":me": {"S": jsonata(q.me)}, ":token": {"S": jsonata("$states.context.Task.Token")},
            ":lease": {"N": str(int(st.lease_ms))}, ":grace": {"N": jsonata(f"$string({ENTRY}.grace)")},
            ":kind": {"S": self.mode}})
        del row["ReturnValues"]
        park = tasks.CallAwsService.jsonata(
            s, s.state_name("Park"), service="dynamodb", action="transactWriteItems",
            parameters={"TransactItems": [{"ConditionCheck": {"TableName": table, **check}},
                                          {"Update": {"TableName": table, **row}}]},
            integration_pattern=sfn.IntegrationPattern.WAIT_FOR_TASK_TOKEN,
            task_timeout=sfn.Timeout.duration(Duration.seconds(st.park_timeout_s)),
            iam_action="dynamodb:UpdateItem", iam_resources=[s.table.table_arn],
            additional_iam_statements=[iam.PolicyStatement(actions=["dynamodb:ConditionCheckItem"],
                                                           resources=[s.table.table_arn])],
            outputs=jsonata("$states.input"),
        )
        retry_transient_sdk(park)
        return Wait(first=park, again=park, park=park)

    def build_inspect(self, q: TicketQueue) -> sfn.TaskStateBase:
        """The fallback's read (the model's ``inspect``): the counters, the readers, my entry,
        an expired reader, the holder to check."""
        st, item = self.st, "$states.result.Item"
        seen, owner = q.vars["seen"], item_string(item, protocol.OWNER)
        read = st.get("Inspect", st.lock_key(q.key), {seen: jsonata(
            f"{{'owner': {owner}, 'expiresAt': {item_number(item, protocol.EXPIRES_AT, '-1')}, "
            f"'served': {item_number(item, fair.SERVED)}, 'tickets': {item_number(item, fair.TICKETS)}, "
            f"'readers': {item_number(item, shared.READERS)}, "
            f"'mine': $exists({entry_of(item, q.me)}), 'expired': {expired_reader(item)}, "
            f"'suspect': {suspect(item, owner, q.me, st.section.variables['wait'])}}}")})
        # (a look at the holder's record: the metrics function measures only its own execution's)
        st.section.record(read, Role.ACQUISITION, seen)
        return read

    def refused_branches(self, q: TicketQueue) -> list:
        """A reader at the head of a key with no room for it (GRANT_READ refuses it at the cap)
        gives up its place: ``Lock.TooManyReaders``."""
        v, s = q.section.variables, q.section
        too_many = sfn.Pass.jsonata(s, "TooManyQueued", state_name=s.state_name("TooManyQueued"),
                                    outputs=jsonata("$states.input"), assign={v["wait"]: jsonata(
                                        f"$merge([${v['wait']}, {{'error': {_too_many_error()}}}])")})
        too_many.next(q.leave)
        if self.mode != READ:  # (a writer's is never entered: kept, the definitions are unchanged)
            return []
        return [(f"{q.seen}.served = {q.ticket} - 1 and {self._writer_free(q)} and "
                 f"{q.seen}.readers >= {shared.MAX_READERS}", too_many)]

    def behind_branches(self, q: TicketQueue, decide: sfn.Choice) -> list:
        """An expired reader entry holding back the head (me, a writer; or a head that does not
        move) -> reap it; behind a head that does not move on a key free of writers -> the
        handoff for it (then park again: refused if it made me admissible); a liveness check
        due (at most one DescribeExecution a round)."""
        st, seen, read, park = self.st, q.seen, q.inspect, q.wait_again
        # (the last reader's removal ends the shared hold: REAP_LAST; refused, the next look decides)
        reap = st.choice("ReapWhich")
        for name, write in (("ReapLast", shared.REAP_LAST), ("Reap", shared.REAP_READ)):
            task = st.update(name, q.key, write, {**st.lock_values(me=q.me), ":one": {"N": "1"},
                                                  ":minusOne": {"N": "-1"}}, reader=f"{seen}.expired")
            task.add_catch(read, errors=["States.ALL"], outputs=jsonata("$states.input"))
            task.next(read)
            if write is shared.REAP_LAST:
                st.when(reap, f"{seen}.readers <= 1", task)
            else:
                reap.otherwise(task)
        helper = build_handoff(st, "Help", key=q.key, me=q.me, start=f"{seen}.served", holding=False, then=park,
                               self_grant=q.admit, tickets=f"{seen}.tickets")
        held_back = "true" if self.mode == WRITE else f"{seen}.served < {q.ticket} - 1"
        branches = [(f"{seen}.expired != '' and ({held_back})", reap),
                    (f"{seen}.served < {q.ticket} - 1 and {self._writer_free(q)}", helper)]
        liveness = build_liveness_check(st, key=q.key, seen=seen, read=read, park=park)
        if liveness is not None:
            v = st.section.variables
            branches.append((f"{protocol.liveness_due_expression(v['wait'], st.section.liveness_check_every)} "
                             f"and $not($exists(${v['wait']}.checked)) and $type({seen}.suspect) = 'object'", liveness))
        return branches


def _too_many_cause() -> str:
    return (f"the key already has {shared.MAX_READERS} readers, as many as a read/write lock allows at once "
            "(shared_protocol.MAX_READERS); nothing was written")


def _too_many_error() -> str:
    """JSONata: the error object of a reader refused at the cap (as ``$states.errorOutput``)."""
    return f"{{'Error': '{errors.ERROR_TOO_MANY_READERS}', 'Cause': '{_too_many_cause()}'}}"


def _build_crowded(st: SharedStates, *, otherwise: sfn.State) -> sfn.State:
    """A reader whose first writes were refused: is the key at the cap (``readers`` >=
    ``shared_protocol.MAX_READERS``, read alone - never the whole item, which may be large)?
    Then ``Lock.TooManyReaders``, before any write of its own; else ``otherwise``."""
    s = st.section
    count = "$states.result.Item"
    read = tasks.DynamoGetItem.jsonata(
        s, s.state_name("CountReaders"), table=s.table, key=st.lock_key(f"{ENTRY}.key"), consistent_read=True,
        projection_expression=[tasks.DynamoProjectionExpression().with_attribute("#r")],
        expression_attribute_names={"#r": shared.READERS},
        assign={st.vars()["seen"]: jsonata(f"{{'readers': {item_number(count, shared.READERS)}}}")},
        outputs=jsonata("$states.input"))
    retry_transient(read)
    read.add_catch(otherwise, errors=["States.ALL"], outputs=jsonata("$states.input"))
    refused = sfn.Fail.jsonata(s, "TooManyReaders", state_name=s.state_name("TooManyReaders"),
                               error=errors.ERROR_TOO_MANY_READERS, cause=_too_many_cause())
    full = st.choice("Crowded")
    st.when(full, f"${st.vars()['seen']}.readers >= {shared.MAX_READERS}", refused)
    full.otherwise(otherwise)
    return read.next(full)


@dataclass(frozen=True, init=False)
class SharedLock(LockValue):
    """``Lock.shared(key)`` (a reader, ``mode`` READ) or ``Lock.exclusive(key)`` (a writer,
    ``mode`` WRITE) of one read/write lock."""

    key: str
    mode: str
    park_timeout_s: int
    client_kind = ClientKind.READ_WRITE  # one client takes both sides

    @classmethod
    def of(cls, key: str, *, mode: str, park_timeout: Duration) -> "SharedLock":
        """``Lock.shared``'s (``mode`` READ) or ``Lock.exclusive``'s (WRITE) value."""
        return cls(unwrapped_key(key), mode, park_timeout_seconds(park_timeout))

    @property
    def kind(self) -> str:  # type: ignore[override]
        return "shared" if self.mode == READ else "exclusive"

    @property
    def factory(self) -> str:  # type: ignore[override]
        return f"{self.kind}(key)"

    def builder(self) -> KindBuilder:
        return SharedKind(self.key, mode=self.mode, park_timeout_s=self.park_timeout_s)

    def for_express(self) -> LockValue:
        raise ValueError(
            f"`state_machine_type` must be STANDARD with Lock.{self.kind} (its waiters park on a task "
            "token, which EXPRESS state machines cannot), got: EXPRESS"
        )
