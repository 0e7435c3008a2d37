"""Shared pieces of ``demo`` and ``bench``: reading execution histories, the invariants, the load.

Pure functions first (tested on synthetic histories in ``tests/tools/test_demo_and_bench.py``):

* :func:`critical_sections` - the protected work of one execution, as the history saw it:
  the protected state's ``…StateEntered`` .. ``…StateExited`` timestamps, plus the lock the
  run held (``$lock``: key, fence, ``acquiredAt`` on the service clock), when the acquire
  write was acknowledged, and when the release write was sent and acknowledged.
* :func:`find_overlaps`, :func:`fence_order_violations`, :func:`lost_updates` - the
  invariants of DESIGN.md section 4.
* :func:`transition_count`, :func:`dynamodb_calls` - what an execution costs: state
  transitions (``…StateEntered`` events plus retry attempts, which AWS bills as
  transitions) and DynamoDB requests made by the state machine (every ``TaskScheduled`` on a
  DynamoDB resource, failed conditional writes included).
* :func:`run_metrics`, :func:`summarize_load`, :func:`handoff_gaps_ms` - per-run and per-load
  numbers of the bench.

Then the load helpers that need a :class:`~locked_workflow.testing.LocalCloud`: synthesize and
deploy the example app, fire customer-update events through EventBridge, watch them with a
stderr progress bar.

Why the protected state's own events define a critical section: the work runs strictly
inside the lock's hold (after the acquire write was acknowledged, before the release write
was sent), so with a working lock these intervals can never overlap - and without the lock
they are exactly the windows in which two read-modify-writes interleave. ``$lock.acquiredAt``
(the service clock's ``$millis()``, evaluated just before the winning acquire write) is
kept next to them but not used for the overlap check, the waits or the handoff gaps: a
waiter may evaluate it a few milliseconds before the previous holder's release lands
(seen here: -4 ms "gaps"), which would look like an overlap that never was. Waits and gaps
use the acquire's acknowledgement and the release's dispatch instead.
"""

from __future__ import annotations

import datetime as _dt
import gc
import json
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from statistics import mean
from typing import Any, Callable, Iterable, Mapping, Sequence

#: Dollars per state transition of a Standard workflow ($0.025 per 1,000).
DOLLARS_PER_TRANSITION = 0.025 / 1000
#: Suffixes of the lock's release states (``<section id>.Release`` / ``.ReleaseAfterError``;
#: a fair lock's handoff: the write that passes the lock on - ``.Release.Grant`` to the next
#: waiter, ``.Release.Release`` when nobody waits).
RELEASE_SUFFIXES = (".Release", ".ReleaseAfterError", ".Release.Grant", ".Release.GrantPoller",
                    ".ReleaseAfterError.Grant", ".ReleaseAfterError.Release")
#: Task history events that start one attempt of a task (a second one within a state is a retry).
_SCHEDULED = ("TaskScheduled", "LambdaFunctionScheduled", "ActivityScheduled")

# ----------------------------------------------------------------------------------------
# Reading histories (pure)
# ----------------------------------------------------------------------------------------


def epoch_ms(timestamp: Any) -> int:
    """Epoch milliseconds of a history timestamp (datetime, or a number of ms already)."""
    if isinstance(timestamp, _dt.datetime):
        return round(timestamp.timestamp() * 1000)
    return int(timestamp)


def _entered_name(event: Mapping[str, Any]) -> str | None:
    if event["type"].endswith("StateEntered"):
        return (event.get("stateEnteredEventDetails") or {}).get("name")
    return None


def _exited_name(event: Mapping[str, Any]) -> str | None:
    if event["type"].endswith("StateExited"):
        return (event.get("stateExitedEventDetails") or {}).get("name")
    return None


def _state_entry(event: Mapping[str, Any], by_id: Mapping[Any, Mapping[str, Any]]) -> Any:
    """The id of the ``…StateEntered`` event that ``event``'s ``previousEventId`` chain reaches."""
    seen = 0
    while event is not None and seen <= len(by_id):
        if _entered_name(event) is not None:
            return event["id"]
        event = by_id.get(event.get("previousEventId"))
        seen += 1
    return None


@dataclass(frozen=True)
class Transitions:
    """State transitions of one execution: states entered, plus retry attempts."""

    entered: int
    retries: int

    @property
    def billed(self) -> int:
        return self.entered + self.retries


