"""In-process Lambda functions: run a Python handler from its asset folder.

An :class:`InProcessFunction` imports ``<module>.<function>`` (the ``Handler`` property,
e.g. ``index.handler`` or ``app/main.handler``) from the function's code folder, with the
function's environment variables applied, and calls it with the event and a
:class:`LambdaContext` carrying what Powertools reads (``function_name``,
``memory_limit_in_mb``, ``invoked_function_arn``, ``aws_request_id``).

* **Imports**: a handler may import only what its code folder, its layers' content and the
  Lambda Python runtime itself (the standard library, boto3 and botocore) provide
  (:mod:`~locked_workflow.testing.lambda_imports`, with the AWS pages): one that imports
  anything else - anywhere in its modules, lazily too - is refused before it runs, though
  this process could import it; on AWS the import fails (``Runtime.ImportModuleError``).
* **Isolation**: each function imports its own copy of its modules - two functions whose
  folders both hold ``index.py`` (or ``logic.py``) do not share them. Modules from
  site-packages (boto3, Powertools) are shared, as the runtime's or a layer's would be, and
  so is a package of this process whose files the folder (or a layer) carries unchanged (the
  janitor's copy of ``locked_workflow``). **Stricter than AWS**: a handler that imports -
  anywhere in its modules, lazily too - a module its folder lacks, of a package this process
  would supply from outside its installation (this checkout), is refused before it runs.
* **Execution environments**: each invocation runs in an environment of the function that
  runs no other invocation meanwhile, with its own import of the handler
  (:mod:`~locked_workflow.testing.lambda_environments`, with the AWS pages): concurrent
  invocations each see their own module state, an idle environment is reused warm, and
  each environment's Init (the handler's import) runs before the function's timeout starts -
  for up to Lambda's Init limit (10 s): past it, Lambda retries the Init within the
  invocation, under the function's timeout
  (https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html), so the
  timeout here starts at the Init's end or at the limit, whichever comes first, and an
  invocation whose Init outlasts both times out without running its handler. (Inits run
  one at a time here: on a loaded machine one may wait long behind the others; before,
  the timeout started after that wait, and a stopped holder's work could start past
  any stop grace.)
* **Environment variables**: ``os.environ`` is replaced (while the runtime is active) by a mapping
  with a per-thread overlay, so concurrent invocations of functions with different
  variables each see their own; everything else sees the process environment.
* **Errors**: an exception becomes a function error with payload
  ``{"errorType": <class name>, "errorMessage": ..., "stackTrace": [...]}``, which Step
  Functions turns into the error name ``<class name>``, as on AWS.
* **Timeout**: an invocation still running at its function's ``Timeout`` (default 3 s)
  fails at that moment with ``{"errorType": "Sandbox.Timedout", "errorMessage": "RequestId:
  ... Error: Task timed out after 3.00 seconds"}``, the error Lambda reports for a timed-out
  function (https://docs.aws.amazon.com/lambda/latest/dg/troubleshooting-invocation.html#troubleshooting-timeouts,
  timeout default and range: https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html);
  a Lambda task sees the error ``Sandbox.Timedout``, which ``States.TaskFailed`` and
  ``States.ALL`` match (https://docs.aws.amazon.com/step-functions/latest/dg/bp-lambda-serviceexception.html,
  whose older wording calls it ``Lambda.Unknown``: a Catch naming only that does not match here).
  **Stricter than AWS**: Lambda stops the handler at its timeout; a thread cannot be killed,
  so here the handler runs on after the error was returned, as zombie work - its late
  writes land. A protocol must tolerate that for as long as the handler may run (a lock's
  stop grace, fencing); ``get_remaining_time_in_millis`` reads 0 from the deadline on, so a
  handler that checks it can stop itself, as it would have been stopped on AWS.
* Not modelled: memory, concurrency limits.

Proof: ``tests/local/test_patch_lambda_in_process.py``.
"""

from __future__ import annotations

import collections.abc
import importlib
import importlib.util
import json
import os
import sys
import threading
import time
import traceback
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from locked_workflow.constructs_lib.lambda_limits import LAMBDA_INIT_LIMIT_S
from locked_workflow.testing import function_logs, lambda_imports
from locked_workflow.testing.lambda_environments import (
    ENVIRONMENT_PACKAGES,
    EnvironmentPool,
    ExecutionEnvironment,
    new_log_stream,
)

