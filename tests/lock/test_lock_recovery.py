"""Stale-holder recovery, Python interop and fencing under pauses, on both DynamoDB backends.

Recovery times are reported in wait intervals (the test wait policy's max_interval, 2 s)
through ``record_property`` so the closing notes can quote them.

A holder whose execution ended without releasing keeps the lock for its stop grace after the
end (its Lambda invocation may still run): the janitor *retires* the acquisition (``expiresAt``
= stop time + grace) and the liveness check takes over only once the grace has passed. The
behaviour stack sets its sections' grace to 8 s (``behaviour_stack.STOP_GRACE_S``).
"""

from __future__ import annotations

import json
import random
import time

import pytest

from behaviour_stack import SHORT_LEASE_S, SHORT_TIMEOUT_S, STOP_GRACE_S, TEST_WAIT_POLICY
from locked_workflow.constructs_lib.lock_client import LockHeld
from deployed import new_key, start, update, wait_until
from lock_invariants import state_entered
from locked_workflow.state_machines import lock_protocol as p


INTERVAL_S = TEST_WAIT_POLICY.max_interval


#: Stop grace of every behaviour-stack section (given explicitly: see behaviour_stack).
GRACE_S = STOP_GRACE_S


GRACE_MS = GRACE_S * 1000


def _holder(deployed, namespace: str, key: str) -> str | None:
    """The execution holding the lock (None when free or held by a client)."""
    return p.owner_execution(deployed.lock_item(namespace, key).get(p.OWNER, {}).get("S"))


def _held_by(deployed, namespace: str, key: str, execution: str):
    return lambda: _holder(deployed, namespace, key) == execution


def _acquired_at(result) -> float:
    """When the execution's acquire succeeded (service clock, seconds)."""
    exits = [
        e["timestamp"].timestamp()
        for e in result.history
        if e["type"] == "TaskStateExited" and e["stateExitedEventDetails"]["name"] == "Lock.Acquire"
    ]
    return exits[-1]


def _status_event(events, execution: str) -> dict:
    """The status event (emitted or dropped) of an ended execution: what the janitor reads."""
    (detail,) = [d for d in events if d["executionArn"] == execution]
    return detail


def _acquisition_held_by(deployed, namespace: str, key: str, execution: str) -> dict:
    """Wait until ``execution`` holds the lock; its lock item, checked for its owner and grace."""
    wait_until(_held_by(deployed, namespace, key, execution))
    item = deployed.lock_item(namespace, key)
    owner = item[p.OWNER]["S"]
    assert owner.startswith(execution + p.OWNER_SEPARATOR) and len(owner) > len(execution) + 1
    assert item[p.GRACE] == {"N": str(GRACE_MS)}, "the acquisition records its stop grace"
    return item


def _wait_for_retire(deployed, namespace: str, key: str, expires_at: str, timeout: float) -> float:
    """Wait until the lock's ``expiresAt`` is ``expires_at``; when it first was (time.time())."""
    try:
        return wait_until(
            lambda: deployed.lock_item(namespace, key).get(p.EXPIRES_AT, {}).get("N") == expires_at,
            timeout=timeout,
        )
    except AssertionError:
        raise AssertionError(
            f"expiresAt not {expires_at} (stop + grace) within {timeout} s - not retired? "
            f"item: {deployed.lock_item(namespace, key)}"
        ) from None


_last_waiter: list = []  # the waiter of the last _stop_holder_and_measure


