"""The fair lock's protocol, model-checked: every interleaving of 2-3 participants' steps -
fast acquire, ticket, park, release (take a parked row and grant it, or release alone, or
the full handoff: take the next row, grant, wake), the woken waiter's confirm, claim, revoke,
the park's fallback and the handoff it runs for a dead head - with a crash at every step (a
stop between any two calls, the release's included), a lost response on every write and on
every wake-up (delivered, the releaser sees an error), failed wake-ups and park timeouts. It proves: never two holders,
grants in ticket order (no live queued waiter is passed), and from every reachable state
every live participant can still finish (no lost wake-up outlives the fallback; none at all
without faults). Each property has a protocol variant that breaks it, and the model must
catch it.

The model's reading of each write is checked against DynamoDB itself (both backends), over
many item states, through the real expressions of state_machines/fair_protocol.py.

The suite explores what fits a few seconds; ``FAIR_MODEL_FULL=1`` adds 3 participants with
park timeouts (about 0.5-1 M states: minutes) and a confirm slower than the claim window."""

from __future__ import annotations

import os
import random

import pytest

from fair_coalesce_model import enqueue_bounded, enqueue_newest, jump
from fair_model import Model
from fair_model_writes import (Lock, Row, claim, drop_grant, enqueue, fast_acquire, grant, leave, leave_present,
                               mark, park, release, release_alone, revoke, skip, take_parked)
from locked_workflow.state_machines import fair_protocol as f
from locked_workflow.state_machines import lock_protocol as p


FULL = os.environ.get("FAIR_MODEL_FULL") == "1"
full_only = pytest.mark.skipif(not FULL, reason="minutes: FAIR_MODEL_FULL=1")


def test_two_participants_never_overlap_keep_ticket_order_and_never_get_stuck_under_every_fault():
    model = Model(participants=2, coverage=True)
    result = model.explore()
    assert result["violation"] is None, model.violations
    assert result["states"] > 10_000  # the space was really explored
    # a stop between any two calls: a crash was explored at every step a participant takes
    assert model.visited - {"done", "dead"} <= model.crashed_at, model.visited - model.crashed_at
    assert {"wake", "early_wake", "window_wake", "confirm", "last_look", "revoke"} <= model.crashed_at
    # a lost response on every wake-up (delivered) and on the writes the F1 fix rests on
    assert {"X wakes X: response lost", "X wakes X's new park early: response lost",
            "X wakes X's new park: response lost", "X confirm response lost", "X revoke X response lost",
            "X grant X response lost", "X release response lost"} <= model.lost_at, model.lost_at


def test_three_participants_with_lost_wake_up_responses_never_overlap_keep_ticket_order_and_never_get_stuck():
    """A wake-up delivered whose response is lost, with a third participant to take a revoked
    grant (no park timeouts here: they multiply the space - see the FULL tests)."""
    model = Model(participants=3, fallback=False, crashes=False, lost_responses=False)
    result = model.explore()
    assert result["violation"] is None, model.violations
    assert result["states"] > 10_000


@full_only
def test_three_participants_never_overlap_keep_ticket_order_and_never_get_stuck():
    """(Three participants with crashes and lost write responses too: millions of states, run
    by hand - see docs/protocol.md.)"""
    model = Model(participants=3, crashes=False, lost_responses=False)
    result = model.explore()
    assert result["violation"] is None, model.violations
    assert result["states"] > 100_000


@full_only
def test_a_confirm_slower_than_the_claim_window_still_admits_one_holder():
    """No timing assumption for the confirm: the releaser's revoke may come first. Then the
    confirm is refused and its waiter queues again (order is not kept), but never works."""
    model = Model(participants=3, fallback=False, crashes=False, lost_responses=False, slow_confirm=True, fifo=False,
                  check_liveness=False)  # (with park timeouts: over 3 M states)
    result = model.explore()
    assert result["violation"] is None, model.violations
    assert result["states"] > 50_000