#: Variables every in-process function sees unless its own Environment overrides them.
#: Tracing is off: there is no X-Ray daemon offline.
DEFAULT_ENVIRONMENT = {
    "POWERTOOLS_TRACE_DISABLED": "true",
    "AWS_XRAY_SDK_ENABLED": "false",
}


#: The error type of an invocation that ran past its function's timeout.
TIMED_OUT = "Sandbox.Timedout"
#: How long an invocation's Init may run before the function's timeout starts (Lambda's Init
#: limit; a module attribute so a test can shorten it).
INIT_LIMIT_S: float = LAMBDA_INIT_LIMIT_S


class HandlerNotFoundError(RuntimeError):
    """The handler module or function cannot be imported from the code folder."""


@dataclass
class LambdaContext:
    """The ``context`` argument of a handler (the attributes of the Python runtime's)."""

    function_name: str
    function_version: str
    invoked_function_arn: str
    memory_limit_in_mb: int
    aws_request_id: str
    log_group_name: str
    log_stream_name: str
    timeout_s: int
    identity: Any = None
    client_context: Any = None
    _started: float = field(default_factory=time.monotonic, repr=False)

    def get_remaining_time_in_millis(self) -> int:
        left = self.timeout_s - (time.monotonic() - self._started)
        return max(0, int(left * 1000))


@dataclass
class Invocation:
    """Result of one invocation: the JSON payload and, for a failed one, the error type."""

    payload: bytes
    error_type: str | None = None

    @property
    def failed(self) -> bool:
        return self.error_type is not None


# ------------------------------------------------------------------------------------
# Per-thread environment overlay
# ------------------------------------------------------------------------------------

_DELETED = object()


class ThreadLocalEnviron(collections.abc.MutableMapping):
    """``os.environ`` stand-in: reads and writes go to a per-thread overlay when one is set."""

    def __init__(self, base: collections.abc.MutableMapping) -> None:
        self.base = base
        self._local = threading.local()

    def _overlay(self) -> dict[str, Any] | None:
        return getattr(self._local, "overlay", None)

    @contextmanager
    def overlay(self, variables: dict[str, str]) -> Iterator[None]:
        previous = self._overlay()
        merged = dict(previous or {})
        merged.update(variables)
        self._local.overlay = merged
        try:
            yield
        finally:
            self._local.overlay = previous

    def __getitem__(self, key: str) -> str:
        overlay = self._overlay()
        if overlay is not None and key in overlay:
            value = overlay[key]
            if value is _DELETED:
                raise KeyError(key)
            return value
        return self.base[key]

    def __setitem__(self, key: str, value: str) -> None:
        overlay = self._overlay()
        if overlay is None:
            self.base[key] = value
        else:
            overlay[key] = str(value)

    def __delitem__(self, key: str) -> None:
        overlay = self._overlay()
        if overlay is None:
            del self.base[key]
            return
        if key not in self:
            raise KeyError(key)
        overlay[key] = _DELETED

    def _keys(self) -> list[str]:
        overlay = self._overlay() or {}
        keys = [key for key in self.base if overlay.get(key, None) is not _DELETED]
        keys += [key for key, value in overlay.items() if key not in self.base and value is not _DELETED]
        return keys

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def copy(self) -> dict[str, str]:
        return dict(self)

    def __repr__(self) -> str:
        return f"ThreadLocalEnviron({dict(self)!r})"


def _environ() -> ThreadLocalEnviron | None:
    return os.environ if isinstance(os.environ, ThreadLocalEnviron) else None


@contextmanager
def function_environment(variables: dict[str, str]) -> Iterator[None]:
    """Apply ``variables`` for the current thread (process-wide when no overlay is installed)."""
    environ = _environ()
    if environ is not None:
        with environ.overlay(variables):
            yield
        return
    with restored_environ(variables):
        os.environ.update(variables)
        yield


@contextmanager
def restored_environ(keys: Iterable[str]) -> Iterator[None]:
    """On exit, put the process environment's ``keys`` back as they were (unset ones unset)."""
    saved = {key: os.environ.get(key) for key in keys}
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# ------------------------------------------------------------------------------------
# Functions
# ------------------------------------------------------------------------------------

