"""The one door through which the runtime changes moto: what is patched, by which module, once.

Every module of ``patches/`` (and ``function_logs``, which ``patches/lambda_in_process``
applies) changes another library only through :func:`patch_attribute` (an attribute of a class
or a module) or :func:`patch_item` (an entry of a dict), which enter a ``unittest.mock.patch``
context on the caller's stack - closing the stack restores bare moto - and record ``(owner,
attribute, module)`` for as long as the stack is open. :func:`active` lists the records and
:func:`shared` the attributes that more than one record patches.

The rule the runtime keeps (``tests/local/test_patch_registry.py`` applies it and checks, also
by comparing every moto attribute with bare moto's, that nothing is patched around this door):
each attribute is patched once, by one module. A module that wraps a moto method calls
:func:`wrap` with a factory (the moto method in, the wrapped one out). Where several gaps wrap
the same method, :data:`CHAINS` declares them, in order: that attribute gets one wrapper, this
module's, which calls the contributions registered so far in the declared order whatever order
the modules were applied in - so the order is in code, not in comments, and a proof test that
applies one module alone gets its contribution alone. moto's Step Functions backend is not
patched at all: ``backend.py`` installs a subclass of it through moto's ``get_backend``.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, MutableMapping
from unittest import mock

__all__ = ["CHAINS", "Patch", "active", "chains", "patch_attribute", "patch_item", "shared", "wrap"]

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


#: The moto attributes several gaps wrap: for each (``Class.attribute``), the modules whose
#: contributions its one wrapper calls, outermost first - the first sees a call first and its
#: result last, the last calls moto's own method.
CHAINS: dict[str, tuple[str, ...]] = {
    # a closed history takes nothing (execution_end), the history limit counts what it takes
    # (history_limit), a cancelled branch's events are dropped before either (cancelled_branches)
    "EventManager.add_event": ("patches.cancelled_branches", "patches.history_limit", "patches.execution_end"),
    # the terminal errors are caught by nothing, not even States.Timeout's heartbeat reading
    "ErrorEqualsDecl._eval_body": ("patches.terminal_errors", "patches.heartbeat_timeout"),
    # the status event is sent once the execution has its status, before its history is closed
    "BaseExecutionWorkerCommunication.terminated": ("patches.execution_end", "patches.execution_status_events"),
    # the history budget is set on the environment the redrive run prepared
    "ExecutionWorker._get_evaluation_environment": ("patches.history_limit", "patches.redrive"),
    # the redrive fields are added to the description whose output is JSON text
    "StepFunctionResponse.describe_execution": ("patches.redrive", "patches.execution_output"),
    # the state (iteration) in flight is tracked, to be cancelled, around redrive's record of it
    "CommonStateField.eval": ("patches.cancelled_branches", "patches.redrive"),
    "InlineIterationComponent._eval_body": ("patches.cancelled_branches", "patches.redrive"),
    # an attempt of a callback task gets its own token, then waits (given up when its branch stops)
    "ExecutionState._evaluate_with_timeout": ("patches.retried_callbacks", "patches.cancelled_branches"),
    "IterationWorker._eval_job": ("patches.cancelled_branches", "patches.redrive"),
    # a heartbeat timeout is a TaskTimedOut; an Arguments error keeps its failure event
    "StateTask._from_error": ("patches.heartbeat_timeout", "patches.task_argument_errors"),
    # a request DynamoDB refuses is not billed: validation first, the meter inside it
    **{
        f"DynamoHandler.{action}": ("patches.dynamodb_validation", "patches.consumed_capacity")
        for action in ("put_item", "update_item", "delete_item", "get_item", "batch_write_item",
                       "batch_get_item", "transact_write_items", "transact_get_items", "query", "scan")
    },
}


def _chain_key(owner: Any, name: str) -> str:
    short = owner.__name__.rsplit(".", 1)[-1] if isinstance(owner, ModuleType) else owner.__qualname__
    return f"{short}.{name}"


class _Chain:
    """The one wrapper of a :data:`CHAINS` attribute and the contributions registered to it."""

    def __init__(self, owner: Any, name: str, order: tuple[str, ...]) -> None:
        self.owner, self.name, self.order = owner, name, order
        self.original = getattr(owner, name)
        self.factories: dict[str, Callable[[Any], Any]] = {}
        self.call: Callable[..., Any] = self.original
        chain = self

        def dispatch(*args: Any, **kwargs: Any) -> Any:
            return chain.call(*args, **kwargs)

        self.patch = Patch(owner, name, _module_name(__name__), f"{_owner_label(owner)}.{name}", dispatch)
        self.patcher = mock.patch.object(owner, name, dispatch)

    def compose(self) -> None:
        call = self.original
        for module in reversed(self.order):
            if module in self.factories:
                call = self.factories[module](call)
        self.call = call

    def registered(self) -> list[str]:
        return [module for module in self.order if module in self.factories]


_CHAINS: dict[tuple[int, str], _Chain] = {}


def wrap(stack: ExitStack, owner: Any, name: str, wrapper: Callable[[Any], Any], *, by: str) -> None:
    """Wrap ``owner.name`` until ``stack`` closes: ``wrapper(inner)`` returns what replaces it.

    An attribute :data:`CHAINS` declares gets one wrapper that calls ``by``'s contribution at its
    declared place; any other is patched with ``wrapper`` of the attribute as it is.

    Args:
        stack: the stack whose closing takes the contribution off.
        owner: the class or module holding the attribute.
        name: the attribute's name.
        wrapper: the moto method in, the wrapped method out.
        by: the patching module's ``__name__``.
    """
    module = _module_name(by)
    order = CHAINS.get(_chain_key(owner, name))
    if order is None:
        patch_attribute(stack, owner, name, wrapper(getattr(owner, name)), by=by)
        return
    if module not in order:
        raise ValueError(f"`by` must be one of {order} for {_chain_key(owner, name)}, got: {module!r}")
    with _LOCK:
        chain = _CHAINS.get((id(owner), name))
        if chain is None:
            chain = _CHAINS[(id(owner), name)] = _Chain(owner, name, order)
            chain.patcher.start()
            _ACTIVE.append(chain.patch)
        if module in chain.factories:
            raise ValueError(f"{chain.patch.label}: {module} already contributes")
        chain.factories[module] = wrapper
        chain.compose()
    stack.callback(_withdraw, chain, module)


def _withdraw(chain: _Chain, module: str) -> None:
    with _LOCK:
        del chain.factories[module]
        if chain.factories:
            chain.compose()
            return
        chain.patcher.stop()
        _ACTIVE.remove(chain.patch)
        del _CHAINS[(id(chain.owner), chain.name)]


def chains() -> dict[str, list[str]]:
    """Each chained attribute in force: its label and the contributing modules, in call order."""
    with _LOCK:
        return {chain.patch.label: chain.registered() for chain in _CHAINS.values()}