def transition_count(history: Sequence[Mapping[str, Any]]) -> Transitions:
    """``…StateEntered`` events, plus every task attempt after the first within one state entry.

    AWS bills each retry attempt as a state transition; in the history a retry is a further
    ``TaskScheduled`` (``LambdaFunctionScheduled``…) before the state is exited. Parallel
    branches interleave their events, so an attempt belongs to the state entry its
    ``previousEventId`` chain leads back to (a history without event ids: the latest entry).
    """
    by_id = {event["id"]: event for event in history if "id" in event}
    entered = retries = 0
    attempts: dict[Any, int] = {}
    latest: Any = None
    for event in history:
        if _entered_name(event) is not None:
            entered += 1
            latest = event.get("id", object())
        elif event["type"] in _SCHEDULED:
            entry = _state_entry(event, by_id) if by_id else latest
            attempts[entry] = attempts.get(entry, 0) + 1
            if attempts[entry] > 1:
                retries += 1
    return Transitions(entered=entered, retries=retries)


@dataclass(frozen=True)
class DynamoDBCalls:
    total: int
    failed: int  # of which failed (conditional check failures and any other error)


def dynamodb_calls(history: Sequence[Mapping[str, Any]]) -> DynamoDBCalls:
    """DynamoDB requests made by the state machine itself (not by Lambdas it invokes).

    Every ``TaskScheduled`` on a DynamoDB resource (``dynamodb`` optimized integrations and
    ``aws-sdk:dynamodb``) is one request; a ``TaskFailed`` on one is a failed request.
    """
    total = failed = 0
    for event in history:
        details = event.get("taskScheduledEventDetails") or event.get("taskFailedEventDetails")
        if not details or "dynamodb" not in details.get("resourceType", "").lower():
            continue
        if event["type"] == "TaskScheduled":
            total += 1
        elif event["type"] == "TaskFailed":
            failed += 1
    return DynamoDBCalls(total=total, failed=failed)


def _assigned(event: Mapping[str, Any], variable: str) -> Any:
    details = event.get("stateExitedEventDetails") or {}
    assigned = details.get("assignedVariables") or {}
    if variable not in assigned:
        return None
    value = assigned[variable]
    try:
        return json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return value


@dataclass
class CriticalSection:
    """One run of the protected work, and the lock held around it.

    ``start_ms``/``end_ms``: the protected state entered/exited (history timestamps, epoch ms;
    ``end_ms`` is the execution's last event when the work never exited).

    With a lock (all None without one): ``fence``, ``lock_key`` and ``acquired_ms``
    (``$lock.acquiredAt``: the service clock's ``$millis()`` just before the winning acquire
    write) come from the lock record; ``acquire_acked_ms`` is when that write was
    acknowledged (its ``TaskSucceeded``), ``release_sent_ms`` when the release write was sent
    (``TaskStarted``) and ``released_ms`` when it was acknowledged. The lock is certainly held
    from ``acquire_acked_ms`` to ``release_sent_ms`` - an interval that can never overlap
    another holder's, whatever the request latencies.
    """

    execution: str
    key: str
    start_ms: int
    end_ms: int
    fence: int | None = None
    lock_key: str | None = None
    acquired_ms: int | None = None
    acquire_acked_ms: int | None = None
    release_sent_ms: int | None = None
    released_ms: int | None = None
    completed: bool = True

    @property
    def duration_ms(self) -> int:
        return self.end_ms - self.start_ms


