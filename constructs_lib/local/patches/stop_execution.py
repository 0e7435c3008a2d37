"""StopExecution ends an execution at once.

Gaps (moto 5.2.1; ``TimeoutSeconds`` itself is honoured - see the test):

* ``StopExecution`` only flags the interpreter; the execution stays RUNNING (and emits
  nothing) until the state in flight finishes - a Task waiting on a slow Lambda or a task
  token keeps it RUNNING for as long as that takes. The service reports ABORTED at once
  (the in-flight work itself may still complete, as on AWS).
* ``StopExecution`` right after ``StartExecution`` can crash with ``AttributeError``
  (``exec_worker.env`` is created by the worker thread a moment later).

Fix: wait for the interpreter environment, stop it, and record the final status right
away; the interpreter's own later ``terminated()`` is then ignored (once per execution).

Proof: ``tests/local/test_patch_stop_execution.py``.
"""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack
from unittest import mock

from moto.stepfunctions.parser.api import ExecutionStatus
from moto.stepfunctions.parser.backend.execution import (
    BaseExecutionWorkerCommunication,
    Execution,
)

_ONCE = threading.Lock()
#: How long StopExecution waits for a just-started execution's interpreter.
ENV_WAIT_S = 5.0


def apply(stack: ExitStack) -> None:
    original_stop = Execution.stop
    original_terminated = BaseExecutionWorkerCommunication.terminated

    def terminated(self):  # type: ignore[no-untyped-def]
        with _ONCE:
            if getattr(self, "_local_terminated", False):
                return
            self._local_terminated = True
        original_terminated(self)

    def stop(self, stop_date, error, cause):  # type: ignore[no-untyped-def]
        worker = self.exec_worker
        deadline = time.monotonic() + ENV_WAIT_S
        while worker is not None and worker.env is None and time.monotonic() < deadline:
            time.sleep(0.005)
        original_stop(self, stop_date=stop_date, error=error, cause=cause)
        if worker is not None and worker.env is not None and self.exec_status == ExecutionStatus.RUNNING:
            worker._execution_communication.terminated()

    stack.enter_context(mock.patch.object(Execution, "stop", stop))
    stack.enter_context(
        mock.patch.object(BaseExecutionWorkerCommunication, "terminated", terminated)
    )
