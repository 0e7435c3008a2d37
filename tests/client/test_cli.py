"""The lock CLI on both DynamoDB backends: list, show, a forced release conditioned on the
holder it read (racing a real release), semaphore slots, an endpoint without AWS credentials,
refusals, and every error on one line."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from locked_workflow.constructs_lib import cli, cli_aws
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


class FakeCloudFormation:
    """describe_stacks / get_template / list_stack_resources of one stack (moto's CloudFormation
    needs extras this project does not install; the lookup is what is tested). ``physical``:
    logical id -> physical id, served two to a page."""

    def __init__(self, stack: str, template: dict, physical: dict, outputs: list | None = None) -> None:
        self.stack, self.template, self.physical, self.outputs = stack, template, physical, outputs or []

    def _exists(self, name):
        if name != self.stack:
            raise RuntimeError(f"Stack with id {name} does not exist")

    def describe_stacks(self, StackName):
        self._exists(StackName)
        return {"Stacks": [{"StackName": StackName, "Outputs": self.outputs}]}

    def get_template(self, StackName):
        self._exists(StackName)
        return {"TemplateBody": self.template}

    def list_stack_resources(self, StackName, NextToken=None):
        self._exists(StackName)
        rows = [{"LogicalResourceId": k, "PhysicalResourceId": v,
                 "ResourceType": self.template["Resources"][k]["Type"]} for k, v in self.physical.items()]
        start = int(NextToken or 0)
        page = {"StackResourceSummaries": rows[start:start + 2]}
        if start + 2 < len(rows):
            page["NextToken"] = str(start + 2)
        return page


def _synthesized(build) -> dict:
    """The template of a stack ``build(stack)`` fills (a real synth: what CloudFormation holds)."""
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    stack = cdk.Stack(cdk.App(), "Stack")
    build(stack)
    return Template.from_stack(stack).to_json()


def _pk_table(stack, name):
    """A table of the app's own that happens to have the lock table's key (pk, string)."""
    from aws_cdk import aws_dynamodb as dynamodb

    return dynamodb.Table(stack, name, partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING))


def _physical(template: dict, **names) -> dict:
    """logical id -> physical name of each table, by the construct id its logical id starts with."""
    return {logical: next(v for k, v in names.items() if logical.startswith(k))
            for logical, r in template["Resources"].items() if r["Type"] == "AWS::DynamoDB::Table"}


class FakeSession:
    region_name = "us-east-1"

    def __init__(self, cloudformation) -> None:
        self.cloudformation = cloudformation

    def client(self, service, **kwargs):
        assert service == "cloudformation"
        return self.cloudformation


@pytest.fixture(scope="module")
def readme_stack_template() -> dict:
    """The README's ``LockTable(self, "Locks")`` beside a table of the app's own with the same key."""
    from locked_workflow import LockTable

    return _synthesized(lambda stack: (LockTable(stack, "Locks"), _pk_table(stack, "Customers")))


def test_the_table_is_found_from_a_stack(cloud, table, capsys, readme_stack_template):
    """The README's ``LockTable(self, "Locks")`` (no "LockTable" in its id) is found by what it
    is, not the customers table beside it, though that one has the same key."""
    LockClient(table, namespace="s", dynamodb=cloud.dynamodb).acquire("k", lease=60)
    template = readme_stack_template
    session = FakeSession(FakeCloudFormation(
        "Updates", template, {**_physical(template, Locks=table, Customers="customers"), "Other1": "x", "Other2": "y"}))
    template["Resources"].update({f"Other{n}": {"Type": "AWS::SQS::Queue"} for n in (1, 2)})  # a second page
    code, out, err = run(cloud, capsys, "locks", "list", "--stack", "Updates", "--json", session=session)
    assert (code, err) == (0, "") and [r["key"] for r in json.loads(out)] == ["k"]
    with_output = FakeSession(FakeCloudFormation("Updates", template, {}, [{"OutputKey": "Locks", "OutputValue": table}]))
    code, out, _ = run(cloud, capsys, "locks", "list", "--stack", "Updates", "--output", "Locks", "--json",
                       session=with_output)
    assert code == 0 and len(json.loads(out)) == 1
    code, _, err = run(cloud, capsys, "locks", "list", "--stack", "Updates", "--output", "Nope", session=with_output)
    assert code == cli.FAILED and "stack 'Updates' has no output 'Nope' (its outputs: Locks)" in err
    code, _, err = run(cloud, capsys, "locks", "list", "--stack", "Missing", session=session)
    assert code == cli.FAILED and "cannot read stack 'Missing'" in err


def test_a_stack_without_a_lock_table_construct_is_read_by_the_tables_key(capsys):
    """A table passed to the constructs (no LockTable): the one keyed by pk (string) alone; two
    lock tables, or none, name what was found and ask for --table."""
    from aws_cdk import aws_dynamodb as dynamodb
    from locked_workflow import LockTable

    def own_tables(stack):
        _pk_table(stack, "Existing")
        dynamodb.Table(stack, "Orders", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
                       sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING))

    one = _synthesized(own_tables)
    physical = _physical(one, Existing="existing", Orders="orders")
    assert cli_aws.lock_tables(one, physical) == ["existing"]
    two = _synthesized(lambda stack: (LockTable(stack, "Locks"), LockTable(stack, "More")))
    assert sorted(cli_aws.lock_tables(two, _physical(two, Locks="locks", More="more"))) == ["locks", "more"]
    none = _synthesized(lambda stack: dynamodb.Table(
        stack, "Orders", partition_key=dynamodb.Attribute(name="id", type=dynamodb.AttributeType.NUMBER)))
    for template, names, expected in [
        (two, {"Locks": "locks", "More": "more"}, "stack 'S' has 2 lock tables (locks, more): give --table"),
        (none, {"Orders": "orders"}, "stack 'S' has no lock table (a LockTable's, or one keyed by the string "
                                     "partition key pk alone): give --table"),
    ]:
        session = FakeSession(FakeCloudFormation("S", template, _physical(template, **names)))
        code = cli.main(["locks", "list", "--stack", "S"], clients={"session": session, "dynamodb": object()})
        _, err = capsys.readouterr()
        assert code == cli.FAILED and err == f"error: {expected}\n"


def _fair_queue(cloud, table, owners_and_tokens) -> None:
    """Queue rows (tickets 1, 2, ...) on the fair lock ``fair#q`` with these (owner, token)."""
    from locked_workflow.state_machines import fair_protocol as fp

    cloud.dynamodb.update_item(
        TableName=table, Key={"pk": {"S": "fair#q"}}, UpdateExpression="SET #s = :zero, #t = :n",
        ExpressionAttributeNames={"#s": fp.SERVED, "#t": fp.TICKETS},
        ExpressionAttributeValues={":zero": {"N": "0"}, ":n": {"N": str(len(owners_and_tokens))}})
    for ticket, (owner, token) in enumerate(owners_and_tokens, 1):
        cloud.dynamodb.put_item(TableName=table, Item={
            "pk": {"S": fp.row_key("fair#q", ticket)}, "owner": {"S": owner}, fp.TOKEN: {"S": token},
            fp.LEASE: {"N": "60000"}, fp.GRACE_MS: {"N": "0"}})