_IMPORT_LOCK = threading.Lock()


@dataclass(frozen=True)
class _ImportPlan:
    """What an Init of a function imports: its handler's module and function, the folders put
    on ``sys.path`` (its code, then its layers), and the top-level names of those folders that
    are the function's own (not shared with the process)."""

    module_name: str
    function_name: str
    paths: tuple[str, ...]
    own: frozenset[str]



@dataclass
class InProcessFunction:
    """A Lambda function whose Python handler runs in this process."""

    name: str
    code_dir: Path
    handler: str
    region: str
    account_id: str
    environment: dict[str, str] = field(default_factory=dict)
    timeout_s: int = 3
    memory_mb: int = 128
    #: The content folders of the function's layers (each with a ``python/`` folder).
    layers: tuple[Path, ...] = ()
    #: Top-level packages the function's published layers carry (``lambda_imports``).
    layer_packages: frozenset[str] = frozenset()
    #: The function's execution environments (``lambda_environments``).
    environments: EnvironmentPool = field(default_factory=EnvironmentPool, repr=False)
    _plan: "_ImportPlan | None" = field(default=None, repr=False)

    @property
    def log_group(self) -> str:
        return f"/aws/lambda/{self.name}"

    def output(self, log_stream: str) -> function_logs.FunctionLog:
        """Where an environment's output goes: its log stream of the function's log group, not
        the process's output."""
        return function_logs.FunctionLog(self.region, self.account_id, self.log_group, log_stream)

    @property
    def arn(self) -> str:
        return f"arn:aws:lambda:{self.region}:{self.account_id}:function:{self.name}"

    def runtime_environment(self, log_stream: str) -> dict[str, str]:
        variables = dict(DEFAULT_ENVIRONMENT)
        variables.update(
            {
                "AWS_REGION": self.region,
                "AWS_DEFAULT_REGION": self.region,
                "AWS_LAMBDA_FUNCTION_NAME": self.name,
                "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(self.memory_mb),
                "AWS_LAMBDA_LOG_GROUP_NAME": self.log_group,
                "AWS_LAMBDA_LOG_STREAM_NAME": log_stream,
                "_HANDLER": self.handler,
            }
        )
        variables.update({key: str(value) for key, value in self.environment.items()})
        return variables

    # -- loading ------------------------------------------------------------------------

    def _import_plan(self) -> _ImportPlan:
        """What Init imports (read from the function's files once: its handler's imports are
        checked against what the function may import, :mod:`lambda_imports`). Call with
        ``_IMPORT_LOCK`` held."""
        if self._plan is not None:
            return self._plan
        module_path, _, function_name = self.handler.rpartition(".")
        if not module_path or not function_name:
            raise HandlerNotFoundError(f"{self.name}: bad Handler {self.handler!r} (want module.function)")
        module_name = module_path.replace("/", ".")
        code_dir = str(Path(self.code_dir).resolve())
        folders = [Path(code_dir)] + [p.resolve() for layer in self.layers for p in lambda_imports.layer_paths(Path(layer))]
        gaps = lambda_imports.unprovided(module_name, folders, self.layer_packages)
        if gaps:
            raise HandlerNotFoundError(
                f"{self.name}: its handler imports what neither its code asset {code_dir}, its "
                f"layers nor the Lambda Python runtime provide (on AWS: Runtime.ImportModuleError): "
                + ", ".join(f"{gap.name} (imported by {gap.importer})" for gap in gaps)
                + ". Ship it in the asset or a layer (the lock client: locked_workflow.LockClientLayer)"
            )
        own = lambda_imports.top_level_names(folders)
        shared = _shared_packages(self.name, folders, module_name, own)
        self._plan = _ImportPlan(module_name, function_name, tuple(str(folder) for folder in folders),
                                 frozenset(own - shared))
        return self._plan

    def _initialize(self) -> ExecutionEnvironment:
        """Init of a new execution environment: import the handler afresh, with the
        environment's own copies of the function's modules and of ``ENVIRONMENT_PACKAGES``."""
        log_stream = new_log_stream()
        modules: dict[str, Any] = {}
        with _IMPORT_LOCK:
            plan = self._import_plan()
            shadowed = {
                name: module
                for name, module in list(sys.modules.items())
                if (name.split(".")[0] in plan.own and not _is_installed(module))
                or name.split(".")[0] in ENVIRONMENT_PACKAGES
            }
            for name in shadowed:
                del sys.modules[name]
            before = set(sys.modules)
            paths = list(plan.paths)
            sys.path[0:0] = paths
            try:
                with function_environment(self.runtime_environment(log_stream)), \
                        function_logs.function_output(self.output(log_stream)):
                    module = importlib.import_module(plan.module_name)
            except ImportError as error:
                raise HandlerNotFoundError(
                    f"{self.name}: cannot import {plan.module_name!r} from {paths[0]}: {error}"
                ) from error
            finally:
                for path in paths:
                    sys.path.remove(path)
                for name in set(sys.modules) - before:  # what this Init imported
                    loaded = sys.modules[name]
                    if name.split(".")[0] in ENVIRONMENT_PACKAGES or any(_is_under(loaded, path) for path in paths):
                        modules[name] = loaded  # the environment's own
                        del sys.modules[name]
                sys.modules.update(shadowed)
            handler = getattr(module, plan.function_name, None)
            if not callable(handler):
                raise HandlerNotFoundError(f"{self.name}: {plan.module_name}.{plan.function_name} is not a function")
            return ExecutionEnvironment(handler, modules, log_stream)

    # -- invoking -----------------------------------------------------------------------

    def context(self, log_stream: str, started: float | None = None) -> LambdaContext:
        """The invocation's context; its timeout runs from ``started`` (``time.monotonic()``;
        default now)."""
        return LambdaContext(
            function_name=self.name,
            function_version="$LATEST",
            invoked_function_arn=self.arn,
            memory_limit_in_mb=self.memory_mb,
            aws_request_id=str(uuid.uuid4()),
            log_group_name=self.log_group,
            log_stream_name=log_stream,
            timeout_s=self.timeout_s,
            **({} if started is None else {"_started": started}),
        )

    def invoke(self, event: Any) -> Invocation:
        """Run the handler once, in an idle execution environment or a new one (its Init
        first), up to the function's timeout; errors become a function error payload.

        The handler runs on a thread of its own; at the timeout the invocation fails with
        ``Sandbox.Timedout`` while that thread, which nothing can stop, runs on, and its
        environment is never reused.
        """
        arrived = time.monotonic()
        environment, number = self.environments.take()
        if environment is None:
            try:
                environment = self._initialize()
            except Exception as error:  # noqa: BLE001 - an import error is the function's error
                return _error_invocation(error)
            self.environments.initialized_one(environment, number)
        log_stream, handler = environment.log_stream, environment.handler
        # the timeout starts once Init is done, or at the Init limit: Lambda retries an Init
        # past it within the invocation, under the function's timeout (Inits run one at a
        # time here: on a loaded machine one may wait long for the others)
        context = self.context(log_stream, started=min(time.monotonic(), arrived + INIT_LIMIT_S))
        if context.get_remaining_time_in_millis() <= 0 and self.environments.reset(environment, number):
            return self._timed_out(context)  # (its Init outlasted the limit and the timeout: never run)
        outcome: list[Invocation] = []
        finished = threading.Event()

        def run() -> None:
            try:
                with function_environment(self.runtime_environment(log_stream)), \
                        function_logs.function_output(self.output(log_stream)):
                    result = handler(event, context)
                outcome.append(Invocation(json.dumps(result).encode("utf-8")))
            except Exception as error:  # noqa: BLE001 - every error is the function's error
                outcome.append(_error_invocation(error))
            finally:
                self.environments.give_back(environment, number)  # (before the caller sees the result)
                finished.set()

        threading.Thread(target=run, name=f"lambda:{self.name}", daemon=True).start()
        if finished.wait(context.get_remaining_time_in_millis() / 1000) or not self.environments.reset(environment, number):
            finished.wait()  # (it ended as the timeout came: its outcome is there or comes at once)
            return outcome[0]
        return self._timed_out(context)

    def _timed_out(self, context: LambdaContext) -> Invocation:
        """The invocation's ``Sandbox.Timedout`` error."""
        message = f"RequestId: {context.aws_request_id} Error: Task timed out after {self.timeout_s:.2f} seconds"
        payload = {"errorType": TIMED_OUT, "errorMessage": message}
        return Invocation(json.dumps(payload).encode("utf-8"), error_type=TIMED_OUT)


