"""A seeded slice of the randomized fault campaign (``make stress`` runs the whole of it)."""

from __future__ import annotations

import datetime
import json
from collections import Counter

import pytest

from locked_workflow.state_machines.errors import ERROR_SUPERSEDED
from tools import stress

#: The probe's stop grace (Init 10 s + its 3 s timeout + 5 s).
GRACE_MS = stress.PROBE_GRACE_S * 1000
#: The coalescing and rate-limit shapes, drawn alone (the suite's slice of them).
FLOW = {"Coalesce": 1, "Rate": 1}


@pytest.fixture(scope="module")
def campaign_app():
    from locked_workflow.testing import LocalCloud
    from locked_workflow.testing.synth import synth_app

    synthesized = synth_app(lambda app: stress.build_stack(app, "Stress"))
    with LocalCloud("moto") as cloud:
        yield cloud, cloud.deploy(synthesized.template, assets_dir=synthesized.assets_dir)


def test_plan_is_seeded_and_mixes_every_shape_and_fault():
    first, again = stress.plan(300, 5, seed=11, negative_control=False), stress.plan(300, 5, seed=11, negative_control=False)
    assert [(r.shape, r.key, r.stop, r.document) for r in first] == [(r.shape, r.key, r.stop, r.document) for r in again]
    assert {r.shape for r in first} == set(stress.SHAPES)
    assert {r.stop for r in first} == {None, "delay", "holding", "waiting", "long-wait"} and any(r.redrive for r in first)
    assert not any(r.stop or r.redrive for r in first if r.shape in stress.CLIENT_SHAPES)
    padded = [r for r in first if r.padded]
    assert padded and {r.shape for r in padded} <= stress.PADDED_SHAPES
    assert all(50_000 <= len(r.document["padding"]) <= 150_000 for r in padded)
    assert sum(stress.past_timeout(r) for r in first) > 0
    assert all(c["key"].startswith("C") for r in first for c in r.document.get("children", []))
    assert all(r.key.startswith("L") == (r.shape == "Lease") for r in first)
    # the coalescing and rate shapes on keys of their own, few of them (bursts)
    assert {r.key for r in first if r.shape == "Coalesce"} == {f"N{i}" for i in range(stress.FLOW_KEYS)}
    assert {r.key for r in first if r.shape == "Rate"} == {f"T{i}" for i in range(stress.FLOW_KEYS)}
    assert any(r.stop for r in first if r.shape in ("Coalesce", "Rate"))
    assert {r.shape for r in stress.plan(20, 5, seed=11, negative_control=False, shapes=FLOW)} == set(FLOW)
    assert {r.key for r in first if r.shape == "Record"} == set(stress.RECORD_SIZES_KB) and stress.OVER_LIMIT_RECORDS
    assert "Unlocked" in {r.shape for r in stress.plan(200, 5, seed=11, negative_control=True)}


def _event(ms: int, kind: str, **details) -> dict:
    event = {"timestamp": datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc), "type": kind}
    if kind == "TaskScheduled":
        event["taskScheduledEventDetails"] = details
    return event


def _write(ms: int, key: str, update: str, resource_type: str = "dynamodb") -> dict:
    parameters = {"Key": {"pk": {"S": key}}, "UpdateExpression": update}
    return _event(ms, "TaskScheduled", resourceType=resource_type, parameters=json.dumps(parameters))


def _probe(ms: int, key: str) -> dict:
    return _event(ms, "TaskScheduled", resourceType="lambda", parameters=json.dumps({"Payload": {"key": key}}))


def test_waits_are_read_from_a_history():
    from locked_workflow.state_machines import fair_protocol as fair, lock_protocol as protocol

    history = [
        _write(1000, "x#K0", protocol.ACQUIRE.update), _write(2000, "x#K0", protocol.ACQUIRE.update),
        _probe(3000, "K0"), _write(3500, "x#K0", protocol.RELEASE.update),  # a release starts no wait
        _write(4000, "c#C1", protocol.ACQUIRE.update), _write(4100, "c#C1", fair.ENQUEUE.update),
        _write(4200, "c#C1", fair.PARK.update, "aws-sdk:dynamodb"), _event(9000, "ExecutionAborted"),
    ]
    waits = stress.waits_of(stress.timeline(history))
    assert sorted((w.stored_key, w.start_ms, w.end_ms, w.fair) for w in waits) == [
        ("c#C1", 4000, 9000, True), ("x#K0", 1000, 3000, False),
    ]


