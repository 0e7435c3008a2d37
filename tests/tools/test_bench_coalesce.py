"""``tools.bench_coalesce``'s verdict (the burst itself runs in ``make bench-coalesce``)."""

from __future__ import annotations

from tools.bench_coalesce import broken


def figures(work_runs: int, after: int = 0, superseded_inside: int = 0) -> dict:
    return {"Newest": {"work runs": work_runs, "arrived after the work began": after,
                       "superseded entered the work": superseded_inside}}


def test_the_holder_and_the_newest_pass():
    assert broken(figures(2)) == []


def test_runs_that_arrived_after_the_work_began_may_each_run_once():
    assert broken(figures(4, after=2)) == []


def test_negative_control_more_work_runs_than_the_bound_or_a_superseded_run_at_work_fail():
    assert broken(figures(3)) and broken(figures(5, after=2)) and broken(figures(1))
    assert broken(figures(2, superseded_inside=1))
