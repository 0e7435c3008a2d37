"""How a state of a definition is reached: the Catch edges on the way (the ``reach`` part of a
matrix situation, :mod:`tools.matrix.cells`).

A lock state behind a Catch runs only when the caught Task failed: a wake-up that failed, a
grant refused because its own earlier try applied (its response lost), a read that failed.
:func:`catch_path` finds, in a parsed definition, a way from ``StartAt`` to a state through
the fewest Catch edges (Next, Choice and Default edges are free; a Parallel's or a Map's
branches start from it); :func:`preparatory_faults` turns the Catch edges of that way that a
fault can take - those of Tasks in the row's own part of the definition (its name's prefix:
``Lock.Release.`` for ``Lock.Release.Recheck``) - into the faults that take them:

- a Catch that takes a transient error or ``States.ALL``: the Task's call fails before it
  applies (``5xx``), as often as its ``Retry`` tries it (each retry must fail too);
- a Catch of ``ConditionalCheckFailedException`` alone, on a write its ``Retry`` retries after a
  transient error: the write's response is lost (``lost``), so its retry, refused because its
  own first try applied, takes the Catch.

Catches of what only the scenario makes (a park's timeout or nudge, another participant's
write refusing mine - the fast path's ``Acquire`` refused by a holder -, the work's own
failure) are left to the situation.
"""

from __future__ import annotations

import heapq
import re
from typing import Any, Iterator, Mapping

#: The ``5xx`` column's error of a DynamoDB call and of a Step Functions call (an ``ErrorEquals``
#: names it with a prefix: ``DynamoDB.InternalServerError``), as ``table.COLUMNS`` has them.
FIVE_XX = ("InternalServerError", "ServiceUnavailable")
_ALL = "States.ALL"
_CONDITION_FAILED = "ConditionalCheckFailedException"
#: The fast path's write (``Lock.Acquire``): its refusal is the situation's contention, not a fault.
_ENTRY = ".Acquire"
#: A retrier's default ``MaxAttempts`` (Step Functions: 3).
_DEFAULT_ATTEMPTS = 3


def states(definition: Mapping[str, Any]) -> dict[str, dict]:
    """Every state of ``definition`` by name, into Parallel branches and Map item processors."""
    found: dict[str, dict] = {}

    def walk(level: Mapping[str, Any]) -> None:
        for name, state in level.items():
            found[name] = state
            for branch in state.get("Branches", []):
                walk(branch.get("States", {}))
            processor = state.get("ItemProcessor") or state.get("Iterator")
            if processor:
                walk(processor.get("States", {}))

    walk(definition.get("States", {}))
    return found


def _edges(state: Mapping[str, Any]) -> Iterator[tuple[str, tuple[str, ...] | None]]:
    """(next state, the Catch's ``ErrorEquals`` or None for a plain edge)."""
    if "Next" in state:
        yield state["Next"], None
    for choice in state.get("Choices", []):
        yield choice["Next"], None
    if "Default" in state:
        yield state["Default"], None
    for branch in state.get("Branches", []):
        yield branch["StartAt"], None
    processor = state.get("ItemProcessor") or state.get("Iterator")
    if processor:
        yield processor["StartAt"], None
    for catch in state.get("Catch", []):
        yield catch["Next"], tuple(catch["ErrorEquals"])


def catch_path(definition: Mapping[str, Any], target: str) -> list[tuple[str, tuple[str, ...]]]:
    """The Catch edges ``(Task, its ErrorEquals)`` of a way to ``target`` through the fewest of
    them ([] when none is needed); ``ValueError`` when no way leads there."""
    by_name = states(definition)
    start = definition["StartAt"]
    best: dict[str, int] = {start: 0}
    via: dict[str, tuple] = {start: ()}
    queue = [(0, start)]
    while queue:
        cost, name = heapq.heappop(queue)
        if cost > best[name]:
            continue
        for nxt, caught in _edges(by_name[name]):
            step = cost + (1 if caught else 0)
            if nxt not in best or step < best[nxt]:
                best[nxt], via[nxt] = step, via[name] + (((name, caught),) if caught else ())
                heapq.heappush(queue, (step, nxt))
    if target not in via:
        raise ValueError(f"`target` must be a state reachable in the definition, got: {target}")
    return list(via[target])


def _retries(state: Mapping[str, Any], code: str) -> int:
    """How many times ``state``'s ``Retry`` tries a call that failed with ``code`` again."""
    for retrier in state.get("Retry", []):
        if _ALL in retrier["ErrorEquals"] or any(name.endswith("." + code) for name in retrier["ErrorEquals"]):
            return int(retrier.get("MaxAttempts", _DEFAULT_ATTEMPTS))
    return 0


def preparatory_faults(definition: Mapping[str, Any], target: str) -> list[tuple[str, str, int]]:
    """``(Task, column name, times)``: the faults that take the Catch edges of
    :func:`catch_path` to ``target`` in its own part of the definition (module docstring)."""
    by_name = states(definition)
    prefix = target.rpartition(".")[0] + "."
    found = []
    for task, caught in catch_path(definition, target):
        state = by_name[task]
        if not task.startswith(prefix) or state.get("Type") != "Task" or "lambda" in str(state.get("Resource", "")) \
                or task.endswith(_ENTRY):
            continue
        code = FIVE_XX[1] if re.search(r":::(?:aws-sdk:)?(?:sfn|states):", str(state.get("Resource", ""))) else FIVE_XX[0]
        if _ALL in caught or any(name.endswith("." + code) for name in caught):
            found.append((task, "5xx", 1 + _retries(state, code)))
        elif all(name.endswith("." + _CONDITION_FAILED) for name in caught) and _retries(state, code):
            found.append((task, "lost", 1))
    return found
