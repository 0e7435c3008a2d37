"""The lock CLI on both DynamoDB backends: list, show, a forced release conditioned on the
holder it read (racing a real release), semaphore slots, an endpoint without AWS credentials,
refusals, and every error on one line. (A table found from a stack: ``test_cli_stack.py``;
the fair and read/write locks' queues and readers: ``test_cli_queues.py``.)"""

from __future__ import annotations

import json
import uuid

import pytest

from locked_workflow.constructs_lib import cli
from locked_workflow.constructs_lib.lock_client import LockClient
from locked_workflow.state_machines import lock_protocol as p

WAIT_30S = {"QueryLanguage": "JSONata", "StartAt": "Hold",
            "States": {"Hold": {"Type": "Wait", "Seconds": 30, "End": True}}}


@pytest.fixture(scope="module", params=["moto", "dynamodb-local"])
def cloud(request):
    from deployed import backend_cloud

    yield from backend_cloud(request.param)


@pytest.fixture
def table(cloud):
    from deployed import create_lock_table

    return create_lock_table(cloud, f"locks-{uuid.uuid4().hex[:8]}")


def run(cloud, capsys, *argv, **clients):
    clients = {"dynamodb": cloud.dynamodb, "stepfunctions": cloud.stepfunctions, **clients}
    code = cli.main(list(argv), clients=clients)
    out, err = capsys.readouterr()
    return code, out, err


def item(cloud, table, stored):
    return cloud.dynamodb.get_item(TableName=table, Key={"pk": {"S": stored}}, ConsistentRead=True).get("Item", {})


def test_list_and_show_a_client_held_lock(cloud, table, capsys):
    client = LockClient(table, namespace="customer", dynamodb=cloud.dynamodb)
    held = client.acquire("42", lease=60)
    free = client.acquire("7", lease=60)
    client.release(free)
    code, out, _ = run(cloud, capsys, "locks", "list", "--table", table, "--json")
    rows = json.loads(out)
    assert code == 0 and [(r["key"], r["state"], r["fence"]) for r in rows] == [("42", "held", 1), ("7", "free", 1)]
    code, out, _ = run(cloud, capsys, "locks", "list", "--table", table, "--held", "--json")
    assert [r["key"] for r in json.loads(out)] == ["42"]
    code, out, _ = run(cloud, capsys, "locks", "show", "42", "--namespace", "customer", "--table", table, "--json")
    shown = json.loads(out)
    assert code == 0 and shown["owner"] == held.owner and shown["fence"] == 1 and shown["execution"] is None
    assert shown["expiresAt"] and shown["waiters"].startswith("not recorded")
    code, out, _ = run(cloud, capsys, "locks", "list", "--table", table)
    assert "customer#42: held, fence 1, held by" in out and "customer#7: free" in out


def test_show_names_the_holding_execution_and_its_status(cloud, table, capsys):
    machine = cloud.stepfunctions.create_state_machine(
        name=f"hold-{uuid.uuid4().hex[:6]}", definition=json.dumps(WAIT_30S),
        roleArn="arn:aws:iam::123456789012:role/r")["stateMachineArn"]
    execution = cloud.stepfunctions.start_execution(stateMachineArn=machine)["executionArn"]
    client = LockClient(table, namespace="c", dynamodb=cloud.dynamodb)
    client.acquire("1", owner=execution, lease=60)  # as if that execution held it
    code, out, _ = run(cloud, capsys, "locks", "show", "1", "--namespace", "c", "--table", table, "--json")
    shown = json.loads(out)
    assert (shown["execution"], shown["executionStatus"]) == (execution, "RUNNING")
    # releasing a running holder is possible only with --force, and warns
    code, out, _ = run(cloud, capsys, "locks", "release", "1", "--namespace", "c", "--table", table, "--json")
    refused = json.loads(out)
    assert code == cli.REFUSED and refused["released"] is False and "--force" in refused["message"]
    assert p.OWNER in item(cloud, table, "c#1")  # untouched
    code, out, _ = run(cloud, capsys, "locks", "release", "1", "--namespace", "c", "--table", table, "--force")
    assert code == 0 and "WARNING" in out and "released the lock" in out
    assert p.OWNER not in item(cloud, table, "c#1") and item(cloud, table, "c#1")[p.FENCE] == {"N": "1"}
    cloud.stepfunctions.stop_execution(executionArn=execution)