def test_negative_control_working_before_the_confirm_admits_two_after_a_lost_wake_up_response():
    """F1's protocol (the woken waiter works at once, unconfirmed): its releaser, seeing an
    error, revokes the grant after the claim window, and the next one enters beside it. The
    same protocol without lost wake-up responses passes: that fault is what it misses."""
    model = Model(participants=3, variant="work_before_confirm", fallback=False, crashes=False, lost_responses=False)
    assert model.explore()["violation"].startswith("two holders"), model.violations
    assert model.violations[0][1].count("a wakes b: response lost") == 1
    calm = Model(participants=3, variant="work_before_confirm", fallback=False, crashes=False, lost_responses=False,
                 lost_wakes=False)
    assert calm.explore()["violation"] is None


def test_negative_control_a_revoke_right_after_a_failed_wake_up_of_a_new_park_overtakes():
    """Without the last look, the revoke races the confirm of a waiter just woken (its wake-up's
    response lost) or just looking (its new park timed out): a refused confirm queues it again,
    behind a later ticket."""
    model = Model(participants=3, variant="revoke_at_once", crashes=False, lost_responses=False)
    assert "overtook" in model.explore()["violation"], model.violations


def test_a_redriven_release_ends_lost_exactly_when_its_acquisition_could_have_been_taken_over():
    """A holder stopped in its release and redriven (``redrive``): never released once taken
    over, ``Lock.Lost`` only when it was taken over or its grace was over - with the other
    properties (no overlap, ticket order, liveness). Lost responses too: ``FAIR_MODEL_FULL``."""
    model = Model(participants=2, redrive=True, lost_responses=False)
    result = model.explore()
    assert result["violation"] is None, model.violations
    assert result["states"] > 10_000


@full_only
def test_a_redriven_release_with_lost_responses_ends_lost_exactly_when_it_could_have_been_taken_over():
    model = Model(participants=2, redrive=True)  # (about 207,000 states: 45-60 s)
    result = model.explore()
    assert result["violation"] is None, model.violations


def test_negative_control_a_refused_grant_that_ends_the_release_released_hides_a_takeover():
    """The protocol before issue 25's fix: a redriven release takes the row of the waiter that
    has just taken the lock over as the head (its row not yet dropped), grants it, is refused,
    and ends released."""
    model = Model(participants=2, redrive=True, lost_responses=False, variant="taken_over_ends_released")
    result = model.explore()
    assert result["violation"] == "a ended released though its acquisition was taken over", model.violations
    trace = model.violations[0][1]
    assert "a is redriven at take_parked" in trace and "b acquire as head ok" in trace, trace
    assert trace[-4:] == ["a grant b refused", "a rechecks: not mine to hand", "a nudges b", "a ends its handoff"], trace


def test_without_faults_no_wake_up_is_ever_lost_even_with_no_fallback():
    result = Model(participants=3, fallback=False, crashes=False, lost_responses=False, lost_wakes=False).explore()
    assert result["violation"] is None


def test_a_crashed_holder_strands_parked_waiters_without_the_fallback():
    """Why the park needs its timeout: the model finds the stranded waiter."""
    model = Model(participants=2, fallback=False, crashes=True, lost_responses=False, lost_wakes=False)
    assert model.explore()["violation"].startswith("stuck")


@pytest.mark.parametrize("variant", ["park_ignores_ready", "no_mark", "enqueue_unconditional",
                                     "release_alone_ignores_queue"])
def test_negative_control_each_rendezvous_rule_is_needed_or_a_wake_up_is_lost(variant):
    """A park that ignores the ready mark, a release that leaves no mark for a ticket whose
    waiter has not parked, a ticket taken while the lock is free with nobody queued, a
    one-write release while a ticket is out: each strands a waiter that nobody wakes."""
    model = Model(participants=2, variant=variant, fallback=False, crashes=False, lost_responses=False, lost_wakes=False)
    assert model.explore()["violation"].startswith("stuck")


