"""Adversarial safety cases (issue: one owner per acquisition, stop grace, lost releases).

Each case runs on the local runtime, on both DynamoDB backends, with the probe Lambda inside
the protected work: it counts the holders inside at entry, and a correct lock always reads 1.
Here: iterations, branches and nested sections of one execution, stopped and timed-out holders,
a lost acquire response, a failed liveness check. Redrives (``test_lock_safety_redrive.py``) and
sections a sibling cancelled (``test_lock_safety_cancelled.py``) share this file's fixture and
group.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from deployed import StackRun, deployed_stack
from safety_stack import PROBE_GRACE_S, SafetyStack
from locked_workflow.state_machines import lock_protocol as p


class Safety(StackRun):
    def machine_id(self, name: str) -> str:  # the stack names its machines itself
        return name

    def probes(self) -> str:
        return self.table("Probes")

    def probe(self, key: str) -> dict:
        return {k: int(v["N"]) for k, v in self.get("Probes", {"pk": {"S": key}}).items() if "N" in v}

    def lock(self, key: str) -> dict:
        return self.get("LocksTable", {"pk": {"S": p.namespaced("s", key)}})

    def run(self, machine: str, document: dict, timeout: float = 120):
        return self.cloud.wait_for(self.start(machine, document), timeout=timeout)


safety = deployed_stack(SafetyStack, "Safety", Safety)


def key(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:8]}"


def step_functions_only(safety, what: str) -> None:
    """Skip on DynamoDB Local a case whose subject is Step Functions behaviour (``what``): its
    writes are the lock's usual ones, which the concurrency, fault and recovery suites run on
    both backends."""
    if safety.cloud.backend != "moto":
        pytest.skip(f"{what} is Step Functions behaviour: one backend suffices")


def test_map_iterations_of_one_execution_on_one_key_serialize(safety):
    k = key("map")
    result = safety.run("MapSameKey", {"items": [{"key": k, "workMs": 600}] * 3})
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert [r["probe"]["insideAtEntry"] for r in result.output] == [1, 1, 1]
    probe = safety.probe(k)
    assert (probe["inside"], probe["entries"], probe.get("violations", 0)) == (0, 3, 0)
    assert probe["counter"] == probe["accepted"] == 3  # no lost update
    assert p.OWNER not in safety.lock(k) and safety.lock(k)[p.FENCE] == {"N": "3"}


def test_a_sibling_iteration_does_not_let_another_execution_in(safety):
    k = key("sibling")
    mapped = safety.cloud.start_execution(safety.arn("MapSameKey"), {"items": [{"key": k, "workMs": 1500}] * 2})
    time.sleep(0.5)
    intruders = [safety.cloud.start_execution(safety.arn("PlainStateMachine"), {"key": k, "workMs": 100})
                 for _ in range(2)]
    results = [safety.cloud.wait_for(a, timeout=120) for a in [mapped, *intruders]]
    assert [r.status for r in results] == ["SUCCEEDED"] * 3, [(r.error, r.cause) for r in results]
    assert safety.probe(k).get("violations", 0) == 0 and safety.probe(k)["entries"] == 4


def test_parallel_branches_of_one_execution_on_one_key_serialize(safety):
    k = key("parallel")
    result = safety.run("ParallelSameKey", {"key": k, "workMs": 600})
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert [r["probe"]["insideAtEntry"] for r in result.output] == [1, 1]
    probe = safety.probe(k)
    assert (probe["inside"], probe["entries"], probe.get("violations", 0)) == (0, 2, 0)
    assert probe["counter"] == probe["accepted"] == 2


def test_a_dismissal_that_fails_for_a_while_still_ends_the_hold(safety):
    """The work branch ends its presence branch with SendTaskSuccess: a failure of that call
    (here: ServiceUnavailable, twice) is tried again - before the fix, the branch ran on until
    the presence task's timeout (the 10-minute lease), the lock held all along."""
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    step_functions_only(safety, "a failed SendTaskSuccess")
    k = key("dismiss")
    with dynamodb_faults(Fault("SendTaskSuccess", "ServiceUnavailable", times=2, service="stepfunctions")) as log:
        result = safety.run("ParallelSameKey", {"key": k, "workMs": 100}, timeout=120)
    assert log.injected == 2
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    failed = [e["taskFailedEventDetails"].get("error") for e in result.history if e["type"] == "TaskFailed"]
    assert failed.count("Sfn.SfnException") == 2 and p.OWNER not in safety.lock(k), failed


