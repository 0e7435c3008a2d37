"""Fix ``patches/cancelled_branches``: a failed branch (iteration) cancels its siblings at once.

Every machine parks its tasks on task tokens the test holds (``Gate`` decides when the
failing branch fails, ``Hold`` keeps the execution RUNNING after the user's Catch), so no
assertion depends on timing. The bare-moto halves show the gap with moto as shipped (plus
``execution_snapshot``, only so that a second execution can start).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import boto3
import pytest

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.patches import execution_snapshot
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end, wait_until

TABLE = "cancel"


def _park(key: str, **fields: Any) -> dict:
    """A callback task that stores its token under ``<run>#<key>`` and waits for it."""
    return {
        "Type": "Task", "Resource": "arn:aws:states:::aws-sdk:dynamodb:putItem.waitForTaskToken",
        "Parameters": {"TableName": TABLE, "Item": {
            "pk": {"S.$": f"States.Format('{{}}#{key}', $.run)"}, "token": {"S.$": "$$.Task.Token"}}},
        "ResultPath": None, **fields,
    }


def _write(key: str) -> dict:
    """A plain DynamoDB write of the item ``<run>#<key>``."""
    return {
        "Type": "Task", "Resource": "arn:aws:states:::aws-sdk:dynamodb:putItem",
        "Parameters": {"TableName": TABLE, "Item": {"pk": {"S.$": f"States.Format('{{}}#{key}', $.run)"}}},
        "End": True,
    }


FAILING_BRANCH = {"StartAt": "Gate", "States": {"Gate": _park("gate", Next="Boom"), "Boom": {"Type": "Fail", "Error": "Boom"}}}
CAUGHT = {"Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Hold"}], "End": True}

#: Branch A parks (its Catch and its next state would write); branch B fails when the test
#: opens its gate; the user catches the Parallel's failure and the execution parks in Hold.
PARALLEL = {
    "StartAt": "Par",
    "States": {
        "Par": {"Type": "Parallel", "Branches": [
            {"StartAt": "Park", "States": {
                "Park": _park("park", HeartbeatSeconds=600, Next="Write",
                              Catch=[{"ErrorEquals": ["States.ALL"], "Next": "CaughtA"}]),
                "CaughtA": _write("caught"),
                "Write": _write("written"),
            }},
            FAILING_BRANCH,
        ], **CAUGHT},
        "Hold": _park("hold", End=True),
    },
}

#: The same with an Inline Map: iteration 0 parks, iteration 1 fails when the gate opens.
MAP = {
    "StartAt": "Each",
    "States": {
        "Each": {
            "Type": "Map", "ItemsPath": "$.roles",
            "ItemSelector": {"run.$": "$.run", "role.$": "$$.Map.Item.Value"},
            "ItemProcessor": {"ProcessorConfig": {"Mode": "INLINE"}, "StartAt": "Which", "States": {
                "Which": {"Type": "Choice", "Choices": [{"Variable": "$.role", "StringEquals": "gate", "Next": "Gate"}],
                          "Default": "Park"},
                "Park": _park("park", HeartbeatSeconds=600, End=True),
                "Gate": _park("gate", Next="Boom"),
                "Boom": {"Type": "Fail", "Error": "Boom"},
            }},
            **CAUGHT,
        },
        "Hold": _park("hold", End=True),
    },
}

#: Branch A is itself a Parallel whose only branch parks; branch W waits ten minutes.
NESTED = {
    "StartAt": "Outer",
    "States": {
        "Outer": {"Type": "Parallel", "Branches": [
            {"StartAt": "Inner", "States": {"Inner": {"Type": "Parallel", "End": True, "Branches": [
                {"StartAt": "Park", "States": {"Park": _park("park", End=True)}}]}}},
            {"StartAt": "Sleep", "States": {"Sleep": {"Type": "Wait", "Seconds": 600, "Next": "Woken"},
                                            "Woken": _write("woken")}},
            FAILING_BRANCH,
        ], **CAUGHT},
        "Hold": _park("hold", End=True),
    },
}


