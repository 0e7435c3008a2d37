"""``LocalCloud``: an in-process AWS (moto + the runtime's fixes) to deploy and run stacks in.

::

    with LocalCloud() as cloud:                       # backend="dynamodb-local" for the Java DynamoDB
        app = cloud.deploy(template, assets_dir=Path("cdk.out"))
        arn = cloud.start_execution(app.state_machine_arn("Locked"), {"id": "1"})
        result = cloud.wait_for(arn)                  # ExecutionResult(status, output, error, cause, history)

Only one ``LocalCloud`` can be active at a time (moto and the fixes are process-wide).
"""

from __future__ import annotations

import gc
import json
import logging
import os
import threading
import time
import uuid
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from locked_workflow.testing import cdk_preload, deferred_imports

cdk_preload.start()  # node loads aws-cdk-lib while Python imports moto below
deferred_imports.defer_all()  # moto.batch (and moto.ec2 with it) load if something uses them

import boto3  # noqa: E402
from botocore.config import Config  # noqa: E402

from locked_workflow.testing import patches  # noqa: E402
from locked_workflow.testing.deployer import Deployer, Deployment  # noqa: E402
from locked_workflow.testing.dynamodb_local import CREDENTIALS, SERVERS, DynamoDBLocal  # noqa: E402
from locked_workflow.testing.events import EventRouter  # noqa: E402
from locked_workflow.testing.lambda_runtime import FunctionRegistry  # noqa: E402
from locked_workflow.testing import history_fast_path  # noqa: E402
from locked_workflow.testing.patches import execution_end, history_limit, task_tokens  # noqa: E402

BACKENDS = ("moto", "dynamodb-local")
DEFAULT_ACCOUNT_ID = "123456789012"
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"})

#: ``wait_all`` asks the API at least this often while the backend says an execution runs.
_DESCRIBE_EVERY_S = 1.0

#: Progress of ``wait_all`` (INFO).
_wait_log = logging.getLogger("locked_workflow.testing.wait")

_ACTIVE_LOCK = threading.Lock()
_active: "LocalCloud | None" = None


@dataclass
class ExecutionResult:
    """How an execution ended. ``output`` is parsed JSON; ``history`` the raw history events."""

    arn: str
    status: str
    output: Any = None
    error: str | None = None
    cause: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    start_date: Any = None
    stop_date: Any = None

    def __getitem__(self, key: str) -> Any:  # result["status"] works too
        return getattr(self, key)


class ExecutionsStillRunning(TimeoutError):
    """``wait_for``/``wait_all`` timed out: names each execution still running and where it is."""

    def __init__(self, timeout: float, whereabouts: list[str], waited_for: int) -> None:
        self.whereabouts = whereabouts
        super().__init__(f"{len(whereabouts)} of {waited_for} executions still running after {timeout:g} s: "
                         + "; ".join(whereabouts))


