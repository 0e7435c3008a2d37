"""The janitor's logic: recover the locks of an execution that ended without releasing them.

Step Functions runs no Catch when an execution is stopped (ABORTED) or hits its state
machine's timeout (TIMED_OUT), and ``States.ALL`` does not catch ``States.Runtime`` or
``States.DataLimitExceeded`` (FAILED). For such an end, :func:`recover`:

1. reads the execution's whole history, every page, with ``GetExecutionHistory`` (boto3: no
   256 KiB result limit applies to a function reading an API, whatever the execution's
   input size or history length) and keeps the DynamoDB tasks scheduled at or before the
   end (``lock_protocol.dynamodb_tasks_scheduled``);
2. *retires* each acquisition found there: the lock stays held for the acquisition's stop
   grace after the end (work it started - a Lambda invocation, an activity or callback
   worker - may still run), or until its lease ends if that is sooner, then any waiter takes
   it over. It reads the lock item and writes ``RETIRE_BY`` (a reader's entry:
   ``RETIRE_GONE_READER``) on the exact acquisition read, only if made at or before the end,
   so a duplicate or late event (EventBridge delivers at least once, and retries for up to
   24 h) never retires a redriven execution's new acquisition, and never lengthens a lease;
3. deletes the presence rows of its read/write holds (``shared_protocol.FORGET_ROW``, after the
   retires: a row registered after the end - a redriven hold's - stays);
4. takes every queue entry the execution parked (``fair_protocol.enqueues_in_history``) out
   of its queue: a fair lock's, waking the next waiter of a free lock
   (``LockClient.leave_queue`` with ``ended``: the clients' own fair writes) - and taking back
   a grant to it that nobody confirmed (``fair_protocol.DROP_GRANT``), then handing the lock
   on; never claiming it: a redriven run of the waiter may have confirmed it and work under it
   (:func:`leave_queue_of_ended`); a read/write lock's, marked left (``shared_protocol.DEQUEUE``),
   so the next handoff skips it;
5. finishes the fair handoffs the end cut short (``LockClient.finish_handoff``): for each key
   it acquired (or released: a release's ``GRANT`` carries ACQUIRE's clause), a grant it made
   that nobody confirmed (``handed`` = its owner) to a grantee whose execution has ended too is
   revoked (``REVOKE``: refused once confirmed) and the lock handed on, or freed - what the
   release's wake-up fallback does. The grant always precedes the releaser's end, so whichever
   order the two janitors run in, one of them finds it: the grantee's (its leave drops an
   unconfirmed grant and hands the lock on) or the releaser's (a grantee that ended first: its
   janitor may have looked after the row was taken, before the grant). A live grantee's grant
   stands (DescribeExecution says RUNNING): it confirms it when it looks. Both writes need the
   grant unconfirmed, so whichever lands first wins and the other is refused.

Every write is tried again while DynamoDB answers ``TransactionConflictException`` (the item
is in a transaction in flight - a read/write waiter's park, a multi-key transfer - and nothing
was written; botocore does not retry it): ``client_lease.retry_conflicts``, the clients' own.
Every expression comes from ``state_machines`` (deployed with this function): nothing is
spelled twice. A failure it cannot get past raises :class:`RecoveryFailed`, naming the
execution and the lock key it was at; the handler logs it as one line and re-raises, so
Lambda retries the event and then sends it to the dead-letter queue.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from aws_lambda_powertools import Tracer
from botocore.exceptions import BotoCoreError, ClientError

from locked_workflow.constructs_lib.client_lease import retry_conflicts
from locked_workflow.constructs_lib.lock_client import LockClient
from locked_workflow.state_machines import fair_protocol
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines import shared_protocol
from locked_workflow.state_machines.errors import CONDITIONAL_CHECK_FAILED_CODE

try:  # imported as a package module (tests, the construct)
    from .settings import ENDED_WITHOUT_RELEASE, JanitorSettings
except ImportError:  # deployed: the asset folder is the import root
    from settings import ENDED_WITHOUT_RELEASE, JanitorSettings  # type: ignore[no-redef]

SERVICE = "lock-janitor"
#: History events per GetExecutionHistory page (the API's maximum).
HISTORY_PAGE_SIZE = 1000
#: Metric: acquisitions retired (each counted once: a duplicate event retires nothing more).
JANITOR_RETIRES = "JanitorRetires"

tracer = Tracer(service=SERVICE)


class InvalidJanitorEvent(ValueError):
    """The event is not a Step Functions status change of an execution that ended without
    releasing (``detail.executionArn``, ``stateMachineArn``, ``status``, ``stopDate``)."""


class RecoveryFailed(RuntimeError):
    """Recovering an ended execution's locks failed; ``key`` is the lock key it was at (None:
    before any, while reading the history)."""

    def __init__(self, execution_arn: str, key: str | None, error: Exception) -> None:
        where = f"lock key {key!r}" if key is not None else "no lock key yet (reading its history)"
        super().__init__(
            f"could not recover the locks of {execution_arn} at {where}: {type(error).__name__}: {error}"
        )
        self.execution_arn = execution_arn
        self.key = key


@dataclass(frozen=True)
class EndedExecution:
    """What the janitor reads of a status-change event: which execution ended, and when
    (``stopDate``, epoch ms of the service clock - present even when Step Functions leaves a
    large input out of the event)."""

    execution_arn: str
    state_machine_arn: str
    status: str
    ended_at_ms: int

    @property
    def state_machine_name(self) -> str:
        return self.state_machine_arn.split(":")[6]

    @classmethod
    def from_detail(cls, detail: Any) -> "EndedExecution":
        if not isinstance(detail, Mapping):
            raise InvalidJanitorEvent(f"the event has no detail object, got: {type(detail).__name__}")
        arns = {name: detail.get(name) for name in ("executionArn", "stateMachineArn")}
        for name, arn in arns.items():
            if not isinstance(arn, str) or len(arn.split(":")) < 7:
                raise InvalidJanitorEvent(f"detail.{name} must be an ARN, got: {arn!r}")
        status = detail.get("status")
        if status not in ENDED_WITHOUT_RELEASE:
            raise InvalidJanitorEvent(
                f"detail.status must be one of {', '.join(ENDED_WITHOUT_RELEASE)}, got: {status!r}"
            )
        stop = detail.get("stopDate")
        if isinstance(stop, bool) or not isinstance(stop, int) or stop <= 0:
            raise InvalidJanitorEvent(f"detail.stopDate must be epoch milliseconds, got: {stop!r}")
        return cls(arns["executionArn"], arns["stateMachineArn"], status, stop)


@dataclass
class Recovery:
    """What one event did: ``(key, owner)`` of each acquisition retired now, of each left
    unchanged (released, taken over, never taken, made after the end, or retired already)
    and of each queue entry dequeued."""

    execution_arn: str
    retired: list[tuple[str, str]] = field(default_factory=list)
    unchanged: list[tuple[str, str]] = field(default_factory=list)
    dequeued: list[tuple[str, str]] = field(default_factory=list)
    #: presence rows deleted (their keys)
    forgotten: list[str] = field(default_factory=list)
    #: (key, owner) of each grant the ended releaser made that was revoked and handed on
    revoked: list[tuple[str, str]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        def listed(pairs: list[tuple[str, str]]) -> list[dict[str, str]]:
            return [{"key": key, "owner": owner} for key, owner in pairs]

        return {"executionArn": self.execution_arn, "retired": listed(self.retired),
                "unchanged": listed(self.unchanged), "dequeued": listed(self.dequeued),
                "forgotten": list(self.forgotten), "revoked": listed(self.revoked)}


def history_events(stepfunctions: Any, execution_arn: str, *, page_size: int = HISTORY_PAGE_SIZE) -> Iterator[dict]:
    """Every event of the execution's history, page after page (with the tasks' parameters)."""
    pages = stepfunctions.get_paginator("get_execution_history").paginate(
        executionArn=execution_arn, includeExecutionData=True, PaginationConfig={"PageSize": page_size},
    )
    for page in pages:
        yield from page["events"]


def _unless_refused(call: Any, **arguments: Any) -> dict | None:
    """Make a conditional write (again while a transaction in flight on its item refuses it,
    developer guide, "Transaction conflict handling in DynamoDB"); its response, or None when
    its condition refused it."""
    try:
        return retry_conflicts(lambda: call(**arguments), sleep=time.sleep)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == CONDITIONAL_CHECK_FAILED_CODE:
            return None
        raise


def _retired_until(hold: Mapping[str, Any], names: Callable[[str], str], ended_at_ms: int) -> tuple[str, int] | None:
    """``(acquiredAt, end + grace)`` of a hold (its attributes, named by ``names``) made at or
    before the end whose lease that would shorten; None when a retire would not (a retire
    never lengthens a lease) or the hold is not an execution's acquisition."""
    acquired, grace, expires = (hold.get(names(name), {}).get("N")
                                for name in (protocol.ACQUIRED_AT, protocol.GRACE, protocol.EXPIRES_AT))
    if None in (acquired, grace, expires) or int(acquired) > ended_at_ms:
        return None
    until = ended_at_ms + int(grace)
    return (acquired, until) if until < int(expires) else None


