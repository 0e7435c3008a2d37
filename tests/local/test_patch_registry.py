"""The runtime patches each moto attribute once, by one module, and only through ``seams``.

Three checks of ``locked_workflow/testing/seams.py``'s rule (its docstring):

* the runtime as ``LocalCloud`` applies it patches every ``(owner, attribute)`` once - apart
  from the attributes still listed in :data:`SHARED_TODAY`, which the registry reports exactly;
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

from moto.stepfunctions.parser.asl.eval.event.event_manager import EventManager

from locked_workflow.testing import LocalCloud, patches, seams
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
#: Attributes patched by several modules today (label: modules in the order they apply); the
#: rebuild on moto's seams empties it (issue 27).
SHARED_TODAY: dict[str, list[str]] = {
    "moto.dynamodb.responses.DynamoHandler.put_item": ["patches.consumed_capacity", "patches.dynamodb_validation"],
    "moto.dynamodb.responses.DynamoHandler.update_item": ["patches.consumed_capacity", "patches.dynamodb_validation"],
    "moto.dynamodb.responses.DynamoHandler.delete_item": ["patches.consumed_capacity", "patches.dynamodb_validation"],
    "moto.dynamodb.responses.DynamoHandler.get_item": ["patches.consumed_capacity", "patches.dynamodb_validation"],
    "moto.dynamodb.responses.DynamoHandler.batch_write_item": ["patches.consumed_capacity", "patches.dynamodb_validation"],
    "moto.dynamodb.responses.DynamoHandler.batch_get_item": ["patches.consumed_capacity", "patches.dynamodb_validation"],
    "moto.dynamodb.responses.DynamoHandler.transact_write_items": ["patches.consumed_capacity", "patches.dynamodb_validation"],
    "moto.dynamodb.responses.DynamoHandler.transact_get_items": ["patches.consumed_capacity", "patches.dynamodb_validation"],
    "moto.dynamodb.responses.DynamoHandler.query": ["patches.consumed_capacity", "patches.dynamodb_validation"],
    "moto.dynamodb.responses.DynamoHandler.scan": ["patches.consumed_capacity", "patches.dynamodb_validation"],
    "moto.stepfunctions.responses.StepFunctionResponse.describe_execution": ["patches.execution_output", "patches.redrive"],
    "moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task.StateTask._from_error":
        ["patches.task_argument_errors", "patches.heartbeat_timeout"],
    "moto.stepfunctions.parser.backend.execution.BaseExecutionWorkerCommunication.terminated":
        ["patches.execution_status_events", "patches.execution_end"],
    "moto.stepfunctions.parser.asl.eval.event.event_manager.EventManager.add_event":
        ["patches.execution_end", "patches.history_limit", "patches.cancelled_branches"],
    "moto.stepfunctions.parser.backend.execution_worker.ExecutionWorker._get_evaluation_environment":
        ["patches.redrive", "patches.history_limit"],
    "moto.stepfunctions.parser.asl.component.state.state.CommonStateField.eval": ["patches.redrive", "patches.cancelled_branches"],
    "moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.inline_iteration_component."
    "InlineIterationComponent._eval_body": ["patches.redrive", "patches.cancelled_branches"],
    "moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.iteration_worker.IterationWorker._eval_job":
        ["patches.redrive", "patches.cancelled_branches"],
    "moto.stepfunctions.parser.asl.component.common.error_name.error_equals_decl.ErrorEqualsDecl._eval_body":
        ["patches.heartbeat_timeout", "patches.terminal_errors"],
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
    assert shared == SHARED_TODAY
    assert seams.active() == []  # closing the cloud took every patch off


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