def test_a_forced_release_racing_a_real_release_and_reacquire_releases_nothing(cloud, table, capsys, monkeypatch):
    client = LockClient(table, namespace="r", dynamodb=cloud.dynamodb)
    first = client.acquire("k", lease=60)
    later = {}
    original_get = cli.Locks.get
    reads = []

    def get_then_race(self, stored):
        got = original_get(self, stored)
        if not reads:  # after the CLI read the holder: it releases, another run acquires
            client.release(first)
            later["lease"] = client.acquire("k", lease=60)
        reads.append(stored)
        return got

    monkeypatch.setattr(cli.Locks, "get", get_then_race)
    code, _, err = run(cloud, capsys, "locks", "release", "k", "--namespace", "r", "--table", table, "--force")
    assert code == cli.FAILED and "the lock changed since it was read" in err and "nothing released" in err
    assert item(cloud, table, "r#k")[p.OWNER]["S"] == later["lease"].owner  # the new holder keeps it


def test_owner_and_fence_must_match_what_is_held(cloud, table, capsys):
    client = LockClient(table, namespace="m", dynamodb=cloud.dynamodb)
    held = client.acquire("k", lease=60)
    code, _, err = run(cloud, capsys, "locks", "release", "k", "--namespace", "m", "--table", table,
                       "--force", "--fence", "9")
    assert code == cli.FAILED and "not --fence 9" in err
    code, _, err = run(cloud, capsys, "locks", "release", "k", "--namespace", "m", "--table", table,
                       "--force", "--owner", "someone-else")
    assert code == cli.FAILED and "nothing released" in err
    assert item(cloud, table, "m#k")[p.OWNER]["S"] == held.owner
    code, _, _ = run(cloud, capsys, "locks", "release", "k", "--namespace", "m", "--table", table,
                     "--force", "--owner", held.owner, "--fence", "1")
    assert code == 0 and p.OWNER not in item(cloud, table, "m#k")


def test_semaphore_slots_are_listed_with_their_slot(cloud, table, capsys):
    from locked_workflow.state_machines import semaphore_protocol as sp

    cloud.dynamodb.put_item(TableName=table, Item={
        "pk": {"S": sp.slot_key("sem#api", 2)}, "owner": {"S": "x#1"}, "fence": {"N": "4"},
        "expiresAt": {"N": "1"}, "acquiredAt": {"N": "0"}})
    code, out, _ = run(cloud, capsys, "locks", "list", "--table", table, "--json")
    (row,) = json.loads(out)
    assert (row["namespace"], row["key"], row["slot"], row["state"]) == ("sem", "api", 2, "expired")


def test_clear_errors(cloud, table, capsys):
    code, _, err = run(cloud, capsys, "locks", "show", "nope", "--table", table)
    assert code == cli.FAILED and "no lock item for key 'nope'" in err
    code, _, err = run(cloud, capsys, "locks", "list", "--table", "no-such-table")
    assert code == cli.FAILED and "no table 'no-such-table'" in err and "Traceback" not in err
    code, _, err = run(cloud, capsys, "locks", "show", "k", "--namespace", "a#b", "--table", table)
    assert code == cli.FAILED and "the namespace must be at most 64" in err
    code, _, err = run(cloud, capsys, "locks", "list")
    assert code == cli.FAILED and "give --table NAME or --stack STACK" in err


class FakeSession:
    region_name = "us-east-1"

    def __init__(self, cloudformation) -> None:
        self.cloudformation = cloudformation

    def client(self, service, **kwargs):
        assert service == "cloudformation"
        return self.cloudformation


# ---- semaphore slots, endpoints without credentials, one-line errors -------------------------


