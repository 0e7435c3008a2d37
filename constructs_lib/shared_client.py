"""A :class:`~locked_workflow.constructs_lib.lock_client.LockClient` taking part in the read/write
lock of :mod:`locked_workflow.state_machines.shared_protocol` (``Lock.shared`` / ``Lock.exclusive``).

The steps are the protocol's, written with its expressions (nothing is spelled again here);
what differs from a workflow is how a client waits. A client cannot park on a task token, so
it **polls**, as a fair lock's client does (:mod:`fair_protocol`, step 7):

* its queue row holds ``lease:<epoch ms>`` in place of a token - refreshed by every poll's
  park, so a handoff that reads the row knows the waiter is alive (``row_state`` = ``grant``)
  and a client that died is passed over once that lease lapses (``skip``);
* the park is the protocol's transaction (``PARK`` on the row with the lock item's
  ``PARK_UNLESS``): refused, the ticket may be admitted now (the client admits itself) or was
  passed (it queues again) - so no handoff can miss it: a handoff that stops at its row leaves
  the key admissible for it, and its next poll admits it;
* between polls it *inspects* the lock item, as a parked workflow does at its fallback:
  granted -> claim; passed -> queue again; the head of a key free for it -> admit itself
  (a reader then admits the readers queued behind it, up to the next writer); an expired
  reader entry holding back the head -> reap it; behind a head that does not move on a key
  free of writers -> run the handoff for the head; else the liveness check of the workflow
  holds it is blocked by (:class:`ReadWriteHolds`: a hold's presence row probed, a cancelled
  branch's hold retired from now, an ended execution's from its end), as a parked workflow's
  fallback makes it.

A handoff run by a client (its release, the last reader leaving, a reader admitted from the
queue, a helper) is the protocol's step 4: a parked workflow is woken with
``SendTaskSuccess``; a polling client is granted and finds its grant at its next poll.

Leases are judged by the protocol's conditions (``expiresAt < :now``) with ``:now`` the
*earliest* time AWS's clock can show - the lower of the bounds DynamoDB's ``Date`` headers put
on it (see :mod:`lock_client`) - and stamped from the latest (``expiresAt``): a lease, a
client's or a workflow's, ends by this judgement only once AWS's clock is past its end, after
it ended for its holder, however fast the judge's own clock runs. A reader's lease is its
entry's ``expiresAt``; a writer's is the lock item's, as for the mutex. A client that knows no bound yet (a fresh one: a Lambda's cold
start) reads the lock item first - its ``Date`` gives them - so even its first lease is stamped
on AWS's clock: whatever its own clock says, the workflows see the lease it asked for.

The participant's parts: :mod:`client_rw_steps` (one write, one read, the clocks, a lease) and
:mod:`client_rw_handoff` (leaving, the handoff, the reap and the renewal); this module is how a
client enters (the fast path, a ticket, its polls) and the liveness check of the workflow holds
it waits behind.
"""

from __future__ import annotations

import contextlib
import logging
import random
from typing import Any, Mapping

from botocore.exceptions import BotoCoreError, ClientError

from locked_workflow.constructs_lib.client_lease import Lease, LockHeld, LockTimeout, retry_conflicts
from locked_workflow.constructs_lib.client_liveness import WorkflowHold
from locked_workflow.constructs_lib.client_rw_handoff import ReadWriteHandoff
from locked_workflow.constructs_lib.client_rw_steps import (  # noqa: F401 - READ, WRITE, Refused re-exported
    READ,
    WRITE,
    Refused,
    all_free,
    number,
    writer_free,
)
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import shared_protocol as shared
from locked_workflow.state_machines.errors import TRANSACTION_CANCELED_CODE
from locked_workflow.state_machines.lock_protocol import (
    ACQUIRED_AT,
    ERROR_TIMEOUT,
    ERROR_TOO_MANY_READERS,
    EXPIRES_AT,
    GRACE,
    OWNER,
    PRESENCE_SETTLE_MS,
    lock_item_key,
    owner_execution,
)
from locked_workflow.state_machines.wait_expressions import presence_token_of

