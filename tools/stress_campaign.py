"""The stress campaign's runs: executions, Python clients, stops and redrives over one deployment.

:func:`run_campaign` runs a plan (``tools/stress_plan.py``) with the faults on
(``tools/stress_faults.py``) and the janitor's events duplicated and late, settles, reads the
tables (``tools/stress_settle.py``) and judges (``tools/stress_judge.py``).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import sys
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from botocore.exceptions import ClientError

# imported once, before any in-process Lambda runs: the janitor function bundles its own copy of
# constructs_lib, and a lazy import racing with its invocation could bind that copy's exception
# classes, which the client here does not raise (two ClientAsync runs failed on LockHeld so)
from locked_workflow.constructs_lib.lock_client import LockClient, LockError, LockHeld, LockHeldInThisThread, LockLost
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines.errors import ERROR_TIMEOUT, LAMBDA_TIMED_OUT
from tools.rate_checks import admission_stamps
from tools.stress_faults import campaign_faults
from tools.stress_history import event_ms, now_ms, run_progress, stored_key, timeline, trail, waits_of
from tools.stress_judge import judge
from tools.stress_plan import Hold, Report, Run, Wait
from tools.stress_settle import left_held, next_arrivals, probe_items, record_balances, rows_left, seed_records, table_name
from tools.stress_stack import (
    CLIENT_LEASE_S,
    CLIENT_SHAPES,
    CLIENT_WAIT_S,
    COALESCE_NAMESPACE,
    LONG_WAIT_ATTEMPTS,
    READINGS,
    RUN_TIMEOUT_S,
    SHAPES,
    TRANSIENT_ERRORS,
)


class _Campaign:
    """One campaign's runs over one deployment: executions, clients, stops and redrives."""

    def __init__(self, cloud: Any, app: Any, rng: random.Random) -> None:

        self.cloud, self.app, self.rng = cloud, app, rng
        self.rng_guard = threading.Lock()
        self.arns = {  # every shape's state machine is named after it
            shape: f"arn:aws:states:{cloud.region}:{cloud.account_id}:stateMachine:{shape}"
            for shape in set(SHAPES) - CLIENT_SHAPES | {"Unlocked"}
        }
        self.locks_table = table_name(app, "LocksTable")
        self.probe_name = app.function_name("Probe")
        self.client = LockClient(self.locks_table, namespace="x", dynamodb=cloud.dynamodb)
        self.lambda_client = cloud.client("lambda")
        self.counts: Counter = Counter()

    def uniform(self, low: float, high: float) -> float:
        with self.rng_guard:
            return self.rng.uniform(low, high)

    def count(self, label: str) -> None:
        with self.rng_guard:
            self.counts[label] += 1

    # -- executions ---------------------------------------------------------------------

    def execution(self, run: Run) -> None:
        cloud = self.cloud
        run.arn = cloud.start_execution(self.arns[run.shape], run.document, name=f"{run.shape}-{uuid.uuid4()}")
        if run.stop is not None:
            self.stop_when_due(run)
        result = cloud.wait_for(run.arn, timeout=RUN_TIMEOUT_S)
        if result.status == "TIMED_OUT" or run.shape == "Cancelled":  # (a cancelled section's lock)
            run.holds += self.holds_at_end(run)
        if run.redrive and result.status in ("FAILED", "ABORTED", "TIMED_OUT") and run.shape != "Unlocked":
            try:
                cloud.stepfunctions.redrive_execution(executionArn=run.arn)
                run.redriven = True
                result = cloud.wait_for(run.arn, timeout=RUN_TIMEOUT_S)
            except ClientError as refused:  # e.g. ExecutionNotRedrivable: the history limit reached
                self.count(f"redrive refused: {refused.response['Error']['Code']}")
        run.status, run.error, run.cause = result.status, result.error, result.cause
        run.events = timeline(result.history)
        run.waits = waits_of(run.events)
        if run.shape == "Rate":
            run.admissions = admission_stamps(result.history)
        run.trail = trail(result.history)

    def stop_when_due(self, run: Run) -> None:
        """Stop ``run`` after its delay, once it is inside its work, as soon as it waits for its
        key, or after a long wait."""
        cloud = self.cloud
        if run.stop == "delay":
            time.sleep(run.stop_after_s)
        else:
            deadline = time.monotonic() + (75 if run.stop == "long-wait" else 30)
            while time.monotonic() < deadline and cloud.status(run.arn) == "RUNNING":
                attempts, refused, entered = run_progress(cloud.history(run.arn))
                due = {"holding": entered, "waiting": entered or refused > 0,
                       "long-wait": entered or attempts >= LONG_WAIT_ATTEMPTS}[run.stop]
                if due:
                    break
                time.sleep(1.0 if run.stop == "long-wait" else 0.3)
        if cloud.status(run.arn) != "RUNNING":
            return
        attempts, refused, entered = run_progress(cloud.history(run.arn))
        cloud.stop_execution(run.arn, error="Stress.Stop", cause="stopped by the campaign")
        if cloud.status(run.arn) == "ABORTED":
            run.stopped, run.attempts_at_stop = True, attempts
            run.stopped_waiting = refused > 0 and not entered
            run.holds += self.holds_at_end(run)

    def holds_at_end(self, run: Run) -> list[Hold]:
        """The locks ``run``'s execution held when it ended: its keys' lock items whose owner
        is one of its acquisitions (read before any redrive; a takeover waits for the grace)."""
        ended_ms = event_ms(self.cloud.describe(run.arn)["stopDate"])
        keys = {run.key} | {c["key"] for c in run.document.get("children", [])}
        keys |= {run.document[side]["key"] for side in ("left", "right") if side in run.document}
        holds = []
        for key in sorted(keys):
            stored = stored_key(key)
            item = self.cloud.dynamodb.get_item(
                TableName=self.locks_table, Key=protocol.lock_item_key(stored), ConsistentRead=True,
            ).get("Item", {})
            owner = item.get(protocol.OWNER, {}).get("S")
            if protocol.owner_execution(owner) == run.arn and protocol.GRACE in item:
                holds.append(Hold(stored, ended_ms, int(item[protocol.GRACE]["N"]), run.shape == "Cancelled"))
        return holds

    # -- clients ------------------------------------------------------------------------

    def invoke_probe(self, item: dict, fence: int) -> str | None:
        """Run the probe in-process with ``fence``; the function's error type, if any."""
        payload = {"key": item["key"], "workMs": item["workMs"], "fail": item["fail"], "fence": fence}
        response = self.lambda_client.invoke(FunctionName=self.probe_name, Payload=json.dumps(payload).encode())
        body = response["Payload"].read()
        if not response.get("FunctionError"):
            return None
        error = json.loads(body).get("errorType", "Unknown")
        if error == LAMBDA_TIMED_OUT:
            # AWS stops the handler at its timeout; the in-process runtime cannot and lets it
            # run on: a client that releases now would let the next holder in beside it. The
            # probe's own count of holders inside tells when it is over.
            self.wait_probe_left(item["key"])
        return error

    def wait_probe_left(self, key: str, deadline_s: float = 60.0) -> None:
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            inside = self.cloud.dynamodb.get_item(
                TableName=table_name(self.app, "Probes"), Key={"pk": {"S": key}}, ConsistentRead=True,
            ).get("Item", {}).get("inside", {}).get("N", "0")
            if int(inside) <= 0:
                return
            time.sleep(0.1)

    def _release_again(self, lease: Any, error: ClientError) -> None:
        """Release ``lease`` after its release failed with a transient error (an injected
        fault: botocore's retries exhausted). A lost response (``InternalServerError``) may
        have released it already; a waiter may have taken it since, which is no loss."""

        for _ in range(20):
            try:
                self.client.release(lease)
                return
            except LockLost:
                if error.response["Error"]["Code"] == "InternalServerError":
                    return
                raise
            except ClientError as again:
                if again.response["Error"]["Code"] not in TRANSIENT_ERRORS:
                    raise
                error = again
                time.sleep(0.2)
        raise error

    def client_thread(self, run: Run) -> None:
        """A thread holding its key (``ClientNested``: re-entering its own hold around the work,
        then working again under the outer block - leaving the inner one released nothing).
        A transient error is retried as an application would: the acquire with the same owner
        (one whose response was lost is ours), the release until it is done."""

        item, started = run.document, now_ms()
        owner = f"{self.client.owner}:{uuid.uuid4()}"  # repeatable (no "#": not one of its own)
        deadline = time.monotonic() + CLIENT_WAIT_S
        while run.status == "":
            held: dict[str, Any] = {}
            try:
                wait = max(0.0, deadline - time.monotonic())
                with self.client.hold(run.key, owner=owner, lease=CLIENT_LEASE_S, wait=wait) as lease:
                    held["lease"] = lease
                    run.waits.append(Wait(stored_key(run.key), started, now_ms()))
                    run.events.append((now_ms(), "enter", stored_key(run.key)))
                    if run.shape == "ClientNested":
                        with self.client.hold(run.key, lease=CLIENT_LEASE_S, wait=CLIENT_WAIT_S) as inner:
                            if inner.fence != lease.fence or inner.owner != lease.owner:
                                run.problems.append(f"re-entered hold got fence {inner.fence}, enclosing {lease.fence}")
                            first = self.invoke_probe(item, inner.fence)
                        second = self.invoke_probe(dict(item, fail=False), lease.fence)  # still held
                        held["error"] = first or second
                    else:
                        held["error"] = self.invoke_probe(item, lease.fence)
            except LockHeld:  # still held at the deadline (a wait of 0 once it passed)
                run.waits.append(Wait(stored_key(run.key), started, now_ms()))
                held["error"] = ERROR_TIMEOUT
            except LockError as error:  # e.g. LockLost on release: no documented outcome
                held["error"] = f"{type(error).__name__}: {error}"
            except ClientError as error:
                if error.response["Error"]["Code"] not in TRANSIENT_ERRORS or ("lease" in held) != ("error" in held):
                    raise
                self.count("client: transient error retried")
                if "lease" in held:  # the work ran; its release failed
                    self._release_again(held["lease"], error)
                else:
                    time.sleep(0.1)
                    continue
            run.error = held["error"]
            run.status = "FAILED" if run.error else "SUCCEEDED"

    def client_async(self, run: Run) -> None:
        """An event loop whose tasks each hold a key: a task refused because another task of
        the loop holds it (``LockHeldInThisThread``) or because someone else does
        (``LockHeld``) awaits and tries again, up to its wait (transient errors: as in
        :meth:`client_thread`)."""

        async def task(item: dict) -> str | None:
            started = now_ms()
            owner = f"{self.client.owner}:{uuid.uuid4()}"  # repeatable (no "#": not one of its own)
            deadline = time.monotonic() + CLIENT_WAIT_S
            while True:
                held: dict[str, Any] = {}
                try:
                    with self.client.hold(item["key"], owner=owner, lease=CLIENT_LEASE_S, wait=0) as lease:
                        held["lease"] = lease
                        run.waits.append(Wait(stored_key(item["key"]), started, now_ms()))
                        run.events.append((now_ms(), "enter", stored_key(item["key"])))
                        held["error"] = await asyncio.to_thread(self.invoke_probe, item, lease.fence)
                    return held["error"]
                except LockHeldInThisThread:
                    self.count("same-thread refusals (asyncio)")
                    pause = self.uniform(0.05, 0.3)
                except LockHeld:
                    pause = self.uniform(0.2, 1.0)
                except LockError as error:  # e.g. LockLost on release: no documented outcome
                    return f"{type(error).__name__}: {error}"
                except ClientError as error:
                    if error.response["Error"]["Code"] not in TRANSIENT_ERRORS or ("lease" in held) != ("error" in held):
                        raise
                    self.count("client: transient error retried")
                    if "lease" in held:
                        self._release_again(held["lease"], error)
                        return held["error"]
                    pause = 0.1
                if time.monotonic() + pause > deadline:
                    run.waits.append(Wait(stored_key(item["key"]), started, now_ms()))
                    return ERROR_TIMEOUT
                await asyncio.sleep(pause)

        async def main() -> list[str | None]:
            return list(await asyncio.gather(*(task(item) for item in run.document["tasks"])))

        run.task_errors = asyncio.run(main())
        run.error = next((error for error in run.task_errors if error), None)
        run.status = "FAILED" if run.error else "SUCCEEDED"

    def one(self, run: Run) -> Run:
        try:
            if run.shape == "ClientAsync":
                self.client_async(run)
            elif run.shape in CLIENT_SHAPES:
                self.client_thread(run)
            else:
                self.execution(run)
        except Exception as error:  # noqa: BLE001 - the run's outcome: judged, not a crash
            run.status, run.error = "FAILED", f"campaign error {type(error).__name__}: {error}"
        return run


