"""aws-cdk-lib loaded on a thread while the runtime's own imports run.

A test of a CDK stack imports the runtime (``LocalCloud``: moto, its Step Functions
interpreter, the patches - Python's work, about 1.5 s of CPU) and ``aws_cdk`` (jsii starts its
node kernel and loads the aws-cdk-lib assembly - node's work, Python waiting on a pipe), one
after the other. :func:`start`, called as ``locked_workflow.testing.cloud`` begins importing,
imports ``aws_cdk`` on a daemon thread, so node loads the assembly while Python imports moto:
the two overlap on two cores instead of adding up. The test's own ``import aws_cdk`` then
finds the module loaded (or waits on Python's import lock for the rest of it).

Nothing else changes: the same modules, loaded once. An error of the import on the thread is
dropped here: the test's own import raises it again, where it is read. Not started when
``aws_cdk`` is already imported or not installed, or when ``LOCKED_WORKFLOW_CDK_PRELOAD=0``
(a process that never touches CDK and would rather not start node).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading

__all__ = ["ENV", "start"]

#: Set to ``0`` to leave ``aws_cdk`` to be imported when the test imports it.
ENV = "LOCKED_WORKFLOW_CDK_PRELOAD"

_STARTED = threading.Lock()
_thread: threading.Thread | None = None


def _import() -> None:
    try:
        import aws_cdk  # noqa: F401 - loaded for the test's own import
    except BaseException:  # noqa: BLE001 - the test's own import raises it again
        pass


def start() -> threading.Thread | None:
    """Start importing ``aws_cdk`` on a daemon thread (once); the thread, or None if not started."""
    global _thread
    with _STARTED:
        if _thread is not None:
            return _thread
        if os.environ.get(ENV, "1") == "0" or "aws_cdk" in sys.modules:
            return None
        try:
            found = importlib.util.find_spec("aws_cdk") is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return None
        _thread = threading.Thread(target=_import, name="aws-cdk-preload", daemon=True)
        _thread.start()
        return _thread