logger = logging.getLogger(__name__)

#: A polling waiter's row lease lasts its next poll plus this margin (the fair client's).
_ROW_MARGIN_S = fair.CLIENT_POLL_MARGIN_S


class TooManyReaders(LockHeld):
    """A reader refused, before any write of its own, because the key already has
    ``shared_protocol.MAX_READERS`` readers (the lock item would grow past what a workflow's
    state can return). ``item``: the lock item as the refusal found it."""

    error = ERROR_TOO_MANY_READERS



class ReadWriteParticipant(ReadWriteHandoff):
    """The read/write protocol's steps for one :class:`LockClient` (``kind=LockClient.READ_WRITE``)."""

    def acquire(self, key: str, table_key: str, me: str, options: Any, *, mode: str) -> Lease:
        """Enter as a reader (``mode`` READ) or a writer: the fast path, else a ticket and polls."""
        c = self.client
        deadline = c.monotonic() + options.wait_s
        nominal = options.poll_interval
        ticket: int | None = None
        seen: Mapping[str, Any] = {}
        if c.aws_clock.bounds(c.monotonic()) is None:
            # a fresh client (a Lambda's cold start): learn AWS's clock before the first write
            # stamps a lease or judges one - a read's ``Date`` tells it
            self.read_item(table_key)
        while True:
            if ticket is None:
                lease, seen = self._fast(key, table_key, me, mode, options.lease_ms)
                if lease is not None:
                    return lease
                if mode == READ and shared.too_many_readers(seen):
                    raise self._held(key, table_key, seen, TooManyReaders)
                if options.wait_s == 0:
                    raise self._held(key, table_key, seen, LockHeld)
                ticket = self._enqueue(table_key, me, mode)
                if ticket is None:
                    continue  # the fast path would enter now: try it again
                # a new ticket's first park waits no poll
                delay = 0.0
            else:
                delay = min(random.uniform(nominal / 2, nominal), max(0.0, deadline - c.monotonic()))
                nominal = min(options.max_poll_interval, nominal * options.backoff_rate)
            lease, ticket = self._poll(key, table_key, me, mode, ticket, options.lease_ms,
                                       row_lease_s=max(delay, options.max_poll_interval))
            if lease is not None:
                return lease
            if ticket is None:
                continue
            if c.monotonic() >= deadline:
                lease = self._leave(key, table_key, me, mode, ticket, options.lease_ms)
                if lease is not None:  # granted meanwhile: mine after all
                    return lease
                seen = self.read_item(table_key)
                raise self._held(key, table_key, seen, LockTimeout,
                                 f" after waiting {options.wait_s:g} s (ticket {ticket})")
            logger.debug("lock %s: %s ticket %d waits; next look in %.3f s", table_key, mode, ticket, delay)
            c.sleep(delay)

    @staticmethod
    def _held(key: str, table_key: str, item: Mapping[str, Any], error: type, tail: str = "") -> Exception:
        owner = item.get(OWNER, {}).get("S")
        readers = number(item, shared.READERS)
        who = f"{readers} reader(s)" if owner == shared.SHARED else repr(owner)
        served, tickets = fair.counters(item)
        prefix = f"{ERROR_TIMEOUT}: " if tail else ""
        if error is TooManyReaders:
            prefix, tail = f"{ERROR_TOO_MANY_READERS}: ", f", at most {shared.MAX_READERS} readers at once{tail}"
        held = error(f"{prefix}lock {table_key!r} is held by {who}, {tickets - served} queued{tail}", key=key,
                     holder=owner, expires_at=number(item, EXPIRES_AT) if EXPIRES_AT in item else None)
        held.item = item
        return held

    def _fast(self, key: str, table_key: str, me: str, mode: str, lease_ms: int) -> tuple[Lease | None, Mapping]:
        """FAST_READ / FAST_WRITE (nobody queues); (None, the item as it was) when refused."""
        started, now, expires_at = self.own_lease(lease_ms)
        values = {**self.values(me), ":now": {"N": str(now)}, ":expiresAt": {"N": str(expires_at)},
                  ":grace": {"N": "0"}, ":entry": self.entry(now, expires_at)}
        try:
            if mode == READ:
                item = self.write(table_key, shared.FAST_READ, values, reader=me, return_new=True)
            else:
                item = self.write(table_key, shared.FAST_WRITE, values, return_new=True)
        except Refused as refused:
            if mode == READ and shared.reader_attribute(me) in refused.item:  # my retried entry
                lease = self._claim(key, table_key, me, mode, None, lease_ms)
                if lease is not None:
                    return lease, {}
            return None, refused.item
        ticket = fair.counters(item)[0] if mode == WRITE else None
        return self.lease_of(key, table_key, me, mode, item, ticket=ticket, started=started, lease_ms=lease_ms), item

    def _enqueue(self, table_key: str, me: str, mode: str) -> int | None:
        """A ticket (ENQUEUE_READ / ENQUEUE_WRITE); None: my fast path would enter now."""
        try:
            item = self.write(table_key, shared.ENQUEUE_READ if mode == READ else shared.ENQUEUE_WRITE,
                               self.values(me), return_new=True)
        except Refused:
            return None
        return fair.counters(item)[1]

    def _park(self, table_key: str, me: str, mode: str, ticket: int, lease_ms: int, row_lease_s: float) -> bool:
        """The protocol's park transaction with a polling lease for a token; False: refused (my
        ticket may be admitted now, or was passed, or my row was marked left)."""
        c = self.client
        until = self.latest() + int((row_lease_s + _ROW_MARGIN_S) * 1000)
        items = shared.park_transaction(
            c.table_name, table_key, ticket, mode,
            {":me": {"S": me}, ":token": {"S": f"{fair.CLIENT_LEASE_PREFIX}{until}"}, ":lease": {"N": str(lease_ms)},
             ":grace": {"N": "0"}},
            {k: v for k, v in {**self.values(me), ":ticket": {"N": str(ticket)}, ":prev": {"N": str(ticket - 1)}}.items()
             if k in shared.PARK_UNLESS[mode].value_names()})
        try:
            c.dynamodb.transact_write_items(TransactItems=items)
            return True
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == TRANSACTION_CANCELED_CODE:
                return False
            raise

    def _poll(self, key: str, table_key: str, me: str, mode: str, ticket: int, lease_ms: int, *,
              row_lease_s: float) -> tuple[Lease | None, int | None]:
        """One look at the lock item (the protocol's fallback) and a park that keeps my row alive.
        Returns (my lease, or None; my ticket, or None when I must queue again)."""
        for _ in range(16):  # each round ends in a park, or changes the key (a reap, a handoff)
            item = self.read_item(table_key)
            served, tickets = fair.counters(item)
            now = self.earliest()
            if self.granted(item, me, mode, ticket):
                lease = self._claim(key, table_key, me, mode, ticket, lease_ms)
                if lease is not None:
                    return lease, ticket
                continue
            if served >= ticket:  # passed over (my row's lease lapsed): queue again
                self.drop_row(table_key, ticket)
                return None, None
            free = (writer_free if mode == READ else all_free)(item, me=me, now=now)
            if served == ticket - 1 and free and mode == READ and shared.too_many_readers(item):
                # the head, refused by the cap (GRANT_READ): give my place up, unless granted meanwhile
                lease = self._leave(key, table_key, me, mode, ticket, lease_ms)
                if lease is not None:
                    return lease, ticket
                raise self._held(key, table_key, item, TooManyReaders, f" (ticket {ticket})")
            if served == ticket - 1 and free:
                lease = self._admit(key, table_key, me, mode, ticket, lease_ms)
                if lease is not None:
                    return lease, ticket
                continue
            expired = shared.expired_readers(item, now=now)
            if expired and (mode == WRITE or served < ticket - 1):
                self.reap(table_key, me, expired[0], readers=number(item, shared.READERS))
                continue
            if served < ticket - 1 and writer_free(item, me=me, now=now):
                self.handoff(table_key, me=me, start=served, tickets=tickets, stop_at=me)
            elif self._holds_gone(table_key, item, me, now):
                continue  # a workflow hold gone (its branch cancelled, its execution ended): its
                # lease now ends at its stop grace, which the next look shows
            if self._park(table_key, me, mode, ticket, lease_ms, row_lease_s):
                return None, ticket
        return None, ticket

    def _holds_gone(self, table_key: str, item: Mapping[str, Any], me: str, now: int) -> bool:
        """The liveness check of the workflow holds I am blocked by (the state machines'
        fallback's: ``shared_protocol.workflow_holds``, in turn), through the client's
        :meth:`~locked_workflow.constructs_lib.client_liveness.HolderLiveness.check_holds` with
        :class:`ReadWriteHolds`. True: one now ends sooner - look again at once."""
        holds = [WorkflowHold(owner=owner, execution=owner_execution(owner) or "", reader=reader,
                              acquired_at=number(hold, ACQUIRED_AT), expires_at=number(hold, EXPIRES_AT),
                              grace_ms=number(hold, GRACE))
                 for owner, reader, hold in shared.workflow_holds(item, me=me, now=now)]
        return self.client.check_holds(table_key, holds, ReadWriteHolds(self))

    def _claim(self, key: str, table_key: str, me: str, mode: str, ticket: int | None,
               lease_ms: int) -> Lease | None:
        """CLAIM_READ / CLAIM_WRITE: a grant handed to me (or my own entry from an attempt whose
        response was lost) becomes my own lease. None: not mine."""
        started, now, expires_at = self.own_lease(lease_ms)
        values = {":me": {"S": me}, ":entry": self.entry(now, expires_at), ":expiresAt": {"N": str(expires_at)},
                  ":ticket": {"N": str(ticket or 0)}}
        try:
            if mode == READ:
                item = self.write(table_key, shared.CLAIM_READ, values, reader=me, return_new=True)
            else:
                item = self.write(table_key, shared.CLAIM_WRITE, values, return_new=True)
        except Refused:
            return None
        if ticket is not None:
            self.drop_row(table_key, ticket)
        return self.lease_of(key, table_key, me, mode, item, ticket=ticket if mode == READ else fair.counters(item)[0],
                           started=started, lease_ms=lease_ms)

    def _admit(self, key: str, table_key: str, me: str, mode: str, ticket: int, lease_ms: int) -> Lease | None:
        """GRANT_READ / GRANT_WRITE to myself, the head of a key free for me; a reader then
        admits the readers queued behind it. None: refused (the next look decides)."""
        started, now, expires_at = self.own_lease(lease_ms)
        values = {**self.values(me), ":now": {"N": str(now)}, ":next": {"S": me},
                  ":expiresAt": {"N": str(expires_at)}, ":grace": {"N": "0"}, ":entry": self.entry(now, expires_at),
                  ":prev": {"N": str(ticket - 1)}, ":ticket": {"N": str(ticket)}}
        try:
            item = self.write(table_key, shared.GRANT_READ if mode == READ else shared.GRANT_WRITE, values,
                               reader=me if mode == READ else None, return_new=True)
        except Refused:
            return None
        self.drop_row(table_key, ticket)
        if mode == READ:
            self.handoff(table_key, me=me, start=ticket)
        return self.lease_of(key, table_key, me, mode, item, ticket=ticket, started=started, lease_ms=lease_ms)

    def _leave(self, key: str, table_key: str, me: str, mode: str, ticket: int, lease_ms: int) -> Lease | None:
        """Give up my place (max wait spent): my row is marked left; granted meanwhile -> claim it;
        my ticket may have been the head of a free key -> run the handoff past it."""
        c = self.client
        args = fair.arguments(fair.row_key(table_key, ticket), shared.LEAVE, {":me": {"S": me}, ":one": {"N": "1"}})
        with contextlib.suppress(ClientError):
            retry_conflicts(lambda: c.dynamodb.update_item(TableName=c.table_name, **args), sleep=c.sleep)
        item = self.read_item(table_key)
        if self.granted(item, me, mode, ticket):
            lease = self._claim(key, table_key, me, mode, ticket, lease_ms)
            if lease is not None:
                return lease
        served, _ = fair.counters(item)
        if served >= ticket:  # passed already: no handoff will skip (and delete) my row
            self.drop_row(table_key, ticket)
        elif writer_free(item, me=me, now=self.earliest()):
            self.handoff(table_key, me=me, start=served)
        return None


