"""Adversarial safety cases (issue: one owner per acquisition, stop grace, lost releases).

Each case runs on the local runtime, on both DynamoDB backends, with the probe Lambda inside
the protected work: it counts the holders inside at entry, and a correct lock always reads 1.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from lock_invariants import HeartbeatCounter, LeaseEndsSeen, presence_dated_back, probe_as_client
from deployed import StackRun, deployed_stack
from safety_stack import PROBE_GRACE_S, PROBE_TIMEOUT_S, SafetyStack, fail_sibling
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


# ---- a section cancelled by a sibling branch (the user catches the failure) ----------------

def _cancelled_holder(safety, machine: str, k: str):
    """Start ``machine`` (a section beside a branch that fails when told, the failure caught,
    the execution RUNNING for 120 s more), and once its probe is inside, fail the sibling: its
    Lambda runs 3 s, past the cancellation."""
    holder = safety.cloud.start_execution(safety.arn(machine), {"key": k, "workMs": 3000, "siblingGate": k})
    deadline = time.time() + 60
    while safety.probe(k).get("entries", 0) == 0 and time.time() < deadline:
        time.sleep(0.05)
    assert safety.probe(k).get("entries", 0) == 1, "the holder never entered its work"
    fail_sibling(safety.cloud, safety.app, k)
    return holder


def test_a_section_cancelled_by_a_sibling_frees_its_lock_after_its_grace(safety):
    """Step Functions cancels the holding branch (no Catch, no event, the execution goes on
    RUNNING). A waiter's probe of the holder's presence token finds it closed: the lock is
    held for the stop grace from then (the cancelled Lambda may still run), not for the
    10-minute lease - and nobody enters while that Lambda runs."""
    k = key("cancelled")
    holder = _cancelled_holder(safety, "SeenCancelled", k)
    waiter = safety.cloud.start_execution(safety.arn("PlainStateMachine"), {"key": k, "workMs": 100})
    result = safety.cloud.wait_for(waiter, timeout=180)
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert safety.cloud.stepfunctions.describe_execution(executionArn=holder)["status"] == "RUNNING"
    probe = safety.probe(k)
    assert (probe["entries"], probe.get("violations", 0), probe["inside"]) == (2, 0, 0)
    history = safety.cloud.stepfunctions.get_execution_history(executionArn=holder, maxResults=1000)["events"]
    cancelled = [e["timestamp"].timestamp() for e in history if e["type"] == "ParallelStateFailed"]
    assert cancelled, [e["type"] for e in history]
    item = safety.cloud.dynamodb.get_item(TableName=safety.probes(), Key={"pk": {"S": k}}, ConsistentRead=True)["Item"]
    entered = sorted(int(n["N"]) / 1000 for n in item["enteredAt"]["L"])
    # the waiter entered its stop grace (PROBE_GRACE_S) after the cancel
    assert entered[1] - cancelled[0] >= PROBE_GRACE_S - 0.5, entered[1] - cancelled[0]
    assert safety.lock(k)[p.FENCE] == {"N": "2"}  # the waiter's is a new acquisition
    safety.cloud.stop_execution(holder)


def test_negative_control_without_the_presence_a_cancelled_section_blocks_for_its_lease(safety):
    """Without the presence branch, a waiter's liveness checks see only a RUNNING execution:
    well past the cancelled Lambda's grace, the lock still has most of its 10-minute lease."""
    step_functions_only(safety, "the cancellation")
    k = key("blind")
    holder = _cancelled_holder(safety, "BlindCancelled", k)
    waiter = safety.cloud.start_execution(safety.arn("PlainStateMachine"), {"key": k, "workMs": 100})
    cancelled_by = time.time() + 1  # the sibling fails 1 s after the holder's start at the latest

    def checks() -> int:
        events = safety.cloud.stepfunctions.get_execution_history(executionArn=waiter, maxResults=1000)["events"]
        return sum(1 for e in events if e["type"] == "TaskStateEntered"
                   and e["stateEnteredEventDetails"]["name"] == "Lock.DescribeHolder")

    deadline = time.time() + 120  # two liveness checks after the grace (PROBE_GRACE_S) has passed
    while (checks() < 2 or time.time() < cancelled_by + PROBE_GRACE_S + 3) and time.time() < deadline:
        time.sleep(0.5)
    assert checks() >= 2
    lock = safety.lock(k)
    assert holder in lock[p.OWNER]["S"], lock
    assert int(lock[p.EXPIRES_AT]["N"]) / 1000 - time.time() > 8 * 60  # held for the lease
    assert safety.probe(k)["entries"] == 1
    safety.cloud.stop_execution(waiter)
    safety.cloud.stop_execution(holder)


