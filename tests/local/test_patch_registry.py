"""The runtime patches each moto attribute once, by one module, and only through ``seams``.

Three checks of ``locked_workflow/testing/seams.py``'s rule (its docstring):

* the runtime as ``LocalCloud`` applies it patches every ``(owner, attribute)`` once; the moto
  methods several gaps wrap (``seams.CHAINS``) get one wrapper calling every contribution in the
  declared order;
* nothing is patched around the registry: every moto (botocore, runtime) attribute that differs
  from bare moto's once the runtime is applied is one the registry recorded, and no runtime
  module calls ``unittest.mock`` or ``setattr`` on an imported name (read with ``ast``);
* negative controls: a second patch of an attribute is reported, an attribute changed behind
  the registry's back is found, a module calling ``mock.patch.object`` is found.
"""

from __future__ import annotations

import ast
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from moto.stepfunctions.parser.asl.eval.event.event_manager import EventManager

from locked_workflow.testing import LocalCloud, backend, patches, seams
from locked_workflow.testing.events import EventRouter
from locked_workflow.testing.lambda_runtime import FunctionRegistry

TESTING = Path(seams.__file__).resolve().parent
#: Modules of the runtime that may touch other libraries without the registry, and why.
OUTSIDE = {
    "seams.py": "the registry itself",
    "faults.py": "a test's own fault contexts (dynamodb_faults), entered over the runtime, not part of it",
}
#: ``setattr`` on an imported name the registry does not cover, and why.
SETATTR_ALLOWED = {
    ("function_logs.py", "sys"): "routes sys.stdout/stderr per thread, installed on first use and kept",
}
#: The libraries whose attributes the runtime may patch.
PREFIXES = ("moto.", "botocore.", "locked_workflow.testing", "warnings", "os")


def _apply_runtime(stack: ExitStack) -> None:
    """What ``LocalCloud.__enter__`` applies, without a cloud's environment."""
    patches.apply_all(stack, functions=FunctionRegistry(), router=EventRouter())
    patches.redrive.use_options(stack, patches.redrive.RedriveOptions())


def _snapshot() -> dict[tuple[int, str], tuple[str, Any]]:
    """Every attribute of the loaded moto (and co.) modules and of their classes, by identity."""
    state: dict[tuple[int, str], tuple[str, Any]] = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name.startswith(PREFIXES) or name in PREFIXES):
            continue
        for key, value in list(vars(module).items()):
            state[(id(module), key)] = (f"{name}.{key}", value)
            if isinstance(value, type) and value.__module__ == name:
                for attribute, member in list(vars(value).items()):
                    state[(id(value), attribute)] = (f"{name}.{value.__qualname__}.{attribute}", member)
    return state


def _changed(before: dict, after: dict) -> dict[tuple[int, str], str]:
    keys = (before.keys() | after.keys()) - {k for k in before.keys() & after.keys() if before[k][1] is after[k][1]}
    return {key: (after.get(key) or before[key])[0] for key in keys}


def _outside_registry() -> dict[tuple[int, str], str]:
    """What applying the runtime changes that the registry did not record (or not last)."""
    from moto import mock_aws

    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        with ExitStack() as warm_up:  # lazy imports happen here, not between the snapshots
            _apply_runtime(warm_up)
        before = _snapshot()
        with ExitStack() as stack:
            _apply_runtime(stack)
            after = _snapshot()
            recorded = {p.key: p.replacement for p in seams.active()}  # the last one in force
        changed = _changed(before, after)
    return {key: label for key, label in changed.items()
            if key not in recorded or after.get(key, (None, None))[1] is not recorded[key]}


