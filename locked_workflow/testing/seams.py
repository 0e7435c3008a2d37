"""The one door through which the runtime changes moto: what is patched, by which module, once.

Every module of ``patches/`` (and ``function_logs``, which ``patches/lambda_in_process``
applies) changes another library only through :func:`patch_attribute` (an attribute of a class
or a module) or :func:`patch_item` (an entry of a dict), which enter a ``unittest.mock.patch``
context on the caller's stack - closing the stack restores bare moto - and record ``(owner,
attribute, module)`` for as long as the stack is open. :func:`active` lists the records and
:func:`shared` the attributes that more than one record patches.

The rule the runtime keeps (``tests/local/test_patch_registry.py`` applies it and checks, also
by comparing every moto attribute with bare moto's, that nothing is patched around this door):
each attribute is patched once, by one module. Where several gaps need the same moto method,
one module owns its wrapper and calls the others' contributions as an ordered, declared list
(:class:`Hooks`), so the order is in code, not in comments.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Generic, Iterator, MutableMapping, TypeVar
from unittest import mock

__all__ = ["Hooks", "Patch", "active", "patch_attribute", "patch_item", "shared"]

_PREFIX = "locked_workflow.testing."


@dataclass(frozen=True, eq=False)
class Patch:
    """One patch in force: ``owner.name`` (or ``owner[name]`` for a dict) replaced by ``by``."""

    owner: Any
    name: str
    by: str
    label: str
    replacement: Any

    @property
    def key(self) -> tuple[int, str]:
        """What two patches of the same attribute share."""
        return id(self.owner), self.name


_LOCK = threading.Lock()
_ACTIVE: list[Patch] = []


def _module_name(by: str) -> str:
    if not isinstance(by, str) or not by:
        raise ValueError(f"`by` must be the patching module's __name__, got: {by!r}")
    return by[len(_PREFIX):] if by.startswith(_PREFIX) else by


def _owner_label(owner: Any) -> str:
    if isinstance(owner, ModuleType):
        return owner.__name__
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}"
    return f"{type(owner).__qualname__} object"


def _record(stack: ExitStack, patch: Patch) -> None:
    with _LOCK:
        _ACTIVE.append(patch)
    stack.callback(_forget, patch)


def _forget(patch: Patch) -> None:
    with _LOCK:
        _ACTIVE.remove(patch)


def patch_attribute(stack: ExitStack, owner: Any, name: str, replacement: Any, *, by: str,
                    create: bool = False) -> None:
    """Replace ``owner.name`` by ``replacement`` until ``stack`` closes, recorded as ``by``'s.

    Args:
        stack: the stack whose closing restores the attribute.
        owner: the class or module holding the attribute.
        name: the attribute's name.
        replacement: its value while the patch is in force.
        by: the patching module's ``__name__``.
        create: allow an attribute ``owner`` does not have. Default False.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"`name` must be an attribute name, got: {name!r}")
    patch = Patch(owner, name, _module_name(by), f"{_owner_label(owner)}.{name}", replacement)
    stack.enter_context(mock.patch.object(owner, name, replacement, create=create))
    _record(stack, patch)


def patch_item(stack: ExitStack, mapping: MutableMapping[Any, Any], key: Any, value: Any, *, by: str,
               label: str) -> None:
    """Set ``mapping[key] = value`` until ``stack`` closes, recorded as ``by``'s.

    Args:
        stack: the stack whose closing restores the entry.
        mapping: the dict.
        key: the entry's key.
        value: its value while the patch is in force.
        by: the patching module's ``__name__``.
        label: how the dict is named in reports (e.g. ``"Deployer._HANDLERS"``).
    """
    patch = Patch(mapping, repr(key), _module_name(by), f"{label}[{key!r}]", value)
    stack.enter_context(mock.patch.dict(mapping, {key: value}))
    _record(stack, patch)


def active() -> list[Patch]:
    """The patches in force, in the order they were applied."""
    with _LOCK:
        return list(_ACTIVE)


def shared(patches: list[Patch] | None = None) -> dict[str, list[str]]:
    """Each attribute patched more than once: its label and the patching modules, in order."""
    by_key: dict[tuple[int, str], list[Patch]] = {}
    for patch in active() if patches is None else patches:
        by_key.setdefault(patch.key, []).append(patch)
    return {found[0].label: [p.by for p in found] for found in by_key.values() if len(found) > 1}


T = TypeVar("T", bound=Callable[..., Any])


class Hooks(Generic[T]):
    """An ordered, declared list of contributions to one wrapper.

    The module owning a patched moto method declares the contributions it calls (by name, in
    order) when it creates its ``Hooks``; each other module registers its function under one of
    those names for as long as its stack is open. Iterating yields the registered ones in the
    declared order. A name not declared, or registered twice, is refused.
    """

    def __init__(self, owner: str, *names: str) -> None:
        if len(set(names)) != len(names) or not names:
            raise ValueError(f"`names` must be distinct hook names, got: {names!r}")
        self.owner = owner
        self.names = names
        self._hooks: dict[str, T] = {}
        self._lock = threading.Lock()
        self._snapshot: tuple[T, ...] = ()

    def register(self, stack: ExitStack, name: str, hook: T) -> None:
        """Contribute ``hook`` as ``name`` until ``stack`` closes."""
        with self._lock:
            if name not in self.names:
                raise ValueError(f"`name` must be one of {self.names} of {self.owner}, got: {name!r}")
            if name in self._hooks:
                raise ValueError(f"{self.owner}: hook {name!r} is already registered")
            self._hooks[name] = hook
            self._refresh()
        stack.callback(self._unregister, name)

    def _unregister(self, name: str) -> None:
        with self._lock:
            self._hooks.pop(name, None)
            self._refresh()

    def _refresh(self) -> None:
        self._snapshot = tuple(self._hooks[n] for n in self.names if n in self._hooks)

    def registered(self) -> list[str]:
        """The names registered now, in the declared order."""
        return [n for n in self.names if n in self._hooks]

    def __iter__(self) -> Iterator[T]:
        return iter(self._snapshot)

    def __bool__(self) -> bool:
        return bool(self._snapshot)
