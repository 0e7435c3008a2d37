"""A waiting :class:`~locked_workflow.constructs_lib.lock_client.LockClient`'s liveness check of
the workflow holding the lock (a plain mutex and ``fair=True``), as the state machines' waiters
make it (``LockedSection``'s liveness check, the fair lock's park fallback):

* the hold registered a **presence token** (a ``.waitForTaskToken`` task beside its work) that
  is the held acquisition's and has not departed: ``SendTaskHeartbeat`` on it. Accepted, the
  branch still runs: wait on. ``TaskTimedOut``: the branch ended without releasing - cancelled
  with its Parallel or Map (the execution may go on RUNNING: DescribeExecution cannot tell it),
  stopped or timed out - so write ABANDONED: the lock stays held for the hold's stop grace from
  now (work it started may still run), then any waiter takes it over. ABANDONED's condition
  trusts only a token older than ``PRESENCE_SETTLE_MS`` (a younger closed token may be a
  registration retried). Any other answer (``AccessDenied``, throttling): ask about the
  execution;
* otherwise the holder's **execution**: ``DescribeExecution``; ended (not RUNNING nor
  PENDING_REDRIVE), ``RETIRE_BY`` its stop time plus its stop grace (never a later end than the
  lease's; an acquisition made after the end is left alone), as the janitor writes it - the
  client needs no janitor.

Either write only moves the lease's end, on that exact acquisition; the client then takes the
lock through its ordinary attempt (a mutex's takeover of the watched item once AWS's clock is
past the new end; a fair lock's grant as the head). Times are AWS's clock as DynamoDB's ``Date``
headers bound it: the end is stamped from the *latest* time it can show (held no shorter than
the state machines hold it), the settle judged from the *earliest* (no token trusted younger).

A client without ``states:SendTaskHeartbeat`` / ``states:DescribeExecution`` (see
:func:`~locked_workflow.constructs_lib.client_layer.grant_lock_client`), or whose Step Functions
client cannot be made or reached, checks nothing and waits for the lease, as before: the check
never fails an acquire.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

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


class HolderLiveness:
    """The liveness check of a :class:`LockClient` (a base of it, beside its
    :class:`~locked_workflow.constructs_lib.client_session.ClientSession`, whose clients, clocks
    and ``_update`` it uses); ``_liveness_checked`` (stored key -> monotonic time of the last
    check) and ``_watches_mutex`` are set by the client."""

    _liveness_checked: dict[str, float]
    _watches_mutex: Any

    def holder_gone(self, table_key: str, item: Mapping[str, Any]) -> bool:
        """Check the workflow holding ``item`` (the lock item as a refusal showed it), at most
        every :data:`LIVENESS_CHECK_EVERY_S` per key. True: its lease now ends sooner
        (ABANDONED or RETIRE_BY written) - try again at once, the refusal then shows the new end."""
        owner = item.get(OWNER, {}).get("S")
        execution = owner_execution(owner)
        if execution is None or ACQUIRED_AT not in item or EXPIRES_AT not in item:
            return False  # free, a client's (its lease is watched), or not a lock item
        now = self._monotonic()
        with self._watches_mutex:
            last = self._liveness_checked.get(table_key)
            if last is not None and now - last < LIVENESS_CHECK_EVERY_S:
                return False
            self._liveness_checked[table_key] = now
            while len(self._liveness_checked) > 1_000:
                del self._liveness_checked[next(iter(self._liveness_checked))]
        token = presence_to_probe(item)
        if token is not None:
            try:
                self.stepfunctions.send_task_heartbeat(taskToken=token)
                return False  # its branch runs
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") == TASK_TIMED_OUT_CODE:
                    return self._abandoned(table_key, owner, token)
                logger.info("lock %s: the probe of %s's presence answered %s: asking about its execution",
                            table_key, owner, error.response.get("Error", {}).get("Code"))
            except BotoCoreError as error:  # no region, no credentials, no connection: no check
                logger.info("lock %s: no probe of %s's presence: %s", table_key, owner, error)
                return False
        return self._ended(table_key, item, owner, execution)

    def _abandoned(self, table_key: str, owner: str, token: str) -> bool:
        """ABANDONED: the hold's branch ended without releasing (its token is closed)."""
        since = self._monotonic()
        values = {
            ":owner": {"S": owner},
            ":endedAt": {"N": str(self.latest_ms())},
            ":token": {"S": token},
            ":settledBefore": {"N": str(self.earliest_ms() - PRESENCE_SETTLE_MS)},
        }
        try:
            item = self._update(table_key, ABANDONED, values, return_new=True)["Attributes"]
        except (ClientError, BotoCoreError) as error:
            if not (isinstance(error, ClientError) and _condition_failed(error)):
                logger.info("lock %s: ABANDONED of %s failed (the next round tries again): %s", table_key, owner, error)
            return False  # its token is too young to trust yet, or the item moved on
        self.watch_written(table_key, item, window_s=int(item.get(GRACE, {}).get("N", "0")) / 1000, since=since)
        logger.info("lock %s: %s's branch ended without releasing (its presence token is closed): held "
                    "for its stop grace from now", table_key, owner)
        return True

    def _ended(self, table_key: str, item: Mapping[str, Any], owner: str, execution: str) -> bool:
        """RETIRE_BY: the holder's execution ended (stop time + its stop grace), if it has."""
        try:
            described = self.stepfunctions.describe_execution(executionArn=execution)
        except (ClientError, BotoCoreError) as error:
            logger.info("lock %s: DescribeExecution of %s failed: %s", table_key, execution, error)
            return False
        stopped = described.get("stopDate")
        if described.get("status") in ALIVE_STATUSES or stopped is None:
            return False
        ended_ms = int(stopped.timestamp() * 1000)
        if int(item[ACQUIRED_AT]["N"]) > ended_ms:
            return False  # made after the end (a grant to a waiter that had ended): its granter's to take back
        until = ended_ms + int(item.get(GRACE, {}).get("N", "0"))
        values = {":owner": {"S": owner}, ":acquiredAt": item[ACQUIRED_AT], ":until": {"N": str(until)}}
        since = self._monotonic()
        try:
            written = self._update(table_key, RETIRE_BY, values, return_new=True)["Attributes"]
        except (ClientError, BotoCoreError) as error:
            if not (isinstance(error, ClientError) and _condition_failed(error)):
                logger.info("lock %s: RETIRE_BY of %s failed (the next round tries again): %s", table_key, owner, error)
            return False  # ends no later already, or the item moved on
        self.watch_written(table_key, written, window_s=int(item.get(GRACE, {}).get("N", "0")) / 1000, since=since)
        logger.info("lock %s: %s ended (%s) without releasing: its lease ends at its stop grace", table_key,
                    execution, described.get("status"))
        return True
