"""A waiting :class:`~locked_workflow.constructs_lib.lock_client.LockClient`'s liveness check of
the workflow holding the lock, as the state machines' waiters make it (``LockedSection``'s
liveness check, the fair lock's park fallback, the read/write kinds' ``ProbeHolder``):

* the hold registered a **presence token** (a ``.waitForTaskToken`` task beside its work) that
  is the held acquisition's and has not departed: ``SendTaskHeartbeat`` on it. Accepted, the
  branch still runs: wait on. ``TaskTimedOut``: the branch ended without releasing - cancelled
  with its Parallel or Map (the execution may go on RUNNING: DescribeExecution cannot tell it),
  stopped or timed out - so the hold is **abandoned**: it stays held for its stop grace from
  now (work it started may still run), then any waiter takes it over. The write trusts only a
  token older than ``PRESENCE_SETTLE_MS`` (a younger closed token may be a registration
  retried): refused, or any other answer (``AccessDenied``, throttling), ask about the
  execution;
* otherwise the holder's **execution**: ``DescribeExecution``; ended (not RUNNING nor
  PENDING_REDRIVE), the hold is **retired** by its stop time plus its stop grace (never a later
  end than the lease's; an acquisition made after the end is left alone), as the janitor
  writes it - the client needs no janitor.

What "abandoned" and "retired" write is the lock kind's, declared by :class:`HoldWrites` (the
protocol's own writes): a plain or fair lock's hold is the lock item (:class:`LockItemHolds`:
ABANDONED, RETIRE_BY); a read/write lock's writer or reader keeps its presence on a row of its
own (``shared_client.ReadWriteHolds``: the row's GONE_ROW beside RETIRE_GONE_WRITER /
RETIRE_GONE_READER; RETIRE_BY / RETIRE_GONE_READER), and a waiter blocked by several readers
checks them in turn, one per check, as the state machines' waiters do.

Either write only moves the lease's end, on that exact acquisition; the client then takes the
lock through its ordinary attempt (a mutex's takeover of the watched item once AWS's clock is
past the new end; a fair lock's grant as the head; a read/write waiter's admission or reap).
Times are AWS's clock as DynamoDB's ``Date`` headers bound it: the end is stamped from the
*latest* time it can show (held no shorter than the state machines hold it), the settle judged
from the *earliest* (no token trusted younger).

A client without ``states:SendTaskHeartbeat`` / ``states:DescribeExecution`` (see
:func:`~locked_workflow.constructs_lib.client_layer.grant_lock_client`), or whose Step Functions
client cannot be made or reached, checks nothing and waits for the lease, as before: the check
never fails an acquire.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

from botocore.exceptions import BotoCoreError, ClientError

from locked_workflow.constructs_lib.client_lease import condition_failed as _condition_failed
from locked_workflow.state_machines.lock_item import (
    ACQUIRED_AT,
    ALIVE_STATUSES,
    EXPIRES_AT,
    GRACE,
    OWNER,
    owner_execution,
)
from locked_workflow.state_machines.lock_writes import ABANDONED, PRESENCE_SETTLE_MS, RETIRE_BY
from locked_workflow.state_machines.wait_expressions import presence_to_probe

logger = logging.getLogger(__name__)

#: A waiter checks one key's holder at most this often (s): about the state machines' liveness
#: round (their wait policy's first interval), whatever the client's poll interval.
LIVENESS_CHECK_EVERY_S = 1.0
#: What ``SendTaskHeartbeat`` answers for a token whose task is over (the API's error code;
#: ``errors.PRESENCE_GONE`` is the same error named by a state machine's task)
#: (https://docs.aws.amazon.com/step-functions/latest/apireference/API_SendTaskHeartbeat.html).
TASK_TIMED_OUT_CODE = "TaskTimedOut"


@dataclass(frozen=True)
class WorkflowHold:
    """A workflow's hold a waiter may check: its ``owner`` (``<execution ARN>#<uuid>``),
    ``execution``, the acquisition's ``acquired_at`` and ``expires_at`` (epoch ms), its stop
    grace (``grace_ms``) and whether it is a reader's entry (``reader``)."""

    owner: str
    execution: str
    acquired_at: int
    expires_at: int
    grace_ms: int
    reader: bool = False


