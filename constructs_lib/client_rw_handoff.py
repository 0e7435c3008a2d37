"""How a :class:`~locked_workflow.constructs_lib.lock_client.LockClient`'s hold of the read/write
lock ends (:mod:`shared_client`): a reader's leave, a writer's release through the handoff
(``shared_protocol``, step 4: admit the next readers, or the next writer), the reap of an expired
reader entry, the sweep of a shared hold a plain mutex meets, and a hold's renewal.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any, Mapping

from botocore.exceptions import ClientError

from locked_workflow.constructs_lib.client_lease import Lease, LockLost
from locked_workflow.constructs_lib.client_rw_steps import (
    READ,
    WRITE,
    ReadWriteSteps,
    Refused,
    handoff_stopped,
    number,
)
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import shared_protocol as shared
from locked_workflow.state_machines.lock_protocol import ERROR_LOST, OWNER, REFRESH, lock_item_key

logger = logging.getLogger(__name__)


class ReadWriteHandoff(ReadWriteSteps):
    """The read/write protocol's steps that end a hold, for one :class:`LockClient`: the base of
    :class:`~locked_workflow.constructs_lib.shared_client.ReadWriteParticipant`."""

    def reap(self, table_key: str, me: str, reader: str, *, readers: int) -> bool:
        """REAP_READ (REAP_LAST: ``readers`` says it is the last) an expired entry; the last one
        out runs the handoff. Refused (False): the next look decides."""
        try:
            item = self.write(table_key, shared.leave_write(readers, reap=True), self.values(me), reader=reader,
                               return_new=True)
        except Refused:
            return False
        logger.info("lock %s: reaped the expired reader entry of %s", table_key, reader)
        self.after_last_reader(table_key, me, item)
        return True

    def sweep_shared_hold(self, table_key: str, me: str, item: Mapping[str, Any]) -> bool:
        """A *plain* mutex client (a writer whose acquire never takes a shared hold over) refused
        by the lock item ``item``: if a shared hold owns it, reap one reader entry whose lease is
        over by the earliest time AWS's clock can show (``REAP_LAST`` for the last one, which ends
        the hold and hands off to whoever queues), or free a shared hold with no reader left
        (``FREE_EMPTY``: an item the first protocol's two-write leave left). True when it wrote:
        try the acquire again at once. A live reader's entry is never touched; a reader whose
        execution ended is reaped once the janitor's retire (or its lease) ended its entry."""
        if item.get(OWNER, {}).get("S") != shared.SHARED:
            return False
        expired = shared.expired_readers(item, now=self.earliest())
        if expired:
            return self.reap(table_key, me, expired[0], readers=number(item, shared.READERS))
        if shared.readers_of(item):
            return False
        try:
            self.write(table_key, shared.FREE_EMPTY, self.values(me))
        except Refused:
            return False
        logger.info("lock %s: freed a shared hold with no reader", table_key)
        return True

    def after_last_reader(self, table_key: str, me: str, item: Mapping[str, Any]) -> None:
        """``readers`` reached 0 (``item``: ALL_NEW of the write, which ended the shared hold):
        hand off to whoever queues."""
        if number(item, shared.READERS) != 0:
            return
        served, _ = fair.counters(item)
        self.handoff(table_key, me=me, start=served)

    # -- release and refresh -----------------------------------------------------------------

    def release(self, lease: Lease) -> None:
        """A reader: LEAVE_READ, or LEAVE_LAST as the last one (which ends the shared hold, then
        hands off). A writer: the handoff from its ticket, releasing first if nobody is parked.
        :class:`LockLost` when the hold was gone (reaped, or taken over) - never another
        holder's removed."""
        table_key, me = lease.table_key, lease.owner
        if lease.shared:
            item = self._leave_read(table_key, me)
            try:
                self.after_last_reader(table_key, me, item)
            except ClientError as error:  # my hold is over: the release is done
                handoff_stopped(table_key, error)
            return
        if not self.handoff(table_key, me=me, start=lease.ticket or 0, fence=lease.fence):
            raise LockLost(f"{ERROR_LOST}: lock {table_key!r} is not held by {me!r} (fence {lease.fence})")

    def _leave_read(self, table_key: str, me: str) -> Mapping[str, Any]:
        """My entry removed (LEAVE_READ, or LEAVE_LAST if I am the last reader: a refusal's item
        says which to try next); the lock item after it."""
        write, retried = shared.LEAVE_READ, False
        item: Mapping[str, Any] = {}
        for _ in range(shared.MAX_LEAVE_ROUNDS):  # a refusal: the count moved since (a reader came or went)
            try:
                return self.write(table_key, write, self.values(me), reader=me, return_new=True)
            except Refused as refused:
                retried = retried or refused.retried
                item = refused.item
            if shared.reader_attribute(me) not in item:
                if not retried:
                    raise LockLost(f"{ERROR_LOST}: the shared hold of {me!r} on lock {table_key!r} is gone "
                                   "(its lease ran out and it was reaped)")
                return item  # my earlier attempt removed it (its answer was lost): was I the last?
            write = shared.leave_write(number(item, shared.READERS))
        # the count kept moving round after round (the state machine's cap, and its way out): my
        # entry ends now (RETIRE_READER; a client's entry has no stop grace) and the next
        # participant that meets it reaps it, as a stopped reader's - my hold is over either way
        logger.warning("lock %s: the reader count moved at each of %d leaves; the entry of %s is retired",
                       table_key, shared.MAX_LEAVE_ROUNDS, me)
        with contextlib.suppress(Refused):  # refused: it is gone already (reaped)
            return self.write(table_key, shared.RETIRE_READER, {":endedAt": {"N": str(self.latest())}},
                               reader=me, return_new=True)
        return item

    def refresh(self, held: Lease, expires_at: int) -> dict:
        """Renew a hold: a reader's entry (CLAIM_READ, its REFRESH), a writer's lease (the mutex's
        REFRESH). Returns the lock item after it; :class:`Refused` when the hold is gone."""
        me = held.owner
        if held.shared:
            return self.write(held.table_key, shared.CLAIM_READ,
                               {":entry": self.entry(held.acquired_at, expires_at)}, reader=me, return_new=True)
        return self.write(held.table_key, REFRESH, {":me": {"S": me}, ":expiresAt": {"N": str(expires_at)}},
                           return_new=True)

    # -- the handoff (shared_protocol, step 4) ------------------------------------------------

    def handoff(self, table_key: str, *, me: str, start: int, fence: int | None = None,
                tickets: int | None = None, stop_at: str | None = None) -> bool:
        """Admit the waiters from ticket ``start`` + 1 on: every reader up to the next writer, or
        that writer. ``fence``: I am a writer holding the key with this fence (released here, at
        the latest when nobody is parked); ``tickets``: a helper's view of the last ticket out (a row
        that never came is marked, and skipped once its mark is old); ``stop_at``: a helper
        stops at its own row (it admits itself). False: a holding writer's release was refused
        on its first attempt (the key was not mine). Once a holding writer's hold is handed on
        or freed, an error of a later step ends the handoff (True): :func:`_handoff_stopped`."""
        c, holding, c_ = self.client, fence is not None, start
        try:
            for _ in range(10_000):  # each round passes a ticket or ends
                row = c.dynamodb.get_item(TableName=c.table_name, Key=lock_item_key(fair.row_key(table_key, c_ + 1)),
                                          ConsistentRead=True).get("Item")
                state = fair.row_state(row, now=self.earliest(), hole_ms=self.hole_ms)
                if state in ("wake", "grant") and row is not None:
                    nxt = row[OWNER]["S"]
                    if nxt == stop_at:
                        break
                    kind = shared.row_kind(row)
                    if not self._grant(table_key, me, c_, row, kind):
                        break
                    if state == "wake":
                        self._wake(row[fair.TOKEN]["S"])
                    holding, c_ = False, c_ + 1
                    if kind == WRITE:
                        return True
                    continue
                if state == "skip":
                    try:
                        self.write(table_key, shared.SKIP, {**self.values(me), ":prev": {"N": str(c_)},
                                                             ":ticket": {"N": str(c_ + 1)}})
                    except Refused:
                        break
                    c_ += 1
                    self.drop_row(table_key, c_)  # a waiter gone, or a hole: nobody else would delete it
                    continue
                if tickets is not None and c_ + 1 <= tickets and fair.READY not in (row or {}):
                    with contextlib.suppress(ClientError):  # refused: its waiter parked meanwhile
                        c.dynamodb.update_item(TableName=c.table_name, **fair.arguments(
                            fair.row_key(table_key, c_ + 1), shared.MARK, {":since": {"N": str(self.latest())}}))
                    break
                if holding:  # nobody parked: release, then read the row again (it may have parked meanwhile)
                    try:
                        self.write(table_key, shared.RELEASE_WRITE, {":me": {"S": me}, ":fence": {"N": str(fence)}})
                    except Refused as refused:
                        if not refused.retried:
                            return False
                    holding = False
                    continue
                break
        except ClientError as error:
            if fence is None or holding:
                raise
            # my hold is handed on (a grant) or freed: the release is done; what is left (a wake-up,
            # the next readers' grants, a skip, a mark) is also each waiter's own look
            handoff_stopped(table_key, error)
            return True

        if holding:
            try:
                self.write(table_key, shared.RELEASE_WRITE, {":me": {"S": me}, ":fence": {"N": str(fence)}})
            except Refused as refused:
                if not refused.retried:
                    return False
        return True

    def _grant(self, table_key: str, me: str, c_: int, row: Mapping[str, Any], kind: str) -> bool:
        """GRANT_READ / GRANT_WRITE to the waiter of row ``c_ + 1`` with a claim-window lease; a
        refusal whose write was applied after all (a lost response) counts as granted."""
        c = self.client
        nxt = row[OWNER]["S"]
        now = self.earliest()
        until = self.latest() + self.claim_window_ms
        grace = row.get(fair.GRACE_MS, {}).get("N", "0")
        values = {**self.values(me), ":now": {"N": str(now)}, ":next": {"S": nxt}, ":expiresAt": {"N": str(until)},
                  ":grace": {"N": grace}, ":prev": {"N": str(c_)}, ":ticket": {"N": str(c_ + 1)},
                  ":entry": shared.entry_value(expires_at=str(until), acquired_at=str(now), grace=grace)}
        try:
            self.write(table_key, shared.GRANT_READ if kind == READ else shared.GRANT_WRITE, values,
                        reader=nxt if kind == READ else None)
            return True
        except Refused as refused:
            item = refused.item if not refused.retried else self.read_item(table_key)
            return fair.counters(item)[0] == c_ + 1 and self.granted(item, nxt, kind, c_ + 1)

    def _wake(self, token: str) -> None:
        """Wake a parked workflow (its next state claims the grant). A failed wake-up is no
        error: the grant lapses after the claim window unless its waiter claims it."""
        try:
            self.client.stepfunctions.send_task_success(taskToken=token, output=json.dumps({"granted": True}))
        except ClientError as error:
            logger.info("wake-up not delivered: %s", error.response.get("Error", {}).get("Code"))
