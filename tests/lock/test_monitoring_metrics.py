"""LockMonitoring's metrics on REAL log lines, on both DynamoDB backends: the janitor counts each
retired lock once in the workflow's namespace, and the metrics function measures wait and hold
from the delivered lines of every kind of section (and ignores lines without a duration). (The
runs: ``test_monitoring.py``'s ``runs``, whose group this file is in.)"""

from __future__ import annotations

import base64
import gzip
import importlib
import json
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from locked_workflow.testing.log_filters import matches
from monitoring_stack import KINDS
from locked_workflow.state_machines import lock_protocol as p
from test_monitoring import Runs, runs  # noqa: F401 - runs: the stack's fixture


def _janitor_metric(runs: Runs, workflow: str, detail: dict, capfd) -> tuple[str, Any]:
    """Deliver ``detail`` to ``workflow``'s janitor; the namespace and JanitorRetires it published
    (in its log group, where Lambda puts the function's output: none of it in the test's)."""
    event = {"version": "0", "id": str(uuid.uuid4()), "source": "aws.states", "account": "123456789012",
             "detail-type": "Step Functions Execution Status Change", "time": "2026-01-01T00:00:00Z",
             "region": "us-east-1", "resources": [detail["executionArn"]], "detail": detail}
    capfd.readouterr()
    logged = len(runs.cloud.function_logs(runs.janitors[workflow]))
    response = runs.lambda_client.invoke(FunctionName=runs.janitors[workflow], Payload=json.dumps(event).encode())
    assert "FunctionError" not in response, response["Payload"].read()
    assert not _emf(capfd.readouterr().out.splitlines())  # none of the function's output in the test's
    (emf,) = _emf(runs.cloud.function_logs(runs.janitors[workflow])[logged:])
    (directive,) = emf["_aws"]["CloudWatchMetrics"]
    assert directive["Metrics"] == [{"Name": "JanitorRetires", "Unit": "Count"}]
    assert directive["Dimensions"] == [[]]  # none, as the monitoring's metric
    retires = emf["JanitorRetires"]
    return directive["Namespace"], sum(retires) if isinstance(retires, list) else retires


def test_janitor_counts_each_retired_lock_once_in_the_workflows_namespace(runs, synth, capfd):
    event = runs.status_events["retired_holder"]
    assert _janitor_metric(runs, "Patient", event, capfd) == (synth.stack.patient_monitoring.namespace, 1)
    # negative controls: the same event again retires nothing more, and a run whose lock was
    # taken over before it ended leaves nothing to retire
    assert _janitor_metric(runs, "Patient", event, capfd) == (synth.stack.patient_monitoring.namespace, 0)
    assert _janitor_metric(runs, "Instant", runs.status_events["lost"], capfd) == (
        synth.stack.instant_monitoring.namespace, 0)


# ---- the metrics function on a real subscription delivery --------------------------------------


def _subscription_event(lines: list[str], group: str, message_type: str = "DATA_MESSAGE") -> dict:
    data = {
        "messageType": message_type, "owner": "123456789012", "logGroup": group, "logStream": "states/x",
        "subscriptionFilters": ["DurationsSubscription"],
        "logEvents": [{"id": str(i), "timestamp": int(json.loads(m)["event_timestamp"]), "message": m}
                      for i, m in enumerate(lines)],
    }
    return {"awslogs": {"data": base64.b64encode(gzip.compress(json.dumps(data).encode())).decode()}}


