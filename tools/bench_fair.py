"""``make bench-fair``: the fair lock against the polling lock and the samples' baseline.

::

    python -m tools.bench_fair [--work 0.25,1,2] [--runs 10,30] [--loads 0.25:100]
        [--locks Polling,Fair,Baseline] [--backend moto|dynamodb-local] [--floor 30]
        [--out out/bench-fair]
    python -m tools.bench_fair --thousand      # 1,000 fair waiters on one key (DynamoDB Local)

The bench stack of :mod:`tools.bench` (a Lambda "Work" that sleeps), with three
locks around the same work: ``Polling`` (``LockedWorkflow`` defaults), ``Fair``
(``Lock.fair``) and ``Baseline`` (the samples' retry-and-wait loop). Task tokens are
AWS-sized (the runtime's default). For each work size and N, N runs start together on one
key. Reported per lock, from execution histories and every DynamoDB call the runs made:

* lock transitions per run (a run's billed state transitions minus an unlocked run's);
* write and read request units per run, as DynamoDB bills them (each call's
  ``ConsumedCapacity``: the item's size before and after a write, rounded up per KB; a
  refused condition: 1 unit);
* dollars per run: those transitions and request units at on-demand prices
  (:data:`PRICE_PER_TRANSITION`, :data:`PRICE_PER_WRU`, :data:`PRICE_PER_RRU`);
* handoff gap p50 / p99 (the next holder's acquire acknowledged - the previous holder's
  release or handoff write sent), and p50 against the *floor*: the engine's own
  write -> ``SendTaskSuccess`` -> parked task resumed, with no lock around it (``--floor``
  samples, measured first);
* overtakes: pairs of runs where the later arrival (by 100 ms or more: the resolution of
  history timestamps on this runtime) was granted first - arrival: when the run's place in
  line was fixed, the fair lock's ticket acknowledged, a polling lock's first refused
  acquire; also counted at any resolution;
* makespan ÷ ideal (N × work), and where it goes: before the first work, the work as run
  (against as asked), release to grant sent, handoff gaps, grant to work, after the last;
* the runtime under each load (:class:`RuntimeMeter`, :class:`FloorProbe`; ``--no-under-load``
  skips them): floor samples taken *during* the load, every DynamoDB request's time and its
  wait for the runtime's DynamoDB serialization, a tick thread's lateness (CPU and GIL
  saturation alone), each handoff split into grant, ``SendTaskSuccess`` and the rest - in the
  start burst (until the last arrival) and after it.

The loads run inside :class:`tools.scenario.QuietCollector`: the process's earlier objects (the
histories of every earlier load, which moto keeps) are frozen out of Python's full garbage
collections, whose pauses stall every execution at once and are no part of Step Functions.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from tools import scenario
from tools.bench import WORK_STATE, build_bench_stack, deploy_bench, table_markdown, table_text
from locked_workflow.state_machines.errors import CONDITIONAL_CHECK_FAILED_CODE
from locked_workflow.state_machines.lock_protocol import WaitPolicy

LOCKS = {"Polling": "Ours", "Fair": "Fair", "Baseline": "Baseline"}
#: Where a run's place in line is fixed (the state whose acknowledged write marks arrival).
ARRIVAL = {"Fair": ("Lock.Enqueue", "TaskSucceeded"), "Polling": ("Lock.Acquire", "TaskFailed"),
           "Baseline": ("Baseline.Acquire", "TaskFailed")}


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def arrival_ms(history: Sequence[dict], lock: str) -> int | None:
    """When the run joined the line (None: it never waited)."""
    state, kind = ARRIVAL[lock]
    inside = False
    for event in history:
        name = (event.get("stateEnteredEventDetails") or {}).get("name")
        if name is not None:
            inside = name == state
        if inside and event["type"] == kind:
            return scenario.epoch_ms(event["timestamp"])
    return None


def tickets_and_fences(history: Sequence[dict]) -> tuple[list[int], list[int]]:
    """The fair lock's tickets a run took (``Lock.Enqueue``'s assigned ``lockTicket``) and the
    fences it was granted (``$lock.fence``): the queue's own order, free of timestamp noise."""
    tickets, fences = [], []
    for event in history:
        assigned = (event.get("stateExitedEventDetails") or {}).get("assignedVariables") or {}
        if "lockTicket" in assigned:
            tickets.append(json.loads(assigned["lockTicket"]))
        if isinstance(assigned.get("lock"), str) and assigned["lock"] not in ("null",):
            value = json.loads(assigned["lock"])
            if isinstance(value, dict) and "fence" in value:
                fences.append(value["fence"])
    return tickets, fences


def ticket_overtakes(runs: Sequence[tuple[int, int]]) -> int:
    """Pairs (ticket, fence of the grant) where a later ticket was granted before an earlier one."""
    return sum(1 for a in runs for b in runs if a[0] < b[0] and b[1] < a[1])


#: Arrivals closer than this are not ordered by the measure: history timestamps are taken
#: after each write returns, on threads of one busy process, so two writes a few ms apart can
#: be stamped in either order.
ARRIVAL_RESOLUTION_MS = 100


def overtakes(arrivals: Sequence[tuple[int, int]], resolution_ms: int = ARRIVAL_RESOLUTION_MS) -> int:
    """Pairs (arrival, grant) where a later arrival (by ``resolution_ms`` or more) was granted
    first."""
    return sum(1 for a in arrivals for b in arrivals if a[0] + resolution_ms <= b[0] and b[1] < a[1])