def test_a_nested_section_on_the_same_key_passes_through_and_keeps_the_outer_hold(safety):
    k = key("nested")
    nested = safety.cloud.start_execution(safety.arn("Nested"), {"key": k, "workMs": 800})
    deadline = time.time() + 30  # the nested run holds the lock before the intruder starts
    while nested not in safety.lock(k).get(p.OWNER, {}).get("S", "") and time.time() < deadline:
        time.sleep(0.05)
    intruder = safety.cloud.start_execution(safety.arn("PlainStateMachine"), {"key": k, "workMs": 100})
    result, other = safety.cloud.wait_for(nested, timeout=60), safety.cloud.wait_for(intruder, timeout=60)
    assert result.status == "SUCCEEDED" and other.status == "SUCCEEDED", (result.error, result.cause, other.error)
    assert safety.probe(k).get("violations", 0) == 0 and safety.probe(k)["entries"] == 3
    # the inner section wrote nothing: one acquisition for the nested run, one for the intruder
    assert safety.lock(k)[p.FENCE] == {"N": "2"}
    names = [e["stateEnteredEventDetails"]["name"] for e in result.history if e["type"].endswith("StateEntered")]
    assert "InnerLock.LeftReentered" in names and names.count("OuterLock.Release") == 1
    # the intruder entered only after the outer hold ended
    outer_release = max(e["timestamp"] for e in result.history if e["type"] == "TaskSucceeded")
    entered = [e["timestamp"] for e in other.history
               if e["type"] == "TaskStateEntered" and e["stateEnteredEventDetails"]["name"] == "PlainProbe"]
    assert entered and entered[0] >= outer_release


def test_a_stopped_holders_lambda_finishes_before_anyone_else_enters(safety):
    step_functions_only(safety, "a stopped execution's Lambda running on")
    k = key("stopped")
    holder = safety.cloud.start_execution(safety.arn("GracefulStateMachine"), {"key": k, "workMs": 3000})
    deadline = time.time() + 60
    while safety.probe(k).get("inside", 0) == 0:  # its Lambda is at work
        assert time.time() < deadline, "the holder never entered its work"
        time.sleep(0.05)
    safety.cloud.stop_execution(holder)  # its Lambda runs on for ~3 s
    stopped_at = time.time()
    waiter = safety.cloud.start_execution(safety.arn("GracefulStateMachine"), {"key": k, "workMs": 100})
    result = safety.cloud.wait_for(waiter, timeout=120)
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert safety.probe(k).get("violations", 0) == 0 and safety.probe(k)["entries"] == 2
    entered = [e["timestamp"].timestamp() for e in result.history
               if e["type"] == "TaskStateEntered" and e["stateEnteredEventDetails"]["name"] == "GracefulProbe"]
    # not at once: after the grace (PROBE_GRACE_S: Init + the probe Lambda's timeout + 5 s), from the stop
    assert entered[0] - stopped_at >= PROBE_GRACE_S - 0.5, entered[0] - stopped_at