def run_campaign(cloud: Any, app: Any, planned: list[Run], *, seed: int, settle_s: float = 20.0,
                 readings: tuple[str, ...] = ("strict", "reevaluate"), progress: bool = False) -> Report:
    """Run ``planned`` (split in one contiguous share per redrive reading, in order), with the
    faults on, the janitor's events duplicated and late; settle; judge. A run is redriven as
    soon as it ended: within its stop grace, its Lambda maybe still running."""
    from locked_workflow.testing.faults import dynamodb_faults

    rng = random.Random(seed + 1)
    fault_log: Counter = Counter()
    campaign = _Campaign(cloud, app, random.Random(seed + 2))
    events = cloud.events
    saved = (events.duplicate_deliveries, events.late_copies_after, cloud.redrive_options.reevaluates_arguments)
    delivered_before = len(events.deliveries)
    events.duplicate_deliveries, events.late_copies_after = 1, math.inf
    finished = threading.Event()

    def late_copies() -> None:  # at random moments: janitor events long after their execution ended
        while not finished.wait(rng.uniform(3, 15)):
            events.deliver_late_copies()

    deliverer = threading.Thread(target=late_copies, name="stress-late-copies", daemon=True)
    deliverer.start()
    share = math.ceil(len(planned) / len(readings))
    if any(run.shape == "Record" for run in planned):
        seed_records(cloud, app)
    try:
        with dynamodb_faults(*campaign_faults(rng, fault_log)):
            for index, reading in enumerate(readings):
                cloud.redrive_options.reevaluates_arguments = READINGS[reading]
                part = planned[index * share:(index + 1) * share]
                for run in part:
                    run.reading = reading
                with ThreadPoolExecutor(max_workers=24) as pool:
                    futures = []
                    for run in part:
                        futures.append(pool.submit(campaign.one, run))
                        time.sleep(rng.uniform(0, 0.05))
                    for done, future in enumerate(futures, 1):
                        future.result()
                        if progress and done % 25 == 0:
                            print(f"  {reading}: {done}/{len(part)} runs ended", file=sys.stderr)
        finished.set()
        deliverer.join()
        events.deliver_late_copies()  # once more at the end, before settling
        # the janitor retires stopped holders' locks; their graces then pass
        time.sleep(settle_s)
    finally:
        finished.set()
        events.duplicate_deliveries, events.late_copies_after, cloud.redrive_options.reevaluates_arguments = saved
    fault_log.update(campaign.counts)
    for delivery in events.deliveries[delivered_before:]:
        if delivery.kind != "first":
            fault_log[f"{delivery.kind} janitor event"] += 1
    probe = probe_items(cloud, app)
    held, to_pass = left_held(cloud, app)
    late, arrivals = next_arrivals(cloud, app, to_pass)
    records, records_held = record_balances(cloud, app)
    report = Report(planned, probe, fault_log, held + records_held + late, arrivals=arrivals, records=records,
                    coalesce_rows=rows_left(cloud, app, COALESCE_NAMESPACE))
    report.violations = judge(report)
    return report
