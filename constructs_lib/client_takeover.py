"""A plain mutex's attempt of a :class:`~locked_workflow.constructs_lib.lock_client.LockClient`
(see the lock client's module notes on time): acquire a free lock (``CLIENT_ACQUIRE``), or take
over one this client has watched unchanged for its holder's lease (``CLIENT_TAKEOVER``), the
watch kept from each refusal; and the stamp check of a new lease against AWS's clock.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta
from typing import Any, Mapping

from botocore.exceptions import ClientError

from locked_workflow.constructs_lib.client_clocks import WATCHED_LOCKS as _WATCHED_LOCKS
from locked_workflow.constructs_lib.client_clocks import Watch as _Watch
from locked_workflow.constructs_lib.client_clocks import takeover_note as _takeover_note
from locked_workflow.constructs_lib.client_clocks import takeover_window_ms as _takeover_window_ms
from locked_workflow.constructs_lib.client_lease import Holding, Lease, LockHeld, LockLost
from locked_workflow.constructs_lib.client_lease import condition_failed as _condition_failed
from locked_workflow.constructs_lib.client_lease import lease_from_item as _lease
from locked_workflow.constructs_lib.client_lease import old_item as _old_item
from locked_workflow.state_machines.lock_item import EXPIRES_AT, FENCE, OWNER
from locked_workflow.state_machines.lock_writes import CLIENT_ACQUIRE, CLIENT_TAKEOVER

logger = logging.getLogger(__name__)


class Takeovers:
    """A plain mutex's attempts of a :class:`LockClient` (a base of it, beside its
    :class:`~locked_workflow.constructs_lib.client_session.ClientSession`, whose clocks and
    ``_update`` they use): ``fair``, ``_watches`` (the held locks watched for a takeover, per
    stored key) and ``_watches_mutex`` are set by the client."""

    fair: bool
    _watches: dict[str, _Watch]
    _watches_mutex: Any

    def _try_acquire(self, key: str, table_key: str, me: str, lease_ms: int) -> Lease:
        """One attempt: CLIENT_ACQUIRE, or CLIENT_TAKEOVER of a lock watched unchanged for its
        lease (a fair lock: FAST_ACQUIRE)."""
        if self.fair:
            return self._try_fast_acquire(key, table_key, me, lease_ms)
        watch = self._watched(table_key)
        started = self._monotonic()
        now, latest = self.stamp(started)
        due = watch is not None and self._takeover_in(watch, started) <= 0
        values = {
            ":me": {"S": me},
            ":now": {"N": str(now)},
            ":expiresAt": {"N": str(latest + lease_ms)},
            ":grace": {"N": "0"},  # no janitor retires a client's lock: its lease does
            ":one": {"N": "1"},
            ":clientLease": {"M": {"owner": {"S": me}, "ms": {"N": str(lease_ms)}}},
        }
        if due:
            assert watch is not None
            seen_owner, seen_fence, seen_expires_at = watch.version
            values.update({":seenOwner": {"S": seen_owner}, ":seenFence": {"N": seen_fence},
                           ":seenExpiresAt": {"N": seen_expires_at}})
            logger.info("lock %s held by %s, unchanged for %.3f s (its lease: %g s; service-stamped: %s): "
                        "taking it over", table_key, seen_owner, started - watch.since, watch.window_s,
                        watch.service_stamped)
        try:
            response = self._update(table_key, CLIENT_TAKEOVER if due else CLIENT_ACQUIRE, values,
                                    return_new=True)
        except ClientError as error:
            if not _condition_failed(error):
                raise
            raise self._held(key, table_key, _old_item(error)) from None
        with self._watches_mutex:
            self._watches.pop(table_key, None)
        return _lease(key, response["Attributes"], holding=Holding(self._monotonic, started, lease_ms, latest + lease_ms))

    def _stamped_right(self, lease: Lease) -> Lease:
        """``lease``, stamped again at once (a refresh) if it was stamped before this client knew
        AWS's clock and its own clock turned out off: else the workflows would judge its lease
        by that clock. Taken over meanwhile (by a workflow that did): a refusal."""
        holding = lease.holding
        assert holding is not None
        bounds = self._aws_clock.bounds(holding.started)
        if bounds is None:
            return lease
        if bounds[0] - 1 <= lease.acquired_at <= bounds[1] + 1:
            with holding.mutex:  # AWS's clock may have been ahead of the stamp by this much
                ahead_ms = max(0.0, bounds[1] - lease.acquired_at)
                holding.deadline = min(holding.deadline, holding.started + (holding.lease_ms - ahead_ms) / 1000)
            return lease
        logger.warning("this client's clock is %+.3f s off AWS's (DynamoDB's Date header): lock %s is "
                       "stamped again on AWS's clock", (lease.acquired_at - (bounds[0] + bounds[1]) / 2) / 1000,
                       lease.table_key)
        try:
            return replace(self.refresh(lease, lease=timedelta(milliseconds=holding.lease_ms)), key=lease.key)
        except LockLost as lost:
            held = LockHeld(f"lock {lease.table_key!r} was taken over before it could be stamped on AWS's "
                            f"clock: {lost}", key=lease.key)
            raise held from None

    def watch_written(self, table_key: str, item: Mapping[str, Any], *, window_s: float, since: float) -> None:
        """Watch ``item``, a version of a held lock this client wrote itself (its lease's end moved
        by a liveness check: ABANDONED, RETIRE_BY), for ``window_s`` from monotonic ``since``
        (taken before that write): the end was stamped at most that long after ``since`` on this
        client's clock, so the takeover waits no longer than the stop grace - also where no
        ``Date`` header tells AWS's clock."""
        version = (item[OWNER]["S"], item[FENCE]["N"], item[EXPIRES_AT]["N"])
        with self._watches_mutex:
            self._watches.pop(table_key, None)
            self._watches[table_key] = _Watch(version, window_s, since, service_stamped=True)

    def _watched(self, table_key: str) -> _Watch | None:
        with self._watches_mutex:
            return self._watches.get(table_key)

    def _takeover_in(self, watch: _Watch, now: float) -> float:
        """Seconds until this client may take the watched lock over (<= 0: now), if it stays
        unchanged: once watched for its lease on this client's monotonic clock - or, for a lease
        the service clock stamped (a workflow's), once AWS's clock is surely past its end, as
        the workflows judge it (``expiresAt < $millis()``)."""
        left = watch.since + watch.window_s - now
        bounds = self._aws_clock.bounds(now) if watch.service_stamped else None
        if bounds is not None:
            left = min(left, (int(watch.version[2]) + 1 - bounds[0]) / 1000)
        return left

    def _held(self, key: str, table_key: str, old: Mapping[str, Any]) -> LockHeld:
        """The refusal of an acquire by the lock item ``old``: watch it (a held lock whose
        version is new starts its takeover window now, after the response that showed it)."""
        holder = old.get(OWNER, {}).get("S")
        expires_at = int(old[EXPIRES_AT]["N"]) if "N" in old.get(EXPIRES_AT, {}) else None
        takeover_in = None
        if holder is not None and expires_at is not None and "N" in old.get(FENCE, {}):
            version = (holder, old[FENCE]["N"], old[EXPIRES_AT]["N"])
            now = self._monotonic()
            with self._watches_mutex:
                watch = self._watches.get(table_key)
                if watch is None or watch.version != version:
                    self._watches.pop(table_key, None)
                    window_ms, client_stamped = _takeover_window_ms(old)
                    watch = _Watch(version, window_ms / 1000, now, service_stamped=not client_stamped)
                    self._watches[table_key] = watch
                    while len(self._watches) > _WATCHED_LOCKS:
                        del self._watches[next(iter(self._watches))]
            takeover_in = max(0.0, self._takeover_in(watch, now))
        held = LockHeld(
            f"lock {table_key!r} is held by {holder!r}{_takeover_note(takeover_in)}",
            key=key, holder=holder, expires_at=expires_at, takeover_in=takeover_in,
        )
        held.item = old
        return held
