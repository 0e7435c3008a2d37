"""Asynchronous invocations: a function error is retried twice, as Lambda does.

Gap: an ``InvocationType=Event`` invocation (an EventBridge rule's Lambda target, e.g. the
lock janitor, or ``lambda:invoke`` with ``InvocationType="Event"``) ran its handler once (the
in-process Lambda of ``patches/lambda_in_process``; bare moto 5.2.1 runs it once too, in
Docker): a handler that raised - a DynamoDB write that failed past botocore's retries - was
never run again, so a test could not tell a janitor that relies on Lambda's retries from one
that loses the event.

AWS: "If the function returns an error, by default Lambda attempts to run it two more times,
with a one-minute wait between the first two attempts, and two minutes between the second and
third attempts"; ``MaximumRetryAttempts`` (0 to 2) and ``MaximumEventAgeInSeconds`` (60 to
21,600, default 6 hours) of the function's event invoke configuration bound it; an event
whose retries are spent (or that grew too old) goes to the function's on-failure destination
or dead-letter queue
(https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html).

Fix: :func:`run` runs an asynchronous invocation on a thread: the first attempt, then up to
``MaximumRetryAttempts`` (default 2) retries after a function error, the waits being AWS's
(60 s, 120 s) times :attr:`AsyncInvokeOptions.time_scale` (default 1/60: 1 s, then 2 s);
an event older than its maximum age on that same scale (default 6 h: 360 s) is not retried.
Never fewer retries than AWS makes, only shorter waits. Set
``cloud.async_invoke_options.time_scale`` to change the waits (read when an invocation
starts). Every attempt is logged in ``cloud.async_invoke_options.attempts``.

An asynchronous invocation belongs to its cloud: when the ``LocalCloud`` closes
(:meth:`AsyncInvokeOptions.close`), no attempt starts any more (a retry waiting is dropped,
logged ``cancelled``) and the attempts in flight are waited for, up to their function's
timeout and Lambda's Init. Before, a retry's thread ran on after the cloud closed, outside
moto's mock and the cloud's endpoint variables: a janitor whose clients were made for the
closed cloud called ``dynamodb.us-east-1.amazonaws.com`` (``EndpointConnectionError``) while
the next cloud's DynamoDB Local started.

Not modelled: the retries of throttling and system errors (up to 6 hours: no such error
arises in process) and sending a spent event to an on-failure destination or dead-letter
queue (it is logged as ``discarded``).

Proof: ``tests/local/test_patch_async_invoke_retries.py``.
"""

from __future__ import annotations

import sys
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from locked_workflow.testing.seams import patch_attribute

#: Lambda's waits before the first and the second retry of an asynchronous invocation (s).
AWS_RETRY_DELAYS_S = (60.0, 120.0)
#: Lambda's default number of retries after a function error (``MaximumRetryAttempts``).
DEFAULT_MAX_RETRIES = 2
#: Lambda's default maximum event age (``MaximumEventAgeInSeconds``), in seconds.
DEFAULT_MAX_EVENT_AGE_S = 21_600


@dataclass(frozen=True)
class AsyncAttempt:
    """One attempt of an asynchronous invocation: ``attempt`` counts from 1; ``outcome`` is
    ``"ok"``, ``"failed"`` (a function error; retried if allowed), ``"discarded"`` (failed,
    and no retry is left or the event is too old) or ``"cancelled"`` (failed, and its cloud
    closed before the retry)."""

    function: str
    attempt: int
    outcome: str
    error_type: str | None = None