def test_a_semaphore_slot_can_be_shown_and_released(cloud, table, capsys):
    from locked_workflow.state_machines import semaphore_protocol as sp

    for slot, owner in ((0, "x#1"), (2, "x#2")):
        cloud.dynamodb.put_item(TableName=table, Item={
            "pk": {"S": sp.slot_key("sem#api", slot)}, "owner": {"S": owner}, "fence": {"N": str(4 + slot)},
            "expiresAt": {"N": "9999999999999"}, "acquiredAt": {"N": "0"}})
    code, _, err = run(cloud, capsys, "locks", "show", "api", "--namespace", "sem", "--table", table)
    assert code == cli.FAILED and "it is a semaphore, give --slot N" in err and len(err.splitlines()) == 1
    code, out, _ = run(cloud, capsys, "locks", "show", "api", "--namespace", "sem", "--slot", "2", "--table", table, "--json")
    shown = json.loads(out)
    assert code == 0 and (shown["slot"], shown["owner"], shown["fence"], shown["state"]) == (2, "x#2", 6, "held")
    code, out, _ = run(cloud, capsys, "locks", "release", "api", "--namespace", "sem", "--slot", "2", "--table", table, "--force")
    assert code == 0 and "released the lock held by 'x#2' (fence 6)" in out
    assert p.OWNER not in item(cloud, table, sp.slot_key("sem#api", 2))
    assert item(cloud, table, sp.slot_key("sem#api", 0))[p.OWNER]["S"] == "x#1"  # the other slot is untouched
    code, _, err = run(cloud, capsys, "locks", "show", "api", "--namespace", "sem", "--slot", "1", "--table", table)
    assert code == cli.FAILED and "no lock item for key 'api' slot 1" in err
    code, _, err = run(cloud, capsys, "locks", "release", "api", "--namespace", "sem", "--slot", "99", "--table", table)
    assert code == cli.FAILED and "--slot must be a semaphore slot from 0 to 31, got: 99" in err


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    """No AWS credentials or region anywhere boto3 looks (environment, files, instance metadata)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                 "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    import boto3

    assert boto3.Session().get_credentials() is None  # the control: really none


def test_an_endpoint_works_without_aws_credentials(cloud, table, capsys, no_credentials, monkeypatch):
    if cloud.dynamodb_endpoint_url is None:
        pytest.skip("moto has no endpoint: DynamoDB Local does")
    LockClient(table, namespace="e", dynamodb=cloud.dynamodb).acquire("k", lease=60)
    capsys.readouterr()
    code = cli.main(["locks", "list", "--table", table, "--endpoint-url", cloud.dynamodb_endpoint_url, "--json"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "") and [r["key"] for r in json.loads(out)] == ["k"]
    # configured credentials but no region: an endpoint needs none either
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")
    code = cli.main(["locks", "list", "--table", table, "--endpoint-url", cloud.dynamodb_endpoint_url, "--json"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "") and [r["key"] for r in json.loads(out)] == ["k"]
    # the region named is the one used: the default with an endpoint, or --region
    for extra, region in (([], "us-east-1"), (["--region", "eu-west-3"], "eu-west-3")):
        code = cli.main(["locks", "list", "--table", "missing", "--endpoint-url", cloud.dynamodb_endpoint_url, *extra])
        _, err = capsys.readouterr()
        assert code == cli.FAILED and f"no table 'missing' (region {region})" in err


def test_a_refused_connection_is_one_line(capsys, no_credentials):
    code = cli.main(["locks", "list", "--table", "t", "--endpoint-url", "http://127.0.0.1:9", "--region", "eu-north-1"])
    out, err = capsys.readouterr()
    assert code == cli.FAILED and out == ""
    assert err.splitlines() == [
        "error: cannot connect to http://127.0.0.1:9 (region eu-north-1): is it running, and is the URL right?"]
    # negative control: without an endpoint there are no dummy credentials for AWS
    code = cli.main(["locks", "list", "--table", "t", "--region", "eu-north-1"])
    _, err = capsys.readouterr()
    assert code == cli.FAILED and err.splitlines() == [
        "error: no AWS credentials: configure them (aws configure, AWS_PROFILE, ...)"]


class Failing:
    """A DynamoDB client whose every call raises ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.meta = type("Meta", (), {"region_name": "ap-south-2"})()

    def __getattr__(self, name):
        def call(**_):
            raise self.error
        return call