def _stop_holder_and_measure(deployed, key: str, record_property, label: str, *, retired: bool):
    """Stop a holder while another run waits; the waiter's recovery time (s) after the stop.

    During the grace the lock must stay the stopped holder's - retired by the janitor
    (``retired``) or untouched (no janitor event) - and the waiter must still wait.
    """
    holder = start(deployed, "Main", update(key, work_ms=15_000))
    held = _acquisition_held_by(deployed, "main", key, holder)
    waiter = start(deployed, "Main", update(key))
    time.sleep(1.0)  # the waiter is now polling
    deployed.cloud.stop_execution(holder, error="Operator.Stop", cause="stopped while holding the lock")
    assert deployed.cloud.wait_for(holder).status == "ABORTED"
    events = deployed.cloud.events.status_events if retired else deployed.cloud.events.dropped_status_events
    wait_until(lambda: any(d["executionArn"] == holder for d in events), timeout=5)
    stopped_ms = _status_event(events, holder)["stopDate"]  # what the janitor reads

    # Within the grace: still the holder's lock, and the waiter still waits. (The janitor is a
    # Lambda invocation: on a loaded machine it may retire late in the grace, so it gets all but
    # the last 1.5 s of it; the look inside the grace counts only when its reads ended in it.)
    expected_expiry = str(stopped_ms + GRACE_MS) if retired else held[p.EXPIRES_AT]["N"]
    _wait_for_retire(deployed, "main", key, expected_expiry,
                     timeout=max(1.0, stopped_ms / 1000 + GRACE_S - 1.5 - time.time()))
    mid_grace_s = stopped_ms / 1000 + GRACE_S / 2
    time.sleep(max(0.0, mid_grace_s - time.time()))
    during, waiting = deployed.lock_item("main", key), deployed.cloud.status(waiter)
    if time.time() < stopped_ms / 1000 + GRACE_S:
        assert (during.get(p.OWNER), during.get(p.FENCE)) == (held[p.OWNER], held[p.FENCE]), "freed inside the grace"
        assert during.get(p.EXPIRES_AT) == {"N": expected_expiry}
        assert waiting == "RUNNING"

    result = deployed.cloud.wait_for(waiter, timeout=90)
    _last_waiter[:] = [waiter]
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    recovery_s = _acquired_at(result) - stopped_ms / 1000
    record_property(f"{label}_recovery_intervals", round(recovery_s / INTERVAL_S, 2))
    record_property(f"{label}_recovery_after_grace_s", round(recovery_s - GRACE_S, 2))
    assert recovery_s >= GRACE_S, f"took over {recovery_s:.1f} s after the stop, inside the grace"
    assert deployed.customer(key)["lastFence"] == 2  # the waiter's fenced write went through
    return recovery_s


def test_janitor_retires_the_lock_of_a_stopped_execution_after_its_grace(deployed, record_property):
    # The janitor needs no index on the table: it reads the stopped execution's history.
    table = deployed.cloud.dynamodb.describe_table(TableName=deployed.locks_table)["Table"]
    assert table.get("GlobalSecondaryIndexes", []) == []
    key = new_key("stopped")
    recovery_s = _stop_holder_and_measure(deployed, key, record_property, "janitor", retired=True)
    # once the retired lease ends, the waiter's next poll takes the lock
    assert recovery_s <= GRACE_S + 2 * INTERVAL_S + 5, f"took {recovery_s:.1f} s"  # (a loaded machine is late)


def _step_functions_only(deployed) -> None:
    """The case is Step Functions behaviour (an execution's end, its history, DescribeExecution):
    the writes it makes are checked on both backends by the other cases."""
    if deployed.cloud.backend != "moto":
        pytest.skip("Step Functions behaviour: one backend suffices")