def test_the_janitor_hands_on_a_grant_its_look_claims_for_a_waiter_granted_after_its_crash():
    """The janitor's look (``leave_queue``) may land between a release's grant to a crashed
    waiter and its revoke: it takes the unconfirmed grant back (DROP_GRANT: the revoke is then
    refused) and hands the lock on, so no key is left held by a crashed waiter once everyone is
    done - under every fault, the janitor's own crash between any two of its writes included
    (its invocation retried, as Lambda retries an asynchronous one: the retry finds the lock
    free at the waiter's ticket and hands it on again, or finds it handed on already). (The
    name is the claiming janitor's, kept: docs cite it.)"""
    model = Model(participants=2, janitor_look=True, janitor_crashes=1, coverage=True)
    result = model.explore()
    assert result["violation"] is None, model.violations
    assert result["states"] > 60_000  # (62,725 without the janitor's crash)
    # a crash at every step of its hand-on (since issue 25: DROP_GRANT, then the handoff of the
    # free lock - no release): the handoff's take and what it does with the row, a failed
    # wake-up's window and revoke, its end (308,693 states; 107,453 when it claimed and released)
    assert model.janitor_visited == model.janitor_crashed_at, model.janitor_visited - model.janitor_crashed_at
    assert {"take", "taken", "wake", "window", "revoke", "after_loop"} <= model.janitor_crashed_at


def test_negative_control_a_janitor_retry_that_trusts_handed_keeps_the_grant_it_claimed():
    """A janitor telling a grant made after its waiter's end by ``handed`` (unconfirmed) rather
    than by its time: its retry after a crash mid hand-on finds the grant its own first try
    confirmed, keeps it, and the key stays held (for the lease). Without the janitor's crash the
    same janitor passes: the crash is what the model must explore."""
    model = Model(participants=2, janitor_look=True, janitor_crashes=1, variant="janitor_retry_trusts_handed")
    assert model.explore()["violation"].startswith("key left held by b"), model.violations
    trace = model.violations[0][1]
    assert any(step.startswith("janitor crashes at") for step in trace), trace
    calm = Model(participants=2, janitor_look=True, variant="janitor_retry_trusts_handed")
    assert calm.explore()["violation"] is None


@full_only
def test_three_participants_the_janitor_crashing_mid_hand_on_still_hands_the_grant_on():
    """With a third participant the janitor's hand-on also grants and wakes a parked waiter
    (about 300 k states: minutes on a loaded machine)."""
    model = Model(participants=3, janitor_look=True, janitor_crashes=1, coverage=True, fallback=False,
                  lost_responses=False, lost_wakes=False, check_liveness=False)
    result = model.explore()
    assert result["violation"] is None, model.violations
    assert {"wake", "mark", "taken"} <= model.janitor_crashed_at == model.janitor_visited


def test_negative_control_a_janitor_dropping_the_grant_it_claims_leaves_the_key_held():
    """The fault matrix's finding (the janitor before the fix): the release grants a crashed
    waiter, its wake-up fails, the janitor claims the grant and drops it, the releaser finds its
    grant confirmed (at its early look, or by a refused revoke) and is done."""
    model = Model(participants=2, janitor_look=True, variant="janitor_drops_claim", lost_responses=False, lost_wakes=False)
    assert model.explore()["violation"].startswith("key left held by b")
    trace = model.violations[0][1]
    done = next(i for i, step in enumerate(trace) if step in ("a revoke b refused", "a finds its grant to b confirmed"))
    assert trace.index("janitor claims b's grant") < done, trace

def test_a_crashed_releasers_janitor_revokes_its_grant_to_a_crashed_waiter_and_hands_on():
    """Issue 25: the release took a parked waiter's row, the waiter crashed, its janitor looked
    (the row gone, the lock still the releaser's: nothing to do), the release granted it and
    crashed before its fallback revoked the grant. The releaser's janitor finishes that
    handoff (``LockClient.finish_handoff``): whichever order the janitors' steps take, no key
    is left held by a crashed waiter once both crashed participants' janitors are done."""
    model = Model(participants=2, janitor_look=True, releaser_janitor=True, max_crashes=2,
                  lost_responses=False, lost_wakes=False)
    result = model.explore()
    assert result["violation"] is None, model.violations
    assert result["states"] > 30_000  # (31,139)