def retire(dynamodb: Any, settings: JanitorSettings, key: str, owner: str, ended_at_ms: int) -> bool:
    """Retire the acquisition ``owner`` of ``key``: its lease ends ``grace`` after the end, if
    that is sooner (the lease's own end is the most a holder ever gets: a retire never
    lengthens it). Reads the lock item, then RETIRE_BY on the exact acquisition read. True
    when this call shortened it; False when the lock is not that acquisition's any more (or it
    was made after the end), was retired already (a duplicate event), or ends sooner anyway."""
    item, write = settings.item, protocol.RETIRE_BY
    current = dynamodb.get_item(TableName=settings.table_name, Key=protocol.lock_item_key(key, item),
                                ConsistentRead=True).get("Item", {})
    retired = _retired_until(current, item.attribute, ended_at_ms)
    if current.get(item.attribute(protocol.OWNER), {}).get("S") != owner or retired is None:
        return False
    return _unless_refused(
        dynamodb.update_item, TableName=settings.table_name, Key=protocol.lock_item_key(key, item),
        UpdateExpression=write.update, ConditionExpression=write.condition,
        ExpressionAttributeNames=write.attribute_names(item),
        ExpressionAttributeValues={":owner": {"S": owner}, ":acquiredAt": {"N": retired[0]},
                                   ":until": {"N": str(retired[1])}},
    ) is not None


