"""``tools.matrix.run``'s ``--shard`` and ``--resume``: a full matrix run split across processes
(one interpreter lock each) and finished after a cut, without a cell lost or run twice."""

from __future__ import annotations

import json

import pytest

from tools.matrix import run, table
from tools.matrix.rows import Row

ROWS = [Row("mutex", f"Lock.S{i}", "dynamodb", "UpdateItem") for i in range(5)]
CELLS = [(row, column) for row in ROWS for column in table.COLUMNS[:3]]


def test_shards_partition_the_cells() -> None:
    parts = [run.shard(CELLS, f"{i}/3") for i in (1, 2, 3)]
    assert sorted(map(len, parts)) == [5, 5, 5]
    assert sorted((r.state, c.name) for part in parts for r, c in part) == sorted((r.state, c.name) for r, c in CELLS)
    with pytest.raises(SystemExit, match="`--shard` must be I/N"):
        run.shard(CELLS, "0/3")


def test_resume_leaves_out_settled_cells_and_runs_violated_ones_again(tmp_path) -> None:
    log = tmp_path / "m.moto"
    done, violated = CELLS[0], CELLS[1]
    records = [{"kind": r.kind, "state": r.state, "service": r.service, "operation": r.operation, "column": c.name,
                "verdict": verdict} for (r, c), verdict in ((done, "ok"), (violated, "VIOLATED*"), (CELLS[2], "not reached"))]
    log.write_text("".join(json.dumps(record) + "\n" for record in records))
    left = run.unsettled(CELLS, log)
    assert done not in left and CELLS[2] not in left and violated in left
    assert len(left) == len(CELLS) - 2
    assert run.unsettled(CELLS, tmp_path / "none") == CELLS  # (no log yet: every cell)
