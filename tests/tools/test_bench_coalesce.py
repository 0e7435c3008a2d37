"""``tools.bench_coalesce``'s verdict (the burst itself runs in ``make bench-coalesce``)."""

from __future__ import annotations

from tools.bench_coalesce import broken, most_at_once


def figures(work_runs: int, after: int = 0, superseded_inside: int = 0, at_once: int = 1,
            fences_rise: bool = True) -> dict:
    return {"Newest": {"work runs": work_runs, "arrived after the work began": after,
                       "superseded entered the work": superseded_inside,
                       "most at work at once": at_once, "fences rise": fences_rise, "fences": [1, 2]}}


def test_the_holder_and_the_newest_pass():
    assert broken(figures(2)) == []


def test_runs_that_arrived_after_the_work_began_may_each_run_once():
    assert broken(figures(4, after=2)) == []


def test_negative_control_more_work_runs_than_the_bound_or_a_superseded_run_at_work_fail():
    assert broken(figures(3)) and broken(figures(5, after=2)) and broken(figures(1))
    assert broken(figures(2, superseded_inside=1))


def test_negative_control_two_at_work_at_once_or_a_fence_that_did_not_rise_fail():
    assert broken(figures(2, at_once=2)) and broken(figures(2, fences_rise=False))


def test_the_most_at_work_at_once_counts_overlaps_not_touching_ends():
    assert most_at_once([(0, 10), (10, 20), (20, 30)]) == 1  # one after the other
    assert most_at_once([(0, 10), (9, 20)]) == 2
    assert most_at_once([(0, 10), (1, 2), (1.5, 3)]) == 3
    assert most_at_once([]) == 0