class Run:
    """One execution of a machine, with boto3 clients on whichever mock is active."""

    def __init__(self, definition: dict, **input: Any) -> None:
        self.sfn = boto3.client("stepfunctions", region_name=REGION)
        self.ddb = boto3.client("dynamodb", region_name=REGION)
        if TABLE not in self.ddb.list_tables()["TableNames"]:
            self.ddb.create_table(
                TableName=TABLE, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
        self.run = uuid.uuid4().hex
        machine = create_state_machine(definition, name=f"m-{self.run}")
        self.arn = self.sfn.start_execution(
            stateMachineArn=machine, name=self.run, input=json.dumps({"run": self.run, **input})
        )["executionArn"]

    def item(self, key: str) -> dict | None:
        return self.ddb.get_item(TableName=TABLE, Key={"pk": {"S": f"{self.run}#{key}"}}).get("Item")

    def token(self, key: str) -> str:
        item = wait_until(lambda: self.item(key), timeout=30)
        assert item, f"the task parked as {key!r} never stored its token"
        return item["token"]["S"]

    def fail_the_failing_branch(self) -> None:
        """Open the gate: branch B fails; wait until the user's Catch has parked in Hold."""
        self.sfn.send_task_success(taskToken=self.token("gate"), output="{}")
        self.token("hold")

    def answers(self, token: str) -> dict[str, str]:
        """What SendTaskHeartbeat, SendTaskSuccess and SendTaskFailure answer on ``token``."""
        calls = {
            "heartbeat": lambda: self.sfn.send_task_heartbeat(taskToken=token),
            "success": lambda: self.sfn.send_task_success(taskToken=token, output="{}"),
            "failure": lambda: self.sfn.send_task_failure(taskToken=token, error="Late", cause="worker"),
        }
        answers = {}
        for name, call in calls.items():
            try:
                call()
                answers[name] = "OK"
            except self.sfn.exceptions.ClientError as error:
                answers[name] = error.response["Error"]["Code"]
        return answers

    def finish(self) -> dict:
        self.sfn.send_task_success(taskToken=self.token("hold"), output="{}")
        description = wait_for_end(self.arn, timeout=30)
        return description

    def history(self) -> list[dict]:
        return self.sfn.get_execution_history(executionArn=self.arn, maxResults=1000)["events"]


def types(history: list[dict]) -> list[str]:
    return [event["type"] for event in history]


def entered(history: list[dict]) -> list[str]:
    return [event["stateEnteredEventDetails"]["name"] for event in history if "stateEnteredEventDetails" in event]


CLOSED = {"heartbeat": "TaskTimedOut", "success": "TaskTimedOut", "failure": "TaskTimedOut"}


@pytest.fixture(scope="module")
def cloud():
    with LocalCloud() as cloud:
        yield cloud


# -- bare moto ---------------------------------------------------------------------------------


def test_bare_moto_keeps_a_cancelled_branchs_token_open_and_lets_its_task_time_out_later():
    with bare_moto(execution_snapshot.apply):
        run = Run(PARALLEL)
        park = run.token("park")
        run.fail_the_failing_branch()
        assert run.sfn.describe_execution(executionArn=run.arn)["status"] == "RUNNING"
        run.sfn.send_task_heartbeat(taskToken=park)  # no error: the cancelled task takes heartbeats...
        # ... the heartbeat wakes it, and it records a TaskTimedOut long after the Parallel failed
        assert wait_until(lambda: "TaskTimedOut" in types(run.history()), timeout=30)
        run.sfn.send_task_failure(taskToken=park, error="Late", cause="worker")  # still no error
        assert "TaskStateAborted" not in types(run.history())


def test_bare_moto_lets_a_cancelled_map_iteration_time_out_and_fail_later():
    with bare_moto(execution_snapshot.apply):
        run = Run(MAP, roles=["park", "gate"])
        park = run.token("park")
        run.fail_the_failing_branch()
        run.sfn.send_task_heartbeat(taskToken=park)  # no error; it wakes the cancelled task...

        def failed_iterations() -> list:
            return [e["mapIterationFailedEventDetails"] for e in run.history() if e["type"] == "MapIterationFailed"]

        # ... which then records TaskTimedOut and fails its iteration, long after the Map failed
        assert wait_until(lambda: {"name": "Each", "index": 0} in failed_iterations(), timeout=30)
        assert "TaskTimedOut" in types(run.history()) and "MapIterationAborted" not in types(run.history())


def test_bare_moto_refuses_a_heartbeat_for_a_waiting_callback_task_without_heartbeat_seconds():
    with bare_moto(execution_snapshot.apply):
        run = Run(PARALLEL)
        with pytest.raises(run.sfn.exceptions.InvalidToken):
            run.sfn.send_task_heartbeat(taskToken=run.token("gate"))


# -- the runtime -------------------------------------------------------------------------------


def test_a_cancelled_branchs_callback_token_is_closed_and_the_execution_goes_on(cloud):
    run = Run(PARALLEL)
    park = run.token("park")
    run.sfn.send_task_heartbeat(taskToken=park)  # before the sibling fails: a live task
    run.fail_the_failing_branch()
    assert run.sfn.describe_execution(executionArn=run.arn)["status"] == "RUNNING"
    assert run.answers(park) == CLOSED
    assert run.finish()["status"] == "SUCCEEDED"
    history = run.history()
    kinds = types(history)
    assert kinds.count("TaskStateAborted") == 1
    assert kinds.index("FailStateEntered") < kinds.index("TaskStateAborted") < kinds.index("ParallelStateFailed")
    assert kinds.count("TaskSucceeded") == 2  # the gate and Hold; the cancelled task records no outcome
    assert "TaskTimedOut" not in kinds and "TaskFailed" not in kinds
    assert entered(history)[-1] == "Hold" and kinds[-1] == "ExecutionSucceeded"


def test_a_cancelled_branch_runs_no_catch(cloud):
    run = Run(PARALLEL)
    park = run.token("park")
    run.fail_the_failing_branch()
    with pytest.raises(run.sfn.exceptions.TaskTimedOut):  # a late worker reports what Park's Catch catches
        run.sfn.send_task_failure(taskToken=park, error="Late", cause="worker")
    run.finish()
    history = run.history()
    assert "TaskFailed" not in types(history) and "CaughtA" not in entered(history)
    assert run.item("caught") is None


def test_a_cancelled_branch_enters_no_further_state(cloud):
    run = Run(PARALLEL)
    park = run.token("park")
    run.fail_the_failing_branch()
    with pytest.raises(run.sfn.exceptions.TaskTimedOut):  # a late worker completes Park
        run.sfn.send_task_success(taskToken=park, output="{}")
    run.finish()
    history = run.history()
    assert types(history).count("TaskSucceeded") == 2 and "Write" not in entered(history)  # the gate, Hold
    assert run.item("written") is None


def test_a_cancelled_map_iteration_is_aborted_and_its_token_closed(cloud):
    run = Run(MAP, roles=["park", "gate"])
    park = run.token("park")
    run.sfn.send_task_heartbeat(taskToken=park)
    run.fail_the_failing_branch()
    assert run.answers(park) == CLOSED
    assert run.finish()["status"] == "SUCCEEDED"
    history = run.history()
    kinds = types(history)
    aborted = [e["mapIterationAbortedEventDetails"] for e in history if e["type"] == "MapIterationAborted"]
    failed = [e["mapIterationFailedEventDetails"] for e in history if e["type"] == "MapIterationFailed"]
    assert aborted == [{"name": "Each", "index": 0}] and failed == [{"name": "Each", "index": 1}]
    assert "MapIterationSucceeded" not in kinds
    assert kinds.index("TaskStateAborted") < kinds.index("MapIterationAborted") < kinds.index("MapStateFailed")


def test_a_cancelled_nested_parallel_aborts_inside_out_and_a_wait_is_cut_short(cloud):
    run = Run(NESTED)
    park = run.token("park")
    run.fail_the_failing_branch()
    assert run.answers(park) == CLOSED
    run.finish()
    kinds = types(run.history())
    assert kinds.index("TaskStateAborted") < kinds.index("ParallelStateAborted") < kinds.index("ParallelStateFailed")
    assert kinds.count("ParallelStateAborted") == 1  # the inner one; the outer one failed
    assert kinds.index("WaitStateAborted") < kinds.index("ParallelStateFailed") and "WaitStateExited" not in kinds
    assert run.item("woken") is None


def test_a_stopped_executions_callback_token_is_closed(cloud):
    run = Run(PARALLEL)
    park = run.token("park")
    cloud.stop_execution(run.arn)
    assert run.answers(park) == CLOSED
    assert types(run.history())[-1] == "ExecutionAborted"


def test_a_waiting_callback_task_without_heartbeat_seconds_accepts_heartbeats(cloud):
    run = Run(PARALLEL)
    gate = run.token("gate")
    run.sfn.send_task_heartbeat(taskToken=gate)
    run.fail_the_failing_branch()
    assert run.finish()["status"] == "SUCCEEDED"
    with pytest.raises(run.sfn.exceptions.InvalidToken):  # its execution has ended
        run.sfn.send_task_heartbeat(taskToken=gate)


def test_a_token_call_is_not_answered_with_a_crash_while_another_execution_starts():
    """moto walks every execution's environment, None while one is starting: the call is tried
    again (it crashed as States.Runtime in a waiter probing a holder's token); other errors stay."""
    from locked_workflow.testing.patches import cancelled_branches as cb

    calls = []

    def starting_then_answered(self, token):
        calls.append(token)
        if len(calls) < 3:
            raise AttributeError("'NoneType' object has no attribute 'callback_pool_manager'")
        return "answered"

    assert cb._past_starting_executions(starting_then_answered, None, "t") == "answered" and len(calls) == 3

    def broken(self, token):
        raise AttributeError("something else")

    with pytest.raises(AttributeError, match="something else"):
        cb._past_starting_executions(broken, None, "t")


def test_a_token_call_does_not_wait_for_executions_that_are_still_starting():
    """A starting execution (no environment yet) has no task and so no token: a token call's
    walk leaves it out instead of waiting until it has started (a wake-up waited 5 s in a burst
    of starts); outside a token call the walk is moto's."""
    from types import SimpleNamespace

    from locked_workflow.testing.patches import cancelled_branches as cb

    running = SimpleNamespace(exec_worker=SimpleNamespace(env=object()))
    starting = SimpleNamespace(exec_worker=SimpleNamespace(env=None))
    unstarted = SimpleNamespace(exec_worker=None)
    walk = cb._executions(lambda self, status=None: [starting, running, unstarted])
    assert walk(None) == [starting, running, unstarted]

    def send(self, token):
        return walk(self)

    assert cb._past_starting_executions(send, None, "t") == [running]
    assert walk(None) == [starting, running, unstarted]  # the flag is this call's only
