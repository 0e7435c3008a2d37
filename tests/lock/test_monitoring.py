"""LockMonitoring's filters judged on REAL log lines - written by the local runtime for executions
of monitored workflows, on both DynamoDB backends - each claim with a line or pattern that must
not match. The runs (``runs``, once per backend for this file and ``test_monitoring_metrics.py``,
its group's other file) and the filters here; the metrics function and the janitor's metric
there. (What it synthesizes: ``test_monitoring_template.py``.)
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from deployed import BACKENDS, shared_deployment
from locked_workflow.testing.log_filters import matches
from locked_workflow.constructs_lib.lock_client import LockClient
from locked_workflow.state_machines import shared_protocol
from monitoring_stack import INSTANT_LEASE_S, KINDS
from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import record_protocol


# ---- real log lines, on both DynamoDB backends ----------------------------------------------------


@dataclass
class Runs:
    """What ran, and every line each log group got."""

    backend: str
    results: dict[str, Any] = field(default_factory=dict)
    lines: dict[str, list[str]] = field(default_factory=dict)  # group role -> messages
    status_events: dict[str, dict] = field(default_factory=dict)  # result name -> its status event's detail
    janitors: dict[str, str] = field(default_factory=dict)  # workflow -> its janitor function's name
    kinds: dict[str, dict] = field(default_factory=dict)  # kind -> run role -> how it ended
    lambda_client: Any = None
    cloud: Any = None

    def of(self, role: str, execution: str | None = None) -> list[dict]:
        found = [json.loads(m) for m in self.lines[role]]
        return [line for line in found if execution is None or line["execution_arn"] == execution]


def _all_lines(logs, group: str) -> list[str]:
    events, token = [], None
    while True:
        page = logs.filter_log_events(logGroupName=group, **({"nextToken": token} if token else {}))
        events.extend(page["events"])
        token = page.get("nextToken")
        if not token:
            break
    key = lambda e: (e["logStreamName"], int(json.loads(e["message"])["id"]))  # noqa: E731
    return [e["message"] for e in sorted(events, key=key)]


def _until(predicate, timeout: float = 30.0, poll_s: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"condition not met within {timeout} s")


def _run_kinds(cloud, app, runs: Runs) -> None:
    """Every other kind, and a section nested in a mutex: a run holds the lock at its gate, a
    second run on the same key gives up at once (Lock.Timeout), the holder's lock is taken
    from it (its owner overwritten, as a takeover does) and its gate opened: it fails Lock.Lost
    at its release. The semaphore has a second holder that keeps its slot, and every kind a
    normal run on keys of its own: their releases give HoldTime."""
    from concurrent.futures import ThreadPoolExecutor

    gates, locks, records = app.table_name("Gates"), app.table_name("Locks"), app.table_name("Records")

    def gate_token(run: str, execution: str) -> str:
        def token() -> str | None:
            status = cloud.stepfunctions.describe_execution(executionArn=execution)["status"]
            if status != "RUNNING":
                ended = cloud.wait_for(execution)
                raise AssertionError(f"{run} ended {status} before its gate: {ended.error}: {ended.cause} ({execution})")
            item = cloud.dynamodb.get_item(TableName=gates, Key={"pk": {"S": run}}, ConsistentRead=True)
            return item.get("Item", {}).get("token", {}).get("S")

        return _until(token, timeout=60)

    def open_gate(token: str) -> None:
        """SendTaskSuccess. moto's looks for the token in every RUNNING execution, and crashes
        (AttributeError) on one that is still starting (no environment yet): another kind's run
        started meanwhile. A local-runtime race, not AWS behaviour: try again."""
        for attempt in range(5):
            try:
                cloud.stepfunctions.send_task_success(taskToken=token, output="{}")
                return
            except AttributeError:
                if attempt == 4:
                    raise
                time.sleep(0.2)

    def start(kind: str, run: str, **document) -> str:
        return cloud.start_execution(app.state_machine_arn(f"{kind}/StateMachine"), {"run": run, **document})

    def steal(execution: str, table: str, owner_attribute: str, key_prefix: str = "") -> None:
        """Overwrite the owner of one lock item the execution holds (a takeover)."""
        key_attribute = "id" if table == records else p.KEY_ATTRIBUTE
        items = cloud.dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]
        held = [i for i in items if i.get(owner_attribute, {}).get("S", "").startswith(execution + "#")
                and key_prefix in i[key_attribute]["S"]
                and not i[key_attribute]["S"].startswith("!")]  # a fair queue row is not the lock
        assert held, f"{execution} holds nothing in {table}"
        cloud.dynamodb.update_item(
            TableName=table, Key={key_attribute: held[0][key_attribute]},
            UpdateExpression="SET #o = :thief", ConditionExpression="#o = :was",
            ExpressionAttributeNames={"#o": owner_attribute},
            ExpressionAttributeValues={":thief": {"S": f"thief#{uuid.uuid4()}"}, ":was": held[0][owner_attribute]})

    def scenario(kind: str) -> dict:
        tag = uuid.uuid4().hex[:8]
        document = {"id": f"k-{tag}", "outer": f"oh-{tag}", "other": f"a-{tag}"}
        holders, tokens = [], []
        for n in range(2 if kind == "Semaphore" else 1):  # one after the other: the second sweeps once
            holders.append(start(kind, f"h{n}-{tag}", **document))
            tokens.append(gate_token(f"h{n}-{tag}", holders[-1]))
        if kind == "Keys":  # the holder's 1 s lease may have ended: block the other run with a client
            LockClient(locks, namespace="keys", dynamodb=cloud.dynamodb).acquire(f"b-{tag}", lease=120)
            timed_out = start(kind, f"x-{tag}", id=f"x-{tag}", other=f"b-{tag}")
        elif kind == "Shared":  # readers share: a writer (a client's mutex) holds the other run's key
            LockClient(locks, namespace="rw", dynamodb=cloud.dynamodb).acquire(f"b-{tag}", lease=120)
            timed_out = start(kind, f"x-{tag}", id=f"b-{tag}")
        else:
            timed_out = start(kind, f"x-{tag}", **{**document, "outer": f"ox-{tag}"})
        ended = {"timed_out": cloud.wait_for(timed_out, timeout=60)}
        owner = f"{record_protocol.PREFIX}{p.OWNER}" if kind == "Record" else p.OWNER
        if kind == "Keys":  # taken over only once the lease has ended
            item = cloud.dynamodb.get_item(TableName=locks, Key=p.lock_item_key(f"keys#k-{tag}"), ConsistentRead=True)["Item"]
            _until(lambda: time.time() * 1000 > int(item[p.EXPIRES_AT]["N"]) + 100)
        if kind == "Shared":  # a reader's hold is its entry: taken away (as a reap does)
            shared_item = cloud.dynamodb.get_item(TableName=locks, Key=p.lock_item_key(f"rw#k-{tag}"),
                                                  ConsistentRead=True)["Item"]
            (reader,) = [o for o in shared_protocol.readers_of(shared_item) if o.startswith(holders[0] + "#")]
            cloud.dynamodb.update_item(TableName=locks, **shared_protocol.arguments(
                f"rw#k-{tag}", shared_protocol.leave_write(int(shared_item[shared_protocol.READERS]["N"])),
                {":one": {"N": "1"}, ":minusOne": {"N": "-1"}}, reader=reader))
        else:
            steal(holders[0], records if kind == "Record" else locks, owner, "inner#" if kind == "Nested" else "")
        # and a normal run on keys of its own (the nested workflow: released by both sections)
        normal = start(kind, f"n-{tag}", id=f"n-{tag}", outer=f"on-{tag}", other=f"no-{tag}")
        open_gate(gate_token(f"n-{tag}", normal))
        ended["normal"] = cloud.wait_for(normal, timeout=60)
        for token in tokens:
            open_gate(token)
        ended["lost"] = cloud.wait_for(holders[0], timeout=60)
        if len(holders) > 1:
            ended["kept"] = cloud.wait_for(holders[1], timeout=60)
        return ended

    with ThreadPoolExecutor(len(KINDS)) as pool:
        for kind, ended in zip(KINDS, pool.map(scenario, KINDS)):
            runs.kinds[kind] = ended
    logs = cloud.client("logs")
    for kind in KINDS:
        runs.lines[kind] = _all_lines(logs, app.ref(f"{kind}/Logs"))


def _run_scenarios(cloud, app) -> Runs:
    runs = Runs(cloud.backend)
    _run_kinds(cloud, app, runs)
    sm = {name: app.state_machine_arn(f"{name}/StateMachine") for name in ("Instant", "Patient")}
    table = app.table_name("Locks")
    instant = LockClient(table, namespace="instant", dynamodb=cloud.dynamodb)

    def owner(namespace: str, key: str) -> str | None:
        item = cloud.dynamodb.get_item(TableName=table, Key=p.lock_item_key(p.namespaced(namespace, key)),
                                       ConsistentRead=True).get("Item", {})
        return item.get(p.OWNER, {}).get("S")

    def held_by(namespace: str, key: str, execution: str) -> None:
        """The run holds the lock and its acquire state has exited (its line is written)."""
        _until(lambda: p.owner_execution(owner(namespace, key)) == execution and any(
            "lock" in (e.get("stateExitedEventDetails", {}).get("assignedVariables") or {})
            for e in cloud.history(execution)))

    # A normal run (1 s of work), and a run whose 1 s lease is taken over while it works
    normal = cloud.start_execution(sm["Instant"], {"id": "free", "seconds": 1})
    lost = cloud.start_execution(sm["Instant"], {"id": "lost", "seconds": 8})  # still at work when taken over
    held_by("instant", "lost", lost)
    time.sleep(INSTANT_LEASE_S + 0.3)
    thief = instant.acquire("lost", lease=60, wait=30)  # the lease ended: watched unchanged, taken over
    # A run that finds its key held, and gives up at once
    busy = instant.acquire("busy", lease=60)
    timed_out = cloud.start_execution(sm["Instant"], {"id": "busy", "seconds": 0})
    runs.results.update(normal=cloud.wait_for(normal), lost=cloud.wait_for(lost), timed_out=cloud.wait_for(timed_out))
    instant.release(busy)
    instant.release(thief)

    # A waiter checks a live holder (not stale), the holder is stopped with its status event
    # dropped (no janitor), the waiter's next check finds it ended and takes the lock over
    cloud.events.emit_status_events = False
    try:
        holder = cloud.start_execution(sm["Patient"], {"id": "stale", "seconds": 120})
        held_by("patient", "stale", holder)
        waiter = cloud.start_execution(sm["Patient"], {"id": "stale", "seconds": 0})
        _until(lambda: any(e["type"] == "TaskStateExited" and "DescribeHolder" in json.dumps(e, default=str)
                           for e in cloud.history(waiter)))
        cloud.stop_execution(holder)
        runs.results["stopped_holder"] = cloud.wait_for(holder)
        runs.results["waiter"] = cloud.wait_for(waiter, timeout=60)
    finally:
        cloud.events.emit_status_events = True

    # A holder stopped while holding; its status event is kept for the janitor tests to deliver
    retired = cloud.start_execution(sm["Patient"], {"id": "retired", "seconds": 120})
    held_by("patient", "retired", retired)
    cloud.events.status_event_filter = lambda detail: detail["executionArn"] != retired
    try:
        cloud.stop_execution(retired)
        runs.results["retired_holder"] = cloud.wait_for(retired)
        runs.status_events["retired_holder"] = _until(
            lambda: next((d for d in cloud.events.dropped_status_events if d["executionArn"] == retired), None))
    finally:
        cloud.events.status_event_filter = None
    runs.status_events["lost"] = _until(
        lambda: next((d for d in cloud.events.status_events if d["executionArn"] == runs.results["lost"].arn), None))
    logs = cloud.client("logs")
    for name in sm:
        runs.lines[name] = _all_lines(logs, app.ref(f"{name}/Logs"))
    runs.janitors = {name: app.function_name(f"{name}/Janitor/Function") for name in sm}
    runs.lambda_client, runs.cloud = cloud.client("lambda"), cloud
    return runs


@pytest.fixture(scope="module", params=BACKENDS)
def runs(request, synth) -> Runs:
    """The scenarios run once per backend for the files of this group (their cloud kept:
    ``deployed.shared_deployment``)."""
    return shared_deployment(request.param, synth.synthesized, _run_scenarios)


def test_scenarios_ended_as_designed(runs):
    r = runs.results
    assert r["normal"].status == "SUCCEEDED"
    assert (r["timed_out"].status, r["timed_out"].error) == ("FAILED", p.ERROR_TIMEOUT)
    assert (r["lost"].status, r["lost"].error) == ("FAILED", p.ERROR_LOST)
    assert r["stopped_holder"].status == "ABORTED" and r["retired_holder"].status == "ABORTED"
    assert r["waiter"].status == "SUCCEEDED", (r["waiter"].error, r["waiter"].cause)


def _matching(pattern: str, messages: list[str]) -> list[dict]:
    return [json.loads(m) for m in messages if matches(pattern, m)]


def test_timeout_filter_counts_exactly_the_timed_out_runs_fail_state(runs, synth):
    pattern = synth.pattern("instant_monitoring", "Timeouts")
    (hit,) = _matching(pattern, runs.lines["Instant"])
    assert hit["execution_arn"] == runs.results["timed_out"].arn and hit["type"] == "FailStateEntered"
    # negative controls: the lost run's Fail state, and the execution's own failure line
    lost_fail = next(l for l in runs.of("Instant", runs.results["lost"].arn) if l["type"] == "FailStateEntered")
    assert not matches(pattern, json.dumps(lost_fail))
    assert any(l["type"] == "ExecutionFailed" and l["details"]["error"] == p.ERROR_TIMEOUT
               for l in runs.of("Instant", runs.results["timed_out"].arn))
    assert _matching(pattern, runs.lines["Patient"]) == []


def test_lost_filter_counts_exactly_the_run_whose_lock_was_taken_over(runs, synth):
    pattern = synth.pattern("instant_monitoring", "Lost")
    (hit,) = _matching(pattern, runs.lines["Instant"])
    assert hit["execution_arn"] == runs.results["lost"].arn and hit["details"]["name"] == "Lock.Lost"
    timeout_fail = next(l for l in runs.of("Instant", runs.results["timed_out"].arn) if l["type"] == "FailStateEntered")
    assert not matches(pattern, json.dumps(timeout_fail))


def test_liveness_filters_count_every_check_and_only_the_check_that_found_the_holder_ended(runs, synth):
    waiter = runs.results["waiter"].arn
    checks = _matching(synth.pattern("patient_monitoring", "LivenessChecks"), runs.lines["Patient"])
    assert len(checks) >= 2 and {c["execution_arn"] for c in checks} == {waiter}
    exits = [l for l in runs.of("Patient", waiter) if l["type"] == "TaskStateExited"
             and l["details"]["name"] == "Lock.DescribeHolder"]
    takeovers = _matching(synth.pattern("patient_monitoring", "LivenessTakeovers"), runs.lines["Patient"])
    assert len(takeovers) == 1 and takeovers[0] == exits[-1]
    stale = json.loads(takeovers[0]["details"]["assignedVariables"]["lockWait"])["stale"]
    assert p.owner_execution(stale) == runs.results["stopped_holder"].arn
    # negative control: the earlier checks found the holder alive (stale null) and do not count
    alive = exits[:-1]
    assert alive and all(json.loads(l["details"]["assignedVariables"]["lockWait"])["stale"] is None for l in alive)
    assert not any(matches(synth.pattern("patient_monitoring", "LivenessTakeovers"), json.dumps(l)) for l in alive)


def test_every_kind_and_a_nested_section_ended_as_designed(runs):
    for kind, ended in runs.kinds.items():
        assert (ended["timed_out"].status, ended["timed_out"].error) == ("FAILED", p.ERROR_TIMEOUT), kind
        assert (ended["lost"].status, ended["lost"].error) == ("FAILED", p.ERROR_LOST), kind
    assert runs.kinds["Semaphore"]["kept"].status == "SUCCEEDED"
    assert runs.kinds["Nested"]["normal"].status == "SUCCEEDED"


def _fail_lines(runs: Runs, kind: str, arn: str) -> list[dict]:
    return [l for l in runs.of(kind, arn) if l["type"] == "FailStateEntered"]


@pytest.mark.parametrize("kind", KINDS)
def test_timeout_and_lost_filters_count_each_run_once_in_every_kind(runs, synth, kind):
    ended = runs.kinds[kind]
    timeouts = _matching(synth.pattern(kind, "Timeouts"), runs.lines[kind])
    lost = _matching(synth.pattern(kind, "Lost"), runs.lines[kind])
    assert [l["execution_arn"] for l in timeouts] == [ended["timed_out"].arn]
    assert [l["execution_arn"] for l in lost] == [ended["lost"].arn]
    # negative controls: the other runs' Fail states match neither pattern
    assert not any(matches(synth.pattern(kind, "Lost"), json.dumps(l))
                   for l in _fail_lines(runs, kind, ended["timed_out"].arn))
    for role in ("kept", "normal"):
        if role in ended:
            assert ended[role].arn not in {l["execution_arn"] for l in timeouts + lost}


def test_a_nested_section_is_counted_where_it_failed_not_where_it_was_rethrown(runs, synth):
    ended = runs.kinds["Nested"]
    found = synth.monitoring("Nested").lock_states
    for role, metric, states in [("timed_out", "Timeouts", found.timeouts), ("lost", "Lost", found.lost)]:
        fails = _fail_lines(runs, "Nested", ended[role].arn)
        # the execution failed with the lock error, in the inner section and through the outer
        # section's re-raise
        assert fails[-1]["details"]["name"] == "Lock.Rethrow"
        (hit,) = [l for l in fails if matches(synth.pattern("Nested", metric), json.dumps(l))]
        assert hit["details"]["name"].startswith("Inner.") and hit["details"]["name"] in states
        state = hit["details"]["name"]
        # negative control: the filter of before - the workflow's own section's state only -
        # matches no line of the run (the Lost alarm never fired)
        from locked_workflow.constructs_lib.monitoring_filters import state_filter

        before = state_filter("FailStateEntered", "Lock." + state.split(".")[1]).log_pattern_string
        assert not any(matches(before, m) for m in runs.lines["Nested"] if ended[role].arn in m)
