"""Probe of mutual exclusion, run as the protected work of the safety and stress suites.

On entry it adds 1 to ``inside`` on the probe item of its key (an atomic counter) and reads
the result: ``insideAtEntry`` is 1 when it is alone, as a working lock guarantees (at most
``limit`` for a semaphore); ``violations`` counts the entries that were not, and ``seen`` lists
every ``insideAtEntry`` (a semaphore's test reads from it that ``limit`` was reached);
``enteredAt`` lists the epoch ms of every entry (the stress campaign measures how long a key
stayed blocked after a stopped holder). It appends the lock's fence to ``fences``
(they must never go down), then does a read-modify-write of ``counter`` across its work time:
with a fence, the write is conditioned on ``lastFence <= :fence`` (the same acquisition may
write twice: a re-entered section), and ``accepted``/``rejected`` count the outcomes. No lost
update means ``counter == accepted``. On exit it takes 1 off ``inside``; ``fail`` makes it
raise afterwards (a failing protected work).

``role`` (a read/write lock): ``write`` - as above, alone (``inside`` must be 1 at entry);
``read`` - one of many readers: it also counts ``readersIn`` / ``writersIn`` by role, records
the readers inside at its entry in ``readersSeen``, counts a ``violations`` when a writer is
inside, and does no write: it reads ``lastFence`` (the fence of the last writer that wrote)
and counts ``staleReads`` when its lock's fence differs from it, ``overtakenReads`` when it
changed during the read or is past the reader's fence (the fault matrix's check: a writer
stopped before its write moves the fence without a write, which ``staleReads`` counts).
"""

from __future__ import annotations

import os
import time

import boto3
from aws_lambda_powertools import Logger

logger = Logger(service="lock-probe")
_dynamodb = None


def _client():
    global _dynamodb
    if _dynamodb is None:
        _dynamodb = boto3.client("dynamodb")
    return _dynamodb


def _update(table: str, key: str, expression: str, values: dict, **kwargs) -> dict:
    return _client().update_item(
        TableName=table, Key={"pk": {"S": key}}, UpdateExpression=expression,
        ExpressionAttributeValues=values, ReturnValues="UPDATED_NEW", **kwargs,
    ).get("Attributes", {})


#: The count of holders inside, by role.
_INSIDE = {"read": "readersIn", "write": "writersIn"}


def _enter(table: str, key: str, fence: int | None, limit: int = 1, role: str | None = None) -> int:
    values = {":one": {"N": "1"}, ":empty": {"L": []}, ":at": {"L": [{"N": str(int(time.time() * 1000))}]}}
    appends = ["enteredAt = list_append(if_not_exists(enteredAt, :empty), :at)"]
    if fence is not None and role != "read":  # (a reader's fence is another's: not its own order)
        appends.append("fences = list_append(if_not_exists(fences, :empty), :fence)")
        values[":fence"] = {"L": [{"N": str(fence)}]}
    counts = f", {_INSIDE[role]} :one" if role else ""
    expression = f"SET {', '.join(appends)} ADD inside :one, entries :one{counts}"
    after = _update(table, key, expression, values)
    inside = int(after["inside"]["N"])
    _update(table, key, "SET seen = list_append(if_not_exists(seen, :empty), :seen)",
            {":empty": {"L": []}, ":seen": {"L": [{"N": str(inside)}]}})
    if role == "read":
        item = _client().get_item(TableName=table, Key={"pk": {"S": key}}, ConsistentRead=True)["Item"]
        writers = int(item.get("writersIn", {}).get("N", "0"))
        _update(table, key, "SET readersSeen = list_append(if_not_exists(readersSeen, :empty), :seen)",
                {":empty": {"L": []}, ":seen": {"L": [{"N": after["readersIn"]["N"]}]}})
        if writers > 0:
            _update(table, key, "ADD violations :one", {":one": {"N": "1"}})
            logger.warning("a reader inside with a writer", extra={"key": key})
        return inside
    if inside > limit:
        _update(table, key, "ADD violations :one", {":one": {"N": "1"}})
        logger.warning("not alone in the protected work", extra={"key": key, "insideAtEntry": inside})
    return inside


class TimedOut(Exception):
    """The invocation ran past its function's timeout: on AWS it would have been killed here.

    The local runtime runs Lambdas as threads it cannot kill; the probe stops itself at its
    deadline instead (before entering, before writing), so a stopped holder's work - which
    the lock's stop grace covers only up to the function timeout - behaves as on AWS."""


