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
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import random
from typing import Any, Mapping

from botocore.exceptions import BotoCoreError, ClientError

from locked_workflow.constructs_lib.client_liveness import WorkflowHold
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import shared_protocol as shared
from locked_workflow.state_machines.errors import CONDITIONAL_CHECK_FAILED_CODE, TRANSACTION_CANCELED_CODE
from locked_workflow.state_machines.lock_protocol import (
    ACQUIRED_AT,
    ERROR_LOST,
    ERROR_TIMEOUT,
    ERROR_TOO_MANY_READERS,
    EXPIRES_AT,
    FENCE,
    GRACE,
    OWNER,
    REFRESH,
    PRESENCE_SETTLE_MS,
    LockWrite,
    lock_item_key,
    owner_execution,
)
from locked_workflow.state_machines.wait_expressions import presence_token_of

from locked_workflow.constructs_lib.client_lease import (
    Holding,
    Lease,
    LockHeld,
    LockLost,
    LockTimeout,
    retry_conflicts,
)


logger = logging.getLogger(__name__)

READ, WRITE = shared.READ, shared.WRITE
#: A polling waiter's row lease lasts its next poll plus this margin (the fair client's).
_ROW_MARGIN_S = fair.CLIENT_POLL_MARGIN_S


class TooManyReaders(LockHeld):
    """A reader refused, before any write of its own, because the key already has
    ``shared_protocol.MAX_READERS`` readers (the lock item would grow past what a workflow's
    state can return). ``item``: the lock item as the refusal found it."""

    error = ERROR_TOO_MANY_READERS


class Refused(Exception):
    """A conditional write was refused; ``item``: the lock item as it was (maybe empty)."""

    def __init__(self, item: Mapping[str, Any], retried: bool) -> None:
        super().__init__("refused")
        self.item = item
        self.retried = retried


def _number(item: Mapping[str, Any], name: str, default: int = 0) -> int:
    return int(item.get(name, {}).get("N", default))


def _writer_free(item: Mapping[str, Any], *, me: str, now: int) -> bool:
    """The free condition of a reader (``_WRITER_FREE``), read in Python."""
    owner = item.get(OWNER, {}).get("S")
    return (owner is None or owner in (shared.SHARED, me)
            or (EXPIRES_AT in item and _number(item, EXPIRES_AT) < now))


def _all_free(item: Mapping[str, Any], *, me: str, now: int) -> bool:
    """The free condition of a writer (``_ALL_FREE``), read in Python."""
    owner = item.get(OWNER, {}).get("S")
    if owner == shared.SHARED:
        return _number(item, shared.READERS) == 0
    return owner is None or owner == me or (EXPIRES_AT in item and _number(item, EXPIRES_AT) < now)


def _handoff_stopped(table_key: str, error: ClientError) -> None:
    """A release whose hold is over (left, handed on or freed) met an error in the rest of its
    handoff: the release is done - raised, the caller would retry a release whose hold has gone
    (``LockLost``) - and each waiter's own look at its park timeout admits it (the workflows'
    handoff ends the same way: its later steps Catch every error)."""
    logger.warning("lock %s: released; the handoff after it stopped at %s: the next waiters are admitted "
                   "by their own look", table_key, error.response.get("Error", {}).get("Code"))


