"""The janitor's reading of an ended execution's history: which locks it attempted to acquire.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from locked_workflow.state_machines.lock_writes import ACQUIRE


class HistoryUnreadable(ValueError):
    """An execution's history does not show what a DynamoDB task wrote (its parameters are
    missing): the janitor cannot tell which locks the execution took."""


@dataclass(frozen=True)
class ScheduledTask:
    """A DynamoDB task an execution scheduled: its ``TaskScheduled`` history event's resource
    (``updateItem``, ``transactWriteItems`` ...) and parameters, as the state's Arguments
    evaluated to."""

    resource: str
    parameters: Mapping[str, Any]


def _epoch_ms(timestamp: Any) -> float:
    """A history event's timestamp (boto3: a datetime; epoch ms also accepted) in epoch ms."""
    return timestamp if isinstance(timestamp, (int, float)) else timestamp.timestamp() * 1000


def dynamodb_tasks_scheduled(events: Iterable[Mapping[str, Any]], *, ended_at_ms: int) -> list[ScheduledTask]:
    """The DynamoDB tasks an execution scheduled at or before ``ended_at_ms``, from its
    ``GetExecutionHistory`` events (boto3's shape, read with ``includeExecutionData``).

    ``events`` is consumed once, lazily: pass a generator over the pages and only these
    tasks' parameters - a few hundred bytes each - are kept, however large the execution's
    input or its history. Raises :class:`HistoryUnreadable` for a DynamoDB task whose
    parameters the history does not show.
    """
    found = []
    for event in events:
        details = event.get("taskScheduledEventDetails") or {}
        if (
            event.get("type") != "TaskScheduled"
            or "dynamodb" not in str(details.get("resourceType", ""))
            or _epoch_ms(event["timestamp"]) > ended_at_ms
        ):
            continue
        if not isinstance(details.get("parameters"), str):
            raise HistoryUnreadable(
                f"history event {event.get('id')} ({details.get('resource')}) shows no parameters: "
                "read the history with includeExecutionData"
            )
        found.append(ScheduledTask(str(details.get("resource")), json.loads(details["parameters"])))
    return found


def acquisitions_in_history(tasks: Iterable[ScheduledTask], *, table_name: str) -> list[tuple[str, str]]:
    """``(stored key, owner)`` of every acquisition the execution *attempted* on
    ``table_name`` among ``tasks`` (see :func:`dynamodb_tasks_scheduled`): each task whose
    parameters are this protocol's ACQUIRE - alone, after a record lock's "record exists"
    clause, or each update of a multi-key acquire's ``TransactWriteItems`` - once each, in
    history order.

    Attempts, not successes: an acquire whose response was lost when the execution was
    stopped succeeded without a ``TaskSucceeded``. Retiring an attempt that never held the
    lock is a no-op (RETIRE names its exact owner). The history is the execution's own
    record, read after it ended: unlike an index, it cannot lag.
    """
    found: dict[tuple[str, str], None] = {}
    for task in tasks:
        if task.resource == "updateItem":
            updates = [task.parameters]
        elif task.resource == "transactWriteItems":
            updates = [entry.get("Update") for entry in task.parameters.get("TransactItems", [])]
        else:
            continue
        for update in updates:
            if (
                isinstance(update, Mapping)
                and ACQUIRE.condition in str(update.get("ConditionExpression", ""))
                and update.get("TableName") == table_name
            ):
                (key,) = update["Key"].values()  # the lock's item: a partition key only
                found[(key["S"], update["ExpressionAttributeValues"][":me"]["S"])] = None
    return list(found)
