"""The rate limit's path of a :class:`~locked_workflow.constructs_lib.lock_client.LockClient`
(:meth:`RateAdmissions.admit`): a Lambda calling a partner API spends the same permits as the
workflows' ``Lock.rate`` on the same key, with the same write
(:data:`~locked_workflow.state_machines.rate_protocol.ADMIT`).

A client cannot read the Step Functions service clock: it reserves its entry time (the
protocol's lead after it, ``rate_protocol.reserved_ms``: its ADMIT's round trip comes out of
the lead, not the entry margin) from the *earliest* time AWS's clock can show (DynamoDB's ``Date`` headers bound AWS's clock, about a
second wide: ``ClientSession.earliest_ms``) and enters once that earliest time has reached its
reservation, so its true entry is never before it, whatever its own clock's skew (the proof:
``rate_protocol.client_values``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Mapping

from botocore.exceptions import ClientError

from locked_workflow.constructs_lib.client_args import checked_count, checked_seconds
from locked_workflow.constructs_lib.client_lease import InvalidLockKey, LockTimeout
from locked_workflow.constructs_lib.client_lease import condition_failed, old_item
from locked_workflow.state_machines import rate_protocol as rate
from locked_workflow.state_machines.errors import ERROR_INVALID_KEY
from locked_workflow.state_machines.lock_item import key_problem, lock_item_key, namespaced


@dataclass(frozen=True)
class Admission:
    """An entry a rate limit admitted: ``number`` (the key's admission count after it, as the
    workflows' ``$lock.fence``) and ``admitted_at`` (epoch ms stamped: at or after the true time)."""

    key: str
    number: int
    admitted_at: int


class RateAdmissions:
    """The ``admit`` method of a ``LockClient`` (a mixin over its ``ClientSession``)."""

    namespace: str
    table_name: str
    dynamodb: Any

    def admit(self, key: str, *, limit: int, period: timedelta | float = 60, wait: timedelta | float = 0) -> Admission:
        """Spend one permit of the rate limit on ``key`` - at most ``limit`` entries per
        ``period`` (the workflows' ``Lock.rate(key, limit=..., period=...)``, same namespace):
        return when admitted, waiting up to ``wait`` for the next permit (exactly until it
        frees, by DynamoDB's clock bounds: no polling). A free permit is reserved
        ``rate_protocol.ADMIT_LEAD_MS`` ahead (it returns that much later: its ADMIT's round trip
        comes out of that lead). It returns at most ``rate_protocol.ENTRY_MARGIN_MS`` after the
        time it reserved (by the latest time AWS's clock can show); a later wake-up gives that
        permit up unused and reserves again.

        :param limit: entries per window, 1 to 1000: the workflows' ``limit``.
        :param period: the window, whole seconds (a timedelta or a number). Default: 60 s.
        :param wait: how long to wait for a permit (plus, at most, the width of the clock
            bounds, about a second, when the latest reservation is that far ahead). Default: 0.
        :raises LockTimeout: the next permit comes after ``wait`` (nothing was spent), or a
            late wake-up gave its permit up after ``wait`` was over.
        :raises InvalidLockKey: a bad key (before any DynamoDB call).
        """
        if checked_count(limit, "limit", least=1) > rate.MAX_LIMIT:
            raise ValueError(f"`limit` must be an integer from 1 to {rate.MAX_LIMIT}, got: {limit!r}")
        period_s = checked_seconds(period, "period")
        if period_s != int(period_s) or not rate.MIN_PERIOD_S <= period_s <= rate.MAX_PERIOD_S:
            raise ValueError(f"`period` must be whole seconds from 1 s to 1 day, got: {period!r}")
        wait_s = checked_seconds(wait, "wait")
        if wait_s < 0:
            raise ValueError(f"`wait` must not be negative, got: {wait!r}")
        problem = key_problem(key, self.namespace, rate.reserve_bytes())
        if problem:
            raise InvalidLockKey(f"{ERROR_INVALID_KEY}: the lock key {problem}")
        period_ms = int(period_s) * 1000
        item_key = rate.rate_key(namespaced(self.namespace, key))
        deadline = self.monotonic() + wait_s
        item = self._read_rate_item(item_key)
        while True:
            n, permit_at, last = rate.permit_at_ms(item, limit=limit, period_ms=period_ms)
            early = self.earliest_ms()
            reserved = rate.reserved_ms(now_ms=early, permit_at=permit_at, last=last)
            # the wait for the permit (the lead is not one: it covers the ADMIT's round trip)
            delay = (rate.free_ms(now_ms=early, permit_at=permit_at, last=last) - early) / 1000
            # (a wait within the bounds' width is the clock's uncertainty, not a wait for a permit:
            # the latest reservation, another participant's, may be that far ahead of `early`)
            width = max(0, self.latest_ms() - early) / 1000
            if self.monotonic() + delay > deadline + width:
                raise LockTimeout(
                    f"the rate limit of {key!r} ({limit} per {period_s:g} s) has its next permit in "
                    f"{delay:.1f} s, after `wait` ({wait_s:g} s)", key=key)
            try:
                self._admit(item_key, n, limit, rate.client_values(n=n, reserved_ms=reserved, period_ms=period_ms))
            except ClientError as error:
                if not condition_failed(error):
                    raise
                item = old_item(error)  # another entry was admitted since the read
                continue
            # enter once the earliest time AWS's clock can show has reached the reservation
            while (left := reserved - self.earliest_ms()) > 0:
                self.sleep(left / 1000)
            # ... and while the latest one is still on time (a late wake-up: give the permit up
            # unused and reserve again, as a workflow's run does after its Wait)
            if rate.on_time(self.latest_ms(), reserved):
                return Admission(key=key, number=n + 1, admitted_at=reserved)
            if self.monotonic() > deadline + width:
                raise LockTimeout(
                    f"the rate limit of {key!r} ({limit} per {period_s:g} s): the permit reserved came "
                    f"later than its margin ({rate.ENTRY_MARGIN_MS} ms) was over, and `wait` ({wait_s:g} s) "
                    "is over too (the permit was given up unused)", key=key)
            item = self._read_rate_item(item_key)

    def rate_item(self, key: str) -> Mapping[str, Any]:
        """The rate item of ``key`` as it is (consistent read; ``{}``: never admitted)."""
        return self._read_rate_item(rate.rate_key(namespaced(self.namespace, key)))

    def _read_rate_item(self, item_key: str) -> Mapping[str, Any]:
        before = self.monotonic()
        response = self.dynamodb.get_item(TableName=self.table_name, Key=lock_item_key(item_key), ConsistentRead=True)
        self.aws_clock.sample(before, self.monotonic(), response)
        return response.get("Item", {})

    def _admit(self, item_key: str, n: int, limit: int, values: Mapping[str, Any]) -> None:
        before = self.monotonic()
        try:
            response = self.dynamodb.update_item(
                TableName=self.table_name, Key=lock_item_key(item_key),
                UpdateExpression=rate.ADMIT.update, ConditionExpression=rate.ADMIT.condition,
                ExpressionAttributeNames=rate.attribute_names(rate.permit_attribute(n, limit)),
                ExpressionAttributeValues=dict(values), ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as error:
            self.aws_clock.sample(before, self.monotonic(), error.response)
            raise
        self.aws_clock.sample(before, self.monotonic(), response)