@dataclass
class AsyncInvokeOptions:
    """How the runtime paces Lambda's retries of asynchronous invocations.

    Attributes:
        time_scale: the factor applied to AWS's waits (60 s, then 120 s) and to the maximum
            event age. Must be greater than 0. Default 1/60 (waits of 1 s and 2 s).
    """

    time_scale: float = 1 / 60
    attempts: list[AsyncAttempt] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _closed: threading.Event = field(default_factory=threading.Event, repr=False)
    _running: list = field(default_factory=list, repr=False)  # (thread, function) of each invocation

    def __post_init__(self) -> None:
        if isinstance(self.time_scale, bool) or not isinstance(self.time_scale, (int, float)) or not self.time_scale > 0:
            raise ValueError(f"`time_scale` must be a number greater than 0, got: {self.time_scale!r}")

    def record(self, attempt: AsyncAttempt) -> None:
        with self._lock:
            self.attempts.append(attempt)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def track(self, thread: threading.Thread, function: Any) -> bool:
        """Count ``thread`` (an invocation of ``function``) as this cloud's; False once closed."""
        with self._lock:
            if self._closed.is_set():
                return False
            self._running = [(t, f) for t, f in self._running if t.is_alive()]
            self._running.append((thread, function))
            return True

    def wait_or_close(self, seconds: float) -> bool:
        """Sleep ``seconds``; True if the cloud closed meanwhile."""
        return self._closed.wait(seconds)

    def close(self) -> None:
        """No attempt starts from now; wait for those in flight (each up to its function's
        timeout and Lambda's Init limit: an invocation returns by then)."""
        from locked_workflow.constructs_lib.section_work import LAMBDA_INIT_LIMIT_S

        with self._lock:
            self._closed.set()
            running = list(self._running)
        for thread, function in running:
            if thread.ident is not None:  # (one tracked as the cloud closed never starts)
                thread.join(timeout=float(getattr(function, "timeout_s", 3)) + LAMBDA_INIT_LIMIT_S)

    def of(self, function: str) -> list[AsyncAttempt]:
        """The attempts logged for ``function`` (its name), in order."""
        with self._lock:
            return [a for a in self.attempts if a.function == function]


_options = AsyncInvokeOptions()


def use_options(stack: ExitStack, options: AsyncInvokeOptions) -> None:
    """Asynchronous invocations read ``options`` (when each starts) until ``stack`` closes."""
    patch_attribute(stack, sys.modules[__name__], "_options", options, by=__name__)


def event_invoke_limits(moto_function: Any) -> tuple[int, float]:
    """(retries, maximum event age in s) of a moto ``LambdaFunction``'s event invoke config."""
    configs = getattr(moto_function, "event_invoke_config", None) or []
    config = configs[-1].config if configs else {}  # (moto appends each put; the last one is in force)
    return (int(config.get("MaximumRetryAttempts", DEFAULT_MAX_RETRIES)),
            float(config.get("MaximumEventAgeInSeconds", DEFAULT_MAX_EVENT_AGE_S)))


def run(function: Any, event: Any, *, retries: int = DEFAULT_MAX_RETRIES,
        max_event_age_s: float = DEFAULT_MAX_EVENT_AGE_S, options: AsyncInvokeOptions | None = None) -> None:
    """Run the asynchronous invocation of ``function`` (an ``InProcessFunction``) with
    ``event``: attempts until one succeeds, ``retries`` are spent, the event is too old or
    ``options``' cloud closed (default: the active cloud's options)."""
    options = options or _options
    scale = options.time_scale
    queued = time.monotonic()
    for attempt in range(1, retries + 2):
        result = function.invoke(event)
        if not result.failed:
            options.record(AsyncAttempt(function.name, attempt, "ok"))
            return
        delay = AWS_RETRY_DELAYS_S[min(attempt, len(AWS_RETRY_DELAYS_S)) - 1] * scale
        spent = attempt > retries or time.monotonic() + delay - queued > max_event_age_s * scale
        options.record(AsyncAttempt(function.name, attempt, "discarded" if spent else "failed", result.error_type))
        if spent:
            return
        if options.wait_or_close(delay):
            options.record(AsyncAttempt(function.name, attempt + 1, "cancelled"))
            return


def start(function: Any, event: Any, moto_function: Any) -> None:
    """Start :func:`run` on a daemon thread, bounded by ``moto_function``'s event invoke config."""
    retries, max_age = event_invoke_limits(moto_function)
    options = _options
    thread = threading.Thread(target=run, args=(function, event), daemon=True,
                              kwargs={"retries": retries, "max_event_age_s": max_age, "options": options})
    if options.track(thread, function):  # (a closed cloud starts nothing)
        thread.start()


def apply(stack: ExitStack, options: AsyncInvokeOptions) -> None:
    """Asynchronous invocations (``patches/lambda_in_process`` hands them to :func:`start`)
    read ``options`` until ``stack`` closes."""
    use_options(stack, options)