def _error_invocation(error: Exception) -> Invocation:
    payload = {
        "errorType": type(error).__name__,
        "errorMessage": str(error),
        "stackTrace": traceback.format_tb(error.__traceback__.tb_next or error.__traceback__),
    }
    return Invocation(json.dumps(payload).encode("utf-8"), error_type=type(error).__name__)


def _is_installed(module: Any) -> bool:
    """True for modules of the interpreter's installation (site-packages, stdlib)."""
    path = getattr(module, "__file__", None)
    return path is None or _installed_path(path)


def _installed_path(path: str) -> bool:
    return any(part in path for part in ("site-packages", "dist-packages", sys.prefix, sys.base_prefix))


def _is_under(module: Any, directory: str) -> bool:
    path = getattr(module, "__file__", None)
    return path is not None and os.path.abspath(path).startswith(directory + os.sep)


def _shared_packages(function: str, folders: list[Path], module_name: str, own: set[str]) -> set[str]:
    """The top-level names of ``folders`` (the code folder, then the layers' content) this
    process may serve from its own modules; raises
    :class:`HandlerNotFoundError` if the handler imports a module the folder lacks that this
    process would supply.

    On AWS the function sees its asset alone (and the runtime's packages), while here a package
    the process finds outside its installation - this checkout, an editable install - would
    supply a module the asset lacks. For those packages alone the check reads the handler's
    imports (:mod:`locked_workflow.constructs_lib.code_closure`); a package that lives only in
    the asset fails its own import here as on AWS, and an installed one (boto3, Powertools) is
    the runtime's, as a layer's would be. Such a package (the checkout's ``locked_workflow``,
    which the janitor's bundle copies) is shared with the process when every module the handler
    takes from it is byte-identical to the process's own file: then it is the same code, and the
    process's modules are not taken away from its other threads while the function loads
    (another thread's import would meanwhile find the asset's copy, or none).
    """
    checked = {top for top in own if _supplied_from_outside(top)}
    if not checked:
        return set()
    from locked_workflow.constructs_lib import code_closure

    find = lambda_imports.multi_folder_finder(folders)
    code_dir = folders[0]
    handler = find(module_name)
    if handler is None or handler.path is None:
        return set()  # the import that follows reports it
    found, missing = code_closure.closure(
        [(module_name, handler.path)], find, within=lambda name: name.split(".")[0] in checked
    )
    if missing:
        raise HandlerNotFoundError(
            f"{function}: its code asset {code_dir} lacks what its handler imports (on AWS: "
            f"Runtime.ImportModuleError): "
            + ", ".join(f"{gap.name} (imported by {gap.importer})" for gap in missing)
        )
    shared = set()
    for top in checked:
        modules = {name: module for name, module in found.items() if name.split(".")[0] == top and module.path}
        if all(_same_file(name, module.path) for name, module in modules.items()):
            shared.add(top)
    return shared


