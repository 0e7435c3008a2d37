"""The fair lock on both DynamoDB backends: no overlap, fences in order, no lost update, grants
in arrival order (the polling lock's order as the negative control), an impatient waiter, the
EXPRESS queue polled by its head, and the template's parks.

The stack's handle and fixture (``Fair``, ``fair``) and the helpers here serve the other files
of the fair lock: its dead participants (``test_fair_dead_participants.py``), its lost
responses (``test_fair_lost_responses.py``) - one group of ``tests/conftest.py``, one deployment
per backend - and the clients, coalescing and redrive files."""

from __future__ import annotations

import time
import uuid

import pytest

from deployed import StackRun, deployed_stack, synthesized
from fair_stack import FairStack
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


def _entered_at(result, name: str) -> float:
    """Epoch s at which ``result`` first entered the state ``name``."""
    return next(e["timestamp"].timestamp() for e in result.history
                if e.get("stateEnteredEventDetails", {}).get("name") == name)


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
