"""The stress campaign's judge: the invariants checked on a :class:`~tools.stress_plan.Report`,
and its summary.

:func:`judge` checks invariants 1-9 of ``tools/stress.py``'s notes (the handoff bound of
invariant 7: :func:`handoff_bound_ms`); :func:`summary` prints the outcomes, the faults
injected and each invariant's result.
"""

from __future__ import annotations

from collections import Counter

from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines.errors import ERROR_LOST, ERROR_RECORD_TOO_LARGE, ERROR_SUPERSEDED, ERROR_TIMEOUT
from tools.rate_checks import crowded_windows
from tools.stress_history import now_ms, stored_key
from tools.stress_plan import Report, Run
from tools.stress_settle import NEXT_ARRIVAL_S
from tools.stress_stack import (
    ALLOWED_ERRORS,
    CLIENT_SHAPES,
    FAIR_PARK_TIMEOUT_S,
    HANDOFF_SLACK_S,
    LIVENESS_ROUND_S,
    OVER_LIMIT_RECORDS,
    PROBE_GRACE_S,
    PROBE_TIMEOUT_S,
    RATE_LIMIT,
    RATE_PERIOD_S,
    RECORD_SIZES_KB,
)


def handoff_bound_ms(grace_ms: int, fair_waiter: bool, cancelled: bool = False) -> int:
    """How long a key may stay blocked after its holder's execution ended, with someone waiting
    (``cancelled``: its section was cancelled - its presence token is trusted once it has stood
    ``PRESENCE_SETTLE_MS``, which may end after the execution)."""
    round_s = FAIR_PARK_TIMEOUT_S if fair_waiter else LIVENESS_ROUND_S
    settle_ms = protocol.PRESENCE_SETTLE_MS if cancelled else 0
    return grace_ms + settle_ms + int((round_s + HANDOFF_SLACK_S) * 1000)


def judge(report: Report) -> dict[str, list[str]]:
    violations: dict[str, list[str]] = {
        "alone": [], "lost update": [], "fence order": [], "outcome": [], "left held": [],
        "re-entrant hold": [], "handoff": [], "coalesce": [], "rate": [],
    }
    for key, item in report.probe.items():
        if key.startswith(("L", "T")):
            continue  # the short lease overlaps by design (only its fence guards writes); a rate limit admits several
        if item.get("violations", 0):
            violations["alone"].append(f"{key}: {item['violations']} entries found another holder inside"
                                       + _overlap_suspects(report, key, item))
        if item.get("counter", 0) != item.get("accepted", 0):
            violations["lost update"].append(f"{key}: counter {item.get('counter', 0)} != accepted {item.get('accepted', 0)}")
        fences = item.get("fences", [])
        if any(b < a for a, b in zip(fences, fences[1:])):
            violations["fence order"].append(f"{key}: {fences}")
    for run in report.runs:
        errors = run.task_errors or [run.error]
        if run.task_errors:  # ClientAsync: each task's outcome
            allowed = all(error is None or error in ALLOWED_ERRORS for error in errors)
        else:
            allowed = run.status == "SUCCEEDED" or (run.status == "FAILED" and run.error in ALLOWED_ERRORS)
            if run.shape == "Record":  # over the limit: refused, typed, whatever else happens
                over = run.key in OVER_LIMIT_RECORDS
                allowed = (run.status == "SUCCEEDED" and not over) or (run.status == "FAILED" and run.error in (
                    {ERROR_RECORD_TOO_LARGE} if over else {ERROR_TIMEOUT}))
            allowed |= run.status == "ABORTED" and run.stopped
            allowed |= run.status == "TIMED_OUT" and run.shape == "Timeout"
            allowed |= run.error == ERROR_LOST and run.shape == "Lease"
            allowed |= run.status == "FAILED" and run.error == ERROR_SUPERSEDED and run.shape == "Coalesce"
        if not allowed:
            cause = f" ({run.cause[:300]})" if run.cause else ""
            waited = ", ".join(f"{w.stored_key} {(w.end_ms - w.start_ms) / 1000:.0f} s" for w in run.waits)
            violations["outcome"].append(
                f"{run.shape} {run.arn or run.key}: {run.status} {errors}{cause}; waits: {waited or 'none'}; "
                f"stop: {run.stop}, redriven: {run.redriven}; last states: {' | '.join(run.trail)}"
            )
        violations["re-entrant hold"] += [f"{run.shape} {run.key}: {problem}" for problem in run.problems]
    for key, balance in report.records.items():  # each increment applied by a release of its own
        on_key = [run for run in report.runs if run.shape == "Record" and run.key == key]
        done = sum(run.status == "SUCCEEDED" for run in on_key)
        maybe = sum(run.status != "SUCCEEDED" for run in on_key)  # stopped after its release, maybe
        if key in OVER_LIMIT_RECORDS and balance != 0:
            violations["lost update"].append(f"record {key} over the limit was updated: balance {balance}")
        elif not done <= balance <= done + maybe:
            violations["lost update"].append(f"record {key}: balance {balance}, {done} runs succeeded, {maybe} others")
    violations["left held"] = list(report.left_held)
    for run in report.runs:  # a superseded run never entered its work (since its last redrive: a run
        # stopped at work and redriven is refused its resumed work, queues again, and may be superseded)
        since = max((ms for ms, k, _ in run.events if k == "redriven"), default=0)
        if run.shape == "Coalesce" and run.error == ERROR_SUPERSEDED and any(
                k == "enter" and ms >= since for ms, k, _ in run.events):
            violations["coalesce"].append(f"{run.arn} ended {ERROR_SUPERSEDED} after entering its work; "
                                          f"last states: {' | '.join(run.trail)}")
    violations["coalesce"] += [f"queue row left: {row}" for row in report.coalesce_rows]
    for key in sorted({run.key for run in report.runs if run.shape == "Rate"}):
        stamps = [ms for run in report.runs if run.shape == "Rate" and run.key == key for ms in run.admissions]
        for first, last in crowded_windows(stamps, limit=RATE_LIMIT, period_ms=RATE_PERIOD_S * 1000):
            violations["rate"].append(f"{key}: {RATE_LIMIT + 1} admissions within {last - first} ms "
                                      f"({first}..{last}; period {RATE_PERIOD_S * 1000} ms)")
    report.handoffs = []
    violations["handoff"] = _judge_handoffs(report)
    return violations