def _supplied_from_outside(top: str) -> bool:
    """Whether this process finds the top-level module ``top`` outside its installation."""
    loaded = sys.modules.get(top)
    if loaded is not None:
        return not _is_installed(loaded)
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    origin = spec.origin if spec and spec.has_location else None
    if spec is not None and origin is None and spec.submodule_search_locations:
        origin = next(iter(spec.submodule_search_locations), None)  # a namespace package
    return origin is not None and not _installed_path(origin)


def _same_file(name: str, path: Path) -> bool:
    """Whether this process finds module ``name`` in a file with ``path``'s bytes."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    return bool(spec and spec.origin and spec.has_location) and Path(spec.origin).read_bytes() == path.read_bytes()


class FunctionRegistry:
    """Functions that run in-process, by function name (and ARN)."""

    def __init__(self) -> None:
        self._functions: dict[str, InProcessFunction] = {}

    def add(self, function: InProcessFunction) -> None:
        self._functions[function.name] = function

    def get(self, name_or_arn: str) -> InProcessFunction | None:
        if name_or_arn.startswith("arn:"):
            name_or_arn = name_or_arn.split(":")[6]
        return self._functions.get(name_or_arn)

    def __iter__(self) -> Iterator[InProcessFunction]:
        return iter(self._functions.values())

    def __len__(self) -> int:
        return len(self._functions)
