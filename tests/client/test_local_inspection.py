"""Inspecting a test's locks from another shell while the test runs: the plugin's
``$LOCAL_CLOUD_DYNAMODB_PORT`` puts the test's DynamoDB Local on a known port and prints its
endpoint, and the lock CLI, in another process, reads the locks there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from locked_workflow.testing.cloud import LocalCloud
from locked_workflow.testing.dynamodb_local import free_port
from locked_workflow.testing.pytest_plugin import ENV_BACKEND, require_backend

ROOT = Path(__file__).resolve().parents[2]

USER_TEST = '''
import json, os, subprocess, sys

from locked_workflow.constructs_lib.lock_client import LockClient


def test_a_lock_held_here_is_seen_by_the_cli_in_another_process(local_cloud):
    local_cloud.dynamodb.create_table(
        TableName="Locks", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
    LockClient("Locks", namespace="customer", dynamodb=local_cloud.dynamodb).acquire("42", lease=60)
    endpoint = local_cloud.dynamodb_endpoint_url
    assert endpoint == "http://127.0.0.1:" + os.environ["LOCAL_CLOUD_DYNAMODB_PORT"]
    # another shell: no AWS settings at all, only the endpoint
    shell = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    done = subprocess.run(
        [sys.executable, "-m", "locked_workflow.constructs_lib.cli", "locks", "list", "--table", "Locks",
         "--endpoint-url", endpoint, "--json"], env=shell, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [(r["namespace"], r["key"], r["state"]) for r in rows] == [("customer", "42", "held")]
'''


def test_a_tests_locks_can_be_inspected_from_another_shell(tmp_path):
    require_backend("dynamodb-local")
    port = free_port()
    (tmp_path / "test_user.py").write_text(USER_TEST)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", ENV_BACKEND)}
    env.update(PYTHONPATH=str(ROOT), LOCAL_CLOUD_DYNAMODB_PORT=str(port), AWS_DEFAULT_REGION="us-east-1")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "locked_workflow.testing.pytest_plugin",
         "test_user.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    # printed past pytest's capture (no -s), so the user sees where to point the CLI
    assert f"local_cloud: DynamoDB Local at http://127.0.0.1:{port} " in done.stdout


@pytest.mark.parametrize("backend, port, message", [
    ("moto", 8000, "`dynamodb_local_port` must be left unset with backend='moto' (moto's DynamoDB is in this "
                   "process, with no endpoint), got: 8000"),
    ("dynamodb-local", 0, "`dynamodb_local_port` must be a TCP port from 1 to 65535, got: 0"),
    ("dynamodb-local", "8000", "`dynamodb_local_port` must be a TCP port from 1 to 65535, got: '8000'"),
])
def test_the_port_is_validated(backend, port, message):
    with pytest.raises(ValueError) as raised:
        LocalCloud(backend, dynamodb_local_port=port)
    assert str(raised.value) == message


def test_a_port_in_use_is_named():
    import socket

    from locked_workflow.testing.dynamodb_local import DynamoDBLocal, DynamoDBLocalUnavailable

    require_backend("dynamodb-local")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(DynamoDBLocalUnavailable, match=f"^port {port} is in use"):
            DynamoDBLocal(port=port).start()