def test_liveness_check_recovers_after_the_grace_when_the_janitor_event_is_dropped(deployed, record_property):
    _step_functions_only(deployed)
    key = new_key("dropped")
    deployed.cloud.events.emit_status_events = False
    try:
        recovery_s = _stop_holder_and_measure(deployed, key, record_property, "liveness", retired=False)
    finally:
        deployed.cloud.events.emit_status_events = True
    # the waiter asks Step Functions every 2nd round of polls, and takes over at the first check
    # that finds the grace over (not by the lease): counted in its own history, not in seconds
    # (a loaded machine stretches every round)
    assert recovery_s >= GRACE_S
    history = deployed.cloud.stepfunctions.get_execution_history(
        executionArn=_last_waiter[0], maxResults=1000)["events"]
    checks = [e for e in history if e["type"] == "TaskStateExited"
              and e["stateExitedEventDetails"]["name"] == "Lock.DescribeHolder"]
    stale = [e for e in checks if '"stale":"arn:' in e["stateExitedEventDetails"].get("assignedVariables", {}).get("lockWait", "")]
    assert stale, "no liveness check found the holder ended"
    acquired = [e for e in history if e["type"] == "TaskStateExited"
                and e["stateExitedEventDetails"]["name"] == "Lock.Acquire"][-1]
    after_stale = [e for e in history if stale[0]["id"] < e["id"] < acquired["id"] and e["type"].endswith("StateEntered")]
    assert [e["stateEnteredEventDetails"]["name"] for e in after_stale] == ["Lock.Wait", "Lock.Acquire"]


def test_negative_control_without_janitor_or_liveness_the_lock_stays_held(deployed):
    """Stopped holder, no event, no liveness check (NoWait has max_wait 0): still locked after
    the grace, with its lease untouched."""
    key = new_key("leaked")
    deployed.cloud.events.emit_status_events = False
    try:
        holder = start(deployed, "NoWait", update(key, work_ms=15_000))
        held = _acquisition_held_by(deployed, "nowait", key, holder)
        deployed.cloud.stop_execution(holder)
        stopped = deployed.cloud.wait_for(holder)
        assert stopped.status == "ABORTED"
        time.sleep(max(0.0, stopped.stop_date.timestamp() + GRACE_S + 1 - time.time()))  # past the grace
        (result,) = deployed.run("NoWait", [update(key)])
    finally:
        deployed.cloud.events.emit_status_events = True
    assert result.error == p.ERROR_TIMEOUT
    assert deployed.lock_item("nowait", key) == held  # same acquisition, lease not retired


def test_state_machine_timeout_while_holding_is_retired_and_recovered_after_the_grace(
    deployed, record_property
):
    _step_functions_only(deployed)
    key = new_key("timedout")
    holder = start(deployed, "ShortTimeout", update(key, work_ms=(SHORT_TIMEOUT_S + 5) * 1000))
    held = _acquisition_held_by(deployed, "shorttimeout", key, holder)
    assert deployed.cloud.wait_for(holder, timeout=SHORT_TIMEOUT_S + 10).status == "TIMED_OUT"
    wait_until(lambda: any(d["executionArn"] == holder for d in deployed.cloud.events.status_events), timeout=5)
    ended_ms = _status_event(deployed.cloud.events.status_events, holder)["stopDate"]

    retire_end = str(ended_ms + GRACE_MS)
    retired_at = _wait_for_retire(deployed, "shorttimeout", key, retire_end, timeout=GRACE_S / 2)
    record_property("timeout_retire_s", round(retired_at - ended_ms / 1000, 2))
    retired = deployed.lock_item("shorttimeout", key)
    assert (retired[p.OWNER], retired[p.FENCE]) == (held[p.OWNER], held[p.FENCE])  # not released
    # Within the grace the lock is still held: a client is refused until the retired lease ends.
    assert time.time() < ended_ms / 1000 + GRACE_S - 1, "too late to look inside the grace"
    with pytest.raises(LockHeld) as refused:
        deployed.client("shorttimeout").acquire(key, lease=10)
    assert p.owner_execution(refused.value.holder) == holder
    assert refused.value.expires_at == ended_ms + GRACE_MS

    time.sleep(max(0.0, ended_ms / 1000 + GRACE_S + 0.1 - time.time()))  # the grace is over
    # then anyone takes it over (a client here: a run of this machine, whose own timeout is short
    # by design, could time out on a loaded machine) - a client as soon as AWS's clock, which it
    # knows to the second from DynamoDB's Date header, is surely past the lease
    lease = deployed.client("shorttimeout").acquire(key, lease=10, wait=5)
    assert lease.acquired_at > ended_ms + GRACE_MS
    assert lease.fence == 2 and deployed.lock_item("shorttimeout", key)[p.FENCE] == {"N": "2"}
    deployed.client("shorttimeout").release(lease)