#: On-demand prices (us-east-1): Step Functions STANDARD, $0.025 per 1,000 state transitions
#: (https://aws.amazon.com/step-functions/pricing/); DynamoDB on-demand, $0.625 per million
#: write and $0.125 per million read request units (https://aws.amazon.com/dynamodb/pricing/on-demand/).
PRICE_PER_TRANSITION = 0.025 / 1000
PRICE_PER_WRU = 0.625 / 1_000_000
PRICE_PER_RRU = 0.125 / 1_000_000

#: The fair lock's states whose counts tell how its handoffs went: a grant and wake-up (the
#: direct path), a release that found no row yet (then a mark), a failed wake-up's claim
#: window, a head that took the lock itself, a fallback look.
FAIR_PATH_STATES = ("Lock.Release.Grant", "Lock.Release.Release", "Lock.Release.ReleaseQueued", "Lock.Release.Mark",
                    "Lock.Release.Reparking", "Lock.Release.WakeAgainEarly", "Lock.Release.ClaimWindow",
                    "Lock.Release.Revoke", "Lock.AcquireHead", "Lock.Inspect", "Lock.Help.Take")


def steady_gaps_ms(sections: Sequence[Any], after_ms: int) -> list[int]:
    """Handoff gaps (as ``scenario.handoff_gaps_ms``) whose earlier release was sent after
    ``after_ms`` (the last run's arrival): the queue's steady state, without the start burst in
    which this runtime is still starting the load's executions."""
    later = [s for s in sections if s.release_sent_ms is not None and s.release_sent_ms >= after_ms]
    firsts = {id(s) for s in later}
    gaps = []
    for group in scenario.by_key(sections).values():
        ordered = sorted((s for s in group if s.acquire_acked_ms is not None), key=lambda s: s.acquire_acked_ms)
        for before, after in zip(ordered, ordered[1:]):
            if id(before) in firsts:
                gaps.append(after.acquire_acked_ms - before.release_sent_ms)
    return gaps


def parse_loads(text: str, locks: Sequence[str]) -> list[tuple[float, int, tuple[str, ...]]]:
    """``--loads``: ``work:N[:Lock+Lock]`` entries, comma-separated (no locks named: ``locks``)."""
    out = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        parts = entry.split(":")
        if len(parts) not in (2, 3):
            raise ValueError(f"--loads entry {entry!r}: expected work:N[:Lock+Lock]")
        named = tuple(parts[2].split("+")) if len(parts) == 3 else tuple(locks)
        if any(name not in LOCKS for name in named):
            raise ValueError(f"--loads entry {entry!r}: locks among {', '.join(LOCKS)}")
        work, n = float(parts[0]), int(parts[1])
        if work <= 0 or n < 2:
            raise ValueError(f"--loads entry {entry!r}: work > 0 and N >= 2")
        out.append((work, n, named))
    return out

_WRITES = {"PutItem", "UpdateItem", "DeleteItem"}
_READS = {"GetItem"}


class CapacityMeter:
    """Request units of every DynamoDB item call, by the item's key, as DynamoDB bills them:
    each call asks for its ``ConsumedCapacity`` (an extra field of the response: the state
    machines read nothing else differently). A refused condition counts 1 write unit."""

    def __init__(self) -> None:
        import threading

        self.units: dict[str, list[float]] = {}  # key -> [write units, read units]
        self._lock = threading.Lock()

    def __enter__(self) -> "CapacityMeter":
        from unittest import mock

        from botocore.client import BaseClient
        from botocore.exceptions import ClientError

        original = BaseClient._make_api_call
        meter = self

        def metered(client: Any, operation: str, params: dict) -> Any:
            if client.meta.service_model.service_name != "dynamodb" or operation not in _WRITES | _READS:
                return original(client, operation, params)
            params = {**params, "ReturnConsumedCapacity": "TOTAL"}
            key = str(next(iter((params.get("Key") or params.get("Item") or {}).values()), {}).get("S"))
            write = operation in _WRITES
            try:
                response = original(client, operation, params)
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") == CONDITIONAL_CHECK_FAILED_CODE:
                    meter._add(key, 1.0, write)
                raise
            meter._add(key, float((response.get("ConsumedCapacity") or {}).get("CapacityUnits", 0)), write)
            return response

        self._patch = mock.patch.object(BaseClient, "_make_api_call", metered)
        self._patch.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._patch.stop()

    def _add(self, key: str, units: float, write: bool) -> None:
        with self._lock:
            slot = self.units.setdefault(key, [0.0, 0.0])
            slot[0 if write else 1] += units

    def of(self, key_part: str) -> tuple[float, float]:
        """(write, read) units of every item whose key contains ``key_part`` (a lock and its rows)."""
        with self._lock:
            found = [v for k, v in self.units.items() if key_part in k]
        return sum(v[0] for v in found), sum(v[1] for v in found)


