"""A ``LockClient`` in the user's own Lambda function: shipped by ``LockClientLayer``, and
refused offline, as on AWS, when the function's asset and layers do not carry it.

The function's asset holds only ``index.py``. On AWS a Python function imports only what its
asset, its layers and the runtime (the standard library, boto3) carry
(https://docs.aws.amazon.com/lambda/latest/dg/python-package.html): the test process has
``locked_workflow`` installed, which must not fill the gap offline.
"""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_lambda as lambda_

from locked_workflow import LockClientLayer, LockTable
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.testing import LocalCloud
from locked_workflow.testing.pytest_plugin import require_backend
from locked_workflow.testing.synth import synth_app

HANDLER = '''
import os

from locked_workflow import LockClient

client = LockClient(os.environ["LOCK_TABLE"], namespace="job")


def handler(event, context):
    with client.hold(event["key"], lease=30) as lease:
        return {"fence": lease.fence, "owner": lease.owner}
'''


def _stack(app: cdk.App, code_dir, *, with_layer: bool) -> cdk.Stack:
    stack = cdk.Stack(app, "ClientFn")
    locks = LockTable(stack, "Locks", removal_policy=cdk.RemovalPolicy.DESTROY)
    function = lambda_.Function(
        stack, "Worker", runtime=lambda_.Runtime.PYTHON_3_13, handler="index.handler",
        code=lambda_.Code.from_asset(str(code_dir)), timeout=cdk.Duration.seconds(10),
        environment={"LOCK_TABLE": locks.table.table_name},
        layers=[LockClientLayer(stack, "LockClient").layer] if with_layer else [],
    )
    locks.table.grant_read_write_data(function)
    return stack


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    code_dir = tmp_path_factory.mktemp("worker")
    (code_dir / "index.py").write_text(HANDLER)
    return {
        with_layer: synth_app(lambda app: _stack(app, code_dir, with_layer=with_layer))
        for with_layer in (True, False)
    }


def _invoke(cloud, synthesized, key: str) -> tuple[dict, dict, object]:
    app = cloud.deploy(synthesized.template, assets_dir=synthesized.assets_dir)
    response = cloud.client("lambda").invoke(
        FunctionName=app.function_name("Worker"), Payload=json.dumps({"key": key}).encode()
    )
    return response, json.loads(response["Payload"].read()), app


def test_the_layer_carries_the_client_and_no_cdk(synthesized):
    from locked_workflow.constructs_lib.client_layer import layer_files

    files = set(layer_files())
    assert "python/locked_workflow/constructs_lib/lock_client.py" in files
    assert "python/locked_workflow/__init__.py" in files
    assert "python/locked_workflow/state_machines/lock_protocol.py" in files
    assert not [f for f in files if "aws_cdk" in f or f.endswith(("lock.py", "locked_section.py", "janitor.py"))]
    layers = [r for r in synthesized[True].template["Resources"].values() if r["Type"] == "AWS::Lambda::LayerVersion"]
    assert len(layers) == 1


@pytest.mark.parametrize("backend", ["moto", "dynamodb-local"])
def test_a_function_with_the_layer_takes_the_lock(synthesized, backend):
    require_backend(backend)
    with LocalCloud(backend) as cloud:
        response, payload, app = _invoke(cloud, synthesized[True], "42")
        item = cloud.dynamodb.get_item(  # released: the item keeps its fence, and no owner
            TableName=app.table_name("Locks"), Key={"pk": {"S": protocol.namespaced("job", "42")}},
            ConsistentRead=True,
        )["Item"]
    assert "FunctionError" not in response, payload
    assert payload["fence"] == 1
    assert "owner" not in item and item["fence"] == {"N": "1"}


def test_a_function_without_the_layer_is_refused_though_this_process_has_the_client(synthesized):
    """The defect: offline the handler imported ``locked_workflow`` from the test's own
    environment, and on AWS it would fail ``Runtime.ImportModuleError``."""
    with LocalCloud("moto") as cloud:
        response, payload, _ = _invoke(cloud, synthesized[False], "42")
    assert response.get("FunctionError") == "Unhandled", payload
    assert "Runtime.ImportModuleError" in payload["errorMessage"]
    assert "locked_workflow (imported by index)" in payload["errorMessage"]
    assert "LockClientLayer" in payload["errorMessage"]


def test_the_layer_alone_gives_a_fresh_interpreter_the_client(tmp_path):
    """A fresh interpreter that sees the layer's ``python/`` folder and the installed packages
    alone (not this checkout) imports ``LockClient`` wholly from the layer, and no CDK; without
    one module the client imports, the import fails (negative control)."""
    import os
    import subprocess
    import sys

    from locked_workflow.constructs_lib.assets import copy_files
    from locked_workflow.constructs_lib.client_layer import layer_files

    copy_files(layer_files(), tmp_path / "layer")
    python = tmp_path / "layer" / "python"
    script = (
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
        "sys.path[:] = [p for p in sys.path if 'editable' not in p]\n"
        f"sys.path.insert(0, {str(python)!r})\n"
        "from locked_workflow import LockClient\n"
        "LockClient('Locks', namespace='job', dynamodb=object())\n"
        "outside = sorted(n for n, m in sys.modules.items() if n.split('.')[0] == 'locked_workflow'\n"
        f"                 and not (getattr(m, '__file__', None) or '').startswith({str(python)!r}))\n"
        "print(outside, 'aws_cdk' in sys.modules, 'jsii' in sys.modules)\n"
    )
    env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1", "PYTHONPATH": ""}

    def run() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)

    done = run()
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[] False False"
    (python / "locked_workflow" / "state_machines" / "lock_protocol.py").unlink()
    broken = run()
    assert broken.returncode != 0 and "lock_protocol" in broken.stderr


