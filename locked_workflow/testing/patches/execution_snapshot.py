"""Execution snapshot: a state machine can run more than one execution.

Gap (moto 5.2.1): ``StepFunctionsParserBackend.start_execution`` takes a
``copy.deepcopy`` of the state machine, which drags along its ``executions`` (and the
whole backend through ``state_machine.backend``). Once an execution has started, its
interpreter environment holds ``threading`` locks, so the next ``start_execution`` of a
state machine in that backend fails with ``TypeError: cannot pickle '_thread.RLock'``.

Fix: ``StateMachine.__deepcopy__`` returns a shallow snapshot with no executions. The
snapshot only has to keep the definition, role and type the execution started with;
``update_state_machine`` rebinds those attributes rather than mutating them.

AWS: a state machine runs any number of executions, each started by ``StartExecution``
(https://docs.aws.amazon.com/step-functions/latest/apireference/API_StartExecution.html), up to the quota of open executions
(https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html).

Proof: ``tests/local/test_patch_execution_snapshot.py``.
"""

from __future__ import annotations

import copy
from contextlib import ExitStack
from typing import Any

from moto.stepfunctions.models import StateMachine

from locked_workflow.testing.seams import patch_attribute


def _snapshot(self: StateMachine, memo: dict[int, Any]) -> StateMachine:
    clone = copy.copy(self)
    clone.executions = []
    return clone


def apply(stack: ExitStack) -> None:
    patch_attribute(stack, StateMachine, "__deepcopy__", _snapshot, create=True, by=__name__)