def load(cloud: Any, arn: str, lock: str, *, runs: int, work_s: float, key: str,
         meter: CapacityMeter | None = None, unlocked_transitions: int = 0,
         runtime: RuntimeMeter | None = None, floor_probe: Any = None) -> dict:
    from contextlib import nullcontext

    probe = floor_probe() if floor_probe is not None else None
    with probe if probe is not None else nullcontext():
        load_from_ms, cpu_from = time.time() * 1000, (time.process_time(), time.monotonic())
        arns = [cloud.start_execution(arn, {"key": key, "workSeconds": work_s}) for _ in range(runs)]
        statuses = scenario.wait_all(cloud, arns, timeout_s=1800,
                                     progress=scenario.stderr_progress(f"{lock} {runs}×{work_s:g}s".ljust(24)))
        load_to_ms, cpu_to = time.time() * 1000, (time.process_time(), time.monotonic())
    histories = {a: cloud.history(a) for a in arns}
    metrics = [scenario.run_metrics(a, histories[a], protected_state=WORK_STATE, status=statuses[a], key=key)
               for a in arns]
    summary = scenario.summarize_load(metrics)
    sections = [s for m in metrics for s in m.sections]
    gaps = scenario.handoff_gaps_ms(sections)
    lines = [(arrival_ms(histories[m.execution], lock), m.acquire_acked_ms) for m in metrics]
    waited = [(a, g) for a, g in lines if a is not None and g is not None]
    by_ticket = []  # (the last ticket a run took, its grant's fence): the fair queue's own order
    last_ticket = {}
    for m in metrics:
        tickets, fences = tickets_and_fences(histories[m.execution])
        if tickets:
            last_ticket[m.execution] = tickets[-1]
        if tickets and fences:
            by_ticket.append((tickets[-1], fences[-1]))
    wru, rru = meter.of(key + "") if meter is not None else (float("nan"), float("nan"))
    # how the fair lock's handoffs went (the tail's explanation): states entered, park timeouts
    paths: dict = {}
    for history in histories.values():
        for event in history:
            name = (event.get("stateEnteredEventDetails") or {}).get("name")
            if name in FAIR_PATH_STATES:
                paths[name] = paths.get(name, 0) + 1
            if event["type"] == "TaskTimedOut":
                paths["park timed out"] = paths.get("park timed out", 0) + 1
    lock_transitions = summary.transitions_per_run - unlocked_transitions
    arrivals = [a for a, _ in lines if a is not None]
    steady = steady_gaps_ms(sections, max(arrivals)) if arrivals else gaps
    held_s = sum(max(0, s.end_ms - s.start_ms) for s in sections) / 1000
    # where the makespan goes besides the work: before the first work starts (the first run's
    # start and acquire), between works (lock and handoff), after the last work ends
    lead_s = (min(s.start_ms for s in sections) - min(m.start_ms for m in metrics)) / 1000 if sections else float("nan")
    trail_s = (max(m.stop_ms for m in metrics) - max(s.end_ms for s in sections)) / 1000 if sections else float("nan")
    under_load: dict = {}
    if runtime is not None:
        burst_end = max(arrivals) if arrivals else load_to_ms
        under_load = {"runtime": runtime_figures(runtime, load_from_ms, load_to_ms, burst_end, (*cpu_from, *cpu_to)),
                      "handoff_parts": handoff_parts(sections, runtime, last_ticket, burst_end),
                      "burst_s": (burst_end - load_from_ms) / 1000}
    if probe is not None:
        floor = probe.gaps()
        burst_end = max(arrivals) if arrivals else load_to_ms
        under_load["floor"] = {"all": _p([g for _, g in floor]), "burst": _p([g for t, g in floor if t < burst_end]),
                               "steady": _p([g for t, g in floor if t >= burst_end])}
    return {
        "under_load": under_load,
        "first_work_s": lead_s, "held_s": held_s, "gaps_sum_s": sum(gaps) / 1000,
        "succeeded": summary.succeeded, "runs": runs,
        "makespan_ratio": summary.makespan_s / (runs * work_s),
        "transitions_per_run": summary.transitions_per_run,
        "lock_transitions_per_run": lock_transitions,
        "wru_per_run": wru / runs, "rru_per_run": rru / runs,
        "dollars_per_run": lock_transitions * PRICE_PER_TRANSITION + wru / runs * PRICE_PER_WRU
        + rru / runs * PRICE_PER_RRU,
        "dynamodb_per_run": summary.dynamodb_per_run, "paths": paths,
        "handoff_p50_ms": percentile(gaps, 50), "handoff_p99_ms": percentile(gaps, 99),
        "steady_gaps": len(steady), "steady_p50_ms": percentile(steady, 50), "steady_p99_ms": percentile(steady, 99),
        "max_gap_ms": max(gaps) if gaps else float("nan"),
        # makespan / ideal = (work as run / work asked) x (makespan / work as run): the machine's
        # slowness running the work itself, apart from what the lock and the start cost
        "work_ratio": held_s / (runs * work_s), "makespan_over_work": summary.makespan_s / held_s if held_s else float("nan"),
        "start_spread_s": summary.start_spread_s, "lead_s": lead_s, "trail_s": trail_s,
        "between_s": summary.makespan_s - lead_s - trail_s - held_s,
        "overtakes": overtakes(waited), "overtakes_any_gap": overtakes(waited, 1), "waited": len(waited),
        "ticket_overtakes": ticket_overtakes(by_ticket) if by_ticket else None,
        "max_over_mean_wait": summary.fairness,
        "overlaps": summary.overlaps, "fence_violations": summary.fence_violations,
    }


