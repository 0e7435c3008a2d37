"""A function's output goes to its log group, not to the test's output.

On AWS, what a Lambda function writes to standard output and standard error (``print``, the
``logging`` module, Powertools' ``Logger`` and ``Metrics``, a ``warnings.warn``) becomes log
events of its log group ``/aws/lambda/<function name>`` in CloudWatch Logs
(https://docs.aws.amazon.com/lambda/latest/dg/python-logging.html); the application calling
it never sees them. In one process the function's writes would land in the test's own output
(and a Powertools warning in pytest's warnings summary) - the janitor's log lines in the
user's failing test, for instance. Here they go where Lambda puts them:

* while the runtime is on, ``sys.stdout`` and ``sys.stderr`` are :class:`RoutedStream`\\ s: a write
  from a thread that runs a function (its import, its invocation, and a timed-out invocation
  that runs on) goes to that function's log stream; any other write goes where it went before.
  A test runner that swaps ``sys.stdout`` (pytest's capture) gets its stream wrapped again at
  the next invocation; a stream a handler bound earlier (a ``logging.StreamHandler``) routes
  the same way, since it is one of these;
* ``warnings.warn`` from such a thread is written to the function's log as Python writes it to
  standard error (``warnings.formatwarning``), and not raised to the process's filters;
* each line is one log event, in the stream ``YYYY/MM/DD/[$LATEST]<id>`` of that invocation's
  execution environment, written when the line ends (and what is left when the invocation
  ends). Read them with ``LocalCloud.function_logs(name)`` or CloudWatch Logs' API.

Proof: ``tests/local/test_patch_lambda_in_process.py``.
"""

from __future__ import annotations

import io
import sys
import threading
import time
import warnings
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, TextIO

from locked_workflow.testing.seams import patch_attribute

_current = threading.local()


@dataclass
class FunctionLog:
    """One invocation's output: lines written to ``log_group`` / ``log_stream`` as they end."""

    region: str
    account_id: str
    log_group: str
    log_stream: str
    _partial: str = field(default="", repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def write(self, text: str) -> None:
        with self._lock:
            *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            self._put(line)

    def close(self) -> None:
        with self._lock:
            rest, self._partial = self._partial, ""
        if rest:
            self._put(rest)

    def _put(self, line: str) -> None:
        from locked_workflow.testing.patches.execution_logs import write_line

        write_line(self, self.log_stream, int(time.time() * 1000), line)


class RoutedStream(io.TextIOBase):
    """``sys.stdout`` / ``sys.stderr`` while the runtime is on (see the module docstring)."""

    def __init__(self, target: TextIO) -> None:
        self._target = target

    @property
    def target(self) -> TextIO:
        return self._target

    def write(self, text: str) -> int:
        log: FunctionLog | None = getattr(_current, "log", None)
        if log is not None:
            log.write(text)
        else:
            self._target.write(text)
        return len(text)

    def flush(self) -> None:
        if getattr(_current, "log", None) is None:
            self._target.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._target, "encoding", "utf-8")

    def fileno(self) -> int:
        return self._target.fileno()


def _routed(name: str) -> None:
    stream = getattr(sys, name)
    if not isinstance(stream, RoutedStream):
        setattr(sys, name, RoutedStream(stream))


@contextmanager
def function_output(log: FunctionLog) -> Iterator[None]:
    """Route this thread's output to ``log`` (nesting: the innermost wins)."""
    _routed("stdout")
    _routed("stderr")
    outer = getattr(_current, "log", None)
    _current.log = log
    try:
        yield
    finally:
        _current.log = outer
        if outer is not log:
            log.close()


def apply(stack: ExitStack) -> None:
    """Turn the routing on for as long as ``stack`` is open."""
    original_warn = warnings.warn

    def warn(message: Any, category: Any = None, stacklevel: int = 1, source: Any = None, **kwargs: Any) -> None:
        log: FunctionLog | None = getattr(_current, "log", None)
        if log is None:
            original_warn(message, category, stacklevel + 1, source, **kwargs)
            return
        if isinstance(message, Warning):
            category, message = type(message), str(message)
        try:
            frame = sys._getframe(stacklevel)
        except ValueError:  # a stacklevel past the outermost frame: Python names sys
            frame = sys._getframe(0)
        log.write(warnings.formatwarning(str(message), category or UserWarning,
                                         frame.f_code.co_filename, frame.f_lineno))

    patch_attribute(stack, warnings, "warn", warn, by=__name__)
    stack.callback(_unrouted, "stdout")
    stack.callback(_unrouted, "stderr")
    _routed("stdout")
    _routed("stderr")


def _unrouted(name: str) -> None:
    """Unwrap ``sys.<name>`` if it is still ours (a test runner may have put its own since)."""
    stream = getattr(sys, name)
    if isinstance(stream, RoutedStream):
        while isinstance(stream, RoutedStream):
            stream = stream.target
        setattr(sys, name, stream)
