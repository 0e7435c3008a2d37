"""Injected DynamoDB faults on the lock writes: retried, nothing leaks, no self-deadlock."""

from __future__ import annotations

from behaviour_stack import SHORT_LEASE_S
from locked_workflow.testing.faults import Fault, dynamodb_faults
from deployed import new_key, update
from lock_invariants import state_entered
from locked_workflow.state_machines import lock_protocol as p


def _lock_write(write: p.LockWrite, key: str):
    stored = p.namespaced("main", key)
    return lambda params: params.get("UpdateExpression") == write.update and params.get("Key", {}).get(
        p.KEY_ATTRIBUTE, {}
    ).get("S") == stored


def _errors(result) -> list[str]:
    return [e["taskFailedEventDetails"]["error"] for e in result.history if e["type"] == "TaskFailed"]


def test_throttled_acquire_and_release_are_retried_and_nothing_leaks(deployed):
    key = new_key("throttled")
    faults = (
        Fault("UpdateItem", "ProvisionedThroughputExceededException", times=2, when=_lock_write(p.ACQUIRE, key)),
        Fault("UpdateItem", "ThrottlingException", times=2, when=_lock_write(p.RELEASE, key)),
    )
    with dynamodb_faults(*faults) as log:
        (result,) = deployed.run("Main", [update(key)])
    assert log.injected == 4
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert _errors(result) == ["DynamoDB.ProvisionedThroughputExceededException"] * 2 + ["DynamoDB.ThrottlingException"] * 2
    lock = deployed.lock_item("main", key)
    assert p.OWNER not in lock and lock[p.FENCE] == {"N": "1"}
    assert deployed.customer(key)["balance"] == 1


def test_acquire_whose_response_was_lost_is_retried_without_deadlocking_itself(deployed):
    key = new_key("lost-acquire")
    lost = Fault("UpdateItem", "InternalServerError", after_call=True, when=_lock_write(p.ACQUIRE, key))
    with dynamodb_faults(lost) as log:
        (result,) = deployed.run("Main", [update(key)])
    assert log.injected == 1 and ("UpdateItem", "done, then InternalServerError") in log.calls
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert "Lock.Held?" not in state_entered(result)  # the retry found the lock already its own
    lock = deployed.lock_item("main", key)
    assert p.OWNER not in lock and lock[p.FENCE] == {"N": "2"}  # both attempts wrote


def test_release_whose_response_was_lost_is_not_reported_as_lost(deployed):
    key = new_key("lost-release")
    lost = Fault("UpdateItem", "InternalServerError", after_call=True, when=_lock_write(p.RELEASE, key))
    with dynamodb_faults(lost) as log:
        (result,) = deployed.run("Main", [update(key)])
    assert log.injected == 1
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert _errors(result) == ["DynamoDB.InternalServerError"]
    assert p.OWNER not in deployed.lock_item("main", key)


def test_lost_release_response_while_a_waiter_takes_the_lock_is_not_lock_lost(deployed):
    """Issue 8.4: the first release succeeds, its response is lost, a waiter acquires before the
    release is retried: the retry finds the lock not its own - but the lease had not ended, so
    nobody could have taken it over before that first release. The run succeeds."""
    key = new_key("lost-release-contended")
    client = deployed.client("main")
    taken = []
    lost = Fault("UpdateItem", "InternalServerError", after_call=True, when=_lock_write(p.RELEASE, key),
                 then=lambda: taken.append(client.acquire(key, lease=60)))
    with dynamodb_faults(lost) as log:
        (result,) = deployed.run("Main", [update(key)])
    assert log.injected == 1 and len(taken) == 1 and taken[0].fence == 2
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert "Lock.ReleasedBefore?" in state_entered(result) and "Lock.Released" in state_entered(result)
    assert p.owner_execution(deployed.lock_item("main", key)[p.OWNER]["S"]) is None  # the waiter's, untouched
    client.release(taken[0])


def test_negative_control_a_retried_release_after_the_lease_ended_is_lock_lost(deployed):
    """The same lost response, but the lease had ended: a takeover may have come first."""
    key = new_key("lost-release-expired")
    client = deployed.client("shortlease")
    taken = []
    stored = p.namespaced("shortlease", key)
    lost = Fault(
        "UpdateItem", "InternalServerError", after_call=True,
        when=lambda params: params.get("UpdateExpression") == p.RELEASE.update
        and params["Key"][p.KEY_ATTRIBUTE]["S"] == stored,
        then=lambda: taken.append(client.acquire(key, lease=60)),
    )
    with dynamodb_faults(lost):
        (result,) = deployed.run("ShortLease", [update(key, work_ms=(SHORT_LEASE_S + 1) * 1000)])
    assert len(taken) == 1
    assert result.status == "FAILED" and result.error == p.ERROR_LOST, (result.error, result.cause)
    client.release(taken[0])


def test_fault_injection_only_hits_matching_calls(deployed):
    """The injector itself: a fault for another key never fires."""
    key = new_key("untouched")
    other = Fault("UpdateItem", "ThrottlingException", times=5, when=_lock_write(p.ACQUIRE, "someone-else"))
    with dynamodb_faults(other) as log:
        (result,) = deployed.run("Main", [update(key)])
    assert log.injected == 0 and result.status == "SUCCEEDED" and _errors(result) == []