# ---- Python participants --------------------------------------------------------------------


def test_python_holder_blocks_a_workflow_until_it_releases(deployed):
    key = new_key("py-first")
    client = deployed.client("main")
    lease = client.acquire(key, lease=60)
    assert lease.owner.startswith(client.owner + p.OWNER_SEPARATOR)
    waiter = start(deployed, "Main", update(key))
    time.sleep(2.5)
    assert deployed.cloud.status(waiter) == "RUNNING"
    assert "customerId" not in deployed.customer(key)
    client.release(lease)
    result = deployed.cloud.wait_for(waiter, timeout=30)
    assert result.status == "SUCCEEDED"
    assert deployed.customer(key)["lastFence"] == lease.fence + 1


def test_workflow_holder_blocks_a_python_client_until_it_releases(deployed):
    key = new_key("wf-first")
    holder = start(deployed, "Main", update(key, work_ms=3_000))
    wait_until(_held_by(deployed, "main", key, holder))
    client = deployed.client("main")
    with pytest.raises(LockHeld) as held:
        client.acquire(key, lease=10)
    assert p.owner_execution(held.value.holder) == holder
    assert held.value.holder == deployed.lock_item("main", key)[p.OWNER]["S"]
    lease = client.acquire(key, lease=10, wait=20)  # waits for the workflow's release
    returned = time.time()
    result = deployed.cloud.wait_for(holder, timeout=10)  # (it ends a moment after releasing)
    assert result.status == "SUCCEEDED"
    (released,) = [e["timestamp"].timestamp() for e in result.history if e["type"] == "TaskSucceeded"
                   and e["taskSucceededEventDetails"]["resource"] == "updateItem"
                   and p.FENCE not in json.loads(e["taskSucceededEventDetails"]["output"]).get("Attributes", {})]
    # the client got it only after the release: the release's success came before the acquire
    # returned (both on this machine's clock - not the client's estimate of AWS's clock, whose
    # stamps may lie a Date header's second either way), and its fence is the next one
    assert released <= returned
    assert lease.fence == 2
    client.release(lease)


# ---- fencing under pauses -------------------------------------------------------------------


def _pause_load(key: str, seed: int) -> list[dict]:
    """Runs whose work sometimes pauses well past the lease (zombies), in random order."""
    rng = random.Random(seed)
    runs = [update(key, work_ms=(SHORT_LEASE_S + 4) * 1000) for _ in range(2)]
    runs += [update(key, work_ms=rng.randint(0, 300)) for _ in range(5)]
    rng.shuffle(runs)
    return runs


def _accepted_writes(results) -> int:
    return sum(
        1
        for r in results
        for e in r.history
        if e["type"] == "TaskSucceeded" and e["taskSucceededEventDetails"].get("resourceType") == "lambda"
    )


def test_fenced_counter_loses_no_update_under_pauses_past_the_lease(deployed):
    key = new_key("fenced")
    results = deployed.run("ShortLease", _pause_load(key, seed=7), stagger_s=0.2)
    rejected = sum("Write rejected" in state_entered(r) for r in results)
    accepted = _accepted_writes(results)
    assert rejected >= 1, "no zombie write happened: the scenario did not pause past the lease"
    assert deployed.customer(key)["updates"] == accepted  # every accepted write counts
    assert accepted + rejected == len(results)


def test_negative_control_unfenced_counter_loses_updates_under_the_same_pauses(deployed):
    key = new_key("unfenced")
    results = deployed.run("ShortLeaseUnfenced", _pause_load(key, seed=7), stagger_s=0.2)
    accepted = _accepted_writes(results)
    assert accepted == len(results)  # nothing rejects a zombie's write...
    assert deployed.customer(key)["updates"] < accepted  # ...so a taken-over holder overwrote one
    assert any(r.error == p.ERROR_LOST for r in results)
