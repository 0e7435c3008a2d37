"""A failed Parallel branch (Inline Map iteration) cancels its siblings at once, as in Step Functions.

What the service does:

* "If any branch fails, because of an unhandled error or by transitioning to a Fail state,
  the entire Parallel state is considered to have failed and all its branches are stopped"
  (https://docs.aws.amazon.com/step-functions/latest/dg/state-parallel.html, Error
  handling); for an Inline Map, "if any iteration fails, then the Map state fails. When the
  Map state fails, all iterations stop"
  (https://docs.aws.amazon.com/step-functions/latest/dg/state-map-inline.html, ProcessorConfig).
  A stopped branch goes no further: it enters no state, and its in-flight state's Retry and
  Catch do not run. The Parallel's (Map's) own Retry and Catch apply as usual; when the user
  catches its failure the execution goes on RUNNING.
* "When a parallel state fails, invoked Lambda functions continue to run and activity workers
  processing a task token are not stopped ... Calling SendTaskHeartbeat, SendTaskSuccess, or
  SendTaskFailure will throw an error if the state has failed. See Heartbeat Errors"
  (same Parallel page) - the error is ``TaskTimedOut``: "The task token has either expired or
  the task associated with the token has already been closed"
  (https://docs.aws.amazon.com/step-functions/latest/apireference/API_SendTaskHeartbeat.html#API_SendTaskHeartbeat_Errors).
* The history names what was cut short: ``TaskStateAborted``, ``WaitStateAborted``,
  ``ParallelStateAborted``, ``MapStateAborted`` (no details) and ``MapIterationAborted``
  (``mapIterationAbortedEventDetails``: the Map's name and the iteration's index)
  (https://docs.aws.amazon.com/step-functions/latest/apireference/API_HistoryEvent.html).
* ``SendTaskHeartbeat`` is "used by ... Task states using the callback pattern ... to report to
  Step Functions that the task represented by the specified taskToken is still making
  progress"; of its three errors (``InvalidToken``: "The provided token is not valid",
  ``TaskDoesNotExist``, ``TaskTimedOut``) none applies to the valid token of a callback task
  that is still waiting, with or without ``HeartbeatSeconds`` - and the Parallel page's advice
  to detect a stopped branch with heartbeats depends on a live task's heartbeat succeeding.

Gaps (moto 5.2.1):

* Parallel: moto flags the other branches stopped, but a state in flight in them does not
  notice. A callback task waits on (up to its ``HeartbeatSeconds`` or ``TimeoutSeconds``) and
  its token still accepts ``SendTaskHeartbeat``/``SendTaskSuccess``/``SendTaskFailure``; when
  it wakes it records ``TaskTimedOut`` (or ``TaskFailed``/``TaskSucceeded``) after the Parallel
  has failed and starts its Catch or Retry on the stopped branch.
* Inline Map: the other iterations are not stopped; once the Map has failed they are marked
  *ended*, and an interrupted iteration is recorded as ``MapIterationSucceeded`` or (its task
  woken by a heartbeat: ``TaskTimedOut``) ``MapIterationFailed``, whichever way it ends.
* Nothing records ``...StateAborted``; moto's own ``MapIterationAborted`` never fires for a
  sibling's failure.
* A waiting callback task without ``HeartbeatSeconds`` answers ``SendTaskHeartbeat`` with
  ``InvalidToken``.

Fix: when an Environment (a branch, an iteration, or anything nested in them) is stopped
(``set_stop``: a Parallel stopping its branches, this module stopping a failed Inline Map's
running iterations, or ``StopExecution``), everything under it is cancelled at once:

* events its threads add later are dropped (a late ``TaskSucceeded`` of a Lambda that runs on);
* for a branch or iteration (not for a stopped execution, whose history ``execution_end``
  closes), the history gets - innermost first - the ``...StateAborted`` event of each state
  that was in flight and ``MapIterationAborted`` for each iteration, before the failing
  Parallel's (Map's) own ``...StateFailed``;
* the task token of each callback task in flight is closed: ``SendTaskHeartbeat``,
  ``SendTaskSuccess`` and ``SendTaskFailure`` on it fail with ``TaskTimedOut``, whatever the
  execution's status afterwards (also when the execution timed out);
* every state in flight stops waiting at once (a Task's wait for its work, a Wait state) and
  ends without its Retry or Catch; no further state is entered. Work already handed out (a
  Lambda invocation) runs on; its result is ignored.

``SendTaskHeartbeat`` on a waiting callback task without ``HeartbeatSeconds`` succeeds (and
resets nothing). Tokens of tasks that ended otherwise (succeeded, failed, timed out, an attempt
that a ``Retry`` follows) are ``late_callbacks``' to close, and ``SendTaskHeartbeat`` on them
fails as it answers ``SendTaskSuccess``.

Proof: ``tests/local/test_patch_cancelled_branches.py``.
"""

