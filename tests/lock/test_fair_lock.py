"""The fair lock on both DynamoDB backends: no overlap, fences in order, no lost update, grants
in arrival order (the polling lock's order as the negative control), and the dead-participant
cases: a waiter stopped mid-queue, a stopped holder, a lost wake-up."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest

from deployed import StackRun, deployed_stack, synthesized
from fair_stack import PATIENT_PARK_TIMEOUT_S, FairStack
from lock_invariants import probe_as_client, redrive, states_entered_after_redrive
from safety_stack import PROBE_GRACE_S, PROBE_TIMEOUT_S
from locked_workflow.state_machines import fair_protocol as fp
from locked_workflow.state_machines import lock_protocol as p


@pytest.fixture(scope="session")
def fair_synth():
    return synthesized(FairStack, "Fair")


class Fair(StackRun):
    def lock(self, key: str, namespace: str = "f") -> dict:
        return self.get("LocksTable", {"pk": {"S": p.namespaced(namespace, key)}})

    def queue(self, key: str, namespace: str = "f") -> list:
        """The owners queued on the key (a row per ticket not yet served), head first."""
        out = []
        for ticket in fp.queued_tickets(self.lock(key, namespace)):
            row = self.cloud.dynamodb.get_item(
                TableName=self.table("LocksTable"), Key={"pk": {"S": fp.row_key(p.namespaced(namespace, key), ticket)}},
                ConsistentRead=True).get("Item", {})
            if fp.TOKEN in row:
                out.append(row[p.OWNER]["S"])
        return out

    def rows(self, key: str, namespace: str = "f") -> list:
        """Every queue row of the key still stored (a finished queue leaves none)."""
        stored = p.namespaced(namespace, key)
        items = self.cloud.dynamodb.scan(TableName=self.table("LocksTable"), ConsistentRead=True)["Items"]
        return [i for i in items if i["pk"]["S"].startswith(fp.ROW_MARK) and i["pk"]["S"].endswith(fp.ROW_MARK + stored)]

    def drained(self, key: str) -> bool:
        """Nobody queues, nobody holds, no row is left."""
        served, tickets = fp.counters(self.lock(key))
        drained = served == tickets and p.OWNER not in self.lock(key) and self.rows(key) == []
        if not drained:  # (what was left, in the failure's output)
            print("not drained:", self.lock(key), self.rows(key))
        return drained

    def probe(self, key: str) -> dict:
        item = self.cloud.dynamodb.get_item(
            TableName=self.table("Probes"), Key={"pk": {"S": key}}, ConsistentRead=True).get("Item", {})
        out = {k: int(v["N"]) for k, v in item.items() if "N" in v}
        out.update({k: [int(x["N"]) for x in v["L"]] for k, v in item.items() if "L" in v})
        return out

    def open(self, key: str) -> None:
        """End a FairHold holder's hold: complete the task token its gate stored."""
        def token():
            item = self.cloud.dynamodb.get_item(
                TableName=self.table("Probes"), Key={"pk": {"S": f"gate#{key}"}}, ConsistentRead=True).get("Item")
            return item and item["token"]["S"]
        self.until(token)
        self.cloud.stepfunctions.send_task_success(taskToken=token(), output=GATE_OPENED)

    def gate_token(self, key: str, gate: str = "gate") -> str | None:
        """The task token a holder's gate stored last (None: none yet): FairHold's ``gate``,
        FairCancelled's ``held``."""
        item = self.cloud.dynamodb.get_item(
            TableName=self.table("Probes"), Key={"pk": {"S": f"{gate}#{key}"}}, ConsistentRead=True).get("Item")
        return item and item["token"]["S"]

    def fail_gate(self, pk: str) -> None:
        """Fail the task token a gate stored under ``pk`` (its branch fails)."""
        def token():
            item = self.cloud.dynamodb.get_item(
                TableName=self.table("Probes"), Key={"pk": {"S": pk}}, ConsistentRead=True).get("Item")
            return item and item["token"]["S"]
        self.until(token)
        self.cloud.stepfunctions.send_task_failure(taskToken=token(), error="User.Failed", cause="the sibling fails")

    def until(self, predicate, timeout: float = 30):
        deadline = time.time() + timeout
        while not predicate():
            assert time.time() < deadline, "timed out waiting"
            time.sleep(0.05)


fair = deployed_stack(FairStack, "Fair", Fair)


#: The output of the test's own SendTaskSuccess that ends a hold (faults on the lock's
#: wake-ups skip it: ``not_the_gate``).
GATE_OPENED = '{"gate": "opened"}'


def not_the_gate(params: dict) -> bool:
    return params.get("output") != GATE_OPENED


def key(label: str = "k") -> str:
    return f"{label}-{uuid.uuid4().hex[:8]}"


def fences_of(results) -> list:
    return [r.output["probe"]["fence"] for r in results]


def parks_timed_out(result) -> int:
    """Park timeouts in a run's history (the fallback, not a wake-up, ended the park)."""
    return sum(1 for e in result.history if e["type"] == "TaskTimedOut")


def last_park_end(result) -> str | None:
    """How a run's last park ended: ``TaskSucceeded`` (a wake-up let it in), ``TaskTimedOut``
    (its fallback did), ``TaskFailed``; ``None`` if it never parked. With the 3 s park timeout
    of most machines here, earlier parks may time out on a loaded machine while the holder still
    holds; the last one tells who handed the lock on."""
    entered = [i for i, e in enumerate(result.history)
               if e.get("stateEnteredEventDetails", {}).get("name") == "Lock.Park"]
    if not entered:
        return None
    return next((e["type"] for e in result.history[entered[-1]:]
                 if e["type"] in ("TaskSucceeded", "TaskTimedOut", "TaskFailed")), None)


def assert_park_rounds_fit_the_budget(result) -> None:
    """Every park round of ``result`` (one that timed out included) fits the section's history
    budget's figure for a round."""
    from lock_invariants import park_round_events

    rounds = park_round_events(result, "FairProbe")
    assert rounds and max(rounds) <= fp.EVENTS_PER_PARK_ROUND, rounds
    print(f"park rounds: {rounds} events (budget figure {fp.EVENTS_PER_PARK_ROUND})")