class LocalCloud:
    """An in-process AWS: moto with the runtime's fixes, optionally DynamoDB Local.

    Args:
        backend: ``"moto"`` (default) or ``"dynamodb-local"``: every DynamoDB call - the
            state machines', the in-process Lambdas', and :attr:`dynamodb` - goes to a
            DynamoDB Local server lent to this cloud, holding none of the tables of the clouds
            before it (the process's, started once: ``dynamodb_local.ServerPool``); everything
            else stays in moto.
        region: region of every client and resource. Default ``us-east-1``.
        account_id: moto's account. Default ``123456789012`` (moto's default).
        emit_status_events: put ``Step Functions Execution Status Change`` events on the
            default bus when executions end. Default True; see :attr:`events`.
        dynamodb_local_dir: folder holding ``DynamoDBLocal.jar``. Default: found by
            ``dynamodb_local.find_emulator_dir``.
        dynamodb_local_port: loopback port of the DynamoDB Local server (backend
            ``"dynamodb-local"`` only): a fixed endpoint, ``http://127.0.0.1:<port>``, to
            point another process at while a test runs - the lock CLI's ``--endpoint-url``,
            say. Default: a free port (:attr:`dynamodb_endpoint_url` names it).
        interpreter_logs: keep moto's interpreter logging, which logs every failed
            state (caught or not) at ERROR level. Default False (the history has it all).
        redrive_reevaluates_arguments: a redriven Parallel's ``Arguments`` and Inline Map's
            ``Items`` are evaluated again (the service does not say). Default False: they
            are not, so a resumed branch skips a gate there. See ``patches/redrive``.
        redrive_restores_variables: resumed steps see the variables they were entered with
            (the service does not say). Default True. See ``patches/redrive``.
        task_token_length: characters of every ``.waitForTaskToken`` / activity task token,
            1 to 2,048 (the API's bounds). Default 700, about the size of the service's
            largest (see ``patches/task_tokens``).
        history_event_limit: history events at which a Standard execution fails with
            ``States.Runtime``, as the service does at 25,000 (the default; see
            ``patches/history_limit``). A small limit lets a test reach it quickly.
    """

    def __init__(
        self,
        backend: str = "moto",
        *,
        region: str = "us-east-1",
        account_id: str = DEFAULT_ACCOUNT_ID,
        emit_status_events: bool = True,
        dynamodb_local_dir: Path | None = None,
        dynamodb_local_port: int | None = None,
        interpreter_logs: bool = False,
        redrive_reevaluates_arguments: bool = False,
        redrive_restores_variables: bool = True,
        task_token_length: int = task_tokens.DEFAULT_LENGTH,
        history_event_limit: int = history_limit.DEFAULT_LIMIT,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if dynamodb_local_port is not None:
            if isinstance(dynamodb_local_port, bool) or not isinstance(dynamodb_local_port, int) \
                    or not 1 <= dynamodb_local_port <= 65535:
                raise ValueError(f"`dynamodb_local_port` must be a TCP port from 1 to 65535, got: {dynamodb_local_port!r}")
            if backend != "dynamodb-local":
                raise ValueError(
                    "`dynamodb_local_port` must be left unset with backend='moto' (moto's DynamoDB is in "
                    f"this process, with no endpoint), got: {dynamodb_local_port}"
                )
        self.task_token_length = task_tokens.validate_length(task_token_length)
        self.history_event_limit = history_limit.validate_limit(history_event_limit)
        self.backend = backend
        self.region = region
        self.account_id = account_id
        self.interpreter_logs = interpreter_logs
        #: How RedriveExecution reads what the service leaves undocumented; read when a
        #: redrive starts (e.g. ``cloud.redrive_options.reevaluates_arguments = True``).
        self.redrive_options = patches.redrive.RedriveOptions(
            reevaluates_arguments=redrive_reevaluates_arguments, restores_variables=redrive_restores_variables
        )
        #: Local EventBridge switches and delivery log (e.g. ``cloud.events.emit_status_events = False``).
        self.events = EventRouter(emit_status_events=emit_status_events)
        #: How Lambda's retries of a failed asynchronous invocation are paced, and their log
        #: (e.g. ``cloud.async_invoke_options.time_scale = 1 / 30``; see ``patches/async_invoke_retries``).
        self.async_invoke_options = patches.async_invoke_retries.AsyncInvokeOptions()
        #: In-process Lambda functions by name.
        self.functions = FunctionRegistry()
        self.deployments: list[Deployment] = []
        self._dynamodb_local_dir = dynamodb_local_dir
        self._dynamodb_local_port = dynamodb_local_port
        self._dynamodb_local: DynamoDBLocal | None = None
        self._stack: ExitStack | None = None
        self._clients: dict[str, Any] = {}
        self._clients_lock = threading.Lock()

    # -- lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> "LocalCloud":
        global _active
        with _ACTIVE_LOCK:
            if _active is not None:
                raise RuntimeError("another LocalCloud is active (moto is process-wide); exit it first")
            _active = self
        stack = ExitStack()
        try:
            from moto import mock_aws

            if self.backend == "dynamodb-local":
                # the process's server, empty, given back empty (dynamodb_local.ServerPool)
                self._dynamodb_local = stack.enter_context(SERVERS.lend(self._dynamodb_local_dir, port=self._dynamodb_local_port))
            stack.enter_context(
                mock_aws(config={"stepfunctions": {"execute_state_machine": True}})
            )
            if not self.interpreter_logs:
                stack.enter_context(_quiet_logger("moto.stepfunctions.parser"))
            env = {"AWS_DEFAULT_REGION": self.region}
            if self._dynamodb_local is not None:
                # boto3 honours it for every DynamoDB client created from now on: the
                # state machines' (moto's boto_client_for), the Lambdas', the tests'.
                env["AWS_ENDPOINT_URL_DYNAMODB"] = self._dynamodb_local.endpoint_url
            stack.enter_context(_environment(env))
            patches.apply_all(
                stack,
                functions=self.functions,
                router=self.events,
                task_token_length=self.task_token_length,
                history_event_limit=self.history_event_limit,
                async_invoke_options=self.async_invoke_options,
            )
            patches.redrive.use_options(stack, self.redrive_options)
            # on exit, after the executions stop: no asynchronous invocation (the janitor's)
            # outlives the cloud, its mock and its endpoints
            stack.callback(self.async_invoke_options.close)
            stack.callback(self._stop_running_executions)  # runs first on exit
        except BaseException:
            stack.close()
            with _ACTIVE_LOCK:
                _active = None
            raise
        self._stack = stack
        return self

    def __exit__(self, *exc: object) -> None:
        global _active
        try:
            if self._stack is not None:
                self._stack.close()
        finally:
            gc.unfreeze()  # what deploy froze can be collected again
            self._stack = None
            self._clients.clear()
            self._dynamodb_local = None
            with _ACTIVE_LOCK:
                _active = None

    def _stop_running_executions(self) -> None:
        """Abort what still runs, so no worker thread calls AWS after moto is gone."""
        backend = self._sfn_backend()
        running = [e for sm in backend.state_machines for e in sm.executions if e.status == "RUNNING"]
        self.events.emit_status_events = False
        for execution in running:
            try:
                execution.stop(stop_date=None, error="LocalCloud.Closed", cause="the local cloud was closed")
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
        from moto.stepfunctions.parser.utils import TMP_THREADS

        deadline = time.monotonic() + 0.5
        for thread in list(TMP_THREADS):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            thread.join(timeout=left)
        TMP_THREADS.clear()

    def _require_active(self) -> None:
        if self._stack is None:
            raise RuntimeError("use LocalCloud as a context manager: `with LocalCloud() as cloud:`")

    # -- clients ------------------------------------------------------------------------

    def client(self, service: str) -> Any:
        """A boto3 client for ``service`` bound to this cloud (DynamoDB: the active backend)."""
        self._require_active()
        with self._clients_lock:
            if service not in self._clients:
                kwargs: dict[str, Any] = {"region_name": self.region}
                if service == "dynamodb" and self._dynamodb_local is not None:
                    kwargs.update(endpoint_url=self._dynamodb_local.endpoint_url, **CREDENTIALS)
                kwargs["config"] = Config(retries={"max_attempts": 3, "mode": "standard"})
                self._clients[service] = boto3.client(service, **kwargs)
            return self._clients[service]

    @property
    def dynamodb(self) -> Any:
        """boto3 DynamoDB client of the active backend."""
        return self.client("dynamodb")

    @property
    def stepfunctions(self) -> Any:
        return self.client("stepfunctions")

    @property
    def dynamodb_endpoint_url(self) -> str | None:
        """DynamoDB Local's endpoint (None on the moto backend)."""
        return self._dynamodb_local.endpoint_url if self._dynamodb_local else None

    # -- deploy -------------------------------------------------------------------------

    def deploy(
        self,
        template: Mapping[str, Any],
        *,
        assets_dir: Path | str | None = None,
        assets: Mapping[str, Path | str] | None = None,
        stack_name: str = "LocalStack",
        parameters: Mapping[str, Any] | None = None,
    ) -> Deployment:
        """Deploy a synthesized template; see ``deployer`` for what is created.

        ``assets_dir``: the cdk.out folder (``aws:asset:path`` metadata is relative to it).
        ``assets``: logical id or CDK path (prefix) -> code folder, for functions whose
        template has no asset metadata (e.g. ``Template.from_stack`` output).
        """
        self._require_active()
        deployer = Deployer(
            client=self.client, functions=self.functions, region=self.region, account_id=self.account_id
        )
        deployment = deployer.deploy(
            template,
            stack_name=stack_name,
            assets_dir=Path(assets_dir) if assets_dir else None,
            assets={k: Path(v) for k, v in (assets or {}).items()},
            parameters=parameters,
        )
        self.deployments.append(deployment)
        _freeze_what_lives()
        return deployment

    # -- executions ---------------------------------------------------------------------

    def start_execution(self, state_machine_arn: str, input: Any = None, *, name: str | None = None) -> str:
        """Start an execution (named with a fresh UUID unless ``name`` is given); returns its ARN."""
        payload = input if isinstance(input, str) else json.dumps({} if input is None else input)
        response = self.stepfunctions.start_execution(
            stateMachineArn=state_machine_arn, name=name or str(uuid.uuid4()), input=payload
        )
        return response["executionArn"]

    def describe(self, execution_arn: str) -> dict[str, Any]:
        return self.stepfunctions.describe_execution(executionArn=execution_arn)

    def status(self, execution_arn: str) -> str:
        return self.describe(execution_arn)["status"]

    def wait_for(self, execution_arn: str, timeout: float = 60.0, *, poll_s: float = 0.05) -> ExecutionResult:
        """Wait until the execution ends; raises :class:`ExecutionsStillRunning` (a
        ``TimeoutError`` naming its status and the state it is in) if it does not."""
        return self.wait_all([execution_arn], timeout, poll_s=poll_s)[0]

    def wait_all(self, execution_arns: list[str], timeout: float = 120.0, *, poll_s: float = 0.05,
                 progress_s: float = 10.0) -> list[ExecutionResult]:
        """Wait until every execution ends, in the order given.

        Between polls it waits on the end of any execution (``patches/execution_end``), so it
        returns as soon as the last one ends; ``poll_s`` is only the longest wait between polls.

        Every ``progress_s`` seconds logs how many are still running, and which (logger
        ``locked_workflow.testing.wait``, INFO: ``--log-cli-level=INFO`` shows it live, and
        pytest shows it with a failing test). At ``timeout``, raises
        :class:`ExecutionsStillRunning` naming each execution still running, the state it
        is in and for how long.
        """
        deadline = time.monotonic() + timeout
        next_report = time.monotonic() + progress_s
        ended: dict[str, dict[str, Any]] = {}
        for arn in execution_arns:  # one at a time: a poll describes one execution, not all
            # not at once: while the backend says it runs, the answer is RUNNING (an ARN the
            # backend does not know goes to the API at the first poll)
            next_describe = time.monotonic() + _DESCRIBE_EVERY_S
            while arn not in ended:
                seen = execution_end.ended_count()
                # The API's DescribeExecution decides; between its calls (one a second at
                # least) the backend's status says when to call it - a poll without building a
                # response (about 6 ms each, for every waited execution, 20 times a second).
                if self._ended_in_backend(arn) or time.monotonic() >= next_describe:
                    description = self.describe(arn)
                    if description["status"] in TERMINAL:
                        ended[arn] = description
                        break
                    next_describe = time.monotonic() + _DESCRIBE_EVERY_S
                now = time.monotonic()
                if now >= deadline or now >= next_report:
                    running = [a for a in execution_arns if a not in ended and self.status(a) not in TERMINAL]
                    if now >= deadline:
                        raise ExecutionsStillRunning(timeout, [self.whereabouts(a) for a in running], len(execution_arns))
                    _wait_log.info("waiting for %d of %d executions: %s", len(running), len(execution_arns),
                                   "; ".join(self.whereabouts(a) for a in running[:5]))
                    next_report = now + progress_s
                # woken as soon as an execution ends (the poll interval is the longest wait)
                execution_end.wait_for_end(seen, poll_s)
        return [self._result(arn, ended[arn]) for arn in execution_arns]

    def _ended_in_backend(self, execution_arn: str) -> bool:
        """Whether moto's execution object has a terminal status (a hint for :meth:`wait_all`;
        ``True`` when it cannot tell, so the API is asked)."""
        try:
            status = self.moto_execution(execution_arn).exec_status
        except Exception:  # noqa: BLE001 - unknown here: the API answers
            return True
        return getattr(status, "value", status) in TERMINAL

    def whereabouts(self, execution_arn: str) -> str:
        """Where a running execution is: ``<name> RUNNING in state 'X' for 12.3 s`` (its history's
        last state entered that has not exited, and the last event)."""
        events = self.history(execution_arn)
        status = self.describe(execution_arn)["status"]
        open_states: list[tuple[str, Any]] = []
        for event in events:
            entered = event.get("stateEnteredEventDetails")
            exited = event.get("stateExitedEventDetails")
            if entered:
                open_states.append((entered["name"], event["timestamp"]))
            elif exited:
                for n in range(len(open_states) - 1, -1, -1):
                    if open_states[n][0] == exited["name"]:
                        del open_states[n]
                        break
        name = execution_arn.rsplit(":", 1)[-1]
        last = events[-1]["type"] if events else "no event"
        if not open_states:
            return f"{name} {status} (last event {last})"
        state, since = open_states[-1]
        seconds = time.time() - since.timestamp() if hasattr(since, "timestamp") else float("nan")
        return f"{name} {status} in state {state!r} for {seconds:.1f} s (last event {last})"

    def _result(self, execution_arn: str, description: dict[str, Any]) -> ExecutionResult:
        output = description.get("output")
        return ExecutionResult(
            arn=execution_arn,
            status=description["status"],
            output=json.loads(output) if output else None,
            error=description.get("error"),
            cause=description.get("cause"),
            history=self.history(execution_arn),
            start_date=description.get("startDate"),
            stop_date=description.get("stopDate"),
        )

    def stop_execution(self, execution_arn: str, *, error: str | None = None, cause: str | None = None) -> None:
        kwargs = {k: v for k, v in (("error", error), ("cause", cause)) if v is not None}
        self.stepfunctions.stop_execution(executionArn=execution_arn, **kwargs)

    def history(self, execution_arn: str) -> list[dict[str, Any]]:
        """History events of an execution (all pages), exactly as boto3 returns them.

        Read through :func:`history_fast_path.parsed_history`: the backend's events, parsed by
        botocore's own parser for ``GetExecutionHistory``'s output, without moto's generic
        response serializer (about 3 ms an event: the largest cost of a test's harness). An
        execution the backend does not know goes through the client, which raises the
        ``ClientError`` boto3 raises. ``tests/local/test_history_fast_path.py`` shows both paths
        return the same events."""
        events = history_fast_path.parsed_history(self.stepfunctions, self._sfn_backend(), execution_arn)
        return events if events is not None else self.api_history(execution_arn)

    def api_history(self, execution_arn: str) -> list[dict[str, Any]]:
        """History events of an execution (all pages), through the API client and moto's response."""
        paginator_args = {"executionArn": execution_arn, "maxResults": 1000}
        events: list[dict[str, Any]] = []
        response = self.stepfunctions.get_execution_history(**paginator_args)
        events.extend(response["events"])
        while response.get("nextToken"):
            response = self.stepfunctions.get_execution_history(nextToken=response["nextToken"], **paginator_args)
            events.extend(response["events"])
        return events

    def function_logs(self, function_name: str) -> list[str]:
        """What the function wrote (``print``, ``logging``, Powertools, warnings), a line each, in
        order: on AWS it goes to CloudWatch Logs, and so it does here, not to the test's output
        (:mod:`locked_workflow.testing.function_logs`). The lines of all its log streams (one per
        execution environment) in the order they were written (by timestamp; a stream's own
        lines keep their order)."""
        logs = self.client("logs")
        group = f"/aws/lambda/{function_name}"
        if not logs.describe_log_groups(logGroupNamePrefix=group)["logGroups"]:
            return []
        pages = logs.get_paginator("filter_log_events").paginate(logGroupName=group)
        events = sorted((event for page in pages for event in page["events"]), key=lambda event: event["timestamp"])
        return [event["message"] for event in events]

    def executions(self, state_machine_arn: str, status: str | None = None) -> list[dict[str, Any]]:
        kwargs = {"stateMachineArn": state_machine_arn}
        if status:
            kwargs["statusFilter"] = status
        pages = self.stepfunctions.get_paginator("list_executions").paginate(**kwargs)
        return [item for page in pages for item in page["executions"]]

    # -- events -------------------------------------------------------------------------

    def put_events(self, entries: list[dict[str, Any]]) -> dict[str, Any]:
        """``events.put_events`` (batches of 10); ``Detail`` may be a dict. Matching rules deliver."""
        normalised = []
        for entry in entries:
            entry = dict(entry)
            if not isinstance(entry.get("Detail", ""), str):
                entry["Detail"] = json.dumps(entry["Detail"])
            normalised.append(entry)
        results: dict[str, Any] = {"FailedEntryCount": 0, "Entries": []}
        for start in range(0, len(normalised), 10):
            response = self.client("events").put_events(Entries=normalised[start : start + 10])
            results["FailedEntryCount"] += response.get("FailedEntryCount", 0)
            results["Entries"].extend(response["Entries"])
        return results

    # -- internals ----------------------------------------------------------------------

    def _sfn_backend(self) -> Any:
        from moto.stepfunctions.responses import get_backend

        return get_backend(self.account_id, self.region)

    def moto_execution(self, execution_arn: str) -> Any:
        """moto's parser ``Execution`` object (for what the API does not expose)."""
        return self._sfn_backend().describe_execution(execution_arn)


def _freeze_what_lives() -> None:
    """Move every object alive now (the imports, moto's backends, the deployed stack) out of the
    garbage collector's sight: a full collection then walks only what the executions create,
    not the hundreds of thousands of objects of the libraries, and stops every execution's
    thread for milliseconds instead of tenths of a second. Only a memory matter: nothing frozen
    is freed until the cloud's exit unfreezes it (after a collection, so what is frozen is alive)."""
    gc.collect()
    gc.freeze()


class _environment:
    """Set environment variables for the cloud's lifetime (restored on exit)."""

    def __init__(self, variables: dict[str, str]) -> None:
        self.variables = variables
        self.saved: dict[str, str | None] = {}

    def __enter__(self) -> None:
        for key, value in self.variables.items():
            self.saved[key] = os.environ.get(key)
            os.environ[key] = value

    def __exit__(self, *exc: object) -> None:
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextmanager
def _quiet_logger(name: str) -> Iterator[None]:
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def active_cloud() -> LocalCloud | None:
    """The LocalCloud currently entered, if any."""
    return _active


__all__ = ["LocalCloud", "ExecutionResult", "active_cloud", "BACKENDS"]
