"""The demo's and the bench's pure pieces on synthetic histories, and a small demo run.

The history events below have the shape ``GetExecutionHistory`` returns (only the fields
the scenario helpers read); timestamps are epoch ms.
"""

from __future__ import annotations

import json

import pytest

from tools import scenario
from tools.bench import SweepEntry, choose_policy, parse_policy
from tools.scenario import CriticalSection
from locked_workflow.state_machines.lock_protocol import WaitPolicy

ARN = "arn:aws:states:us-east-1:123456789012:execution:sm:run-1"


def entered(kind: str, name: str, ts: int) -> dict:
    return {"type": f"{kind}StateEntered", "timestamp": ts, "stateEnteredEventDetails": {"name": name}}


def exited(kind: str, name: str, ts: int, **assigned) -> dict:
    details = {"name": name}
    if assigned:
        details["assignedVariables"] = {k: json.dumps(v) for k, v in assigned.items()}
    return {"type": f"{kind}StateExited", "timestamp": ts, "stateExitedEventDetails": details}


def task(kind: str, ts: int, resource_type: str = "dynamodb") -> dict:
    key = {"TaskScheduled": "taskScheduledEventDetails", "TaskFailed": "taskFailedEventDetails"}.get(kind)
    event = {"type": kind, "timestamp": ts}
    if key:
        event[key] = {"resourceType": resource_type, "resource": "updateItem"}
    return event


def locked_history(*, start: int = 0, fence: int = 1, held_polls: int = 0, key: str = "customer#c-1") -> list[dict]:
    """Acquire (failing ``held_polls`` times, with a Wait each), Work, Release."""
    t = start
    events = [{"type": "ExecutionStarted", "timestamp": t}]
    for _ in range(held_polls):
        events += [entered("Task", "Lock.Acquire", t + 1), task("TaskScheduled", t + 2), task("TaskStarted", t + 2),
                   task("TaskFailed", t + 5), exited("Task", "Lock.Acquire", t + 6, lockWait={"polls": 1}),
                   entered("Choice", "Lock.Held?", t + 6), exited("Choice", "Lock.Held?", t + 6),
                   entered("Wait", "Lock.Wait", t + 7), exited("Wait", "Lock.Wait", t + 1007)]
        t += 1007
    lock = {"key": key, "owner": ARN, "fence": fence, "acquiredAt": t + 2, "expiresAt": t + 999_999}
    events += [
        entered("Task", "Lock.Acquire", t + 1), task("TaskScheduled", t + 2), task("TaskStarted", t + 2),
        task("TaskSucceeded", t + 10), exited("Task", "Lock.Acquire", t + 12, lock=lock, lockWait=None),
        entered("Task", "Apply update", t + 12), task("TaskScheduled", t + 13, "lambda"),
        task("TaskStarted", t + 13), task("TaskSucceeded", t + 300), exited("Task", "Apply update", t + 301),
        entered("Task", "Lock.Release", t + 301), task("TaskScheduled", t + 302), task("TaskStarted", t + 303),
        task("TaskSucceeded", t + 311), exited("Task", "Lock.Release", t + 312),
        {"type": "ExecutionSucceeded", "timestamp": t + 312},
    ]
    return events


def section(key: str, start: int, end: int, fence: int | None = None, name: str = "") -> CriticalSection:
    return CriticalSection(execution=name or f"{key}-{start}", key=key, start_ms=start, end_ms=end, fence=fence)


# --------------------------------------------------------------------------------------
# Critical sections from a history
# --------------------------------------------------------------------------------------


def test_critical_section_is_the_protected_state_with_the_lock_around_it():
    (found,) = scenario.critical_sections(ARN, locked_history(start=1000, fence=7, held_polls=2),
                                          protected_state="Apply update")
    acquire_at = 1000 + 2 * 1007
    assert (found.key, found.fence, found.lock_key) == ("customer#c-1", 7, "customer#c-1")
    assert (found.start_ms, found.end_ms) == (acquire_at + 12, acquire_at + 301)
    assert found.acquired_ms == acquire_at + 2  # $lock.acquiredAt
    assert found.acquire_acked_ms == acquire_at + 10  # the winning acquire's TaskSucceeded
    assert (found.release_sent_ms, found.released_ms) == (acquire_at + 303, acquire_at + 311)
    assert found.completed


def test_critical_section_without_a_lock_takes_the_given_key_and_has_no_fence():
    history = [
        {"type": "ExecutionStarted", "timestamp": 0},
        entered("Task", "Apply update", 5), task("TaskScheduled", 6, "lambda"),
        task("TaskSucceeded", 200), exited("Task", "Apply update", 201),
        {"type": "ExecutionSucceeded", "timestamp": 201},
    ]
    (found,) = scenario.critical_sections(ARN, history, protected_state="Apply update", key="c-9")
    assert (found.key, found.fence, found.acquire_acked_ms, found.start_ms, found.end_ms) == ("c-9", None, None, 5, 201)