def test_an_uncontended_run_takes_the_fast_path(fair):
    k = key()
    result = fair.wait([fair.start("Fair", {"key": k, "workMs": 1})])[0]
    assert result.status == "SUCCEEDED", result.cause
    entered = [e["stateEnteredEventDetails"]["name"] for e in result.history if "stateEnteredEventDetails" in e]
    # the release: no parked row to take (refused), nobody queues: one write frees the lock
    assert entered == ["Lock", "Lock.Acquire", "FairProbe", "Lock.Release.Take", "Lock.Release.Release"]
    item = fair.lock(k)
    assert item[p.FENCE] == {"N": "1"} and p.OWNER not in item and fp.counters(item) == (0, 0)
    assert fair.rows(k) == []


def test_a_queued_run_parks_once_and_its_release_takes_grants_and_wakes_the_next_without_a_decision(fair):
    """The contended path: 8 lock states per run (the section, the refused fast path, the
    ticket, the park, the confirm; as releaser: take the parked row, grant, wake)."""
    k = key()
    holder, arns = queued(fair, k, 2, machine="FairPatient")
    fair.open(k)
    results = fair.wait([holder] + arns)
    assert [r.status for r in results] == ["SUCCEEDED"] * 3, [(r.error, r.cause) for r in results]
    entered = [e["stateEnteredEventDetails"]["name"] for e in results[1].history if "stateEnteredEventDetails" in e]
    assert entered == ["Lock", "Lock.Acquire", "Lock.Enqueue", "Lock.Park", "Lock.Confirm", "PatientProbe", "Lock.Release.Take",
                       "Lock.Release.Grant", "Lock.Release.Wake"], entered
    assert fences_of(results[1:]) == sorted(fences_of(results[1:]))
    assert fair.drained(k)


def test_concurrent_runs_never_overlap_fences_rise_and_no_update_is_lost(fair):
    k = key()
    results = fair.wait([fair.start("Fair", {"key": k, "workMs": 150}) for _ in range(10)])
    assert [r.status for r in results] == ["SUCCEEDED"] * 10, [(r.error, r.cause) for r in results]
    probe = fair.probe(k)
    assert probe.get("violations", 0) == 0 and probe["seen"] == [1] * 10
    assert probe["fences"] == sorted(probe["fences"]) and len(set(probe["fences"])) == 10
    assert probe["counter"] == probe["accepted"] == 10
    assert fair.drained(k)


def test_a_seeded_slice_of_the_thousand_waiter_run_grants_by_ticket(fair):
    """``make bench-fair-1000`` in small: 20 runs with AWS-sized task tokens arrive at seeded
    random moments on one key. Grants follow the tickets (the queue's own order, free of
    timestamp noise), fences rise with them, nobody overlaps, and nothing is left queued."""
    import random

    from tools.bench_fair import tickets_and_fences

    rng, k = random.Random(16), key()
    arns = []
    for _ in range(20):
        arns.append(fair.start("FairPatient", {"key": k, "workMs": 20}))
        time.sleep(rng.uniform(0, 0.05))
    results = fair.wait(arns)
    assert [r.status for r in results] == ["SUCCEEDED"] * 20, [(r.error, r.cause) for r in results]
    granted = []  # (ticket, fence) of every run that queued
    for r in results:
        tickets, fences = tickets_and_fences(r.history)
        if tickets:
            granted.append((tickets[-1], fences[-1]))
    assert len(granted) >= 14  # most of them queued (the slice tests the queue)
    assert [f for _, f in sorted(granted)] == sorted(f for _, f in granted)  # FIFO: fences in ticket order
    probe = fair.probe(k)
    assert probe.get("violations", 0) == 0 and probe["seen"] == [1] * 20 and probe["counter"] == 20
    assert probe["fences"] == sorted(probe["fences"])
    assert fair.drained(k)


def test_negative_control_the_same_work_unlocked_overlaps(fair):
    k = key()
    arns = [fair.cloud.start_execution(fair.app.state_machine_arn("Unlocked"), {"key": k, "workMs": 150})
            for _ in range(10)]
    fair.wait(arns)
    probe = fair.probe(k)
    assert probe.get("violations", 0) > 0 and probe["counter"] < 10


def grants_in_arrival_order(fair, machine: str, waiters: int = 7) -> tuple[list, list]:
    """A holder holds the key for a while; ``waiters`` runs arrive one by one meanwhile (each
    waits until the one before it is queued, or has polled once). Returns their fences in
    arrival order, and the results."""
    k = key()
    fair_lock = machine.startswith("Fair")
    holder = fair.start("FairHold" if fair_lock else machine, {"key": k, "workMs": 1}
                        if fair_lock else {"key": k, "workMs": 3000})
    namespace = "f" if fair_lock else "p"
    fair.until(lambda: p.OWNER in fair.lock(k, namespace))
    arns = []
    for n in range(waiters):
        arns.append(fair.start(machine, {"key": k, "workMs": 100}))
        if fair_lock:
            fair.until(lambda: len(fair.queue(k)) == n + 1)
        else:
            time.sleep(0.3)
    if fair_lock:
        fair.open(k)  # every waiter queued: the holder releases
    results = fair.wait([holder] + arns)
    assert [r.status for r in results] == ["SUCCEEDED"] * (waiters + 1), [(r.error, r.cause) for r in results]
    return fences_of(results[1:]), results[1:]


def test_grants_follow_arrival_order_and_each_handoff_is_a_wake_up(fair):
    fences, results = grants_in_arrival_order(fair, "FairPatient")
    assert fences == sorted(fences), fences  # 0 overtakes
    # no park ran into its (2 min) timeout: every waiter was woken, none looked by itself
    assert sum(parks_timed_out(r) for r in results) == 0


def test_negative_control_the_polling_lock_lets_later_runs_overtake(fair):
    fences, _ = grants_in_arrival_order(fair, "Polling")
    assert fences != sorted(fences), fences


def queued(fair, k: str, waiters: int, machine: str = "Fair"):
    """A FairHold holder of ``k`` and ``waiters`` runs of ``machine`` queued behind it, in order.
    The holder holds until the test calls ``fair.open(k)``."""
    holder = fair.start("FairHold", {"key": k, "workMs": 1})
    fair.until(lambda: p.OWNER in fair.lock(k))
    arns = []
    for n in range(waiters):
        arns.append(fair.start(machine, {"key": k, "workMs": 100}))
        fair.until(lambda: len(fair.queue(k)) == n + 1)
    return holder, arns


