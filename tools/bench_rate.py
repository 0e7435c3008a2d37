"""Benchmark of the rate limit in the local runtime (``make bench-rate``): a burst of ``--runs``
runs started together on one key of ``Lock.rate(limit=--limit, period=--period)`` (default:
200 runs, 10 per minute - about 20 minutes), and the same burst on ``--keys`` keys at once.

Figures, measured in one run: the most in any window of ``period`` of the reserved times (every
admission's, the given-up ones too, service clock) and of the work's entries (the histories'
``StateEntered`` of the work) - both must be at most ``limit`` - the permits given up (a run
late out of its Wait reserves again), the admitted rate over the burst against the limit (must
be within ``--tolerance``, default 5 %), how late each run entered after its reserved time (the
Wait rounds up to the second; the guard after it keeps it within
``rate_protocol.ENTRY_MARGIN_MS``: the guard's own times are reported too, and how long the
transition from the guard into the work took), refused ADMITs, state transitions and DynamoDB
calls per run. Where the lateness comes from (:func:`lateness`, every admission's Wait): the
Wait's end after the reserved time - the lock's rounding up to the second is under 1 s of it,
the rest is the Wait sleeping past the seconds it was given (``overslept``: the runtime's
timing, a loaded interpreter waking late) - and the transition from the Wait into the guard;
for each permit given up, how late its guard came and how much its Wait overslept; the load
average while the burst ran. Exits 1 when a bound is broken, saying which and, for a rate under
the tolerance, the permits given up and their Waits' oversleep.

``--compare``: instead, two bursts of ``--runs`` started together (interleaved, on a key each)
under the same load: the rate limit as it is, and the same workflow with a refused run reading
again at once (``rate_protocol.spread_seconds_expression`` drawing 0 s: the refusal path before
the spread), side by side.
"""

from __future__ import annotations

import argparse
import math
import os
import threading
import time
import uuid
from typing import Any, Sequence

from locked_workflow.state_machines.rate_protocol import spacing_ms
from tools.rate_checks import admission_stamps, crowded_windows, refused_admissions

WORK = "Work"
#: The guard after the Wait (``rate_protocol.on_time_expression``).
GUARD = "Lock.OnTime?"
#: The Wait until the reserved time (``rate_protocol.turn_seconds_expression``).
TURN = "Lock.Turn"


#: ``--compare``'s second workflow: a refused run reads again at once (no spread).
NO_SPREAD = "RateNoSpread"


def build_stack(app: Any, stack_id: str, *, limit: int, period_s: int, max_wait_s: int, compare: bool = False) -> Any:
    import aws_cdk as cdk
    from aws_cdk import aws_stepfunctions as sfn
    from unittest import mock

    from locked_workflow import Lock, LockedWorkflow, LockTable
    from locked_workflow.state_machines import rate_protocol
    from locked_workflow.state_machines.lock_protocol import jsonata

    stack = cdk.Stack(app, stack_id)
    locks = LockTable(stack, "Locks", removal_policy=cdk.RemovalPolicy.DESTROY).table

    def workflow(name: str) -> None:
        work = sfn.Pass.jsonata(stack, f"{name}Work", state_name=WORK, outputs=jsonata(
            "{'fence': $lock.fence, 'admittedAt': $lock.acquiredAt}"))
        LockedWorkflow(stack, name, lock=Lock.rate(jsonata("$states.input.key"), limit=limit,
                                                   period=cdk.Duration.seconds(period_s)),
                       protected=work, table=locks, max_wait=cdk.Duration.seconds(max_wait_s),
                       timeout=cdk.Duration.seconds(max_wait_s + 600), logging=False, tracing=False, janitor=False,
                       state_machine_name=name)

    workflow("Rate")
    if compare:  # the refusal path before the spread: read again at once
        with mock.patch.object(rate_protocol, "spread_seconds_expression", lambda wait_variable: "0"):
            workflow(NO_SPREAD)
    return stack


def most_in_a_window(times_ms: list[float], period_ms: float) -> int:
    """The most of ``times_ms`` in any window of ``period_ms`` (half-open)."""
    t, most, j = sorted(times_ms), 0, 0
    for i in range(len(t)):
        while t[i] - t[j] >= period_ms:
            j += 1
        most = max(most, i - j + 1)
    return most