def test_show_lists_a_fair_locks_waiters_in_order_and_how_each_waits(cloud, table, capsys):
    from locked_workflow.state_machines import fair_protocol as fp

    holder = LockClient(table, namespace="fair", dynamodb=cloud.dynamodb, fair=True).acquire("q", lease=60)
    parked, polling = "arn:aws:states:us-east-1:123456789012:execution:m:e#1", "client:h:1:x#2"
    _fair_queue(cloud, table, [(parked, "token"), (polling, f"{fp.CLIENT_LEASE_PREFIX}9")])
    code, out, _ = run(cloud, capsys, "locks", "show", "q", "--namespace", "fair", "--table", table, "--json")
    shown = json.loads(out)
    assert code == 0 and shown["owner"] == holder.owner
    assert shown["waiters"] == [
        {"ticket": 1, "owner": parked, "execution": "arn:aws:states:us-east-1:123456789012:execution:m:e", "waits": "parked"},
        {"ticket": 2, "owner": polling, "execution": None, "waits": "polling"},
    ]
    code, out, _ = run(cloud, capsys, "locks", "show", "q", "--namespace", "fair", "--table", table)
    assert f"waiters: 2\n    1. {parked} (parked)\n    2. {polling} (polling)" in out
    code, out, _ = run(cloud, capsys, "locks", "list", "--table", table, "--json")
    assert [r["key"] for r in json.loads(out) if r["namespace"] == "fair"] == ["q"]  # rows are no locks