def test_a_waiter_stopped_mid_queue_is_dequeued_by_the_janitor_and_the_rest_keep_their_order(fair):
    k = key()
    holder, (w1, w2, w3) = queued(fair, k, waiters=3, machine="FairPatient")
    fair.cloud.stepfunctions.stop_execution(executionArn=w2)
    assert fair.cloud.wait_for(w2).status == "ABORTED"
    fair.until(lambda: len(fair.queue(k)) == 2)  # the janitor took w2 out, the holder still holds
    assert p.OWNER in fair.lock(k)
    fair.open(k)
    results = fair.wait([holder, w1, w3])
    assert [r.status for r in results] == ["SUCCEEDED"] * 3, [(r.error, r.cause) for r in results]
    assert fences_of(results[1:]) == sorted(fences_of(results[1:]))
    assert parks_timed_out(results[2]) == 0  # w1's release woke w3 directly
    assert fair.drained(k) and fair.probe(k).get("violations", 0) == 0


def test_without_a_janitor_a_stopped_waiter_is_skipped_by_the_release_that_fails_to_wake_it(fair):
    k = key()
    holder, (w1, w2, w3) = queued(fair, k, waiters=3, machine="FairNoJanitor")
    fair.cloud.stepfunctions.stop_execution(executionArn=w2)
    assert fair.cloud.wait_for(w2).status == "ABORTED"
    fair.open(k)
    results = fair.wait([holder, w1, w3])
    assert [r.status for r in results] == ["SUCCEEDED"] * 3, [(r.error, r.cause) for r in results]
    assert fences_of(results[1:]) == sorted(fences_of(results[1:]))
    # w1's release found w2's wake-up failing, saw its execution ended, took the grant back and
    # handed the lock to w3 at once: w3's last park was ended by a wake-up, not by its timeout
    assert last_park_end(results[2]) == "TaskSucceeded"
    assert any(e.get("stateEnteredEventDetails", {}).get("name") == "Lock.Release.Revoke" for e in results[1].history)
    assert fair.drained(k) and fair.probe(k).get("violations", 0) == 0


def test_a_stopped_holder_is_taken_over_after_its_stop_grace_in_queue_order(fair):
    k = key()
    holder, (w1, w2) = queued(fair, k, waiters=2)  # never opened: the holder is stopped
    fair.cloud.stepfunctions.stop_execution(executionArn=holder)
    stopped = time.time()
    results = fair.wait([w1, w2])
    assert [r.status for r in results] == ["SUCCEEDED"] * 2, [(r.error, r.cause) for r in results]
    grace_s = PROBE_GRACE_S  # the derived stop grace: the probe's timeout plus the margin
    first_grant = min(
        e["timestamp"].timestamp() for e in results[0].history
        if e.get("stateEnteredEventDetails", {}).get("name") == "FairProbe"
    )
    assert first_grant - stopped >= grace_s - 1  # not before the stopped holder's work could have ended
    assert fences_of(results) == sorted(fences_of(results))
    assert fair.drained(k) and fair.probe(k).get("violations", 0) == 0


def test_a_lost_wake_up_costs_one_park_timeout(fair):
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = key()
    holder, (w1,) = queued(fair, k, waiters=1)
    lost = Fault("SendTaskSuccess", "ServiceUnavailable", service="stepfunctions", when=not_the_gate)
    with dynamodb_faults(lost) as log:
        fair.open(k)
        results = fair.wait([holder, w1])
    assert log.injected == 1
    assert [r.status for r in results] == ["SUCCEEDED"] * 2, [(r.error, r.cause) for r in results]
    assert parks_timed_out(results[1]) >= 1  # the fallback, not the wake-up, let it in
    assert fair.probe(k).get("violations", 0) == 0 and fair.drained(k)
    assert_park_rounds_fit_the_budget(results[1])


def test_a_waiter_whose_park_ends_as_its_row_is_taken_is_woken_in_its_new_park_not_after_a_park_timeout(fair):
    """The tail seen in the bench: the releaser takes the head's row (its token) just as the
    head's park ends; the head inspects before the grant lands, finds the lock held and parks
    again with a new token; the releaser's wake-up of the old token fails (``TaskDoesNotExist``
    - bare moto answered success here and the head slept a whole park timeout). The releaser
    then looks for the new park and wakes it. FairPatient's park timeout (120 s) is longer than
    the test's waits: a wake-up, not the fallback, must let the head in."""
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = key()
    holder, (w1,) = queued(fair, k, waiters=1, machine="FairPatient")
    row_key = fp.row_key(p.namespaced("f", k), fp.counters(fair.lock(k))[1])

    def token():
        item = fair.cloud.dynamodb.get_item(TableName=fair.table("LocksTable"), Key={"pk": {"S": row_key}},
                                            ConsistentRead=True).get("Item", {})
        return item.get(fp.TOKEN, {}).get("S")

    def park_ends_and_parks_again():  # between the releaser's take and its grant
        parks = [e for e in fair.cloud.history(w1) if e["type"] == "TaskScheduled"
                 and "waitForTaskToken" in e["taskScheduledEventDetails"]["resource"]]
        old_token = json.loads(parks[-1]["taskScheduledEventDetails"]["parameters"])[
            "ExpressionAttributeValues"][":token"]["S"]
        fair.cloud.stepfunctions.send_task_failure(taskToken=old_token, error="Lock.Look", cause="the park ends")
        fair.until(lambda: token() not in (None, old_token), timeout=60)  # parked again, new token

    slow_grant = Fault("UpdateItem", "ProvisionedThroughputExceededException",
                       when=lambda params: params.get("ConditionExpression") == fp.GRANT.condition,
                       then=park_ends_and_parks_again)
    with dynamodb_faults(slow_grant) as log:
        fair.open(k)
        results = fair.wait([holder, w1])
    assert log.injected == 1
    assert [r.status for r in results] == ["SUCCEEDED"] * 2, [(r.error, r.cause) for r in results]
    entered = [e["stateEnteredEventDetails"]["name"] for e in results[0].history if "stateEnteredEventDetails" in e]
    assert "Lock.Release.WakeAgainEarly" in entered, entered
    assert parks_timed_out(results[1]) == 0  # woken in its new park, not by its (2 min) fallback
    assert fences_of(results) == sorted(fences_of(results))
    assert fair.probe(k).get("violations", 0) == 0 and fair.drained(k)