def _client_error(code: str) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": "Rate exceeded\nsecond line"}}, "Scan")


@pytest.mark.parametrize("error, expected", [
    (_client_error("ThrottlingException"), "error: AWS is throttling the calls (region ap-south-2)"),
    (_client_error("ProvisionedThroughputExceededException"), "error: AWS is throttling the calls (region ap-south-2)"),
    (_client_error("AccessDeniedException"), "error: AWS refused (region ap-south-2): An error occurred (AccessDeniedException)"),
    ("read-timeout", "error: timed out talking to http://x (region ap-south-2)"),
    ("connect-timeout", "error: timed out talking to http://x (region ap-south-2)"),
    (RuntimeError("a bug\nover lines"), "error: unexpected RuntimeError: a bug over lines (please report it)"),
])
def test_every_failure_is_one_line(capsys, error, expected):
    from botocore.exceptions import ConnectTimeoutError, ReadTimeoutError

    if error == "read-timeout":
        error = ReadTimeoutError(endpoint_url="http://x")
    elif error == "connect-timeout":
        error = ConnectTimeoutError(endpoint_url="http://x")
    code = cli.main(["locks", "list", "--table", "t"], clients={
        "dynamodb": Failing(error), "stepfunctions": object(), "session": FakeSession(None)})
    out, err = capsys.readouterr()
    assert code == cli.FAILED and out == "" and len(err.splitlines()) == 1 and err.startswith(expected), err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [
    ["locks", "release", "k", "--table", "t", "--fence", "abc"],
    ["locks", "nope"],
    [],
])
def test_bad_arguments_are_one_line(capsys, argv):
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    out, err = capsys.readouterr()
    assert exited.value.code == cli.REFUSED and out == "" and len(err.splitlines()) == 1
    assert err.startswith("error: ") and "--help" in err


def test_a_reader_that_leaves_early_is_no_error(cloud, table, capsys, monkeypatch):
    """``locked-workflow locks list | head -1``: the pipe closes while the CLI writes."""
    LockClient(table, namespace="b", dynamodb=cloud.dynamodb).acquire("k", lease=60)

    def closed_pipe(result, as_json):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "_print", closed_pipe)
    code, out, err = run(cloud, capsys, "locks", "list", "--table", table)
    assert (code, out, err) == (0, "", "")


@pytest.mark.parametrize("argv", [[], ["locks"], ["locks", "list"], ["locks", "show"], ["locks", "release"],
                                  ["locks", "clear-head"]])
def test_help_is_plain_text(capsys, argv):
    """``--help`` shows no reStructuredText markup (the module's docstring is RST)."""
    with pytest.raises(SystemExit) as exited:
        cli.main([*argv, "--help"])
    out, _ = capsys.readouterr()
    assert exited.value.code == 0 and "usage: locked-workflow" in out
    assert "``" not in out and ":class:" not in out and ":func:" not in out


def test_show_without_the_right_namespace_names_the_namespaces_that_have_the_key(cloud, table, capsys):
    from locked_workflow.constructs_lib.lock_client import LockClient as Client

    for namespace in ("customer", "order"):
        Client(table, namespace=namespace, dynamodb=cloud.dynamodb).acquire("42", lease=60)
    Client(table, namespace="b", dynamodb=cloud.dynamodb).acquire("1#42", lease=60)  # b#1#42: not key 42
    Client(table, namespace="c", dynamodb=cloud.dynamodb).acquire("142", lease=60)   # c#142: not key 42
    code, _, err = run(cloud, capsys, "locks", "show", "42", "--table", table)
    assert code == cli.FAILED and err == (
        f"error: no lock item for key '42' in namespace '' (table {table}); the key is in namespaces "
        "'customer', 'order' (give --namespace)\n")
    code, _, err = run(cloud, capsys, "locks", "show", "42", "--namespace", "order", "--table", table, "--json")
    assert code == 0
    # a key in no namespace: the message says only what it always said
    code, _, err = run(cloud, capsys, "locks", "show", "7", "--table", table)
    assert code == cli.FAILED and err == f"error: no lock item for key '7' in namespace '' (table {table})\n"