class HoldWrites(Protocol):
    """How a lock kind's waiter writes what its liveness check found: the declared hook of
    :meth:`HolderLiveness.check_holds` (the protocol's writes, spelled in ``state_machines``)."""

    def presence_token(self, table_key: str, hold: WorkflowHold) -> str | None:
        """The hold's presence token to probe (that acquisition's, not departed), or None."""

    def abandon_hold(self, table_key: str, hold: WorkflowHold, token: str) -> bool:
        """``token`` is closed (``TaskTimedOut``): the hold's lease now ends its stop grace from
        the latest time AWS's clock can show - if the token still is that acquisition's, settled
        by the earliest, and that shortens the lease. True when written."""

    def retire_hold(self, table_key: str, hold: WorkflowHold, until: int) -> bool:
        """The hold's execution ended: its lease now ends at ``until`` (its end + its stop
        grace), that acquisition only, if sooner. True when written."""


class HolderLiveness:
    """The liveness check of a :class:`LockClient` (a base of it, beside its
    :class:`~locked_workflow.constructs_lib.client_session.ClientSession`, whose clients, clocks
    and ``_update`` it uses); ``_liveness_checked`` (stored key -> monotonic time of the last
    check, and how many checks it had: whose turn it is) and ``_watches_mutex`` are set by the
    client."""

    _liveness_checked: dict[str, tuple[float, int]]
    _watches_mutex: Any

    def holder_gone(self, table_key: str, item: Mapping[str, Any]) -> bool:
        """A plain or fair lock's check of the workflow holding ``item`` (the lock item as a
        refusal showed it): :meth:`check_holds` with :class:`LockItemHolds`."""
        owner = item.get(OWNER, {}).get("S")
        execution = owner_execution(owner)
        if execution is None or ACQUIRED_AT not in item or EXPIRES_AT not in item:
            return False  # free, a client's (its lease is watched), or not a lock item
        hold = WorkflowHold(owner=owner, execution=execution, acquired_at=int(item[ACQUIRED_AT]["N"]),
                            expires_at=int(item[EXPIRES_AT]["N"]), grace_ms=int(item.get(GRACE, {}).get("N", "0")))
        return self.check_holds(table_key, [hold], LockItemHolds(self, item))

    def check_holds(self, table_key: str, holds: Sequence[WorkflowHold], writes: HoldWrites) -> bool:
        """Check one of ``holds`` (the workflow holds a waiter on ``table_key`` is blocked by;
        several: in turn, one per check), at most every :data:`LIVENESS_CHECK_EVERY_S` per key.
        True: its lease now ends sooner (abandoned or retired) - look again at once, the lock
        item then shows the new end."""
        if not holds:
            return False
        now = self._monotonic()
        with self._watches_mutex:
            last, turn = self._liveness_checked.get(table_key, (None, 0))
            if last is not None and now - last < LIVENESS_CHECK_EVERY_S:
                return False
            self._liveness_checked.pop(table_key, None)
            self._liveness_checked[table_key] = (now, turn + 1)
            while len(self._liveness_checked) > 1_000:
                del self._liveness_checked[next(iter(self._liveness_checked))]
        hold = holds[turn % len(holds)]
        try:
            token = writes.presence_token(table_key, hold)
        except (ClientError, BotoCoreError) as error:  # its presence unread: ask about its execution
            logger.info("lock %s: the presence of %s unread: %s", table_key, hold.owner, error)
            token = None
        if token is not None:
            try:
                self.stepfunctions.send_task_heartbeat(taskToken=token)
                return False  # its branch runs
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") == TASK_TIMED_OUT_CODE:
                    if writes.abandon_hold(table_key, hold, token):
                        logger.info("lock %s: %s's branch ended without releasing (its presence token is closed): "
                                    "held for its stop grace from now", table_key, hold.owner)
                        return True
                    # refused: its token too young to trust yet (its execution may have ended: asked
                    # below), or the hold moved on
                else:
                    logger.info("lock %s: the probe of %s's presence answered %s: asking about its execution",
                                table_key, hold.owner, error.response.get("Error", {}).get("Code"))
            except BotoCoreError as error:  # no region, no credentials, no connection: no check
                logger.info("lock %s: no probe of %s's presence: %s", table_key, hold.owner, error)
                return False
        return self._ended(table_key, hold, writes)

    def _ended(self, table_key: str, hold: WorkflowHold, writes: HoldWrites) -> bool:
        """The hold retired by its execution's stop time + its stop grace, if it ended."""
        try:
            described = self.stepfunctions.describe_execution(executionArn=hold.execution)
        except (ClientError, BotoCoreError) as error:
            logger.info("lock %s: DescribeExecution of %s failed: %s", table_key, hold.execution, error)
            return False
        stopped = described.get("stopDate")
        if described.get("status") in ALIVE_STATUSES or stopped is None:
            return False
        ended_ms = int(stopped.timestamp() * 1000)
        if hold.acquired_at > ended_ms:
            return False  # made after the end (a grant to a waiter that had ended): its granter's to take back
        if not writes.retire_hold(table_key, hold, ended_ms + hold.grace_ms):
            return False  # ends no later already, or the hold moved on
        logger.info("lock %s: %s ended (%s) without releasing: its lease ends at its stop grace", table_key,
                    hold.execution, described.get("status"))
        return True

    def _lock_item_abandoned(self, table_key: str, hold: WorkflowHold, token: str) -> bool:
        """ABANDONED (:class:`LockItemHolds`); then a plain mutex client watches the version it
        wrote for the stop grace on its own clock (``watch_written``: no ``Date`` header needed)."""
        values = {
            ":owner": {"S": hold.owner},
            ":endedAt": {"N": str(self.latest_ms())},
            ":token": {"S": token},
            ":settledBefore": {"N": str(self.earliest_ms() - PRESENCE_SETTLE_MS)},
        }
        return self._written_and_watched(table_key, hold, "ABANDONED", ABANDONED, values)

    def _lock_item_retired(self, table_key: str, hold: WorkflowHold, until: int) -> bool:
        """RETIRE_BY (:class:`LockItemHolds`), then watched as :meth:`_lock_item_abandoned`."""
        values = {":owner": {"S": hold.owner}, ":acquiredAt": {"N": str(hold.acquired_at)}, ":until": {"N": str(until)}}
        return self._written_and_watched(table_key, hold, "RETIRE_BY", RETIRE_BY, values)

    def _written_and_watched(self, table_key: str, hold: WorkflowHold, name: str, write: Any, values: dict) -> bool:
        """``write`` (the protocol's, ``name``) on the lock item; the version it wrote watched
        for the hold's stop grace. False when refused."""
        since = self._monotonic()
        answer = _written(table_key, f"{name} of {hold.owner}",
                          lambda: self._update(table_key, write, values, return_new=True))
        if answer is None:
            return False
        self.watch_written(table_key, answer["Attributes"], window_s=hold.grace_ms / 1000, since=since)
        return True