def test_a_releaser_stopped_between_its_release_and_its_wake_up_strands_no_one(fair):
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = key()
    holder, (w1, w2) = queued(fair, k, waiters=2)
    # the releaser dies as it is about to wake w1: its wake-up is never sent
    crash = Fault("SendTaskSuccess", "ServiceUnavailable", service="stepfunctions", when=not_the_gate,
                  then=lambda: fair.cloud.stepfunctions.stop_execution(executionArn=holder))
    with dynamodb_faults(crash) as log:
        fair.open(k)
        results = fair.wait([w1, w2])
    assert log.injected == 1 and fair.cloud.wait_for(holder).status == "ABORTED"
    assert [r.status for r in results] == ["SUCCEEDED"] * 2, [(r.error, r.cause) for r in results]
    assert fences_of(results) == sorted(fences_of(results))
    assert fair.probe(k).get("violations", 0) == 0 and fair.drained(k)


def _entered_at(result, name: str) -> float:
    """Epoch s at which ``result`` first entered the state ``name``."""
    return next(e["timestamp"].timestamp() for e in result.history
                if e.get("stateEnteredEventDetails", {}).get("name") == name)


def test_a_delivered_wake_up_whose_response_was_lost_is_never_taken_back(fair):
    """F1: the releaser's ``SendTaskSuccess`` reaches Step Functions (the waiter is woken) but
    its response is lost (a 5xx after the call applied). The releaser cannot tell this from a
    wake-up that failed: it waits a claim window and revokes - which must never take the lock
    from a waiter already at work. The woken waiter confirms its grant (CLAIM) before its work,
    so the revoke is refused. W2 holds its work at a gate until the releaser's execution has
    ended (then a revoke and a grant to W3 would have happened already): W3 enters only after
    W2 left, fences rise, W2 keeps its lock (no ``Lock.Lost``)."""
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = key()
    holder = fair.start("FairHold", {"key": k, "workMs": 1})
    fair.until(lambda: p.OWNER in fair.lock(k))
    w2 = fair.start("FairPatientHold", {"key": k, "workMs": 1})  # still parked when its wake-up comes, however slow
    fair.until(lambda: len(fair.queue(k)) == 1)
    w3 = fair.start("Fair", {"key": k, "workMs": 1})
    fair.until(lambda: len(fair.queue(k)) == 2)
    lost = Fault("SendTaskSuccess", "InternalServerError", after_call=True, service="stepfunctions", when=not_the_gate)
    with dynamodb_faults(lost) as log:
        first_gate = fair.gate_token(k)
        fair.open(k)
        held = fair.wait([holder])[0]  # its release is over (a revoke, if any, is done)
    assert log.injected == 1 and log.calls.count(("SendTaskSuccess", "done, then InternalServerError")) == 1
    assert held.status == "SUCCEEDED", (held.error, held.cause)
    assert "Lock.Release.DescribeGrantee" in [e.get("stateEnteredEventDetails", {}).get("name") for e in held.history]
    fair.until(lambda: fair.gate_token(k) not in (None, first_gate), timeout=60)  # W2 at its work's gate
    fair.open(k)
    r2, r3 = fair.wait([w2, w3])
    assert [r2.status, r3.status] == ["SUCCEEDED"] * 2, [(r.error, r.cause) for r in (r2, r3)]
    # W3's work began after W2's ended (W2's release began)
    assert _entered_at(r3, "FairProbe") > _entered_at(r2, "Lock.Release.Take")
    fences = [held.output["probe"]["fence"], r2.output["probe"]["fence"], r3.output["probe"]["fence"]]
    assert fences == sorted(fences) and len(set(fences)) == 3, fences
    probe = fair.probe(k)
    assert probe.get("violations", 0) == 0 and probe.get("rejected", 0) == 0, probe
    assert fair.drained(k)


def test_a_releaser_whose_wake_up_response_was_lost_ends_once_its_grant_is_confirmed(fair):
    """A releaser whose ``SendTaskSuccess`` applied but answered a 5xx (the waiter is woken and
    confirms at once) looks again after ``REPARK_LOOK_S``; finding its grant confirmed, it is
    done - it does not sleep out its claim window (its own park timeout, here
    ``PATIENT_PARK_TIMEOUT_S`` = 120 s) before a revoke that can only be refused. Before, the
    releaser always waited the whole window: a loaded run of
    ``test_a_delivered_wake_up_whose_response_was_lost_is_never_taken_back`` took 130 s
    instead of 6 s when its patient W2's wake-up of W3 met W3's park timeout (``TaskTimedOut``:
    W3 then claimed its grant by itself, and W2's execution waited 120 s in its release)."""
    from locked_workflow.testing.cloud import ExecutionsStillRunning
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = key()
    holder = fair.start("FairPatientHold", {"key": k, "workMs": 1})  # its claim window: 120 s
    fair.until(lambda: p.OWNER in fair.lock(k))
    w2 = fair.start("FairPatient", {"key": k, "workMs": 1})  # still parked when its wake-up comes
    fair.until(lambda: len(fair.queue(k)) == 1)
    lost = Fault("SendTaskSuccess", "InternalServerError", after_call=True, service="stepfunctions", when=not_the_gate)
    with dynamodb_faults(lost) as log:
        fair.open(k)
        r2 = fair.wait([w2])[0]
    assert log.injected == 1
    assert r2.status == "SUCCEEDED", (r2.error, r2.cause)
    assert parks_timed_out(r2) == 0  # woken, not looking by itself
    bound = PATIENT_PARK_TIMEOUT_S / 4  # generous on a loaded machine, far below the window
    try:
        held = fair.cloud.wait_for(holder, timeout=bound)
    except ExecutionsStillRunning as e:
        pytest.fail(f"the releaser still waits {bound} s after its grant was confirmed: {e}")
    assert held.status == "SUCCEEDED", (held.error, held.cause)
    entered = [e.get("stateEnteredEventDetails", {}).get("name") for e in held.history]
    assert "Lock.Release.DescribeGrantee" in entered and "Lock.Release.Revoke" not in entered
    assert fences_of([held, r2]) == sorted(fences_of([held, r2]))
    assert fair.probe(k).get("violations", 0) == 0 and fair.drained(k)


