"""The rate limit's reservation on a timeline and in a model (``rate_model.py``): the state
machine's own JSONata (ADMIT's values, the Wait's seconds, the guard) evaluated on a clock moved
by hand - an ADMIT answered late by about the entry margin keeps a free permit (it lost it before
the lead), a run later than lead and margin still gives it up -, the Python participants' rules
the same as the JSONata's, and the window invariant over many randomized runs of workflows and
clients with late ADMITs, late Waits, given-up permits and refusals, with negative controls."""

from __future__ import annotations

import random

import pytest
from jsonata import Jsonata

from locked_workflow.state_machines import rate_protocol as rate
from locked_workflow.testing.patches.jsonata_evaluator import evaluate

import rate_model as model

T0 = 1_800_000_000_000
PERIOD_MS = 60_000


def at(ms: int) -> dict:
    """Bindings that make ``$millis()`` return ``ms`` (the service clock, moved by hand)."""
    return {"millis": Jsonata.JLambda(lambda: ms)}


def timeline(*, permit_at: int, late_ms: int, overslept_ms: int = 0, transition_ms: int = 50) -> tuple[int, int, bool]:
    """A run that read the item at ``T0`` (count 3, the permit it reads freeing at ``permit_at``)
    and evaluates ADMIT's values then; the ADMIT's answer and the transition into the Wait come
    ``late_ms`` after. Its (reserved time, guard's time, on time?) - by the state machine's JSONata."""
    seen = {rate.SEEN_N: 3, rate.PERMIT_AT: permit_at, rate.LAST: T0 - 30_000, rate.SINCE: T0 - 500, rate.ROUNDS: 1}
    values = evaluate(rate.admit_values_expression(wait_variable="w", period_ms=PERIOD_MS), {"w": seen, **at(T0)})
    reserved = int(values[":now"]["N"])
    lock = {"acquiredAt": reserved}
    turn = T0 + late_ms
    seconds = evaluate(rate.turn_seconds_expression("lock"), {"lock": lock, **at(turn)})
    guard = turn + seconds * 1000 + overslept_ms + transition_ms
    return reserved, guard, evaluate(rate.on_time_expression("lock"), {"lock": lock, **at(guard)})


def test_an_admit_answered_late_by_about_the_margin_keeps_the_free_permit_it_reserved():
    """The measured case (docs/benchmarks.md, 200-run burst on DynamoDB Local): a run whose
    permit was free reached its Wait 2.33 s after its reserved time, overslept nothing, and gave
    the permit up. A free permit stamped at the ADMIT's own time left the ADMIT's round trip to
    the entry margin; the lead leaves it to the Wait."""
    free = T0 - 5_000
    for late_ms in (0, 400, 1_500, 2_330, 2_800):
        reserved, guard, on_time = timeline(permit_at=free, late_ms=late_ms)
        assert on_time, (late_ms, guard - reserved)
        assert guard >= reserved  # never in before its time
    # a permit freeing later than the lead: reserved at its time, as before
    reserved, guard, on_time = timeline(permit_at=T0 + 20_000, late_ms=2_330)
    assert reserved == T0 + 20_000 and on_time and reserved <= guard <= reserved + 1_000 + 50


def test_a_run_later_than_the_lead_and_the_margin_still_gives_its_permit_up():
    reserved, guard, on_time = timeline(permit_at=T0 - 5_000, late_ms=rate.ADMIT_LEAD_MS + rate.ENTRY_MARGIN_MS + 1)
    assert not on_time and guard > reserved + rate.ENTRY_MARGIN_MS
    # a Wait that overslept past the margin: given up too, however early the ADMIT answered
    reserved, guard, on_time = timeline(permit_at=T0 + 20_000, late_ms=0, overslept_ms=rate.ENTRY_MARGIN_MS)
    assert not on_time


def test_the_clients_reservation_and_wait_for_a_permit_are_the_state_machines():
    rng = random.Random(7)
    for _ in range(200):
        now = T0 + rng.randint(0, 100_000)
        permit_at = rng.choice([0, now + rng.randint(-5_000, 5_000), now + rng.randint(0, 120_000)])
        last = rng.choice([0, now + rng.randint(-3_000, 3_000)])
        seen = {rate.SEEN_N: 1, rate.PERMIT_AT: permit_at, rate.LAST: last, rate.SINCE: now, rate.ROUNDS: 1}
        assert evaluate(rate.reserved_time_expression("w"), {"w": seen, **at(now)}) == rate.reserved_ms(
            now_ms=now, permit_at=permit_at, last=last)
        assert evaluate(rate.free_time_expression("w"), {"w": seen, **at(now)}) == rate.free_ms(
            now_ms=now, permit_at=permit_at, last=last)
    # max_wait counts the wait for the permit, not the lead: a free permit is in time at max_wait 0
    seen = {rate.SEEN_N: 1, rate.PERMIT_AT: 0, rate.LAST: 0, rate.SINCE: T0, rate.ROUNDS: 1}
    assert evaluate(rate.past_max_wait_expression("w", 0), {"w": seen, **at(T0)}) is False
    assert evaluate(rate.past_max_wait_expression("w", 0), {"w": seen, **at(T0 + 1)}) is True


