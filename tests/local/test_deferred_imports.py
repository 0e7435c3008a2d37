"""``deferred_imports``: moto.batch (and moto.ec2 with it) load only when something uses them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from locked_workflow.testing import deferred_imports

#: In a fresh process: import the runtime, run a DynamoDB task and a Lambda function in it, then
#: use moto's Batch; what was loaded at each step.
SCRIPT = textwrap.dedent('''
    import json, sys, uuid
    sys.path.insert(0, "tests/local")
    import locked_workflow.testing.cloud
    seen = {"imported": "moto.ec2" in sys.modules}
    import boto3
    from locked_workflow.testing import LocalCloud
    from local_helpers import REGION, create_state_machine, wait_for_end
    with LocalCloud():
        boto3.client("dynamodb", region_name=REGION).create_table(
            TableName="t", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
        machine = create_state_machine({"StartAt": "Put", "States": {"Put": {
            "Type": "Task", "Resource": "arn:aws:states:::dynamodb:putItem",
            "Parameters": {"TableName": "t", "Item": {"pk": {"S": "a"}}}, "End": True}}})
        arn = boto3.client("stepfunctions", region_name=REGION).start_execution(
            stateMachineArn=machine, name=str(uuid.uuid4()), input="{}")["executionArn"]
        seen["status"] = wait_for_end(arn)["status"]
        seen["ran"] = "moto.ec2" in sys.modules
        from moto.backends import get_backend
        seen["batch"] = type(get_backend("batch")).__name__
        seen["used"] = "moto.ec2" in sys.modules
    print(json.dumps(seen))
''')


def _run(defer: str) -> dict:
    env = {**os.environ, deferred_imports.ENV: defer, "LOCKED_WORKFLOW_CDK_PRELOAD": "0"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_moto_ec2_loads_only_when_batch_is_used():
    assert _run("1") == {"imported": False, "status": "SUCCEEDED", "ran": False, "batch": "BackendDict", "used": True}


def test_without_deferring_moto_ec2_loads_with_the_runtime():  # the negative control
    assert _run("0") == {"imported": True, "status": "SUCCEEDED", "ran": True, "batch": "BackendDict", "used": True}


def test_a_package_already_imported_is_not_deferred():
    import moto.core  # noqa: F401

    assert deferred_imports.defer("moto.core") is False
    assert deferred_imports.defer("json") is False  # not a package