def _report(runs, probe) -> stress.Report:
    return stress.Report(runs=runs, probe=probe, faults=Counter(), left_held=[])


def test_judge_flags_each_invariant():
    superseded = ERROR_SUPERSEDED
    runs = [stress.Run("Plain", "K0", {}, arn="a", status="FAILED", error="DynamoDB.Boom"),
            stress.Run("ClientNested", "K1", {}, status="SUCCEEDED", problems=["re-entered hold got fence 3"]),
            stress.Run("ClientAsync", "K1", {}, status="FAILED", task_errors=[None, "LockLost: gone"]),
            # superseded is a coalescing run's outcome, never another's; and never after its work
            stress.Run("Coalesce", "N0", {}, arn="n", status="FAILED", error=superseded, events=[(1, "enter", "n#N0")]),
            stress.Run("Plain", "K0", {}, arn="p", status="FAILED", error=superseded),
            # (entered before a redrive, then superseded: allowed)
            stress.Run("Coalesce", "N0", {}, arn="m", status="FAILED", error=superseded,
                       events=[(1, "enter", "n#N0"), (2, "redriven", "")]),
            # three admissions within the rate's period
            stress.Run("Rate", "T0", {}, arn="r1", status="SUCCEEDED", admissions=[1_000, 2_000]),
            stress.Run("Rate", "T0", {}, arn="r2", status="SUCCEEDED", admissions=[1_000 + stress.RATE_PERIOD_S * 1000 - 1])]
    report = stress.Report(
        runs=runs,
        probe={"K0": {"violations": 1, "counter": 2, "accepted": 3, "fences": [1, 3, 2]},
               "L0": {"violations": 4, "counter": 1, "accepted": 2}},  # short lease: overlap allowed
        faults=Counter(), left_held=["x#K0 by someone"], coalesce_rows=["!3!n#N1: left, owner"],
    )
    found = stress.judge(report)
    assert {name for name, hits in found.items() if hits} == {
        "alone", "lost update", "fence order", "outcome", "left held", "re-entrant hold", "coalesce", "rate",
    }
    assert len(found["outcome"]) == 3 and len(found["coalesce"]) == 2 and len(found["rate"]) == 1
    # within the limit: the third admission a full period after the first
    report.runs[-1].admissions = [1_000 + stress.RATE_PERIOD_S * 1000]
    assert stress.judge(report)["rate"] == []
    assert all("L0" not in hit for hits in found.values() for hit in hits)


def test_handoff_after_an_ended_holder_is_bounded():
    from locked_workflow.state_machines import lock_protocol as protocol

    ended = 100_000
    bound = stress.handoff_bound_ms(GRACE_MS, fair_waiter=False)
    holder = stress.Run("Plain", "K0", {}, arn="holder", holds=[stress.Hold("x#K0", ended, GRACE_MS)])
    waiter = stress.Run("Plain", "K0", {}, arn="waiter", waits=[stress.Wait("x#K0", ended - 500, ended + bound + 5000)])
    late = _report([holder, waiter], {"K0": {"enteredAt": [ended - 3000, ended + bound + 1000]}})
    assert stress.judge(late)["handoff"] and late.handoffs == [("x#K0", bound + 1000)]
    in_time = _report([holder, waiter], {"K0": {"enteredAt": [ended + GRACE_MS + 2000]}})
    assert not stress.judge(in_time)["handoff"] and in_time.handoffs == [("x#K0", GRACE_MS + 2000)]
    # nobody waited through the bound (the waiter gave up first): nothing to check
    short = stress.Run("Plain", "K0", {}, arn="short", waits=[stress.Wait("x#K0", ended - 500, ended + 2000)])
    unwatched = _report([holder, short], {"K0": {"enteredAt": []}})
    assert not stress.judge(unwatched)["handoff"] and unwatched.handoffs == []
    # a parked fair waiter is bounded by the park timeout instead of a liveness round
    assert stress.handoff_bound_ms(GRACE_MS, fair_waiter=True) < bound
    # a cancelled section's key: once its presence token has settled
    cancelled = stress.Run("Cancelled", "K0", {}, arn="c", holds=[stress.Hold("x#K0", ended, GRACE_MS, True)])
    settled = _report([cancelled, waiter], {"K0": {"enteredAt": [ended + bound + 1000]}})
    assert not stress.judge(settled)["handoff"]
    assert stress.handoff_bound_ms(GRACE_MS, False, cancelled=True) == bound + protocol.PRESENCE_SETTLE_MS


