"""moto's packages the runtime does not use, loaded only if something does use them.

moto's Step Functions interpreter imports every service integration's module as it loads
(``state_task_service_factory``); the AWS Batch one reads one enum from ``moto.batch.utils``,
and importing that submodule runs the package ``moto.batch`` first, whose ``__init__`` imports
its models and with them ``moto.ec2`` - its instance types and regions read from JSON: more
than half of the CPU of importing ``locked_workflow.testing.cloud`` (``python -X importtime``
names them; three fresh processes each way, alternating, on a loaded machine: a median of 2.07 s
with them, 1.11 s without), in every test process, for two services no lock workflow calls.

:func:`defer` puts such a package in ``sys.modules`` with its ``__path__`` but without running
its ``__init__``: its submodules import as usual (``moto.batch.utils`` needs nothing of the
package), and the first name looked up on the package itself (``batch_backends``, what moto's
``get_backend("batch")`` reads, or ``from moto.batch import ...``) runs the ``__init__`` then,
once, under a lock - so a workflow that does call AWS Batch, or a test that uses moto's Batch,
gets the same package, loaded at its first use instead of at import. Nothing is deferred when
the package is already imported. ``locked_workflow.testing.cloud`` defers :data:`PACKAGES`
before it imports moto's interpreter; ``LOCKED_WORKFLOW_DEFER_IMPORTS=0`` turns it off.

Proof: ``tests/local/test_deferred_imports.py``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
from typing import Any

__all__ = ["ENV", "PACKAGES", "defer", "defer_all"]

#: Set to ``0`` to import moto's packages as moto does.
ENV = "LOCKED_WORKFLOW_DEFER_IMPORTS"
#: The packages whose ``__init__`` waits for their first use.
PACKAGES = ("moto.batch",)


def defer(name: str) -> bool:
    """Put package ``name`` in ``sys.modules`` without running its ``__init__`` yet; False if
    it is imported already (or is not a package)."""
    if name in sys.modules:
        return False
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return False
    module = importlib.util.module_from_spec(spec)
    lock = threading.RLock()
    loaded = False

    def __getattr__(attribute: str) -> Any:  # PEP 562: only names the module does not have yet
        nonlocal loaded
        with lock:
            if not loaded:
                loaded = True
                del module.__dict__["__getattr__"]
                spec.loader.exec_module(module)  # type: ignore[union-attr]
        try:
            return module.__dict__[attribute]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}") from None

    module.__dict__["__getattr__"] = __getattr__
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return True


def defer_all() -> list[str]:
    """:func:`defer` each of :data:`PACKAGES` (unless ``LOCKED_WORKFLOW_DEFER_IMPORTS=0``); those deferred."""
    if os.environ.get(ENV, "1") == "0":
        return []
    importlib.import_module("moto")
    return [name for name in PACKAGES if defer(name)]

