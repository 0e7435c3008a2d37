"""Fix ``patches/lambda_in_process``: Lambda functions run their Python handler in-process."""

from __future__ import annotations

import io
import json
import os
import threading
import zipfile

import boto3
import pytest

from locked_workflow.testing import LocalCloud
from local_helpers import REGION, bare_moto, create_state_machine, lambda_folder, wait_until

HANDLER = '''
import os
import time

import helper


class OutOfStock(Exception):
    pass


def handler(event, context):
    if event.get("fail"):
        raise OutOfStock("no " + event["fail"])
    time.sleep(event.get("sleep", 0))
    return {
        "colour": os.environ["COLOUR"],
        "helper": helper.NAME,
        "function": context.function_name,
        "arn": context.invoked_function_arn,
        "memory": context.memory_limit_in_mb,
        "request": context.aws_request_id,
        "echo": event,
    }
'''


def function_template(folders: dict[str, str]) -> dict:
    """One function per logical id; COLOUR = the logical id, lowercased."""
    return {
        "Resources": {
            logical_id: {
                "Type": "AWS::Lambda::Function",
                "Properties": {
                    "Handler": "index.handler",
                    "Runtime": "python3.12",
                    "MemorySize": 256,
                    "Code": {"S3Bucket": "cdk-assets", "S3Key": f"{logical_id}.zip"},
                    "Environment": {"Variables": {"COLOUR": logical_id.lower()}},
                },
                "Metadata": {"aws:asset:path": folder},
            }
            for logical_id, folder in folders.items()
        }
    }


def make_functions(tmp_path, *names: str) -> dict[str, str]:
    folders = {}
    for name in names:
        folder = lambda_folder(tmp_path, name, HANDLER)
        (folder / "helper.py").write_text(f"NAME = {name!r}\n")
        folders[name] = name
    return folders


