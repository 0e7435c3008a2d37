"""How a :class:`~locked_workflow.constructs_lib.lock_client.LockClient` releases and renews a
lease (a base of it): the mutex's conditional release (the fair lock's handoff, the read/write
lock's leave or handoff), a retried release whose first attempt was applied, and the renewal
that only ever moves ``expiresAt`` on.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta
from typing import Any, Mapping

from botocore.exceptions import ClientError

from locked_workflow.constructs_lib.client_args import (
    DEFAULT_LEASE,
    checked_lease_ms as _lease_ms,
    checked_stored_key as _stored_key,
)
from locked_workflow.constructs_lib.client_lease import (
    Holding,
    Lease,
    LockLost,
    condition_failed as _condition_failed,
    lease_from_item as _lease,
    old_item as _old_item,
)
from locked_workflow.constructs_lib.shared_client import Refused
from locked_workflow.state_machines.errors import ERROR_LOST
from locked_workflow.state_machines.lock_item import FENCE, OWNER
from locked_workflow.state_machines.lock_writes import CLIENT_REFRESH, CLIENT_RELEASE, REFRESH

logger = logging.getLogger(__name__)


class Releases:
    """:meth:`release` and :meth:`refresh` of a :class:`LockClient` (its session and queue come
    from its other bases)."""

    def release(self, lease: Lease) -> None:
        """Free the lock of ``lease``; the item and its fence stay. Stops the lease's heartbeat
        first (if any).

        Succeeds when ``lease.owner`` holds the lock, and also when the lock is free and its
        fence is still ``lease.fence`` (a repeated release).

        :raises LockLost: the lock was taken over (or is held by someone else, or never
            existed). Another holder's lock is never removed.
        :raises TypeError: ``lease`` is not a :class:`Lease`, before any DynamoDB call.
        """
        table_key = _stored_key(lease)
        holding = lease.holding
        if holding is not None:
            holding.stop_heartbeat()
        if self._rw is not None:
            try:
                self._rw.release(lease)
            except LockLost as lost:
                if holding is not None:
                    holding.lose(str(lost))
                raise
            if holding is not None:
                with holding.mutex:
                    holding.released = True
            return
        try:
            if self.fair and lease.ticket is not None:
                self.handoff(table_key, me=lease.owner, served=lease.ticket, fence=lease.fence)
            else:
                self._update(table_key, CLIENT_RELEASE, {":me": {"S": lease.owner}, ":fence": {"N": str(lease.fence)}})
        except ClientError as error:
            if not _condition_failed(error):
                raise
            retried = error.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) > 0
            if holding is not None:
                running = holding.deadline > self._monotonic()
            else:  # a lease built by hand (an operator's release): only its stamp is known
                running = self.now_ms() < lease.expires_at
            if not (retried and running):
                message = self._lost_message(lease, table_key, _old_item(error))
                if holding is not None:
                    holding.lose(message)
                raise LockLost(message) from None
            logger.info(
                "release of %s: a retried attempt found it released already (an earlier "
                "attempt's response was lost)", table_key,
            )
        if holding is not None:
            with holding.mutex:
                holding.released = True

    def refresh(self, held: Lease, /, *, lease: timedelta | float = DEFAULT_LEASE) -> Lease:
        """Renew the lease of a lock still held by ``held.owner``: it now ends ``lease``
        (timedelta or seconds, from 1 ms to 365 days; default: 60 s, as :meth:`acquire`) from
        now - which may also shorten it, for its holder and for client waiters. ``expiresAt``
        only ever moves on, by 1 ms at least (that is how a client waiter watching the lock
        sees that its holder lives, and it never shows a value it showed before): a shorter
        lease ends no sooner for the workflows than the last one.

        Allowed also after the lease ended, as long as nobody took the lock over (the owner
        is still ``held.owner``): that proves nobody held it meanwhile. Returns the new
        :class:`Lease` (its fence is the lock's current one); ``held.check()`` counts from this
        renewal too.

        :raises LockLost: the lock is no longer held by ``held.owner`` (``held.check()`` raises
            it from now on).
        :raises TypeError: an argument of the wrong type, before any DynamoDB call.
        :raises ValueError: an argument of a bad value, before any DynamoDB call.
        """
        for_ms = _lease_ms(lease)
        table_key = _stored_key(held)
        holding = held.holding
        started = self._monotonic()
        written = holding.expires_at if holding is not None else held.expires_at
        expires_at = max(self.stamp(started)[1] + for_ms, written + 1)  # never an end written before
        try:
            if self._rw is not None:
                item = self._rw.refresh(held, expires_at)
            else:
                values = {":me": {"S": held.owner}, ":expiresAt": {"N": str(expires_at)}}
                if not self.fair:
                    values[":clientLease"] = {"M": {"owner": {"S": held.owner}, "ms": {"N": str(for_ms)}}}
                item = self._update(table_key, REFRESH if self.fair else CLIENT_REFRESH, values,
                                    return_new=True)["Attributes"]
        except (ClientError, Refused) as error:
            if isinstance(error, ClientError) and not _condition_failed(error):
                raise
            message = (self._lost_message(held, table_key, _old_item(error)) if isinstance(error, ClientError) else
                       f"{ERROR_LOST}: the {'shared' if held.shared else 'exclusive'} hold of {held.owner!r} "
                       f"on lock {table_key!r} is gone (its lease ran out and it was reaped or taken over)")
            if holding is not None:
                holding.lose(message)
            raise LockLost(message) from None
        if holding is None:
            holding = Holding(self._monotonic, started, for_ms, expires_at)
        else:
            holding.renewed(started, for_ms, expires_at)
        if self._rw is not None:  # (a reader's item has no owner of its own: the lease is what it held)
            return replace(held, fence=int(item.get(FENCE, {}).get("N", held.fence)),
                           expires_at=expires_at).with_holding(holding)
        return _lease(held.key, item, holding=holding)


    @staticmethod
    def _lost_message(lease: Lease, table_key: str, old: Mapping[str, Any]) -> str:
        if not old:
            state = "no such lock"
        elif OWNER in old:
            state = f"now held by {old[OWNER]['S']!r} with fence {old.get(FENCE, {}).get('N')}"
        else:
            state = f"free, fence now {old.get(FENCE, {}).get('N')}"
        return (
            f"{ERROR_LOST}: lock {table_key!r} is not held by {lease.owner!r} "
            f"(fence {lease.fence}): {state}"
        )