def _written(table_key: str, what: str, write: Callable[[], Any]) -> Any:
    """``write()``'s answer; None when refused (quietly: the hold moved on, or its end is no
    later already) or failed past botocore's retries (logged: the next check tries again)."""
    try:
        return write()
    except (ClientError, BotoCoreError) as error:
        if not (isinstance(error, ClientError) and _condition_failed(error)):
            logger.info("lock %s: %s failed (the next check tries again): %s", table_key, what, error)
        return None


class LockItemHolds:
    """:class:`HoldWrites` of a plain or fair lock: the hold is the lock item ``item`` (as the
    refusal showed it), its presence on it (``PRESENT``); abandoned with ``ABANDONED``, retired
    with ``RETIRE_BY`` (written by the client: :class:`HolderLiveness`)."""

    def __init__(self, client: HolderLiveness, item: Mapping[str, Any]) -> None:
        self.client, self.item = client, item

    def presence_token(self, table_key: str, hold: WorkflowHold) -> str | None:
        return presence_to_probe(self.item)

    def abandon_hold(self, table_key: str, hold: WorkflowHold, token: str) -> bool:
        return self.client._lock_item_abandoned(table_key, hold, token)

    def retire_hold(self, table_key: str, hold: WorkflowHold, until: int) -> bool:
        return self.client._lock_item_retired(table_key, hold, until)