# ---- the model ------------------------------------------------------------------------------

#: (limit, period ms): the shortest period, one where the margin is a large part, a minute
SHAPES = [(1, 1_000), (3, 10_000), (2, 5_000), (10, 60_000)]


@pytest.mark.parametrize("limit,period_ms", SHAPES)
def test_no_window_of_the_period_holds_more_than_limit_entries_under_late_steps(limit, period_ms):
    given_up = refused = 0
    for seed in range(40):
        out = model.simulate(runs=25, limit=limit, period_ms=period_ms, seed=seed,
                             arrival_ms=period_ms // 2)
        assert len(out.entries) == 25  # every run entered in the end
        assert model.crowded(out.entries, limit=limit, period_ms=period_ms) == [], seed
        assert model.crowded(out.reservations, limit=limit, period_ms=period_ms) == [], seed
        given_up, refused = given_up + out.given_up, refused + out.refused
    assert given_up > 0 and refused > 0  # the model did reach both paths


@pytest.mark.parametrize("variant", ["no_slot_clause", "no_margin", "no_guard"])
def test_negative_control_each_rule_is_needed_or_a_window_holds_more_than_limit(variant):
    crowded = sum(bool(model.crowded(model.simulate(runs=25, limit=3, period_ms=10_000, seed=seed,
                                                    variant=variant).entries, limit=3, period_ms=10_000))
                  for seed in range(40))
    assert crowded > 0, variant


def test_the_lead_keeps_the_permits_late_admit_answers_cost_without_it():
    """Only the ADMIT's answer is slow (up to lead + margin - the transitions after it): without
    the lead, a free permit's run gives it up whenever its answer outlasts the margin's spare;
    with it, none is given up. Both keep the limit."""
    late_answers = dict(slow_odds=0.3, slow_max_ms=rate.ADMIT_LEAD_MS + rate.ENTRY_MARGIN_MS - 200,
                        slow_steps=frozenset({"response"}), clients=0.0)
    with_lead = without = 0
    for seed in range(30):
        for variant in ("", "no_lead"):
            out = model.simulate(runs=20, limit=3, period_ms=10_000, seed=seed, variant=variant,
                                 arrival_ms=60_000, **late_answers)
            assert model.crowded(out.entries, limit=3, period_ms=10_000) == []
            if variant:
                without += out.given_up
            else:
                with_lead += out.given_up
    assert with_lead == 0 and without > 0, (with_lead, without)


def test_the_models_admit_reads_the_item_as_dynamodb_reads_the_real_expression():
    import boto3
    from botocore.exceptions import ClientError
    from moto import mock_aws

    rng = random.Random(3)
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        ddb.create_table(TableName="rate-model", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                         AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                         BillingMode="PAY_PER_REQUEST")
        outcomes = set()
        for case in range(150):
            limit, n = 2, rng.randint(0, 4)
            item: dict = {}
            if n or rng.random() < 0.5:
                item = {rate.ADMISSIONS: {"N": str(n + rng.choice([0, 0, 1, -1]))},
                        rate.ADMITTED_AT: {"N": str(T0 + rng.randint(-3, 3) * 1000)}}
                for i in range(limit):
                    if rng.random() < 0.7:
                        item[f"{rate.PERMIT_PREFIX}{i}"] = {"N": str(T0 - rng.randint(-3, 70) * 1000)}
            values = rate.client_values(n=n, reserved_ms=T0 + rng.randint(-2, 2) * 1000, period_ms=PERIOD_MS)
            slot = rate.permit_attribute(n, limit)
            expected = model.admit(item, slot=slot, values=values)
            key = {"pk": {"S": f"k{case}"}}
            if item:
                ddb.put_item(TableName="rate-model", Item={**key, **item})
            try:
                ddb.update_item(TableName="rate-model", Key=key, UpdateExpression=rate.ADMIT.update,
                                ConditionExpression=rate.ADMIT.condition,
                                ExpressionAttributeNames=rate.attribute_names(slot),
                                ExpressionAttributeValues=values)
                got = {k: v for k, v in ddb.get_item(TableName="rate-model", Key=key, ConsistentRead=True)["Item"].items()
                       if k != "pk"}
            except ClientError as error:
                assert error.response["Error"]["Code"] == "ConditionalCheckFailedException"
                got = None
            assert got == expected, (item, values)
            outcomes.add(got is None)
        assert outcomes == {True, False}  # both admitted and refused cases were compared
