"""No conftest.py: the local_cloud fixture comes from the installed wheel's entry point."""

import json

from locked_workflow.testing.synth import synth_app

from worker_stack import WorkerStack


def _invoke(local_cloud, with_layer: bool, times: int = 1) -> list:
    synthesized = synth_app(lambda app: WorkerStack(app, f"Worker{with_layer}", with_layer=with_layer))
    app = local_cloud.deploy(synthesized.template, assets_dir=synthesized.assets_dir)
    payloads = []
    for _ in range(times):
        response = local_cloud.client("lambda").invoke(FunctionName=app.function_name("Worker"), Payload=b'{"key": "42"}')
        payloads.append(json.loads(response["Payload"].read()))
    return payloads


def test_the_function_takes_the_lock_with_the_layer(local_cloud):
    assert [payload["fence"] for payload in _invoke(local_cloud, True, times=2)] == [1, 2]


def test_without_the_layer_the_function_is_refused_as_on_aws(local_cloud):
    (payload,) = _invoke(local_cloud, False)
    assert "Runtime.ImportModuleError" in payload["errorMessage"] and "locked_workflow" in payload["errorMessage"]