def build_floor(stack: Any) -> None:
    """Two machines around one item, no lock: ``FloorWaiter`` parks on a task token it writes
    into the item; ``FloorWaker`` reads it, writes once, and wakes the waiter. The write is the
    fair lock's own grant (its update, condition and ``ALL_NEW``, on an item as large as a lock
    item at a handoff: a token and two AWS-sized owners), so the floor and a handoff differ by
    the lock's states alone, not by what the backend spends on a larger write (on moto a
    one-attribute ``ADD`` takes 1.5 ms, the grant 5 ms)."""
    from aws_cdk import aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks

    from locked_workflow.constructs_lib.dynamodb_tasks import attribute_value, update_item_props
    from locked_workflow.constructs_lib.lock_table import LockTable
    from locked_workflow.state_machines import fair_protocol as fp, lock_protocol as protocol
    from locked_workflow.state_machines.lock_protocol import jsonata

    table = LockTable(stack, "FloorTable").table
    park = sfn.CustomState(stack, "FloorPark", state_json={
        "Type": "Task", "QueryLanguage": "JSONata",
        "Resource": f"arn:{stack.partition}:states:::aws-sdk:dynamodb:putItem.waitForTaskToken",
        "Arguments": {"TableName": table.table_name, "Item": {
            "pk": {"S": jsonata("$states.input.key")}, "token": {"S": jsonata("$states.context.Task.Token")},
            fp.SERVED: {"N": "0"}}},
        "TimeoutSeconds": 300, "Output": jsonata("$states.input")})
    waiter = sfn.StateMachine(stack, "FloorWaiter", definition_body=sfn.DefinitionBody.from_chainable(
        park.next(sfn.Pass.jsonata(stack, "FloorResumed", state_name=FLOOR_RESUMED))),
        query_language=sfn.QueryLanguage.JSONATA)
    table.grant_read_write_data(waiter)
    read = tasks.DynamoGetItem.jsonata(stack, "FloorRead", table=table, consistent_read=True,
                                       key={"pk": attribute_value({"S": jsonata("$states.input.key")})},
                                       assign={"token": jsonata("$states.result.Item.token.S")},
                                       outputs=jsonata("$states.input"))
    owner = "o" * 189  # an AWS-sized owner: a CDK-named execution ARN and '#uuid'
    grant = fp.arguments(jsonata("$states.input.key"), fp.GRANT, {
        ":me": {"S": owner}, ":next": {"S": owner.upper()}, ":stale": {"S": owner},
        ":now": {"N": jsonata(protocol.NOW_EXPRESSION)}, ":expiresAt": {"N": jsonata(protocol.NOW_EXPRESSION)},
        ":grace": {"N": "0"}, ":one": {"N": "1"}, ":prev": {"N": "0"}, ":ticket": {"N": "1"}}, return_values="ALL_NEW")
    write = tasks.DynamoUpdateItem.jsonata(stack, "FloorWrite", state_name=FLOOR_WRITE, table=table,
                                           **update_item_props(grant), outputs=jsonata("$states.input"))
    wake = tasks.CallAwsService.jsonata(stack, "FloorWake", service="sfn", action="sendTaskSuccess",
                                        parameters={"TaskToken": jsonata("$token"), "Output": "{}"},
                                        iam_action="states:SendTaskSuccess", iam_resources=["*"])
    sfn.StateMachine(stack, "FloorWaker", definition_body=sfn.DefinitionBody.from_chainable(read.next(write).next(wake)),
                     query_language=sfn.QueryLanguage.JSONATA)


FLOOR_WRITE, FLOOR_RESUMED = "Floor.Write", "Floor.Resumed"


def measure_floor(cloud: Any, deployment: Any, stack: str, samples: int) -> list[int]:
    """Gaps (ms): the waker's write sent -> the waiter's park acknowledged (resumed)."""
    waiter_arn = deployment.state_machine_arn(f"{stack}/FloorWaiter/Resource")
    waker_arn = deployment.state_machine_arn(f"{stack}/FloorWaker/Resource")
    table = next(v for k, v in deployment.resources.items() if k.startswith("FloorTable"))
    gaps = []
    for n in range(samples):
        key = f"floor-{n}"
        waiter = cloud.start_execution(waiter_arn, {"key": key})
        deadline = time.monotonic() + 60
        while "Item" not in cloud.dynamodb.get_item(TableName=table, Key={"pk": {"S": key}}, ConsistentRead=True):
            if time.monotonic() > deadline:
                raise RuntimeError("the floor's waiter never parked")
            time.sleep(0.02)
        waker = cloud.start_execution(waker_arn, {"key": key})
        cloud.wait_for(waker, timeout=60)
        cloud.wait_for(waiter, timeout=60)
        sent = next(scenario.epoch_ms(e["timestamp"]) for e in _in_state(cloud.history(waker), FLOOR_WRITE)
                    if e["type"] == "TaskStarted")
        resumed = next(scenario.epoch_ms(e["timestamp"]) for e in cloud.history(waiter) if e["type"] == "TaskSucceeded")
        gaps.append(resumed - sent)
    return gaps


# ----------------------------------------------------------------------------------------
# Under load: the runtime's own cost, measured in the same run as the lock's
# ----------------------------------------------------------------------------------------


def _timed_serialization(inner: Any, sink: "RuntimeMeter") -> Any:
    """``patches.serial_dynamodb.run_serialized``, noting how long each request waited for its
    item's locks and then held them (bench instrumentation)."""

    def run_serialized(action: str, params: Any, backend: Any, call: Any) -> Any:
        asked, got = time.perf_counter(), []

        def timed_call() -> Any:
            got.append(time.perf_counter())
            return call()

        try:
            return inner(action, params, backend, timed_call)
        finally:
            if got:
                sink.note_lock(got[0] - asked, time.perf_counter() - got[0])

    return run_serialized