def test_show_marks_the_tickets_a_coalescing_key_superseded(cloud, table, capsys):
    """On a ``QueueLimit.keep_newest`` key the item's cut names the last superseded ticket: the
    rows at or below it wait for nothing (the handoff passes them); a plain fair key has no cut
    (the test above: the same rows show parked)."""
    from locked_workflow.state_machines import fair_protocol as fp

    LockClient(table, namespace="fair", dynamodb=cloud.dynamodb, fair=True).acquire("q", lease=60)
    older, newest = "arn:aws:states:us-east-1:123456789012:execution:m:a#1", "arn:aws:states:us-east-1:123456789012:execution:m:b#2"
    _fair_queue(cloud, table, [(older, "token-a"), (newest, "token-b")])
    cloud.dynamodb.update_item(TableName=table, Key={"pk": {"S": "fair#q"}}, UpdateExpression="SET #c = :one",
                               ExpressionAttributeNames={"#c": fp.CUT}, ExpressionAttributeValues={":one": {"N": "1"}})
    code, out, _ = run(cloud, capsys, "locks", "show", "q", "--namespace", "fair", "--table", table, "--json")
    assert code == 0 and [w["waits"] for w in json.loads(out)["waiters"]] == ["superseded", "parked"]


def test_a_forced_release_of_a_fair_lock_hands_it_to_the_next_waiter(cloud, table, capsys):
    from locked_workflow.state_machines import fair_protocol as fp

    holder = LockClient(table, namespace="fair", dynamodb=cloud.dynamodb, fair=True).acquire("q", lease=60)
    waiter = "client:h:1:w#1"
    _fair_queue(cloud, table, [(waiter, f"{fp.CLIENT_LEASE_PREFIX}{int(time.time() * 1000) + 60_000}")])
    code, out, _ = run(cloud, capsys, "locks", "release", "q", "--namespace", "fair", "--table", table, "--force",
                       "--json")
    item = cloud.dynamodb.get_item(TableName=table, Key={"pk": {"S": "fair#q"}}, ConsistentRead=True)["Item"]
    assert code == 0 and json.loads(out)["released"] and item["owner"]["S"] == waiter != holder.owner
    assert fp.counters(item) == (1, 1) and int(item["fence"]["N"]) == holder.fence + 1


def test_clear_head_takes_a_dead_head_out_of_a_fair_queue_and_hands_the_free_lock_on(cloud, table, capsys):
    from locked_workflow.state_machines import fair_protocol as fp

    LockClient(table, namespace="fair", dynamodb=cloud.dynamodb, fair=True).acquire("q", lease=60)
    cloud.dynamodb.update_item(TableName=table, Key={"pk": {"S": "fair#q"}}, UpdateExpression="REMOVE #o",
                               ExpressionAttributeNames={"#o": "owner"})  # free: its head should have taken it
    dead, waiter = "arn:aws:states:us-east-1:123456789012:execution:m:gone#1", "client:h:1:w#2"
    _fair_queue(cloud, table, [(dead, "token-of-a-stopped-execution"),
                               (waiter, f"{fp.CLIENT_LEASE_PREFIX}{int(time.time() * 1000) + 60_000}")])
    code, out, _ = run(cloud, capsys, "locks", "clear-head", "q", "--namespace", "fair", "--table", table, "--json")
    item = cloud.dynamodb.get_item(TableName=table, Key={"pk": {"S": "fair#q"}}, ConsistentRead=True)["Item"]
    assert code == 0 and json.loads(out)["cleared"]
    assert item["owner"]["S"] == waiter and fp.counters(item) == (2, 2)  # the dead head skipped, the next granted
    code, out, _ = run(cloud, capsys, "locks", "clear-head", "q", "--namespace", "fair", "--table", table, "--json")
    assert code == 0 and not json.loads(out)["cleared"]  # nobody queues any more