def test_grant_lock_client_grants_what_the_client_calls_and_no_more():
    """The liveness check's IAM (issue 25): ``states:DescribeExecution`` on the holders'
    executions only, ``states:SendTaskHeartbeat`` on ``*`` (a task token is no IAM resource),
    the wake-ups only for a fair or read/write client, the table's item calls only; never a
    ``*`` action."""
    from aws_cdk import aws_stepfunctions as sfn
    from aws_cdk.assertions import Template

    from locked_workflow.constructs_lib.client_layer import grant_lock_client, lock_client_actions
    from locked_workflow.constructs_lib.janitor import executions_of
    from template_iam import actions

    expected = {}

    def statements(**flags) -> list[dict]:
        stack = cdk.Stack(cdk.App(), "Grants")
        locks = LockTable(stack, "Locks")
        holder = sfn.StateMachine(stack, "Holder", state_machine_name="Holder",
                                  definition_body=sfn.DefinitionBody.from_chainable(sfn.Pass(stack, "P")))
        function = lambda_.Function(stack, "Worker", runtime=lambda_.Runtime.PYTHON_3_13, handler="index.handler",
                                    code=lambda_.Code.from_inline("def handler(e, c): pass"))
        grant_lock_client(function, table=locks.table, holders=[holder], **flags)
        expected["executions"] = stack.resolve(executions_of(stack, [holder.state_machine_name]))
        template = Template.from_stack(stack).to_json()
        role = next(k for k, r in template["Resources"].items() if r["Type"] == "AWS::IAM::Role"
                    and "lambda" in json.dumps(r["Properties"]["AssumeRolePolicyDocument"]))
        from template_iam import role_statements

        return role_statements(template, role)

    mutex = statements()
    by_action = {a: s["Resource"] for s in mutex for a in actions(s)}
    assert set(by_action) == {"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem",
                              "states:SendTaskHeartbeat", "states:DescribeExecution"}, by_action
    assert by_action["states:SendTaskHeartbeat"] == "*"
    assert [by_action["states:DescribeExecution"]] == expected["executions"]  # the holders' executions only
    assert not any(a.endswith("*") for s in mutex for a in actions(s))
    fair = {a for s in statements(fair=True) for a in actions(s)}
    assert fair - set(by_action) == {"states:SendTaskSuccess", "states:SendTaskFailure"}
    read_write = {a for s in statements(read_write=True) for a in actions(s)}
    # its park's ConditionCheck and its wake-up (a grant: never a SendTaskFailure); its waiters'
    # liveness check (issue 25) is the base's: the probe, the question, and the retire of an
    # abandoned hold - a TransactWriteItems of a Delete and an Update, no action of its own
    assert read_write - set(by_action) == {"dynamodb:ConditionCheckItem", "states:SendTaskSuccess"}, read_write
    for flags, granted in (({}, set(by_action)), ({"fair": True}, fair), ({"read_write": True}, read_write)):
        assert lock_client_actions(**flags) == granted, flags  # (what test_shared_client sees the client call)
    with pytest.raises(TypeError, match="`fair` must be True or False, got: 'yes'"):
        grant_lock_client(None, table=None, fair="yes")


def test_grant_lock_client_takes_the_clients_kind_as_a_value():
    """``grant_lock_client(..., kind=...)`` / ``lock_client_actions(kind=...)`` take the kind the
    client takes (``LockClient.FAIR``, or the workflows' ``Lock`` value); the flags still work,
    deprecated."""
    from aws_cdk.assertions import Template

    from locked_workflow import Lock, LockClient
    from locked_workflow.constructs_lib.client_layer import grant_lock_client, lock_client_actions
    from locked_workflow.constructs_lib.client_kind import LockKindNotServed
    from template_iam import actions, role_statements

    key = "{% $states.input.k %}"
    for kind, value in ((LockClient.MUTEX, Lock.mutex(key)), (LockClient.FAIR, Lock.fair(key)),
                        (LockClient.READ_WRITE, Lock.exclusive(key))):
        assert lock_client_actions(kind=kind) == lock_client_actions(kind=value)
    with pytest.warns(DeprecationWarning, match="kind=LockClient.FAIR"):
        assert lock_client_actions(fair=True) == lock_client_actions(kind=LockClient.FAIR) != lock_client_actions()
    with pytest.warns(DeprecationWarning, match="kind=LockClient.READ_WRITE"):
        assert lock_client_actions(read_write=True) == lock_client_actions(kind=LockClient.READ_WRITE)
    with pytest.raises(LockKindNotServed, match=r"got: Lock\.semaphore"):
        lock_client_actions(kind=Lock.semaphore(key, limit=2))
    stack = cdk.Stack(cdk.App(), "Grants")
    locks = LockTable(stack, "Locks")
    function = lambda_.Function(stack, "Worker", runtime=lambda_.Runtime.PYTHON_3_13, handler="index.handler",
                                code=lambda_.Code.from_inline("def handler(e, c): pass"))
    grant_lock_client(function, table=locks.table, kind=Lock.fair(key))
    template = Template.from_stack(stack).to_json()
    role = next(k for k, r in template["Resources"].items() if r["Type"] == "AWS::IAM::Role")
    granted = {a for s in role_statements(template, role) for a in actions(s)}
    assert granted == lock_client_actions(kind=LockClient.FAIR) - {"states:DescribeExecution"}  # no holders given
