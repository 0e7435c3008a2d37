"""``RedriveExecution``: a failed, stopped or timed-out Standard execution continues.

Gap (moto 5.2.1): there is no ``RedriveExecution`` (the call fails as not implemented), and
``$states.context.Execution.RedriveCount`` does not exist.

Fix, modelled on the service's documented behaviour - "Restarting state machine executions
with redrive" (https://docs.aws.amazon.com/step-functions/latest/dg/redrive-executions.html,
with its table "Redrive behavior of individual states") and the API reference
(https://docs.aws.amazon.com/step-functions/latest/apireference/API_RedriveExecution.html):

* the execution keeps its ARN, definition and input and continues "from the unsuccessful
  step": the top-level state that was running, or failed, when the execution ended is entered
  again with the input it had; earlier successful states are not run again;
* a Parallel "reschedules and redrives only those branches that failed or aborted", an Inline
  Map "only those iterations that failed or aborted": a branch (iteration) that succeeded keeps
  its recorded output and runs nothing; one that failed, or was cut short by a sibling's
  failure, a stop or a timeout, resumes at its own unsuccessful step - the state it was in,
  entered again with the input it had then (a Task in flight starts again from its start) -
  and so on down nested Parallel and Map states (the guide's console example restarts the
  failed Lambda task *inside* a Parallel branch). An iteration that never started starts now;
* a Parallel or Map that failed with ``States.DataLimitExceeded`` is rerun whole, branches
  (iterations) that had succeeded included;
* retry counts restart at 0 ("the retry attempt count for these states is reset to 0") and
  the state machine's ``TimeoutSeconds`` starts again; ``$states.context.Execution.RedriveCount``
  counts the redrives (0 in a first run) and ``RedriveTime`` is the last redrive's time
  (https://docs.aws.amazon.com/step-functions/latest/dg/input-output-contextobject.html);
* ``DescribeExecution`` reports ``redriveCount``, ``redriveDate`` and ``redriveStatus`` (and,
  as the service does, the ``stopDate`` of a TIMED_OUT execution); the history gets an
  ``ExecutionRedriven`` event and goes on with the resumed states' events (a kept branch adds
  none); when the execution ends again, its status-change event is emitted again (with
  ``redriveCount``);
* RUNNING, SUCCEEDED and EXPRESS executions raise ``ExecutionNotRedrivable``.

Where the service is silent, the runtime takes the reading that is harder on a lock, and
offers the other one (``RedriveOptions``, ``LocalCloud(redrive_...)``; read when a redrive
starts, so a test may change ``cloud.redrive_options`` between two redrives):

* ``reevaluates_arguments`` (default ``False``): whether a redriven Parallel's ``Arguments``
  (``Parameters``) or an Inline Map's ``Items`` are evaluated again. By default they are not:
  the state's branches get the value its first run computed, so a gate in ``Arguments`` does
  not run and a resumed branch walks past it. With
  ``True`` they are evaluated again (their errors and the state's Catch apply as on any
  entry), and a branch (iteration) that never left its first step starts again from its
  start with the new value; the others resume their unsuccessful step with its recorded
  input either way.
* ``restores_variables`` (default ``True``): every resumed step sees the variables (each
  scope: the top level, every branch and iteration) as they were when it was entered in the
  earlier run. That is harder on a lock than losing them: a resumed step of protected work
  still reads ``$lock`` - the owner and fence of an acquisition another run may have taken
  over since - and carries on, where a lost variable would fail the step. ``False`` models
  the loss: resumed steps start with no variables of their own scope or above.

Work started before the end and still running (a Lambda invocation) is not affected by a
redrive; its late events stay out of the history. A Distributed Map is rerun whole (its Map
Run redrive is not modelled).

Proof: ``tests/local/test_patch_redrive.py``.
"""

from __future__ import annotations

import copy
import datetime
import sys
import threading
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Callable

