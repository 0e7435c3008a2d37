"""Fix ``patches/async_invoke_retries``: an asynchronous invocation that fails is retried twice.

AWS: https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html
"""

from __future__ import annotations

import json
import time

import pytest

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.patches import async_invoke_retries
from local_helpers import wait_until
from test_patch_lambda_in_process import function_template

#: Fails its first ``failures`` attempts (counted in a file), then succeeds; each attempt
#: appends its start time (monotonic) to ``<dir>/attempts``.
FLAKY_HANDLER = '''
import pathlib
import time


class Broken(Exception):
    pass


def handler(event, context):
    log = pathlib.Path(event["dir"]) / "attempts"
    with log.open("a") as f:
        f.write(f"{time.monotonic()}\\n")
    if len(log.read_text().splitlines()) <= event["failures"]:
        raise Broken("attempt failed")
    return {"ok": True}
'''


def _deploy(cloud, tmp_path):
    folder = tmp_path / "Flaky"
    folder.mkdir()
    (folder / "index.py").write_text(FLAKY_HANDLER)
    app = cloud.deploy(function_template({"Flaky": "Flaky"}), assets_dir=tmp_path)
    return app.function_name("Flaky")


def _attempts(tmp_path) -> list[float]:
    log = tmp_path / "attempts"
    return [float(t) for t in log.read_text().splitlines()] if log.exists() else []


def _invoke_async(cloud, name: str, tmp_path, failures: int) -> None:
    response = cloud.client("lambda").invoke(
        FunctionName=name, InvocationType="Event", Payload=json.dumps({"dir": str(tmp_path), "failures": failures}))
    assert response["StatusCode"] == 202


def test_a_failed_asynchronous_invocation_is_retried_after_the_scaled_waits(tmp_path):
    """Two failures, then success: three attempts, the waits AWS's (60 s, 120 s) scaled."""
    with LocalCloud() as cloud:
        cloud.async_invoke_options.time_scale = 1 / 120  # waits of 0.5 s and 1 s
        name = _deploy(cloud, tmp_path)
        _invoke_async(cloud, name, tmp_path, failures=2)
        assert wait_until(lambda: [a.outcome for a in cloud.async_invoke_options.of(name)] == ["failed", "failed", "ok"],
                          timeout=30), cloud.async_invoke_options.of(name)
    first, second, third = _attempts(tmp_path)
    assert second - first >= 0.5 and third - second >= 1.0, (first, second, third)
    assert cloud.async_invoke_options.of(name)[0].error_type == "Broken"


def test_an_invocation_failing_every_time_is_attempted_three_times_then_discarded(tmp_path):
    with LocalCloud() as cloud:
        cloud.async_invoke_options.time_scale = 1 / 600  # waits of 0.1 s and 0.2 s
        name = _deploy(cloud, tmp_path)
        _invoke_async(cloud, name, tmp_path, failures=10)
        wait_until(lambda: any(a.outcome == "discarded" for a in cloud.async_invoke_options.of(name)), timeout=30)
        time.sleep(0.5)  # (a fourth attempt, if any, would come within 0.2 s)
        outcomes = [a.outcome for a in cloud.async_invoke_options.of(name)]
    assert outcomes == ["failed", "failed", "discarded"] and len(_attempts(tmp_path)) == 3


def test_the_function_s_event_invoke_config_bounds_the_retries(tmp_path):
    """``MaximumRetryAttempts=0``: one attempt; a maximum event age shorter than the first
    wait: no retry either."""
    with LocalCloud() as cloud:
        cloud.async_invoke_options.time_scale = 1 / 600
        name = _deploy(cloud, tmp_path)
        cloud.client("lambda").put_function_event_invoke_config(FunctionName=name, MaximumRetryAttempts=0)
        _invoke_async(cloud, name, tmp_path, failures=10)
        wait_until(lambda: cloud.async_invoke_options.of(name), timeout=30)
        time.sleep(0.5)
        assert [a.outcome for a in cloud.async_invoke_options.of(name)] == ["discarded"]
        cloud.client("lambda").put_function_event_invoke_config(
            FunctionName=name, MaximumRetryAttempts=2, MaximumEventAgeInSeconds=60)
        cloud.async_invoke_options.time_scale = 1 / 60  # the first wait (1 s) outlasts the age (1 s) with the attempt
        _invoke_async(cloud, name, tmp_path, failures=10)
        wait_until(lambda: len(cloud.async_invoke_options.of(name)) == 2, timeout=30)
        time.sleep(1.5)
        assert [a.outcome for a in cloud.async_invoke_options.of(name)] == ["discarded", "discarded"]


def test_a_synchronous_invocation_is_never_retried(tmp_path):
    with LocalCloud() as cloud:
        name = _deploy(cloud, tmp_path)
        response = cloud.client("lambda").invoke(FunctionName=name, Payload=json.dumps({"dir": str(tmp_path), "failures": 1}))
        assert response.get("FunctionError") == "Unhandled"
        time.sleep(1.5)
    assert len(_attempts(tmp_path)) == 1 and cloud.async_invoke_options.of(name) == []


@pytest.mark.parametrize("scale", [0, -1, True, "fast"])
def test_the_time_scale_must_be_a_positive_number(scale):
    with pytest.raises(ValueError, match="`time_scale` must be a number greater than 0, got: "):
        async_invoke_retries.AsyncInvokeOptions(time_scale=scale)


def test_a_retry_pending_when_the_cloud_closes_never_runs(tmp_path):
    """An asynchronous invocation belongs to its cloud: a retry still waiting when the cloud
    closes is dropped. Before, its thread ran it after the cloud had closed - outside moto's
    mock and the cloud's endpoint variables, so a janitor whose clients were made for the
    closed cloud called ``dynamodb.us-east-1.amazonaws.com`` (``EndpointConnectionError``,
    seen once while the next module's DynamoDB Local started)."""
    with LocalCloud() as cloud:
        cloud.async_invoke_options.time_scale = 1 / 20  # the first retry 3 s after the failure
        name = _deploy(cloud, tmp_path)
        _invoke_async(cloud, name, tmp_path, failures=1)
        assert wait_until(lambda: [a.outcome for a in cloud.async_invoke_options.of(name)] == ["failed"], timeout=30)
    time.sleep(4.5)  # past the retry's wait
    assert len(_attempts(tmp_path)) == 1, _attempts(tmp_path)  # (before: 2, the second after the close)
    assert [a.outcome for a in cloud.async_invoke_options.of(name)] == ["failed", "cancelled"]
