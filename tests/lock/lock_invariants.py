"""Test-side helpers over execution histories; the invariants themselves live in
``tools.scenario`` (shared with the demo and the bench)."""

from __future__ import annotations

import dataclasses
import time
from typing import Iterable, Optional

from tools import scenario
from tools.scenario import CriticalSection, fence_order_violations, find_overlaps
from locked_workflow.state_machines.lock_protocol import CONDITION_FAILED

__all__ = ["critical_sections", "fence_order_violations", "find_overlaps", "held_interval",
           "overlaps_across_keys", "presence_dated_back", "probe_as_client", "redrive", "refused_acquires", "state_entered", "states_entered_after_redrive", "HeartbeatCounter", "LeaseEndsSeen"]


def state_entered(result) -> list[str]:
    """Names of the states an execution entered, in order."""
    return [
        e["stateEnteredEventDetails"]["name"] for e in result.history if e["type"].endswith("StateEntered")
    ]


def redrive(cloud, arn: str, *, reevaluates: bool):
    """Redrive ``arn`` under one reading of a redriven Parallel's ``Arguments`` (evaluated
    again, or not: undocumented) and wait for its end; the runtime's reading is restored after."""
    options = cloud.redrive_options
    saved, options.reevaluates_arguments = options.reevaluates_arguments, reevaluates
    try:
        cloud.stepfunctions.redrive_execution(executionArn=arn)
        time.sleep(0.5)  # (RUNNING again at once; its end comes later)
        return cloud.wait_for(arn, timeout=120)
    finally:
        options.reevaluates_arguments = saved


def states_entered_after_redrive(result) -> list[str]:
    """Names of the states an execution entered since its (first) redrive, in order."""
    redriven = next(i for i, e in enumerate(result.history) if e["type"] == "ExecutionRedriven")
    return [e["stateEnteredEventDetails"]["name"] for e in result.history[redriven:] if e["type"].endswith("StateEntered")]


def critical_sections(results: Iterable, state_name: str, key: Optional[str] = None) -> list[CriticalSection]:
    """The critical sections (``state_name`` entered → exited) of every result."""
    return [
        section
        for result in results
        for section in scenario.critical_sections(result.arn, result.history, protected_state=state_name, key=key)
    ]


def overlaps_across_keys(sections: list[CriticalSection]) -> list[tuple[CriticalSection, CriticalSection]]:
    """Pairs of sections of *different* keys that ran at the same time."""
    one_lane = [dataclasses.replace(s, key="*", lock_key=s.key) for s in sections]
    return [(a, b) for a, b in find_overlaps(one_lane) if a.lock_key != b.lock_key]


def held_interval(result) -> tuple[float, float]:
    """A span (s) that contains the time the execution held its lock: from sending the winning
    acquire write (its last TaskScheduled in Lock.Acquire) to the release acknowledged."""
    start = end = None
    scheduled = None
    for event in result.history:
        if event["type"] == "TaskScheduled":
            scheduled = event["timestamp"].timestamp()
        elif event["type"] == "TaskStateExited":
            name = event["stateExitedEventDetails"]["name"]
            if name == "Lock.Acquire":
                start = scheduled
            elif name == "Lock.Release":
                end = event["timestamp"].timestamp()
    return start, end


def refused_acquires(result) -> list[tuple[float, float]]:
    """Spans (s) from sending an acquire write to its refusal, one per refused attempt."""
    spans, scheduled = [], None
    for event in result.history:
        if event["type"] == "TaskScheduled":
            scheduled = event["timestamp"].timestamp()
        elif event["type"] == "TaskFailed" and event["taskFailedEventDetails"].get("error") == CONDITION_FAILED:
            spans.append((scheduled, event["timestamp"].timestamp()))
    return spans


def park_round_events(result, protected_state: str, park_state: str = "Lock.Park") -> list[int]:
    """History events of each park round of a run: from entering the park state to entering it
    again, or - the last round - to entering the protected work. A section's history budget
    counts every round as at most ``fair_protocol.EVENTS_PER_PARK_ROUND`` events."""
    marks = [i for i, e in enumerate(result.history)
             if e.get("stateEnteredEventDetails", {}).get("name") in (park_state, protected_state)]
    names = [result.history[i]["stateEnteredEventDetails"]["name"] for i in marks]
    return [marks[n + 1] - marks[n] for n in range(len(marks) - 1) if names[n] == park_state]


def presence_dated_back(cloud, table: str, stored_key: str) -> None:
    """Date a hold's presence registration on ``stored_key`` ``PRESENCE_SETTLE_MS`` back, as a
    hold at work that long would have it (conditioned on its token being there). The settle is
    the state machines' tests' subject (``test_fair_lock``'s D1-fair case waits it out); a
    client's case that waited it too would be 20 s longer."""
    from locked_workflow.state_machines import lock_protocol as p

    cloud.dynamodb.update_item(
        TableName=table, Key={"pk": {"S": stored_key}},
        UpdateExpression="SET #at = #at - :settle", ConditionExpression="attribute_exists(#token)",
        ExpressionAttributeNames={"#at": p.PRESENCE_AT, "#token": p.PRESENCE},
        ExpressionAttributeValues={":settle": {"N": str(p.PRESENCE_SETTLE_MS)}})


class HeartbeatCounter:
    """A Step Functions client that records when ``SendTaskHeartbeat`` was called (a client's
    presence probes), otherwise ``stepfunctions`` itself."""

    def __init__(self, stepfunctions) -> None:
        self._stepfunctions, self.calls = stepfunctions, []

    def __getattr__(self, name):
        return getattr(self._stepfunctions, name)

    def send_task_heartbeat(self, **kwargs):
        self.calls.append(time.time())
        return self._stepfunctions.send_task_heartbeat(**kwargs)


class LeaseEndsSeen:
    """``with LeaseEndsSeen(read, execution) as seen:`` every ``expiresAt`` the lock item (as
    ``read()`` returns it) showed while ``execution`` held it, polled in a thread: a live
    holder's never changes (an ABANDONED or RETIRE would shorten it)."""

    def __init__(self, read, execution: str) -> None:
        import threading

        self.read, self.execution, self.seen = read, execution, set()
        self._done, self._thread = threading.Event(), threading.Thread(target=self._watch)

    def _watch(self) -> None:
        from locked_workflow.state_machines import lock_protocol as p

        while not self._done.is_set():
            item = self.read()
            if self.execution in item.get(p.OWNER, {}).get("S", ""):
                self.seen.add(int(item[p.EXPIRES_AT]["N"]))
            time.sleep(0.05)

    def __enter__(self) -> set:
        self._thread.start()
        return self.seen

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()


def probe_as_client(cloud, app, key: str, fence: int, role: str | None = None) -> dict:
    """A ``LockClient``'s protected work: the stack's probe Lambda (``Probe``) with the
    client's fence - it counts the holders inside at entry, the client among them (``role``:
    a read/write lock's ``read`` or ``write``, counted apart)."""
    import json

    event = {"key": key, "workMs": 100, "fence": fence, **({"role": role} if role else {})}
    response = cloud.client("lambda").invoke(FunctionName=app.function_name("Probe"), Payload=json.dumps(event).encode())
    assert "FunctionError" not in response, response["Payload"].read()
    return json.loads(response["Payload"].read())
