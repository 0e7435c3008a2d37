"""The Step Functions backend the runtime runs on: a subclass of moto's, installed at moto's seam.

moto picks its Step Functions backend in one function, ``moto/stepfunctions/responses.py:
get_backend`` (the interpreter's backend when ``execute_state_machine`` is on). The runtime
patches that one function (through :mod:`locked_workflow.testing.seams`) to answer with a
subclass of ``StepFunctionsParserBackend``; moto's class itself is left as shipped. Gaps that
change the backend's methods contribute an override with :func:`override`: a factory given the
method of moto's class (``super()``'s) that returns the overriding method. When several gaps
override one method, :data:`ORDER` says in which order they are called (outermost first).

The subclass is composed when the runtime is applied, and its backends start empty (as moto's
do under ``mock_aws``); ``mock_aws`` resets them as it resets its own.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack
from typing import Any, Callable

from moto.core.base_backend import BackendDict
from moto.stepfunctions import responses
from moto.stepfunctions.parser.models import StepFunctionsParserBackend

from locked_workflow.testing.seams import patch_attribute

__all__ = ["ORDER", "override", "overrides"]

#: The modules that override the backend's methods, outermost first: a token call is checked
#: against its closed task (cancelled_branches) around the start of an execution's unique name.
ORDER: tuple[str, ...] = ("patches.cancelled_branches", "patches.unique_execution_names")

_PREFIX = "locked_workflow.testing."


class _Installed:
    """The composed subclass, its backends, and the contributions it was composed from."""

    def __init__(self) -> None:
        self.factories: dict[str, dict[str, Callable[[Any], Any]]] = {}
        self.backends: BackendDict[Any] | None = None
        self.stack: ExitStack | None = None

    def compose(self) -> None:
        namespace: dict[str, Any] = {"__module__": __name__, "__doc__": "moto's backend with the runtime's overrides."}
        for method in sorted({m for methods in self.factories.values() for m in methods}):
            call = getattr(StepFunctionsParserBackend, method)
            for module in reversed(ORDER):
                factory = self.factories.get(module, {}).get(method)
                if factory is not None:
                    call = factory(call)
            namespace[method] = call
        backend = type("LocalStepFunctionsBackend", (StepFunctionsParserBackend,), namespace)
        self.backends = BackendDict(backend, "stepfunctions")


_LOCK = threading.Lock()
_INSTALLED = _Installed()


def _get_backend(original: Callable[[str, str], Any]) -> Callable[[str, str], Any]:
    def get_backend(account: str, region: str) -> Any:
        backend = original(account, region)
        backends = _INSTALLED.backends
        if backends is None or not isinstance(backend, StepFunctionsParserBackend):
            return backend  # the interpreter is off: moto's plain backend, as shipped
        return backends[account][region]

    return get_backend


def override(stack: ExitStack, method: str, wrapper: Callable[[Any], Any], *, by: str) -> None:
    """Override the backend's ``method`` until ``stack`` closes: ``wrapper(super_method)``.

    Args:
        stack: the stack whose closing takes the override off.
        method: a method of ``StepFunctionsParserBackend``.
        wrapper: moto's method in (call it as ``super()``'s), the overriding method out.
        by: the overriding module's ``__name__``.
    """
    module = by[len(_PREFIX):] if by.startswith(_PREFIX) else by
    if module not in ORDER:
        raise ValueError(f"`by` must be one of {ORDER}, got: {module!r}")
    if not callable(getattr(StepFunctionsParserBackend, method, None)):
        raise ValueError(f"`method` must be a method of StepFunctionsParserBackend, got: {method!r}")
    with _LOCK:
        methods = _INSTALLED.factories.setdefault(module, {})
        if method in methods:
            raise ValueError(f"{module} already overrides {method}")
        methods[method] = wrapper
        if _INSTALLED.stack is None:  # the one patch: moto's get_backend answers with ours
            _INSTALLED.stack = ExitStack()
            patch_attribute(_INSTALLED.stack, responses, "get_backend", _get_backend(responses.get_backend),
                            by=__name__)
        _INSTALLED.compose()
    stack.callback(_withdraw, module, method)


def _withdraw(module: str, method: str) -> None:
    with _LOCK:
        methods = _INSTALLED.factories[module]
        del methods[method]
        if not methods:
            del _INSTALLED.factories[module]
        if _INSTALLED.factories:
            _INSTALLED.compose()
            return
        assert _INSTALLED.stack is not None
        _INSTALLED.stack.close()
        _INSTALLED.stack = None
        _INSTALLED.backends = None


def overrides() -> dict[str, list[str]]:
    """Each overridden method and the modules overriding it, outermost first."""
    with _LOCK:
        methods = {m for found in _INSTALLED.factories.values() for m in found}
        return {m: [mod for mod in ORDER if m in _INSTALLED.factories.get(mod, {})] for m in sorted(methods)}
