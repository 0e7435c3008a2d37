"""Lambda assets hash the code only: two copies of the package - one as pip leaves it after
compiling (``__pycache__/*.pyc``, and a stray ``*.pyc``), one without - give every Lambda asset
of the library the same hash, so a deploy from another install does not redeploy the functions."""

from __future__ import annotations

import compileall
import os
import shutil
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_lambda as lambda_

from locked_workflow.constructs_lib import janitor
from locked_workflow.constructs_lib.assets import copy_files, lambda_code

ROOT = Path(__file__).resolve().parents[2]
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
        name: root / (name if name == "locked_workflow/__init__.py" else name.removeprefix("locked_workflow/"))
        for name in janitor.bundled_modules()
    }
    assert all(source.exists() for source in sources.values()), sources
    monkeypatch.setattr(janitor, "bundled_modules", lambda: sources)
    monkeypatch.setattr(janitor, "JANITOR_CODE", root / "lambdas" / "lock_janitor")


def test_the_janitors_bundle_gives_the_same_asset_hash(copies, monkeypatch, tmp_path):
    hashes = []
    for root in copies:
        _bundle_from(monkeypatch, root)
        hashes.append(_hash(janitor.janitor_code()))
    assert hashes[0] == hashes[1]
    # negative control: the hash is the code's - one changed line of a bundled module changes it
    changed = tmp_path / "changed"
    shutil.copytree(copies[1], changed)
    with (changed / "state_machines" / "lock_protocol.py").open("a", encoding="utf-8") as source:
        source.write("# changed\n")
    _bundle_from(monkeypatch, changed)
    assert _hash(janitor.janitor_code()) != hashes[1]


def test_the_janitors_bundle_carries_every_module_its_handler_imports(tmp_path):
    """Imported in a fresh interpreter that sees the bundle and the installed packages alone
    (not this checkout), the handler's modules all come from the bundle - as on AWS, where
    the function sees its asset only."""
    out = tmp_path / "bundle"
    out.mkdir()
    copy_files(janitor.janitor_files(), out)
    for needed in ("constructs_lib/lock_client.py", "constructs_lib/client_lease.py",
                   "constructs_lib/shared_client.py", "state_machines/lock_protocol.py"):
        assert (out / "locked_workflow" / needed).is_file(), needed
    script = (
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
        "sys.path[:] = [p for p in sys.path if 'editable' not in p]\n"
        f"sys.path.insert(0, {str(out)!r})\n"
        "import index\n"
        "outside = sorted(n for n, m in sys.modules.items() if n.split('.')[0] == 'locked_workflow'\n"
        f"                 and not (getattr(m, '__file__', None) or '').startswith({str(out)!r}))\n"
        "print(outside)\n"
    )
    env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1", "PYTHONPATH": ""}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
    # negative control: without one module the lock client imports, the import fails
    (out / "locked_workflow" / "constructs_lib" / "shared_client.py").unlink()
    broken = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert broken.returncode != 0 and "shared_client" in broken.stderr
