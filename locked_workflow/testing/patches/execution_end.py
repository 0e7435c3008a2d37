"""StopExecution and TimeoutSeconds end an execution at once, history included.

Gaps (moto 5.2.1; the ``TimeoutSeconds`` deadline itself is honoured - see the test):

* ``StopExecution`` only flags the interpreter; the execution stays RUNNING (and emits
  nothing) until the state in flight returns - a Task waiting on a slow Lambda or a task
  token keeps it RUNNING for as long as that takes. The service reports ABORTED at once;
  the in-flight work itself may still complete, as on AWS.
* ``StopExecution`` right after ``StartExecution`` can crash with ``AttributeError``
  (``exec_worker.env`` is created by the worker thread a moment later).
* ``StopExecution``'s ``error`` and ``cause`` are dropped.
* A Parallel branch whose execution was stopped just before the branch's thread began
  crashes that thread with ``RuntimeError: Could not set NextState value when in state
  ProgramStopped`` (a traceback on stderr; nothing else is affected).
* A stopped or timed-out execution's history gets its ``ExecutionAborted`` /
  ``ExecutionTimedOut`` event only when the state in flight returns, followed by that
  state's own late events; on AWS the history ends with the execution.

Fix: wait for the interpreter environment, stop it with the caller's error and cause, and
record the final status right away (the interpreter's own later ``terminated()`` is
ignored); when an execution ends
ABORTED or TIMED_OUT, append its closing event if the interpreter has not, and record
nothing after it.

AWS: ``StopExecution`` stops an execution
(https://docs.aws.amazon.com/step-functions/latest/apireference/API_StopExecution.html);
``DescribeExecution`` then reports it ``ABORTED`` (a timed-out one ``TIMED_OUT``) with its
``stopDate`` (https://docs.aws.amazon.com/step-functions/latest/apireference/API_DescribeExecution.html).

Proof: ``tests/local/test_patch_execution_end.py``.
"""

from __future__ import annotations

import datetime
import threading
import time
from contextlib import ExitStack

from moto.core.responses import ActionResult
from moto.stepfunctions.parser.api import (
    ExecutionAbortedEventDetails,
    ExecutionStatus,
    ExecutionTimedOutEventDetails,
    HistoryEventType,
)
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
from moto.stepfunctions.parser.asl.eval.event.event_manager import EventManager
from moto.stepfunctions.parser.asl.eval.program_state import ProgramStopped
from moto.stepfunctions.parser.backend.execution import (
    BaseExecutionWorkerCommunication,
    Execution,
)
from moto.stepfunctions.responses import StepFunctionResponse

from locked_workflow.testing.seams import patch_attribute, wrap

_ONCE = threading.Lock()
#: Notified each time an execution ends (its final status recorded): what ``LocalCloud.wait_all``
#: waits on between its polls, instead of sleeping its poll interval out.
_ENDED = threading.Condition()
_ended_count = 0
#: How long StopExecution waits for a just-started execution's interpreter.
ENV_WAIT_S = 60.0
#: The events that end an execution's history (nothing may be recorded after one).
CLOSING_EVENTS = {
    HistoryEventType.ExecutionSucceeded,
    HistoryEventType.ExecutionFailed,
    HistoryEventType.ExecutionAborted,
    HistoryEventType.ExecutionTimedOut,
}


def _close_history(execution: Execution) -> None:
    """Append the closing event of an ABORTED / TIMED_OUT execution; record nothing after it."""
    env = execution.exec_worker.env
    manager = env.event_manager
    with manager._mutex:
        history = manager._history_event_list
        closed = bool(history) and history[-1]["type"] in CLOSING_EVENTS
    if not closed:
        if execution.exec_status == ExecutionStatus.ABORTED:
            state = env.program_state()
            error = state.error if isinstance(state, ProgramStopped) else None
            cause = state.cause if isinstance(state, ProgramStopped) else None
            details = EventDetails(
                executionAbortedEventDetails=ExecutionAbortedEventDetails(
                    **{k: v for k, v in (("error", error), ("cause", cause)) if v}
                )
            )
            event_type = HistoryEventType.ExecutionAborted
        else:
            details = EventDetails(executionTimedOutEventDetails=ExecutionTimedOutEventDetails())
            event_type = HistoryEventType.ExecutionTimedOut
        manager.add_event(context=env.event_history_context, event_type=event_type, event_details=details)
    manager._local_closed = True  # type: ignore[attr-defined]


