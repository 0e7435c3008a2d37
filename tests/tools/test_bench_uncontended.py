"""``make bench-uncontended`` (``tools/bench_uncontended.py``): every lock state on a kind's
uncontended path says what it buys, and the counts the docs state hold."""

from __future__ import annotations

import pytest

from tools import bench_uncontended as bench


@pytest.fixture(scope="module")
def rows() -> dict[str, bench.Row]:
    return {row.kind: row for row in bench.measure("moto")}


def test_every_kind_runs_uncontended_and_each_extra_transition_is_a_lock_state_with_a_reason(rows):
    assert sorted(rows) == sorted([*bench.KIND_ORDER, "section"])
    for kind, row in rows.items():
        assert row.status == "SUCCEEDED", (kind, row)
        assert row.extra == len(row.states), (kind, row.extra, row.states)  # nothing billed but lock states
        assert row.unexplained == [], (kind, row.unexplained)


def test_the_counts_the_docs_state(rows):
    # docs/protocol.md: "3 extra state transitions with a lone task (the section's Parallel,
    # acquire, release)"; docs/fair-lock.md: the polling lock is cheaper uncontended than the fair one
    assert [rows["mutex"].extra, rows["mutex"].dynamodb] == [3, 2]
    assert rows["fair"].extra == rows["mutex"].extra + 1
    assert rows["semaphore"].extra == rows["mutex"].extra
    assert rows["section"].stepfunctions == 1  # the presence branch's dismissal


def test_negative_control_a_state_without_a_reason_is_reported(rows):
    why = {k: v for k, v in bench.WHY.items() if k != "fair:Release.Take"}
    row = rows["fair"]
    reasons = [(s, bench.reason("fair", s, why)) for s in row.states]
    unexplained = bench.Row(row.kind, row.status, row.extra, row.dynamodb, row.stepfunctions, row.states, reasons)
    assert unexplained.unexplained == ["Release.Take"]
    assert "UNEXPLAINED" in bench.report([unexplained])
    # the coalescing kind shares the fair lock's reasons (FAMILY), so it loses this one too
    assert bench.reason("coalesce", "Release.Take", why) is None