class ReadWriteParticipant:
    """The read/write protocol's steps for one :class:`LockClient` (``read_write=True``)."""

    def __init__(self, client: Any) -> None:
        """``client``: the LockClient this participant acts for (its DynamoDB and Step Functions
        clients, clocks and sleep; not imported here: it imports this module)."""
        self.client = client

    # -- one write, one read --------------------------------------------------------------

    def _write(self, key: str, write: LockWrite, values: Mapping[str, Any], *, reader: str | None = None,
               return_new: bool = False) -> dict:
        """One conditional UpdateItem of the protocol; refused -> :class:`Refused`."""
        c = self.client
        names = set(write.value_names())
        args = shared.arguments(key, write, {k: v for k, v in values.items() if k in names}, reader=reader,
                                return_values="ALL_NEW" if return_new else "NONE")
        answers: list[Mapping[str, Any]] = []  # every attempt's (a transaction conflict is tried again)

        def attempt() -> dict:
            before = c.monotonic()
            try:
                response = c.dynamodb.update_item(TableName=c.table_name,
                                                  ReturnValuesOnConditionCheckFailure="ALL_OLD", **args)
            except ClientError as error:
                c.aws_clock.sample(before, c.monotonic(), error.response)
                answers.append(error.response)
                raise
            c.aws_clock.sample(before, c.monotonic(), response)
            return response

        try:
            response = retry_conflicts(attempt, sleep=c.sleep)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == CONDITIONAL_CHECK_FAILED_CODE:
                # botocore sent an attempt again: its first send may have been applied (a
                # transaction conflict was not: nothing was written)
                retried = any(a.get("ResponseMetadata", {}).get("RetryAttempts", 0) > 0 for a in answers)
                raise Refused(error.response.get("Item") or {}, retried) from None
            raise
        return response.get("Attributes", {})

    def _read(self, key: str) -> dict:
        """The lock item (a strongly consistent GetItem); its response's ``Date`` bounds AWS's clock."""
        c = self.client
        before = c.monotonic()
        response = c.dynamodb.get_item(TableName=c.table_name, Key=lock_item_key(key), ConsistentRead=True)
        c.aws_clock.sample(before, c.monotonic(), response)
        return response.get("Item", {})

    def retire(self, key: str, write: LockWrite, values: Mapping[str, Any], *, reader: str | None) -> None:
        """A liveness check's retire of a workflow hold (:class:`ReadWriteHolds`): ``write``
        (RETIRE_GONE_READER on ``reader``'s entry, or RETIRE_GONE_WRITER); refused -> :class:`Refused`."""
        self._write(key, write, values, reader=reader)

    def _drop_row(self, key: str, ticket: int) -> None:
        """The row of a served ticket - mine, or one a handoff skipped (best effort: a served
        ticket's row is never read, and no park can write it again: its ticket was passed)."""
        c = self.client
        with contextlib.suppress(ClientError):
            retry_conflicts(lambda: c.dynamodb.delete_item(TableName=c.table_name,
                                                           Key=lock_item_key(fair.row_key(key, ticket))),
                            sleep=c.sleep)

    def _values(self, me: str) -> dict:
        """Values of the free conditions: ``:me``, ``:stale`` (nobody is known dead), ``:now``, ``:shared``,
        and the counters' ``:one``/``:zero``/``:minusOne``."""
        return {":me": {"S": me}, ":stale": {"S": me}, ":now": {"N": str(self._earliest())},
                ":shared": {"S": shared.SHARED}, ":one": {"N": "1"}, ":zero": {"N": "0"}, ":minusOne": {"N": "-1"},
                **shared.MAX_READERS_VALUES}

    def _earliest(self, at: float | None = None) -> int:
        """What this client judges leases by: :meth:`LockClient.earliest_ms`."""
        return self.client.earliest_ms(at)

    def _latest(self) -> int:
        """What a lease or a mark is stamped from: :meth:`LockClient.latest_ms`."""
        return self.client.latest_ms()

    def _own(self, lease_ms: int) -> tuple[float, int, int]:
        """(monotonic start, acquiredAt - also the ``:now`` its write judges by, expiresAt) of a
        lease of ``lease_ms`` taken now."""
        c = self.client
        started = c.monotonic()
        return started, self._earliest(started), c.stamp(started)[1] + lease_ms

    @property
    def _claim_window_ms(self) -> int:
        """How long a handoff's grant lasts unconfirmed (the workflows': at least 10 s)."""
        return int(max(self.client.claim_window, 10) * 1000)

    @property
    def _hole_ms(self) -> int:
        return int(self.client.claim_window * 1000)

    # -- leases ----------------------------------------------------------------------------

    def _lease(self, key: str, table_key: str, me: str, mode: str, item: Mapping[str, Any], *, ticket: int | None,
               started: float, lease_ms: int) -> Lease:
        if mode == READ:
            entry = item[shared.reader_attribute(me)]["M"]
            acquired_at, expires_at = int(entry[ACQUIRED_AT]["N"]), int(entry[EXPIRES_AT]["N"])
        else:
            acquired_at, expires_at = _number(item, ACQUIRED_AT), _number(item, EXPIRES_AT)
        holding = Holding(self.client.monotonic, started, lease_ms, expires_at)
        return Lease(key=key, table_key=table_key, owner=me, fence=_number(item, FENCE), acquired_at=acquired_at,
                     expires_at=expires_at, ticket=ticket, shared=mode == READ).with_holding(holding)

    def _entry(self, acquired_at: int, expires_at: int) -> dict:
        return shared.entry_value(expires_at=str(expires_at), acquired_at=str(acquired_at), grace="0")

    # -- acquire ---------------------------------------------------------------------------

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
            self._read(table_key)
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
                seen = self._read(table_key)
                raise self._held(key, table_key, seen, LockTimeout,
                                 f" after waiting {options.wait_s:g} s (ticket {ticket})")
            logger.debug("lock %s: %s ticket %d waits; next look in %.3f s", table_key, mode, ticket, delay)
            c.sleep(delay)

    @staticmethod
    def _held(key: str, table_key: str, item: Mapping[str, Any], error: type, tail: str = "") -> Exception:
        owner = item.get(OWNER, {}).get("S")
        readers = _number(item, shared.READERS)
        who = f"{readers} reader(s)" if owner == shared.SHARED else repr(owner)
        served, tickets = fair.counters(item)
        prefix = f"{ERROR_TIMEOUT}: " if tail else ""
        if error is TooManyReaders:
            prefix, tail = f"{ERROR_TOO_MANY_READERS}: ", f", at most {shared.MAX_READERS} readers at once{tail}"
        held = error(f"{prefix}lock {table_key!r} is held by {who}, {tickets - served} queued{tail}", key=key,
                     holder=owner, expires_at=_number(item, EXPIRES_AT) if EXPIRES_AT in item else None)
        held.item = item
        return held

    def _fast(self, key: str, table_key: str, me: str, mode: str, lease_ms: int) -> tuple[Lease | None, Mapping]:
        """FAST_READ / FAST_WRITE (nobody queues); (None, the item as it was) when refused."""
        started, now, expires_at = self._own(lease_ms)
        values = {**self._values(me), ":now": {"N": str(now)}, ":expiresAt": {"N": str(expires_at)},
                  ":grace": {"N": "0"}, ":entry": self._entry(now, expires_at)}
        try:
            if mode == READ:
                item = self._write(table_key, shared.FAST_READ, values, reader=me, return_new=True)
            else:
                item = self._write(table_key, shared.FAST_WRITE, values, return_new=True)
        except Refused as refused:
            if mode == READ and shared.reader_attribute(me) in refused.item:  # my retried entry
                lease = self._claim(key, table_key, me, mode, None, lease_ms)
                if lease is not None:
                    return lease, {}
            return None, refused.item
        ticket = fair.counters(item)[0] if mode == WRITE else None
        return self._lease(key, table_key, me, mode, item, ticket=ticket, started=started, lease_ms=lease_ms), item

    def _enqueue(self, table_key: str, me: str, mode: str) -> int | None:
        """A ticket (ENQUEUE_READ / ENQUEUE_WRITE); None: my fast path would enter now."""
        try:
            item = self._write(table_key, shared.ENQUEUE_READ if mode == READ else shared.ENQUEUE_WRITE,
                               self._values(me), return_new=True)
        except Refused:
            return None
        return fair.counters(item)[1]

    def _park(self, table_key: str, me: str, mode: str, ticket: int, lease_ms: int, row_lease_s: float) -> bool:
        """The protocol's park transaction with a polling lease for a token; False: refused (my
        ticket may be admitted now, or was passed, or my row was marked left)."""
        c = self.client
        until = self._latest() + int((row_lease_s + _ROW_MARGIN_S) * 1000)
        items = shared.park_transaction(
            c.table_name, table_key, ticket, mode,
            {":me": {"S": me}, ":token": {"S": f"{fair.CLIENT_LEASE_PREFIX}{until}"}, ":lease": {"N": str(lease_ms)},
             ":grace": {"N": "0"}},
            {k: v for k, v in {**self._values(me), ":ticket": {"N": str(ticket)}, ":prev": {"N": str(ticket - 1)}}.items()
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
            item = self._read(table_key)
            served, tickets = fair.counters(item)
            now = self._earliest()
            if self._granted(item, me, mode, ticket):
                lease = self._claim(key, table_key, me, mode, ticket, lease_ms)
                if lease is not None:
                    return lease, ticket
                continue
            if served >= ticket:  # passed over (my row's lease lapsed): queue again
                self._drop_row(table_key, ticket)
                return None, None
            free = (_writer_free if mode == READ else _all_free)(item, me=me, now=now)
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
                self._reap(table_key, me, expired[0], readers=_number(item, shared.READERS))
                continue
            if served < ticket - 1 and _writer_free(item, me=me, now=now):
                self.handoff(table_key, me=me, start=served, tickets=tickets, stop_at=me)
            elif self._holds_gone(table_key, item, me, now):
                continue  # a workflow hold gone (its branch cancelled, its execution ended): its
                # lease now ends at its stop grace, which the next look shows
            if self._park(table_key, me, mode, ticket, lease_ms, row_lease_s):
                return None, ticket
        return None, ticket

    @staticmethod
    def _granted(item: Mapping[str, Any], me: str, mode: str, ticket: int) -> bool:
        if mode == READ:
            return shared.reader_attribute(me) in item
        return item.get(OWNER, {}).get("S") == me and fair.counters(item)[0] == ticket

    def _holds_gone(self, table_key: str, item: Mapping[str, Any], me: str, now: int) -> bool:
        """The liveness check of the workflow holds I am blocked by (the state machines'
        fallback's: ``shared_protocol.workflow_holds``, in turn), through the client's
        :meth:`~locked_workflow.constructs_lib.client_liveness.HolderLiveness.check_holds` with
        :class:`ReadWriteHolds`. True: one now ends sooner - look again at once."""
        holds = [WorkflowHold(owner=owner, execution=owner_execution(owner) or "", reader=reader,
                              acquired_at=_number(hold, ACQUIRED_AT), expires_at=_number(hold, EXPIRES_AT),
                              grace_ms=_number(hold, GRACE))
                 for owner, reader, hold in shared.workflow_holds(item, me=me, now=now)]
        return self.client.check_holds(table_key, holds, ReadWriteHolds(self))

    def _claim(self, key: str, table_key: str, me: str, mode: str, ticket: int | None,
               lease_ms: int) -> Lease | None:
        """CLAIM_READ / CLAIM_WRITE: a grant handed to me (or my own entry from an attempt whose
        response was lost) becomes my own lease. None: not mine."""
        started, now, expires_at = self._own(lease_ms)
        values = {":me": {"S": me}, ":entry": self._entry(now, expires_at), ":expiresAt": {"N": str(expires_at)},
                  ":ticket": {"N": str(ticket or 0)}}
        try:
            if mode == READ:
                item = self._write(table_key, shared.CLAIM_READ, values, reader=me, return_new=True)
            else:
                item = self._write(table_key, shared.CLAIM_WRITE, values, return_new=True)
        except Refused:
            return None
        if ticket is not None:
            self._drop_row(table_key, ticket)
        return self._lease(key, table_key, me, mode, item, ticket=ticket if mode == READ else fair.counters(item)[0],
                           started=started, lease_ms=lease_ms)

    def _admit(self, key: str, table_key: str, me: str, mode: str, ticket: int, lease_ms: int) -> Lease | None:
        """GRANT_READ / GRANT_WRITE to myself, the head of a key free for me; a reader then
        admits the readers queued behind it. None: refused (the next look decides)."""
        started, now, expires_at = self._own(lease_ms)
        values = {**self._values(me), ":now": {"N": str(now)}, ":next": {"S": me},
                  ":expiresAt": {"N": str(expires_at)}, ":grace": {"N": "0"}, ":entry": self._entry(now, expires_at),
                  ":prev": {"N": str(ticket - 1)}, ":ticket": {"N": str(ticket)}}
        try:
            item = self._write(table_key, shared.GRANT_READ if mode == READ else shared.GRANT_WRITE, values,
                               reader=me if mode == READ else None, return_new=True)
        except Refused:
            return None
        self._drop_row(table_key, ticket)
        if mode == READ:
            self.handoff(table_key, me=me, start=ticket)
        return self._lease(key, table_key, me, mode, item, ticket=ticket, started=started, lease_ms=lease_ms)

    def _reap(self, table_key: str, me: str, reader: str, *, readers: int) -> bool:
        """REAP_READ (REAP_LAST: ``readers`` says it is the last) an expired entry; the last one
        out runs the handoff. Refused (False): the next look decides."""
        try:
            item = self._write(table_key, shared.leave_write(readers, reap=True), self._values(me), reader=reader,
                               return_new=True)
        except Refused:
            return False
        logger.info("lock %s: reaped the expired reader entry of %s", table_key, reader)
        self._after_last_reader(table_key, me, item)
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
        expired = shared.expired_readers(item, now=self._earliest())
        if expired:
            return self._reap(table_key, me, expired[0], readers=_number(item, shared.READERS))
        if shared.readers_of(item):
            return False
        try:
            self._write(table_key, shared.FREE_EMPTY, self._values(me))
        except Refused:
            return False
        logger.info("lock %s: freed a shared hold with no reader", table_key)
        return True

    def _after_last_reader(self, table_key: str, me: str, item: Mapping[str, Any]) -> None:
        """``readers`` reached 0 (``item``: ALL_NEW of the write, which ended the shared hold):
        hand off to whoever queues."""
        if _number(item, shared.READERS) != 0:
            return
        served, _ = fair.counters(item)
        self.handoff(table_key, me=me, start=served)

    def _leave(self, key: str, table_key: str, me: str, mode: str, ticket: int, lease_ms: int) -> Lease | None:
        """Give up my place (max wait spent): my row is marked left; granted meanwhile -> claim it;
        my ticket may have been the head of a free key -> run the handoff past it."""
        c = self.client
        args = fair.arguments(fair.row_key(table_key, ticket), shared.LEAVE, {":me": {"S": me}, ":one": {"N": "1"}})
        with contextlib.suppress(ClientError):
            retry_conflicts(lambda: c.dynamodb.update_item(TableName=c.table_name, **args), sleep=c.sleep)
        item = self._read(table_key)
        if self._granted(item, me, mode, ticket):
            lease = self._claim(key, table_key, me, mode, ticket, lease_ms)
            if lease is not None:
                return lease
        served, _ = fair.counters(item)
        if served >= ticket:  # passed already: no handoff will skip (and delete) my row
            self._drop_row(table_key, ticket)
        elif _writer_free(item, me=me, now=self._earliest()):
            self.handoff(table_key, me=me, start=served)
        return None

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
                self._after_last_reader(table_key, me, item)
            except ClientError as error:  # my hold is over: the release is done
                _handoff_stopped(table_key, error)
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
                return self._write(table_key, write, self._values(me), reader=me, return_new=True)
            except Refused as refused:
                retried = retried or refused.retried
                item = refused.item
            if shared.reader_attribute(me) not in item:
                if not retried:
                    raise LockLost(f"{ERROR_LOST}: the shared hold of {me!r} on lock {table_key!r} is gone "
                                   "(its lease ran out and it was reaped)")
                return item  # my earlier attempt removed it (its answer was lost): was I the last?
            write = shared.leave_write(_number(item, shared.READERS))
        # the count kept moving round after round (the state machine's cap, and its way out): my
        # entry ends now (RETIRE_READER; a client's entry has no stop grace) and the next
        # participant that meets it reaps it, as a stopped reader's - my hold is over either way
        logger.warning("lock %s: the reader count moved at each of %d leaves; the entry of %s is retired",
                       table_key, shared.MAX_LEAVE_ROUNDS, me)
        with contextlib.suppress(Refused):  # refused: it is gone already (reaped)
            return self._write(table_key, shared.RETIRE_READER, {":endedAt": {"N": str(self._latest())}},
                               reader=me, return_new=True)
        return item

    def refresh(self, held: Lease, expires_at: int) -> dict:
        """Renew a hold: a reader's entry (CLAIM_READ, its REFRESH), a writer's lease (the mutex's
        REFRESH). Returns the lock item after it; :class:`Refused` when the hold is gone."""
        me = held.owner
        if held.shared:
            return self._write(held.table_key, shared.CLAIM_READ,
                               {":entry": self._entry(held.acquired_at, expires_at)}, reader=me, return_new=True)
        return self._write(held.table_key, REFRESH, {":me": {"S": me}, ":expiresAt": {"N": str(expires_at)}},
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
                state = fair.row_state(row, now=self._earliest(), hole_ms=self._hole_ms)
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
                        self._write(table_key, shared.SKIP, {**self._values(me), ":prev": {"N": str(c_)},
                                                             ":ticket": {"N": str(c_ + 1)}})
                    except Refused:
                        break
                    c_ += 1
                    self._drop_row(table_key, c_)  # a waiter gone, or a hole: nobody else would delete it
                    continue
                if tickets is not None and c_ + 1 <= tickets and fair.READY not in (row or {}):
                    with contextlib.suppress(ClientError):  # refused: its waiter parked meanwhile
                        c.dynamodb.update_item(TableName=c.table_name, **fair.arguments(
                            fair.row_key(table_key, c_ + 1), shared.MARK, {":since": {"N": str(self._latest())}}))
                    break
                if holding:  # nobody parked: release, then read the row again (it may have parked meanwhile)
                    try:
                        self._write(table_key, shared.RELEASE_WRITE, {":me": {"S": me}, ":fence": {"N": str(fence)}})
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
            _handoff_stopped(table_key, error)
            return True

        if holding:
            try:
                self._write(table_key, shared.RELEASE_WRITE, {":me": {"S": me}, ":fence": {"N": str(fence)}})
            except Refused as refused:
                if not refused.retried:
                    return False
        return True

    def _grant(self, table_key: str, me: str, c_: int, row: Mapping[str, Any], kind: str) -> bool:
        """GRANT_READ / GRANT_WRITE to the waiter of row ``c_ + 1`` with a claim-window lease; a
        refusal whose write was applied after all (a lost response) counts as granted."""
        c = self.client
        nxt = row[OWNER]["S"]
        now = self._earliest()
        until = self._latest() + self._claim_window_ms
        grace = row.get(fair.GRACE_MS, {}).get("N", "0")
        values = {**self._values(me), ":now": {"N": str(now)}, ":next": {"S": nxt}, ":expiresAt": {"N": str(until)},
                  ":grace": {"N": grace}, ":prev": {"N": str(c_)}, ":ticket": {"N": str(c_ + 1)},
                  ":entry": shared.entry_value(expires_at=str(until), acquired_at=str(now), grace=grace)}
        try:
            self._write(table_key, shared.GRANT_READ if kind == READ else shared.GRANT_WRITE, values,
                        reader=nxt if kind == READ else None)
            return True
        except Refused as refused:
            item = refused.item if not refused.retried else self._read(table_key)
            return fair.counters(item)[0] == c_ + 1 and self._granted(item, nxt, kind, c_ + 1)

    def _wake(self, token: str) -> None:
        """Wake a parked workflow (its next state claims the grant). A failed wake-up is no
        error: the grant lapses after the claim window unless its waiter claims it."""
        try:
            self.client.stepfunctions.send_task_success(taskToken=token, output=json.dumps({"granted": True}))
        except ClientError as error:
            logger.info("wake-up not delivered: %s", error.response.get("Error", {}).get("Code"))


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