def retire_reader(dynamodb: Any, settings: JanitorSettings, key: str, owner: str, ended_at_ms: int) -> bool:
    """Retire the reader entry of ``owner`` on ``key``: it lasts its stop grace from the end,
    if that is sooner (that acquisition only; RETIRE_GONE_READER, the probe's write, after a
    read). True when this call shortened it."""
    current = dynamodb.get_item(TableName=settings.table_name, Key=protocol.lock_item_key(key),
                                ConsistentRead=True).get("Item", {})
    entry = shared_protocol.readers_of(current).get(owner, {})
    retired = _retired_until(entry, str, ended_at_ms)  # (an entry's attributes are not prefixed)
    if retired is None:
        return False
    arguments = shared_protocol.arguments(key, shared_protocol.RETIRE_GONE_READER, {
        ":acquiredAt": {"N": retired[0]}, ":until": {"N": str(retired[1])}}, reader=owner)
    return _unless_refused(dynamodb.update_item, TableName=settings.table_name, **arguments) is not None


def forget_row(dynamodb: Any, settings: JanitorSettings, row_key: str, ended_at_ms: int) -> bool:
    """FORGET_ROW: delete the presence row ``row_key`` unless a token was registered on it
    after the end. True when a row was deleted; False when there was none (the hold deleted it,
    or a duplicate event) or it is a redriven hold's."""
    arguments = fair_protocol.delete_arguments(row_key, shared_protocol.FORGET_ROW,
                                               {":endedAt": {"N": str(ended_at_ms)}})
    deleted = _unless_refused(dynamodb.delete_item, TableName=settings.table_name, **arguments)
    return bool(deleted and deleted.get("Attributes"))


def dequeue(dynamodb: Any, settings: JanitorSettings, row_key: str, owner: str) -> bool:
    """DEQUEUE: mark the read/write queue row ``row_key`` that ``owner`` parked on left. False
    when the row is gone (claimed, requeued) or not that waiter's."""
    arguments = shared_protocol.arguments(row_key, shared_protocol.DEQUEUE,
                                          {":me": {"S": owner}, ":one": {"N": "1"}})
    return _unless_refused(dynamodb.update_item, TableName=settings.table_name, **arguments) is not None