def critical_sections(
    execution: str,
    history: Sequence[Mapping[str, Any]],
    *,
    protected_state: str,
    key: str | None = None,
    lock_variable: str = "lock",
) -> list[CriticalSection]:
    """The critical sections of one execution (normally one).

    ``key``: what the section is serialized on (a lane of the timeline); default the lock
    key from ``$lock`` - pass it for runs without a lock.
    """
    sections: list[CriticalSection] = []
    lock: Mapping[str, Any] | None = None
    lock_acked: int | None = None
    last_succeeded: int | None = None  # last TaskSucceeded within the current state
    open_section: CriticalSection | None = None
    awaiting_release: CriticalSection | None = None
    in_release = False
    for event in history:
        kind = event["type"]
        ts = epoch_ms(event["timestamp"])
        entered, exited = _entered_name(event), _exited_name(event)
        if entered is not None:
            last_succeeded = None
        if kind == "TaskSucceeded":
            last_succeeded = ts
        if exited is not None:
            value = _assigned(event, lock_variable)
            if isinstance(value, Mapping) and "fence" in value:
                lock, lock_acked = value, last_succeeded
        if entered == protected_state:
            open_section = CriticalSection(
                execution=execution,
                key=key if key is not None else str((lock or {}).get("key")),
                start_ms=ts,
                end_ms=ts,
                fence=_int_or_none((lock or {}).get("fence")),
                lock_key=(lock or {}).get("key"),
                acquired_ms=_int_or_none((lock or {}).get("acquiredAt")),
                acquire_acked_ms=lock_acked if lock else None,
            )
        elif exited == protected_state and open_section is not None:
            open_section.end_ms = ts
            sections.append(open_section)
            awaiting_release, open_section = open_section, None
        elif entered is not None and entered.endswith(RELEASE_SUFFIXES):
            if open_section is not None:  # the work failed without exiting: released on Catch
                open_section.end_ms, open_section.completed = ts, False
                sections.append(open_section)
                awaiting_release, open_section = open_section, None
            in_release = awaiting_release is not None
        elif in_release and kind == "TaskStarted" and awaiting_release is not None:
            awaiting_release.release_sent_ms = ts
        elif in_release and kind == "TaskSucceeded" and awaiting_release is not None:
            awaiting_release.released_ms = ts
            awaiting_release, in_release = None, False
        elif exited is not None and exited.endswith(RELEASE_SUFFIXES):
            in_release = False
    if open_section is not None and history:  # never exited (execution failed or stopped)
        open_section.end_ms = epoch_ms(history[-1]["timestamp"])
        open_section.completed = False
        sections.append(open_section)
    return sections


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


# ----------------------------------------------------------------------------------------
# Invariants (pure)
# ----------------------------------------------------------------------------------------


def by_key(sections: Iterable[CriticalSection]) -> dict[str, list[CriticalSection]]:
    """Sections grouped by key, each group in start order."""
    groups: dict[str, list[CriticalSection]] = defaultdict(list)
    for section in sections:
        groups[section.key].append(section)
    return {k: sorted(v, key=lambda s: (s.start_ms, s.end_ms)) for k, v in sorted(groups.items())}


def find_overlaps(sections: Iterable[CriticalSection]) -> list[tuple[CriticalSection, CriticalSection]]:
    """Every pair of sections of one key whose intervals overlap (touching ends do not)."""
    pairs = []
    for group in by_key(sections).values():
        for i, first in enumerate(group):
            for second in group[i + 1 :]:
                if second.start_ms >= first.end_ms:
                    break  # sorted by start: no later section overlaps ``first`` either
                pairs.append((first, second))
    return pairs


def fence_order_violations(
    sections: Iterable[CriticalSection],
) -> list[tuple[CriticalSection, CriticalSection]]:
    """Consecutive sections of one key (in start order) whose fence did not strictly increase.

    Sections without a fence (no lock) are not ordered by fences and are skipped.
    """
    violations = []
    for group in by_key(sections).values():
        fenced = [s for s in group if s.fence is not None]
        for before, after in zip(fenced, fenced[1:]):
            if after.fence <= before.fence:  # type: ignore[operator]
                violations.append((before, after))
    return violations


def lost_updates(expected: Mapping[str, int], actual: Mapping[str, int]) -> dict[str, int]:
    """Per key: updates expected minus updates the record shows (0 = none lost)."""
    return {key: expected[key] - int(actual.get(key, 0)) for key in sorted(expected)}


# ----------------------------------------------------------------------------------------
# Per-run and per-load numbers (pure)
# ----------------------------------------------------------------------------------------


@dataclass
class RunMetrics:
    execution: str
    status: str
    start_ms: int
    stop_ms: int
    transitions: Transitions
    dynamodb: DynamoDBCalls
    sections: list[CriticalSection] = field(default_factory=list)
    #: How the run ended when it did not succeed: the execution's error and cause (history).
    failure: str = ""

    @property
    def wall_ms(self) -> int:
        return self.stop_ms - self.start_ms

    @property
    def acquire_acked_ms(self) -> int | None:
        """When the winning acquire write was acknowledged; None without a lock."""
        return self.sections[0].acquire_acked_ms if self.sections else None

    @property
    def wait_ms(self) -> int | None:
        """Acquire succeeded minus execution started (the time spent getting the lock)."""
        return None if self.acquire_acked_ms is None else self.acquire_acked_ms - self.start_ms


