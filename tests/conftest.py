"""What every folder of the suite shares: the project's Node for jsii, the synth cache, the groups
of files and the order they run in, the closing of a group's kept deployment, and the synthesized example and shapes stacks (each synth here runs once per
test session: a synth costs seconds).

The suite's folders follow the code's layers, each with a conftest of what its tests need:
``protocol/`` (the protocol pieces and the executable models), ``constructs/`` (what the
constructs synthesize), ``lock/`` (the lock deployed on the LocalCloud), ``client/`` (the
``LockClient`` and the CLI), ``lambdas/`` (the example function), ``tools/`` (bench, stress,
matrix, docs, packaging) and ``local/`` (the runtime itself). ``deployed.py`` (the
deployed-stack fixtures), ``kept_deployment.py`` (the deployment a group's files share),
``synth_cache.py`` and ``template_iam.py`` serve more than one.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import pytest

from file_groups import group_of, run_order
from kept_deployment import KEPT
from tools.node import use_project_node  # noqa: E402

use_project_node()  # before aws_cdk starts jsii
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

import aws_cdk as cdk  # noqa: E402
from aws_cdk import assertions  # noqa: E402
from aws_cdk import aws_stepfunctions as sfn  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402

from locked_workflow import Lock, LockedSection, LockedWorkflow, LockTable  # noqa: E402
from locked_workflow.constructs_lib.example_stack import CustomerUpdatesStack  # noqa: E402
from locked_workflow.constructs_lib.nag import suppress_example_findings  # noqa: E402
from locked_workflow.state_machines.lock_protocol import jsonata  # noqa: E402


@pytest.hookimpl(trylast=True)  # after pytest's own order (by fixture parameters) and the deselections
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items[:] = run_order(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadgroup``: each group of files (``file_groups``) to one worker, whole."""
    if config.getvalue("dist") == "loadgroup":
        from file_groups import FileGroupScheduling

        return FileGroupScheduling(config, log)
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """The group's kept deployment is closed after its last item (``kept_deployment``)."""
    try:
        return (yield)
    finally:
        if nextitem is None or group_of(nextitem.path.name) != group_of(item.path.name):
            KEPT.release()


def pytest_sessionfinish() -> None:
    KEPT.release()  # (a session stopped early: -x, a keyboard interrupt)


def pytest_configure(config: pytest.Config) -> None:
    """Every process of the run (each xdist worker too) shares the synthesized test stacks and
    the parsed programs of their definitions through pytest's cache folder (``synth_cache``,
    ``patches/parsed_definitions``); ``-p no:cacheprovider`` leaves each process on its own."""
    if getattr(config, "cache", None) is None:
        return
    from locked_workflow.testing.patches.parsed_definitions import PROGRAMS
    from synth_cache import CACHE_DIR_ENV, prune

    synth_dir, programs_dir = config.cache.mkdir("synth"), config.cache.mkdir("programs")
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist) prunes
        prune(synth_dir, programs_dir)
    os.environ[CACHE_DIR_ENV] = str(synth_dir)
    PROGRAMS.keep_in(programs_dir)


@pytest.fixture
def offline_aws_env(monkeypatch):
    """Fake credentials and no endpoint overrides: boto3 talks to moto's mocks only."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL_DYNAMODB", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


@dataclass
class Synthesized:
    template: dict[str, Any]
    messages: list[Any]

    @property
    def assertions(self) -> assertions.Template:
        return assertions.Template.from_json(self.template)

    def resources(self, type_name: str) -> dict[str, dict]:
        return {k: v for k, v in self.template["Resources"].items() if v["Type"] == type_name}

    def definition(self, logical_id_prefix: str = "") -> dict:
        """The state machine definition with table/function references replaced by their logical ids."""
        machines = {
            k: v
            for k, v in self.resources("AWS::StepFunctions::StateMachine").items()
            if k.startswith(logical_id_prefix)
        }
        assert len(machines) == 1, f"expected one state machine, got {list(machines)}"
        (machine,) = machines.values()
        parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
        text = "".join(p if isinstance(p, str) else _ref_name(p) for p in parts)
        return json.loads(text)


def _ref_name(token: dict) -> str:
    if "Ref" in token:
        return f"REF:{token['Ref']}"
    if "Fn::GetAtt" in token:
        return "ATT:" + ".".join(token["Fn::GetAtt"])
    return "TOKEN"


@pytest.fixture(scope="session")
def example() -> Synthesized:
    """The example app exactly as app.py composes it, with the cdk-nag AwsSolutions pack."""
    app = cdk.App()
    stack = CustomerUpdatesStack(app, "CustomerUpdates")
    suppress_example_findings(stack)
    cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    artifact = app.synth().get_stack_by_name("CustomerUpdates")
    return Synthesized(template=artifact.template, messages=list(artifact.messages))


def _chain_stack(app: cdk.App) -> cdk.Stack:
    """A LockedWorkflow around a two-state chain, an existing table, and a fragment stack."""
    stack = cdk.Stack(app, "Shapes")
    first = sfn.Pass.jsonata(stack, "Prepare", outputs=jsonata("{'fence': $lock.fence}"))
    second = sfn.Pass.jsonata(stack, "Finish")
    LockedWorkflow(
        stack,
        "Chain",
        lock=Lock.mutex(jsonata("$states.input.id")), protected=first.next(second),
        max_wait=cdk.Duration.seconds(0),
        state_machine_type=sfn.StateMachineType.EXPRESS,
    )
    shared = LockTable(stack, "Shared")
    outer_work = sfn.Pass.jsonata(stack, "OuterWork")
    inner_work = sfn.Pass.jsonata(stack, "InnerWork")
    outer = LockedSection(
        stack, "Account", lock=Lock.mutex(jsonata("$states.input.account")), protected=outer_work,
        table=shared.table, lease=cdk.Duration.minutes(10), key_namespace="account",
    )
    inner = LockedSection(
        stack, "Order", lock=Lock.mutex(jsonata("$states.input.order")), protected=inner_work,
        table=shared.table, lease=cdk.Duration.minutes(10), key_namespace="order",
        lock_variable="orderLock",
    )
    sfn.StateMachine(
        stack, "TwoLocks",
        definition_body=sfn.DefinitionBody.from_chainable(outer.next(inner)),
        query_language=sfn.QueryLanguage.JSONATA,
    )
    return stack


@pytest.fixture(scope="session")
def shapes() -> Synthesized:
    app = cdk.App()
    stack = _chain_stack(app)
    artifact = app.synth().get_stack_by_name(stack.stack_name)
    return Synthesized(template=artifact.template, messages=list(artifact.messages))

