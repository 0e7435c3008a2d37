"""Redriven holders on both DynamoDB backends: a task resumed by a redrive never runs without the
lock, a holder redriven at once waits out its own stopped work, and without the guard a redrive
resumes the work beside another holder (the negative control). (The fixture:
``test_lock_safety.py``, whose group this file is in.)"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from safety_stack import PROBE_TIMEOUT_S
from locked_workflow.state_machines import lock_protocol as p
from test_lock_safety import key, safety, step_functions_only  # noqa: F401 - safety: the stack's fixture


def _unguarded_copy(safety, machine: str) -> str:
    """The negative control of the redrive guard: ``machine`` deployed again with every guard
    (``lock_protocol.resumed_guard_expression``) replaced by ``null``."""
    guard = p.resumed_guard_expression("lock")
    sfn_client = safety.cloud.stepfunctions
    described = sfn_client.describe_state_machine(stateMachineArn=safety.arn(machine))

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value.replace(guard, "null") if isinstance(value, str) else value

    definition = json.loads(described["definition"])
    assert guard in described["definition"]
    return sfn_client.create_state_machine(
        name=f"Unguarded{uuid.uuid4().hex[:6]}", definition=json.dumps(strip(definition)),
        roleArn=described["roleArn"],
    )["stateMachineArn"]


def _stopped_in_its_work(safety, machine_arn: str, k: str, work_ms: int) -> tuple[str, float]:
    """A holder of ``k`` stopped while its probe is inside its work: (its ARN, the deadline
    the caller's further waits share)."""
    holder = safety.cloud.start_execution(machine_arn, {"key": k, "workMs": work_ms})
    deadline = time.time() + 60
    while safety.probe(k).get("inside", 0) == 0:
        assert time.time() < deadline, "the holder never entered its work"
        time.sleep(0.05)
    safety.cloud.stop_execution(holder)
    assert safety.cloud.wait_for(holder, timeout=60).status == "ABORTED"
    return holder, deadline


def _stopped_mid_work_and_taken_over(safety, machine_arn: str, k: str):
    """A holder stopped inside its protected work; its lock, retired as the janitor would after
    the grace, taken by a client that keeps it. Returns (holder ARN, client, client lease)."""
    from locked_workflow.constructs_lib.lock_client import LockClient

    holder, deadline = _stopped_in_its_work(safety, machine_arn, k, 1500)
    while safety.probe(k).get("inside", 0):  # the stopped run's Lambda ends (what the grace waits for)
        assert time.time() < deadline, "the stopped run's work never ended"
        time.sleep(0.05)
    locks = next(v for name, v in safety.app.resources.items() if name.startswith("LocksTable"))
    safety.cloud.dynamodb.update_item(  # the lease ends now (the janitor's retire, grace over)
        TableName=locks, Key={"pk": {"S": p.namespaced("s", k)}}, UpdateExpression="SET #e = :zero",
        ExpressionAttributeNames={"#e": p.EXPIRES_AT}, ExpressionAttributeValues={":zero": {"N": "0"}},
    )
    client = LockClient(locks, namespace="s", dynamodb=safety.cloud.dynamodb)
    return holder, client, client.acquire(k, lease=120, wait=30)


def _entered_after_redrive(safety, arn: str, state: str) -> bool:
    events = safety.cloud.stepfunctions.get_execution_history(executionArn=arn, maxResults=1000)["events"]
    redriven = next(i for i, e in enumerate(events) if e["type"] == "ExecutionRedriven")
    return any(e.get("stateEnteredEventDetails", {}).get("name") == state for e in events[redriven:])


@pytest.mark.parametrize("reevaluates_arguments, restores_variables", [
    (False, True),   # the runtime's default: the reading hardest for a lock
    (False, False),  # variables lost on redrive: the guard finds no $lock
    (True, True),    # the section's Arguments evaluated again (no gate there: the guard refuses)
])
def test_a_task_resumed_by_a_redrive_never_runs_without_the_lock(safety, reevaluates_arguments, restores_variables):
    """Issue 15.2.1: RedriveExecution resumes a branch at its unsuccessful step (the holder's
    protected task), past the acquire, while another holder has the lock. The resumed task must
    not run: the redriven run waits, acquires anew (a new fence) and only then does its work."""
    step_functions_only(safety, "the redrive")
    options = safety.cloud.redrive_options
    saved = (options.reevaluates_arguments, options.restores_variables)
    options.reevaluates_arguments, options.restores_variables = reevaluates_arguments, restores_variables
    try:
        k = key("resumed")
        holder, client, lease = _stopped_mid_work_and_taken_over(safety, safety.arn("GracefulStateMachine"), k)
        safety.cloud.stepfunctions.redrive_execution(executionArn=holder)
        deadline = time.time() + 60
        while not _entered_after_redrive(safety, holder, "Lock.Held?"):  # refused: it waits for the client
            assert time.time() < deadline, "the redriven holder never reached the wait loop"
            time.sleep(0.1)
        assert safety.probe(k)["entries"] == 1  # its work did not resume beside the client's hold
        client.release(lease)
        result = safety.cloud.wait_for(holder, timeout=120)
    finally:
        options.reevaluates_arguments, options.restores_variables = saved
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    probe = safety.probe(k)
    assert probe["entries"] == 2 and probe.get("violations", 0) == 0
    lock = safety.lock(k)  # acquired anew after the client, and released
    assert lock[p.FENCE] == {"N": str(lease.fence + 1)} and p.OWNER not in lock


@pytest.mark.parametrize("reevaluates_arguments", [False, True])
def test_a_holder_redriven_at_once_waits_out_its_own_stopped_work(safety, reevaluates_arguments):
    """A holder stopped mid-work and redriven at once, while its stopped run's Lambda still
    runs: the refused task's section must not release the old acquisition (that let the
    redriven run in beside its own zombie), but retire it - held for the stop grace - and
    acquire anew after it."""
    step_functions_only(safety, "the redrive")
    options = safety.cloud.redrive_options
    saved = options.reevaluates_arguments
    options.reevaluates_arguments = reevaluates_arguments
    try:
        k = key("zombie")
        holder, deadline = _stopped_in_its_work(safety, safety.arn("GracefulStateMachine"), k, 3000)
        stopped = time.time()
        safety.cloud.stepfunctions.redrive_execution(executionArn=holder)  # its Lambda still runs
        result = safety.cloud.wait_for(holder, timeout=120)
    finally:
        options.reevaluates_arguments = saved
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    while safety.probe(k).get("inside", 0):  # the stopped run's Lambda ends by its timeout (PROBE_TIMEOUT_S)
        assert time.time() < deadline + 60
        time.sleep(0.05)
    probe = safety.probe(k)
    assert probe["entries"] == 2 and probe.get("violations", 0) == 0, probe
    assert probe["counter"] == probe["accepted"], probe  # no lost update
    entered_again = max(
        e["timestamp"].timestamp() for e in result.history
        if e.get("stateEnteredEventDetails", {}).get("name") == "GracefulProbe"
    )
    assert entered_again - stopped >= PROBE_TIMEOUT_S  # not before the stopped work could have ended


def test_negative_control_without_the_guard_a_redrive_resumes_the_work_beside_another_holder(safety):
    step_functions_only(safety, "the redrive")
    k = key("unguarded")
    holder, client, lease = _stopped_mid_work_and_taken_over(safety, _unguarded_copy(safety, "GracefulStateMachine"), k)
    safety.cloud.stepfunctions.redrive_execution(executionArn=holder)
    deadline = time.time() + 60
    while safety.probe(k)["entries"] < 2:  # the resumed task runs at once ...
        assert time.time() < deadline, "the unguarded holder's work did not resume"
        time.sleep(0.05)
    assert safety.lock(k)[p.OWNER] == {"S": lease.owner}  # ... while the client holds the lock
    client.release(lease)
    result = safety.cloud.wait_for(holder, timeout=120)
    assert (result.status, result.error) == ("FAILED", p.ERROR_LOST)  # found out only at its release