def test_a_wake_up_that_meets_the_park_timeout_does_not_hold_the_releaser_for_its_claim_window(fair):
    """The loaded run's interleaving, made deterministic: the patient releaser (claim window
    ``PATIENT_PARK_TIMEOUT_S``) takes W2's parked row and grants it; its ``SendTaskSuccess`` is
    held (an observer of the fault hook blocks the call's thread; nothing fails) until W2's
    park (3 s) has timed out and W2, looking by itself, found itself the owner, confirmed and
    reached its work's gate. The wake-up then answers ``TaskTimedOut``; W2's execution runs,
    so the releaser looks again after ``REPARK_LOOK_S``: no new park, its grant confirmed -
    it is done. Before, it slept out its whole claim window (120 s) first."""
    from locked_workflow.testing.cloud import ExecutionsStillRunning
    from locked_workflow.testing.faults import calling_state, fault_registry

    k = key()
    holder = fair.start("FairPatientHold", {"key": k, "workMs": 1})  # its claim window: 120 s
    fair.until(lambda: p.OWNER in fair.lock(k))
    w2 = fair.start("FairHold", {"key": k, "workMs": 1})  # parks for 3 s at a time
    fair.until(lambda: len(fair.queue(k)) == 1)
    go, held = threading.Event(), []

    def hold(service: str, operation: str, params: dict) -> None:
        if (service, operation) == ("stepfunctions", "SendTaskSuccess") and not_the_gate(params):
            state = calling_state()
            if state is not None and state.state_name == "Lock.Release.Wake":
                held.append(state.state_name)
                go.wait(timeout=180)  # (a bound: a broken test must not hang the suite)

    with fault_registry() as registry:
        registry.observers.append(hold)
        try:
            first_gate = fair.gate_token(k)
            fair.open(k)
            # W2's park timed out meanwhile: it found itself the owner, confirmed, and holds at its gate
            fair.until(lambda: fair.gate_token(k) not in (None, first_gate), timeout=60)
        finally:
            go.set()
    bound = PATIENT_PARK_TIMEOUT_S / 4  # generous on a loaded machine, far below the window
    try:
        released = fair.cloud.wait_for(holder, timeout=bound)
    except ExecutionsStillRunning as e:
        pytest.fail(f"the releaser still waits {bound} s after its grant was confirmed: {e}")
    assert held == ["Lock.Release.Wake"]
    assert released.status == "SUCCEEDED", (released.error, released.cause)
    entered = [e.get("stateEnteredEventDetails", {}).get("name") for e in released.history]
    assert "Lock.Release.DescribeGrantee" in entered and "Lock.Release.ClaimWindow" not in entered, entered
    fair.open(k)
    r2 = fair.wait([w2])[0]
    assert r2.status == "SUCCEEDED", (r2.error, r2.cause)
    assert parks_timed_out(r2) >= 1  # it looked by itself: the wake-up came too late
    assert fences_of([released, r2]) == sorted(fences_of([released, r2]))
    assert fair.probe(k).get("violations", 0) == 0 and fair.drained(k)


def test_a_release_whose_skip_response_was_lost_still_hands_the_lock_on(fair):
    """The releaser's ``SKIP`` of a waiter gone (stopped; the janitor marked its row left)
    applies, and its response is lost (a 5xx after the call). Its retry finds the ticket
    passed already: that is its own skip, so the handoff goes on to the next waiter. Before,
    the retry was refused and the handoff ended - the release's execution SUCCEEDED with the
    lock still its own, blocking the key for the rest of its lease (fault matrix:
    ``fair:Lock.Release.Skip`` x ``lost``)."""
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = key()
    holder, (w1, w2) = queued(fair, k, waiters=2, machine="FairPatient")
    fair.cloud.stepfunctions.stop_execution(executionArn=w1)
    assert fair.cloud.wait_for(w1).status == "ABORTED"
    fair.until(lambda: len(fair.queue(k)) == 1)  # the janitor marked w1's row left
    lost = Fault("UpdateItem", "InternalServerError", after_call=True, when=lambda params: (
        params.get("ConditionExpression"), params.get("UpdateExpression")) == (fp.SKIP.condition, fp.SKIP.update))
    with dynamodb_faults(lost) as log:
        fair.open(k)
        held = fair.wait([holder])[0]
        after_release = fair.lock(k).get(p.OWNER, {}).get("S", "")
    assert log.injected == 1
    assert held.status == "SUCCEEDED", (held.error, held.cause)
    assert "Lock.Release.Skip" in [e.get("stateEnteredEventDetails", {}).get("name") for e in held.history]
    assert not after_release.startswith(holder), f"the ended releaser still holds the lock: {after_release}"
    r2 = fair.wait([w2])[0]
    assert r2.status == "SUCCEEDED", (r2.error, r2.cause)
    assert parks_timed_out(r2) == 0  # handed on by the release, not found by a fallback
    assert fences_of([held, r2]) == sorted(fences_of([held, r2]))
    assert fair.probe(k).get("violations", 0) == 0 and fair.drained(k)


def _entered(result, state: str) -> int:
    return sum(1 for e in result.history if e.get("stateEnteredEventDetails", {}).get("name") == state)