@pytest.fixture
def metrics_function(monkeypatch, synth):
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", synth.stack.patient_monitoring.namespace)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.delenv("POWERTOOLS_SERVICE_NAME", raising=False)
    module = importlib.reload(importlib.import_module("locked_workflow.lambdas.lock_metrics.index"))
    context = SimpleNamespace(function_name="lock-metrics", memory_limit_in_mb=256, aws_request_id="r-1",
                              invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:lock-metrics")
    return module, context


def _emf(lines: list[str]) -> list[dict]:
    """The CloudWatch embedded-metric-format documents among ``lines``."""
    return [json.loads(l) for l in lines if l.startswith("{") and '"_aws"' in l]


def _emitted(capsys) -> list[dict]:
    return _emf(capsys.readouterr().out.splitlines())


def _expected_durations(runs: Runs, role: str) -> dict[str, list]:
    """WaitTime and HoldTime worked out independently of the function: the acquire's input
    (the entry record: requestedAt), its DynamoDB result (acquiredAt), and the release's own
    DynamoDB result (``UPDATED_OLD``: the acquiredAt it removed) between its success and its
    exit - HoldTime is a range: ``(success - acquiredAt, exit - acquiredAt)`` ms, in which
    the release's ``$millis()`` falls."""
    expected: dict[str, list] = {"WaitTime": [], "HoldTime": []}
    for arn in dict.fromkeys(l["execution_arn"] for l in runs.of(role)):
        lines = runs.of(role, arn)
        entered = [l for l in lines if l["type"] == "TaskStateEntered" and l["details"]["name"] == "Lock.Acquire"]
        updates = [(n, int(l["event_timestamp"]), json.loads(l["details"]["output"]).get("Attributes"))
                   for n, l in enumerate(lines) if l["type"] == "TaskSucceeded" and l["details"]["resource"] == "updateItem"]
        acquired = [a for _, _, a in updates if a and p.FENCE in a]
        released = [(n, at, a) for n, at, a in updates if a and p.FENCE not in a]
        if acquired:
            requested = json.loads(entered[0]["details"]["input"])[p.REQUESTED_AT]
            expected["WaitTime"].append(int(acquired[0][p.ACQUIRED_AT]["N"]) - requested)
        for n, at, old in released:
            exited = next(int(l["event_timestamp"]) for l in lines[n:] if l["type"] == "TaskStateExited")
            since = int(old[p.ACQUIRED_AT]["N"])
            expected["HoldTime"].append((at - since, exited - since))
    return expected


@pytest.mark.parametrize("role, monitoring", [("Instant", "instant_monitoring"), ("Patient", "patient_monitoring")])
def test_metrics_function_measures_wait_and_hold_from_the_delivered_lines(runs, synth, metrics_function, capsys, role, monitoring):
    module, context = metrics_function
    delivered = [m for m in runs.lines[role] if matches(synth.subscription(monitoring), m)]
    others = [m for m in runs.lines[role] if m not in delivered]
    assert delivered and others
    counts = module.handler(_subscription_event(delivered + others[:20], "group"), context)
    (emf,) = _emitted(capsys)
    expected = _expected_durations(runs, role)
    got = {name: sorted(emf[name] if isinstance(emf[name], list) else [emf[name]]) for name in ("WaitTime", "HoldTime") if name in emf}
    assert got.get("WaitTime", []) == sorted(expected["WaitTime"])
    holds, ranges = got.get("HoldTime", []), sorted(expected["HoldTime"])
    assert len(holds) == len(ranges) and all(low <= held <= high for held, (low, high) in zip(holds, ranges)), (holds, ranges)
    assert counts == {k: len(v) for k, v in expected.items()}
    (directive,) = emf["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == synth.stack.patient_monitoring.namespace
    assert {m["Name"]: m["Unit"] for m in directive["Metrics"]} == {k: "Milliseconds" for k, v in expected.items() if v}
    if role == "Instant":  # the normal run worked 1 s under the lock
        assert any(low >= 1000 for low, _ in expected["HoldTime"])
        assert len(expected["WaitTime"]) == 2 and len(expected["HoldTime"]) == 1  # normal + lost acquired; normal released
    else:  # the waiter waited for the stopped holder for at least one round
        waiter = runs.results["waiter"].arn
        wait = _expected_durations(Runs(runs.backend, lines={"w": [m for m in runs.lines[role] if waiter in m]}), "w")["WaitTime"]
        assert wait and wait[0] >= 1000


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_metrics_function_ignores_lines_without_a_duration(runs, synth, metrics_function, capsys):
    module, context = metrics_function
    pattern = synth.subscription("instant_monitoring")
    ignored = [m for m in runs.lines["Instant"] if not matches(pattern, m)]
    # negative controls among the delivered lines: a release's exit whose hold length is null
    # (no acquiredAt) and an acquisition's exit whose lock record is not there
    delivered = [json.loads(m) for m in runs.lines["Instant"] if matches(pattern, m)]
    releases = [l for l in delivered if l["details"]["name"] in module.RELEASES]
    acquisitions = [l for l in delivered if l["details"]["name"] in module.ACQUISITIONS]
    assert releases and acquisitions
    assert [l for l in releases if "assignedVariables" in l["details"]]  # (a lost release's exit assigns nothing)
    for line in releases:
        line["details"].setdefault("assignedVariables", {})[module.RELEASES[line["details"]["name"]]] = "null"
    for line in acquisitions:
        line["details"]["assignedVariables"] = {}
    controls = [json.dumps(l) for l in releases + acquisitions]
    assert module.handler(_subscription_event(ignored + controls, "group"), context) == {"WaitTime": 0, "HoldTime": 0}
    assert _emitted(capsys) == []
    control = _subscription_event([], "group", message_type="CONTROL_MESSAGE")
    assert module.handler(control, context) == {"WaitTime": 0, "HoldTime": 0}


def _kind_metrics(monkeypatch, synth, kind: str):
    variables = synth.synthesized.template["Resources"]
    (function,) = [v for k, v in variables.items() if v["Type"] == "AWS::Lambda::Function"
                   and f"/{kind}Monitoring/MetricsFunction/" in v["Metadata"]["aws:cdk:path"]]
    monkeypatch.setenv("ACQUISITIONS", function["Properties"]["Environment"]["Variables"]["ACQUISITIONS"])
    monkeypatch.setenv("RELEASES", function["Properties"]["Environment"]["Variables"]["RELEASES"])
    return importlib.reload(importlib.import_module("locked_workflow.lambdas.lock_metrics.index"))


#: (WaitTime, HoldTime) measured per kind: every section's acquisition (the holder whose lock
#: is taken and the normal run; the semaphore's second holder; the nested workflow: 3 runs'
#: outer and 2 runs' inner sections); HoldTime from every release that succeeded (the normal
#: run's; the semaphore's second holder's; the nested: the outer section's release after the
#: inner section's error (twice: the holder whose inner lock was taken, the inner Timeout) and
#: both of the normal run). A lost lock's release fails: no HoldTime.
MEASURED = {"Fair": (2, 1), "Semaphore": (3, 2), "Keys": (2, 1), "Record": (2, 1), "Nested": (5, 4),
            "Shared": (2, 1), "Exclusive": (2, 1)}


@pytest.mark.parametrize("kind", KINDS)
def test_metrics_function_measures_the_wait_of_every_sections_acquisition(runs, synth, metrics_function, monkeypatch, capsys, kind):
    _, context = metrics_function
    module = _kind_metrics(monkeypatch, synth, kind)
    delivered = [m for m in runs.lines[kind] if matches(synth.subscription(kind), m)]
    found = module.measurements(delivered, acquisitions=module.ACQUISITIONS, releases=module.RELEASES)
    waits = [m for m in found if m.metric == "WaitTime"]
    holds = [m for m in found if m.metric == "HoldTime"]
    assert (len(waits), len(holds)) == MEASURED[kind]
    # each wait lies between the section's entry and the acquisition's exit (service clock)
    for wait in waits:
        lines = runs.of(kind, wait.execution_arn)
        entered = min(int(l["event_timestamp"]) for l in lines if l["type"] == "ParallelStateEntered")
        exited = max(int(l["event_timestamp"]) for l in lines if l["type"] == "TaskStateExited"
                     and l["details"]["name"] in module.ACQUISITIONS)
        assert 0 <= wait.milliseconds <= exited - entered
    # each hold lies within its run: from the section's entry to the release's exit
    for hold in holds:
        lines = runs.of(kind, hold.execution_arn)
        entered = min(int(l["event_timestamp"]) for l in lines if l["type"] == "ParallelStateEntered")
        exited = max(int(l["event_timestamp"]) for l in lines if l["type"].endswith("StateExited")
                     and l["details"]["name"] in module.RELEASES)
        assert 0 <= hold.milliseconds <= exited - entered
    # the handler publishes what it measured; negative control: nothing from the other lines
    counts = module.handler(_subscription_event(delivered, "group"), context)
    assert counts == {"WaitTime": len(waits), "HoldTime": len(holds)}
    capsys.readouterr()
    others = [m for m in runs.lines[kind] if m not in delivered]
    assert module.measurements(others, acquisitions=module.ACQUISITIONS, releases=module.RELEASES) == []
    # negative control: an acquisition's line whose record another execution holds (a fair
    # waiter reads the holder's record into its lock variable) is no WaitTime
    lines = [json.loads(m) for m in delivered]
    line = next(l for l in lines if l["type"] == "TaskStateExited" and l["execution_arn"] == waits[0].execution_arn
                and module.ACQUISITIONS[l["details"]["name"]] in (l["details"].get("assignedVariables") or {}))
    variable = module.ACQUISITIONS[line["details"]["name"]]
    record = json.loads(line["details"]["assignedVariables"][variable])
    assert module.measurement(json.dumps(line), acquisitions=module.ACQUISITIONS, releases=module.RELEASES) is not None
    record["owner"] = record["owner"].replace(waits[0].execution_arn.rsplit(":", 1)[1], "another-execution")
    line["details"]["assignedVariables"][variable] = json.dumps(record)
    assert module.measurement(json.dumps(line), acquisitions=module.ACQUISITIONS, releases=module.RELEASES) is None