# ---- a LockClient waiting behind a section cancelled by a sibling (issue 25, clients) ------

def _safety_client(safety, stepfunctions=None):
    from locked_workflow.constructs_lib.lock_client import LockClient

    locks = next(v for k, v in safety.app.resources.items() if k.startswith("LocksTable"))
    return LockClient(locks, namespace="s", dynamodb=safety.cloud.dynamodb,
                      stepfunctions=stepfunctions or safety.cloud.stepfunctions), locks


def _holding_with_presence(safety, k: str, *, work_ms: int) -> str:
    """A SeenCancelled hold of ``k`` at work (its sibling waits on the gate ``k``), its presence
    registered: the holder's execution ARN."""
    holder = safety.cloud.start_execution(safety.arn("SeenCancelled"), {"key": k, "workMs": work_ms, "siblingGate": k})
    deadline = time.time() + 60
    while (safety.probe(k).get("entries", 0) == 0 or p.PRESENCE not in safety.lock(k)) and time.time() < deadline:
        time.sleep(0.05)
    assert safety.probe(k).get("entries", 0) == 1 and p.PRESENCE in safety.lock(k), safety.lock(k)
    return holder


def test_a_client_waiting_behind_a_section_cancelled_by_a_sibling_gets_the_lock_after_its_grace(safety):
    """A ``LockClient`` waiting behind a hold whose branch Step Functions cancelled (the
    execution RUNNING, no Catch, no event) probes the hold's presence token as the state
    machines' waiters do (``SendTaskHeartbeat``: ``TaskTimedOut``), writes ABANDONED (held for
    the stop grace from now: the cancelled Lambda may still run) and takes the lock after it -
    not at the 10-minute lease (before the fix: ``LockTimeout`` after its 40 s wait)."""
    k = key("client-cancelled")
    client, locks = _safety_client(safety)
    holder = _holding_with_presence(safety, k, work_ms=3000)
    presence_dated_back(safety.cloud, locks, p.namespaced("s", k))
    fail_sibling(safety.cloud, safety.app, k)  # the holder's branch is cancelled at work
    cancelled = time.time()
    lease = client.acquire(k, wait=40, lease=30)
    waited = time.time() - cancelled
    assert safety.cloud.stepfunctions.describe_execution(executionArn=holder)["status"] == "RUNNING"
    grace_s = PROBE_GRACE_S  # SeenCancelled's derived stop grace
    assert grace_s - 1 <= waited < grace_s + 10, waited  # its grace, not its lease (a round and slack)
    print(f"the client got the key {waited:.1f} s after the cancel")
    entered = probe_as_client(safety.cloud, safety.app, k, lease.fence)
    assert entered["insideAtEntry"] == 1, entered  # the cancelled Lambda had ended
    client.release(lease)
    probe = safety.probe(k)
    assert (probe["entries"], probe.get("violations", 0), probe["inside"]) == (2, 0, 0), probe
    assert safety.lock(k)[p.FENCE] == {"N": "2"} and lease.fence == 2
    safety.cloud.stop_execution(holder)


def test_negative_control_a_client_never_takes_over_a_holder_whose_branch_runs(safety):
    """The same hold, not cancelled, at work for 6 s with its registration dated past the
    settle: the client's probes are accepted (the branch runs), so it waits for the release -
    no ABANDONED, the holder releases its own acquisition, the client enters after it."""
    k = key("client-alive")
    heartbeats = HeartbeatCounter(safety.cloud.stepfunctions)
    client, locks = _safety_client(safety, heartbeats)
    holder = _holding_with_presence(safety, k, work_ms=6000)
    presence_dated_back(safety.cloud, locks, p.namespaced("s", k))
    held_until = int(safety.lock(k)[p.EXPIRES_AT]["N"])
    with LeaseEndsSeen(lambda: safety.lock(k), holder) as seen:
        lease = client.acquire(k, wait=60, lease=30)
    assert len(heartbeats.calls) >= 2, heartbeats.calls  # the client probed the live holder (more than once) ...
    assert seen == {held_until}, seen  # ... and never retired it
    entered = probe_as_client(safety.cloud, safety.app, k, lease.fence)
    assert entered["insideAtEntry"] == 1, entered
    client.release(lease)
    probe = safety.probe(k)
    assert (probe["entries"], probe.get("violations", 0), probe["inside"]) == (2, 0, 0), probe
    assert lease.fence == 2
    safety.cloud.stop_execution(holder)


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

