"""``lambda_environments``: a function's concurrent invocations run in execution environments of
their own, each with its own module state; an idle environment is reused (a warm start).

AWS: https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html,
https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html
"""

from __future__ import annotations

import json
import threading

from locked_workflow.testing import LocalCloud
from local_helpers import lambda_folder, wait_until

POWERTOOLS_LAYER_ARN = "arn:aws:lambda:us-east-1:017000801446:layer:AWSLambdaPowertoolsPythonV3-python313-x86_64:27"

#: Module state (a counter, Powertools' metric set, its Logger's keys) seen by each invocation;
#: each invocation waits until every invocation named in ``meet`` has arrived (all inside at once).
HANDLER = '''
import pathlib
import time

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

logger = Logger(service="probe")
metrics = Metrics(namespace="Probe", service="probe")
INVOCATIONS = 0
print("init")


@metrics.log_metrics
def handler(event, context):
    global INVOCATIONS
    INVOCATIONS += 1
    mine = INVOCATIONS
    metrics.add_metric(name=event["name"], unit=MetricUnit.Count, value=1)
    logger.append_keys(who=event["name"])
    folder = pathlib.Path(event["dir"])
    (folder / event["name"]).write_text("here")
    deadline = time.monotonic() + 30
    while not all((folder / name).exists() for name in event["meet"]) and time.monotonic() < deadline:
        time.sleep(0.01)
    logger.info("met")
    return {"invocations": mine, "metrics": sorted(metrics.metric_set), "stream": context.log_stream_name}
'''


def _template(timeout_s: int = 30) -> dict:
    return {"Resources": {"Probe": {
        "Type": "AWS::Lambda::Function",
        "Properties": {"Handler": "index.handler", "Runtime": "python3.13", "Timeout": timeout_s,
                       "Layers": [POWERTOOLS_LAYER_ARN],
                       "Code": {"S3Bucket": "cdk-assets", "S3Key": "Probe.zip"}},
        "Metadata": {"aws:asset:path": "Probe"},
    }}}


def _invoke(cloud, name: str, event: dict) -> dict:
    response = cloud.client("lambda").invoke(FunctionName=name, Payload=json.dumps(event))
    payload = json.loads(response["Payload"].read())
    assert "FunctionError" not in response, payload
    return payload


def _two_at_once_then_one(tmp_path) -> tuple[dict[str, dict], dict, list[str], int]:
    """Invocations A and B inside at once, then C alone: their results, the function's log
    lines and how many environments ran Init."""
    lambda_folder(tmp_path, "Probe", HANDLER)
    with LocalCloud() as cloud:
        name = cloud.deploy(_template(), assets_dir=tmp_path).function_name("Probe")
        results: dict[str, dict] = {}

        def call(metric: str) -> None:
            results[metric] = _invoke(cloud, name, {"name": metric, "dir": str(tmp_path), "meet": ["A", "B"]})

        threads = [threading.Thread(target=call, args=(metric,)) for metric in ("A", "B")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        third = _invoke(cloud, name, {"name": "C", "dir": str(tmp_path), "meet": ["C"]})
        return results, third, cloud.function_logs(name), cloud.functions.get(name).environments.initialized


def test_concurrent_invocations_each_run_in_an_environment_of_their_own(tmp_path):
    """Two invocations inside at once: on AWS each has its own execution environment, so each
    sees its own module counter, its own Powertools metric set (a class attribute of
    ``Metrics``, in the Powertools package itself) and its own Logger keys (kept by the
    ``logging`` module's registry of loggers), writes its own log stream, and each
    environment ran Init once; a third invocation, alone, finds one of them idle (warm, no
    Init). Before, both shared one import of the handler and Powertools: counters 1 and 2,
    both metrics in one set, which one flush emptied before the other read it - the race that
    failed Powertools' flushes in the unlocked negative control of tests/lock/test_lock_behaviour.py."""
    results, third, lines, inits = _two_at_once_then_one(tmp_path)
    assert {metric: (r["invocations"], r["metrics"]) for metric, r in results.items()} == {
        "A": (1, ["A"]), "B": (1, ["B"])}
    assert results["A"]["stream"] != results["B"]["stream"]
    assert third["invocations"] == 2 and third["metrics"] == ["C"]
    assert third["stream"] in (results["A"]["stream"], results["B"]["stream"])
    assert lines.count("init") == inits == 2  # one Init per environment
    met = [json.loads(line) for line in lines if line.startswith("{") and '"met"' in line]
    assert sorted(line["who"] for line in met) == ["A", "B", "C"]  # each line its own key


def test_negative_control_a_fresh_handler_import_alone_shares_powertools_metric_set(tmp_path, monkeypatch):
    """Without its own copy of Powertools, an environment's fresh import of the handler keeps
    its own counter but not its own metric set: ``Metrics`` keeps it at class level in the
    Powertools package, which the handler's re-import does not reload."""
    from locked_workflow.testing import lambda_runtime

    monkeypatch.setattr(lambda_runtime, "ENVIRONMENT_PACKAGES", frozenset())
    results, _, _, inits = _two_at_once_then_one(tmp_path)
    assert [results[m]["invocations"] for m in ("A", "B")] == [1, 1] and inits == 2
    # each read the set after both had added to it: both metrics, or none once the other flushed
    assert {m: results[m]["metrics"] for m in ("A", "B")} != {"A": ["A"], "B": ["B"]}
    assert all(results[m]["metrics"] in (["A", "B"], []) for m in ("A", "B")), results


def test_an_idle_environment_is_reused_with_its_module_state(tmp_path):
    """Sequential invocations run in one warm environment: what the module code left in memory
    (the counter) persists, Init runs once, one log stream - as on AWS."""
    lambda_folder(tmp_path, "Probe", HANDLER)
    with LocalCloud() as cloud:
        name = cloud.deploy(_template(), assets_dir=tmp_path).function_name("Probe")
        runs = [_invoke(cloud, name, {"name": f"M{n}", "dir": str(tmp_path), "meet": []}) for n in range(3)]
        lines = cloud.function_logs(name)
    assert [r["invocations"] for r in runs] == [1, 2, 3]
    assert [r["metrics"] for r in runs] == [["M0"], ["M1"], ["M2"]]  # flushed after each invocation
    assert len({r["stream"] for r in runs}) == 1
    assert lines.count("init") == 1


def test_an_environment_whose_invocation_timed_out_is_reset(tmp_path):
    """An invocation past its function's timeout resets its environment: the next invocation
    runs Init again in a fresh one (AWS: "Failures during the invoke phase"), while the timed-out
    handler, which cannot be stopped here, runs on in the old one."""
    lambda_folder(tmp_path, "Probe", HANDLER)
    gate = tmp_path / "gate"
    with LocalCloud() as cloud:
        name = cloud.deploy(_template(timeout_s=1), assets_dir=tmp_path).function_name("Probe")
        first = _invoke(cloud, name, {"name": "A", "dir": str(tmp_path), "meet": []})
        response = cloud.client("lambda").invoke(FunctionName=name, Payload=json.dumps(
            {"name": "Slow", "dir": str(tmp_path), "meet": ["gate"]}))
        timed_out = json.loads(response["Payload"].read())
        after = _invoke(cloud, name, {"name": "B", "dir": str(tmp_path), "meet": []})
        gate.write_text("open")
        assert wait_until(lambda: cloud.function_logs(name).count("init") == 2, timeout=30)
    assert timed_out["errorType"] == "Sandbox.Timedout"
    assert first["invocations"] == 1 and after["invocations"] == 1  # a new environment
    assert after["stream"] != first["stream"]
