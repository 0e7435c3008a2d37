"""Execution environments: a function's concurrent invocations each run in one of their own.

AWS: Lambda runs each invocation in an execution environment, which processes one invocation
at a time; an invocation that arrives while every environment of the function is busy gets a
new environment, whose Init phase (the runtime, then the function's module code) runs first - a
cold start - and an idle environment is reused by a later invocation - a warm start - with
whatever its module code left in memory
(https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html,
https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html). An invocation
that times out resets its environment: the next invocation there runs Init again (same page,
"Failures during the invoke phase").

Gap (before): the runtime imported a function's handler once and ran every invocation with
that one import, concurrent invocations at once on their threads. Module state was shared by
invocations AWS keeps apart: a module-level counter saw both, and Powertools' ``Metrics``, which
keeps its metric set in class attributes of the Powertools package itself (not of the
handler's module, so importing the handler again would not separate it), had one metric set
for all of them - two invocations' flushes raced (``SchemaValidationError: Must contain at
least one metric``, ``RuntimeError: dictionary changed size during iteration``), failing the
unlocked negative control of ``tests/lock/test_lock_behaviour.py`` now and then.

Fix: each in-process function keeps an :class:`EnvironmentPool`. An invocation takes an idle
environment (the one idle most recently) or initializes a new one: the handler is imported
afresh (``lambda_runtime``), with environment-own copies of the function's modules (its asset
and layers) and of :data:`ENVIRONMENT_PACKAGES` - as each environment is a process of its
own on AWS. Init runs before the function's timeout starts, as Lambda's does, up to Lambda's
Init limit (``lambda_runtime``; and as the runtime's single import did). When the invocation ends the environment is idle again; one
whose invocation timed out is discarded (its handler thread runs on, as zombie work), so the
next invocation initializes another. Each environment writes its own log stream.

Not modelled: the rest of the standard library and the Lambda runtime's packages (boto3,
botocore: moto's mock lives there) stay shared by all environments of the process - boto3's
default session, say; no concurrency limit, no idle environment is ever shut down. The Inits
run one at a time (they swap ``sys.modules``): a burst of N concurrent first invocations of a
function waits for N Inits (40 to 90 ms each for the example's handler on this 2-core machine)
where AWS runs them side by side. A module that another thread imports while an Init runs
finds that environment's ``logging`` or Powertools (an environment package's module it
imports may be taken as the environment's).

Proof: ``tests/local/test_lambda_environments.py``.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

#: Installed top-level packages each environment imports afresh (when its handler imports
#: them), for the state they keep at module or class level per process, which AWS keeps per
#: environment: Powertools (``Metrics``' metric set, dimensions and metadata; the cold-start
#: flags of ``Metrics``, ``Logger`` and ``Tracer``) and the standard library's ``logging``
#: (its registry of loggers, where Powertools' ``Logger`` of a service keeps its handler,
#: formatter and appended keys).
ENVIRONMENT_PACKAGES = frozenset({"aws_lambda_powertools", "logging"})


def new_log_stream() -> str:
    """A log stream name as Lambda names an environment's: ``YYYY/MM/DD/[$LATEST]<id>``."""
    return time.strftime("%Y/%m/%d", time.gmtime()) + f"/[$LATEST]{uuid.uuid4().hex}"


@dataclass(eq=False)
class ExecutionEnvironment:
    """One environment of a function: its handler, the modules its Init imported, its log stream."""

    handler: Callable[[Any, Any], Any]
    modules: dict[str, ModuleType]
    log_stream: str
    #: The invocation it runs (its number in the pool), ``None`` while idle.
    running: int | None = field(default=None, repr=False)


@dataclass
class EnvironmentPool:
    """A function's environments: one per invocation in flight, idle ones reused.

    Attributes:
        initialized: how many environments ran Init (cold starts) so far.
    """

    initialized: int = 0
    _idle: list[ExecutionEnvironment] = field(default_factory=list, repr=False)
    _invocations: int = field(default=0, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def take(self) -> tuple[ExecutionEnvironment | None, int]:
        """An idle environment (the most recently used) or ``None``, and the invocation's number."""
        with self._lock:
            self._invocations += 1
            environment = self._idle.pop() if self._idle else None
            if environment is not None:
                environment.running = self._invocations
            return environment, self._invocations

    def initialized_one(self, environment: ExecutionEnvironment, invocation: int) -> None:
        """Count ``environment``'s Init; it runs ``invocation``."""
        with self._lock:
            self.initialized += 1
            environment.running = invocation

    def give_back(self, environment: ExecutionEnvironment, invocation: int) -> bool:
        """``invocation`` ended: its environment is idle again - unless it was reset (False)."""
        with self._lock:
            if environment.running != invocation:
                return False
            environment.running = None
            self._idle.append(environment)
            return True

    def reset(self, environment: ExecutionEnvironment, invocation: int) -> bool:
        """``invocation`` timed out: its environment is never reused. False if it ended first
        (and the environment is idle again)."""
        with self._lock:
            if environment.running != invocation:
                return False
            environment.running = -1  # (no invocation has this number: never given back)
            return True