def test_a_task_that_timed_out_keeps_the_lock_while_its_invocation_may_run(safety):
    """The work's States.Timeout is re-raised under a catchable name; Step Functions stops
    waiting at the task's TimeoutSeconds (1 s) but not the Lambda invocation (its function's
    timeout: PROBE_TIMEOUT_S), so the lock is retired - held for the grace (that + 5 s) from the failure -
    not released: the next holder never enters beside the invocation still running."""
    step_functions_only(safety, "a task's timeout")
    k = key("timeout")
    result = safety.run("TaskTimeoutStateMachine", {"key": k, "workMs": 3500})
    assert result.status == "FAILED"
    assert result.error == "Lock.States.Timeout", (result.error, result.cause)
    assert json.loads(result.cause)["Error"] == "States.Timeout"
    lock = safety.lock(k)
    grace_ms = PROBE_GRACE_S * 1000
    assert p.OWNER in lock and int(lock[p.GRACE]["N"]) == grace_ms  # retired, not released
    assert abs(int(lock[p.EXPIRES_AT]["N"]) - (result.stop_date.timestamp() * 1000 + grace_ms)) < 3000
    intruder = safety.run("PlainStateMachine", {"key": k, "workMs": 100})
    assert intruder.status == "SUCCEEDED", (intruder.error, intruder.cause)
    probe = safety.probe(k)
    assert probe["entries"] == 2 and probe.get("violations", 0) == 0, probe


def test_janitor_retires_a_lock_whose_acquire_response_never_came_back(safety):
    """Issue 8.12: the execution is stopped between its acquire write and the response, so its
    history has the acquire's TaskScheduled but no result. An eventually consistent index might
    miss such a lock; the janitor reads the history and retires it all the same."""
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = key("cut")
    stored = p.namespaced("s", k)
    started: list[str] = []

    def stop_now() -> None:
        deadline = time.time() + 5
        while not started and time.time() < deadline:
            time.sleep(0.01)
        safety.cloud.stop_execution(started[0])

    cut = Fault("UpdateItem", "InternalServerError", after_call=True, then=stop_now,
                when=lambda params: params.get("UpdateExpression") == p.ACQUIRE.update
                and params["Key"][p.KEY_ATTRIBUTE]["S"] == stored)
    with dynamodb_faults(cut) as log:
        started.append(safety.cloud.start_execution(safety.arn("GracefulStateMachine"), {"key": k, "workMs": 100}))
        result = safety.cloud.wait_for(started[0], timeout=30)
    assert log.injected == 1 and result.status == "ABORTED"
    assert not [e for e in result.history if e["type"] == "TaskSucceeded"]  # no acquire result recorded
    held = safety.lock(k)
    assert p.owner_execution(held[p.OWNER]["S"]) == started[0]  # the write did happen
    stop_ms = int(result.stop_date.timestamp() * 1000)
    deadline = time.time() + 15
    while int(safety.lock(k)[p.EXPIRES_AT]["N"]) > stop_ms + PROBE_GRACE_S * 1000 + 2000:
        assert time.time() < deadline, "the janitor did not retire the lock"
        time.sleep(0.1)
    retired = int(safety.lock(k)[p.EXPIRES_AT]["N"])
    assert abs(retired - (stop_ms + PROBE_GRACE_S * 1000)) < 2000  # stop + grace


def test_a_redriven_holder_acquires_again_before_its_work_runs_again(safety):
    """Issue 8.3: a holder stopped mid-work, its lock freed after the grace and taken by another
    run, then redriven: it must not resume protected work beside that run."""
    step_functions_only(safety, "the redrive")
    k = key("redrive")
    holder = safety.cloud.start_execution(safety.arn("GracefulStateMachine"), {"key": k, "workMs": 3000})
    deadline = time.time() + 60
    while safety.probe(k).get("inside", 0) == 0:  # stopped mid-work (3 s of it: a loaded machine is slow)
        assert time.time() < deadline, "the holder never entered its work"
        time.sleep(0.05)
    safety.cloud.stop_execution(holder)
    intruder = safety.cloud.start_execution(safety.arn("GracefulStateMachine"), {"key": k, "workMs": 3000})
    while safety.probe(k).get("entries", 0) < 2:  # the intruder is in, after the grace
        assert time.time() < deadline + 30
        time.sleep(0.05)
    safety.cloud.stepfunctions.redrive_execution(executionArn=holder)
    redriven = safety.cloud.wait_for(holder, timeout=60)
    other = safety.cloud.wait_for(intruder, timeout=60)
    assert redriven.status == "SUCCEEDED" and other.status == "SUCCEEDED", (redriven.error, redriven.cause)
    probe = safety.probe(k)
    assert probe.get("violations", 0) == 0 and probe["entries"] == 3 and probe["counter"] == probe["accepted"]
    names = [e["stateEnteredEventDetails"]["name"] for e in redriven.history if e["type"].endswith("StateEntered")]
    assert "Lock.EntryFailed?" in names  # the redrive gate sent it to acquire again
    lock = safety.lock(k)  # three acquisitions in all, the last one released
    assert lock[p.FENCE] == {"N": "3"} and p.OWNER not in lock