def test_bare_moto_needs_docker_to_invoke():
    with bare_moto():
        iam = boto3.client("iam", region_name=REGION)
        role = iam.create_role(
            RoleName="fn",
            AssumeRolePolicyDocument=json.dumps(
                {"Statement": [{"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}]}
            ),
        )["Role"]["Arn"]
        code = io.BytesIO()
        with zipfile.ZipFile(code, "w") as archive:
            archive.writestr("index.py", "def handler(event, context):\n    return {'ok': True}\n")
        client = boto3.client("lambda", region_name=REGION)
        client.create_function(
            FunctionName="fn", Runtime="python3.12", Role=role, Handler="index.handler", Code={"ZipFile": code.getvalue()}
        )
        response = client.invoke(FunctionName="fn", Payload=b"{}")
        payload = response["Payload"].read().decode()
    assert response.get("FunctionError")
    assert "docker" in payload.lower()


def test_runtime_invokes_the_handler_with_env_and_context(tmp_path):
    with LocalCloud() as cloud:
        app = cloud.deploy(function_template(make_functions(tmp_path, "Red")), assets_dir=tmp_path)
        name = app.function_name("Red")
        response = cloud.client("lambda").invoke(FunctionName=name, Payload=json.dumps({"n": 1}))
        result = json.loads(response["Payload"].read())
    assert "FunctionError" not in response
    assert result["colour"] == "red"
    assert result["helper"] == "Red"
    assert result["function"] == name
    assert result["arn"].endswith(f":function:{name}")
    assert result["memory"] == 256
    assert result["request"]
    assert result["echo"] == {"n": 1}


def test_runtime_reports_an_exception_as_a_function_error(tmp_path):
    with LocalCloud() as cloud:
        app = cloud.deploy(function_template(make_functions(tmp_path, "Red")), assets_dir=tmp_path)
        response = cloud.client("lambda").invoke(
            FunctionName=app.function_name("Red"), Payload=json.dumps({"fail": "socks"})
        )
        payload = json.loads(response["Payload"].read())
    assert response["FunctionError"] == "Unhandled"
    assert payload["errorType"] == "OutOfStock"
    assert payload["errorMessage"] == "no socks"


def test_state_machine_sees_the_exception_class_as_the_error(tmp_path):
    with LocalCloud() as cloud:
        app = cloud.deploy(function_template(make_functions(tmp_path, "Red")), assets_dir=tmp_path)
        function_arn = app.attribute("Red", "Arn")
        task = {
            "Type": "Task",
            "Resource": "arn:aws:states:::lambda:invoke",
            "Arguments": {"FunctionName": function_arn, "Payload": "{% $states.input %}"},
            "Output": "{% $states.result.Payload %}",
            "Catch": [
                {
                    "ErrorEquals": ["OutOfStock"],
                    "Output": "{% {'error': $states.errorOutput.Error, 'cause': $parse($states.errorOutput.Cause)} %}",
                    "Next": "Sorry",
                }
            ],
            "End": True,
        }
        machine = create_state_machine(
            {"QueryLanguage": "JSONata", "StartAt": "Call", "States": {"Call": task, "Sorry": {"Type": "Pass", "End": True}}}
        )
        ok = cloud.wait_for(cloud.start_execution(machine, {"n": 2}))
        caught = cloud.wait_for(cloud.start_execution(machine, {"fail": "socks"}))
    assert ok.status == "SUCCEEDED", ok.cause
    assert ok.output["echo"] == {"n": 2}
    assert caught.status == "SUCCEEDED", caught.cause
    assert caught.output["error"] == "OutOfStock"
    assert caught.output["cause"]["errorMessage"] == "no socks"


def test_functions_are_isolated_and_concurrent(tmp_path):
    """Same module names in two folders, different env values, invoked at the same time."""
    with LocalCloud() as cloud:
        app = cloud.deploy(function_template(make_functions(tmp_path, "Red", "Blue")), assets_dir=tmp_path)
        client = cloud.client("lambda")
        results: dict[str, list[dict]] = {"Red": [], "Blue": []}

        def call(logical_id: str) -> None:
            response = client.invoke(FunctionName=app.function_name(logical_id), Payload=json.dumps({"sleep": 0.2}))
            results[logical_id].append(json.loads(response["Payload"].read()))

        threads = [threading.Thread(target=call, args=(lid,)) for lid in ("Red", "Blue") * 4]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert {r["colour"] for r in results["Red"]} == {"red"}
    assert {r["colour"] for r in results["Blue"]} == {"blue"}
    assert {r["helper"] for r in results["Red"]} == {"Red"}
    assert {r["helper"] for r in results["Blue"]} == {"Blue"}
    assert len(results["Red"]) == len(results["Blue"]) == 4


def test_the_process_environment_is_untouched(tmp_path):
    before = os.environ
    with LocalCloud() as cloud:
        app = cloud.deploy(function_template(make_functions(tmp_path, "Red")), assets_dir=tmp_path)
        cloud.client("lambda").invoke(FunctionName=app.function_name("Red"), Payload=b"{}")
        assert "COLOUR" not in os.environ  # the function's variables live in its own thread's view
    assert os.environ is before
    assert "COLOUR" not in os.environ


#: Blocks until the test opens the gate (or 60 s pass), then leaves a mark: it outlives its timeout.
SLOW_HANDLER = '''
import pathlib
import time


def handler(event, context):
    gate, done = pathlib.Path(event["gate"]), pathlib.Path(event["done"])
    deadline = time.monotonic() + 60
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    done.write_text(str(context.get_remaining_time_in_millis()))
    return {"late": True}
'''


def _slow_function(tmp_path) -> dict:
    lambda_folder(tmp_path, "Slow", SLOW_HANDLER)
    return {"Resources": {"Slow": {
        "Type": "AWS::Lambda::Function",
        "Properties": {"Handler": "index.handler", "Runtime": "python3.12", "Timeout": 1,
                       "Code": {"S3Bucket": "cdk-assets", "S3Key": "Slow.zip"}},
        "Metadata": {"aws:asset:path": "Slow"},
    }}}


def test_an_invocation_past_the_function_timeout_fails_with_sandbox_timedout(tmp_path):
    """The error comes at the deadline; the handler, which cannot be killed, runs on."""
    gate, done = tmp_path / "gate", tmp_path / "done"
    with LocalCloud() as cloud:
        app = cloud.deploy(_slow_function(tmp_path), assets_dir=tmp_path)
        response = cloud.client("lambda").invoke(
            FunctionName=app.function_name("Slow"), Payload=json.dumps({"gate": str(gate), "done": str(done)})
        )
        payload = json.loads(response["Payload"].read())
        assert not done.exists()  # answered while the handler still waits at its gate
        gate.write_text("open")
        assert wait_until(done.exists, timeout=60)  # the zombie handler finishes later
    assert response["FunctionError"] == "Unhandled"
    assert payload["errorType"] == "Sandbox.Timedout"
    assert payload["errorMessage"].endswith("Task timed out after 1.00 seconds")
    assert done.read_text() == "0"  # it ran past its deadline


@pytest.mark.parametrize("catch", ["Sandbox.Timedout", "States.TaskFailed"])
def test_a_lambda_task_past_the_function_timeout_fails(tmp_path, catch):
    gate, done = tmp_path / "gate", tmp_path / "done"
    with LocalCloud() as cloud:
        app = cloud.deploy(_slow_function(tmp_path), assets_dir=tmp_path)
        task = {
            "Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
            "Arguments": {"FunctionName": app.attribute("Slow", "Arn"), "Payload": "{% $states.input %}"},
            "Catch": [{"ErrorEquals": [catch], "Output": "{% $states.errorOutput.Error %}", "Next": "TimedOut"}],
            "End": True,
        }
        machine = create_state_machine(
            {"QueryLanguage": "JSONata", "StartAt": "Call", "States": {"Call": task, "TimedOut": {"Type": "Pass", "End": True}}}
        )
        result = cloud.wait_for(cloud.start_execution(machine, {"gate": str(gate), "done": str(done)}), timeout=60)
        gate.write_text("open")
        assert wait_until(done.exists, timeout=60)
    assert result.status == "SUCCEEDED", result.cause
    assert result.output == "Sandbox.Timedout"


#: Its Init (the module's import) takes ``INIT_SLEEP`` seconds; the handler reports the time it
#: has left, at once.
SLOW_INIT_HANDLER = '''
import os
import time

time.sleep(float(os.environ["INIT_SLEEP"]))


def handler(event, context):
    return {"remaining": context.get_remaining_time_in_millis()}
'''


def _slow_init_function(tmp_path, init_sleep_s: float) -> dict:
    lambda_folder(tmp_path, "SlowInit", SLOW_INIT_HANDLER)
    return {"Resources": {"SlowInit": {
        "Type": "AWS::Lambda::Function",
        "Properties": {"Handler": "index.handler", "Runtime": "python3.12", "Timeout": 1,
                       "Environment": {"Variables": {"INIT_SLEEP": str(init_sleep_s)}},
                       "Code": {"S3Bucket": "cdk-assets", "S3Key": "SlowInit.zip"}},
        "Metadata": {"aws:asset:path": "SlowInit"},
    }}}


def _invoke_slow_init(tmp_path, monkeypatch, init_sleep_s: float) -> dict:
    """One invocation of a function whose Init takes ``init_sleep_s``, with Lambda's Init
    limit shortened to 0.5 s (the real one is 10 s) and a 1 s timeout."""
    from locked_workflow.testing import lambda_runtime

    monkeypatch.setattr(lambda_runtime, "INIT_LIMIT_S", 0.5)
    with LocalCloud() as cloud:
        app = cloud.deploy(_slow_init_function(tmp_path, init_sleep_s), assets_dir=tmp_path)
        response = cloud.client("lambda").invoke(FunctionName=app.function_name("SlowInit"), Payload=b"{}")
        return json.loads(response["Payload"].read())


def test_an_init_past_lambdas_init_limit_is_counted_in_the_function_timeout(tmp_path, monkeypatch):
    """AWS: Init runs before the timeout starts for at most 10 s; an Init that does not complete
    by then is retried within the invocation, under the function's timeout
    (https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html), so a handler
    ends by its invoke + the Init limit + its timeout - the bound a lock's stop grace is derived
    from (``section_work.derive_stop_grace``). Before: the timeout started after Init however long
    it took (Inits run one at a time here, and queue on a loaded machine), and a stopped holder's
    probe entered its work ~47 s after the stop (the fault matrix's WakeAgain witness)."""
    payload = _invoke_slow_init(tmp_path, monkeypatch, init_sleep_s=1.0)
    # (Init took >= 1 s: 0.5 s of it past the limit, taken from the 1 s timeout)
    assert payload["remaining"] <= 500, payload


def test_an_invocation_whose_init_outlasts_the_limit_and_the_timeout_times_out_unrun(tmp_path, monkeypatch):
    """Init past the Init limit + the function's timeout: the invocation times out, and its
    handler never runs (on AWS the invocation ended while Init was still retried)."""
    payload = _invoke_slow_init(tmp_path, monkeypatch, init_sleep_s=2.0)
    assert payload.get("errorType") == "Sandbox.Timedout", payload


PACKAGE_HANDLER = '''
from locked_workflow.constructs_lib import client_lease


def handler(event, context):
    from locked_workflow.state_machines import fair_protocol  # lazy: read all the same
    return {"file": client_lease.__file__, "protocol": fair_protocol.__name__}
'''


def _package_folder(tmp_path, *modules: str):
    """A code folder whose handler imports ``client_lease`` of this package, carrying a copy
    of the package's ``modules`` (paths below ``locked_workflow/``)."""
    import shutil

    import locked_workflow

    root = __import__("pathlib").Path(locked_workflow.__file__).resolve().parents[1]
    folder = lambda_folder(tmp_path, "Pkg", PACKAGE_HANDLER)
    for module in ("__init__.py", *modules):
        source = root / ("locked_workflow/__init__.py" if module == "__init__.py" else module)
        target = folder / "locked_workflow" / module
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    return folder


def _invoke_package_handler(tmp_path):
    with LocalCloud() as cloud:
        app = cloud.deploy(function_template({"Pkg": "Pkg"}), assets_dir=tmp_path)
        response = cloud.client("lambda").invoke(FunctionName=app.function_name("Pkg"), Payload=b"{}")
        return response, json.loads(response["Payload"].read())


def test_a_handler_importing_a_module_its_asset_lacks_is_refused_though_this_process_has_it(tmp_path):
    """On AWS the function sees its asset alone: the process's own copy of the package (an
    editable install here) must not fill the gap."""
    _package_folder(tmp_path, "constructs_lib/__init__.py", "state_machines/__init__.py", "state_machines/lock_protocol.py")
    response, payload = _invoke_package_handler(tmp_path)
    assert response["FunctionError"] == "Unhandled"
    assert payload["errorType"] == "HandlerNotFoundError"
    assert "locked_workflow.constructs_lib.client_lease (imported by index)" in payload["errorMessage"]
    assert "locked_workflow.state_machines.fair_protocol (imported by index)" in payload["errorMessage"]
    assert "Runtime.ImportModuleError" in payload["errorMessage"]


def test_an_asset_carrying_the_packages_files_unchanged_shares_the_process_modules(tmp_path):
    import locked_workflow

    root = __import__("pathlib").Path(locked_workflow.__file__).resolve().parents[1]
    protocol = sorted(f"state_machines/{path.name}" for path in (root / "state_machines").glob("*.py"))
    folder = _package_folder(tmp_path, "constructs_lib/__init__.py", "constructs_lib/client_lease.py", *protocol)
    response, payload = _invoke_package_handler(tmp_path)
    assert "FunctionError" not in response, payload
    assert not payload["file"].startswith(str(folder))  # the process's own module: the same bytes
    # a changed copy is the function's own, loaded from its folder
    with (folder / "locked_workflow" / "constructs_lib" / "client_lease.py").open("a") as source:
        source.write("# the function's own copy\n")
    response, payload = _invoke_package_handler(tmp_path)
    assert "FunctionError" not in response, payload
    assert payload["file"].startswith(str(folder))


def test_a_package_only_the_asset_has_is_not_read_ahead(tmp_path):
    """Only a package this process would supply is checked: one the asset alone carries fails
    (or not) by its own import, as on AWS - a lazy import of a module it lacks, in a function
    never called, does not refuse the handler."""
    folder = lambda_folder(tmp_path, "Own", '''
import ownpkg


def handler(event, context):
    return {"name": ownpkg.NAME}


def never_called():
    from ownpkg import absent  # noqa: F401
''')
    (folder / "ownpkg").mkdir()
    (folder / "ownpkg" / "__init__.py").write_text("NAME = 'own'\n")
    with LocalCloud() as cloud:
        app = cloud.deploy(function_template({"Own": "Own"}), assets_dir=tmp_path)
        response = cloud.client("lambda").invoke(FunctionName=app.function_name("Own"), Payload=b"{}")
        payload = json.loads(response["Payload"].read())
    assert "FunctionError" not in response, payload
    assert payload == {"name": "own"}


POWERTOOLS_LAYER_ARN = "arn:aws:lambda:us-east-1:017000801446:layer:AWSLambdaPowertoolsPythonV3-python313-x86_64:27"


def test_a_handler_may_import_only_its_asset_its_layers_and_the_runtime(tmp_path):
    """What the Lambda Python runtime refuses (``Runtime.ImportModuleError``), the runtime
    refuses, though this process has it installed: a package neither the asset, the layers
    nor the runtime (standard library, boto3) carry - here moto, and Powertools without its
    layer. With the Powertools layer, Powertools imports."""
    handlers = {
        "Sdk": "import json\nimport boto3\nfrom botocore.config import Config\n",
        "Moto": "import json\n\ndef later():\n    import moto  # lazy: read all the same\n",
        "NoLayer": "from aws_lambda_powertools import Logger\n",
        "Layer": "from aws_lambda_powertools import Logger\n",
    }
    template = function_template({})
    for name, source in handlers.items():
        lambda_folder(tmp_path, name, source + "\n\ndef handler(event, context):\n    return 'ran'\n")
        template["Resources"][name] = {
            "Type": "AWS::Lambda::Function",
            "Properties": {
                "Handler": "index.handler", "Runtime": "python3.13",
                "Code": {"S3Bucket": "cdk-assets", "S3Key": f"{name}.zip"},
                **({"Layers": [POWERTOOLS_LAYER_ARN]} if name == "Layer" else {}),
            },
            "Metadata": {"aws:asset:path": name},
        }
    with LocalCloud() as cloud:
        app = cloud.deploy(template, assets_dir=tmp_path)
        payloads = {}
        for name in handlers:
            response = cloud.client("lambda").invoke(FunctionName=app.function_name(name), Payload=b"{}")
            payloads[name] = json.loads(response["Payload"].read())
    assert payloads["Sdk"] == "ran" and payloads["Layer"] == "ran"
    for name, missing in (("Moto", "moto"), ("NoLayer", "aws_lambda_powertools")):
        assert payloads[name]["errorType"] == "HandlerNotFoundError", payloads[name]
        assert f"{missing} (imported by index)" in payloads[name]["errorMessage"]
        assert "Runtime.ImportModuleError" in payloads[name]["errorMessage"]


NOISY = '''
import logging
import sys
import warnings

log = logging.getLogger("noisy")
log.addHandler(logging.StreamHandler(sys.stdout))  # bound at import, as Powertools' Logger is
log.setLevel(logging.INFO)
log.propagate = False
print("cold start")


def handler(event, context):
    log.info("handled %s", event["n"])
    print("to stderr", file=sys.stderr)
    warnings.warn("No application metrics to publish", stacklevel=2)
    return {"n": event["n"]}
'''


def test_a_functions_output_goes_to_its_log_group_not_the_tests_output(tmp_path, capfd, recwarn):
    """On AWS a function's prints, log lines and warnings are CloudWatch Logs events of
    /aws/lambda/<name>; the caller never sees them (issue 26, part 3.4: quiet tests)."""
    lambda_folder(tmp_path, "Noisy", NOISY)
    with LocalCloud() as cloud:
        app = cloud.deploy(function_template({"Noisy": "Noisy"}), assets_dir=tmp_path)
        name = app.function_name("Noisy")
        payloads = [json.loads(cloud.client("lambda").invoke(FunctionName=name, Payload=json.dumps({"n": n}))
                               ["Payload"].read()) for n in (1, 2)]
        print("the test's own line")
        lines = cloud.function_logs(name)
    out, err = capfd.readouterr()
    assert payloads == [{"n": 1}, {"n": 2}]
    assert out == "the test's own line\n" and err == ""
    assert not [w for w in recwarn if "metrics" in str(w.message)]
    assert lines[0] == "cold start"
    assert [line for line in lines if line.startswith("handled")] == ["handled 1", "handled 2"]
    assert lines.count("to stderr") == 2
    assert sum("UserWarning: No application metrics to publish" in line for line in lines) == 2
