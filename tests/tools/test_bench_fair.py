"""The fair benchmark's own figures (no runtime): overtakes and percentiles."""

import time

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
    # uncontended, the fair release tries to take a parked row (none), then releases in one
    # write: 1 transition over the polling lock's release
    extra = results["uncontended_extra_transitions"]
    assert extra["Fair"] == extra["Polling"] + 1
    assert results["floor_p50_ms"] > 0
    loads = {r["lock"]: r for r in results["loads"]}
    assert set(loads) == {"Polling", "Fair", "Baseline"}
    for r in loads.values():
        assert r["succeeded"] == r["runs"] == 4 and r["overlaps"] == 0 and r["fence_violations"] == 0
        assert r["wru_per_run"] >= 2 and r["dollars_per_run"] > 0  # an acquire and a release at least
    assert loads["Fair"]["overtakes"] == 0 and loads["Fair"]["waited"] >= 2
    assert loads["Fair"]["ticket_overtakes"] == 0  # granted in ticket order
    assert all(r["steady_gaps"] <= r["runs"] - 1 and r["work_ratio"] > 0.9 for r in loads.values())
    # the runtime under each load, beside the lock's figures: the floor probe, DynamoDB requests
    # and their wait for the runtime's serialization, the tick thread, the handoff's parts
    for r in loads.values():
        under = r["under_load"]
        assert under["floor"]["all"]["n"] >= 1 and under["runtime"]["process_cpu_cores"] > 0
        assert under["runtime"]["steady"]["ddb_request_ms"]["n"] + under["runtime"]["burst"]["ddb_request_ms"]["n"] > 0
        assert under["runtime"]["steady"]["ddb_lock_wait_ms"]["n"] + under["runtime"]["burst"]["ddb_lock_wait_ms"]["n"] > 0
        assert under["runtime"]["burst"]["tick_late_ms"]["n"] + under["runtime"]["steady"]["tick_late_ms"]["n"] > 0
    fair = loads["Fair"]["under_load"]["handoff_parts"]
    grants = fair["burst"]["grant"]["n"] + fair["steady"]["grant"]["n"]
    assert grants == fair["burst"]["gap"]["n"] + fair["steady"]["gap"]["n"] >= 1  # every grant request found
    assert fair["burst"]["wake"]["n"] + fair["steady"]["wake"]["n"] == grants  # and its SendTaskSuccess


def test_covered_is_the_share_of_long_waits_during_which_the_lock_was_held():
    from tools.bench_fair import wait_covered

    # (released at, waited, held), ms: one request held it 0-200; another waited 0-200 and held
    # 200-210: its whole wait was covered
    assert wait_covered([(200, 0, 200), (210, 200, 10)], 0, 1000) == 1.0
    # a wait of 300 ms (0-300) during which the lock was held only 0-30: 10 %
    assert abs(wait_covered([(30, 0, 30), (310, 300, 10)], 0, 1000) - 0.1) < 1e-9
    assert wait_covered([(30, 0, 30)], 0, 1000) != wait_covered([(30, 0, 30)], 0, 1000)  # no long wait: nan


def test_extra_loads_name_work_runs_and_locks():
    from tools.bench_fair import parse_loads

    assert parse_loads("0.25:100, 2:10:Fair+Polling", ["Polling", "Fair"]) == [
        (0.25, 100, ("Polling", "Fair")), (2.0, 10, ("Fair", "Polling"))]
    assert parse_loads("", ["Fair"]) == []
    for bad in ("1", "0:10", "1:1", "1:10:Nope"):
        try:
            parse_loads(bad, ["Fair"])
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} accepted")


def test_steady_gaps_leave_out_handoffs_released_before_the_last_arrival():
    from tools.bench_fair import steady_gaps_ms
    from tools.scenario import CriticalSection

    def section(acked, sent):
        return CriticalSection(execution=f"e{acked}", key="k", start_ms=acked, end_ms=sent, acquire_acked_ms=acked,
                               release_sent_ms=sent)

    sections = [section(0, 10), section(30, 40), section(45, 50), section(60, 70)]
    assert steady_gaps_ms(sections, 0) == [20, 5, 10]
    assert steady_gaps_ms(sections, 35) == [5, 10]


def test_the_quiet_collector_keeps_the_objects_alive_out_of_full_collections_and_lets_them_back():
    import gc

    from tools.scenario import QuietCollector

    before = gc.get_freeze_count()
    with QuietCollector(period_s=0.01):
        entered = gc.get_freeze_count()
        made = [[i] for i in range(1000)]  # new objects: frozen by the thread's next round
        deadline = time.monotonic() + 60
        while gc.get_freeze_count() < entered + len(made) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert gc.get_freeze_count() >= entered + len(made)
    assert entered > before
    assert gc.get_freeze_count() == 0  # unfrozen on exit: collectable again
