"""The fault matrix (``make matrix``): its rows are every lock state of every kind, read from
the synthesized definitions, and every call of the clients and the janitor; a state without a
row fails here. A seeded slice of its cells runs here too (``MATRIX_SEED``)."""

from __future__ import annotations

import copy

import pytest

from tools.matrix import rows as matrix_rows, table
from tools.matrix.stack import MACHINES, build_stack


@pytest.fixture(scope="module")
def synthesized():
    from locked_workflow.testing.synth import synth_app

    return synth_app(lambda app: build_stack(app, "Matrix"))


@pytest.fixture(scope="module")
def definitions(synthesized):
    return matrix_rows.definitions(synthesized.template, MACHINES)


def _rows(definitions) -> list[matrix_rows.Row]:
    return [row for kind, definition in definitions.items() for row in matrix_rows.task_rows(kind, definition)]


def test_every_lock_state_of_every_kind_has_a_row_and_its_cells(definitions):
    rows = _rows(definitions)
    assert table.uncovered(rows) == []
    assert {row.kind for row in rows} == set(MACHINES)
    calls = {(row.service, row.operation, row.callback) for row in rows}
    # what the walk must find: the lock's writes and reads, transactions, callbacks, Step Functions calls
    assert {("dynamodb", "UpdateItem", False), ("dynamodb", "GetItem", False), ("dynamodb", "DeleteItem", False),
            ("dynamodb", "TransactWriteItems", False), ("dynamodb", "TransactWriteItems", True),
            ("dynamodb", "UpdateItem", True), ("dynamodb", "TransactGetItems", False),
            ("stepfunctions", "SendTaskSuccess", False), ("stepfunctions", "DescribeExecution", False),
            ("stepfunctions", "SendTaskHeartbeat", False)} <= calls
    # states inside Parallel branches and Map item processors are rows too
    names = {row.name for row in rows}
    assert {"nested:Inner.Acquire", "multikey:Lock.ReleaseEachKey", "shared:Lock.Release.Handoff.FreeShared"} <= names
    every = rows + list(matrix_rows.CLIENT_CALLS) + list(matrix_rows.JANITOR_CALLS)
    cells = table.cells(every)
    assert {column.name for _, column in cells} == {column.name for column in table.COLUMNS}
    for row in every:  # each column applies, or says why not
        for column in table.COLUMNS:
            assert (row, column) in cells or table.not_applicable(row, column)
    print(f"matrix: {len(every)} rows ({len(rows)} states, {len(every) - len(rows)} client and janitor calls), "
          f"{len(cells)} cells")


def test_negative_control_a_new_state_or_a_dropped_row_is_reported(definitions, monkeypatch):
    """A state added to a kind (here inside a Parallel branch) has no cell until the table says
    how to reach it; a row dropped from the table is reported the same way."""
    changed = copy.deepcopy(definitions["nested"])
    branch = next(state for state in changed["States"].values() if state.get("Branches"))["Branches"][0]
    branch["States"]["Outer.Brand.New"] = {"Type": "Task", "Resource": "arn:aws:states:::dynamodb:updateItem", "End": True}
    rows = [row for kind, d in {**definitions, "nested": changed}.items() for row in matrix_rows.task_rows(kind, d)]
    assert table.uncovered(rows) == ["nested:Outer.Brand.New: no situation in tools/matrix/table.py SITUATIONS"]

    situations = copy.deepcopy(table.SITUATIONS)
    del situations["fair"]["Lock.Release.Wake"]
    monkeypatch.setattr(table, "SITUATIONS", situations)
    assert table.uncovered(_rows(definitions)) == ["fair:Lock.Release.Wake: no situation in tools/matrix/table.py SITUATIONS"]


def test_a_lambda_task_is_no_row_and_each_integration_is_named_as_botocore_names_it():
    definition = {"States": {
        "Work": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke"},
        "Write": {"Type": "Task", "Resource": "arn:TOKEN:states:::aws-sdk:dynamodb:transactWriteItems.waitForTaskToken"},
        "Wake": {"Type": "Task", "Resource": "arn:aws:states:::aws-sdk:sfn:sendTaskSuccess"},
        "Map": {"Type": "Map", "ItemProcessor": {"States": {
            "Read": {"Type": "Task", "Resource": "arn:aws:states:::dynamodb:getItem"}}}},
    }}
    assert matrix_rows.task_rows("k", definition) == [
        matrix_rows.Row("k", "Write", "dynamodb", "TransactWriteItems", True),
        matrix_rows.Row("k", "Wake", "stepfunctions", "SendTaskSuccess"),
        matrix_rows.Row("k", "Read", "dynamodb", "GetItem"),
    ]