def test_a_helper_behind_a_young_ready_mark_parks_again_instead_of_spinning(fair):
    """A free lock whose head (ticket s + 1) took its ticket and never parked (a hole), and a
    waiter behind it (ticket s + 2, park timeout 3 s). Its fallback runs the handoff for the
    head: no row, so it marks the row ready (the head's park would be refused: it takes the
    lock itself). The mark must be a park timeout old before a helper may skip that ticket;
    until then the helper goes back to its park. Before, it inspected again at once and its
    take found the young mark, marked it again, and so on until the mark was old enough: 22-28
    takes and 12 marks in about 3 s in the fault matrix's cells (writes and transitions, no
    invariant broken). Counted from the waiter's history: its helper's takes and marks."""
    k = key("hole")
    stored, served = p.namespaced("f", k), 5
    fair.cloud.dynamodb.put_item(TableName=fair.table("LocksTable"), Item={  # ticket 6 out, never parked
        "pk": {"S": stored}, p.FENCE: {"N": "5"}, fp.SERVED: {"N": str(served)}, fp.TICKETS: {"N": str(served + 1)}})
    started = time.monotonic()
    waiter = fair.start("Fair", {"key": k, "workMs": 1})
    result = fair.cloud.wait_for(waiter, timeout=90)
    took = time.monotonic() - started
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    takes, marks = _entered(result, "Lock.Help.Take"), _entered(result, "Lock.Help.Mark")
    print(f"the waiter entered after {took:.1f} s: {takes} helper takes, {marks} marks, "
          f"{parks_timed_out(result)} park timeouts")
    assert 1 <= marks <= 2 and takes <= 3, (takes, marks)  # (a mark, then a park; the next look skips)
    assert result.output["probe"]["fence"] == 6
    assert parks_timed_out(result) <= 3  # (bounded by park timeouts, never a lease)
    assert fair.probe(k).get("violations", 0) == 0 and fair.drained(k)


def test_a_release_whose_grant_is_refused_while_the_lock_is_still_its_own_hands_it_on(fair):
    """The holder's lock is still its own but the queue moved under it: ticket s + 1 was
    skipped (``served`` = s + 1, the lock untouched - a helper that found this holder stale
    skips a waiter whose mark was old and takes the next row, as after a redrive) while its
    waiter, late, parked in row s + 1 anyway. The release takes that parked row and its
    ``GRANT`` (``served = s``) is refused; the recheck finds the lock not granted by it but
    still its own. It nudges the skipped waiter (which queues again) and must go on from the
    new ``served`` - hand the lock to ticket s + 2 - not end "released" while holding: before,
    the key stayed the ended holder's until its lease (3 minutes here) or the next waiter's
    park timeout (2 minutes) and takeover."""
    from locked_workflow.testing.cloud import ExecutionsStillRunning

    k = key("moved")
    holder, (late, nxt) = queued(fair, k, waiters=2, machine="FairPatient")
    item = fair.lock(k)
    stored, owner = p.namespaced("f", k), item[p.OWNER]["S"]
    s_ = fp.counters(item)[0]
    assert fp.counters(item)[1] == s_ + 2
    # ticket s + 1 skipped by a helper that found the holder stale (``:stale``), its row left
    # parked (its waiter parked after the helper's take)
    fair.cloud.dynamodb.update_item(TableName=fair.table("LocksTable"), **{
        k_: v for k_, v in fp.arguments(stored, fp.SKIP, {
            ":me": {"S": "helper"}, ":stale": {"S": owner}, ":now": {"N": str(int(time.time() * 1000))},
            ":prev": {"N": str(s_)}, ":ticket": {"N": str(s_ + 1)}}).items()})
    fair.open(k)
    released = fair.cloud.wait_for(holder, timeout=60)
    assert released.status == "SUCCEEDED", (released.error, released.cause)
    entered = [e.get("stateEnteredEventDetails", {}).get("name") for e in released.history]
    assert "Lock.Release.Recheck" in entered and "Lock.Release.Nudge" in entered, entered
    assert not fair.lock(k).get(p.OWNER, {}).get("S", "").startswith(holder), fair.lock(k)
    try:
        second = fair.cloud.wait_for(nxt, timeout=45)  # far below its park timeout (2 min)
    except ExecutionsStillRunning as e:
        pytest.fail(f"the next waiter did not enter: the ended holder still holds the key: {e}")
    assert second.status == "SUCCEEDED" and parks_timed_out(second) == 0, (second.error, second.cause)
    third = fair.cloud.wait_for(late, timeout=60)  # nudged: it queued again, behind ``nxt``
    assert third.status == "SUCCEEDED", (third.error, third.cause)
    assert fences_of([released, second, third]) == sorted(fences_of([released, second, third]))
    assert fair.probe(k).get("violations", 0) == 0 and fair.drained(k)


def test_a_park_whose_response_was_lost_is_woken_in_its_retry_and_leaves_no_row(fair):
    """A waiter's ``PARK`` applies (its row holds token T1) and its response is lost (a 5xx after
    the call); the holder releases then, and wakes T1 while the park's ``Retry`` runs (its second
    attempt fails before applying and ends only once the wake-up has been sent). As on Step
    Functions, each attempt of the callback task has its own token and T1's task is closed, so
    the wake-up fails (``TaskTimedOut``,
    https://docs.aws.amazon.com/step-functions/latest/apireference/API_SendTaskSuccess.html#API_SendTaskSuccess_Errors);
    the third attempt parks again and the releaser's retake wakes it. Before the runtime gave
    each attempt its own token, the retry ended at once with T1's wake-up and its re-created row
    stayed parked after the waiter was served (fault matrix: ``fair:Lock.Park`` x ``lost``)."""
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = key()
    holder, _ = queued(fair, k, waiters=0)
    wakes: list = []
    is_park = lambda params: params.get("UpdateExpression") == fp.PARK.update  # noqa: E731
    lost = Fault("UpdateItem", "InternalServerError", after_call=True, then=lambda: fair.open(k), when=is_park)
    failed = Fault("UpdateItem", "InternalServerError", then=lambda: fair.until(lambda: wakes), when=is_park)
    seen = Fault("SendTaskSuccess", "never", service="stepfunctions",
                 when=lambda params: not_the_gate(params) and wakes.append(params["taskToken"]) and False)
    with dynamodb_faults(lost, failed, seen) as log:
        waiter = fair.start("Fair", {"key": k, "workMs": 100})
        held, woken = fair.wait([holder, waiter])
    assert (lost.injected, failed.injected, seen.injected) == (1, 1, 0)
    assert (held.status, woken.status) == ("SUCCEEDED", "SUCCEEDED"), (woken.error, woken.cause)
    assert fences_of([held, woken]) == sorted(fences_of([held, woken]))
    assert fair.probe(k).get("violations", 0) == 0 and fair.drained(k)


