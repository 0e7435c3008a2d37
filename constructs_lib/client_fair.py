"""The fair lock's path of a :class:`~locked_workflow.constructs_lib.lock_client.LockClient`
(``kind=LockClient.FAIR``; see :mod:`~locked_workflow.state_machines.fair_protocol`): the fast acquire when
nobody queues, a ticket and a polled queue row (a client cannot park on a task token), the claim of
a lock handed over, leaving the queue, and the handoff to the next waiter that a release runs
(``SendTaskSuccess`` for a parked workflow).
"""

from __future__ import annotations

import contextlib
import json
import logging
from datetime import timedelta
from typing import Any, Mapping

from botocore.exceptions import ClientError

from locked_workflow.constructs_lib.client_args import MAX_POLL_INTERVAL_S
from locked_workflow.constructs_lib.client_args import MAX_LEASE_MS as _MAX_LEASE_MS
from locked_workflow.constructs_lib.client_args import checked_count as _count
from locked_workflow.constructs_lib.client_args import checked_seconds as _seconds
from locked_workflow.constructs_lib.client_args import checked_text as _text
from locked_workflow.constructs_lib.client_lease import Holding, Lease, LockHeld, LockLost, LockSuperseded
from locked_workflow.constructs_lib.client_lease import condition_failed as _condition_failed
from locked_workflow.constructs_lib.client_lease import lease_from_item as _lease
from locked_workflow.constructs_lib.client_lease import old_item as _old_item
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines.errors import ERROR_SUPERSEDED, SIGNAL_LOOK
from locked_workflow.state_machines.lock_item import (
    ACQUIRED_AT,
    ALIVE_STATUSES,
    EXPIRES_AT,
    FENCE,
    OWNER,
    lock_item_key,
    owner_execution,
)
from locked_workflow.state_machines.lock_writes import RELEASE, LockWrite

logger = logging.getLogger(__name__)