def run_metrics(
    execution: str,
    history: Sequence[Mapping[str, Any]],
    *,
    protected_state: str,
    status: str = "",
    key: str | None = None,
    lock_variable: str = "lock",
) -> RunMetrics:
    if not history:
        raise ValueError(f"no history for {execution}")
    return RunMetrics(
        execution=execution,
        status=status or _status_from_history(history),
        start_ms=epoch_ms(history[0]["timestamp"]),
        stop_ms=epoch_ms(history[-1]["timestamp"]),
        transitions=transition_count(history),
        dynamodb=dynamodb_calls(history),
        sections=critical_sections(
            execution, history, protected_state=protected_state, key=key, lock_variable=lock_variable
        ),
        failure=_failure_from_history(history),
    )


def _failure_from_history(history: Sequence[Mapping[str, Any]]) -> str:
    """``error: cause`` of an execution that failed, timed out or was aborted (else "")."""
    for event in reversed(history):
        details = next((v for k, v in event.items() if k.startswith("execution") and k.endswith("EventDetails")
                        and event["type"] in ("ExecutionFailed", "ExecutionTimedOut", "ExecutionAborted")), None)
        if details is not None:
            return f"{details.get('error', event['type'])}: {str(details.get('cause', ''))[:300]}"
    return ""


def _status_from_history(history: Sequence[Mapping[str, Any]]) -> str:
    last = history[-1]["type"]
    for status in ("Succeeded", "Failed", "TimedOut", "Aborted"):
        if last == f"Execution{status}":
            return status.upper().replace("TIMEDOUT", "TIMED_OUT")
    return "RUNNING"


@dataclass(frozen=True)
class Distribution:
    mean: float
    max: float
    min: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> "Distribution":
        if not values:
            return cls(float("nan"), float("nan"), float("nan"), 0)
        return cls(float(mean(values)), float(max(values)), float(min(values)), len(values))


def handoff_gaps_ms(sections: Iterable[CriticalSection]) -> list[int]:
    """Per key, in acquisition order: next acquire acknowledged minus previous release sent.

    The time the lock sat free while someone wanted it, request latencies included: an
    upper bound of the true gap that is never negative. (``acquiredAt`` is not used: a
    waiter may evaluate it a few ms before the previous release lands.)
    """
    gaps = []
    for group in by_key(sections).values():
        ordered = sorted((s for s in group if s.acquire_acked_ms is not None), key=lambda s: s.acquire_acked_ms)
        for before, after in zip(ordered, ordered[1:]):
            if before.release_sent_ms is not None:
                gaps.append(after.acquire_acked_ms - before.release_sent_ms)  # type: ignore[operator]
    return gaps


@dataclass
class LoadSummary:
    """Numbers of one load (N runs started together)."""

    runs: int
    succeeded: int
    makespan_s: float
    transitions_per_run: float
    retries_per_run: float
    dynamodb_per_run: float
    dynamodb_failed_per_run: float
    wait_s: Distribution
    handoff_s: Distribution
    overlaps: int
    fence_violations: int
    mean_wall_s: float = float("nan")  # mean duration of one run
    start_spread_s: float = float("nan")  # last start minus first start

    @property
    def fairness(self) -> float:
        """Max wait / mean wait (1 = everyone waited as long; higher = less fair)."""
        return self.wait_s.max / self.wait_s.mean if self.wait_s.mean else float("nan")

    @property
    def dollars_per_run(self) -> float:
        return self.transitions_per_run * DOLLARS_PER_TRANSITION


