"""The fair benchmark's own figures (no runtime): overtakes and percentiles."""

from constructs_lib.local.bench_fair import overtakes, percentile


def test_overtakes_count_later_arrivals_granted_first_beyond_the_resolution():
    in_order = [(0, 10), (200, 20), (400, 30)]
    assert overtakes(in_order) == 0
    assert overtakes([(0, 30), (200, 20), (400, 10)]) == 3
    assert overtakes([(0, 20), (50, 10)]) == 0 and overtakes([(0, 20), (50, 10)], 1) == 1  # within 100 ms


def test_percentiles_of_handoff_gaps():
    assert percentile([5, 1, 3], 50) == 3 and percentile(list(range(101)), 99) == 99
    assert percentile([], 50) != percentile([], 50)  # nan


def test_a_small_slice_of_the_fair_benchmark():
    from constructs_lib.local.bench_fair import run

    results = run(works=[0.3], runs=[4], backend="moto")
    # the fair lock's wake Map is its one extra transition over the polling lock, uncontended
    extra = results["uncontended_extra_transitions"]
    assert extra["Fair"] == extra["Polling"] + 1
    loads = {r["lock"]: r for r in results["loads"]}
    assert set(loads) == {"Polling", "Fair", "Baseline"}
    for r in loads.values():
        assert r["succeeded"] == r["runs"] == 4 and r["overlaps"] == 0 and r["fence_violations"] == 0
    assert loads["Fair"]["overtakes"] == 0 and loads["Fair"]["waited"] >= 2