def leave_queue_of_ended(client: LockClient, row_key: str, owner: str) -> None:
    """Take the ended waiter ``owner`` out of its queue (row ``row_key``): the row marked left,
    a grant to it that nobody confirmed taken back (``DROP_GRANT``, which frees the lock), and a
    free lock handed on (``LockClient.leave_queue`` with ``ended``). Its waiter never worked
    under an unconfirmed grant (it works only after its CLAIM), and its granter's REVOKE needs
    its own handoff to run: dropped, such a grant would stay held for its whole lease. A
    confirmed grant is never claimed nor handed on, whenever it was made: the event may come
    after a redrive of the waiter (EventBridge delivers at least once, and for up to 24 h),
    whose run confirmed it and works under it - an idempotent CLAIM here used to accept it and
    hand it on beside that run (issue 25). It stays as the retire step left it. A retry after
    the drop finds the lock free at the waiter's ticket and hands it on again."""
    client.leave_queue(row_key, owner, ended=True)


@tracer.capture_method
def recover(
    ended: EndedExecution,
    settings: JanitorSettings,
    *,
    dynamodb: Any,
    stepfunctions: Any,
    page_size: int = HISTORY_PAGE_SIZE,
) -> Recovery:
    """Retire every acquisition ``ended`` made, delete its holds' presence rows and dequeue its
    queue entries (fair or read/write).

    Idempotent: a second delivery of the same event retires and dequeues nothing more.
    :raises RecoveryFailed: naming the execution and the key it was at.
    """
    recovery = Recovery(ended.execution_arn)
    key: str | None = None
    try:
        tasks = protocol.dynamodb_tasks_scheduled(
            history_events(stepfunctions, ended.execution_arn, page_size=page_size),
            ended_at_ms=ended.ended_at_ms,
        )
        holds = shared_protocol.holds_in_history(tasks, table_name=settings.table_name)
        readers = {(key, owner) for key, owner, mode in holds if mode == shared_protocol.READ}
        acquisitions = protocol.acquisitions_in_history(tasks, table_name=settings.table_name)
        for key, owner in acquisitions:
            if (key, owner) in readers:  # a reader's FAST_READ carries ACQUIRE's clause: its entry is below
                continue
            done = retire(dynamodb, settings, key, owner, ended.ended_at_ms)
            (recovery.retired if done else recovery.unchanged).append((key, owner))
        # the read/write lock's holds: a reader's entry, a woken writer's claim
        for key, owner, mode in holds:
            done = (retire_reader if mode == shared_protocol.READ else retire)(
                dynamodb, settings, key, owner, ended.ended_at_ms)
            (recovery.retired if done else recovery.unchanged).append((key, owner))
        # their presence rows (after the retires: a row only lets a probe shorten a lease)
        for key in shared_protocol.presence_rows_in_history(tasks, table_name=settings.table_name):
            if forget_row(dynamodb, settings, key, ended.ended_at_ms):
                recovery.forgotten.append(key)
        # its parks: a fair waiter leaves its queue (the lock handed on if free); a read/write
        # waiter's row is marked left (DEQUEUE), so the next handoff skips it
        client = (LockClient(settings.table_name, dynamodb=dynamodb, stepfunctions=stepfunctions,
                             kind=LockClient.FAIR)
                  if settings.fair else None)
        for row_key, owner in fair_protocol.enqueues_in_history(tasks, table_name=settings.table_name):
            if client is not None:
                leave_queue_of_ended(client, row_key, owner)
            elif not dequeue(dynamodb, settings, row_key, owner):
                continue
            recovery.dequeued.append((row_key, owner))
        # its handoffs cut short: a grant it made that nobody confirmed, to a grantee that has
        # ended too, is revoked and handed on (the release's own fallback, which its end cut off)
        if client is not None:
            for key, owner in acquisitions:
                if client.finish_handoff(key, owner):
                    recovery.revoked.append((key, owner))
    except (ClientError, BotoCoreError, protocol.HistoryUnreadable) as error:
        raise RecoveryFailed(ended.execution_arn, key, error) from error
    return recovery
