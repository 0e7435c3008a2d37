"""A :class:`~locked_workflow.constructs_lib.lock_client.LockClient`'s session (a base of it): its
AWS clients, its clocks - what it stamps and judges leases by (see the lock client's module notes
on time) - and one conditional write of the protocol (``_update``), which samples AWS's clock from
each response. The participants of each lock kind (the client itself, :mod:`shared_client`) read
the clocks through the public members below.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from botocore.exceptions import ClientError

from locked_workflow.constructs_lib.client_clocks import AwsClock
from locked_workflow.constructs_lib.client_lease import condition_failed as _condition_failed
from locked_workflow.constructs_lib.client_lease import retry_conflicts
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines.lock_item import lock_item_key
from locked_workflow.state_machines.lock_writes import LockWrite


class ClientSession:
    """The AWS clients and clocks of a :class:`LockClient`, set by its constructor: its table,
    boto3 clients (``_dynamodb``, ``_stepfunctions``: created on first use when None), its clock
    (``_clock``, epoch ms), monotonic clock (``_monotonic``), sleep (``_sleep``) and AWS's clock
    (``_aws_clock``)."""

    table_name: str
    _dynamodb: Any
    _stepfunctions: Any
    _clock: Callable[[], float]
    _monotonic: Callable[[], float]
    _sleep: Callable[[float], None]
    _aws_clock: AwsClock

    @property
    def dynamodb(self) -> Any:
        if self._dynamodb is None:
            import boto3

            self._dynamodb = boto3.client("dynamodb")
        return self._dynamodb

    @property
    def stepfunctions(self) -> Any:
        if self._stepfunctions is None:
            import boto3

            self._stepfunctions = boto3.client("stepfunctions")
        return self._stepfunctions

    @property
    def monotonic(self) -> Callable[[], float]:
        """The monotonic clock (seconds) this client judges its own leases and waits by."""
        return self._monotonic

    @property
    def sleep(self) -> Callable[[float], None]:
        """How this client waits between attempts."""
        return self._sleep

    @property
    def aws_clock(self) -> AwsClock:
        """AWS's clock as DynamoDB's ``Date`` headers bound it (sampled by every write)."""
        return self._aws_clock

    def now_ms(self) -> int:
        """The epoch ms this client stamps: its clock, held within the bounds DynamoDB's ``Date``
        headers put on AWS's clock (about a second wide) once it has seen one."""
        return self.stamp(self._monotonic())[0]

    def earliest_ms(self, at: float | None = None) -> int:
        """The earliest epoch ms AWS's clock can show (at monotonic ``at``; default: now): what
        this client judges other participants' leases by (``:now`` of ``expiresAt < :now``).
        Every participant stamps a lease from the latest time AWS's clock can show (a workflow
        from AWS's clock itself), so none ends by this judgement before it ended for its holder.
        With no bound known (no ``Date`` header seen), this client's clock."""
        at = self._monotonic() if at is None else at
        bounds = self._aws_clock.bounds(at)
        return int(self._clock()) if bounds is None else math.floor(bounds[0])

    def latest_ms(self) -> int:
        """The latest epoch ms AWS's clock can show now: what a lease or a mark is stamped from."""
        return self.stamp(self._monotonic())[1]

    def stamp(self, at: float) -> tuple[int, int]:
        """At monotonic ``at``: (the epoch ms to stamp as now - this client's clock, held within
        the bounds on AWS's clock; the latest time AWS's clock can show - a lease stamped from it
        ends no sooner for the workflows than for its holder). Unknown bounds: the clock, twice."""
        now = int(self._clock())
        bounds = self._aws_clock.bounds(at)
        if bounds is None:
            return now, now
        lo, hi = math.ceil(bounds[0]), math.ceil(bounds[1])
        return min(max(now, lo), hi), hi

    def _update(
        self, table_key: str, write: LockWrite, values: Mapping[str, Any], *, return_new: bool = False,
        return_old: bool = False, who: str | None = None, index: int | None = None, refused_ok: bool = False,
    ) -> dict:
        """One conditional UpdateItem of the protocol; on a failed condition the
        ``ClientError`` carries the item as it was (``ReturnValuesOnConditionCheckFailure``).
        ``who``/``index``: a fair lock's owner placeholder and queue place; ``refused_ok``: a
        refused condition is no error (an enqueue retried after it succeeded)."""
        if set(values) != set(write.value_names()):  # a programming error in this module
            raise AssertionError(f"values {sorted(values)} do not fit {write}")
        names = fair.attribute_names(write)
        def attempt() -> dict:  # (tried again while a transaction on the item refuses it)
            before = self._monotonic()
            try:
                response = self.dynamodb.update_item(
                    TableName=self.table_name,
                    Key=lock_item_key(table_key),
                    UpdateExpression=write.update,
                    ConditionExpression=write.condition,
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=dict(values),
                    ReturnValues="ALL_NEW" if return_new else "ALL_OLD" if return_old else "NONE",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
            except ClientError as error:
                self._aws_clock.sample(before, self._monotonic(), error.response)
                raise
            self._aws_clock.sample(before, self._monotonic(), response)
            return response

        try:
            return retry_conflicts(attempt, sleep=self._sleep)
        except ClientError as error:
            if refused_ok and _condition_failed(error):
                return {}
            raise