def summarize_load(runs: Sequence[RunMetrics]) -> LoadSummary:
    """Makespan (first start to last stop), per-run costs (over completed runs), waits, gaps."""
    if not runs:
        raise ValueError("no runs to summarize")
    done = [r for r in runs if r.status == "SUCCEEDED"] or list(runs)
    sections = [s for r in runs for s in r.sections]
    waits = [r.wait_ms / 1000 for r in runs if r.wait_ms is not None]
    return LoadSummary(
        runs=len(runs),
        succeeded=sum(r.status == "SUCCEEDED" for r in runs),
        makespan_s=(max(r.stop_ms for r in runs) - min(r.start_ms for r in runs)) / 1000,
        transitions_per_run=mean(r.transitions.billed for r in done),
        retries_per_run=mean(r.transitions.retries for r in done),
        dynamodb_per_run=mean(r.dynamodb.total for r in done),
        dynamodb_failed_per_run=mean(r.dynamodb.failed for r in done),
        wait_s=Distribution.of(waits),
        handoff_s=Distribution.of([g / 1000 for g in handoff_gaps_ms(sections)]),
        overlaps=len(find_overlaps(sections)),
        fence_violations=len(fence_order_violations(sections)),
        mean_wall_s=mean(r.wall_ms for r in runs) / 1000,
        start_spread_s=(max(r.start_ms for r in runs) - min(r.start_ms for r in runs)) / 1000,
    )


# ----------------------------------------------------------------------------------------
# The example app and its load (need a LocalCloud)
# ----------------------------------------------------------------------------------------

#: The protected task of the example app.
EXAMPLE_PROTECTED_STATE = "Apply update"
EXAMPLE_STACK_NAME = "CustomerUpdates"


@dataclass
class ExampleApp:
    state_machine_arn: str
    bus_name: str
    customers_table: str
    lock_table: str | None
    lock_enabled: bool


def synth_example(lock_enabled: bool = True, fair: bool = False) -> Any:
    """Synthesize the example stack in-process (asset metadata on: the Lambda's code folder)."""
    from locked_workflow.constructs_lib.example_stack import CustomerUpdatesStack
    from locked_workflow.testing.synth import synth_app

    return synth_app(
        lambda app: CustomerUpdatesStack(app, EXAMPLE_STACK_NAME, lock_enabled=lock_enabled, fair=fair),
        context={"aws:cdk:enable-asset-metadata": True},
    )


def deploy_example(cloud: Any, synthesized: Any, *, lock_enabled: bool) -> ExampleApp:
    deployment = cloud.deploy(synthesized.template, assets_dir=synthesized.assets_dir)
    machines = deployment.of_type("AWS::StepFunctions::StateMachine")
    key = "ApplyCustomerUpdatesStateMachine" if lock_enabled else "UnlockedApplyCustomerUpdates"
    return ExampleApp(
        state_machine_arn=deployment.state_machine_arn(key),
        bus_name=deployment.event_bus_name("CustomerEvents"),
        customers_table=deployment.table_name("Customers"),
        lock_table=deployment.table_name("ApplyCustomerUpdatesLockTable") if lock_enabled else None,
        lock_enabled=lock_enabled and len(machines) > 0,
    )


def customer_load(runs: int, customers: int, per_customer: int) -> list[str]:
    """Customer ids of the events to fire: ``runs`` for ``c-1``, then ``per_customer`` each
    for ``c-2`` .. ``c-<customers+1>``, interleaved so the other customers' events arrive
    while ``c-1``'s burst is still queued."""
    others = [f"c-{i}" for i in range(2, customers + 2)]
    load = ["c-1"] * runs
    extra = [c for _ in range(per_customer) for c in others]
    step = max(1, len(load) // (len(extra) + 1)) if extra else 1
    for n, customer in enumerate(extra):
        load.insert(min(len(load), (n + 1) * step + n), customer)
    return load


def fire_customer_updates(
    cloud: Any, app: ExampleApp, customers: Sequence[str], *, work_ms: int
) -> list[tuple[str, str]]:
    """Put one ``CustomerUpdateRequested`` event per entry (balance +1 each) on the app's bus.

    Returns ``(customer id, execution ARN)`` of every execution the rule started, from the
    runtime's delivery log (delivery is synchronous in ``put_events``).
    """
    from locked_workflow.constructs_lib.example_stack import EVENT_DETAIL_TYPE, EVENT_SOURCE

    before = len(cloud.events.deliveries)
    entries = [
        {
            "Source": EVENT_SOURCE,
            "DetailType": EVENT_DETAIL_TYPE,
            "Detail": json.dumps(
                {"customerId": customer, "update": {"balanceDelta": 1}, "workMs": work_ms}
            ),
            "EventBusName": app.bus_name,
        }
        for customer in customers
    ]
    response = cloud.put_events(entries)
    if response["FailedEntryCount"]:
        raise RuntimeError(f"put_events failed for {response['FailedEntryCount']} entries: {response}")
    started = [
        d for d in cloud.events.deliveries[before:] if d.target_arn == app.state_machine_arn
    ]
    failed = [d for d in started if not d.ok]
    if failed or len(started) != len(entries):
        raise RuntimeError(
            f"{len(entries)} events put, {len(started) - len(failed)} executions started; "
            f"failed deliveries: {[d.result for d in failed]}"
        )
    return [(json.loads(d.input)["detail"]["customerId"], d.result) for d in started]


def customer_balances(cloud: Any, table: str) -> dict[str, int]:
    items = cloud.dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]
    return {item["customerId"]["S"]: int(item.get("balance", {"N": "0"})["N"]) for item in items}