from __future__ import annotations

import datetime
import threading
import time
from contextlib import ExitStack, contextmanager
from typing import Any, Iterator

from moto.core.exceptions import AWSError
from moto.stepfunctions.parser.api import ExecutionStatus, HistoryEventType, MapIterationEventDetails
from moto.stepfunctions.parser.asl.component.state.exec.execute_state import ExecutionState
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.inline_iteration_component import (
    InlineIterationComponent,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.iteration_worker import (
    IterationWorker,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.state_map import StateMap
from moto.stepfunctions.parser.asl.component.state.exec.state_parallel.state_parallel import StateParallel
from moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task import StateTask
from moto.stepfunctions.parser.asl.component.state.state import CommonStateField
from moto.stepfunctions.parser.asl.component.state.wait.state_wait import StateWait
from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction
from moto.stepfunctions.parser.asl.eval.callback.callback import CallbackEndpoint
from moto.stepfunctions.parser.asl.eval.environment import Environment
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
from moto.stepfunctions.parser.asl.eval.event.event_manager import EventManager
from moto.stepfunctions.parser.asl.eval.program_state import ProgramRunning
from moto.stepfunctions.parser.models import StepFunctionsParserBackend
from moto.stepfunctions.parser.utils import TMP_THREADS

from locked_workflow.testing.backend import override
from locked_workflow.testing.patches import late_callbacks, unique_execution_names
from locked_workflow.testing.seams import patch_attribute, wrap

#: The event a state in flight leaves when it is cut short (Pass, Choice, Succeed and Fail
#: states do not wait, and the service has no such event for them).
ABORTED_EVENTS: tuple[tuple[type, HistoryEventType], ...] = (
    (StateTask, HistoryEventType.TaskStateAborted),
    (StateWait, HistoryEventType.WaitStateAborted),
    (StateParallel, HistoryEventType.ParallelStateAborted),
    (StateMap, HistoryEventType.MapStateAborted),
)
CLOSED_TOKEN_MESSAGE = "The task associated with the token has already been closed."

_LOCAL = threading.local()  # .stopped: the Environments one set_stop call has stopped so far


class TaskTimedOut(AWSError):
    """The API's ``TaskTimedOut``: the token's task has been closed."""

    TYPE = "TaskTimedOut"
    STATUS = 400


class _Cancelled(BaseException):
    """A state's evaluation cut short because its branch was stopped.

    A BaseException so that no ``except Exception`` of the interpreter - the state's Retry
    and Catch handling among them - sees it; the state's ``eval`` swallows it.
    """


# -- waking what waits in an Environment ------------------------------------------------------


@contextmanager
def _woken_when_halted(env: Environment) -> Iterator[threading.Event]:
    """An Event that is set once ``env`` leaves ProgramRunning (set at once if it has)."""
    wake = threading.Event()
    with env._state_mutex:
        if env.is_running():
            env.__dict__.setdefault("_local_waiters", set()).add(wake)
        else:
            wake.set()
    try:
        yield wake
    finally:
        with env._state_mutex:
            env.__dict__.get("_local_waiters", set()).discard(wake)


def _wake(env: Environment) -> None:
    with env._state_mutex:
        for wake in env.__dict__.get("_local_waiters", ()):
            wake.set()


def _waking(original):  # type: ignore[no-untyped-def]
    """set_ended / set_error / set_timed_out, then wake the Environment's waiters."""

    def transition(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        with self._state_mutex:
            original(self, *args, **kwargs)
            if not self.is_running():
                _wake(self)

    return transition


def _wait_interval(self, env, wait_seconds):  # type: ignore[no-untyped-def]
    """A Wait state's wait: until its time is up or its branch stops (moto's own wait can miss
    a stop that lands just before it starts waiting)."""
    if wait_seconds > 0:
        with _woken_when_halted(env) as wake:
            wake.wait(wait_seconds)


# -- states in flight ------------------------------------------------------------------------


def _tracking_state(original):  # type: ignore[no-untyped-def]
    """CommonStateField.eval: remember the state in flight; a cancelled one just ends."""

    def eval(self, env):  # type: ignore[no-untyped-def]
        with env._state_mutex:
            env._local_state = self
        try:
            return original(self, env)
        except _Cancelled:
            return None
        finally:
            with env._state_mutex:
                if env.is_running():
                    env._local_state = None

    return eval


def _interruptible(original):  # type: ignore[no-untyped-def]
    """ExecutionState._evaluate_with_timeout, given up at once when the branch stops."""

    def _evaluate_with_timeout(self, env):  # type: ignore[no-untyped-def]
        outcome: list[BaseException] = []
        with _woken_when_halted(env) as wake:
            if wake.is_set():
                raise _Cancelled()  # stopped before this attempt began: start no work

            def attempt() -> None:
                try:
                    original(self, env)
                except BaseException as error:  # noqa: BLE001 - handed to the state's thread
                    outcome.append(error)
                finally:
                    wake.set()

            thread = threading.Thread(target=attempt, name=f"LocalState_{self.name}", daemon=True)
            TMP_THREADS.append(thread)
            thread.start()
            wake.wait()
        if not env.is_running():
            raise _Cancelled()  # the work in flight runs on; its outcome is not this state's
        thread.join()
        if outcome:
            raise outcome[0]

    return _evaluate_with_timeout


# -- cancelling ------------------------------------------------------------------------------


def _recording(original):  # type: ignore[no-untyped-def]
    """EventManager.add_event: events of a cancelled Environment are dropped."""

    def add_event(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        context = kwargs.get("context", args[0] if args else None)
        if getattr(context, "_local_cancelled", False) and not getattr(_LOCAL, "aborting", False):
            return -1
        return original(self, *args, **kwargs)

    return add_event


def _aborted_event(state: Any) -> HistoryEventType | None:
    for state_type, event_type in ABORTED_EVENTS:
        if isinstance(state, state_type):
            return event_type
    return None


def close_token(env: Environment) -> None:
    """Close the task token of the callback task in flight in ``env``, if there is one."""
    task = env.states.context_object.context_object_data.get("Task") or {}
    endpoint = env.callback_pool_manager.get(task.get("Token")) if task.get("Token") else None
    if endpoint is not None:
        endpoint._local_closed = True
        endpoint.interrupt_all()


def _cancel(stopped: list[Environment], record: bool) -> None:
    """After a stop: record what was cut short, close tokens, wake every waiting state."""
    if record:
        _LOCAL.aborting = True
        try:
            for env in stopped:  # innermost first: set_stop recursion appended children first
                event_type = _aborted_event(env.__dict__.get("_local_aborted_state"))
                if event_type is not None:
                    env.event_manager.add_event(context=env.event_history_context, event_type=event_type)
                iteration = env.__dict__.get("_local_iteration")
                if iteration is not None:
                    env.event_manager.add_event(
                        context=env.event_history_context,
                        event_type=HistoryEventType.MapIterationAborted,
                        event_details=EventDetails(mapIterationAbortedEventDetails=iteration),
                        update_source_event_id=False,
                    )
        finally:
            _LOCAL.aborting = False
    for env in stopped:
        close_token(env)
        _wake(env)


def _cancelling(original):  # type: ignore[no-untyped-def]
    """Environment.set_stop: the Environment and everything under it is cancelled."""

    def set_stop(self, stop_date, cause, error):  # type: ignore[no-untyped-def]
        stopped: list[Environment] | None = getattr(_LOCAL, "stopped", None)
        outermost = stopped is None
        if outermost:
            stopped = _LOCAL.stopped = []
        try:
            with self._state_mutex:
                if isinstance(self._program_state, ProgramRunning):
                    if self.is_frame():  # a stopped execution's own closing events still count
                        self.event_history_context._local_cancelled = True
                    self._local_aborted_state = self.__dict__.get("_local_state")
                    original(self, stop_date, cause, error)  # stops the frames under it first
                    stopped.append(self)
        finally:
            if outermost:
                del _LOCAL.stopped
        if outermost and stopped:
            _cancel(stopped, record=self.is_frame())

    return set_stop


def _timing_out(original):  # type: ignore[no-untyped-def]
    """Environment.set_timed_out: the tasks in flight are closed too."""

    def set_timed_out(self):  # type: ignore[no-untyped-def]
        with self._state_mutex:
            original(self)
            close_token(self)
            _wake(self)

    return set_timed_out


def _labelling_iterations(original):  # type: ignore[no-untyped-def]
    """IterationWorker._eval_job: the iteration's Environment knows its Map and index."""

    def _eval_job(self, env, job):  # type: ignore[no-untyped-def]
        env._local_iteration = MapIterationEventDetails(name=self._work_name, index=job.job_index)
        return original(self, env, job)

    return _eval_job


def _stopping_iterations(original):  # type: ignore[no-untyped-def]
    """InlineIterationComponent._eval_body: a failure stops the iterations still running."""

    def _eval_body(self, env):  # type: ignore[no-untyped-def]
        try:
            return original(self, env)
        except Exception:
            with env._state_mutex:
                running = list(env._frames)  # one per worker; a finished worker closed its own
            for frame in running:
                frame.set_stop(stop_date=datetime.datetime.now(tz=datetime.timezone.utc), cause=None, error=None)
            raise

    return _eval_body


# -- the task token API ----------------------------------------------------------------------


def _indexed_execution(token: Any) -> Any:
    """The execution ``token`` belongs to, found at once (``late_callbacks`` notes each callback
    token's execution ARN, ``unique_execution_names`` each started execution), if it has its
    environment; None: walk every execution as moto does (an activity token, an unknown one)."""
    arn = late_callbacks.execution_arn_of(token)
    execution = unique_execution_names.started(arn) if arn else None
    if execution is None or execution.exec_worker is None or execution.exec_worker.env is None:
        return None
    return execution


def _endpoint(backend: StepFunctionsParserBackend, token: str) -> tuple[Any, CallbackEndpoint | None]:
    """(execution, callback endpoint) of ``token``; TaskTimedOut if its task was closed here."""
    indexed = _indexed_execution(token)
    for execution in [indexed] if indexed is not None else backend._get_executions():
        env = getattr(execution.exec_worker, "env", None) if execution.exec_worker else None
        endpoint = env.callback_pool_manager.get(token) if env is not None else None
        if endpoint is not None:
            if getattr(endpoint, "_local_closed", False):
                raise TaskTimedOut(CLOSED_TOKEN_MESSAGE)
            return execution, endpoint
    return None, None


def _token_of(args: tuple, kwargs: dict) -> str:
    return kwargs["task_token"] if "task_token" in kwargs else args[0]


#: Set while a task token call runs: moto's walk over the running executions leaves out those
#: still starting (see :func:`_past_starting_executions`).
_TOKEN_CALL = threading.local()


def _executions(original):  # type: ignore[no-untyped-def]
    def _get_executions(self, execution_status=None):  # type: ignore[no-untyped-def]
        indexed = _indexed_execution(getattr(_TOKEN_CALL, "token", None)) if getattr(_TOKEN_CALL, "on", False) else None
        if indexed is not None:  # a token call: only the token's execution can hold it
            return [indexed] if execution_status is None or execution_status == indexed.status else []
        executions = original(self, execution_status)
        if getattr(_TOKEN_CALL, "on", False):
            executions = [e for e in executions if e.exec_worker is not None and e.exec_worker.env is not None]
        return executions

    return _get_executions


def _past_starting_executions(original, self, *args, **kwargs):  # type: ignore[no-untyped-def]
    """moto's task token calls walk every execution's ``exec_worker.env``, which is None while
    an execution is still starting: an AttributeError instead of an answer (seen as
    ``States.Runtime`` in a waiter that probed a token). Step Functions answers such a call
    whatever else starts meanwhile. A starting execution has no task, so no token of its own:
    the walk leaves it out. (It used to retry every 10 ms until no execution was starting: in
    a burst of starts a wake-up then waited seconds - 5 s measured by ``tools.bench_fair`` -
    for executions that had nothing to do with its token.) The retry stays as a fallback."""
    _TOKEN_CALL.on, _TOKEN_CALL.token = True, _token_of(args, kwargs)
    try:
        return _retrying_past_starting(original, self, *args, **kwargs)
    finally:
        _TOKEN_CALL.on, _TOKEN_CALL.token = False, None


def _retrying_past_starting(original, self, *args, **kwargs):  # type: ignore[no-untyped-def]
    for attempt in range(200):
        try:
            return original(self, *args, **kwargs)
        except AttributeError as starting:
            if "callback_pool_manager" not in str(starting) and "'env'" not in str(starting) or attempt == 199:
                raise
            time.sleep(0.01)


def _checking_closed(original):  # type: ignore[no-untyped-def]
    def send(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        _endpoint(self, _token_of(args, kwargs))
        return _past_starting_executions(original, self, *args, **kwargs)

    return send


def _heartbeat(original):  # type: ignore[no-untyped-def]
    def send_task_heartbeat(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        execution, endpoint = _endpoint(self, _token_of(args, kwargs))
        if (
            endpoint is not None
            and endpoint._heartbeat_endpoint is None
            and execution.exec_status == ExecutionStatus.RUNNING
            and endpoint.get_outcome() is None
            and not late_callbacks.closed(endpoint)  # an ended attempt's: moto's walk, late_callbacks' answer
        ):
            return None  # a waiting task without HeartbeatSeconds: accepted, nothing to reset
        return _past_starting_executions(original, self, *args, **kwargs)

    return send_task_heartbeat


def apply(stack: ExitStack) -> None:
    def patch(target: Any, name: str, value: Any) -> None:
        patch_attribute(stack, target, name, value, by=__name__)

    def wrapped(target: Any, name: str, wrapper: Any) -> None:
        wrap(stack, target, name, wrapper, by=__name__)

    for name in ("set_ended", "set_error"):
        wrapped(Environment, name, _waking)
    wrapped(Environment, "set_timed_out", _timing_out)
    wrapped(Environment, "set_stop", _cancelling)
    patch(WaitFunction, "_wait_interval", _wait_interval)
    wrapped(CommonStateField, "eval", _tracking_state)
    wrapped(ExecutionState, "_evaluate_with_timeout", _interruptible)
    wrapped(EventManager, "add_event", _recording)
    wrapped(IterationWorker, "_eval_job", _labelling_iterations)
    wrapped(InlineIterationComponent, "_eval_body", _stopping_iterations)
    override(stack, "send_task_heartbeat", _heartbeat, by=__name__)  # the backend subclass's
    override(stack, "_get_executions", _executions, by=__name__)
    for name in ("send_task_success", "send_task_failure"):
        override(stack, name, _checking_closed, by=__name__)
