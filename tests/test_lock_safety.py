"""Adversarial safety cases (issue: one owner per acquisition, stop grace, lost releases).

Each case runs on the local runtime, on both DynamoDB backends, with the probe Lambda inside
the protected work: it counts the holders inside at entry, and a correct lock always reads 1.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from safety_stack import PROBE_TIMEOUT_S
from state_machines import lock_protocol as p


@pytest.fixture(scope="session")
def safety_synth():
    from safety_stack import SafetyStack
    from constructs_lib.local.synth import synth_app

    return synth_app(lambda app: SafetyStack(app, "Safety"), context={"aws:cdk:enable-asset-metadata": True})


@pytest.fixture(scope="module", params=["moto", "dynamodb-local"])
def safety(request, safety_synth):
    from deployed import local_deployment

    for cloud, app in local_deployment(request.param, safety_synth):
        yield Safety(cloud, app)


class Safety:
    def __init__(self, cloud, app):
        self.cloud, self.app = cloud, app

    def arn(self, name: str) -> str:
        return self.app.state_machine_arn(name)

    def probes(self) -> str:
        return next(v for k, v in self.app.resources.items() if k.startswith("Probes"))

    def probe(self, key: str) -> dict:
        item = self.cloud.dynamodb.get_item(TableName=self.probes(), Key={"pk": {"S": key}}, ConsistentRead=True)
        return {k: int(v["N"]) for k, v in item.get("Item", {}).items() if "N" in v}

    def lock(self, key: str) -> dict:
        locks = next(v for k, v in self.app.resources.items() if k.startswith("LocksTable"))
        return self.cloud.dynamodb.get_item(
            TableName=locks, Key={"pk": {"S": p.namespaced("s", key)}}, ConsistentRead=True
        ).get("Item", {})

    def run(self, machine: str, document: dict, timeout: float = 120):
        return self.cloud.wait_for(self.cloud.start_execution(self.arn(machine), document), timeout=timeout)


def key(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:8]}"


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
    k = key("stopped")
    holder = safety.cloud.start_execution(safety.arn("GracefulStateMachine"), {"key": k, "workMs": 3000})
    deadline = time.time() + 10
    while safety.probe(k).get("inside", 0) == 0 and time.time() < deadline:
        time.sleep(0.05)
    safety.cloud.stop_execution(holder)  # its Lambda runs on for ~3 s
    stopped_at = time.time()
    waiter = safety.cloud.start_execution(safety.arn("GracefulStateMachine"), {"key": k, "workMs": 100})
    result = safety.cloud.wait_for(waiter, timeout=120)
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert safety.probe(k).get("violations", 0) == 0 and safety.probe(k)["entries"] == 2
    entered = [e["timestamp"].timestamp() for e in result.history
               if e["type"] == "TaskStateEntered" and e["stateEnteredEventDetails"]["name"] == "GracefulProbe"]
    # not at once: after the grace, the probe Lambda's 4 s timeout + 5 s, from the stop
    assert entered[0] - stopped_at >= PROBE_TIMEOUT_S + 5 - 0.5, entered[0] - stopped_at


def test_a_states_error_of_the_work_is_re_raised_under_a_catchable_name(safety):
    k = key("timeout")
    result = safety.run("TaskTimeoutStateMachine", {"key": k, "workMs": 2500})
    assert result.status == "FAILED"
    assert result.error == "Lock.States.Timeout", (result.error, result.cause)
    assert json.loads(result.cause)["Error"] == "States.Timeout"
    assert p.OWNER not in safety.lock(k)  # released on the way out


def test_janitor_retires_a_lock_whose_acquire_response_never_came_back(safety):
    """Issue 8.12: the execution is stopped between its acquire write and the response, so its
    history has the acquire's TaskScheduled but no result. An eventually consistent index might
    miss such a lock; the janitor reads the history and retires it all the same."""
    from constructs_lib.local.faults import Fault, dynamodb_faults

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
    while int(safety.lock(k)[p.EXPIRES_AT]["N"]) > stop_ms + (PROBE_TIMEOUT_S + 5) * 1000 + 2000:
        assert time.time() < deadline, "the janitor did not retire the lock"
        time.sleep(0.1)
    retired = int(safety.lock(k)[p.EXPIRES_AT]["N"])
    assert abs(retired - (stop_ms + (PROBE_TIMEOUT_S + 5) * 1000)) < 2000  # stop + grace


def test_a_redriven_holder_acquires_again_before_its_work_runs_again(safety):
    """Issue 8.3: a holder stopped mid-work, its lock freed after the grace and taken by another
    run, then redriven: it must not resume protected work beside that run."""
    k = key("redrive")
    holder = safety.cloud.start_execution(safety.arn("GracefulStateMachine"), {"key": k, "workMs": 1000})
    deadline = time.time() + 10
    while safety.probe(k).get("inside", 0) == 0 and time.time() < deadline:
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
    from constructs_lib.lock_client import LockClient

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