def _overlap_suspects(report: Report, key: str, item: dict) -> str:
    """Diagnostics of an overlap: each entry that found another holder inside, and the runs
    that entered ``key`` in the probe timeout before it, with what happened to them since."""
    stored, lines = stored_key(key), []
    crowded = [at for at, seen in zip(item.get("enteredAt", []), item.get("seen", [])) if seen > 1]
    for at in crowded:
        lines.append(f"\n    entry at {at}:")
        for run in report.runs:
            entered = [ms for ms, kind, k in run.events if kind == "enter" and k == stored
                       and at - (PROBE_TIMEOUT_S + 2) * 1000 <= ms <= at]
            if entered:
                since = [f"{kind} {ms - at:+d} ms" for ms, kind, _ in run.events
                         if entered[0] <= ms and kind not in ("attempt", "park") and ms <= at + 10_000]
                lines.append(f"\n      {run.shape} {run.arn or run.key} (stop: {run.stop}, redriven: {run.redriven}, "
                             f"{run.status} {run.error}): {', '.join(since)}")
    return "".join(lines)


def _judge_handoffs(report: Report) -> list[str]:
    """Invariant 7 (see ``tools/stress.py``'s notes); fills ``report.handoffs`` with each handoff checked."""
    entries = {
        stored_key(key): sorted(item.get("enteredAt", [])) for key, item in report.probe.items()
    }
    waits = [(run, wait) for run in report.runs for wait in run.waits]
    found = []
    for holder in report.runs:
        for hold in holder.holds:
            waiting = [
                (run, wait) for run, wait in waits
                if wait.stored_key == hold.stored_key and wait.start_ms <= hold.ended_ms
                # a cancelled section's lock is found by a state machine's liveness check: a
                # LockClient waiter does not probe (it waits for one, or for the lease)
                and not (hold.cancelled and run.shape in CLIENT_SHAPES)
                and wait.end_ms >= hold.ended_ms + handoff_bound_ms(hold.grace_ms, wait.fair, hold.cancelled)
            ]
            if not waiting:
                continue
            later = [ms for ms in entries.get(hold.stored_key, []) if ms > hold.ended_ms]
            blocked_ms = (later[0] if later else now_ms()) - hold.ended_ms
            report.handoffs.append((hold.stored_key, blocked_ms))
            for run, wait in waiting:
                bound = handoff_bound_ms(hold.grace_ms, wait.fair, hold.cancelled)
                if blocked_ms > bound:
                    found.append(
                        f"{hold.stored_key}: {holder.shape} {holder.arn} ended at {hold.ended_ms} holding it "
                        f"(grace {hold.grace_ms} ms); {run.shape} {run.arn or '(client)'} waited from "
                        f"{wait.start_ms} to {wait.end_ms}; next entry {blocked_ms} ms after the end "
                        f"(bound {bound} ms)"
                    )
                    break
    return found


