"""Fix ``patches/execution_end``: StopExecution reports ABORTED at once, history closed.

Also documents that bare moto already honours a state machine's ``TimeoutSeconds``.
"""

from __future__ import annotations

import time

import boto3
import pytest

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.patches import execution_snapshot
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end, wait_until

SLEEP = {"StartAt": "Sleep", "TimeoutSeconds": 1, "States": {"Sleep": {"Type": "Wait", "Seconds": 30, "End": True}}}


def waiting_for_a_token(queue_url: str) -> dict:
    """A Task that blocks until someone calls SendTaskSuccess (nobody does)."""
    return {
        "StartAt": "Block",
        "States": {
            "Block": {
                "Type": "Task",
                "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                "Parameters": {"QueueUrl": queue_url, "MessageBody": {"token.$": "$$.Task.Token"}},
                "End": True,
            }
        },
    }


def task_started(sfn, arn: str) -> bool:
    events = sfn.get_execution_history(executionArn=arn)["events"]
    return any(event["type"] == "TaskSubmitted" for event in events)


def test_bare_moto_keeps_a_stopped_execution_running_while_its_task_blocks():
    with bare_moto(execution_snapshot.apply):
        sqs = boto3.client("sqs", region_name=REGION)
        machine = create_state_machine(waiting_for_a_token(sqs.create_queue(QueueName="work")["QueueUrl"]))
        sfn = boto3.client("stepfunctions", region_name=REGION)
        arn = sfn.start_execution(stateMachineArn=machine, name="blocked")["executionArn"]
        assert wait_until(lambda: task_started(sfn, arn))
        sfn.stop_execution(executionArn=arn)
        assert sfn.describe_execution(executionArn=arn)["status"] == "RUNNING"


def test_bare_moto_honours_timeout_seconds():
    with bare_moto():
        sfn = boto3.client("stepfunctions", region_name=REGION)
        arn = sfn.start_execution(stateMachineArn=create_state_machine(SLEEP), name="slow")["executionArn"]
        assert wait_for_end(arn, timeout=10)["status"] == "TIMED_OUT"


def test_runtime_aborts_at_once():
    with LocalCloud() as cloud:
        queue = cloud.client("sqs").create_queue(QueueName="work")["QueueUrl"]
        machine = create_state_machine(waiting_for_a_token(queue))
        blocked = cloud.start_execution(machine, {})
        assert wait_until(lambda: task_started(cloud.stepfunctions, blocked))
        cloud.stop_execution(blocked, error="Test.Stop", cause="enough")
        description = cloud.describe(blocked)
        just_started = cloud.start_execution(machine, {})
        cloud.stop_execution(just_started)  # before its interpreter exists, maybe
        history = cloud.history(blocked)
        assert cloud.wait_for(just_started, timeout=5).status == "ABORTED"
    assert description["status"] == "ABORTED"
    assert description["stopDate"] >= description["startDate"]
    assert (description["error"], description["cause"]) == ("Test.Stop", "enough")
    assert history[-1]["type"] == "ExecutionAborted"
    assert history[-1]["executionAbortedEventDetails"] == {"error": "Test.Stop", "cause": "enough"}


def test_runtime_times_out():
    with LocalCloud() as cloud:
        result = cloud.wait_for(cloud.start_execution(create_state_machine(SLEEP), {}), timeout=10)
    assert result.status == "TIMED_OUT"
    assert result.history[-1]["type"] == "ExecutionTimedOut"


def test_runtime_closes_the_history_of_a_timed_out_blocked_task():
    with LocalCloud() as cloud:
        queue = cloud.client("sqs").create_queue(QueueName="work")["QueueUrl"]
        # (5 s: the task's SendMessage must have been answered - TaskSubmitted - before the
        # execution times out, which a loaded machine may take over a second to do)
        machine = create_state_machine({**waiting_for_a_token(queue), "TimeoutSeconds": 5})
        result = cloud.wait_for(cloud.start_execution(machine, {}), timeout=60)
    assert result.status == "TIMED_OUT"
    assert [event["type"] for event in result.history][-2:] == ["TaskSubmitted", "ExecutionTimedOut"]


def test_wait_for_returns_when_the_execution_ends_not_at_its_next_poll():
    """``wait_for`` waits on the end of an execution (``execution_end.wait_for_end``), not on a
    poll interval: with a 60 s ``poll_s`` and a 1 s execution it still returns in seconds. On a
    sleeping poll it returned after 60 s (the first poll finds the execution running)."""
    one_second = {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 1, "End": True}}}
    with LocalCloud() as cloud:
        arn = cloud.start_execution(create_state_machine(one_second), {})
        started = time.monotonic()
        result = cloud.wait_for(arn, timeout=120, poll_s=60)
        waited = time.monotonic() - started
    assert result.status == "SUCCEEDED"
    assert waited < 30, f"wait_for took {waited:.1f} s for a 1 s execution: it slept out its poll"


def test_wait_for_asks_the_api_only_once_the_backend_says_it_ended_or_a_second_passed():
    """While the backend says the execution runs, ``wait_all`` calls DescribeExecution at most
    once a second (each call ~3 ms of the process's CPU); it used to call it at once, on its
    first poll, for every execution waited for. An unknown ARN still goes to the API."""
    two_seconds = {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 2, "End": True}}}
    with LocalCloud() as cloud:
        arn = cloud.start_execution(create_state_machine(two_seconds), {})
        calls: list[tuple[float, str]] = []
        describe = cloud.describe
        started = time.monotonic()

        def counting(execution_arn: str) -> dict:
            try:
                backend = cloud.moto_execution(execution_arn).exec_status
            except Exception:  # noqa: BLE001 - an execution the backend does not know
                backend = "unknown"
            calls.append((time.monotonic() - started, getattr(backend, "value", backend)))
            return describe(execution_arn)

        cloud.describe = counting  # type: ignore[method-assign]
        assert cloud.wait_for(arn, timeout=120).status == "SUCCEEDED"
        unknown = arn.rsplit(":", 1)[0] + ":never-started"
        with pytest.raises(Exception, match="ExecutionDoesNotExist"):
            cloud.wait_for(unknown, timeout=5)
    early_while_running = [(t, status) for t, status in calls if t < 0.9 and status == "RUNNING"]
    assert calls and not early_while_running, calls