def test_negative_control_without_the_releasers_janitor_a_grant_to_a_crashed_waiter_stays():
    """The same two crashes with only the waiter's janitor (the janitor before the fix): its
    look lands after the release took the row and before the grant, and the key stays held."""
    model = Model(participants=2, janitor_look=True, max_crashes=2, lost_responses=False, lost_wakes=False)
    assert model.explore()["violation"].startswith("key left held by b")
    trace = model.violations[0][1]
    assert trace.index("janitor finds b not granted") < trace.index("a grant b ok"), trace
    assert trace[-1].startswith("a crashes at"), trace


def test_negative_control_a_revoke_that_ignores_the_claim_admits_two():
    model = Model(participants=3, variant="revoke_ignores_claim", crashes=False, lost_responses=False, lost_wakes=False)
    assert model.explore()["violation"].startswith("two holders")


def test_negative_control_a_fast_path_ignoring_the_queue_overtakes():
    model = Model(participants=3, variant="fast_ignores_queue", crashes=False, lost_responses=False, lost_wakes=False)
    assert "overtook" in model.explore()["violation"]


# ---- the model's writes = DynamoDB's reading of the real expressions -------------------------

NOW = 1_000_000_000_000
NAMES = ("a", "b", "c")
MARKS = {"fresh": "1", "old": "2"}


def _lock_to_dynamodb(key: str, lock: Lock) -> dict:
    out = {"pk": {"S": key}, p.FENCE: {"N": str(lock.fence)}}
    if lock.owner:
        out[p.OWNER] = {"S": lock.owner}
        out[p.EXPIRES_AT] = {"N": str(NOW - 1 if lock.expired else NOW + 60_000)}
    for name, value in ((f.SERVED, lock.served), (f.TICKETS, lock.tickets)):
        if value is not None:
            out[name] = {"N": str(value)}
    if lock.handed:
        out[f.HANDED] = {"S": lock.handed}
    if lock.cut:
        out[f.CUT] = {"N": str(lock.cut)}
    return out


def _lock_from_dynamodb(raw: dict) -> Lock:
    owner = raw.get(p.OWNER, {}).get("S")
    number = lambda name: int(raw[name]["N"]) if name in raw else None  # noqa: E731
    return Lock(owner=owner, expired=bool(owner) and int(raw[p.EXPIRES_AT]["N"]) < NOW, fence=int(raw[p.FENCE]["N"]),
                served=number(f.SERVED), tickets=number(f.TICKETS), handed=raw.get(f.HANDED, {}).get("S"),
                cut=number(f.CUT) or 0)


def _row_to_dynamodb(key: str, row: Row) -> dict:
    out = {"pk": {"S": key}}
    if row.owner:
        out[p.OWNER] = {"S": row.owner}
    if row.token:
        out[f.TOKEN] = {"S": ":".join(row.token)}
    if row.ready:
        out[f.READY] = {"N": MARKS[row.ready]}
    if row.left:
        out[f.LEFT] = {"N": "1"}
    return out


def _row_from_dynamodb(raw: dict) -> Row:
    token = raw.get(f.TOKEN, {}).get("S")
    ready = raw.get(f.READY, {}).get("N")
    return Row(owner=raw.get(p.OWNER, {}).get("S"), token=tuple(token.split(":")) if token else None,
               ready={v: k for k, v in MARKS.items()}[ready] if ready else None, left=f.LEFT in raw)


def _locks(rng: random.Random):
    while True:
        tickets = rng.choice([None, 0, 1, 2])
        served = None if tickets is None else rng.randint(0, tickets)
        owner = rng.choice([None, "a", "b", "x"])
        yield Lock(owner=owner, expired=bool(owner) and rng.random() < 0.3, fence=rng.randint(0, 3), served=served,
                   tickets=tickets, handed=rng.choice([None, "a", "b"]) if owner else None,
                   cut=rng.choice([0, 0, 1, 2]) if tickets else 0)