def test_work_that_failed_ends_its_section_when_the_catch_releases():
    history = locked_history()[:-7]  # cut after the work's TaskSucceeded, then fail instead
    history[-1] = {"type": "TaskFailed", "timestamp": 250, "taskFailedEventDetails": {"resourceType": "lambda"}}
    history += [entered("Task", "Lock.ReleaseAfterError", 260), task("TaskStarted", 261), task("TaskSucceeded", 270)]
    (found,) = scenario.critical_sections(ARN, history, protected_state="Apply update")
    assert not found.completed
    assert (found.end_ms, found.release_sent_ms, found.released_ms) == (260, 261, 270)


# --------------------------------------------------------------------------------------
# Invariants
# --------------------------------------------------------------------------------------


def test_overlap_detection_flags_an_overlapping_pair():
    first, second = section("c-1", 0, 100), section("c-1", 99, 200)
    assert scenario.find_overlaps([second, first]) == [(first, second)]


def test_overlap_detection_passes_serial_sections_and_other_keys():
    serial = [section("c-1", 0, 100), section("c-1", 100, 200), section("c-1", 250, 300)]
    other_key_at_same_time = [section("c-2", 50, 150)]
    assert scenario.find_overlaps(serial + other_key_at_same_time) == []


def test_overlap_detection_finds_a_section_inside_a_long_one_past_its_neighbour():
    long, short, inner = section("k", 0, 1000), section("k", 10, 20), section("k", 500, 600)
    assert set(map(lambda p: (p[0].start_ms, p[1].start_ms), scenario.find_overlaps([long, short, inner]))) == {
        (0, 10), (0, 500)}


def test_fence_order_flags_a_decrease_and_a_repeat():
    ordered = [section("c-1", 0, 10, 1), section("c-1", 20, 30, 2), section("c-1", 40, 50, 3)]
    assert scenario.fence_order_violations(ordered) == []
    decrease = [section("c-1", 0, 10, 2), section("c-1", 20, 30, 1)]
    assert [(a.fence, b.fence) for a, b in scenario.fence_order_violations(decrease)] == [(2, 1)]
    repeat = [section("c-1", 0, 10, 4), section("c-1", 20, 30, 4)]
    assert len(scenario.fence_order_violations(repeat)) == 1


def test_fence_order_is_per_key():
    mixed = [section("a", 0, 10, 5), section("b", 20, 30, 1), section("a", 40, 50, 6)]
    assert scenario.fence_order_violations(mixed) == []


def test_lost_updates_compare_runs_with_the_record():
    assert scenario.lost_updates({"c-1": 20, "c-2": 2}, {"c-1": 1, "c-2": 2}) == {"c-1": 19, "c-2": 0}
    assert scenario.lost_updates({"c-3": 2}, {}) == {"c-3": 2}  # no record at all: all lost


# --------------------------------------------------------------------------------------
# Costs
# --------------------------------------------------------------------------------------


def test_transitions_count_states_entered():
    counted = scenario.transition_count(locked_history(held_polls=2))
    # 2 polls x (Acquire, Held?, Wait) + Acquire, Apply update, Release
    assert (counted.entered, counted.retries, counted.billed) == (9, 0, 9)


def test_transitions_count_retry_attempts_within_a_state():
    history = [
        entered("Task", "Baseline.Acquire", 0),
        task("TaskScheduled", 1), task("TaskFailed", 2),
        task("TaskScheduled", 1002), task("TaskFailed", 1003),
        task("TaskScheduled", 3003), task("TaskSucceeded", 3004),
        exited("Task", "Baseline.Acquire", 3005),
        entered("Task", "Work", 3005), task("TaskScheduled", 3006, "lambda"), task("TaskSucceeded", 5000),
    ]
    counted = scenario.transition_count(history)
    assert (counted.entered, counted.retries, counted.billed) == (2, 2, 4)
    calls = scenario.dynamodb_calls(history)
    assert (calls.total, calls.failed) == (3, 2)  # the Lambda's task is not a DynamoDB call


