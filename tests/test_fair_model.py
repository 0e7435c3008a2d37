"""The fair lock's protocol, model-checked: every interleaving of 2-3 participants' steps -
fast acquire, enqueue, park, wake, acquire as head, release - with a crash at every step, a
lost response on every write, a lost wake-up, and the park's fallback timeout. It proves:
never two holders, grants in queue order (no overtake of a live queued waiter), and from
every reachable state every live participant can still finish (no lost wake-up outlives the
fallback; none at all without faults). Each property has a protocol variant that breaks it,
and the model must catch it.

The model's reading of each write is checked against DynamoDB itself (both backends), over
many item states, through the real expressions of state_machines/fair_protocol.py."""

from __future__ import annotations

import random

import pytest

from fair_model import CURRENT, OLD, Item, Model, acquire_head, enqueue, fast_acquire, park, release, remove_at
from state_machines import fair_protocol as f
from state_machines import lock_protocol as p


@pytest.mark.parametrize("participants", [2, 3])
def test_no_two_holders_fifo_grants_and_no_stuck_waiter_under_crashes_lost_responses_and_wakes(participants):
    model = Model(participants=participants, lost_wakes=1 if participants == 2 else 0)
    result = model.explore()
    assert result["violation"] is None, model.violations
    assert result["states"] > (1000 if participants == 2 else 50_000)  # the space was really explored


def test_without_faults_no_wake_up_is_ever_lost_even_with_no_fallback():
    result = Model(participants=3, fallback=False, crashes=False, lost_wakes=0).explore()
    assert result["violation"] is None


def test_a_crashed_holder_strands_parked_waiters_without_the_fallback():
    """Why the park needs its timeout: the model finds the stranded waiter."""
    model = Model(participants=2, fallback=False, crashes=True, lost_wakes=0)
    assert model.explore()["violation"].startswith("stuck")
    assert model.violations[0][1][-1] == "a crashes holding"


def test_negative_control_an_unconditional_park_loses_a_wake_up():
    """Registering the token without re-checking the lock: a release between 'refused' and
    'parked' wakes nobody."""
    model = Model(participants=2, variant="unconditional_park", fallback=False, crashes=False, lost_wakes=0)
    assert model.explore()["violation"].startswith("stuck")


def test_negative_control_acquiring_without_being_head_overtakes():
    model = Model(participants=3, variant="no_head_check")
    assert "overtook" in model.explore()["violation"]


def test_negative_control_a_fast_path_ignoring_the_holder_admits_two():
    model = Model(participants=2, variant="fast_ignores_owner")
    assert model.explore()["violation"].startswith("two holders")


# ---- the model's writes = DynamoDB's reading of the real expressions -------------------------

NOW = 1_000_000_000_000
NAMES = ("a", "b", "c")


def _to_dynamodb(key: str, item: Item, queue_absent: bool) -> dict:
    out = {"pk": {"S": key}, p.FENCE: {"N": str(item.fence)}}
    if item.owner:
        out[p.OWNER] = {"S": item.owner}
        out[p.EXPIRES_AT] = {"N": str(NOW - 1 if item.expired else NOW + 60_000)}
    if not queue_absent:
        out[f.QUEUE] = {"L": [{"S": o} for o in item.queue]}
        out[f.TOKENS] = {"M": {o: {"S": t} for o, t in item.tokens}}
    return out


def _from_dynamodb(raw: dict) -> Item:
    owner = raw.get(p.OWNER, {}).get("S")
    return Item(
        owner=owner,
        expired=bool(owner) and int(raw[p.EXPIRES_AT]["N"]) < NOW,
        fence=int(raw[p.FENCE]["N"]),
        queue=tuple(v["S"] for v in raw.get(f.QUEUE, {}).get("L", [])),
        tokens=tuple(sorted((k, v["S"]) for k, v in raw.get(f.TOKENS, {}).get("M", {}).items())),
    )


def _items(rng: random.Random, count: int):
    for _ in range(count):
        queue = tuple(rng.sample(NAMES, rng.randint(0, 3)))
        tokens = tuple(sorted((o, rng.choice([CURRENT, OLD])) for o in queue if rng.random() < 0.6))
        owner = rng.choice([None, "a", "b", "x"])
        yield Item(owner=owner, expired=bool(owner) and rng.random() < 0.3, fence=rng.randint(0, 3),
                   queue=queue, tokens=tokens), (not queue and rng.random() < 0.5)


