"""Branch thread names: starting a Parallel branch does not render the branch's whole program.

Gap (moto 5.2.1): ``BranchWorker.start`` names the branch's thread
``f"BranchWorker_${self._program}"``, and a component's ``str`` is ``vars(self)`` rendered
recursively: every state, field and expression of the branch, rebuilt as text each time a
branch starts. A lock's Parallel holds the user's whole protected chain, so each locked run
paid for it: sampled with py-spy (``--gil``) over 90 Lock.mutex runs started together,
``Component.__str__`` under ``BranchWorker.start`` held 13.5 % of the time the executions'
threads held the interpreter (4.9 % uncontended), for a thread name nothing reads.

Fix: ``BranchWorker.start`` does what moto's does - refuses a second start with moto's
``RuntimeError``, starts the branch's daemon thread on ``_thread_routine`` and lists it in
``TMP_THREADS`` - with the thread named ``BranchWorker_<id of the program>``.

AWS: no AWS behaviour: a cost of the runtime. It keeps what a lock's timing on AWS assumes
(no documented page says it): starting a branch costs the same whatever the branch holds.

Proof: ``tests/local/test_patch_branch_thread_names.py``.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack

from moto.stepfunctions.parser.asl.component.state.exec.state_parallel.branch_worker import BranchWorker
from moto.stepfunctions.parser.utils import TMP_THREADS

from locked_workflow.testing.seams import patch_attribute


def _start(self: BranchWorker) -> None:
    if self._worker_thread is not None:
        raise RuntimeError(f"Attempted to rerun BranchWorker for program ${self._program}.")
    self._worker_thread = threading.Thread(
        target=self._thread_routine, name=f"BranchWorker_{id(self._program):x}", daemon=True,
    )
    TMP_THREADS.append(self._worker_thread)
    self._worker_thread.start()


def apply(stack: ExitStack) -> None:
    patch_attribute(stack, BranchWorker, "start", _start, by=__name__)