class RuntimeMeter:
    """What the runtime itself spends while a load runs (bench only; nothing in the runtime
    changes):

    * every DynamoDB request and every ``SendTaskSuccess``, from any thread (the state
      machines', the Lambdas', the bench's): when it was sent, how long it took, and of that
      how long it waited for the runtime's DynamoDB serialization (``patches.serial_dynamodb``;
      0 on DynamoDB Local, which has no such lock);
    * a *tick* thread that sleeps :data:`TICK_S` again and again and notes how late it wakes:
      the process's CPU and GIL saturation, felt by a thread that needs neither DynamoDB nor
      the interpreter;
    * the process's CPU time (both cores: ``time.process_time``) against wall time.
    """

    def __init__(self) -> None:
        import threading

        self.requests: list[tuple] = []  # (sent epoch ms, took ms, lock wait ms, op, key, ticket, thread)
        self.locks: list[tuple] = []  # (epoch ms, wait ms, held ms)
        self.ticks: list[tuple] = []  # (epoch ms, late ms)
        self._local = threading.local()
        self._stop = threading.Event()

    def note_lock(self, wait_s: float, held_s: float) -> None:
        self._local.wait_ms = wait_s * 1000
        self.locks.append((time.time() * 1000, wait_s * 1000, held_s * 1000))

    def __enter__(self) -> "RuntimeMeter":
        import threading
        from unittest import mock

        from botocore.client import BaseClient

        from locked_workflow.testing.patches import serial_dynamodb

        meter, original = self, BaseClient._make_api_call
        self._patches = [mock.patch.object(serial_dynamodb, "run_serialized",
                                           _timed_serialization(serial_dynamodb.run_serialized, self))]

        def timed(client: Any, operation: str, params: dict) -> Any:
            service = client.meta.service_model.service_name
            if service != "dynamodb" and operation != "SendTaskSuccess":
                return original(client, operation, params)
            meter._local.wait_ms = 0.0
            key = str(next(iter((params.get("Key") or params.get("Item") or {}).values()), {}).get("S", ""))
            ticket = ((params.get("ExpressionAttributeValues") or {}).get(":ticket") or {}).get("N")
            if operation == "SendTaskSuccess":  # the wake-up of a grant: its record's fence
                try:
                    ticket = str(json.loads(params.get("output") or params.get("Output") or "{}").get("fence"))
                except (ValueError, AttributeError):
                    ticket = None
            sent, started = time.time() * 1000, time.perf_counter()
            try:
                return original(client, operation, params)
            finally:
                meter.requests.append((sent, (time.perf_counter() - started) * 1000, meter._local.wait_ms, operation,
                                       key, ticket, threading.get_ident()))

        self._patches.append(mock.patch.object(BaseClient, "_make_api_call", timed))
        for patch in self._patches:
            patch.start()
        self._cpu = (time.process_time(), time.monotonic())
        self._ticker = threading.Thread(target=self._tick, name="bench-tick", daemon=True)
        self._ticker.start()
        return self

    def _tick(self) -> None:
        while not self._stop.is_set():
            asked = time.perf_counter()
            time.sleep(TICK_S)
            self.ticks.append((time.time() * 1000, (time.perf_counter() - asked - TICK_S) * 1000))

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._ticker.join()
        for patch in reversed(self._patches):
            patch.stop()

    def cpu_mark(self) -> tuple[float, float]:
        return time.process_time(), time.monotonic()


#: The tick thread's sleep (s).
TICK_S = 0.01