def _rows(rng: random.Random):
    while True:
        if rng.random() < 0.2:
            yield None
            continue
        owner = rng.choice([None, "a", "b"])
        yield Row(owner=owner, token=(owner, rng.choice(["current", "old"])) if owner and rng.random() < 0.6 else None,
                  ready=rng.choice([None, "fresh", "old"]), left=bool(owner) and rng.random() < 0.2)


#: name -> (write, on a row?, the model's reading: (item, args) -> (held, item after))
MODEL_WRITES = {
    "FAST_ACQUIRE": (False, lambda it, a: fast_acquire(it, a["me"], a["stale"])),
    "ENQUEUE": (False, lambda it, a: enqueue(it, a["me"], a["stale"])),
    "GRANT": (False, lambda it, a: grant(it, a["me"], a["stale"], a["next"], a["prev"])),
    "SKIP": (False, lambda it, a: skip(it, a["me"], a["stale"], a["prev"])),
    "CLAIM": (False, lambda it, a: claim(it, a["me"], a["prev"] + 1)),
    "REVOKE": (False, lambda it, a: revoke(it, a["next"], a["fence"], a["me"])),
    "DROP_GRANT": (False, lambda it, a: drop_grant(it, a["me"], a["prev"] + 1)),
    "RELEASE": (False, lambda it, a: release(it, a["me"], a["fence"])),
    "RELEASE_ALONE": (False, lambda it, a: release_alone(it, a["me"], a["fence"])),
    "TAKE_PARKED": (True, lambda it, a: take_parked(it)),
    "PARK": (True, lambda it, a: park(it, a["me"], (a["me"], "current"))),
    "MARK": (True, lambda it, a: mark(it, a["since"])),
    "LEAVE": (True, lambda it, a: leave(it, a["me"])),
    "LEAVE_PRESENT": (True, lambda it, a: leave_present(it, a["me"])),
    # coalescing (tests/protocol/fair_coalesce_model.py): keep_newest(1), keep_oldest's bounded ticket, JUMP
    "ENQUEUE_NEWEST": (False, lambda it, a: enqueue_newest(it, a["me"], a["stale"])[:2]),
    "ENQUEUE_BOUNDED": (False, lambda it, a: enqueue_bounded(it, a["me"], a["stale"], a["served"], a["bound"])),
    "JUMP": (False, lambda it, a: jump(it, a["me"], a["stale"], a["prev"])),
}


def _values(write, a: dict) -> dict:
    values = {
        ":me": {"S": a["me"]}, ":stale": {"S": a["stale"]}, ":now": {"N": str(NOW)},
        ":expiresAt": {"N": str(NOW + 60_000)}, ":grace": {"N": "5000"}, ":one": {"N": "1"}, ":zero": {"N": "0"},
        ":next": {"S": a["next"]}, ":prev": {"N": str(a["prev"])}, ":ticket": {"N": str(a["prev"] + 1)},
        ":fence": {"N": str(a["fence"])}, ":token": {"S": f"{a['me']}:current"}, ":lease": {"N": "60000"},
        ":since": {"N": MARKS[a["since"]]}, ":kept": {"N": "0"}, ":served": {"N": str(a["served"])},
        ":bound": {"N": str(a["bound"])}, **f.TAKE_PARKED_VALUES,
    }
    return {k: values[k] for k in write.value_names()}


