"""The runtime's own cost under a fair bench load, measured in the same run as the lock's
(:class:`RuntimeMeter`: DynamoDB requests, their wait for the runtime's serialization,
``SendTaskSuccess`` calls, a tick thread's lateness, CPU), and the figures read from it.
"""

from __future__ import annotations

import json
import time
from typing import Any, Sequence

from tools import scenario
from tools.bench_fair_figures import percentiles


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


def wait_covered(locks: Sequence[tuple], lo: float, hi: float, longer_than_ms: float = 100) -> float:
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
            "ddb_request_ms": percentiles([r[1] for r in ddb]), "ddb_lock_wait_ms": percentiles(locks),
            # the share of the phase some thread held the DynamoDB serialization
            "ddb_lock_busy": held / (hi - lo) if hi > lo else float("nan"),
            "send_task_success_ms": percentiles(wakes),
            "tick_late_ms": percentiles([late for t, late in meter.ticks if lo <= t < hi]),
            # while a request waited for the serialization, the share of that time some other
            # request held it: near 1 when the lock itself is the queue, low when the waiting
            # thread was only not running (CPU, GIL)
            "wait_covered": wait_covered(meter.locks, lo, hi),
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
    return {phase: {name: percentiles(values) for name, values in d.items()} for phase, d in parts.items()}
