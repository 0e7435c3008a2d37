"""The lock CLI's ``--stack``: the lock table found from a CloudFormation stack (by what it is,
not its id; a table passed to the constructs by its key), its outputs, and what it says when
there is none or more than one. (The CLI itself: ``test_cli.py``.)"""

from __future__ import annotations

import json

import pytest

from locked_workflow.constructs_lib import cli, cli_aws
from locked_workflow.constructs_lib.lock_client import LockClient
from test_cli import FakeSession, cloud, run, table  # noqa: F401 - cloud, table: the CLI's fixtures


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