def _compare(ddb, writes: dict, cases: int = 80) -> dict:
    """Apply each write to many item states; count (condition held, refused, disagreements)."""
    ddb.create_table(TableName="fair-model", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                     AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
    rng = random.Random(9)
    locks, rows = _locks(rng), _rows(rng)
    seen = {name: {"held": 0, "refused": 0, "disagree": []} for name in writes}
    for n in range(cases):
        for name, write in writes.items():
            on_row, model = MODEL_WRITES[name]
            item = next(rows) if on_row else next(locks)
            a = {"me": rng.choice(NAMES), "stale": rng.choice(NAMES + ("x",)), "next": rng.choice(NAMES),
                 "prev": rng.randint(0, 2), "since": rng.choice(["fresh", "old"]), "served": rng.randint(0, 2),
                 "bound": rng.randint(1, 3)}
            a["fence"] = rng.choice([item.fence, item.fence + 1]) if not on_row else 0
            if name == "REVOKE" and not on_row and rng.random() < 0.5:  # often the grant itself
                a["next"], a["me"] = item.owner or "a", item.handed or "a"
            if name in ("CLAIM", "DROP_GRANT") and item.served and rng.random() < 0.5:  # often a grant to me
                a["me"], a["prev"] = item.owner or "a", item.served - 1
            key = f"{name}-{n}"
            if item is not None:
                ddb.put_item(TableName="fair-model", Item=(_row_to_dynamodb if on_row else _lock_to_dynamodb)(key, item))
            try:
                if write.update:
                    ddb.update_item(TableName="fair-model", Key={"pk": {"S": key}}, **{
                        k: v for k, v in f.arguments(key, write, _values(write, a)).items() if k not in ("Key", "ReturnValues")})
                else:  # a conditional delete (TAKE_PARKED)
                    ddb.delete_item(TableName="fair-model", **f.delete_arguments(key, write, _values(write, a)))
                ok = True
            except ddb.exceptions.ConditionalCheckFailedException:
                ok = False
            raw = ddb.get_item(TableName="fair-model", Key={"pk": {"S": key}}, ConsistentRead=True).get("Item")
            after = (_row_from_dynamodb if on_row else _lock_from_dynamodb)(raw) if raw else None
            seen[name]["held" if ok else "refused"] += 1
            expected_ok, expected = model(item, a)
            if on_row and not expected_ok and item is None:
                expected = None
            if (ok, after) != (expected_ok, expected):
                seen[name]["disagree"].append((item, a, ok, after, expected_ok, expected))
    return seen


@pytest.mark.parametrize("backend", ["moto", "dynamodb-local"])
def test_the_models_writes_read_the_items_as_dynamodb_reads_the_real_expressions(backend):
    from locked_workflow.testing import LocalCloud
    from locked_workflow.testing.pytest_plugin import require_backend

    require_backend(backend)
    writes = {**f.LOCK_WRITES, **f.ROW_WRITES, **f.ROW_DELETES}
    with LocalCloud(backend) as cloud:
        seen = _compare(cloud.dynamodb, writes)
    assert {name: s["disagree"][:1] for name, s in seen.items() if s["disagree"]} == {}
    # each conditional write was seen both granted and refused
    assert all(s["held"] and s["refused"] for name, s in seen.items() if writes[name].condition), seen


def test_negative_control_the_conformance_check_catches_a_park_that_ignores_the_ready_mark():
    from locked_workflow.testing import LocalCloud

    careless = p.LockWrite(update=f.PARK.update, condition=f"attribute_not_exists(#{f.LEFT})")
    with LocalCloud("moto") as cloud:
        seen = _compare(cloud.dynamodb, {"PARK": careless}, cases=40)
    assert seen["PARK"]["disagree"]


def test_the_clients_reading_of_a_revocable_grant_is_the_workflows():
    """``fair_protocol.revocable`` (the fair client's) and ``revocable_expression`` (the
    workflows' ``Confirmed``, JSONata) read every lock item alike: REVOKE's condition, the
    grant's owner, granter and fence - a claimed grant (no ``handed``), a later grant (another
    fence or owner), a missing item are all not revocable."""
    import itertools

    import jsonata

    expression = jsonata.Jsonata(f.revocable_expression("$.item", nxt="$.nxt", me="$.me", fence="$.fence"))
    cases = 0
    for owner, handed, fence in itertools.product(("w", "x", None), ("r", "s", None), (7, 8, None)):
        item = {k: v for k, v in ((p.OWNER, owner and {"S": owner}), (f.HANDED, handed and {"S": handed}),
                                  (p.FENCE, fence and {"N": str(fence)})) if v}
        expected = (owner, handed, fence) == ("w", "r", 7)
        assert f.revocable(item, nxt="w", me="r", fence=7) is expected, item
        assert bool(expression.evaluate({"item": item, "nxt": "w", "me": "r", "fence": 7})) is expected, item
        cases += 1
    assert f.revocable(None, nxt="w", me="r", fence=7) is False
    assert cases == 27
