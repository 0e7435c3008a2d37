"""What a Lambda function's code imports: the modules it needs, found by reading its source.

A Lambda function sees only its code asset, its layers and its runtime's packages: a module it
imports that none of them carry fails its import on AWS (``Runtime.ImportModuleError``,
https://docs.aws.amazon.com/lambda/latest/dg/python-handler.html). Three users read this module:

- the janitor's bundling (:mod:`locked_workflow.constructs_lib.janitor`) copies the closure of
  its handler's imports of this package, so the bundle carries every module it needs, whatever
  ``lock_client`` comes to import;
- :class:`~locked_workflow.constructs_lib.client_layer.LockClientLayer` carries the closure of
  ``lock_client``'s imports of this package the same way (:func:`package_files`);
- the offline runtime (:mod:`locked_workflow.testing.lambda_runtime`) refuses a function whose
  asset lacks a module its handler imports, before it runs: on this machine the checkout (an
  editable install) would otherwise supply the module, and a bundle that cannot work on AWS
  would pass offline.

Imports are read with :mod:`ast`, lazy ones inside functions included (stricter than AWS, which
fails only when such an import runs).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Callable, Iterable, NamedTuple


class Module(NamedTuple):
    """A module found for a name: its source file (``None``: a folder without ``__init__.py``)."""

    path: Path | None
    is_package: bool


#: Finds a module by its dotted name, or ``None``.
Finder = Callable[[str], "Module | None"]


class Missing(NamedTuple):
    """An import of ``name`` (in ``importer``) that nothing provides."""

    importer: str
    name: str


def _imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, tuple[str, ...]]]:
    """``(module, names)`` of every import in ``tree``: ``import a.b`` is ``("a.b", ())``, ``from
    a import b, c`` is ``("a", ("b", "c"))``; relative imports resolved against ``module``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".") if is_package else module.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join([*parts, base] if base else parts)
            found.append((base, tuple(alias.name for alias in node.names if alias.name != "*")))
    return found


def _bound_names(path: Path | None) -> set[str] | None:
    """Names a package's ``__init__.py`` binds at its top level (``None``: any name, as its
    module ``__getattr__`` answers for any)."""
    if path is None:
        return set()
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == "__getattr__":
                return None
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))
    return names


_UNREAD = object()


def closure(
    start: Iterable[tuple[str, Path]], find: Finder, *, within: Callable[[str], bool]
) -> tuple[dict[str, Module], list[Missing]]:
    """The modules ``start`` (``(module name, file)`` pairs) imports, directly or not, among
    the names ``within`` accepts, as ``find`` finds them; and the imports nothing provides.

    An imported module brings its parent packages. ``from p import x`` needs ``p``, and ``x``
    as a submodule unless ``p``'s ``__init__.py`` binds it.
    """
    found: dict[str, Module] = {}
    missing: list[Missing] = []
    todo: list[tuple[str, Path, bool]] = [(name, path, False) for name, path in start]

    def need(importer: str, name: str) -> Module | None:
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):
            prefix = ".".join(parts[:depth])
            if prefix in found:
                continue
            module = find(prefix)
            if module is None:
                missing.append(Missing(importer, prefix))
                return None
            found[prefix] = module
            if module.path is not None:
                todo.append((prefix, module.path, module.is_package))
        return found[name]

    while todo:
        importer, path, is_package = todo.pop()
        for name, names in _imports(ast.parse(path.read_text(encoding="utf-8")), importer, is_package):
            if not name or not within(name):
                continue
            module = need(importer, name)
            if module is None or not module.is_package:
                continue
            bound: set[str] | None | object = _UNREAD
            for attribute in names:
                submodule = f"{name}.{attribute}"
                if submodule in found:
                    continue
                sub = find(submodule)
                if sub is not None:
                    need(importer, submodule)
                    continue
                bound = _bound_names(module.path) if bound is _UNREAD else bound
                if isinstance(bound, set) and attribute not in bound:
                    missing.append(Missing(importer, submodule))
    return found, missing


def folder_finder(folder: Path) -> Finder:
    """Finds modules in ``folder`` alone, as a Lambda function's code asset provides them."""

    def find(name: str) -> Module | None:
        base = folder.joinpath(*name.split("."))
        if base.with_suffix(".py").is_file():
            return Module(base.with_suffix(".py"), False)
        if (base / "__init__.py").is_file():
            return Module(base / "__init__.py", True)
        if base.is_dir():
            return Module(None, True)
        return None

    return find


def module_file(name: str, module: Module) -> str:
    """Where ``module`` (named ``name``) lies in a code folder: ``a/b.py`` or ``a/b/__init__.py``."""
    return "/".join(name.split(".")) + ("/__init__.py" if module.is_package else ".py")


def host_finder(name: str) -> Module | None:
    """``name`` as this installation finds it (a checkout's folders, or the installed wheel)."""
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        return None
    if spec is None:
        return None
    path = Path(spec.origin) if spec.origin and spec.has_location else None
    return Module(path, spec.submodule_search_locations is not None)


def package_files(start: Iterable[tuple[str, Path]], package: str = "locked_workflow") -> dict[str, Path]:
    """What ``start`` (``(module name, file)`` pairs) imports of ``package``, with the ``start``
    modules of the package themselves, as files of a code folder (path in the folder ->
    source): the closure of their imports as this installation finds them, under the
    package's one import name. Raises ``RuntimeError`` if this installation lacks a module."""
    start = list(start)
    found, missing = closure(start, host_finder, within=lambda name: name.split(".")[0] == package)
    if missing:
        raise RuntimeError(f"this installation of {package} lacks what its code imports: {missing}")
    for name, path in start:
        if name.split(".")[0] == package:
            found.setdefault(name, Module(path, path.name == "__init__.py"))
    return {module_file(name, module): module.path for name, module in found.items() if module.path}