class ReadWriteHolds:
    """:class:`~locked_workflow.constructs_lib.client_liveness.HoldWrites` of the read/write lock
    (the state machines' ``ReadPresence`` / ``AbandonHolder`` / ``AbandonReader`` /
    ``RetireHolder`` / ``RetireReader``, with the protocol's writes): a hold's presence is on
    its own row (``shared_protocol.PRESENT_ROW``); abandoned - its token closed - with
    ``gone_transaction`` (the row's GONE_ROW beside RETIRE_GONE_WRITER / RETIRE_GONE_READER,
    all or nothing: from the latest time AWS's clock can show plus its stop grace, the token
    settled by the earliest); retired - its execution ended - with RETIRE_GONE_WRITER (the
    mutex's RETIRE_BY) / RETIRE_GONE_READER, as the janitor writes them."""

    def __init__(self, participant: ReadWriteParticipant) -> None:
        self.participant = participant
        self.client = participant.client

    def presence_token(self, table_key: str, hold: WorkflowHold) -> str | None:
        c = self.client
        row = c.dynamodb.get_item(TableName=c.table_name, Key=lock_item_key(shared.presence_row_key(hold.owner)),
                                  ConsistentRead=True).get("Item", {})
        return presence_token_of(row, hold.acquired_at)

    def abandon_hold(self, table_key: str, hold: WorkflowHold, token: str) -> bool:
        c = self.client
        until = c.latest_ms() + hold.grace_ms
        if until >= hold.expires_at:
            return False  # a retire never lengthens a lease: it ends sooner by itself
        acquired = {"N": str(hold.acquired_at)}
        items = shared.gone_transaction(
            c.table_name, table_key, shared.presence_row_key(hold.owner), reader=hold.owner if hold.reader else None,
            row_values={":token": {"S": token}, ":acquiredAt": acquired,
                        ":settledBefore": {"N": str(c.earliest_ms() - PRESENCE_SETTLE_MS)}},
            lock_values={":acquiredAt": acquired, ":until": {"N": str(until)},
                         **({} if hold.reader else {":owner": {"S": hold.owner}})})
        try:
            c.dynamodb.transact_write_items(TransactItems=items)
            return True
        except (ClientError, BotoCoreError) as error:  # nothing written: the next check looks again
            if not (isinstance(error, ClientError)
                    and error.response.get("Error", {}).get("Code") == TRANSACTION_CANCELED_CODE):
                logger.info("lock %s: the retire of %s's abandoned hold failed: %s", table_key, hold.owner, error)
            return False  # refused: its token too young to trust yet, departed, or the hold moved on

    def retire_hold(self, table_key: str, hold: WorkflowHold, until: int) -> bool:
        values = {":acquiredAt": {"N": str(hold.acquired_at)}, ":until": {"N": str(until)},
                  **({} if hold.reader else {":owner": {"S": hold.owner}})}
        try:
            self.participant.retire(table_key, shared.RETIRE_GONE_READER if hold.reader else shared.RETIRE_GONE_WRITER,
                                    values, reader=hold.owner if hold.reader else None)
            return True
        except Refused:
            return False  # it ends no later already, or the hold moved on
        except (ClientError, BotoCoreError) as error:
            logger.info("lock %s: the retire of %s failed (the next check tries again): %s", table_key, hold.owner, error)
            return False