def test_transitions_count_interleaved_parallel_branches_by_their_event_chains():
    """Two branches' tasks interleave: each scheduled once, so no retry (counting by the latest
    entry called the second branch's first attempt a retry of the first's)."""
    events = [
        ("ParallelStateEntered", 0, "Hold"), ("TaskStateEntered", 1, "Work"), ("TaskStateEntered", 1, "Presence"),
        ("TaskScheduled", 2, None), ("TaskScheduled", 3, None), ("TaskStarted", 4, None), ("TaskFailed", 6, None),
        ("TaskScheduled", 7, None),  # the Work's retry
    ]
    history = []
    for n, (kind, previous, name) in enumerate(events, start=1):
        event = {"id": n, "previousEventId": previous, "type": kind, "timestamp": n}
        if name:
            event["stateEnteredEventDetails"] = {"name": name}
        history.append(event)
    counted = scenario.transition_count(history)
    assert (counted.entered, counted.retries, counted.billed) == (3, 1, 4)


def test_handoff_gap_is_next_acquire_acknowledged_minus_release_sent():
    a = CriticalSection("a", "k", 100, 200, 1, acquire_acked_ms=90, release_sent_ms=210)
    b = CriticalSection("b", "k", 500, 600, 2, acquire_acked_ms=480, release_sent_ms=610)
    assert scenario.handoff_gaps_ms([b, a]) == [480 - 210]


def test_load_summary_of_two_serialized_runs():
    runs = [
        scenario.run_metrics("r1", locked_history(start=0, fence=1), protected_state="Apply update"),
        scenario.run_metrics("r2", locked_history(start=0, fence=2, held_polls=1), protected_state="Apply update"),
    ]
    summary = scenario.summarize_load(runs)
    assert (summary.runs, summary.succeeded, summary.overlaps, summary.fence_violations) == (2, 2, 0, 0)
    assert summary.makespan_s == pytest.approx((1007 + 312) / 1000)
    assert summary.transitions_per_run == pytest.approx((3 + 6) / 2)
    assert summary.dynamodb_per_run == pytest.approx((2 + 3) / 2)
    assert summary.wait_s.max == pytest.approx((1007 + 10) / 1000)
    assert summary.fairness == pytest.approx(summary.wait_s.max / summary.wait_s.mean)


# --------------------------------------------------------------------------------------
# The bench's choice of a wait policy
# --------------------------------------------------------------------------------------


def entry(policy: WaitPolicy, ratio: float, transitions: float) -> SweepEntry:
    return SweepEntry(policy, ratio, transitions, 0, 0, 0, 0, 0, 1)


def test_sweep_picks_the_fewest_transitions_among_policies_meeting_the_makespan_target():
    fast_but_costly = entry(WaitPolicy(1, 1, 1), 1.05, 20)
    cheap_and_slow = entry(WaitPolicy(1, 2, 8), 1.6, 6)
    balanced = entry(WaitPolicy(1, 1.5, 4), 1.25, 9)
    assert choose_policy([fast_but_costly, cheap_and_slow, balanced]) is balanced
    assert choose_policy([cheap_and_slow]) is None


def test_wait_policy_argument():
    assert parse_policy("1,1.5,4,1") == WaitPolicy(1, 1.5, 4, True)
    assert parse_policy("2,2,8,0") == WaitPolicy(2, 2.0, 8, False)
    with pytest.raises(ValueError):
        parse_policy("1,2")


# --------------------------------------------------------------------------------------
# The demo, small, end to end on the local runtime
# --------------------------------------------------------------------------------------


def test_demo_with_the_lock_reports_no_overlap_and_no_lost_update(tmp_path, capsys):
    from tools import demo

    png = tmp_path / "timeline.png"
    code = demo.main(["--runs", "3", "--customers", "1", "--work-ms", "100", "--out", str(png)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "runs                 5: 5 succeeded, 0 failed" in out
    assert "overlapping critical sections: 0 pair(s)" in out
    assert "lost updates         0" in out
    assert "fences in order      yes" in out
    assert "c-1      1 2 3" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_demo_without_the_lock_shows_overlaps_and_lost_updates(tmp_path):
    from tools import demo

    report = demo.run_demo(lock_enabled=False, runs=4, customers=0, work_ms=300, out=None, progress=False)
    assert report.succeeded == 4
    assert report.overlaps, "without the lock, 4 simultaneous read-modify-writes must overlap"
    assert report.lost_total > 0
    assert report.sections and all(s.fence is None for s in report.sections)


def test_progress_writes_plain_lines_when_the_output_is_not_a_terminal():
    import io

    from tools.scenario import stderr_progress

    out = io.StringIO()  # not a terminal
    draw = stderr_progress("runs", file=out)
    for done in range(0, 101):
        draw(done, 100, {"RUNNING": 100 - done, "SUCCEEDED": done})
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert 4 <= len(lines) <= 6 and lines[-1].startswith("runs 100/100 done, 0 running"), lines
