"""The fault matrix's table: its fault columns, which apply to which row (or why not), and the
situation each workflow row's cells bring their participants into so the row's state runs.

:data:`SITUATIONS` names every lock state of every kind, by hand: a state added to a kind
(a new row of :mod:`tools.matrix.rows`) has no situation until someone says how to reach it,
and :func:`uncovered` - run by ``tests/tools/test_fault_matrix_rows.py`` on every synth - reports it, so
a new state cannot ship without a row in the matrix.

The parts: the columns (:mod:`tools.matrix.columns`); the first situations
(:mod:`tools.matrix.situations`, which says what a situation's parts do); those trial passes
found (:mod:`tools.matrix.trials`); those placed by gates (:mod:`tools.matrix.placed`); the
rows not reached, with why (:mod:`tools.matrix.unreached`).
"""

from __future__ import annotations

from typing import Iterable

from tools.matrix import placed, situations, trials
from tools.matrix.columns import CLIENT_KINDS, COLUMN, COLUMNS, TRANSACTIONAL_KINDS, Column  # noqa: F401
from tools.matrix.rows import Row
from tools.matrix.unreached import NOT_REACHED, UNREACHABLE, UNREACHABLE_WHY  # noqa: F401

def not_applicable(row: Row, column: Column) -> str:
    """Why ``column`` does not apply to ``row`` ("" when it does); every column of a row no
    participant of the matrix can reach (:func:`unreachable`) says why."""
    if unreachable(row):
        return UNREACHABLE_WHY[unreachable(row)]
    if column.name == "conflict":
        if not row.writes:
            return "not a DynamoDB write (reads and Step Functions calls never meet a transaction conflict)"
        if row.kind not in TRANSACTIONAL_KINDS:
            return f"no transaction writes the items of a {row.kind} lock"
    if row.kind == "janitor" and column.then:
        return "the janitor is a Lambda with no execution: its crash right after a call is the lost response"
    if row.kind in CLIENT_KINDS and column.then in ("time out", "stop, redrive"):
        return "a client has no execution to time out or redrive (its crash right after a call: stop-after)"
    return ""


def cells(rows: Iterable[Row]) -> list[tuple[Row, Column]]:
    """Every applicable (row, column) of ``rows``."""
    return [(row, column) for row in rows for column in COLUMNS if not not_applicable(row, column)]


def situation(row: Row) -> str | None:
    """How a cell of ``row`` reaches its state (``None``: nobody said - the row is uncovered)."""
    if row.kind in CLIENT_KINDS or row.kind == "janitor":
        if row.state in SITUATIONS.get(row.kind, {}):
            return SITUATIONS[row.kind][row.state]
        return "dead-holder" if row.kind == "janitor" else "client-" + ("contend" if row.service == "dynamodb" else "waker")
    return SITUATIONS.get(row.kind, {}).get(row.state)


def unreachable(row: Row) -> str:
    """The key of :data:`UNREACHABLE_WHY` saying why no cell reaches ``row`` ("" when one does)."""
    return UNREACHABLE.get(row.kind, {}).get(row.state, "")


def uncovered(rows: Iterable[Row]) -> list[str]:
    """Rows with no cell definition (no situation), and situations of states that are gone."""
    rows = list(rows)
    missing = [f"{row.name}: no situation in tools/matrix/table.py SITUATIONS" for row in rows if situation(row) is None]
    seen = {(row.kind, row.state) for row in rows}
    kinds = {row.kind for row in rows}
    stale = [f"{kind}:{state}: in {name} but no such state" for name, table in (("SITUATIONS", SITUATIONS),
                                                                               ("UNREACHABLE", UNREACHABLE))
             for kind, states in table.items() if kind in kinds for state in states if (kind, state) not in seen]
    return missing + stale



SITUATIONS: dict[str, dict[str, str]] = {kind: dict(states) for kind, states in situations.FIRST_PASS.items()}
for _pass in (trials.FOUND, trials.REACHED, trials.CLIENT_LIVENESS, trials.CLIENT_GIVES_UP):
    for _kind, _states in _pass.items():
        SITUATIONS.setdefault(_kind, {}).update(_states)
#: (the coalescing lock's rows keep the fair lock's situations of before: a coalescing third
#: participant supersedes the second, which the fair lock's placed orders do not foresee)
SITUATIONS['coalesce'] = placed.coalescing(dict(SITUATIONS['fair']))
for _kind, _states in placed.PLACED.items():
    SITUATIONS.setdefault(_kind, {}).update(_states)