def _ms(event: dict) -> float:
    return event["timestamp"].timestamp() * 1000


def turns(history: list, admit_state: str = "Lock.Admit") -> list[dict]:
    """Each admission's way to its work, from one history: its reserved time ``T`` (service
    clock), when its Wait (:data:`TURN`) was entered and exited, when the guard was entered, and
    whether the run entered its work (the last one) or gave the permit up (late, reserved again).
    The lock's part of the lateness is the Wait's rounding up to the second (``ceil``: under 1 s
    after ``T``); the Wait's end past ``T + 1 s``, and the transitions after it, are the
    runtime's timing."""
    stamps = iter(admission_stamps(history, admit_state))
    rounds, current = [], None
    for event in history:
        if not event["type"].endswith(("StateEntered", "StateExited")):
            continue
        entered = event["type"].endswith("StateEntered")
        name = (event["stateEnteredEventDetails"] if entered else event["stateExitedEventDetails"])["name"]
        if name == TURN and entered:
            current = {"T": next(stamps), "wait in": _ms(event)}
            rounds.append(current)
        elif name == TURN and current is not None:
            current["wait out"] = _ms(event)
        elif name == GUARD and entered and current is not None:
            current["guard"] = _ms(event)
        elif name == WORK and entered and current is not None:
            current["work"] = _ms(event)
    return rounds


def _quantiles(values: list[float]) -> str:
    """``p50 / p90 / max`` in seconds."""
    v = sorted(values)
    if not v:
        return "-"
    pick = lambda q: v[min(len(v) - 1, math.ceil(q * len(v)) - 1)]  # noqa: E731
    return f"{pick(0.5) / 1000:.2f} / {pick(0.9) / 1000:.2f} / {v[-1] / 1000:.2f}"


def lateness(results: list) -> dict:
    """Where the entries' lateness comes from (p50 / p90 / max in seconds, over every admission,
    the given-up ones too): the Wait's own sleep past the seconds it was given (``overslept``:
    the runtime's Wait waking late), the Wait's end after the reserved time (``Wait out after
    T``: the lock's rounding, under 1 s, plus the oversleep), the transition from the Wait into
    the guard, and, for the permits given up, how much of their lateness was oversleep."""
    rounds = [t for r in results for t in turns(r.history) if "guard" in t]
    # the seconds the Wait was given: rounded up from its entry (its $millis() is a little later,
    # so this is at most 1 s over for a Wait entered just before a second's boundary)
    given = [max(0, math.ceil((t["T"] - t["wait in"]) / 1000)) * 1000 for t in rounds]
    overslept = [t["wait out"] - t["wait in"] - g for t, g in zip(rounds, given)]
    given_up = [(t, o) for t, o in zip(rounds, overslept) if "work" not in t]
    return {
        "Wait out after T p50/p90/max s": _quantiles([t["wait out"] - t["T"] for t in rounds]),
        "overslept p50/p90/max s": _quantiles(overslept),
        "Wait out to guard p50/p90/max s": _quantiles([t["guard"] - t["wait out"] for t in rounds]),
        "Waits out over 1 s after T": sum(t["wait out"] - t["T"] > 1000 for t in rounds),
        "given up: guard after T s": [round((t["guard"] - t["T"]) / 1000, 2) for t, _ in given_up],
        "given up: overslept s": [round(o / 1000, 2) for _, o in given_up],
    }


class LoadAverage:
    """The machine's 1-minute load average, sampled every ``every_s`` while a burst runs."""

    def __init__(self, every_s: float = 15.0) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every_s,), daemon=True)

    def _run(self, every_s: float) -> None:
        while True:
            self.samples.append(os.getloadavg()[0])
            if self._stop.wait(every_s):
                return

    def __enter__(self) -> "LoadAverage":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> str:
        s = self.samples or [os.getloadavg()[0]]
        return f"{sum(s) / len(s):.1f} mean, {min(s):.1f}-{max(s):.1f}"


