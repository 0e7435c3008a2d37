"""How a :class:`~locked_workflow.constructs_lib.lock_client.LockClient` acquires (a base of it):
the arguments checked, then the attempts of its kind - a plain mutex's (:mod:`client_takeover`),
the fair lock's fast path, ticket and polls as the head (:mod:`client_fair`), or the read/write
lock's participant (:mod:`shared_client`) - with backoff and jitter until the wait runs out.
"""

from __future__ import annotations

import logging
import random
import uuid
from contextlib import suppress
from dataclasses import replace
from datetime import timedelta
from typing import Any

from locked_workflow.constructs_lib.client_args import (
    DEFAULT_LEASE,
    AcquireOptions as _Options,
    checked_owner as _owner_checked,
)
from locked_workflow.constructs_lib.client_clocks import takeover_note as _takeover_note
from locked_workflow.constructs_lib.client_lease import Lease, LockHeld, LockSuperseded, LockTimeout
from locked_workflow.constructs_lib.shared_client import READ, WRITE, ReadWriteParticipant
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines.errors import ERROR_TIMEOUT
from locked_workflow.state_machines.lock_item import OWNER_SEPARATOR

logger = logging.getLogger(__name__)


class Acquisitions:
    """:meth:`acquire` of a :class:`LockClient` (its session, attempts and queue come from its
    other bases)."""

    def acquire(
        self,
        key: str,
        *,
        owner: str | None = None,
        lease: timedelta | float = DEFAULT_LEASE,
        wait: timedelta | float = 0,
        poll_interval: timedelta | float = 0.2,
        max_poll_interval: timedelta | float = 2.0,
        backoff_rate: float = 1.5,
        shared: bool = False,
    ) -> Lease:
        """Take the lock on ``key``; return the :class:`Lease` (with its fence).

        Succeeds when the lock is free or already held by ``owner``, or - a takeover - when
        this client has watched it held, unchanged, for that holder's lease on its own monotonic
        clock (see the module notes on clocks). While another owner holds it, retries for up to
        ``wait``: the n-th wait is ``min(max_poll_interval, poll_interval * backoff_rate**(n-1))``
        seconds with equal jitter, shortened to the moment a takeover becomes possible, never
        past the deadline.

        :param owner: holder id of this acquisition; acquiring again with the same owner is
            the same acquisition. A non-empty string without ``#``. Default: a new one,
            ``<client owner>#<uuid4>``.
        :param lease: how long the lock is ours without a renewal (a timedelta or seconds, from
            1 ms to :data:`MAX_LEASE`, 365 days). Default: 60 s.
        :param wait: how long to wait while the lock is held (a timedelta or seconds; ``math.inf``:
            as long as it takes). Default: 0 (try once).
        :param poll_interval: the first wait between attempts (s, more than 0, at most
            :data:`MAX_POLL_INTERVAL_S`). Default: 0.2.
        :param max_poll_interval: the longest wait between attempts (s, from ``poll_interval`` to
            :data:`MAX_POLL_INTERVAL_S`). Default: 2.
        :param backoff_rate: growth of the wait between attempts (at least 1). Default: 1.5.
        :param shared: a read/write client (``kind=LockClient.READ_WRITE``) only: enter as a reader, beside
            other readers (``lease.fence`` is the last writer's). Default: ``False`` (the writer).
        :raises InvalidLockKey: before any DynamoDB call.
        :raises TypeError: an argument of the wrong type, before any DynamoDB call.
        :raises ValueError: an argument of a bad value, before any DynamoDB call.
        :raises LockHeld: held by another owner and ``wait`` is 0.
        :raises LockTimeout: still held when ``wait`` ran out.
        """
        table_key = self.table_key(key)
        me = self._owner(owner)
        options = _Options.of(lease, wait, poll_interval, max_poll_interval, backoff_rate)
        return self._acquire(key, table_key, me, options, shared=self._shared_checked(shared))

    def _shared_checked(self, shared: Any) -> bool:
        if not isinstance(shared, bool):
            raise TypeError(f"`shared` must be True or False, got: {shared!r}")
        if shared and not self.read_write:
            raise ValueError("`shared` must be False on a client without `kind=LockClient.READ_WRITE` (only a read/write "
                             "lock has shared holders), got: True")
        return shared

    def _acquire(self, key: str, table_key: str, me: str, options: _Options, *, shared: bool = False) -> Lease:
        if self._rw is not None:
            return self._rw.acquire(key, table_key, me, options, mode=READ if shared else WRITE)
        lease_ms, wait_s = options.lease_ms, options.wait_s
        deadline = self._monotonic() + wait_s  # math.inf: no deadline
        nominal = options.poll_interval
        queued: int | None = None  # my ticket, once queued
        due_again = 2  # attempts at once when a refusal showed a takeover is due (wait or not)
        while True:
            try:
                if queued is not None:
                    return self._stamped_right(self._try_as_head(key, table_key, me, lease_ms, queued))
                return self._stamped_right(self._try_acquire(key, table_key, me, lease_ms))
            except LockHeld as held:
                if self.fair and wait_s and queued is None:
                    queued = self._enqueue(table_key, me, lease_ms, lease_for_s=options.max_poll_interval)
                    continue  # refused (the lock is free with nobody queued): the fast path again; or the head
                if held.takeover_in == 0 and due_again:  # e.g. a dead workflow's lease is over by AWS's
                    due_again -= 1  # clock, which this very refusal's response told
                    continue
                if not self.fair and ReadWriteParticipant(self).sweep_shared_hold(
                        table_key, me, getattr(held, "item", None) or {}):
                    continue  # a read/write lock's readers that are gone: their shared hold freed
                if wait_s and self.holder_gone(table_key, getattr(held, "item", None) or {}):
                    continue  # a workflow holder gone (its branch cancelled, its execution ended): its
                    # lease now ends at its stop grace, which the next refusal shows
                remaining = deadline - self._monotonic()
                if wait_s == 0:
                    raise
                if remaining <= 0:
                    if queued is not None:
                        lease = self.leave_queue(fair.row_key(table_key, queued), me)
                        if lease is not None:  # handed to me meanwhile: mine after all, for a whole lease
                            with suppress(LockHeld):
                                return self._whole_lease(replace(lease, key=key), lease_ms)
                    raise LockTimeout(
                        f"{ERROR_TIMEOUT}: lock {table_key!r} still held by {held.holder!r} "
                        f"after waiting {wait_s:g} s{_takeover_note(held.takeover_in)}",
                        key=key, holder=held.holder, expires_at=held.expires_at, takeover_in=held.takeover_in,
                    ) from None
                delay = min(random.uniform(nominal / 2, nominal), remaining)
                if held.takeover_in is not None and held.takeover_in < delay:
                    delay = held.takeover_in + 0.001  # a takeover is due: be there
                nominal = min(options.max_poll_interval, nominal * options.backoff_rate)
                if queued is not None:
                    try:
                        queued = self._poll(table_key, me, lease_ms, queued, held.item, lease_for_s=delay)
                    except LockSuperseded as superseded:  # (a coalescing key) the caller's key, not the stored one
                        superseded.key = key
                        raise
                logger.debug("lock %s held by %s; retrying in %.3f s", table_key, held.holder, delay)
                self._sleep(delay)


    def _owner(self, owner: str | None) -> str:
        if owner is None:
            return f"{self.owner}{OWNER_SEPARATOR}{uuid.uuid4()}"
        return _owner_checked(owner)