def _check_deadline(context: object) -> None:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is not None and remaining() <= 0:
        raise TimedOut("Task timed out (the function's timeout)")


def _read_modify_write(table: str, key: str, fence: int | None, work_ms: int, context: object = None) -> bool:
    item = _client().get_item(TableName=table, Key={"pk": {"S": key}}, ConsistentRead=True).get("Item", {})
    counter = int(item.get("counter", {}).get("N", "0"))
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    time.sleep(max(0, min(work_ms, remaining() if remaining else work_ms)) / 1000)
    _check_deadline(context)
    values = {":new": {"N": str(counter + 1)}, ":one": {"N": "1"}}
    if fence is None:  # unfenced (the negative control): the write always lands
        _update(table, key, "SET #c = :new ADD accepted :one", values, ExpressionAttributeNames={"#c": "counter"})
        return True
    values[":fence"] = {"N": str(fence)}
    try:
        _update(
            table, key, "SET #c = :new, lastFence = :fence ADD accepted :one", values,
            ConditionExpression="attribute_not_exists(lastFence) OR lastFence <= :fence",
            ExpressionAttributeNames={"#c": "counter"},
        )
        return True
    except _client().exceptions.ConditionalCheckFailedException:
        _update(table, key, "ADD rejected :one", {":one": {"N": "1"}})
        logger.info("fenced write rejected", extra={"key": key, "fence": fence})
        return False


def _read(table: str, key: str, fence: int | None, work_ms: int, context: object = None) -> dict:
    """A reader's work: read ``lastFence`` (and the counter) before and after its work time;
    both must be its lock's fence (no writer moved it meanwhile)."""
    def last_fence() -> int:
        item = _client().get_item(TableName=table, Key={"pk": {"S": key}}, ConsistentRead=True).get("Item", {})
        return int(item.get("lastFence", {}).get("N", "0"))

    before = last_fence()
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    time.sleep(max(0, min(work_ms, remaining() if remaining else work_ms)) / 1000)
    after = last_fence()
    if fence is not None and not before == after == fence:
        _update(table, key, "ADD staleReads :one", {":one": {"N": "1"}})
        logger.warning("a reader saw another fence", extra={"key": key, "fence": fence, "lastFence": [before, after]})
    if fence is not None and (before != after or after > fence):
        # a write during the read, or a write by a writer newer than the reader's fence: a
        # reader that overlapped a writer, or was admitted with a stale fence. (A fence ahead of
        # the last write is no violation: a writer that acquired and never wrote - stopped before
        # its write, its work timed out, its grant expired unclaimed - moves the fence alone.)
        _update(table, key, "ADD overtakenReads :one", {":one": {"N": "1"}})
    _update(table, key, "ADD readCount :one", {":one": {"N": "1"}})
    return {"lastFence": [before, after]}


@logger.inject_lambda_context
def handler(event: dict, context: object) -> dict:
    """One key (``key``, ``fence``), or several at once (``keys``, ``fences``: key -> fence,
    a multi-key lock). ``limit``: holders allowed inside at once (a semaphore); default 1."""
    table = os.environ["PROBE_TABLE"]
    limit = int(event.get("limit") or 1)
    keys = [str(k) for k in event["keys"]] if event.get("keys") is not None else [str(event["key"])]
    fences = event.get("fences") or {}
    if event.get("keys") is None and event.get("fence") is not None:
        fences = {keys[0]: event["fence"]}
    results = []
    entered = []
    role = event.get("role")
    try:
        for key in keys:
            fence = fences.get(key) if isinstance(fences, dict) else None
            fence = int(fence) if fence is not None else None
            _check_deadline(context)
            inside = _enter(table, key, fence, limit, role)
            entered.append(key)
            results.append({"key": key, "insideAtEntry": inside, "fence": fence})
        work_ms = int(event.get("workMs") or 0)
        for result in results:
            if role == "read":  # a reader reads: the fence of the last writer that wrote
                result["read"] = _read(table, result["key"], result["fence"], work_ms // len(keys), context)
            else:
                result["accepted"] = _read_modify_write(
                    table, result["key"], result["fence"], work_ms // len(keys), context
                )
    finally:
        for key in entered:
            _update(table, key, "ADD inside :minus" + (f", {_INSIDE[role]} :minus" if role else ""), {":minus": {"N": "-1"}})
    if event.get("fail"):
        raise RuntimeError(f"the probe was asked to fail (keys {keys})")
    if event.get("keys") is None:
        return results[0]
    return {"keys": results}