class FloorProbe:
    """The floor *under load*: floor samples (:func:`measure_floor`'s write -> ``SendTaskSuccess``
    -> parked task resumed, no lock) taken one after another on a thread of their own while a
    load runs, so each handoff can be judged against what the engine gave a lock-free handoff
    at the same time."""

    def __init__(self, cloud: Any, deployment: Any, stack: str, table: str) -> None:
        import threading

        self._cloud, self._table = cloud, table
        self._waiter = deployment.state_machine_arn(f"{stack}/FloorWaiter/Resource")
        self._waker = deployment.state_machine_arn(f"{stack}/FloorWaker/Resource")
        self.pairs: list[tuple[str, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-floor", daemon=True)
        self._n = 0

    def __enter__(self) -> "FloorProbe":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        cloud = self._cloud
        while not self._stop.is_set():
            self._n += 1
            key = f"floor-load-{id(self)}-{self._n}"
            waiter = cloud.start_execution(self._waiter, {"key": key})
            deadline = time.monotonic() + 120
            while "Item" not in cloud.dynamodb.get_item(TableName=self._table, Key={"pk": {"S": key}},
                                                         ConsistentRead=True):
                if time.monotonic() > deadline:
                    return
                time.sleep(0.05)
            waker = cloud.start_execution(self._waker, {"key": key})
            try:
                cloud.wait_for(waker, timeout=300, poll_s=0.2)
                cloud.wait_for(waiter, timeout=300, poll_s=0.2)
            except TimeoutError:
                return
            self.pairs.append((waiter, waker))

    def gaps(self) -> list[tuple[int, int]]:
        """(write sent epoch ms, gap ms) of each sample."""
        out = []
        for waiter, waker in self.pairs:
            sent = next(scenario.epoch_ms(e["timestamp"]) for e in _in_state(self._cloud.history(waker), FLOOR_WRITE)
                        if e["type"] == "TaskStarted")
            resumed = next(scenario.epoch_ms(e["timestamp"]) for e in self._cloud.history(waiter)
                           if e["type"] == "TaskSucceeded")
            out.append((sent, resumed - sent))
        return out


def _p(values: Sequence[float]) -> dict:
    return {"n": len(values), "p50": percentile(values, 50), "p99": percentile(values, 99),
            "max": max(values) if values else float("nan"), "sum": sum(values)}


def _covered(locks: Sequence[tuple], lo: float, hi: float, longer_than_ms: float = 100) -> float:
    """Of the waits for the serialization longer than ``longer_than_ms`` ending in [lo, hi), the
    share of their time the lock was held (by another request)."""
    import bisect

    held = sorted((t - h, t) for t, _, h in locks)
    starts = [a for a, _ in held]
    waited = covered = 0.0
    for t, wait, h in locks:
        if not lo <= t < hi or wait < longer_than_ms:
            continue
        w_from, w_to = t - h - wait, t - h
        waited += wait
        i = max(0, bisect.bisect_left(starts, w_from - 60_000))
        while i < len(held) and held[i][0] < w_to:
            a, b = held[i]
            covered += max(0.0, min(b, w_to) - max(a, w_from))
            i += 1
    return covered / waited if waited else float("nan")


def runtime_figures(meter: RuntimeMeter, since_ms: float, until_ms: float, burst_end_ms: float,
                    cpu: tuple[float, float, float, float]) -> dict:
    """The meter's samples within a load, in the burst (before ``burst_end_ms``: the last
    arrival) and after it."""
    out: dict = {}
    for phase, lo, hi in (("burst", since_ms, burst_end_ms), ("steady", burst_end_ms, until_ms)):
        locks = [w for t, w, _ in meter.locks if lo <= t < hi]
        held = sum(h for t, _, h in meter.locks if lo <= t < hi)
        ddb = [r for r in meter.requests if lo <= r[0] < hi and r[3] != "SendTaskSuccess"]
        wakes = [r[1] for r in meter.requests if lo <= r[0] < hi and r[3] == "SendTaskSuccess"]
        out[phase] = {
            "span_s": (hi - lo) / 1000,
            "ddb_request_ms": _p([r[1] for r in ddb]), "ddb_lock_wait_ms": _p(locks),
            # the share of the phase some thread held the DynamoDB serialization
            "ddb_lock_busy": held / (hi - lo) if hi > lo else float("nan"),
            "send_task_success_ms": _p(wakes),
            "tick_late_ms": _p([late for t, late in meter.ticks if lo <= t < hi]),
            # while a request waited for the serialization, the share of that time some other
            # request held it: near 1 when the lock itself is the queue, low when the waiting
            # thread was only not running (CPU, GIL)
            "wait_covered": _covered(meter.locks, lo, hi),
            "slowest": [(round(r[1]), round(r[2]), r[3], r[4][:40]) for r in sorted(
                (r for r in meter.requests if lo <= r[0] < hi), key=lambda r: -r[1])[:8]],
        }
    cpu0, wall0, cpu1, wall1 = cpu
    out["process_cpu_cores"] = (cpu1 - cpu0) / (wall1 - wall0) if wall1 > wall0 else float("nan")
    return out


def handoff_parts(sections: Sequence[Any], meter: RuntimeMeter, tickets: dict, burst_end_ms: float) -> dict:
    """Each handoff gap (grant sent -> the next holder's park acknowledged) split into its grant
    request (of which: waiting for the DynamoDB serialization), its ``SendTaskSuccess`` and the
    rest (the interpreter's own steps: from the grant's reply to the wake-up's call, and the
    woken task's resumption), plus the makespan's time between works: work exit -> grant sent
    (the release's take) and park acknowledged -> work entered. ``tickets``: execution -> ticket."""
    grants = {}  # (key, ticket) -> request
    for r in meter.requests:
        if r[3] == "UpdateItem" and r[5] is not None:
            grants[(r[4], r[5])] = r
    wakes = {r[5]: r for r in meter.requests if r[3] == "SendTaskSuccess" and r[5] is not None}  # fence -> request
    parts: dict = {p: {"grant": [], "grant_lock_wait": [], "wake": [], "rest": [], "gap": [], "take": [], "resume": []}
                   for p in ("burst", "steady")}
    for group in scenario.by_key(sections).values():
        ordered = sorted((s for s in group if s.acquire_acked_ms is not None), key=lambda s: s.acquire_acked_ms)
        for before, after in zip(ordered, ordered[1:]):
            if before.release_sent_ms is None:
                continue
            phase = parts["steady" if before.release_sent_ms >= burst_end_ms else "burst"]
            gap = after.acquire_acked_ms - before.release_sent_ms
            phase["gap"].append(gap)
            phase["take"].append(before.release_sent_ms - before.end_ms)
            phase["resume"].append(after.start_ms - after.acquire_acked_ms)
            ticket = tickets.get(after.execution)
            grant = grants.get((str(after.lock_key), str(ticket))) if ticket is not None else None
            if grant is None:
                continue
            wake = wakes.get(str(after.fence))
            phase["grant"].append(grant[1])
            phase["grant_lock_wait"].append(grant[2])
            if wake is not None:
                phase["wake"].append(wake[1])
                phase["rest"].append(gap - grant[1] - wake[1])
    return {phase: {name: _p(values) for name, values in d.items()} for phase, d in parts.items()}


def left_behind(cloud: Any, key_part: str) -> int:
    """Items of the load's key still holding someone: a held lock, queued tickets, queue rows."""
    from locked_workflow.state_machines import fair_protocol as fp

    count = 0
    for table in cloud.dynamodb.list_tables()["TableNames"]:
        for page in cloud.dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
            for item in page["Items"]:
                pk = str(item.get("pk", {}).get("S", ""))
                if key_part not in pk:
                    continue
                served, tickets = fp.counters(item)
                count += (pk.startswith(fp.ROW_MARK) and fp.TOKEN in item) + ("owner" in item and not pk.startswith(
                    fp.ROW_MARK)) + (tickets - served)
    return count


def _in_state(history: Sequence[dict], state: str):
    inside = False
    for event in history:
        name = (event.get("stateEnteredEventDetails") or {}).get("name")
        if name is not None:
            inside = name == state
        if inside:
            yield event


def run(*, works: Sequence[float], runs: Sequence[int], backend: str, locks: Sequence[str] = tuple(LOCKS),
        floor_samples: int = 30, extra_loads: Sequence[tuple[float, int, tuple[str, ...]]] = (),
        under_load: bool = True) -> dict:
    from contextlib import nullcontext

    from locked_workflow.testing import LocalCloud
    from locked_workflow.testing.synth import synth_app

    def stack(app: Any) -> Any:
        built = build_bench_stack(app, "FairBench", ours=WaitPolicy(), fair=True)
        build_floor(built)
        return built

    synthesized = synth_app(stack)
    started = time.monotonic()
    chosen = {name: LOCKS[name] for name in locks}
    results: dict = {"backend": backend, "uncontended_extra_transitions": {}, "loads": []}
    with LocalCloud(backend=backend) as cloud:
        app = deploy_bench(cloud, synthesized, ["Unlocked", *chosen.values()])
        floor = measure_floor(cloud, app.deployment, synthesized.stack_name, floor_samples) if floor_samples else []
        results["floor_p50_ms"], results["floor_p99_ms"] = percentile(floor, 50), percentile(floor, 99)
        solo = {}
        for name, variant in {"Unlocked": "Unlocked", **chosen}.items():
            arn = cloud.start_execution(app.arn(variant), {"key": f"solo-{name}", "workSeconds": 0})
            cloud.wait_for(arn, timeout=120)
            solo[name] = scenario.transition_count(cloud.history(arn)).billed
        results["uncontended_extra_transitions"] = {n: solo[n] - solo["Unlocked"] for n in chosen}
        plan = [(w, n, tuple(chosen)) for w in works for n in runs] + list(extra_loads)
        for _, _, named in extra_loads:
            missing = [x for x in named if x not in chosen]
            if missing:
                raise ValueError(f"--loads names {missing}: add them to --locks")
        floor_table = next(v for k, v in app.deployment.resources.items() if k.startswith("FloorTable"))
        probe = (lambda: FloorProbe(cloud, app.deployment, synthesized.stack_name, floor_table)) \
            if under_load else None
        with scenario.QuietCollector(), CapacityMeter() as meter, \
                (RuntimeMeter() if under_load else nullcontext()) as runtime:
            for index, (work_s, n, named) in enumerate(plan):
                for name in named:
                    key = f"hot-{index}-{name}-{n}-{work_s}#"
                    figures = load(cloud, app.arn(chosen[name]), name, runs=n, work_s=work_s, key=key, meter=meter,
                                   unlocked_transitions=solo["Unlocked"], runtime=runtime, floor_probe=probe)
                    figures["left_behind"] = left_behind(cloud, key)
                    figures["handoff_p50_over_floor"] = figures["handoff_p50_ms"] / results["floor_p50_ms"] \
                        if floor else float("nan")
                    loaded = figures["under_load"].get("floor", {}).get("all", {}).get("p50")
                    figures["handoff_p50_over_loaded_floor"] = figures["handoff_p50_ms"] / loaded \
                        if loaded else float("nan")
                    results["loads"].append({"lock": name, "work_s": work_s, "n": n, **figures})
    results["elapsed_s"] = round(time.monotonic() - started, 1)
    return results


HEADERS = ("work", "N", "lock", "lock transitions/run", "write units/run", "read units/run", "$/run (lock)",
           "handoff p50 / p99 / max (ms)", "p50 ÷ floor", "steady p50 / p99 (ms) [gaps]",
           "overtakes (any gap) [by ticket]", "makespan ÷ ideal", "work ÷ asked", "makespan ÷ work", "succeeded")


def rows(results: dict) -> list[list[str]]:
    return [[f"{r['work_s']:g} s", str(r["n"]), r["lock"], f"{r['lock_transitions_per_run']:.1f}",
             f"{r['wru_per_run']:.1f}", f"{r['rru_per_run']:.1f}", f"{r['dollars_per_run'] * 1e6:.1f} µ$",
             f"{r['handoff_p50_ms']:.0f} / {r['handoff_p99_ms']:.0f} / {r['max_gap_ms']:.0f}",
             f"{r['handoff_p50_over_floor']:.2f}",
             f"{r['steady_p50_ms']:.0f} / {r['steady_p99_ms']:.0f} [{r['steady_gaps']}]",
             f"{r['overtakes']} ({r['overtakes_any_gap']})"
             + (f" [{r['ticket_overtakes']}]" if r.get("ticket_overtakes") is not None else ""),
             f"{r['makespan_ratio']:.2f}", f"{r['work_ratio']:.2f}", f"{r['makespan_over_work']:.2f}",
             f"{r['succeeded']}/{r['runs']}"] for r in results["loads"]]


#: ``--thousand``: the work of each of the 1,000 waiters (the run checks invariants and flat
#: cost per run; its makespan is this machine starting 1,000 executions).
THOUSAND_WORK_S = 0.1
#: Loads ``make bench-fair`` runs beyond the grid: every lock at N = 100 (0.25 s of work).
DEFAULT_EXTRA_LOADS = "0.25:100"


def under_load_lines(r: dict) -> list[str]:
    """The load's runtime figures, burst and steady: the floor under load beside the handoff,
    the handoff's parts, DynamoDB requests and their wait for the runtime's serialization, the
    tick thread's lateness."""
    u = r.get("under_load") or {}
    if not u:
        return []
    f = lambda d: f"{d['p50']:.0f} / {d['p99']:.0f} / {d['max']:.0f} [{d['n']}]"  # noqa: E731
    out = [f"burst (start -> last arrival) {u.get('burst_s', float('nan')):.1f} s; process CPU "
           f"{u['runtime']['process_cpu_cores']:.2f} cores" if "runtime" in u else ""]
    for phase in ("burst", "steady"):
        line = [f"{phase}:"]
        if "floor" in u:
            line.append(f"floor p50/p99/max [n] {f(u['floor'][phase])} ms")
        if "handoff_parts" in u:
            h = u["handoff_parts"][phase]
            line.append(f"handoff {f(h['gap'])} = grant {f(h['grant'])} (serialization wait "
                        f"{f(h['grant_lock_wait'])}) + SendTaskSuccess {f(h['wake'])} + rest {f(h['rest'])}; "
                        f"sums: take {h['take']['sum'] / 1000:.1f} s, gaps {h['gap']['sum'] / 1000:.1f} s, "
                        f"resume {h['resume']['sum'] / 1000:.1f} s")
        if "runtime" in u:
            t = u["runtime"][phase]
            line.append(f"DynamoDB request {f(t['ddb_request_ms'])} ms, serialization wait {f(t['ddb_lock_wait_ms'])}"
                        f" ms, serialization busy {t['ddb_lock_busy']:.0%} (held during waits > 100 ms: "
                        f"{t['wait_covered']:.0%}); SendTaskSuccess "
                        f"{f(t['send_task_success_ms'])} ms; tick late {f(t['tick_late_ms'])} ms")
        out.append("; ".join(line))
    return [line for line in out if line]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_fair", description=__doc__.split("\n")[0])
    parser.add_argument("--work", default="0.25,1,2", help="protected work sizes in seconds (default 0.25,1,2)")
    parser.add_argument("--runs", default="10,30", help="runs started together on one key (default 10,30)")
    parser.add_argument("--locks", default=",".join(LOCKS), help="which locks (default Polling,Fair,Baseline)")
    parser.add_argument("--loads", default=DEFAULT_EXTRA_LOADS,
                        help="more loads beyond the grid: work:N[:Lock+Lock], comma-separated "
                             f"(default {DEFAULT_EXTRA_LOADS!r}: every lock at N = 100; '' for none)")
    parser.add_argument("--floor", type=int, default=30, help="samples of the engine's floor (default 30)")
    parser.add_argument("--thousand", action="store_true",
                        help="the invariant run instead: 1,000 fair waiters with AWS-sized tokens on one key, "
                             f"{THOUSAND_WORK_S:g} s of work each, on DynamoDB Local (unless --backend says)")
    parser.add_argument("--no-under-load", action="store_true",
                        help="skip the runtime's figures during each load (the floor probe, request timing)")
    parser.add_argument("--backend", choices=("moto", "dynamodb-local"), default="moto")
    parser.add_argument("--out", type=Path, default=Path("out") / "bench-fair")
    args = parser.parse_args(argv)
    if args.thousand:
        args.work, args.runs, args.loads, args.locks = f"{THOUSAND_WORK_S:g}", "1000", "", "Fair"
        if "--backend" not in (argv if argv is not None else sys.argv):
            args.backend = "dynamodb-local"
    works = [float(w) for w in args.work.split(",")]
    runs = [int(n) for n in args.runs.split(",")]
    if any(w <= 0 for w in works) or any(n < 2 for n in runs):
        parser.error("--work > 0 and --runs >= 2")
    locks = [name for name in args.locks.split(",") if name]
    if any(name not in LOCKS for name in locks):
        parser.error(f"--locks: choose among {', '.join(LOCKS)}")
    try:
        extra_loads = parse_loads(args.loads, locks)
    except ValueError as error:
        parser.error(str(error))
    results = run(works=works, runs=runs, backend=args.backend, locks=locks, floor_samples=args.floor,
                  extra_loads=extra_loads, under_load=not args.no_under_load)
    extra = results["uncontended_extra_transitions"]
    print(f"Fair lock benchmark, backend {args.backend}, {results['elapsed_s']} s")
    print(f"floor (write -> SendTaskSuccess -> parked task resumed, no lock): p50 {results['floor_p50_ms']:.0f} ms, "
          f"p99 {results['floor_p99_ms']:.0f} ms")
    print("uncontended extra transitions per run: " + ", ".join(f"{k} {v}" for k, v in extra.items()))
    print(table_text(HEADERS, rows(results)))
    bad = [r for r in results["loads"] if r["overlaps"] or r["fence_violations"] or r["succeeded"] != r["runs"]
           or r.get("left_behind") or (r["lock"] == "Fair" and r.get("ticket_overtakes"))]
    for r in results["loads"]:
        print(f"{r['lock']} {r['work_s']:g} s x {r['n']}: makespan {r['makespan_ratio'] * r['n'] * r['work_s']:.1f} s = "
              f"{r['lead_s']:.1f} s before the first work + {r['work_ratio'] * r['n'] * r['work_s']:.1f} s of work "
              f"as run + {r['between_s']:.1f} s between works + {r['trail_s']:.1f} s after the last")
        if r["lock"] == "Fair":
            print(f"fair handoff paths, {r['work_s']:g} s x {r['n']}: {r['paths']}")
        for line in under_load_lines(r):
            print("  " + line)
    print("invariants: " + ("hold (all succeeded, no overlap, fences increase, the fair lock granted in ticket "
                            "order, nothing left held or queued)" if not bad else f"VIOLATED {bad}"))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    (args.out / "results.md").write_text(
        f"floor p50 {results['floor_p50_ms']:.0f} ms, p99 {results['floor_p99_ms']:.0f} ms; "
        "uncontended extra transitions per run: " + ", ".join(f"{k} {v}" for k, v in extra.items()) + "\n\n"
        + table_markdown(HEADERS, rows(results)) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