class FairQueue:
    """The fair lock's steps of a :class:`LockClient` (a base of it, beside its
    :class:`~locked_workflow.constructs_lib.client_session.ClientSession`, whose clients, clocks
    and ``_update`` they use); ``claim_window`` is set by the client."""

    claim_window: float

    def _try_fast_acquire(self, key: str, table_key: str, me: str, lease_ms: int) -> Lease:
        """A fair lock's fast path (nobody queues). Its condition judges ``expiresAt`` against the
        earliest time AWS's clock can show (see the module notes on clocks)."""
        started = self._monotonic()
        now, latest = self.earliest_ms(started), self.stamp(started)[1]
        try:
            response = self._update(
                table_key,
                fair.FAST_ACQUIRE,
                {
                    ":me": {"S": me},
                    ":stale": {"S": me},  # no liveness check here: nobody is known dead
                    ":now": {"N": str(now)},
                    ":expiresAt": {"N": str(latest + lease_ms)},
                    ":grace": {"N": "0"},  # no janitor retires a client's lock: its lease does
                    ":one": {"N": "1"},
                    ":zero": {"N": "0"},
                },
                return_new=True,
                who=me,
            )
        except ClientError as error:
            if not _condition_failed(error):
                raise
            old = _old_item(error)
            holder = old.get(OWNER, {}).get("S")
            expires_at = int(old[EXPIRES_AT]["N"]) if EXPIRES_AT in old else None
            held = LockHeld(
                f"lock {table_key!r} is held by {holder!r} until {expires_at} (epoch ms)",
                key=key, holder=holder, expires_at=expires_at,
            )
            held.item = old
            raise held from None
        return _lease(key, response["Attributes"], holding=Holding(self._monotonic, started, lease_ms, latest + lease_ms))

    def _client_lease(self, seconds: float) -> dict:
        """My row's token while I queue: polling until now + ``seconds`` + a margin."""
        until = self.latest_ms() + int((seconds + fair.CLIENT_POLL_MARGIN_S) * 1000)
        return {"S": f"{fair.CLIENT_LEASE_PREFIX}{until}"}

    def _row_update(self, row_key: str, write: LockWrite, values: Mapping[str, Any]) -> bool:
        """A fair write on a queue row; False when its condition is refused."""
        try:
            self._update(row_key, write, values)
            return True
        except ClientError as error:
            if _condition_failed(error):
                return False
            raise

    def _enqueue(self, table_key: str, me: str, lease_ms: int, *, lease_for_s: float) -> int | None:
        """Take a ticket and register my row (polling); None: refused - the lock is free with
        nobody queued (the fast path again)."""
        now = self.earliest_ms()
        try:
            item = self._update(table_key, fair.ENQUEUE, {
                ":me": {"S": me}, ":stale": {"S": me}, ":now": {"N": str(now)}, ":zero": {"N": "0"},
                ":one": {"N": "1"}}, return_new=True)["Attributes"]
        except ClientError as error:
            if _condition_failed(error):
                return None
            raise
        ticket = int(item[fair.TICKETS]["N"])
        self._park(table_key, me, lease_ms, ticket, lease_for_s)
        return ticket

    def _park(self, table_key: str, me: str, lease_ms: int, ticket: int, lease_for_s: float) -> bool:
        """PARK (a lease for a token) on my row; False: my row is marked ready (or left)."""
        return self._row_update(fair.row_key(table_key, ticket), fair.PARK, {
            ":me": {"S": me}, ":token": self._client_lease(lease_for_s), ":lease": {"N": str(lease_ms)},
            ":grace": {"N": "0"}})

    def _try_as_head(self, key: str, table_key: str, me: str, lease_ms: int, ticket: int) -> Lease:
        """GRANT to myself as the head of the queue (then drop my row)."""
        started = self._monotonic()
        now, latest = self.earliest_ms(started), self.stamp(started)[1]
        try:
            item = self._update(table_key, fair.GRANT, {
                ":me": {"S": me}, ":next": {"S": me}, ":stale": {"S": me}, ":now": {"N": str(now)},
                ":expiresAt": {"N": str(latest + lease_ms)}, ":grace": {"N": "0"}, ":one": {"N": "1"},
                ":prev": {"N": str(ticket - 1)}, ":ticket": {"N": str(ticket)}}, return_new=True)["Attributes"]
        except ClientError as error:
            if not _condition_failed(error):
                raise
            old = _old_item(error)
            if old.get(OWNER, {}).get("S") == me and fair.counters(old)[0] == ticket:
                lease = self.claim(key, table_key, me, ticket)  # handed to me: confirm it
                if lease is not None:
                    return self._whole_lease(lease, lease_ms)
            held = LockHeld(f"lock {table_key!r} is not mine yet (ticket {ticket})", key=key,
                            holder=old.get(OWNER, {}).get("S"),
                            expires_at=int(old[EXPIRES_AT]["N"]) if EXPIRES_AT in old else None)
            held.item = old
            raise held from None
        self.dynamodb.delete_item(TableName=self.table_name, Key=lock_item_key(fair.row_key(table_key, ticket)))
        return _lease(key, item, holding=Holding(self._monotonic, started, lease_ms, latest + lease_ms))

    def _poll(self, table_key: str, me: str, lease_ms: int, ticket: int, item: Mapping[str, Any], *,
              lease_for_s: float) -> int:
        """Between polls, from the lock item as my refused try saw it: handed to me -> the next
        try claims it; skipped -> a new ticket; behind a free lock whose head does not move ->
        run the handoff for it; else keep my row's lease alive. Returns my ticket."""
        served, _ = fair.counters(item)
        now = self.earliest_ms()
        owner = item.get(OWNER, {}).get("S")
        if owner == me and served == ticket:
            return ticket  # handed to me: the next try claims it
        cut = fair.cut_of(item)
        if cut >= ticket:  # a coalescing key: a newer run superseded my ticket (never grantable now)
            self.dynamodb.delete_item(TableName=self.table_name, Key=lock_item_key(fair.row_key(table_key, ticket)))
            by = item.get(fair.CUT_BY, {}).get("S")
            raise LockSuperseded(f"{ERROR_SUPERSEDED}: ticket {ticket} of lock {table_key!r}: {fair.SUPERSEDED_CAUSE}{by}",
                                 key=table_key, holder=by)
        if served >= ticket:  # skipped (my lease lapsed): queue again
            self.dynamodb.delete_item(TableName=self.table_name, Key=lock_item_key(fair.row_key(table_key, ticket)))
            return self._enqueue(table_key, me, lease_ms, lease_for_s=lease_for_s) or ticket
        free = owner is None or int(item.get(EXPIRES_AT, {}).get("N", "0")) < now
        if free and served < ticket - 1:
            self.handoff(table_key, me=me, served=served, fence=None)
        self._park(table_key, me, lease_ms, ticket, lease_for_s)
        return ticket

    def _whole_lease(self, claimed: Lease, lease_ms: int) -> Lease:
        """A claimed grant, renewed to the whole ``lease_ms`` from now. Its granter stamped the
        lease at the grant, and the claim comes at this client's next poll - seconds later on a
        loaded machine, maybe after the lease's end, which lets any waiter take the lock over
        while this client works. The renewal (``refresh``) is allowed while nobody took the lock
        over; taken over meanwhile, it was never mine to work under: ``LockHeld`` (the caller
        goes on waiting)."""
        try:
            return self.refresh(claimed, lease=timedelta(milliseconds=lease_ms))
        except LockLost as lost:
            held = LockHeld(f"lock {claimed.table_key!r} was taken over before its grant was claimed: {lost}",
                            key=claimed.key)
            raise held from None

    def claim(self, key: str, table_key: str, me: str, ticket: int) -> Lease | None:
        """CLAIM a lock handed to me (its handoff could not wake me: I poll); None: not mine.
        The lease was stamped by whoever handed it over: its holder counts what is left of it by
        this client's clock (a fair lock judges leases by the clients' clocks)."""
        for name, value in (("key", key), ("table_key", table_key), ("me", me)):
            _text(value, name)
        _count(ticket, "ticket", least=1)
        started = self._monotonic()
        latest = self.stamp(started)[1]
        try:
            item = self._update(table_key, fair.CLAIM, {":me": {"S": me}, ":ticket": {"N": str(ticket)}},
                                return_new=True)["Attributes"]
        except ClientError as error:
            if _condition_failed(error):
                return None
            raise
        self.dynamodb.delete_item(TableName=self.table_name, Key=lock_item_key(fair.row_key(table_key, ticket)))
        left_ms = min(max(0, int(item[EXPIRES_AT]["N"]) - latest), _MAX_LEASE_MS)
        return _lease(key, item, holding=Holding(self._monotonic, started, left_ms, int(item[EXPIRES_AT]["N"])))

    def leave_queue(self, row_key: str, me: str, *, ended: bool = False) -> Lease | None:
        """Give up the queue place of row ``row_key`` (a waiter giving up; the janitor, for an
        ended execution's parks): mark the row left - only a row still there (LEAVE_PRESENT),
        never one a handoff took - then, if the lock is free, hand it to the next waiter. Returns
        the lease when the lock was handed to ``me`` meanwhile (a waiter giving up claims it).
        A refused leave means the row is gone (a handoff took it: granted or passed, both read
        on the lock item below) or is another waiter's; LEAVE, whose condition admits a row
        that is gone (a hole's), would put a taken row back for good.

        ``ended`` (default False): ``me``'s execution has ended (the janitor). A grant to
        ``me`` is then never claimed - a redriven run of ``me`` may have
        confirmed it and work under it, and CLAIM is idempotent - but taken back only while
        nobody confirmed it (``DROP_GRANT``), and the lock handed on; None is returned. The
        free lock is handed on as :data:`~locked_workflow.state_machines.fair_protocol.JANITOR`,
        never as ``me`` (ACQUIRE's condition admits a lock ``me`` holds: a redriven run's), and
        also when ``me``'s ticket is the last served (a retry after its own ``DROP_GRANT``)."""
        _text(row_key, "row_key")
        _text(me, "me")
        ticket_text, _, table_key = row_key[len(fair.ROW_MARK):].partition(fair.ROW_MARK)
        if not row_key.startswith(fair.ROW_MARK) or not ticket_text.isdigit() or not table_key:
            raise ValueError(f"`row_key` must be a fair queue row's key ('!<ticket>!<stored key>'), got: {row_key!r}")
        ticket = int(ticket_text)
        self._row_update(row_key, fair.LEAVE_PRESENT, {":me": {"S": me}, ":one": {"N": "1"}})
        item = self.dynamodb.get_item(TableName=self.table_name, Key=lock_item_key(table_key),
                                      ConsistentRead=True).get("Item", {})
        served, _ = fair.counters(item)
        if item.get(OWNER, {}).get("S") == me and served == ticket:
            if not ended:
                return self.claim(table_key, table_key, me, ticket)
            try:
                item = self._update(table_key, fair.DROP_GRANT, {":me": {"S": me}, ":ticket": {"N": str(ticket)}},
                                    return_new=True)["Attributes"]
            except ClientError as error:
                if _condition_failed(error):
                    return None  # confirmed: a redriven run of ``me`` works under it (or it moved on)
                raise
            served, _ = fair.counters(item)
        free = OWNER not in item or int(item.get(EXPIRES_AT, {}).get("N", "0")) < self.earliest_ms()
        if free and ended and served <= ticket and served < fair.counters(item)[1]:  # (a ticket is out)
            if fair.cut_of(item) > served:  # superseded tickets ahead (a coalescing key): passed first
                served = self._jump(table_key, fair.JANITOR, served) or served
            self.handoff(table_key, me=fair.JANITOR, served=served, fence=None)
        elif free and served < ticket:
            self.handoff(table_key, me=me, served=served, fence=None)
        return None

    def finish_handoff(self, table_key: str, me: str) -> bool:
        """Finish the handoff of a releaser ``me`` that ended before its own fallback ran (the
        janitor, for an ended execution's keys): a grant ``me`` made on ``table_key`` and nobody
        confirmed (``handed`` = ``me``) to a grantee whose execution has ended (DescribeExecution:
        no longer RUNNING) is revoked (``REVOKE``: that grant only, refused once its grantee
        confirmed it - ``CLAIM`` and ``REVOKE`` are conditional writes of the one lock item, so
        exactly one wins), and the lock handed on to the next waiter (:meth:`handoff`) if a
        ticket is out, else left free - what the release's wake-up fallback does. A grant to a
        live grantee stands: it confirms it when it looks. True when a grant was revoked."""
        _text(table_key, "table_key")
        _text(me, "me")
        item = self.dynamodb.get_item(TableName=self.table_name, Key=lock_item_key(table_key),
                                      ConsistentRead=True).get("Item", {})
        nxt = item.get(OWNER, {}).get("S")
        if (item.get(fair.HANDED, {}).get("S") != me or nxt in (None, me) or FENCE not in item
                or not self._grantee_ended(nxt)):
            return False
        try:
            item = self._update(table_key, fair.REVOKE, {
                ":next": {"S": nxt}, ":me": {"S": me}, ":fence": {"N": item[FENCE]["N"]}}, return_new=True)["Attributes"]
        except ClientError as error:
            if _condition_failed(error):
                return False  # confirmed (or revoked by a copy of this event) meanwhile
            raise
        served, tickets = fair.counters(item)  # (as the revoke left them: a ticket taken since counts)
        if tickets > served:
            self.handoff(table_key, me=me, served=served, fence=None)
        return True

    def handoff(self, table_key: str, *, me: str, served: int, fence: int | None, hole_s: float | None = None) -> None:
        """Hand the lock of ``table_key`` to the next live waiter (fair_protocol, step 4):
        ``me`` holds it with ticket ``served`` and fence ``fence`` (a release), or - ``fence``
        None - the lock is free and its head does not move (a waiter's fallback, the janitor,
        an operator). Raises LockLost (via ClientError) when a release finds the lock not mine.
        Once a release has granted the lock on (or released it), an error of a later step (a
        wake-up, a revoke, the next row) ends the handoff without raising: the release is done,
        and each waiter's own look at its park timeout finds its grant or the free lock (as the
        workflows' handoff, whose later steps Catch every error)."""
        _text(table_key, "table_key")
        _text(me, "me")
        _count(served, "served")
        if fence is not None:
            _count(fence, "fence", least=1)
        if hole_s is not None and not 0 <= _seconds(hole_s, "hole_s") <= MAX_POLL_INTERVAL_S:
            raise ValueError(f"`hole_s` must be from 0 to {MAX_POLL_INTERVAL_S:g} seconds, got: {hole_s!r}")
        holding = fence is not None
        hole_ms = int((_seconds(hole_s, "hole_s") if hole_s is not None else self.claim_window) * 1000)
        c = served
        passed = False  # (a release) the lock is no longer mine: granted to the next, or released
        try:
            for _ in range(10_000):  # one row per round; each round passes a ticket or ends
                row_key = fair.row_key(table_key, c + 1)
                row = self.dynamodb.delete_item(TableName=self.table_name, Key=lock_item_key(row_key),
                                                ReturnValues="ALL_OLD").get("Attributes")
                state = fair.row_state(row, now=self.earliest_ms(), hole_ms=hole_ms)
                if state in ("wake", "grant"):
                    nxt = row[OWNER]["S"]
                    try:
                        granted = self._update(table_key, fair.GRANT, {
                            ":me": {"S": me}, ":next": {"S": nxt}, ":stale": {"S": me},
                            ":now": {"N": str(self.earliest_ms())},
                            ":expiresAt": {"N": str(self.latest_ms() + int(row[fair.LEASE]["N"]))},
                            ":grace": {"N": row.get(fair.GRACE_MS, {}).get("N", "0")}, ":one": {"N": "1"},
                            ":prev": {"N": str(c)}, ":ticket": {"N": str(c + 1)}}, return_new=True)["Attributes"]
                    except ClientError as error:
                        if not _condition_failed(error):
                            raise
                        old = _old_item(error)
                        if fair.cut_of(old) >= c + 1:  # superseded (coalescing)
                            if state == "wake":
                                self._supersede(row[fair.TOKEN]["S"], old.get(fair.CUT_BY, {}).get("S", ""))
                            jumped = self._jump(table_key, me, c)
                            if jumped is not None:
                                c = jumped
                                continue
                        if state == "wake":
                            self._nudge(row[fair.TOKEN]["S"])
                        if holding and old.get(OWNER, {}).get("S") == me and fair.counters(old)[0] > c:
                            # still mine, the queue moved under me (a ticket passed by a runner of
                            # the handoff that found me stale): go on from the new ``served`` -
                            # ended here, the lock would stay mine until my lease
                            c = fair.counters(old)[0]
                            continue
                        if holding:
                            raise
                        return
                    passed = True
                    if state == "grant" or self._wake(row[fair.TOKEN]["S"], granted):
                        return
                    if not self._grantee_ended(nxt) and self._confirmed_in_window(
                            table_key, row_key, nxt=nxt, me=me, granted=granted, hole_ms=hole_ms):
                        return
                    if not self._row_update(table_key, fair.REVOKE, {
                            ":next": {"S": nxt}, ":me": {"S": me}, ":fence": {"N": granted[FENCE]["N"]}}):
                        return  # confirmed (claimed) meanwhile
                    holding, c = False, c + 1
                elif state == "skip":
                    if not self._row_update(table_key, fair.SKIP, {
                            ":me": {"S": me}, ":stale": {"S": me}, ":now": {"N": str(self.earliest_ms())},
                            ":prev": {"N": str(c)}, ":ticket": {"N": str(c + 1)}}):
                        return
                    c += 1
                else:  # nobody parked on the next ticket yet
                    if holding:
                        item = self._update(table_key, RELEASE, {":me": {"S": me}, ":fence": {"N": str(fence)}},
                                            return_new=True)["Attributes"]
                        holding = False
                        passed = True
                        if fair.cut_of(item) > c:  # superseded tickets ahead
                            jumped = self._jump(table_key, me, c)
                            if jumped is not None:
                                c = jumped
                                continue
                        if fair.counters(item)[1] <= c:
                            return
                    since = (row or {}).get(fair.READY, {}).get("N") or str(self.latest_ms())
                    if self._row_update(row_key, fair.MARK, {":since": {"N": since}}):
                        item = self.dynamodb.get_item(TableName=self.table_name, Key=lock_item_key(table_key),
                                                      ConsistentRead=True).get("Item", {})
                        if fair.counters(item)[0] > c:  # served meanwhile: the mark is litter
                            with contextlib.suppress(ClientError):
                                self.dynamodb.delete_item(
                                    TableName=self.table_name, Key=lock_item_key(row_key),
                                    ConditionExpression=fair.UNMARK.condition,
                                    ExpressionAttributeNames=fair.UNMARK.attribute_names())
                        return
                    # its waiter parked meanwhile: take the row again
        except ClientError as error:
            if fence is None or not passed:
                raise
            # a release that handed the lock on (or freed it) is done: what is left - a wake-up
            # retried, a revoke, the next row, a mark - is also each waiter's own look at its
            # park timeout. Raised, the caller would retry a release whose lock has moved on
            # (LockLost); the workflows' handoff ends the same way (every later step Catches).
            logger.warning("lock %s: handed on; the handoff after it stopped at %s: the next waiter "
                           "finds its grant or the free lock by its own look", table_key,
                           error.response.get("Error", {}).get("Code"))


    def _confirmed_in_window(self, table_key: str, row_key: str, *, nxt: str, me: str,
                             granted: Mapping[str, Any], hole_ms: int) -> bool:
        """After a failed wake-up of a grantee whose execution still runs (its park may have
        just timed out, or the wake-up was delivered with its response lost): the workflows'
        steps (``fair_handoff.build_handoff``). A short look first (:data:`fair_protocol.REPARK_LOOK_S`):
        a new park of the grantee is woken; then the grant is read - confirmed (REVOKE's
        condition no longer holds: :func:`fair_protocol.revocable`, once false for good), the
        release is done. Else one claim window, the grant read again every
        ``REPARK_LOOK_S`` (a client's read costs no transition: it ends as soon as the grantee
        confirms, not at the window's end), then a new park woken or a last look before the
        caller's REVOKE. True: done (woken, or confirmed); False: revoke."""
        fence = int(granted[FENCE]["N"])
        self._sleep(fair.REPARK_LOOK_S)
        if self._wake_new_park(row_key, nxt, granted, hole_ms):
            return True
        waited = 0.0
        while True:
            try:
                item = self.dynamodb.get_item(TableName=self.table_name, Key=lock_item_key(table_key),
                                              ConsistentRead=True).get("Item")
                if not fair.revocable(item, nxt=nxt, me=me, fence=fence):
                    return True
            except ClientError as error:  # (unknown: wait on, as the workflows' Catch does)
                logger.info("grant not read: %s", error.response.get("Error", {}).get("Code"))
            if waited >= self.claim_window:
                break
            step = min(float(fair.REPARK_LOOK_S), self.claim_window - waited)
            self._sleep(step)
            waited += step
        woken = self._wake_new_park(row_key, nxt, granted, hole_ms)
        if woken:
            return True
        if woken is False:
            self._sleep(fair.REPARK_LOOK_S)  # a last look: woken or looking, it confirms meanwhile
        return False

    def _wake_new_park(self, row_key: str, nxt: str, granted: Mapping[str, Any], hole_ms: int) -> bool | None:
        """Take row ``row_key`` again: the grantee ``nxt`` parked there anew -> wake that park
        (True: delivered; False: failed); None: no new park."""
        again = self.dynamodb.delete_item(TableName=self.table_name, Key=lock_item_key(row_key),
                                          ReturnValues="ALL_OLD").get("Attributes")
        if fair.row_state(again, now=self.earliest_ms(), hole_ms=hole_ms) == "wake" and again[OWNER]["S"] == nxt:
            return self._wake(again[fair.TOKEN]["S"], granted)
        return None

    def _grantee_ended(self, owner: str) -> bool:
        execution = owner_execution(owner)
        if execution is None:
            return False
        try:
            status = self.stepfunctions.describe_execution(executionArn=execution)["status"]
        except ClientError:
            return False
        return status not in ALIVE_STATUSES

    def _wake(self, token: str, granted: Mapping[str, Any]) -> bool:
        """Wake a parked waiter with its grant (it confirms it, CLAIM, then works); False: not
        known to be delivered - its park has ended (stopped, cancelled, timed out), or any other
        error, whose call may have been applied (a 5xx, a timeout; a retry of it then answers
        ``TaskTimedOut``). The caller's REVOKE takes back only a grant not confirmed, so a
        woken waiter at work keeps it either way."""
        record = {"owner": granted[OWNER]["S"], "fence": int(granted[FENCE]["N"]),
                  "acquiredAt": int(granted[ACQUIRED_AT]["N"]), "expiresAt": int(granted[EXPIRES_AT]["N"]),
                  "served": int(granted[fair.SERVED]["N"])}
        try:
            self.stepfunctions.send_task_success(taskToken=token, output=json.dumps(record))
            return True
        except ClientError as error:
            logger.info("wake-up not delivered: %s", error.response.get("Error", {}).get("Code"))
            return False

    def _jump(self, table_key: str, me: str, c: int) -> int | None:
        """JUMP (a coalescing key): pass every superseded ticket after ``c``; the new ``served``,
        or None when no superseded ticket lies ahead (or the lock is not mine to pass)."""
        try:
            item = self._update(table_key, fair.JUMP, {
                ":me": {"S": me}, ":stale": {"S": me}, ":now": {"N": str(self.earliest_ms())},
                ":prev": {"N": str(c)}}, return_new=True)["Attributes"]
        except ClientError as error:
            if _condition_failed(error):
                return None
            raise
        return fair.counters(item)[0]

    def _supersede(self, token: str, by: str) -> None:
        """Wake a parked waiter whose ticket was superseded (``Lock.Superseded``); its response
        lost or its park ended, it finds out when it looks."""
        with contextlib.suppress(ClientError):
            self.stepfunctions.send_task_failure(
                taskToken=token, error=ERROR_SUPERSEDED,
                cause=fair.SUPERSEDED_CAUSE + (owner_execution(by) or by))

    def _nudge(self, token: str) -> None:
        with contextlib.suppress(ClientError):
            self.stepfunctions.send_task_failure(taskToken=token, error=SIGNAL_LOOK,
                                                 cause="the lock moved on while this waiter's row was taken")
