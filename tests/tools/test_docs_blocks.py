"""Every code block of the guides (docs/) that a user would copy is run here, as the README's
quick start is (tests/tools/test_readme.py): a block says how with the marker line above it.

- ``<!-- file: PATH -->``: a whole file (the quick start's and ``orders_stack.py``), which
  tests/tools/test_readme.py synthesizes or runs;
- ``<!-- run: stack -->``: lines of a stack's ``__init__``, run in a fresh ``Stack`` (``self``)
  beside the names a guide's prose supposes (:data:`STACK_NAMES`), then synthesized: each
  ``LockedWorkflow(`` of the block is one state machine of the template;
- ``<!-- run: lock-client -->``: a ``LockClient`` block, run against an offline DynamoDB;
- ``<!-- run: cli -->``: ``locked-workflow`` command lines, each run in-process against an
  offline lock table holding the lock they name.

A block without a marker fails :func:`test_every_block_of_the_guides_says_how_it_is_run`. The
design pages (the protocol, the safety model, ...) show definitions, not code to copy.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The pages that explain the design: their blocks are state definitions and records to read.
DESIGN = {"protocol.md", "safety.md", "shared-lock.md", "runtime.md", "benchmarks.md"}
GUIDES = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in DESIGN)
#: A marker line, then a fenced block.
BLOCK = re.compile(r"^(?:<!-- (file|run): ([^>]+?) -->\n)?```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def blocks(kind: str | None = None, how: str | None = None) -> list[tuple[str, str]]:
    """(page:line, code) of the guides' blocks, those marked ``<!-- kind: how -->`` if given."""
    found = []
    for page in GUIDES:
        text = page.read_text()
        for match in BLOCK.finditer(text):
            if kind is None or (match[1], match[2]) == (kind, how):
                found.append((f"{page.name}:{text[:match.start()].count(chr(10)) + 1}", match[4]))
    return found


def test_every_block_of_the_guides_says_how_it_is_run():
    unmarked, count = [], 0
    for page in GUIDES:
        text = page.read_text()
        for match in BLOCK.finditer(text):
            count += 1
            if match[1] is None:
                unmarked.append(f"{page.name}:{text[:match.start()].count(chr(10)) + 1}")
    assert count >= 9  # the control: the blocks are found
    assert unmarked == [], f"blocks with no <!-- file: --> or <!-- run: --> marker: {unmarked}"
    runs = {how for page in GUIDES for kind, how in re.findall(r"^<!-- (file|run): ([^>]+?) -->$", page.read_text(), re.M)
            if kind == "run"}
    assert runs == {"stack", "lock-client", "cli"}, "a marker no test below runs"


# -- run: stack ------------------------------------------------------------------------------

STACK_NAMES = """
from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb, aws_lambda as lambda_
from aws_cdk import aws_stepfunctions as sfn
from locked_workflow import Lock, LockedWorkflow, LockTable, WaitPolicy

customers = dynamodb.TableV2(self, "Customers", removal_policy=RemovalPolicy.DESTROY,
                             partition_key=dynamodb.Attribute(name="id", type=dynamodb.AttributeType.STRING))
locks = LockTable(self, "SharedLocks")
apply_update, call_partner, transfer, ship, render_statement, apply_payment = (
    sfn.Pass.jsonata(self, name) for name in
    ("ApplyUpdateWork", "CallPartnerWork", "TransferWork", "ShipWork", "RenderStatement", "ApplyPaymentWork"))
"""


@pytest.mark.parametrize("where, code", blocks("run", "stack"), ids=[w for w, _ in blocks("run", "stack")])
def test_the_stack_block_synthesizes(where, code, tmp_path):
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    for asset in re.findall(r'Code\.from_asset\("([^"]+)"\)', code):  # jsii resolves it from its own cwd
        (tmp_path / asset).mkdir(parents=True)
        (tmp_path / asset / "index.py").write_text("def handler(event, context):\n    return event\n")
        code = code.replace(f'"{asset}"', repr(str(tmp_path / asset)))
    app = cdk.App(outdir=str(tmp_path / "cdk.out"))
    stack = cdk.Stack(app, "Guide")
    exec(compile(STACK_NAMES, "<names>", "exec") , names := {"self": stack})
    exec(compile(code, where, "exec"), names)
    template = Template.from_stack(stack)
    machines = template.find_resources("AWS::StepFunctions::StateMachine")
    assert len(machines) == code.count("LockedWorkflow("), where
    if "LockClientLayer(" in code:
        template.resource_count_is("AWS::Lambda::LayerVersion", 1)


# -- run: lock-client ------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["moto", "dynamodb-local"])
def local_cloud(request):
    from deployed import backend_cloud

    yield from backend_cloud(request.param)


@pytest.fixture
def lock_table(local_cloud):
    from deployed import create_lock_table

    return create_lock_table(local_cloud, "Locks")


@pytest.mark.parametrize("where, code", blocks("run", "lock-client"), ids=[w for w, _ in blocks("run", "lock-client")])
def test_the_lock_client_block_runs(where, code, local_cloud, lock_table, monkeypatch):
    import boto3

    from locked_workflow.constructs_lib import lock_client

    # the block's LockClient(table_name, ...) calls boto3.client("dynamodb") on first use: the offline one
    monkeypatch.setattr(boto3, "client", lambda service, *args, **kwargs: local_cloud.dynamodb)
    written = []
    names = {"LockClient": lock_client.LockClient, "table_name": lock_table, "batches": ["a", "b"],
             "write_customer": lambda batch, fence: written.append((batch, fence))}
    exec(compile(code, where, "exec"), names)
    assert written == [("a", 1), ("b", 1)]  # each batch written under the lock, with its fence
    item = local_cloud.dynamodb.get_item(TableName=lock_table, Key={"pk": {"S": "customer#123"}})["Item"]
    assert "owner" not in item and item["fence"] == {"N": "1"}  # released


# -- run: cli --------------------------------------------------------------------------------


@pytest.mark.parametrize("where, code", blocks("run", "cli"), ids=[w for w, _ in blocks("run", "cli")])
def test_the_cli_block_runs(where, code, local_cloud, lock_table, capsys):
    """Each line in turn against a lock held by a client: list and show it (exit 0), a release
    without --force frees nothing (exit 2), a forced one frees it (exit 0)."""
    from locked_workflow.constructs_lib import cli
    from locked_workflow.constructs_lib.lock_client import LockClient

    LockClient(lock_table, namespace="customer", dynamodb=local_cloud.dynamodb).acquire("42", lease=600)
    clients = {"dynamodb": local_cloud.dynamodb, "stepfunctions": local_cloud.stepfunctions}
    codes, outputs = [], []
    for line in code.splitlines():
        argv = shlex.split(line, comments=True)
        assert argv[0] == "locked-workflow", line
        codes.append(cli.main(argv[1:], clients=clients))
        outputs.append(capsys.readouterr().out)
    assert codes == [0, 0, 2, 0], outputs
    assert "42" in outputs[0] and "42" in outputs[1]
    item = local_cloud.dynamodb.get_item(TableName=lock_table, Key={"pk": {"S": "customer#42"}})["Item"]
    assert "owner" not in item  # the forced release freed it
