"""Fix ``patches/branch_thread_names``: a Parallel branch starts without rendering its program."""

from __future__ import annotations

import json
import sys
import uuid
from contextlib import contextmanager
from typing import Iterator
from unittest import mock

import boto3
import pytest
from moto.stepfunctions.parser.asl.component.component import Component
from moto.stepfunctions.parser.asl.component.state.exec.state_parallel.branch_worker import BranchWorker

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.patches import execution_output, execution_snapshot
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end

#: Two branches of two Pass states each.
PARALLEL = {
    "StartAt": "Both",
    "States": {"Both": {"Type": "Parallel", "End": True, "Branches": [
        {"StartAt": f"B{n}a", "States": {f"B{n}a": {"Type": "Pass", "Result": n, "Next": f"B{n}b"},
                                         f"B{n}b": {"Type": "Pass", "End": True}}}
        for n in (1, 2)
    ]}},
}


@contextmanager
def counting_renders() -> Iterator[list[str]]:
    """The components ``branch_worker.py`` renders as text (by name of class) while the block
    runs (moto's parser renders some too, building error messages it may not raise)."""
    rendered: list[str] = []
    original = Component.__str__

    def render(self):  # type: ignore[no-untyped-def]
        if sys._getframe(1).f_code.co_filename.endswith("branch_worker.py"):
            rendered.append(type(self).__name__)
        return original(self)

    with mock.patch.object(Component, "__str__", render):
        yield rendered


def run_parallel() -> object:
    machine = create_state_machine(PARALLEL)
    sfn = boto3.client("stepfunctions", region_name=REGION)
    arn = sfn.start_execution(stateMachineArn=machine, name=str(uuid.uuid4()), input="{}")["executionArn"]
    end = wait_for_end(arn)
    assert end["status"] == "SUCCEEDED", end
    return json.loads(end["output"])


def test_bare_moto_renders_each_branch_program_to_name_its_thread():
    with bare_moto(execution_snapshot.apply, execution_output.apply), counting_renders() as rendered:
        assert run_parallel() == [1, 2]
    assert rendered == ["Program", "Program"]  # one per branch (and every component under it)


def test_runtime_starts_branches_without_rendering():
    with LocalCloud(), counting_renders() as rendered:
        assert run_parallel() == [1, 2]
    assert rendered == []


def test_a_branch_worker_still_refuses_a_second_start():
    with LocalCloud():
        worker = BranchWorker(branch_worker_comm=mock.Mock(), program=mock.Mock(), env=mock.Mock())
        worker._worker_thread = object()  # as after a first start
        with pytest.raises(RuntimeError, match="Attempted to rerun BranchWorker"):
            worker.start()
