"""Synthesized test stacks shared between the processes of a test run (and the runs after it).

``make test`` runs four xdist workers; each used to synthesize the stacks its test files deploy
(the shared-lock stack: ~30 s of jsii on a quiet machine), so a stack two files deploy was
synthesized twice when the files ran on two workers. Here the first process to need a stack
synthesizes it into a folder of the cache and the others read that folder: the template and the
cloud assembly whose staged assets ``LocalCloud.deploy`` finds the Lambda code in.

Never stale: an entry is keyed by the *content* of everything a template is made from - every
file of the package sources, the Lambda code, the test helpers and tools (:data:`SOURCES`), the
versions of the CDK, jsii and Python packages (:data:`PACKAGES`), the Node jsii runs on, the CDK
environment variables - and by the stack (its function's module and name, its construct id, the
synth context). Editing any of them makes a new key; a fresh clone starts empty. Mtimes play
no part. A file lock per entry makes the first process synthesize while the others wait for it.

The folder is pytest's cache (``.pytest_cache/d/synth``; ``-p no:cacheprovider`` leaves each
process synthesizing its own); ``pytest --cache-clear`` empties it.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
#: What a test stack's template is made from, relative to the checkout (folders walked whole).
SOURCES = ("locked_workflow", "constructs_lib", "state_machines", "lambdas", "tests", "tools", "app.py",
           "cdk.json", "pyproject.toml", "package-lock.json")
#: The installed distributions whose versions a template depends on.
PACKAGES = ("aws-cdk-lib", "constructs", "jsii", "cdk-nag", "aws-cdk.asset-awscli-v1",
            "aws-cdk.asset-node-proxy-agent-v6", "aws-cdk.cloud-assembly-schema")
_SKIPPED_PARTS = frozenset({"__pycache__", ".pytest_cache"})
#: The environment variable naming the cache folder (set by conftest in every process of a run).
CACHE_DIR_ENV = "LOCKED_WORKFLOW_SYNTH_CACHE"


@functools.cache
def source_digest() -> str:
    """A digest of everything a test stack's template is made from (see the module docstring)."""
    digest = hashlib.sha256()
    for name in SOURCES:
        top = ROOT / name
        files = sorted(top.rglob("*")) if top.is_dir() else [top]
        for path in files:
            relative = path.relative_to(ROOT)
            if not path.is_file() or _SKIPPED_PARTS.intersection(relative.parts) or path.suffix == ".pyc":
                continue
            digest.update(str(relative).encode() + b"\0" + path.read_bytes() + b"\0")
    for package in PACKAGES:
        try:
            version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            version = "-"
        digest.update(f"{package}=={version}\0".encode())
    node = os.environ.get("JSII_NODE", "node")
    try:
        node_version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=60).stdout
    except OSError:
        node_version = "-"
    cdk_env = sorted((k, v) for k, v in os.environ.items() if k.startswith(("CDK_", "JSII_")) or k in ("AWS_REGION", "AWS_DEFAULT_REGION"))
    digest.update(json.dumps([sys.version, node, node_version, cdk_env]).encode())
    return digest.hexdigest()[:32]


def entry_key(stack: Callable[..., Any], name: str, context: dict[str, Any] | None) -> str:
    """The cache entry of ``stack(app, name)`` synthesized with ``context``, at today's sources."""
    what = json.dumps([stack.__module__, stack.__qualname__, name, context or {}], sort_keys=True)
    return f"{source_digest()}-{hashlib.sha256(what.encode()).hexdigest()[:16]}"


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes (or the process dies)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def synth_cached(stack: Callable[..., Any], name: str, *, context: dict[str, Any] | None = None):
    """``stack(app, name)`` synthesized (``locked_workflow.testing.synth.synth_app``), from the
    cache folder of :data:`CACHE_DIR_ENV` when another process synthesized it at today's sources,
    else synthesized and kept there; without that variable, synthesized here and not kept."""
    from locked_workflow.testing.synth import Synthesized, synth_app

    build = lambda app: stack(app, name)  # noqa: E731
    cache_dir = os.environ.get(CACHE_DIR_ENV)
    if not cache_dir:
        return synth_app(build, context=context)
    root = Path(cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    entry = root / entry_key(stack, name, context)
    with _locked(root / f"{entry.name}.lock"):
        if not (entry / "synthesized.json").is_file():
            staging = Path(tempfile.mkdtemp(prefix=f"{entry.name}.", dir=root))
            synthesized = synth_app(build, outdir=staging / "cdk.out", context=context)
            (staging / "synthesized.json").write_text(json.dumps(
                {"stack_name": synthesized.stack_name, "template": synthesized.template}))
            shutil.rmtree(entry, ignore_errors=True)
            staging.rename(entry)  # whole or absent: synthesized.json is in it before it is named
        os.utime(entry)  # in use: not pruned
    written = json.loads((entry / "synthesized.json").read_text())
    return Synthesized(written["stack_name"], written["template"], entry / "cdk.out")


#: Entries unused this long are deleted (a cache entry is touched each time it is read).
RETENTION_S = 7 * 24 * 3600


def prune(*folders: Path) -> None:
    """Delete the entries of ``folders`` (synthesized stacks, parsed programs) no process used
    for :data:`RETENTION_S`: the ones of sources edited since, which no key reaches again."""
    import time

    cutoff = time.time() - RETENTION_S
    for folder in folders:
        for path in Path(folder).iterdir():
            try:
                if path.stat().st_mtime < cutoff:
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
            except OSError:
                pass  # another run's entry, gone or in use: left to it
