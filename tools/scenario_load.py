"""Running a scenario's load on a :class:`~locked_workflow.testing.LocalCloud`: the example app,
its customer-update events, watching the executions, and a quiet garbage collector.

Synthesize and deploy the example app, fire customer-update events through EventBridge, wait
for them with a stderr progress bar; :class:`QuietCollector` keeps full collections from
stalling a benchmark's process.
"""

from __future__ import annotations

import gc
import json
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

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
