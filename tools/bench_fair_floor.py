"""The engine's floor: a lock-free handoff (write -> ``SendTaskSuccess`` -> parked task resumed),
measured before the loads (:func:`measure_floor`) and during them (:class:`FloorProbe`), so
each handoff of the fair bench can be judged against it.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from tools import scenario


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


def _in_state(history: Sequence[dict], state: str):
    inside = False
    for event in history:
        name = (event.get("stateEnteredEventDetails") or {}).get("name")
        if name is not None:
            inside = name == state
        if inside:
            yield event
