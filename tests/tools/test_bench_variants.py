"""A small slice of ``make bench-variants``: every workload runs and every run succeeds."""

from __future__ import annotations


def test_bench_variants_runs_every_workload():
    import argparse

    from tools.bench_variants import run

    rows = run(argparse.Namespace(accounts=3, transfers=3, work_seconds=1, record_runs=2,
                                  semaphore_runs=3, seed=1, backend="moto"))
    assert len(rows) == 5
    for workload, succeeded, makespan, transitions, calls in rows:
        done, runs = succeeded.split("/")
        assert done == runs, workload
        assert float(makespan) > 0 and float(transitions) >= 4 and float(calls) >= 2
    # the record updates were not lost with either lock
    assert "(n = 2)" in rows[2][0] and "(n = 2)" in rows[3][0]
