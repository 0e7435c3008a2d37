"""Lambda assets hash the code only: two copies of the package - one as pip leaves it after
compiling (``__pycache__/*.pyc``, and a stray ``*.pyc``), one without - give every Lambda asset
of the library the same hash, so a deploy from another install does not redeploy the functions."""

from __future__ import annotations

import compileall
import shutil
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_lambda as lambda_

from locked_workflow.constructs_lib import janitor
from locked_workflow.constructs_lib.assets import lambda_code

ROOT = Path(__file__).resolve().parents[1]
#: The folders the library deploys with ``Code.from_asset`` (the janitor: bundled, below).
FOLDERS = ("lambdas/lock_metrics", "lambdas/apply_customer_update", "lambdas/probe")


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> tuple[Path, Path]:
    """(compiled, clean): two copies of the package's code."""
    made = []
    for name in ("compiled", "clean"):
        root = tmp_path_factory.mktemp(name)
        for folder in ("lambdas", "state_machines", "constructs_lib", "locked_workflow"):
            shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        made.append(root)
    compiled, clean = made
    assert compileall.compile_dir(str(compiled), quiet=1)
    for folder in ("lambdas/lock_metrics", "state_machines"):
        (compiled / folder / "stray.pyc").write_bytes(b"\x00compiled")
    assert list((compiled / "lambdas" / "lock_metrics").glob("__pycache__/*.pyc"))  # the control: compiled
    assert not list(clean.rglob("*.pyc"))
    return compiled, clean


def _hash(code: lambda_.Code) -> str:
    stack = cdk.Stack(cdk.App())
    return code.bind(stack).s3_location.object_key


@pytest.mark.parametrize("folder", FOLDERS)
def test_a_compiled_copy_gives_the_same_asset_hash(copies, folder):
    compiled, clean = copies
    assert _hash(lambda_code(compiled / folder)) == _hash(lambda_code(clean / folder))
    # negative control: without the exclusions the compiled files change the hash
    assert _hash(lambda_.Code.from_asset(str(compiled / folder))) != _hash(lambda_.Code.from_asset(str(clean / folder)))


def _bundle_from(monkeypatch, root: Path) -> None:
    """The janitor's bundle taken from the copy ``root`` (its folders as in a checkout)."""
    sources = {
        name: root / {"locked_workflow/state_machines": "state_machines",
                      "locked_workflow/constructs_lib/__init__.py": "constructs_lib/__init__.py",
                      "locked_workflow/constructs_lib/lock_client.py": "constructs_lib/lock_client.py"}.get(name, name)
        for name in janitor.bundled_modules()
    }
    assert all(source.exists() for source in sources.values()), sources
    monkeypatch.setattr(janitor, "bundled_modules", lambda: sources)
    monkeypatch.setattr(janitor, "JANITOR_CODE", root / "lambdas" / "lock_janitor")


def test_the_janitors_bundle_gives_the_same_asset_hash(copies, monkeypatch):
    hashes = []
    for root in copies:
        _bundle_from(monkeypatch, root)
        hashes.append(_hash(janitor.janitor_code()))
    assert hashes[0] == hashes[1]
    # negative control: a bundle that leaves only __pycache__ out (and a hash of the bundle that
    # excludes nothing more) takes the stray .pyc in
    from locked_workflow.constructs_lib import assets

    monkeypatch.setattr(janitor, "ASSET_EXCLUDES", ("__pycache__",))
    monkeypatch.setattr(assets, "ASSET_EXCLUDES", ("__pycache__",))
    cdk.AssetStaging.clear_asset_hash_cache()  # staged once per source and options in a process
    _bundle_from(monkeypatch, copies[0])
    assert _hash(janitor.janitor_code()) != hashes[1]