def test_a_read_write_locks_readers_are_shown_and_one_is_released_by_name(cloud, table, capsys):
    """A shared hold: `show` lists its readers, each with its own lease; `release` needs
    `--reader`, removes only that reader's hold, and the last reader out hands the key to the
    writer queued behind (a polling client: granted, it claims at its next look)."""
    import threading

    from locked_workflow.state_machines import fair_protocol as fp

    def rw():
        return LockClient(table, namespace="rw", dynamodb=cloud.dynamodb, stepfunctions=cloud.stepfunctions,
                          read_write=True)

    first, second = rw().acquire("q", shared=True, lease=60), rw().acquire("q", shared=True, lease=60)
    code, out, _ = run(cloud, capsys, "locks", "show", "q", "--namespace", "rw", "--table", table, "--json")
    shown = json.loads(out)
    assert code == 0 and shown["mode"] == "shared" and shown["state"] == "held" and shown["owner"] is None
    assert sorted(r["owner"] for r in shown["readers"]) == sorted([first.owner, second.owner])
    assert {r["state"] for r in shown["readers"]} == {"held"}
    code, out, _ = run(cloud, capsys, "locks", "list", "--table", table, "--held", "--json")
    assert [(r["key"], r["mode"], len(r["readers"])) for r in json.loads(out) if r["namespace"] == "rw"] == [
        ("q", "shared", 2)]
    code, out, _ = run(cloud, capsys, "locks", "show", "q", "--namespace", "rw", "--table", table)
    assert "readers: 2" in out and f"    {first.owner} (held, since " in out
    code, out, _ = run(cloud, capsys, "locks", "list", "--table", table)
    assert "rw#q: held, fence None, shared by 2 reader(s)" in out
    # a writer queues behind the readers
    got = {}
    writer = threading.Thread(target=lambda: got.update(lease=rw().acquire("q", wait=60, poll_interval=0.1)))
    writer.start()
    deadline = time.time() + 60
    while fp.counters(item(cloud, table, "rw#q")) != (0, 1):
        assert time.time() < deadline
        time.sleep(0.05)
    code, out, err = run(cloud, capsys, "locks", "release", "q", "--namespace", "rw", "--table", table, "--force")
    assert code == 1 and "give --reader OWNER" in err
    code, out, err = run(cloud, capsys, "locks", "release", "q", "--namespace", "rw", "--table", table, "--force",
                         "--reader", "client:nobody#1")
    assert code == 1 and "holds no shared hold" in err
    code, out, _ = run(cloud, capsys, "locks", "release", "q", "--namespace", "rw", "--table", table,
                       "--reader", first.owner, "--json")
    assert code == cli.REFUSED and not json.loads(out)["released"]
    code, out, _ = run(cloud, capsys, "locks", "release", "q", "--namespace", "rw", "--table", table, "--force",
                       "--reader", first.owner, "--json")
    assert code == 0 and json.loads(out)["released"]
    assert sorted(rw_entries(item(cloud, table, "rw#q"))) == [second.owner]  # only that reader's hold went
    rw().release(second)  # the last reader: the key goes to the queued writer
    writer.join(60)
    assert got["lease"].ticket == 1 and item(cloud, table, "rw#q")["owner"]["S"] == got["lease"].owner
    code, out, _ = run(cloud, capsys, "locks", "release", "q", "--namespace", "rw", "--table", table, "--force",
                       "--json")
    assert code == 0 and json.loads(out)["released"]  # a writer's forced release, as a mutex's
    assert "owner" not in item(cloud, table, "rw#q")


def rw_entries(lock_item: dict) -> dict:
    from locked_workflow.state_machines import shared_protocol as rwp

    return rwp.readers_of(lock_item)


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