def _calls_around_registry(path: Path) -> list[str]:
    """``mock.patch*`` uses, and ``setattr`` on an imported name, in one module's source."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {alias.asname or alias.name.split(".")[0]
                for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in node.names}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module == "unittest.mock" or (
                node.module == "unittest" and any(alias.name == "mock" for alias in node.names))):
            found.append((node.lineno, "imports unittest.mock"))
        if isinstance(node, ast.Import) and any(alias.name == "unittest.mock" for alias in node.names):
            found.append((node.lineno, "imports unittest.mock"))
        if isinstance(node, ast.Attribute) and node.attr == "patch" and isinstance(node.value, ast.Name) \
                and node.value.id == "mock":
            found.append((node.lineno, "mock.patch"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in imported \
                and (path.name, node.args[0].id) not in SETATTR_ALLOWED:
            found.append((node.lineno, f"setattr({node.args[0].id}, ...)"))
    return [f"{path.name}:{line}: {what}" for line, what in sorted(found)]


def _runtime_sources() -> list[Path]:
    return sorted(p for p in TESTING.rglob("*.py") if p.name not in OUTSIDE or p.parent != TESTING)


def test_the_runtime_patches_each_attribute_once():
    with LocalCloud():
        applied = seams.active()
        shared = seams.shared()
    assert len(applied) > 50  # the runtime is applied, and the registry saw it
    assert shared == {}
    assert seams.active() == []  # closing the cloud took every patch off


def test_the_backend_is_a_subclass_of_motos_installed_through_get_backend():
    from moto.stepfunctions import responses
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    with LocalCloud() as cloud:
        used = responses.get_backend(cloud.account_id, cloud.region)  # what moto's API answers from
        overridden = backend.overrides()
        patched_get_backend = [p.by for p in seams.active() if p.name == "get_backend"]
    assert type(used).__mro__[1] is StepFunctionsParserBackend
    assert overridden == {
        "_get_executions": ["patches.cancelled_branches"],
        "send_task_failure": ["patches.cancelled_branches"],
        "send_task_heartbeat": ["patches.cancelled_branches"],
        "send_task_success": ["patches.cancelled_branches"],
        "start_execution": ["patches.unique_execution_names"],
    }
    assert patched_get_backend == ["backend"]
    assert backend.overrides() == {}


def test_each_chain_calls_every_contribution_in_its_declared_order():
    with LocalCloud():
        found = {label.rsplit(".", 2)[-2] + "." + label.rsplit(".", 1)[-1]: modules
                 for label, modules in seams.chains().items()}
    assert found == {key: list(order) for key, order in seams.CHAINS.items()}
    assert seams.chains() == {}


def test_nothing_is_patched_around_the_registry():
    assert _outside_registry() == {}
    found = [problem for path in _runtime_sources() for problem in _calls_around_registry(path)]
    assert found == []


def test_a_second_patch_of_an_attribute_is_reported():
    """Negative control: two modules patching ``EventManager.add_event`` are found."""
    with ExitStack() as stack:
        seams.patch_attribute(stack, EventManager, "add_event", lambda *a, **k: -1, by="patches.one")
        seams.patch_attribute(stack, EventManager, "add_event", lambda *a, **k: -1, by="patches.two")
        found = seams.shared()
    assert found == {f"{EventManager.__module__}.EventManager.add_event": ["patches.one", "patches.two"]}
    assert seams.shared() == {}


def test_a_patch_behind_the_registrys_back_is_found(tmp_path, monkeypatch):
    """Negative control: an attribute changed without the registry, and a module that would."""
    original = patches.apply_all

    def apply_all(stack: ExitStack, **kwargs: Any) -> None:
        original(stack, **kwargs)
        stack.enter_context(_unrecorded(EventManager, "add_event"))

    monkeypatch.setattr(patches, "apply_all", apply_all)
    outside = _outside_registry()
    assert list(outside.values()) == [f"{EventManager.__module__}.EventManager.add_event"]

    rogue = tmp_path / "rogue.py"
    rogue.write_text("import sys\nfrom unittest import mock\n\n"
                     "def apply(stack):\n    stack.enter_context(mock.patch.object(sys, 'argv', []))\n"
                     "    setattr(sys, 'path', [])\n")
    assert _calls_around_registry(rogue) == [
        "rogue.py:2: imports unittest.mock", "rogue.py:5: mock.patch", "rogue.py:6: setattr(sys, ...)",
    ]


def _unrecorded(owner: Any, name: str) -> Any:
    from unittest import mock  # the negative control's own patch, not the runtime's

    return mock.patch.object(owner, name, lambda *a, **k: -1)


class Machine:
    """A stand-in for a moto class whose method two gaps wrap."""

    def run(self) -> list[str]:
        return ["moto"]


def _adding(tag: str) -> Any:
    return lambda original: lambda self: [tag, *original(self)]


def test_a_chain_calls_its_contributions_in_the_declared_order_whatever_order_they_come_in(monkeypatch):
    monkeypatch.setitem(seams.CHAINS, "Machine.run", ("patches.outer", "patches.inner"))
    with ExitStack() as stack:
        seams.wrap(stack, Machine, "run", _adding("outer"), by="patches.outer")
        with ExitStack() as inner:
            seams.wrap(inner, Machine, "run", _adding("inner"), by="patches.inner")  # applied last
            assert Machine().run() == ["outer", "inner", "moto"]
            assert seams.shared() == {}
        assert Machine().run() == ["outer", "moto"]  # the inner one's stack closed
        with pytest.raises(ValueError, match="`by` must be one of"):
            seams.wrap(stack, Machine, "run", _adding("stray"), by="patches.stray")
        with pytest.raises(ValueError, match="already contributes"):
            seams.wrap(stack, Machine, "run", _adding("outer"), by="patches.outer")
    assert Machine().run() == ["moto"] and "run" in vars(Machine) and seams.active() == []


def test_without_a_declared_chain_two_wrappers_are_reported():
    """Negative control: the same two contributions, undeclared, are two patches of one attribute."""
    with ExitStack() as stack:
        seams.wrap(stack, Machine, "run", _adding("outer"), by="patches.outer")
        seams.wrap(stack, Machine, "run", _adding("inner"), by="patches.inner")
        assert Machine().run() == ["inner", "outer", "moto"]  # the order they were applied in
        assert seams.shared() == {f"{__name__}.Machine.run": ["patches.outer", "patches.inner"]}