def test_seeded_campaign_keeps_every_invariant(campaign_app):
    cloud, app = campaign_app
    # the seeded slice, and a slice of the coalescing and rate shapes on one key each (runs side
    # by side with it: they cost the campaign's wall time little)
    planned = stress.plan(24, 4, seed=2026, negative_control=False)
    planned += stress.plan(8, 1, seed=2026, negative_control=False, shapes=FLOW)
    report = stress.run_campaign(cloud, app, planned, seed=2026, settle_s=GRACE_MS / 1000 + 4)
    print(stress.summary(report))
    assert report.ok, report.violations
    assert sum(i.get("entries", 0) for i in report.probe.values()) >= 24  # the work did run
    assert any(key.startswith("C") for key in report.probe)  # children of a hold ran on their keys
    assert sum(report.faults.values()) > 0 and any(r.stopped for r in report.runs)
    assert report.faults["duplicate janitor event"] > 0 and report.faults["late janitor event"] > 0
    assert {r.reading for r in report.runs} == {"strict", "reevaluate"}
    coalescing = [r for r in report.runs if r.shape == "Coalesce"]
    assert coalescing and sum(len(r.admissions) for r in report.runs if r.shape == "Rate") >= 3


def test_negative_control_unlocked_runs_break_the_campaign(campaign_app):
    """The same campaign and judge, with unlocked runs among locked ones on one key: the judge
    must see them inside together (a short hand-made plan: the seeded plan's stops and long
    waits on one key cost minutes and prove nothing more here)."""
    cloud, app = campaign_app
    locked = [stress.Run("Plain", "K0", {"key": "K0", "workMs": 400, "fail": False}) for _ in range(6)]
    unlocked = [stress.Run("Unlocked", "K0", {"key": "K0", "workMs": 2500, "fail": False}) for _ in range(4)]
    planned = [run for pair in zip(locked, unlocked + [None] * 2) for run in pair if run is not None]
    report = stress.run_campaign(cloud, app, planned, seed=2, settle_s=0, readings=("strict",))
    assert not report.ok
    assert report.violations["alone"] or report.violations["lost update"], report.violations

def test_a_queue_of_holes_is_passed_by_the_next_arrival_and_a_parked_row_is_held(campaign_app):
    """The end-of-campaign check of fair queues: a free lock whose queue shows only a hole (a
    ticket whose waiter never parked) must admit the next fair execution, which empties the
    queue; a row still parked is left held."""
    from locked_workflow.state_machines import fair_protocol as fair, lock_protocol as protocol

    cloud, app = campaign_app
    table = stress.table_name(app, "LocksTable")
    hole, parked = "x#Hole", "x#Parked"
    for key in (hole, parked):  # a ticket taken, never served; the lock free
        cloud.dynamodb.put_item(TableName=table, Item={**protocol.lock_item_key(key),
                                                       fair.TICKETS: {"N": "1"}, fair.SERVED: {"N": "0"}})
    cloud.dynamodb.put_item(TableName=table, Item={
        **protocol.lock_item_key(fair.row_key(parked, 1)), protocol.OWNER: {"S": "someone"},
        fair.TOKEN: {"S": "a-token"}, fair.LEASE: {"N": "60000"}})
    try:
        held, to_pass = stress.left_held(cloud, app)
        assert to_pass == {hole: "Fair"}
        assert f"{parked} queued: tickets 1..1" in held and f"{fair.row_key(parked, 1)} queued: someone" in held
        late, passed = stress.next_arrivals(cloud, app, to_pass)
        assert late == [] and [key for key, _ in passed] == [hole]
        item = cloud.dynamodb.get_item(TableName=table, Key=protocol.lock_item_key(hole), ConsistentRead=True)["Item"]
        served, tickets = fair.counters(item)
        assert served == tickets == 2  # the hole skipped, the arrival served
        assert protocol.OWNER not in item or int(item[protocol.EXPIRES_AT]["N"]) <= stress.now_ms()  # and gone
    finally:
        for key in (hole, parked, fair.row_key(parked, 1), fair.row_key(hole, 1), fair.row_key(hole, 2)):
            cloud.dynamodb.delete_item(TableName=table, Key=protocol.lock_item_key(key))