# ----------------------------------------------------------------------------------------
# Watching executions
# ----------------------------------------------------------------------------------------

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"})


def wait_all(
    cloud: Any,
    arns: Sequence[str],
    *,
    timeout_s: float,
    progress: Callable[[int, int, dict[str, int]], None] | None = None,
    poll_s: float = 0.25,
) -> dict[str, str]:
    """Poll until every execution ended (or ``timeout_s``); returns ARN -> status."""
    deadline = time.monotonic() + timeout_s
    statuses: dict[str, str] = {}
    while True:
        for arn in arns:
            if statuses.get(arn) not in TERMINAL:
                statuses[arn] = cloud.status(arn)
        counts: dict[str, int] = defaultdict(int)
        for status in statuses.values():
            counts[status] += 1
        done = sum(counts[s] for s in TERMINAL)
        if progress:
            progress(done, len(arns), dict(counts))
        if done == len(arns) or time.monotonic() >= deadline:
            return statuses
        time.sleep(poll_s)


def stderr_progress(prefix: str, *, file: Any = None) -> Callable[[int, int, dict[str, int]], None]:
    """A progress callback on stderr (or ``file``) through tqdm: a live bar on a terminal; plain
    lines otherwise (a CI log) - one at each quarter of the runs and one at the end."""
    from tqdm import tqdm

    out = file if file is not None else sys.stderr
    started = time.monotonic()
    state: dict[str, Any] = {"bar": None, "logged": -1}

    def draw(done: int, total: int, counts: dict[str, int]) -> None:
        failed = sum(counts.get(s, 0) for s in ("FAILED", "TIMED_OUT", "ABORTED"))
        label = f"{counts.get('RUNNING', 0)} running" + (f", {failed} failed" if failed else "")
        bar = state["bar"]
        if bar is None:  # disable=None: no bar when the output is not a terminal
            bar = state["bar"] = tqdm(total=total, desc=prefix, file=out, disable=None, unit="run", leave=True)
        if not bar.disable:
            bar.update(done - bar.n)
            bar.set_postfix_str(label)
        else:
            quarter = 4 * done // max(total, 1)
            if quarter > state["logged"] or done == total:
                state["logged"] = quarter
                print(f"{prefix} {done}/{total} done, {label}  {time.monotonic() - started:.1f}s", file=out, flush=True)
        if done == total:
            bar.close()

    return draw


class QuietCollector:
    """Keeps Python's full garbage collections from stalling a benchmark's process.

    A full (generation 2) collection scans every tracked object and holds the interpreter -
    every execution's thread - while it runs. moto keeps every execution's history, so the
    heap grows with each load: measured, 200-300 ms pauses at 430,000 objects, two or three
    per 30 runs, and the later loads' floor probes and tick threads saw 1.5-1.9 s stalls.
    Step Functions has no such pause between a release and the next holder. Inside this
    context the objects alive are frozen (``gc.freeze()``: left out of every collection) on
    entry and every ``period_s`` after, so a collection scans only what was made since; the
    objects stay alive and refcounting still frees what they drop. ``gc.unfreeze()`` on exit.
    """

    def __init__(self, period_s: float = 2.0) -> None:
        self._period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="quiet-collector", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._period_s):
            gc.freeze()

    def __enter__(self) -> "QuietCollector":
        gc.collect()
        gc.freeze()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        gc.unfreeze()
