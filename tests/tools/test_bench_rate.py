"""``tools.bench_rate``'s accounting (the burst itself runs in ``make bench-rate``): where an
entry's lateness comes from, and the verdict naming what broke a bound."""

from __future__ import annotations

import datetime
import json

from locked_workflow.state_machines import rate_protocol as rate
from tools.bench_rate import GUARD, TURN, WORK, bounds_broken, lateness, most_in_a_window, turns


def event(ms: float, kind: str, name: str | None = None, **details) -> dict:
    e = {"type": kind, "timestamp": datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc), **details}
    if kind.endswith("StateEntered"):
        e["stateEnteredEventDetails"] = {"name": name}
    elif kind.endswith("StateExited"):
        e["stateExitedEventDetails"] = {"name": name}
    return e


def admitted(ms: float, reserved_ms: int) -> list[dict]:
    output = json.dumps({"Attributes": {rate.ADMITTED_AT: {"N": str(reserved_ms)}}})
    return [event(ms, "TaskStateEntered", "Lock.Admit"),
            event(ms + 5, "TaskSucceeded", taskSucceededEventDetails={"output": output}),
            event(ms + 6, "TaskStateExited", "Lock.Admit")]


def waited(entered_ms: float, exited_ms: float, guard_ms: float) -> list[dict]:
    return [event(entered_ms, "WaitStateEntered", TURN), event(exited_ms, "WaitStateExited", TURN),
            event(guard_ms, "ChoiceStateEntered", GUARD)]


class Run:
    def __init__(self, history: list[dict]) -> None:
        self.history = history


#: A run whose first Wait (10 s given, until 10,000) woke 4 s late - its permit given up - and
#: whose second (58 s given) woke 0.1 s late: the rounding to the second is 0.4 s of it.
LATE_THEN_ON_TIME = Run(
    admitted(0, 10_000) + waited(100, 14_100, 14_200)
    + admitted(14_300, 72_000) + waited(14_400, 72_500, 72_600) + [event(72_700, "ParallelStateEntered", WORK)])


def test_each_admissions_wait_is_split_into_the_locks_rounding_and_the_runtimes_oversleep():
    first, second = turns(LATE_THEN_ON_TIME.history)
    assert first == {"T": 10_000, "wait in": 100, "wait out": 14_100, "guard": 14_200}  # no work: given up
    assert second["T"] == 72_000 and second["work"] == 72_700
    figures = lateness([LATE_THEN_ON_TIME])
    assert figures["given up: overslept s"] == [4.0] and figures["given up: guard after T s"] == [4.2]
    assert figures["Waits out over 1 s after T"] == 1
    # p50 / p90 / max over both Waits: 0.1 s and 4.0 s overslept
    assert figures["overslept p50/p90/max s"] == "0.10 / 4.00 / 4.00"


def test_negative_control_a_wait_that_woke_on_time_has_nothing_overslept():
    on_time = Run(admitted(0, 10_000) + waited(100, 10_100, 10_150) + [event(10_200, "ParallelStateEntered", WORK)])
    figures = lateness([on_time])
    assert figures["given up: overslept s"] == [] and figures["Waits out over 1 s after T"] == 0
    assert figures["overslept p50/p90/max s"] == "0.00 / 0.00 / 0.00"


def row(**changes) -> dict:
    base = {"key": "k", "not admitted": 0, "most per window (reserved)": 10, "most per window (entries)": 10,
            "rate per period": 9.69, "ideal rate per period": 10.0, "permits given up": 0,
            "given up: overslept s": [], "load average": "1.0 mean, 0.9-1.1"}
    return {**base, **changes}


def test_a_burst_within_its_bounds_breaks_none():
    assert bounds_broken(row(), limit=10, tolerance=0.05) == []


def test_negative_control_a_rate_under_the_tolerance_says_which_permits_were_given_up_and_why():
    (broken,) = bounds_broken(row(**{"rate per period": 9.23, "permits given up": 1,
                                     "given up: overslept s": [2.9]}), limit=10, tolerance=0.05)
    assert "1 permits given up" in broken and "[2.9]" in broken and "load average" in broken
    ended = {"SUCCEEDED": 198, "FAILED Lock.Timeout": 2}
    assert bounds_broken(row(**{"most per window (entries)": 11, "not admitted": 2, "ended": ended}),
                         limit=10, tolerance=0.05) == [f"2 runs not admitted ({ended})", "11 entries in a window"]


def test_a_burst_with_no_run_admitted_says_how_they_ended():
    ended = {"FAILED Lock.Timeout": 3}
    assert bounds_broken({"key": "k", "not admitted": 3, "ended": ended}, limit=10, tolerance=0.05) == [
        f"3 runs not admitted ({ended})"]


def test_the_most_in_a_window_is_half_open():
    assert most_in_a_window([0, 1000, 2000], 1000) == 1
    assert most_in_a_window([0, 999, 2000], 1000) == 2


def test_the_permits_a_run_that_timed_out_gave_up_count_too():
    from tools.bench_rate import measure

    admitted_run = Run(LATE_THEN_ON_TIME.history)
    admitted_run.output = {"admittedAt": 72_000}
    # gave its permit up (late out of its Wait), then found its next permit past max_wait
    timed_out = Run(admitted(0, 11_000) + waited(100, 15_000, 15_100) + [event(15_200, "FailStateEntered", "Lock.Timeout")])
    alone = measure([admitted_run], limit=10, period_ms=60_000)
    assert alone["permits given up"] == 1 and alone["given up: overslept s"] == [4.0]
    every = measure([admitted_run], limit=10, period_ms=60_000, every=[admitted_run, timed_out])
    assert every["permits given up"] == 2 and every["given up: overslept s"] == [4.0, 3.9]
    assert every["runs"] == 1 and every["rate per period"] == alone["rate per period"]