def test_an_impatient_waiter_times_out_and_leaves_the_queue(fair):
    k = key()
    holder, (w1,) = queued(fair, k, waiters=1)
    impatient = fair.start("FairImpatient", {"key": k, "workMs": 1})
    fair.until(lambda: len(fair.queue(k)) == 2)
    result = fair.wait([impatient])[0]
    assert (result.status, result.error) == ("FAILED", p.ERROR_TIMEOUT), result.cause
    assert len(fair.queue(k)) == 1  # only w1 still queues
    fair.open(k)
    assert [r.status for r in fair.wait([holder, w1])] == ["SUCCEEDED"] * 2
    assert fair.probe(k)["entries"] == 2 and fair.drained(k)


def test_the_template_parks_on_a_task_token_and_only_the_wake_up_has_an_unscoped_resource(fair_synth):
    import json

    from aws_cdk.assertions import Match, Template

    template = Template.from_json(fair_synth.template)
    statements = [
        s for policy in template.find_resources("AWS::IAM::Policy").values()
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    actions = lambda s: s["Action"] if isinstance(s["Action"], list) else [s["Action"]]  # noqa: E731
    unscoped = [s for s in statements if s.get("Resource") == "*"
                and not all(a.startswith(("xray:", "logs:")) for a in actions(s))]  # tracing, log delivery
    # IAM cannot scope a service integration's task token: waking or nudging a parked waiter
    # (SendTaskSuccess, SendTaskFailure) and the liveness check's probe of a holder's presence
    # token (SendTaskHeartbeat) are the only "*" resources
    wakes = {"states:SendTaskSuccess", "states:SendTaskFailure", "states:SendTaskHeartbeat"}
    assert unscoped and all(set(actions(s)) <= wakes for s in unscoped), unscoped
    assert not any("*" in actions(s) for s in statements)
    fair_machine = template.find_resources("AWS::StepFunctions::StateMachine", Match.object_like({
        "Properties": {"DefinitionString": Match.any_value()}}))
    definitions = [json.dumps(m["Properties"]["DefinitionString"]) for m in fair_machine.values()]
    # a park is an UpdateItem on a task token; a coalescing (keep_newest) park, a transaction
    # that also checks the item's cut
    parked = [d for d in definitions
              if "updateItem.waitForTaskToken" in d or "transactWriteItems.waitForTaskToken" in d]
    # Fair, FairHold, FairPatientHold, FairPatient, FairNoJanitor, FairImpatient, FairWait,
    # FairWaitShortGrace, FairCancelled, FairNewest, FairOldest (not EXPRESS, Polling, Unlocked)
    assert len(parked) == 11
    # the park timeout grows with the distance to the head (3 s here; FairPatientHold's,
    # FairPatient's, FairNewest's and FairOldest's 120 s)
    assert sum(f"$min([{fp.MAX_PARK_S}, 3 * $max([1, " in d for d in parked) == 7


def test_a_parked_waiter_whose_branch_was_cancelled_blocks_the_next_one_for_at_most_one_park_timeout(fair):
    """The waiter's branch is cancelled by its failing sibling and the user catches the
    Parallel's failure: the execution stays RUNNING, no status event, and its park's token is
    closed. The release's wake-up of it fails; its execution still runs, so the grant waits one
    claim window (the park timeout) for a claim, is taken back and passes to the next waiter."""
    from fair_stack import PARK_TIMEOUT_S

    k = key()
    holder = fair.start("FairHold", {"key": k, "workMs": 1})
    fair.until(lambda: p.OWNER in fair.lock(k))
    cancelled = fair.start("FairCancelled", {"key": k, "workMs": 1})
    fair.until(lambda: len(fair.queue(k)) == 1)
    behind = fair.start("FairPatient", {"key": k, "workMs": 1})
    fair.until(lambda: len(fair.queue(k)) == 2)
    fair.fail_gate(f"sibling#{k}")  # the sibling branch fails: the parked waiter's branch is cancelled
    fair.until(lambda: any(e["type"] == "ParallelStateFailed" for e in fair.cloud.history(cancelled)), timeout=60)
    assert fair.cloud.stepfunctions.describe_execution(executionArn=cancelled)["status"] == "RUNNING"
    fair.open(k)
    holder_result, behind_result = fair.wait([holder, behind])
    assert [holder_result.status, behind_result.status] == ["SUCCEEDED"] * 2
    names = [e.get("stateEnteredEventDetails", {}).get("name") for e in holder_result.history]
    assert "Lock.Release.ClaimWindow" in names and "Lock.Release.Revoke" in names  # waited one window, took it back
    released = next(e["timestamp"] for e in holder_result.history
                    if e.get("stateEnteredEventDetails", {}).get("name") == "Lock.Release.Take")
    granted = next(e["timestamp"] for e in behind_result.history if e["type"] == "TaskSucceeded"
                   and "waitForTaskToken" in str(e.get("taskSucceededEventDetails", {}).get("resource")))
    blocked_s = (granted - released).total_seconds()
    assert PARK_TIMEOUT_S <= blocked_s < PARK_TIMEOUT_S + 30  # one claim window (and the loaded machine's slack)
    assert last_park_end(behind_result) == "TaskSucceeded"  # the handoff, not its own fallback, let it in
    assert behind_result.output["probe"]["fence"] == holder_result.output["probe"]["fence"] + 2  # (+1: the revoked grant)
    fair.cloud.stepfunctions.stop_execution(executionArn=cancelled)  # (it would idle on for a minute)
    fair.until(lambda: fair.drained(k))
    assert fair.probe(k).get("violations", 0) == 0


def test_a_holder_cancelled_by_a_sibling_is_probed_and_frees_the_key_after_its_stop_grace_not_its_lease(fair):
    """D1-fair: the holder's branch is cancelled at work (its sibling failed; the user caught
    the Parallel's failure): no Catch runs, no status event, the execution stays RUNNING, and
    DescribeExecution cannot tell it from a live holder. A parked waiter's fallback probes the
    hold's presence token (``SendTaskHeartbeat``: ``TaskTimedOut``), retires the acquisition
    (ABANDONED: held for its stop grace from now) and takes the lock after it - with the
    cancelled execution still RUNNING, not at its lease (3 min) or its end (2 min on)."""
    from fair_stack import CANCELLED_STOP_GRACE_S

    k = key()
    cancelled = fair.start("FairCancelled", {"key": k, "workMs": 1})
    fair.until(lambda: fair.gate_token(k, "held") is not None, timeout=60)  # holds, at work (its gate)
    fair.until(lambda: p.PRESENCE in fair.lock(k), timeout=60)  # its presence registered
    registered = int(fair.lock(k)[p.PRESENCE_AT]["N"]) / 1000
    waiter = fair.start("Fair", {"key": k, "workMs": 1})
    fair.until(lambda: len(fair.queue(k)) == 1, timeout=60)
    fair.fail_gate(f"sibling#{k}")  # the sibling fails: the holder's branch is cancelled at work
    fair.until(lambda: any(e["type"] == "ParallelStateFailed" for e in fair.cloud.history(cancelled)), timeout=60)
    result = fair.wait([waiter])[0]
    assert result.status == "SUCCEEDED", (result.error, result.cause)  # (before: Lock.Timeout after 90 s)
    assert fair.cloud.stepfunctions.describe_execution(executionArn=cancelled)["status"] == "RUNNING"
    from lock_invariants import state_entered

    assert {"Lock.ProbeHolder", "Lock.Abandoned"} <= set(state_entered(result))
    entered = _entered_at(result, "FairProbe")
    # not before the token stood PRESENCE_SETTLE_MS and the stop grace ran (the cancelled work
    # may still run), and long before the lease: the settle, the grace, a few park rounds, slack
    waited = entered - registered
    settle_s = p.PRESENCE_SETTLE_MS / 1000
    assert settle_s + CANCELLED_STOP_GRACE_S - 1 <= waited < settle_s + CANCELLED_STOP_GRACE_S + 30, waited
    probe = fair.probe(k)
    assert probe.get("violations", 0) == 0 and probe["seen"] == [1], probe  # (the holder never passed its gate)
    fair.cloud.stepfunctions.stop_execution(executionArn=cancelled)  # (it would idle on for 2 min)
    fair.until(lambda: fair.drained(k), timeout=60)
    print(f"the waiter entered {waited:.1f} s after the holder's presence registered")


def client(fair, stepfunctions=None, **kwargs):
    from locked_workflow.constructs_lib.lock_client import LockClient

    return LockClient(fair.table("LocksTable"), namespace="f", dynamodb=fair.cloud.dynamodb,
                      stepfunctions=stepfunctions or fair.cloud.stepfunctions, fair=True, **kwargs)


def dead_head(fair, k: str, owner: str, *, fence: int, token: str = f"{fp.CLIENT_LEASE_PREFIX}0") -> None:
    """A free lock of fence ``fence`` whose queue's head ``owner`` polled last long ago (dead),
    or - ``token`` a task token - parked in an execution that has ended."""
    served = fence  # any served ticket: the head is the next one
    fair.cloud.dynamodb.put_item(TableName=fair.table("LocksTable"), Item={
        "pk": {"S": p.namespaced("f", k)}, p.FENCE: {"N": str(fence)},
        fp.SERVED: {"N": str(served)}, fp.TICKETS: {"N": str(served + 1)}})
    fair.cloud.dynamodb.put_item(TableName=fair.table("LocksTable"), Item={
        "pk": {"S": fp.row_key(p.namespaced("f", k), served + 1)}, p.OWNER: {"S": owner},
        fp.TOKEN: {"S": token}, fp.LEASE: {"N": "60000"}, fp.GRACE_MS: {"N": "0"}})


# ---- EXPRESS: the same queue, polled by its head ---------------------------------------------


def test_express_waiters_keep_arrival_order_polling_as_the_head(fair):
    k = key()
    holder = fair.start("FairHold", {"key": k, "workMs": 1})
    fair.until(lambda: p.OWNER in fair.lock(k))
    arns = []
    for n in range(4):
        arns.append(fair.start("FairExpress", {"key": k, "workMs": 100}))
        fair.until(lambda: len(fair.queue(k)) == n + 1)
    fair.open(k)
    results = fair.wait([holder] + arns)
    assert [r.status for r in results] == ["SUCCEEDED"] * 5, [(r.error, r.cause) for r in results]
    fences = fences_of(results[1:])
    assert fences == sorted(fences)
    # their places carried polling leases, never task tokens
    assert not any(e["type"] == "TaskSubmitted" for r in results[1:] for e in r.history)
    probe = fair.probe(k)
    assert probe.get("violations", 0) == 0 and probe["counter"] == probe["accepted"] == 5 and fair.drained(k)


def test_an_express_waiter_dequeues_a_head_whose_lease_ended(fair):
    k = key()
    dead_head(fair, k, "express:gone#1", fence=2)
    result = fair.wait([fair.start("FairExpress", {"key": k, "workMs": 1})])[0]
    assert result.status == "SUCCEEDED" and result.output["probe"]["fence"] == 3 and fair.drained(k)


def test_max_wait_none_waits_as_long_as_the_history_budget_allows_then_times_out():
    import aws_cdk as cdk
    from aws_cdk import aws_stepfunctions as sfn

    from locked_workflow import Lock, LockedSection, LockTable
    from locked_workflow.state_machines.lock_protocol import jsonata

    stack = cdk.Stack(cdk.App(), "Unlimited")
    table = LockTable(stack, "Locks").table
    key = jsonata("$states.input.key")
    common = dict(table=table, lease=cdk.Duration.minutes(5), max_wait=None)
    section = LockedSection(stack, "Fair", protected=sfn.Pass.jsonata(stack, "W"), lock=Lock.fair(key), **common)
    # (20,000 / 100 - 1) park rounds of 30 s: 1 h 39 min 30 s, then Lock.Timeout
    assert section.max_wait_ms == fp.unlimited_wait_s(30, 20_000) * 1000 == 5_970_000
    with pytest.raises(TypeError, match=r"`max_wait` must be a Duration, got: NoneType"):
        LockedSection(stack, "Polling", protected=sfn.Pass.jsonata(stack, "W2"), lock=Lock.mutex(key), **common)