def measure(results: list, *, limit: int, period_ms: int, every: list | None = None) -> dict:
    """The figures of the admitted runs (``results``); the reservations, the permits given up
    and the Waits' lateness of ``every`` run (default: ``results``) - a run that gave permits up
    and then ended ``Lock.Timeout`` (its next permit past ``max_wait``) spent them too."""
    every = results if every is None else every
    stamps = [r.output["admittedAt"] for r in results]
    reserved = [s for r in every for s in admission_stamps(r.history)]
    entered = [next(e["timestamp"].timestamp() * 1000 for e in r.history if e["type"].endswith("StateEntered")
                    and e["stateEnteredEventDetails"]["name"] == WORK) for r in results]
    late = [e - s for e, s in zip(entered, stamps)]
    # the guard after the Wait (its last entry: a late run passes it again after reserving again)
    guarded = [[e["timestamp"].timestamp() * 1000 for e in r.history if e["type"].endswith("StateEntered")
                and e["stateEnteredEventDetails"]["name"] == GUARD][-1] for r in results]
    span = max(stamps) - min(stamps)
    # the burst's rate: its admissions over the windows they span (the first window's too)
    rate = len(stamps) / (span + period_ms) * period_ms
    ideal = len(stamps) / ((-(-len(stamps) // limit) - 1) * period_ms + period_ms) * period_ms
    # what the lock can reach: a permit is reused a period and the entry margin on
    bound = len(stamps) / ((-(-len(stamps) // limit) - 1) * spacing_ms(period_ms) + period_ms) * period_ms
    return {
        "runs": len(results),
        "most per window (reserved)": most_in_a_window(reserved, period_ms),
        "most per window (entries)": most_in_a_window(entered, period_ms),
        "crowded windows (reserved)": len(crowded_windows(reserved, limit=limit, period_ms=period_ms)),
        "crowded windows (entries)": len(crowded_windows(entered, limit=limit, period_ms=period_ms)),
        "most per window (guard)": most_in_a_window(guarded, period_ms),
        "guard late max s": round(max(g - s for g, s in zip(guarded, stamps)) / 1000, 2),
        "guard to entry max s": round(max(e - g for e, g in zip(entered, guarded)) / 1000, 2),
        "permits given up": len(reserved) - len(stamps),
        "refused admits/run": round(sum(refused_admissions(r.history) for r in results) / len(results), 2),
        "refused admits max": max(refused_admissions(r.history) for r in results),
        "rate per period": round(rate, 3),
        "ideal rate per period": round(ideal, 3),
        "rate bound with the margin": round(bound, 3),
        "late mean s": round(sum(late) / len(late) / 1000, 2),
        "late max s": round(max(late) / 1000, 2),
        "transitions/run": round(sum(sum(e["type"].endswith("StateEntered") for e in r.history)
                                     for r in results) / len(results), 1),
        "DynamoDB calls/run": round(sum(sum(e["type"] == "TaskScheduled" for e in r.history)
                                        for r in results) / len(results), 1),
        **lateness(every),
    }


def run(args: argparse.Namespace) -> list[dict]:
    from locked_workflow.testing import LocalCloud
    from locked_workflow.testing.synth import synth_app

    max_wait_s = (args.runs // args.limit + 2) * args.period
    synthesized = synth_app(lambda app: build_stack(app, "RateBench", limit=args.limit, period_s=args.period,
                                                    max_wait_s=max_wait_s, compare=args.compare))
    rows = []
    with LocalCloud(args.backend) as cloud:
        app = cloud.deploy(synthesized.template, assets_dir=synthesized.assets_dir)
        arn = app.state_machine_arn("RateStateMachine")
        if args.compare:
            return compare(cloud, {"spread": arn, "at once": app.state_machine_arn(f"{NO_SPREAD}StateMachine")},
                           args, max_wait_s)
        for keys in dict.fromkeys((1, args.keys)):  # (--keys 1: the one-key burst once)
            names = [f"k{i}-{uuid.uuid4().hex[:6]}" for i in range(keys)]
            started = time.time()
            with LoadAverage() as load:
                arns = [cloud.start_execution(arn, {"key": names[i % keys]}) for i in range(args.runs)]
                results = cloud.wait_all(arns, max_wait_s + 900)
            for name in names:
                mine = [r for r, i in zip(results, range(args.runs)) if names[i % keys] == name]
                # (a run whose permit came after max_wait is counted; the figures are the others')
                done = [r for r in mine if r.status == "SUCCEEDED"]
                row = {"keys": keys, "key": name, "not admitted": len(mine) - len(done), "ended": ended(mine),
                       **(measure(done, limit=args.limit, period_ms=args.period * 1000, every=mine) if done else {}),
                       "makespan s": round(time.time() - started), "load average": load.summary()}
                rows.append(row)
                print(row, flush=True)
    return rows


def compare(cloud: Any, machines: dict, args: argparse.Namespace, max_wait_s: int) -> list[dict]:
    """Two bursts of ``args.runs`` started together, interleaved, a key each: one per workflow."""
    keys = {label: f"{label.replace(' ', '')}-{uuid.uuid4().hex[:6]}" for label in machines}
    started = time.time()
    arns: dict = {label: [] for label in machines}
    with LoadAverage() as load:
        for _ in range(args.runs):
            for label, arn in machines.items():
                arns[label].append(cloud.start_execution(arn, {"key": keys[label]}))
        finished, done_at = {}, {}
        for label in machines:
            finished[label] = cloud.wait_all(arns[label], max_wait_s + 900)
            done_at[label] = time.time()
    rows = []
    for label in machines:
        results = finished[label]
        # (a run whose permit came after max_wait - permits given up under load push the last
        # ones past it - is counted, and its refused ADMITs with it; the figures are the others')
        failed = [r for r in results if r.status != "SUCCEEDED"]
        done = [r for r in results if r.status == "SUCCEEDED"]
        row = {"keys": 1, "key": keys[label], "refused run": label, "not admitted": len(failed), "ended": ended(results),
               **(measure(done, limit=args.limit, period_ms=args.period * 1000, every=results) if done else {}),
               "refused admits/run (all)": round(sum(refused_admissions(r.history) for r in results) / len(results), 2),
               "makespan s": round(done_at[label] - started), "load average": load.summary()}
        rows.append(row)
        print(row, flush=True)
    return rows


def ended(results: list) -> dict:
    """How the runs ended: status (and error), with their counts."""
    counts: dict = {}
    for r in results:
        outcome = r.status if r.status == "SUCCEEDED" else f"{r.status} {r.error}"
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts


def bounds_broken(row: dict, *, limit: int, tolerance: float) -> list[str]:
    """The bounds a row breaks, each with what broke it: a rate under the tolerance says how
    many permits were given up and how late their Waits ended (the runtime's timing: a Wait
    the lock gave the right seconds that woke late), beside the load average."""
    broken = []
    if row["not admitted"]:
        broken.append(f"{row['not admitted']} runs not admitted ({row.get('ended')})")
    if "rate per period" not in row:  # no run admitted
        return broken
    for what in ("reserved", "entries"):
        if row[f"most per window ({what})"] > limit:
            broken.append(f"{row[f'most per window ({what})']} {what} in a window")
    floor = row["ideal rate per period"] * (1 - tolerance)
    if row["rate per period"] < floor:
        broken.append(f"rate {row['rate per period']} < {floor:.3f} with {row['permits given up']} permits given up "
                      f"(their Waits overslept {row['given up: overslept s']} s; load average {row['load average']})")
    return broken


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--period", type=int, default=60, help="seconds")
    parser.add_argument("--keys", type=int, default=2, help="the second burst spreads the runs over this many keys")
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--backend", choices=("moto", "dynamodb-local"), default="moto")
    parser.add_argument("--compare", action="store_true",
                        help="a burst with the refused runs' spread beside one that reads again at once")
    args = parser.parse_args(argv)
    rows = run(args)
    broken = {r["key"]: bounds_broken(r, limit=args.limit, tolerance=args.tolerance) for r in rows}
    broken = {k: v for k, v in broken.items() if v}
    headers = list(max(rows, key=len))
    print("| " + " | ".join(headers) + " |")
    print("|" + "---|" * len(headers))
    for row in rows:
        print("| " + " | ".join(str(row.get(h, "-")) for h in headers) + " |")
    print("bounds broken: " + ("; ".join(f"{k}: {', '.join(v)}" for k, v in broken.items()) if broken else "none"))
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