def ended_count() -> int:
    """How many executions have ended so far in this process (a mark for :func:`wait_for_end`)."""
    with _ENDED:
        return _ended_count


def wait_for_end(since: int, timeout: float) -> bool:
    """Wait until an execution ends after ``since`` (a count :func:`ended_count` returned), at
    most ``timeout`` seconds; True if one did. Any execution's end wakes the waiter: it then
    checks its own, as it would after a sleep."""
    with _ENDED:
        return _ENDED.wait_for(lambda: _ended_count != since, timeout)


def _notify_ended() -> None:
    global _ended_count
    with _ENDED:
        _ended_count += 1
        _ENDED.notify_all()


def _quiet_stopped_branch(original):  # type: ignore[no-untyped-def]
    def _thread_routine(self):  # type: ignore[no-untyped-def]
        try:
            original(self)
        except RuntimeError:
            if self.env.is_running():
                raise  # a real failure; a stopped program's branch just has nothing left to do

    return _thread_routine


def apply(stack: ExitStack) -> None:
    from moto.stepfunctions.parser.asl.component.state.exec.state_parallel.branch_worker import BranchWorker

    thread_routine = _quiet_stopped_branch(BranchWorker._thread_routine)
    patch_attribute(stack, BranchWorker, "_thread_routine", thread_routine, by=__name__)
    original_stop = Execution.stop
    original_stop_execution = StepFunctionResponse.stop_execution

    def ending_once(original_terminated):  # type: ignore[no-untyped-def]
        def terminated(self):  # type: ignore[no-untyped-def]
            with _ONCE:
                if getattr(self, "_local_terminated", False):
                    return
                self._local_terminated = True
            original_terminated(self)
            execution = self.execution
            if execution.exec_status == ExecutionStatus.ABORTED:
                state = execution.exec_worker.env.program_state()
                if isinstance(state, ProgramStopped):
                    execution.error = state.error or None
                    execution.cause = state.cause or None
            if execution.exec_status in (ExecutionStatus.ABORTED, ExecutionStatus.TIMED_OUT):
                _close_history(execution)
            _notify_ended()

        return terminated

    def stop(self, stop_date, error, cause):  # type: ignore[no-untyped-def]
        worker = self.exec_worker
        deadline = time.monotonic() + ENV_WAIT_S
        # an execution stopped just after it started: wait for its environment and for its
        # program to be running (before that, moto's set_stop does nothing and the program
        # state read at its end is None: "unsupported ProgramState type NoneType")
        while worker is not None and (worker.env is None or worker.env.program_state() is None) \
                and time.monotonic() < deadline:
            time.sleep(0.005)
        original_stop(self, stop_date=stop_date, error=error, cause=cause)
        if worker is not None and worker.env is not None and self.exec_status == ExecutionStatus.RUNNING:
            worker._execution_communication.terminated()

    def stop_execution(self):  # type: ignore[no-untyped-def]
        execution = self.stepfunction_backend.describe_execution(self._get_param("executionArn"))
        if not isinstance(execution, Execution):
            return original_stop_execution(self)
        execution.stop(
            stop_date=datetime.datetime.now(tz=datetime.timezone.utc),
            error=self._get_param("error"),
            cause=self._get_param("cause"),
        )
        return ActionResult({"stopDate": execution.stop_date or datetime.datetime.now(tz=datetime.timezone.utc)})

    def unless_closed(original_add_event):  # type: ignore[no-untyped-def]
        def add_event(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            if getattr(self, "_local_closed", False):
                return -1
            return original_add_event(self, *args, **kwargs)

        return add_event

    patch_attribute(stack, Execution, "stop", stop, by=__name__)
    wrap(stack, BaseExecutionWorkerCommunication, "terminated", ending_once, by=__name__)
    wrap(stack, EventManager, "add_event", unless_closed, by=__name__)
    patch_attribute(stack, StepFunctionResponse, "stop_execution", stop_execution, by=__name__)
