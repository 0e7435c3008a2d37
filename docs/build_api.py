"""Build the API reference with pdoc (``make docs``), failing on any pdoc warning.

    python docs/build_api.py [--output build/api]

pdoc has no switch that turns its warnings (a module that does not import, a name in
``__all__`` that does not resolve, a docstring or annotation it cannot read) into a failure,
so this script records them and exits 1 when there is one.

``locked_workflow`` imports its public API lazily (a module ``__getattr__``, so that a Lambda
using ``LockClient`` needs no aws-cdk-lib); pdoc reads a module's namespace, so the names are
resolved here first and the package page documents what ``from locked_workflow import ...``
gives.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: What the reference covers: the public constructs and their package, the client and the
#: lock kinds, the offline runtime a user's tests use, and the protocol modules.
MODULES = [
    "locked_workflow",
    "locked_workflow.constructs_lib.locked_workflow",
    "locked_workflow.constructs_lib.locked_section",
    "locked_workflow.constructs_lib.lock",
    "locked_workflow.constructs_lib.lock_table",
    "locked_workflow.constructs_lib.lock_client",
    "locked_workflow.constructs_lib.lock_kinds",
    "locked_workflow.constructs_lib.fair_mutex",
    "locked_workflow.constructs_lib.janitor",
    "locked_workflow.constructs_lib.monitoring",
    "locked_workflow.constructs_lib.cli",
    "locked_workflow.testing",
    "locked_workflow.testing.cloud",
    "locked_workflow.testing.deployer",
    "locked_workflow.testing.events",
    "locked_workflow.testing.synth",
    "locked_workflow.testing.pytest_plugin",
    "locked_workflow.testing.faults",
    "locked_workflow.testing.log_filters",
    "locked_workflow.state_machines",  # and its protocol modules (pdoc walks a package without __all__)
]


def _resolve_lazy_exports(package_name: str) -> None:
    package = importlib.import_module(package_name)
    for name in getattr(package, "__all__", ()):
        setattr(package, name, getattr(package, name))


def build(output: Path) -> list[str]:
    """Render :data:`MODULES` into ``output``; return pdoc's warnings."""
    sys.path.insert(0, str(ROOT))
    from tools.node import use_project_node

    use_project_node()  # before aws_cdk starts jsii
    import pdoc
    import pdoc.render

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _resolve_lazy_exports("locked_workflow")
        _resolve_lazy_exports("locked_workflow.testing")
        pdoc.render.configure(docformat="restructuredtext", show_source=True, search=True)
        pdoc.pdoc(*MODULES, output_directory=output)
    pdoc_dir = str(Path(pdoc.__file__).resolve().parent)
    return [
        f"{w.category.__name__}: {w.message}"
        for w in caught
        if str(Path(w.filename).resolve()).startswith(pdoc_dir)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "build" / "api")
    args = parser.parse_args(argv)
    problems = build(args.output)
    pages = sorted(args.output.rglob("*.html"))
    if problems:
        print(f"pdoc: {len(problems)} warning(s), the reference is not clean:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    print(f"API reference: {len(pages)} pages in {args.output} (open {args.output / 'index.html'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
