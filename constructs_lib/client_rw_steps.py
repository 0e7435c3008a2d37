"""The basics of a :class:`~locked_workflow.constructs_lib.lock_client.LockClient`'s part in the
read/write lock (:mod:`shared_client`): one conditional write of the protocol and one read of
the lock item, each sampling AWS's clock; the values of the free conditions; the clocks a lease
is judged and stamped by; a lease from what a write returned; and the free conditions read in
Python.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Mapping

from botocore.exceptions import ClientError

from locked_workflow.constructs_lib.client_lease import Holding, Lease, retry_conflicts
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import shared_protocol as shared
from locked_workflow.state_machines.errors import CONDITIONAL_CHECK_FAILED_CODE
from locked_workflow.state_machines.lock_protocol import (
    ACQUIRED_AT,
    EXPIRES_AT,
    FENCE,
    OWNER,
    LockWrite,
    lock_item_key,
)

logger = logging.getLogger(__name__)

READ, WRITE = shared.READ, shared.WRITE


class Refused(Exception):
    """A conditional write was refused; ``item``: the lock item as it was (maybe empty)."""

    def __init__(self, item: Mapping[str, Any], retried: bool) -> None:
        super().__init__("refused")
        self.item = item
        self.retried = retried


def number(item: Mapping[str, Any], name: str, default: int = 0) -> int:
    return int(item.get(name, {}).get("N", default))


def writer_free(item: Mapping[str, Any], *, me: str, now: int) -> bool:
    """The free condition of a reader (``shared_hold.WRITER_FREE``), read in Python."""
    owner = item.get(OWNER, {}).get("S")
    return (owner is None or owner in (shared.SHARED, me)
            or (EXPIRES_AT in item and number(item, EXPIRES_AT) < now))


def all_free(item: Mapping[str, Any], *, me: str, now: int) -> bool:
    """The free condition of a writer (``shared_hold.ALL_FREE``), read in Python."""
    owner = item.get(OWNER, {}).get("S")
    if owner == shared.SHARED:
        return number(item, shared.READERS) == 0
    return owner is None or owner == me or (EXPIRES_AT in item and number(item, EXPIRES_AT) < now)


def handoff_stopped(table_key: str, error: ClientError) -> None:
    """A release whose hold is over (left, handed on or freed) met an error in the rest of its
    handoff: the release is done - raised, the caller would retry a release whose hold has gone
    (``LockLost``) - and each waiter's own look at its park timeout admits it (the workflows'
    handoff ends the same way: its later steps Catch every error)."""
    logger.warning("lock %s: released; the handoff after it stopped at %s: the next waiters are admitted "
                   "by their own look", table_key, error.response.get("Error", {}).get("Code"))


class ReadWriteSteps:
    """The read/write protocol's writes and reads for one :class:`LockClient` (``kind=LockClient.READ_WRITE``):
    the base of :class:`~locked_workflow.constructs_lib.shared_client.ReadWriteParticipant`."""

    def __init__(self, client: Any) -> None:
        """``client``: the LockClient this participant acts for (its DynamoDB and Step Functions
        clients, clocks and sleep; not imported here: it imports this module)."""
        self.client = client

    # -- one write, one read --------------------------------------------------------------

    def write(self, key: str, write: LockWrite, values: Mapping[str, Any], *, reader: str | None = None,
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

    def read_item(self, key: str) -> dict:
        """The lock item (a strongly consistent GetItem); its response's ``Date`` bounds AWS's clock."""
        c = self.client
        before = c.monotonic()
        response = c.dynamodb.get_item(TableName=c.table_name, Key=lock_item_key(key), ConsistentRead=True)
        c.aws_clock.sample(before, c.monotonic(), response)
        return response.get("Item", {})

    def retire(self, key: str, write: LockWrite, values: Mapping[str, Any], *, reader: str | None) -> None:
        """A liveness check's retire of a workflow hold (:class:`ReadWriteHolds`): ``write``
        (RETIRE_GONE_READER on ``reader``'s entry, or RETIRE_GONE_WRITER); refused -> :class:`Refused`."""
        self.write(key, write, values, reader=reader)

    def drop_row(self, key: str, ticket: int) -> None:
        """The row of a served ticket - mine, or one a handoff skipped (best effort: a served
        ticket's row is never read, and no park can write it again: its ticket was passed)."""
        c = self.client
        with contextlib.suppress(ClientError):
            retry_conflicts(lambda: c.dynamodb.delete_item(TableName=c.table_name,
                                                           Key=lock_item_key(fair.row_key(key, ticket))),
                            sleep=c.sleep)

    def values(self, me: str) -> dict:
        """Values of the free conditions: ``:me``, ``:stale`` (nobody is known dead), ``:now``, ``:shared``,
        and the counters' ``:one``/``:zero``/``:minusOne``."""
        return {":me": {"S": me}, ":stale": {"S": me}, ":now": {"N": str(self.earliest())},
                ":shared": {"S": shared.SHARED}, ":one": {"N": "1"}, ":zero": {"N": "0"}, ":minusOne": {"N": "-1"},
                **shared.MAX_READERS_VALUES}

    def earliest(self, at: float | None = None) -> int:
        """What this client judges leases by: :meth:`LockClient.earliest_ms`."""
        return self.client.earliest_ms(at)

    def latest(self) -> int:
        """What a lease or a mark is stamped from: :meth:`LockClient.latest_ms`."""
        return self.client.latest_ms()

    def own_lease(self, lease_ms: int) -> tuple[float, int, int]:
        """(monotonic start, acquiredAt - also the ``:now`` its write judges by, expiresAt) of a
        lease of ``lease_ms`` taken now."""
        c = self.client
        started = c.monotonic()
        return started, self.earliest(started), c.stamp(started)[1] + lease_ms

    @property
    def claim_window_ms(self) -> int:
        """How long a handoff's grant lasts unconfirmed (the workflows': at least 10 s)."""
        return int(max(self.client.claim_window, 10) * 1000)

    @property
    def hole_ms(self) -> int:
        return int(self.client.claim_window * 1000)

    # -- leases ----------------------------------------------------------------------------

    def lease_of(self, key: str, table_key: str, me: str, mode: str, item: Mapping[str, Any], *, ticket: int | None,
                 started: float, lease_ms: int) -> Lease:
        if mode == READ:
            entry = item[shared.reader_attribute(me)]["M"]
            acquired_at, expires_at = int(entry[ACQUIRED_AT]["N"]), int(entry[EXPIRES_AT]["N"])
        else:
            acquired_at, expires_at = number(item, ACQUIRED_AT), number(item, EXPIRES_AT)
        holding = Holding(self.client.monotonic, started, lease_ms, expires_at)
        return Lease(key=key, table_key=table_key, owner=me, fence=number(item, FENCE), acquired_at=acquired_at,
                     expires_at=expires_at, ticket=ticket, shared=mode == READ).with_holding(holding)

    def entry(self, acquired_at: int, expires_at: int) -> dict:
        return shared.entry_value(expires_at=str(expires_at), acquired_at=str(acquired_at), grace="0")

    @staticmethod
    def granted(item: Mapping[str, Any], me: str, mode: str, ticket: int) -> bool:
        if mode == READ:
            return shared.reader_attribute(me) in item
        return item.get(OWNER, {}).get("S") == me and fair.counters(item)[0] == ticket