def test_a_failed_liveness_check_never_lets_a_waiter_in(safety):
    """The holder's owner names an execution Step Functions cannot describe: the liveness
    check's DescribeExecution fails, and its Catch must resume the wait with the entry record
    (not the error) - else the next acquire had no key and the work ran without the lock."""
    step_functions_only(safety, "a failed DescribeExecution")
    from locked_workflow.constructs_lib.lock_client import LockClient

    k = key("undescribable")
    locks = next(v for name, v in safety.app.resources.items() if name.startswith("LocksTable"))
    client = LockClient(locks, namespace="s", dynamodb=safety.cloud.dynamodb)
    ghost = "arn:aws:states:us-east-1:123456789012:execution:NoSuchMachine:ghost"
    held = client.acquire(k, owner=ghost, lease=40)
    arn = safety.cloud.start_execution(safety.arn("PlainStateMachine"), {"key": k, "workMs": 50})
    time.sleep(12)  # several rounds, liveness checks included (every 2nd round)
    history = safety.cloud.stepfunctions.get_execution_history(executionArn=arn, maxResults=1000)["events"]
    described = [e for e in history if e["type"] == "TaskFailed"
                 and e.get("taskFailedEventDetails", {}).get("resource") == "describeExecution"]
    assert described, "the liveness check did not run"
    assert safety.probe(k).get("entries", 0) == 0  # still waiting: the ghost holds the lock
    client.release(held)
    result = safety.cloud.wait_for(arn, timeout=120)
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert safety.probe(k)["entries"] == 1 and safety.probe(k).get("violations", 0) == 0


def test_a_lambda_tasks_stop_grace_covers_a_cold_start_init_and_the_functions_timeout():
    """A stopped holder's Lambda task may still be in its cold start: Step Functions invoked the
    function before the stop, Lambda runs the Init phase (up to 10 s, outside the function's
    timeout), then the handler for up to the timeout. The derived stop grace must cover both,
    counted from the stop, or the next holder enters while the stopped holder's handler runs.
    ``make stress`` (seed 7, DynamoDB Local, a loaded machine) found it: a fair holder stopped
    0.5 s after its probe task was scheduled; an in-process function's first invocations wait
    for their import before their timeout starts (the runtime's Init: up to 5.9 s measured for
    the probe, 11.4 s for a janitor function), and its handler entered 9.9 s after the stop,
    past the 8 s grace, beside the next holders (fences ``[2, 2, 1, 3, ...]``; its fenced write
    was rejected)."""
    import aws_cdk as cdk
    from aws_cdk import aws_lambda as lambda_, aws_stepfunctions_tasks as tasks

    from locked_workflow.constructs_lib.section_work import LAMBDA_INIT_LIMIT_S, derive_stop_grace

    stack = cdk.Stack(cdk.App(), "Grace")
    timeout_s = 3
    function = lambda_.Function(stack, "Work", runtime=lambda_.Runtime.PYTHON_3_12, handler="index.handler",
                                code=lambda_.Code.from_inline("def handler(event, context): pass"),
                                timeout=cdk.Duration.seconds(timeout_s))
    work = tasks.LambdaInvoke.jsonata(stack, "Invoke", lambda_function=function)
    grace_s = derive_stop_grace(stack, [work.to_state_json()]).to_seconds()
    assert grace_s > timeout_s  # (the negative control: the grace is derived from this function)
    assert grace_s >= LAMBDA_INIT_LIMIT_S + timeout_s, grace_s
