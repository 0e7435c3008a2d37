"""The fair benchmark's own figures (no runtime): overtakes and percentiles."""

from tools.bench_fair import overtakes, percentile


def test_overtakes_count_later_arrivals_granted_first_beyond_the_resolution():
    in_order = [(0, 10), (200, 20), (400, 30)]
    assert overtakes(in_order) == 0
    assert overtakes([(0, 30), (200, 20), (400, 10)]) == 3
    assert overtakes([(0, 20), (50, 10)]) == 0 and overtakes([(0, 20), (50, 10)], 1) == 1  # within 100 ms


def test_ticket_overtakes_count_later_tickets_granted_first():
    from tools.bench_fair import ticket_overtakes

    assert ticket_overtakes([(1, 5), (2, 6), (3, 7)]) == 0
    assert ticket_overtakes([(1, 7), (2, 6), (3, 5)]) == 3


def test_percentiles_of_handoff_gaps():
    assert percentile([5, 1, 3], 50) == 3 and percentile(list(range(101)), 99) == 99
    assert percentile([], 50) != percentile([], 50)  # nan


def test_a_small_slice_of_the_fair_benchmark():
    from tools.bench_fair import run

    results = run(works=[0.3], runs=[4], backend="moto", floor_samples=3)
    # uncontended, the fair release takes the next row (none), releases and finds nobody queued:
    # 4 transitions over the polling lock's release
    extra = results["uncontended_extra_transitions"]
    assert extra["Fair"] == extra["Polling"] + 4
    assert results["floor_p50_ms"] > 0
    loads = {r["lock"]: r for r in results["loads"]}
    assert set(loads) == {"Polling", "Fair", "Baseline"}
    for r in loads.values():
        assert r["succeeded"] == r["runs"] == 4 and r["overlaps"] == 0 and r["fence_violations"] == 0
        assert r["wru_per_run"] >= 2 and r["dollars_per_run"] > 0  # an acquire and a release at least
    assert loads["Fair"]["overtakes"] == 0 and loads["Fair"]["waited"] >= 2
    assert loads["Fair"]["ticket_overtakes"] == 0  # granted in ticket order