def _values(write, me: str, stale: str, fence: int, index: int) -> dict:
    values = {
        ":me": {"S": me}, ":stale": {"S": stale}, ":now": {"N": str(NOW)}, ":expiresAt": {"N": str(NOW + 60_000)},
        ":grace": {"N": "5000"}, ":one": {"N": "1"}, ":zero": {"N": "0"}, ":mine": {"L": [{"S": me}]},
        ":empty": {"L": []}, ":noTokens": {"M": {}}, ":token": {"S": CURRENT}, ":fence": {"N": str(fence)},
        ":who": {"S": me},
    }
    return {k: values[k] for k in write.value_names()}


def _apply(ddb, key: str, write, me: str, stale: str, fence: int, index: int) -> bool:
    names = {k: v for k, v in write.attribute_names().items() if k != f.WHO}
    if f.WHO in f"{write.update} {write.condition}":
        names[f.WHO] = me
    try:
        ddb.update_item(
            TableName="fair-model", Key={"pk": {"S": key}},
            UpdateExpression=write.update.replace(f.INDEX, f"[{index}]"),
            ConditionExpression=write.condition.replace(f.INDEX, f"[{index}]"),
            ExpressionAttributeNames=names, ExpressionAttributeValues=_values(write, me, stale, fence, index),
        )
        return True
    except ddb.exceptions.ConditionalCheckFailedException:
        return False


MODEL_WRITES = {
    "FAST_ACQUIRE": lambda item, me, stale, fence, index: fast_acquire(item, me, stale),
    "ENQUEUE": lambda item, me, stale, fence, index: enqueue(item, me),
    "PARK": lambda item, me, stale, fence, index: park(item, me, stale),
    "ACQUIRE_HEAD": lambda item, me, stale, fence, index: acquire_head(item, me, stale),
    "RELEASE": lambda item, me, stale, fence, index: release(item, me, fence),
    "REMOVE_AT": lambda item, me, stale, fence, index: remove_at(item, me, index),
}


def _compare(ddb, writes: dict, cases: int = 90) -> dict:
    """Apply each write to many item states; count (condition held, refused, disagreements)."""
    ddb.create_table(TableName="fair-model", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                     AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
    rng = random.Random(9)
    seen = {name: {"held": 0, "refused": 0, "disagree": []} for name in writes}
    for n, (item, queue_absent) in enumerate(_items(rng, cases)):
        for name, write in writes.items():
            me, stale = rng.choice(NAMES), rng.choice(NAMES + ("x",))
            fence, index = rng.choice([item.fence, item.fence + 1]), rng.randint(0, 2)
            if name == "PARK" and queue_absent:
                continue  # a parked waiter has enqueued: the token map exists
            key = f"{name}-{n}"
            ddb.put_item(TableName="fair-model", Item=_to_dynamodb(key, item, queue_absent))
            ok = _apply(ddb, key, write, me, stale, fence, index)
            after = _from_dynamodb(ddb.get_item(TableName="fair-model", Key={"pk": {"S": key}}, ConsistentRead=True)["Item"])
            seen[name]["held" if ok else "refused"] += 1
            if (ok, after) != MODEL_WRITES[name](item, me, stale, fence, index):
                seen[name]["disagree"].append((item, me, stale, fence, index, ok, after))
    return seen


@pytest.mark.parametrize("backend", ["moto", "dynamodb-local"])
def test_the_models_writes_read_the_item_as_dynamodb_reads_the_real_expressions(backend):
    from constructs_lib.local import LocalCloud
    from constructs_lib.local.pytest_plugin import require_backend

    require_backend(backend)
    with LocalCloud(backend) as cloud:
        seen = _compare(cloud.dynamodb, f.WRITES)
    assert {name: s["disagree"][:1] for name, s in seen.items() if s["disagree"]} == {}
    # each write was seen both granted and refused
    assert all(s["held"] and s["refused"] for s in seen.values()), seen


def test_negative_control_the_conformance_check_catches_a_park_that_ignores_the_holder():
    from constructs_lib.local import LocalCloud

    careless = p.LockWrite(update=f.PARK.update, condition=":me <> :stale OR :me = :stale")
    with LocalCloud("moto") as cloud:
        seen = _compare(cloud.dynamodb, {"PARK": careless}, cases=40)
    assert seen["PARK"]["disagree"]