from moto.core.exceptions import JsonRESTError
from moto.core.responses import ActionResult
from moto.stepfunctions.parser.api import (
    ExecutionRedrivenEventDetails,
    ExecutionStatus,
    HistoryEventType,
    StateMachineType,
)
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
    FailureEvent,
    FailureEventException,
)
from moto.stepfunctions.parser.asl.component.common.parargs import Parargs
from moto.stepfunctions.parser.asl.component.eval_component import EvalComponent
from moto.stepfunctions.parser.asl.component.program.program import Program
from moto.stepfunctions.parser.asl.component.state.exec.state_map.items.items import Items
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.inline_iteration_component import (
    InlineIterationComponent,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.itemprocessor.inline_item_processor_worker import (
    InlineItemProcessorWorker,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.iteration_worker import (
    IterationWorker,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.iterator.inline_iterator_worker import (
    InlineIteratorWorker,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.job import JobPool
from moto.stepfunctions.parser.asl.component.state.exec.state_map.max_concurrency import (
    DEFAULT_MAX_CONCURRENCY_VALUE,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.state_map import StateMap
from moto.stepfunctions.parser.asl.component.state.exec.state_parallel import branches_decl
from moto.stepfunctions.parser.asl.component.state.exec.state_parallel.branch_worker import BranchWorker
from moto.stepfunctions.parser.asl.component.state.exec.state_parallel.state_parallel import StateParallel
from moto.stepfunctions.parser.asl.component.state.state import CommonStateField
from moto.stepfunctions.parser.asl.eval.environment import Environment
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
from moto.stepfunctions.parser.asl.eval.event.event_manager import EventManager
from moto.stepfunctions.parser.asl.eval.program_state import ProgramEnded, ProgramError
from moto.stepfunctions.parser.backend.execution import Execution
from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker
from moto.stepfunctions.parser.utils import TMP_THREADS
from moto.stepfunctions.responses import StepFunctionResponse

from locked_workflow.testing.seams import patch_attribute, wrap

REDRIVABLE = (ExecutionStatus.FAILED, ExecutionStatus.ABORTED, ExecutionStatus.TIMED_OUT)
DATA_LIMIT_EXCEEDED = "States.DataLimitExceeded"

#: Where a state runs: () at the top level; one (state name, branch or item index) per
#: Parallel branch or Map iteration it is nested in.
Path = tuple[tuple[str, int], ...]
_NOTHING = object()


class ExecutionNotRedrivable(JsonRESTError):
    code = 400

    def __init__(self, message: str) -> None:
        super().__init__("ExecutionNotRedrivable", message)


@dataclass
class RedriveOptions:
    """How a redrive reads what the service leaves undocumented (see the module notes).

    Attributes:
        reevaluates_arguments: evaluate a redriven Parallel's ``Arguments`` (``Parameters``)
            and an Inline Map's ``Items`` again. Default False.
        restores_variables: resumed steps see the variables they were entered with. Default True.
    """

    reevaluates_arguments: bool = False
    restores_variables: bool = True


@dataclass
class _Step:
    """A state as a path entered it: where that path resumes."""

    state: str
    input: Any
    variables: dict
    entries: int  # states the path had entered, this one included


@dataclass
class _PathRecord:
    """What one path (the top level, a branch, an iteration) did in a run."""

    step: _Step | None = None
    succeeded: bool = False
    output: Any = None  # when it succeeded
    error: str | None = None  # when it failed


@dataclass
class _Plan:
    """The record of the run a redrive continues."""

    paths: dict[Path, _PathRecord] = field(default_factory=dict)
    inputs: dict[tuple[Path, str], Any] = field(default_factory=dict)  # a Parallel's/Map's evaluated input

    def resumes(self, path: Path) -> bool:
        """Does the state ``path`` ended in resume its branches (not rerun whole)?"""
        record = self.paths.get(path)
        return record is not None and record.error != DATA_LIMIT_EXCEEDED


def _below(key: Path, path: Path, state: str) -> bool:
    return len(key) > len(path) and key[: len(path)] == path and key[len(path)][0] == state


class _Run:
    """One run of an execution (its first, or one per redrive): what every path does, the
    record it continues from (``plan``) and the Parallel/Map states in their first attempt
    since they resumed (``first_attempt``, by path and name: the state)."""

    def __init__(self, plan: _Plan | None = None, options: RedriveOptions | None = None) -> None:
        self._lock = threading.Lock()
        self.record = _Plan()
        self.plan = plan or _Plan()
        self.options = options or RedriveOptions()
        self.first_attempt: dict[tuple[Path, str], CommonStateField] = {}

    def _forget_below(self, path: Path, state: str) -> None:
        paths, inputs = self.record.paths, self.record.inputs
        for key in [k for k in paths if _below(k, path, state)]:
            del paths[key]
        for key in [k for k in inputs if (k[0] == path and k[1] == state) or _below(k[0], path, state)]:
            del inputs[key]

    def entered(self, path: Path, state: str, input: Any, variables: dict, base: int) -> None:
        step = _Step(state, copy.deepcopy(input), copy.deepcopy(variables), 0)
        with self._lock:
            previous = self.record.paths.get(path)
            step.entries = (previous.step.entries if previous and previous.step else base) + 1
            self.record.paths[path] = _PathRecord(step=step)
            self._forget_below(path, state)  # an earlier entry's branches are not this one's

    def started_branches(self, path: Path, state: str, value: Any) -> None:
        value = copy.deepcopy(value)
        with self._lock:
            self._forget_below(path, state)  # an earlier attempt's branches are not this one's
            self.record.inputs[(path, state)] = value

    def keep(self, path: Path, record: _PathRecord) -> None:
        with self._lock:
            self.record.paths[path] = copy.deepcopy(record)

    def ended(self, path: Path, env: Environment) -> None:
        """A branch or iteration ended: remember its output or error (not a stop)."""
        state = env.program_state()
        if isinstance(state, ProgramEnded):
            succeeded, output, error = True, copy.deepcopy(env.states.get_input()), None
        elif isinstance(state, ProgramError):
            succeeded, output, error = False, None, (state.error or {}).get("error")
        else:
            return
        with self._lock:
            record = self.record.paths.setdefault(path, _PathRecord())
            record.succeeded, record.output, record.error = succeeded, output, error

    def snapshot(self) -> _Plan:
        with self._lock:
            return copy.deepcopy(self.record)

    def resume_step(self, record: _PathRecord | None) -> _Step | None:
        """Where a branch or iteration that did not succeed resumes (None: from its start)."""
        if record is None or record.step is None:
            return None
        if self.options.reevaluates_arguments and record.step.entries == 1:
            return None  # never left its first step: it starts again with the new input
        return record.step


def _run_of(env: Environment) -> _Run | None:
    return getattr(env, "_local_run", None)


def _path_of(env: Environment) -> Path:
    return getattr(env, "_local_path", ())


def _state_key(env: Environment) -> tuple[Path, str]:
    """(path, name) of the state ``env`` (or a frame of its evaluation) belongs to."""
    return _path_of(env), env.states.context_object.context_object_data["State"]["Name"]


# -- every run: paths, records ---------------------------------------------------------------


def _with_run(original):  # type: ignore[no-untyped-def]
    def _get_evaluation_environment(self):  # type: ignore[no-untyped-def]
        env = original(self)
        env._local_run = _Run()
        env._local_path = ()
        return env

    return _get_evaluation_environment


def _inheriting_run(original):  # type: ignore[no-untyped-def]
    def as_inner_frame_of(cls, env, variable_store, event_history_frame_cache=None):  # type: ignore[no-untyped-def]
        frame = original.__func__(cls, env, variable_store, event_history_frame_cache)
        frame._local_run = _run_of(env)
        frame._local_path = _path_of(env)
        return frame

    return classmethod(as_inner_frame_of)


def _recording_entries(original):  # type: ignore[no-untyped-def]
    def eval(self, env):  # type: ignore[no-untyped-def]
        execution = env.states.context_object.context_object_data.get("Execution")
        if isinstance(execution, dict):
            execution.setdefault("RedriveCount", 0)  # the service sets it in every run
        run = _run_of(env)
        if run is None or not env.is_running():
            return original(self, env)
        path = _path_of(env)
        resumed = env.__dict__.pop("_local_resumed_state", None) == self.name
        run.entered(path, self.name, env.states.get_input(), env.variable_store._inner_scope,
                    env.__dict__.pop("_local_entries_base", 0))
        key = (path, self.name)
        if resumed and isinstance(self, (StateParallel, StateMap)) and run.plan.resumes(path):
            run.first_attempt[key] = self
        try:
            return original(self, env)
        finally:
            run.first_attempt.pop(key, None)

    return eval


def _first_attempt_only(original):  # type: ignore[no-untyped-def]
    def _handle_retry(self, env, failure_event):  # type: ignore[no-untyped-def]
        run = _run_of(env)
        if run is not None:
            run.first_attempt.pop((_path_of(env), self.name), None)  # a retry reruns the state whole
        return original(self, env, failure_event)

    return _handle_retry


# -- resuming ----------------------------------------------------------------------------------


def _resuming_program(original):  # type: ignore[no-untyped-def]
    def eval(self, env):  # type: ignore[no-untyped-def]
        step: _Step | None = env.__dict__.pop("_local_resume_step", None)
        if step is None:
            return original(self, env)
        env.next_state_name = step.state
        env.states.reset(input_value=step.input)
        run = _run_of(env)
        if run is not None and run.options.restores_variables:
            env.variable_store._inner_scope.update(copy.deepcopy(step.variables))
            env.variable_store._variable_declarations_cache = None
        env._local_resumed_state = step.state
        env._local_entries_base = step.entries - 1
        body = threading.Thread(target=EvalComponent.eval, args=(self, env), daemon=True)
        TMP_THREADS.append(body)
        body.start()
        body.join(timeout=self.timeout_seconds.timeout_seconds if self.timeout_seconds else None)
        if body.is_alive():
            env.set_timed_out()

    return eval


def _replayed(env: Environment, component: EvalComponent, attribute: str) -> Any:
    """The value a resumed Parallel's Arguments (Map's Items) had, if it is not evaluated again."""
    run = _run_of(env)
    if run is None or run.options.reevaluates_arguments:
        return _NOTHING
    key = _state_key(env)
    state = run.first_attempt.get(key)
    if state is None or getattr(state, attribute, None) is not component:
        return _NOTHING
    value = run.plan.inputs.get(key, _NOTHING)
    return _NOTHING if value is _NOTHING else copy.deepcopy(value)


def _replaying(original: Callable, attribute: str):  # type: ignore[no-untyped-def]
    def evaluate(self, env):  # type: ignore[no-untyped-def]
        value = _replayed(env, self, attribute)
        if value is _NOTHING:
            return original(self, env)
        env.stack.append(value)

    return evaluate


class _RecordingComm(BranchWorker.BranchWorkerComm):
    """Tells the run how a branch ended, then the branches' pool."""

    def __init__(self, pool: BranchWorker.BranchWorkerComm, run: _Run | None, path: Path) -> None:
        self._pool, self._run, self._path = pool, run, path

    def on_terminated(self, env: Environment) -> None:
        if self._run is not None:
            self._run.ended(self._path, env)
        self._pool.on_terminated(env)


def _branches(self, env):  # type: ignore[no-untyped-def]
    """``BranchesDecl._eval_body``: moto's, with paths, records and resumed branches."""
    input_val = env.stack.pop()
    run = _run_of(env)
    path, name = _state_key(env)
    resuming = run is not None and (path, name) in run.first_attempt
    if run is not None:
        run.started_branches(path, name, input_val)
    outputs: dict[int, Any] = {}
    launches = []
    for index, program in enumerate(self.programs):
        branch = path + ((name, index),)
        record = run.plan.paths.get(branch) if resuming else None
        if record is not None and record.succeeded:
            outputs[index] = copy.deepcopy(record.output)
            run.keep(branch, record)
            continue
        frame: Environment = env.open_inner_frame()
        frame._local_path = branch
        frame.states.reset(input_value=input_val)
        step = run.resume_step(record) if resuming else None
        if step is not None:
            frame._local_resume_step = step
        launches.append((index, frame, program))

    pool = branches_decl.BranchWorkerPool(workers_num=len(launches))
    workers = []
    for index, frame, program in launches:
        worker = BranchWorker(branch_worker_comm=_RecordingComm(pool, run, _path_of(frame)), program=program, env=frame)
        workers.append((index, worker))
        worker.start()
    if workers:
        pool.wait()

    exit_event_details = pool.get_exit_event_details()
    if exit_event_details is not None:
        for _, worker in workers:
            worker.stop(stop_date=datetime.datetime.now(), cause=None, error=None)
            env.close_frame(worker.env)
        raise FailureEventException(
            failure_event=FailureEvent(
                env=env,
                error_name=branches_decl.CustomErrorName(error_name=exit_event_details.get("error")),
                event_type=HistoryEventType.ExecutionFailed,
                event_details=EventDetails(executionFailedEventDetails=exit_event_details),
            )
        )
    for index, worker in workers:
        outputs[index] = worker.env.states.get_input()
        env.close_frame(worker.env)
    env.stack.append([outputs[index] for index in range(len(self.programs))])


def _iterations(self, env):  # type: ignore[no-untyped-def]
    """``InlineIterationComponent._eval_body``: moto's, with records and resumed iterations."""
    eval_input = env.stack.pop()
    items = eval_input.input_items
    run = _run_of(env)
    path, name = _path_of(env), eval_input.state_name
    resuming = run is not None and (path, name) in run.first_attempt
    if run is not None:
        run.started_branches(path, name, items)
    outputs: dict[int, Any] = {}
    rerun: list[tuple[int, _Step | None]] = []
    for index in range(len(items)):
        iteration = path + ((name, index),)
        record = run.plan.paths.get(iteration) if resuming else None
        if record is not None and record.succeeded:
            outputs[index] = copy.deepcopy(record.output)
            run.keep(iteration, record)
        else:
            rerun.append((index, run.resume_step(record) if resuming else None))

    job_pool = JobPool(job_program=self._get_iteration_program(), job_inputs=[items[i] for i, _ in rerun])
    for job, (index, step) in zip(reversed(job_pool._open_jobs), rerun):
        job.job_index = index
        job._local_resume_step = step
    workers = len(rerun) if eval_input.max_concurrency == DEFAULT_MAX_CONCURRENCY_VALUE else eval_input.max_concurrency
    for _ in range(workers):
        self._launch_worker(env=env, eval_input=eval_input, job_pool=job_pool)
    job_pool.await_jobs()

    worker_exception = job_pool.get_worker_exception()
    if worker_exception is not None:
        raise worker_exception
    outputs.update({closed.job_index: closed.job_output for closed in job_pool.get_closed_jobs()})
    env.stack.append([outputs[index] for index in range(len(items))])


def _recording_jobs(original):  # type: ignore[no-untyped-def]
    def _eval_job(self, env, job):  # type: ignore[no-untyped-def]
        path = _path_of(env) + ((self._work_name, job.job_index),)
        env._local_path = path
        step = getattr(job, "_local_resume_step", None)
        if step is not None:
            env._local_resume_step = step
        original(self, env, job)
        run = _run_of(env)
        if run is not None:
            run.ended(path, env)

    return _eval_job


def _resumed_input_kept(original):  # type: ignore[no-untyped-def]
    def _eval_input(self, env_frame):  # type: ignore[no-untyped-def]
        if getattr(env_frame, "_local_resume_step", None) is not None:
            return  # ItemSelector/Parameters made the input the resumed step had: not again
        return original(self, env_frame)

    return _eval_input


# -- the API ---------------------------------------------------------------------------------

_options = RedriveOptions()


def use_options(stack: ExitStack, options: RedriveOptions) -> None:
    """Redrives read ``options`` (at the start of each redrive) until ``stack`` closes."""
    patch_attribute(stack, sys.modules[__name__], "_options", options, by=__name__)


def _with_redrive_fields(original):  # type: ignore[no-untyped-def]
    def describe_execution(self):  # type: ignore[no-untyped-def]
        result = original(self)
        execution = self.stepfunction_backend.describe_execution(self._get_param("executionArn"))
        output = result.result
        if isinstance(output, dict) and isinstance(execution, Execution):
            count = getattr(execution, "_local_redrive_count", 0)
            output["redriveCount"] = count
            if count:
                output["redriveDate"] = execution._local_redrive_date
            redrivable = execution.sm_type == StateMachineType.STANDARD and execution.exec_status in REDRIVABLE
            output["redriveStatus"] = "REDRIVABLE" if redrivable else "NOT_REDRIVABLE"
            if execution.exec_status == ExecutionStatus.TIMED_OUT and execution.stop_date:
                output["stopDate"] = execution.stop_date  # moto leaves it out for TIMED_OUT
        return result

    return describe_execution


def redrive(execution: Execution) -> datetime.datetime:
    """Continue ``execution`` from its unsuccessful steps (see the module notes)."""
    if execution.sm_type != StateMachineType.STANDARD:
        raise ExecutionNotRedrivable("Express executions cannot be redriven")
    if execution.exec_status not in REDRIVABLE:
        raise ExecutionNotRedrivable(f"Execution is {execution.exec_status.value} and cannot be redriven.")
    old_env = execution.exec_worker.env
    old_run = _run_of(old_env) if old_env is not None else None
    plan = old_run.snapshot() if old_run is not None else _Plan()
    top = plan.paths.get(())
    if top is None or top.step is None:
        raise ExecutionNotRedrivable("The execution never entered a state.")
    top.error = execution.error if execution.exec_status == ExecutionStatus.FAILED else None

    count = getattr(execution, "_local_redrive_count", 0) + 1
    redrive_date = datetime.datetime.now(tz=datetime.timezone.utc)
    old_manager = old_env.event_manager
    old_manager._local_closed = True  # the previous run's late events stay out of the history
    manager = EventManager(old_manager._cloud_watch_logging_session)
    with old_manager._mutex:
        manager._history_event_list.extend(old_manager._history_event_list)
        manager._event_id_gen = old_manager._event_id_gen

    # A new worker: the previous run's thread may still end late (a Lambda in flight) and
    # report to its own, spent, worker communication - never to this run's.
    worker = execution._get_start_execution_worker()
    env = worker._get_evaluation_environment()
    env.event_manager = manager
    env._local_run = _Run(plan=plan, options=copy.copy(_options))
    env._local_resume_step = top.step
    context = env.states.context_object.context_object_data["Execution"]
    context["RedriveCount"] = count
    context["RedriveTime"] = redrive_date.isoformat()
    env.event_manager.add_event(
        context=env.event_history_context,
        event_type=HistoryEventType.ExecutionRedriven,
        event_details=EventDetails(executionRedrivenEventDetails=ExecutionRedrivenEventDetails(redriveCount=count)),
    )

    communication = worker._execution_communication
    worker.env = env
    execution.exec_worker = worker
    execution._local_redrive_count = count
    execution._local_redrive_date = redrive_date
    execution.exec_status = ExecutionStatus.RUNNING
    execution._local_status_event_sent = False  # its next end is announced again
    execution.stop_date = None
    execution.error = None
    execution.cause = None
    program = worker._get_evaluation_entrypoint()

    def run() -> None:
        program.eval(env)  # resumes at top.step; the state machine timeout starts again
        communication.terminated()

    thread = threading.Thread(target=run, daemon=True)
    TMP_THREADS.append(thread)
    thread.start()
    return redrive_date


def _redrive_execution(self):  # type: ignore[no-untyped-def]
    execution = self.stepfunction_backend.describe_execution(self._get_param("executionArn"))
    return ActionResult({"redriveDate": redrive(execution)})


def apply(stack: ExitStack, options: RedriveOptions | None = None) -> None:
    def patch(target: Any, name: str, value: Any, **kwargs: Any) -> None:
        patch_attribute(stack, target, name, value, **kwargs, by=__name__)

    def wrapped(target: Any, name: str, wrapper: Any) -> None:
        wrap(stack, target, name, wrapper, by=__name__)

    if options is not None:
        use_options(stack, options)
    wrapped(ExecutionWorker, "_get_evaluation_environment", _with_run)
    wrapped(Environment, "as_inner_frame_of", _inheriting_run)
    wrapped(CommonStateField, "eval", _recording_entries)
    for state in (StateParallel, StateMap):
        wrapped(state, "_handle_retry", _first_attempt_only)
    wrapped(Program, "eval", _resuming_program)
    wrapped(Parargs, "_eval_body", lambda original: _replaying(original, "parargs"))
    wrapped(Items, "eval", lambda original: _replaying(original, "items"))
    patch(branches_decl.BranchesDecl, "_eval_body", _branches)
    wrapped(InlineIterationComponent, "_eval_body", lambda original: _iterations)  # replaces moto's
    wrapped(IterationWorker, "_eval_job", _recording_jobs)
    for worker in (InlineItemProcessorWorker, InlineIteratorWorker):
        wrapped(worker, "_eval_input", _resumed_input_kept)
    wrapped(StepFunctionResponse, "describe_execution", _with_redrive_fields)
    patch(StepFunctionResponse, "redrive_execution", _redrive_execution, create=True)