def summary(report: Report) -> str:
    def outcome(run: Run, error: str | None) -> str:
        if run.status == "ABORTED":
            return "ABORTED (stopped)"
        if run.status == "FAILED" and error is not None:
            return f"FAILED {error}"
        return "SUCCEEDED" if error is None else f"{run.status} {error}"

    outcomes = Counter()
    for run in report.runs:
        for error in run.task_errors or [run.error]:  # ClientAsync: each task
            outcomes[(run.shape, outcome(run, error))] += 1
    lines = ["| shape | outcome | runs |", "|---|---|---:|"]
    lines += [f"| {shape} | {result} | {n} |" for (shape, result), n in sorted(outcomes.items())]
    entries = sum(i.get("entries", 0) for k, i in report.probe.items() if not k.startswith(("L", "C", "T")))
    rate_entries = sum(i.get("entries", 0) for k, i in report.probe.items() if k.startswith("T"))
    child_entries = sum(i.get("entries", 0) for k, i in report.probe.items() if k.startswith("C"))
    lease_entries = sum(i.get("entries", 0) for k, i in report.probe.items() if k.startswith("L"))
    rejected = sum(i.get("rejected", 0) for i in report.probe.values())
    readings = Counter(r.reading for r in report.runs if r.redriven)
    stops = [r for r in report.runs if r.stopped]
    long_waits = [r for r in stops if r.stop == "long-wait"]
    lines += [
        "", "| injected | count |", "|---|---:|",
        f"| stops: after a delay / once inside / as soon as waiting / after a long wait | "
        f"{sum(r.stop == 'delay' for r in stops)} / {sum(r.stop == 'holding' for r in stops)} / "
        f"{sum(r.stop == 'waiting' for r in stops)} / {len(long_waits)} |",
        f"| stopped before acquiring (a refused acquire, no entry); of them redriven | "
        f"{sum(r.stopped_waiting for r in stops)}; {sum(r.stopped_waiting and r.redriven for r in stops)} |",
        f"| acquire attempts in a long wait's history at the stop (most) | "
        f"{max((r.attempts_at_stop for r in long_waits), default=0)} |",
        f"| redrives: strict / reevaluate reading | {readings['strict']} / {readings['reevaluate']} |",
        f"| padded inputs (50-150 KB); stopped while holding | {sum(r.padded for r in report.runs)}; "
        f"{sum(r.padded and bool(r.holds) for r in report.runs)} |",
        f"| works past the function timeout (planned) | {sum(past_timeout(r) for r in report.runs)} |",
        f"| ended holders (stopped or timed out while holding) | {sum(bool(r.holds) for r in report.runs)} |",
    ] + [f"| {name} | {n} |" for name, n in sorted(report.faults.items())]
    longest = max((ms for _, ms in report.handoffs), default=0)
    lines += [
        "", "| invariant | result |", "|---|---|",
        f"| protected entries checked (short-lease keys apart) | {entries} + {child_entries} on child keys "
        f"(+{lease_entries} short-lease, +{rate_entries} rate-limited) |",
        f"| fenced writes rejected (zombies) | {rejected} |",
        f"| handoffs after an ended holder checked; longest | {len(report.handoffs)}; {longest / 1000:.1f} s "
        f"(bound {handoff_bound_ms(PROBE_GRACE_S * 1000, False) / 1000:.0f} s polling, "
        f"{handoff_bound_ms(PROBE_GRACE_S * 1000, True) / 1000:.0f} s fair) |",
        "| records (KB): balance / runs succeeded / refused as too large | " + "; ".join(
            f"{key} ({RECORD_SIZES_KB[key]}): {balance} / "
            f"{sum(r.shape == 'Record' and r.key == key and r.status == 'SUCCEEDED' for r in report.runs)} / "
            f"{sum(r.shape == 'Record' and r.key == key and r.error == ERROR_RECORD_TOO_LARGE for r in report.runs)}"
            for key, balance in sorted(report.records.items())) + " |",
        f"| coalescing runs: superseded / succeeded; queue rows left | "
        f"{sum(r.shape == 'Coalesce' and r.error == ERROR_SUPERSEDED for r in report.runs)} / "
        f"{sum(r.shape == 'Coalesce' and r.status == 'SUCCEEDED' for r in report.runs)}; {len(report.coalesce_rows)} |",
        f"| rate-limited runs: admissions read from the histories ({RATE_LIMIT} per {RATE_PERIOD_S} s per key) | "
        f"{sum(len(r.admissions) for r in report.runs if r.shape == 'Rate')} over "
        f"{len({r.key for r in report.runs if r.shape == 'Rate'})} keys |",
        f"| fair queues of holes, locks of a cancelled section: passed by the next arrival; longest | {len(report.arrivals)}; "
        f"{max((s for _, s in report.arrivals), default=0):.1f} s (bound {NEXT_ARRIVAL_S} s) |",
    ] + [f"| {name} | {'ok' if not found else f'VIOLATED ({len(found)})'} |" for name, found in report.violations.items()]
    for name, found in report.violations.items():
        for line in found[:5]:
            lines.append(f"  {name}: {line}")
    return "\n".join(lines)


def past_timeout(run: Run) -> int:
    items = [run.document] + run.document.get("items", []) + run.document.get("children", []) + run.document.get("tasks", [])
    items += [run.document[side] for side in ("left", "right") if side in run.document]
    return sum(isinstance(i.get("workMs"), int) and i["workMs"] > PROBE_TIMEOUT_S * 1000 for i in items)
