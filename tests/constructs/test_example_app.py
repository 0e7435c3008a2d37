"""The example app as a whole: cdk-nag clean, cfn-lint clean, and `cdk synth` through the CLI."""

from __future__ import annotations

import json
import os

from tools.node import PROJECT_NODE
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_cdk_nag_aws_solutions_reports_no_unsuppressed_errors(example):
    errors = [m for m in example.messages if str(m.level).endswith("ERROR")]
    warnings = [m for m in example.messages if str(m.level).endswith("WARNING")]
    assert not errors, [f"{m.id}: {str(m.entry.data)[:200]}" for m in errors]
    assert not warnings, [f"{m.id}: {str(m.entry.data)[:200]}" for m in warnings]


def test_cdk_nag_would_catch_a_finding(tmp_path):
    """Negative control: without the example's suppressions the pack does report errors."""
    import aws_cdk as cdk
    from cdk_nag import AwsSolutionsChecks

    from locked_workflow.constructs_lib.example_stack import CustomerUpdatesStack

    app = cdk.App(outdir=str(tmp_path))
    CustomerUpdatesStack(app, "Unsuppressed")
    cdk.Aspects.of(app).add(AwsSolutionsChecks())
    messages = app.synth().get_stack_by_name("Unsuppressed").messages
    assert any(str(m.level).endswith("ERROR") for m in messages)


def _cfn_lint(template: dict) -> list:
    from cfnlint.api import lint

    return list(lint(json.dumps(template)))


def test_cfn_lint_reports_no_errors(example):
    matches = _cfn_lint(example.template)
    errors = [m for m in matches if m.rule.id.startswith("E")]
    assert not errors, [str(m) for m in errors]


def test_cfn_lint_would_catch_an_error(example):
    """Negative control: a broken reference is reported, so the clean result above means something."""
    broken = json.loads(json.dumps(example.template))
    table = next(v for v in broken["Resources"].values() if v["Type"] == "AWS::DynamoDB::Table")
    table["Properties"]["BillingMode"] = "FREE_FOREVER"
    matches = _cfn_lint(broken)
    assert any(m.rule.id.startswith("E") for m in matches)


def test_cdk_cli_synthesizes_the_example_app(tmp_path):
    cdk_bin = ROOT / "node_modules" / ".bin" / "cdk"
    if not cdk_bin.exists():
        if os.environ.get("CI") == "true":
            pytest.fail("node_modules/.bin/cdk is missing: `make test` installs it with npm")
        pytest.skip("the aws-cdk CLI is not installed (run `make test`)")
    out = tmp_path / "cdk.out"
    env = dict(os.environ, CDK_DISABLE_VERSION_CHECK="1")
    env["PATH"] = f"{PROJECT_NODE.parent}{os.pathsep}{env['PATH']}"  # the CDK CLI on the project's Node
    result = subprocess.run(
        [str(cdk_bin), "synth", "--quiet", "--no-notices", "--output", str(out),
         "--app", f"{sys.executable} app.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # the CLI and jsii ran on the project's Node LTS: no end-of-life banner
    assert "end-of-life" not in result.stdout + result.stderr, (result.stdout + result.stderr)[-2000:]
    template = json.loads((out / "CustomerUpdates.template.json").read_text())
    types = {r["Type"] for r in template["Resources"].values()}
    assert {"AWS::StepFunctions::StateMachine", "AWS::Events::Rule", "AWS::Lambda::Function"} <= types
    assert shutil.which("node") is not None


def test_jsii_runs_on_the_project_node_lts():
    """``make`` exports JSII_NODE; run directly, the suite picks the same Node (node.py)."""
    from tools.node import PROJECT_NODE

    if not PROJECT_NODE.exists():
        pytest.skip("node_modules is not installed (run `make test`)")
    assert os.environ.get("JSII_NODE") in (str(PROJECT_NODE), str(PROJECT_NODE.resolve()), os.path.join(
        str(ROOT), "node_modules", ".bin", "node"))
    version = subprocess.run([os.environ["JSII_NODE"], "--version"], capture_output=True, text=True).stdout
    assert int(version.lstrip("v").split(".")[0]) in (22, 24), version
