"""Synthesize every stack the tests and the example app build, and keep their templates.

A refactoring that must not change what the constructs render is proven by two runs, one
before and one after::

    python -m tools.snapshot_templates build/templates-before
    ... change the code ...
    python -m tools.snapshot_templates --check build/templates-before

Each template is written as sorted, indented JSON (``<name>.template.json``); ``--check DIR``
synthesizes again and compares byte by byte, listing every template that differs (exit 1).

One part of a template follows the package's code rather than the constructs: the hash of a
Lambda asset bundled *from the package's own modules* (the janitor's code, the lock client's
layer: ``constructs_lib/assets.bundled_code``), which changes whenever one of those modules'
text does, even when no rendered state changes. Such an asset's hash is written as
``BUNDLE<n>`` (numbered in template order) and the files it holds are listed in
``<name>.bundles.json``; ``--check`` prints the files a bundle gained or lost (a module split
in two adds files) without failing on them. Every other asset hash (the ``lambdas/`` folders,
the layers) is kept as synthesized and compared with the rest of the template.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]


def _stacks() -> dict[str, Callable[[Any], Any]]:
    """Name -> a function of the app that builds that stack."""
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "lock")]  # the test stacks
    import aws_cdk as cdk
    from cdk_nag import AwsSolutionsChecks

    from behaviour_stack import BehaviourStack
    from conftest import _chain_stack
    from fair_stack import FairStack
    from locked_workflow.constructs_lib.example_stack import CustomerUpdatesStack
    from locked_workflow.constructs_lib.nag import suppress_example_findings
    from monitoring_stack import KindsStack
    from outputs_stack import OutputsStack
    from record_stack import RecordStack
    from safety_stack import SafetyStack
    from shared_stack import SharedStack
    from tools import stress
    from tools.matrix.stack import build_stack as matrix_stack
    from variants_stack import VariantsStack

    def example(app: Any) -> Any:  # as app.py composes it
        stack = CustomerUpdatesStack(app, "CustomerUpdates")
        suppress_example_findings(stack)
        cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
        return stack

    return {
        "example": example,
        "shapes": _chain_stack,
        "behaviour": lambda app: BehaviourStack(app, "Behaviour"),
        "fair": lambda app: FairStack(app, "Fair"),
        "monitoring": lambda app: KindsStack(app, "Monitoring"),
        "outputs": lambda app: OutputsStack(app, "Outputs"),
        "record": lambda app: RecordStack(app, "Record"),
        "safety": lambda app: SafetyStack(app, "Safety"),
        "shared": lambda app: SharedStack(app, "Shared"),
        "variants": lambda app: VariantsStack(app, "Variants"),
        "matrix": lambda app: matrix_stack(app, "Matrix"),
        "stress": lambda app: stress.build_stack(app, "Stress"),
    }


def _package_bundles(assembly: Path) -> dict[str, list[str]]:
    """Asset hash -> the files of each staged asset that carries the package's own modules."""
    found = {}
    for folder in sorted(assembly.glob("asset.*")):
        if folder.is_dir() and (folder / "locked_workflow").is_dir():
            found[folder.name.removeprefix("asset.")] = sorted(
                str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()
            )
    return found


def synthesize(name: str, build: Callable[[Any], Any]) -> tuple[str, str]:
    """``(template, bundles)`` of one stack, as the JSON text written for it."""
    from locked_workflow.testing.synth import synth_app

    outdir = Path(tempfile.mkdtemp(prefix=f"snapshot-{name}-"))
    try:
        synthesized = synth_app(build, outdir=outdir, context={"aws:cdk:enable-asset-metadata": True})
        text = json.dumps(synthesized.template, indent=1, sort_keys=True)
        bundles = _package_bundles(synthesized.assets_dir)
    finally:
        shutil.rmtree(outdir, ignore_errors=True)
    listed = {}
    for n, (asset_hash, files) in enumerate(sorted(bundles.items(), key=lambda kv: text.find(kv[0]))):
        text = text.replace(asset_hash, f"BUNDLE{n}")
        listed[f"BUNDLE{n}"] = files
    unmasked = set(re.findall(r"[0-9a-f]{64}", text)) & set(bundles)
    assert not unmasked, unmasked
    return text + "\n", json.dumps(listed, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", nargs="?", help="write the templates here")
    parser.add_argument("--check", metavar="DIR", help="compare with the templates written to DIR")
    parser.add_argument("--only", nargs="*", help="these stacks only (names: see the module)")
    args = parser.parse_args(argv)
    if bool(args.directory) == bool(args.check):
        parser.error("give a directory to write, or --check DIR")
    from tools.node import use_project_node

    use_project_node()
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    stacks = _stacks()
    names = args.only or list(stacks)
    target = Path(args.directory or args.check)
    if args.directory:
        target.mkdir(parents=True, exist_ok=True)
    differ, compared = [], 0
    for name in names:
        template, bundles = synthesize(name, stacks[name])
        path = target / f"{name}.template.json"
        listing = target / f"{name}.bundles.json"
        if args.directory:
            path.write_text(template, encoding="utf-8")
            listing.write_text(bundles, encoding="utf-8")
            print(f"{name}: written", flush=True)
            continue
        same = path.is_file() and path.read_text(encoding="utf-8") == template
        compared += 1
        differ += [] if same else [path.name]
        print(f"{name}: {'byte-identical' if same else 'DIFFERS'}", flush=True)
        before = json.loads(listing.read_text(encoding="utf-8")) if listing.is_file() else {}
        for bundle, files in json.loads(bundles).items():
            added, lost = sorted(set(files) - set(before.get(bundle, []))), sorted(set(before.get(bundle, [])) - set(files))
            if added or lost:
                print(f"  {bundle} (package code): files added {added}, gone {lost}")
    if args.check:
        if differ:
            print(f"{len(differ)} of {compared} templates differ from {target}: {', '.join(differ)}")
            return 1
        print(f"{compared} templates byte-identical to {target} (package bundles' hashes masked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
