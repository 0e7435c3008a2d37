"""The shared/exclusive lock's protocol, model-checked: every interleaving of the
participants' steps - fast read or write, ticket, transactional park, handoff (read the next
row; grant and wake, going on past readers; skip; release and look again), claims, the last
reader's handoff, reaping an expired reader, the park's fallback and the handoff it runs for
a head that does not move - with crashes, lost responses, failed wake-ups, park timeouts,
the janitor and expiring leases. It proves: a writer is never inside with anyone; readers
share only with readers; grants follow ticket order (no live queued waiter is passed: a
writer queued before a reader goes first); a reader at the head of a key no writer holds is
admitted with nobody leaving (readers behind a writer all at once); no wake-up is lost
(without faults, even with no fallback); from every reachable state every live participant
can finish; readers read the last writer's fence; a writer works only under its exact hold.
Each property has a protocol variant that breaks it, and the model catches it.

The faults: a crash (an execution stopped) at every step - every write is a step of its own,
so this is a stop between any two writes (its negative control: ``free_after_leave``, the first
protocol's two-write leave, whose stop in between left a shared hold with no reader); a lost
response on every write; a wake-up (SendTaskSuccess) delivered whose answer is lost (its
negative control: ``revoke_failed_wake``); failed wake-ups; park timeouts; the janitor's events
lost.

The suite runs 3 participants without faults (and with two crashes, the janitor off), and 2
with every fault; 3 participants with every fault run with ``SHARED_MODEL_FULL=1`` or
``PYTHONPATH=. python tests/protocol/shared_model.py`` (long - see docs/shared-lock.md for the figures).

The model's reading of each write is checked against DynamoDB itself (both backends),
through the real expressions of state_machines/shared_protocol.py."""

from __future__ import annotations

import os
import random

import pytest

import shared_model as m
from shared_model import KindRow, Lock, Model
from locked_workflow.state_machines import fair_protocol as f
from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import shared_protocol as sp
from test_fair_model import MARKS, NOW, _row_from_dynamodb, _row_to_dynamodb, _rows

FULL = os.environ.get("SHARED_MODEL_FULL", "") not in ("", "0")


def explore(**kw) -> tuple[dict, Model]:
    model = Model(**kw)
    return model.explore(), model


# ---- the properties hold ----------------------------------------------------------------


@pytest.mark.parametrize("kinds", ["rw", "ww", "rr"])
def test_two_participants_under_every_fault_exclude_keep_order_and_always_finish(kinds):
    result, model = explore(kinds=kinds, max_crashes=2 if kinds == "rw" else 1)
    assert result["violation"] is None, model.violations
    assert result["states"] > (300 if kinds == "rr" else 3_000)


@pytest.mark.parametrize("kinds", ["rrw", "wwr"])
def test_three_participants_exclude_keep_order_admit_readers_together_and_always_finish(kinds):
    result, model = explore(kinds=kinds, crashes=False, lost_responses=False, batch=True)
    assert result["violation"] is None, model.violations
    assert result["states"] > 15_000


@pytest.mark.parametrize("kinds", ["rrw", "wwr"])
def test_without_faults_no_wake_up_is_ever_lost_even_with_no_fallback(kinds):
    result, model = explore(kinds=kinds, crashes=False, lost_responses=False, fallback=False)
    assert result["violation"] is None, model.violations


@pytest.mark.parametrize("kinds", ["rww", "rrw"])
def test_with_no_janitor_a_dead_reader_and_a_dead_head_cost_the_waiter_behind_them_only_time(kinds):
    """Two crashes, the janitor's events lost: a reader dies holding and the head of the queue
    dies parked; the waiter behind them reaps the reader and hands off past the head."""
    result, model = explore(kinds=kinds, max_crashes=2, janitor=False, lost_responses=False)
    assert result["violation"] is None, model.violations
    assert result["states"] > 35_000


@pytest.mark.skipif(not FULL, reason="minutes: SHARED_MODEL_FULL=1 (or python tests/protocol/shared_model.py)")
@pytest.mark.parametrize("kinds", ["rrw", "wwr"])
def test_three_participants_under_every_fault(kinds):
    model = Model(kinds=kinds, symmetry=True)
    result = m.explore_held_as_bytes(model)
    assert result["violation"] is None, model.violations


def test_the_full_runs_explorer_and_symmetry_find_what_the_suites_does():
    """The full runs hold states as bytes and explore one of each pair of swapped twins."""
    assert m.explore_held_as_bytes(Model(kinds="rw")) == Model(kinds="rw").explore()
    both, twins = Model(kinds="ww").explore(), m.explore_held_as_bytes(Model(kinds="ww", symmetry=True))
    assert twins["violation"] is None and both["states"] / 2 <= twins["states"] < both["states"] * 0.55
    broken = Model(kinds="rrw", variant="park_unchecked", crashes=False, lost_responses=False, fallback=False,
                   symmetry=True)
    assert m.explore_held_as_bytes(broken)["violation"].startswith("stuck") and broken.violations[0][1]
    assert m.explore_held_as_bytes(Model(kinds="rw", variant="write_ignores_readers"))["violation"].startswith("writer")


@pytest.mark.parametrize("kinds", ["rm", "wm"])
def test_a_plain_mutex_is_refused_while_others_hold_and_enters_after_them(kinds):
    """The mutex's own ACQUIRE and RELEASE (lock_protocol), beside a reader or a writer of this
    protocol: a writer."""
    result, model = explore(kinds=kinds, crashes=False)
    assert result["violation"] is None, model.violations


def test_a_plain_mutex_alone_recovers_a_dead_reader_by_its_sweep_of_the_shared_hold():
    """A shared hold has no lease a mutex's ACQUIRE can see; its liveness rounds sweep the hold
    (``kinds.shared_hold.shared_hold_sweep``): a reader entry whose lease is over is reaped (the last
    one's REAP_LAST ends the hold), a hold with no reader is freed (FREE_EMPTY). With every
    fault, a dead reader never keeps a plain mutex out."""
    result, model = explore(kinds="rm")
    assert result["violation"] is None, model.violations  # (without the sweep: stuck, below)


def test_negative_control_a_plain_mutex_without_its_sweep_does_not_recover_a_dead_reader():
    """The mutex before its sweep: a reader that dies holding leaves a key a plain mutex alone
    never gets - the model finds it stuck."""
    result, model = explore(kinds="rm", lost_responses=False, sweep=False)
    assert result["violation"].startswith("stuck")
    assert "r1 crashes at cs" in model.violations[0][1]


def test_negative_control_a_sweep_that_reaps_a_live_readers_entry_is_caught():
    """``sweep_ignores_lease``: the mutex's sweep reaps a reader entry whose lease is not over -
    the reader is still at work, and the mutex walks in beside it."""
    result, model = explore(kinds="rm", crashes=False, lost_responses=False, variant="sweep_ignores_lease")
    assert result["violation"] in ("writer m1 inside with ['r1']", "reader r1 at work without its entry"), model.violations
    assert any("m1 sweeps: reaps r1" in label for label in model.violations[0][1])


def _after_its_leave(name: str, proc) -> bool:
    """A reader whose leave was written, stopped before anything else it would write."""
    return name.startswith("r") and proc.then == "done" and proc.pc in m.LOOP + ("after_leave",)


def test_a_reader_stopped_after_its_leave_never_locks_a_plain_mutex_out():
    """L1: a reader stopped between its leave (LEAVE_READ: its entry gone, ``readers`` 0) and
    FREE_SHARED left ``{owner: shared, readers: 0}``: no entry, no lease, no execution - a plain
    mutex's ACQUIRE was refused forever. The last reader's leave now ends the shared hold in the
    same write (LEAVE_LAST), so a stop after it leaves the key free."""
    result, model = explore(kinds="rm", lost_responses=False, crash_when=_after_its_leave)
    assert result["violation"] is None, model.violations


@pytest.mark.parametrize("kinds", ["rw", "ww"])
def test_negative_control_a_waker_that_takes_back_a_grant_whose_wake_up_answer_was_lost_is_caught(kinds):
    """The fault "a Step Functions call whose answer is lost after it applied": a wake-up
    delivered whose SendTaskSuccess answer is lost looks failed to the waker. The protocol goes
    on as after a success (a grant lapses unconfirmed by itself); a waker that revoked it would
    leave the woken waiter working without its grant - the model catches it, and only with the
    fault on."""
    faults = dict(crashes=False, lost_responses=False, fallback=False)
    result, model = explore(kinds=kinds, variant="revoke_failed_wake", **faults)
    assert result["violation"] in ("reader r1 at work without its entry", "writer w2 at work without its exact hold")
    assert any(label.endswith("response lost") and " wakes " in label for label in model.violations[0][1])
    assert explore(kinds=kinds, variant="revoke_failed_wake", lost_wakes=False, **faults)[0]["violation"] is None
    assert explore(kinds=kinds, **faults)[0]["violation"] is None  # the protocol itself


def test_negative_control_a_last_reader_that_frees_the_shared_hold_in_a_write_of_its_own_is_caught():
    """The first protocol (LEAVE_READ, then FREE_SHARED): the model finds the shared hold with no
    reader it leaves between them - and, stopped there, the plain mutex stuck behind it."""
    result, model = explore(kinds="rm", lost_responses=False, crash_when=_after_its_leave, variant="free_after_leave")
    assert result["violation"] == "a shared hold with no reader", model.violations
    assert "r1 leaves last ok" in model.violations[0][1]


# ---- negative controls: the model catches each broken rule ------------------------------


def test_negative_control_a_reader_admitted_past_a_queued_writer_is_caught():
    result, model = explore(kinds="rrw", variant="read_ignores_queue", crashes=False, lost_responses=False)
    assert result["violation"] == "r2 (read) overtook ['w1 (write)']", model.violations


def test_negative_control_a_writer_admitted_with_a_reader_inside_is_caught():
    result, model = explore(kinds="rw", variant="write_ignores_readers", crashes=False, lost_responses=False)
    assert result["violation"] == "writer w1 inside with ['r1']", model.violations


@pytest.mark.parametrize("variant", ["park_unchecked", "leave_no_handoff", "release_then_stop"])
def test_negative_control_each_rendezvous_rule_is_needed_or_a_wake_up_is_lost(variant):
    """A park that does not check the lock item; a last reader that hands nothing off; a writer
    that releases after reading an empty row and does not read it again: each strands a parked
    waiter that nobody wakes (the fallback off, as a lost wake-up must not need it)."""
    result, _ = explore(kinds="rrw" if variant != "release_then_stop" else "rw", variant=variant,
                        crashes=False, lost_responses=False, fallback=False)
    assert result["violation"].startswith("stuck")


def test_negative_control_a_handoff_that_stops_after_one_reader_makes_the_next_wait():
    result, model = explore(kinds="rrw", variant="no_cascade", crashes=False, lost_responses=False, batch=True)
    assert result["violation"].startswith("a queued reader"), model.violations


# ---- the model's writes = DynamoDB's reading of the real expressions ---------------------

TABLE = "shared-model"
READERS, WRITERS = ("r1", "r2"), ("w1", "w2")
#: acquiredAt and grace of every entry here; :endedAt before it, after it (grace over), late.
ACQUIRED, GRACE = NOW - 5_000, 1_000
ENDED = (NOW - 6_000, NOW - 3_000, NOW - 500)


def _lease(over: bool) -> dict:
    return {"N": str(NOW - 1 if over else NOW + 60_000)}


def _lock_item(key: str, lock: Lock) -> dict:
    item = {"pk": {"S": key}, p.FENCE: {"N": str(lock.fence)}}
    if lock.owner:
        item[p.OWNER] = {"S": lock.owner}
    if lock.owner not in (None, sp.SHARED):
        item[p.EXPIRES_AT] = _lease(lock.expired)
    for name, value in ((f.SERVED, lock.served), (f.TICKETS, lock.tickets), (sp.READERS, lock.readers)):
        if value is not None:
            item[name] = {"N": str(value)}
    for reader, over in lock.entries:
        item[sp.reader_attribute(reader)] = sp.entry_value(
            expires_at=_lease(over)["N"], acquired_at=str(ACQUIRED), grace=str(GRACE))
    return item


def _lock_of(raw: dict) -> Lock:
    owner = raw.get(p.OWNER, {}).get("S")
    number = lambda name: int(raw[name]["N"]) if name in raw else None  # noqa: E731
    lease = number(p.EXPIRES_AT)
    # a shared hold has no lease (a mutex must not take it over): one left there shows
    expired = (lease is not None and lease < NOW) if owner != sp.SHARED else ("stray lease" if lease else False)
    entries = tuple(sorted((r, int(e[p.EXPIRES_AT]["N"]) < NOW) for r, e in sp.readers_of(raw).items()))
    return Lock(owner=owner, expired=expired, fence=number(p.FENCE), served=number(f.SERVED),
                tickets=number(f.TICKETS), readers=number(sp.READERS), entries=entries)


def _row_item(key: str, row: KindRow) -> dict:
    item = _row_to_dynamodb(key, row)
    return {**item, sp.KIND: {"S": row.kind}} if row.kind else item


def _row_of(raw: dict) -> KindRow:
    return KindRow(**vars(_row_from_dynamodb(raw)), kind=raw.get(sp.KIND, {}).get("S"))


def _random_locks(rng: random.Random):
    while True:
        tickets = rng.choice([None, 0, 1, 2])
        owner = rng.choice([None, sp.SHARED, sp.SHARED, "w1", "w2", "x"])
        readers = [r for r in READERS if rng.random() < (0.6 if owner == sp.SHARED else 0.1)]
        entries = tuple((r, rng.random() < 0.4) for r in readers)
        count = len(entries) if rng.random() < 0.9 else rng.choice([None, 0, 1, 2])
        yield Lock(owner=owner, expired=owner not in (None, sp.SHARED) and rng.random() < 0.3, fence=rng.randint(0, 3),
                   served=None if tickets is None else rng.randint(0, tickets), tickets=tickets, readers=count,
                   entries=entries)


def _random_rows(rng: random.Random):
    """test_fair_model's rows, their waiters named as here, with a kind."""
    name = {"a": "r1", "b": "w1", None: None}
    for row in _rows(rng):
        if row is None:
            yield None
            continue
        yield KindRow(owner=name[row.owner], token=row.token and (name[row.token[0]], row.token[1]), ready=row.ready,
                      left=row.left, kind=rng.choice([None, sp.READ, sp.WRITE]) if row.owner else None)


#: name -> (on a row?, whose entry the write names (an argument), the model's reading:
#: (item, args) -> (held, item after))
MODEL_WRITES = {
    "FAST_READ": (False, "me", lambda it, a: m.fast_read(it, a["me"], a["stale"])),
    "FAST_WRITE": (False, None, lambda it, a: m.fast_write(it, a["me"], a["stale"])),
    "ENQUEUE_READ": (False, None, lambda it, a: m.enqueue(it, sp.READ, a["me"], a["stale"])),
    "ENQUEUE_WRITE": (False, None, lambda it, a: m.enqueue(it, sp.WRITE, a["me"], a["stale"])),
    "GRANT_READ": (False, "next", lambda it, a: m.grant_read(it, a["me"], a["stale"], a["next"], a["prev"])),
    "GRANT_WRITE": (False, None, lambda it, a: m.grant_write(it, a["me"], a["stale"], a["next"], a["prev"])),
    "SKIP": (False, None, lambda it, a: m.skip(it, a["me"], a["stale"], a["prev"])),
    "CLAIM_READ": (False, "me", lambda it, a: m.claim_read(it, a["me"])),
    "CLAIM_WRITE": (False, None, lambda it, a: m.claim_write(it, a["me"], a["prev"] + 1)),
    "LEAVE_READ": (False, "me", lambda it, a: m.leave_read(it, a["me"])),
    "LEAVE_LAST": (False, "me", lambda it, a: m.leave_last(it, a["me"])),
    "REAP_READ": (False, "next", lambda it, a: m.reap_read(it, a["next"])),
    "REAP_LAST": (False, "next", lambda it, a: m.reap_last(it, a["next"])),
    "FREE_EMPTY": (False, None, lambda it, a: m.free_empty(it)),
    "RETIRE_READER": (False, "next", lambda it, a: m.retire_reader(
        it, a["next"], a["ended"] >= ACQUIRED, a["ended"] + GRACE < NOW)),
    "RELEASE_WRITE": (False, None, lambda it, a: m.release(it, a["me"], a["fence"])),
    "FENCED_WRITE_CHECK": (False, None, lambda it, a: (it.owner == a["me"] and it.fence == a["fence"], it)),
    "MARK": (True, None, lambda it, a: m.mark_row(it, a["since"])),
    "LEAVE": (True, None, lambda it, a: m.leave_row(it, a["me"])),
    "DEQUEUE": (True, None, lambda it, a: m.dequeue_row(it, a["me"])),
}


def _values(write, a: dict) -> dict:
    entry = sp.entry_value(expires_at=str(NOW + 60_000), acquired_at=str(ACQUIRED), grace=str(GRACE))
    values = {
        ":me": {"S": a["me"]}, ":stale": {"S": a["stale"]}, ":now": {"N": str(NOW)}, ":shared": {"S": sp.SHARED},
        ":expiresAt": {"N": str(NOW + 60_000)}, ":grace": {"N": str(GRACE)}, ":one": {"N": "1"}, ":zero": {"N": "0"},
        ":minusOne": {"N": "-1"}, ":entry": entry, ":next": {"S": a["next"]}, ":prev": {"N": str(a["prev"])},
        ":ticket": {"N": str(a["prev"] + 1)}, ":fence": {"N": str(a["fence"])}, ":endedAt": {"N": str(a["ended"])},
        ":token": {"S": f"{a['me']}:current"}, ":lease": {"N": "60000"}, ":since": {"N": MARKS[a["since"]]},
        ":kind": {"S": a["kind"]}, **sp.MAX_READERS_VALUES,
    }
    return {k: values[k] for k in write.value_names()}


def _arguments(rng) -> dict:
    names = READERS + WRITERS
    return {"me": rng.choice(names), "stale": rng.choice(names + ("x",)), "next": rng.choice(names),
            "prev": rng.randint(0, 2), "since": rng.choice(["fresh", "old"]), "ended": rng.choice(ENDED),
            "kind": rng.choice([sp.READ, sp.WRITE]), "fence": 0}


class Conformance:
    """Each write applied by DynamoDB to many item states, beside the model's reading."""

    def __init__(self, ddb):
        self.ddb, self.seen = ddb, {}
        ddb.create_table(TableName=TABLE, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                         AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                         BillingMode="PAY_PER_REQUEST")

    def put(self, key: str, item: dict | None) -> None:
        if item is not None:
            self.ddb.put_item(TableName=TABLE, Item=item)

    def get(self, key: str) -> dict | None:
        return self.ddb.get_item(TableName=TABLE, Key={"pk": {"S": key}}, ConsistentRead=True).get("Item")

    def note(self, name: str, ok: bool, got, expected) -> None:
        seen = self.seen.setdefault(name, {"held": 0, "refused": 0, "disagree": []})
        seen["held" if ok else "refused"] += 1
        if (ok, got) != expected:
            seen["disagree"].append((got, expected))

    def write(self, name: str, write, item, a: dict) -> None:
        on_row, whose, model = MODEL_WRITES[name]
        key = f"{name}-{sum(s['held'] + s['refused'] for s in self.seen.values())}"
        self.put(key, (_row_item if on_row else _lock_item)(key, item) if item is not None else None)
        args = sp.arguments(key, write, _values(write, a), reader=a.get(whose) if whose else None)
        try:
            if write.update:
                self.ddb.update_item(TableName=TABLE, **{k: v for k, v in args.items() if k != "ReturnValues"})
            else:
                self.ddb.transact_write_items(TransactItems=[{"ConditionCheck": {"TableName": TABLE, **args}}])
            ok = True
        except (self.ddb.exceptions.ConditionalCheckFailedException, self.ddb.exceptions.TransactionCanceledException):
            ok = False
        raw = self.get(key)
        got = (_row_of if on_row else _lock_of)(raw) if raw else None
        held, after = model(item, a)
        self.note(name, ok, got, (held, m.as_kind_row(after) if on_row and after is not None else after))

    def park(self, lock: Lock, row: KindRow | None, a: dict) -> None:
        key = f"PARK-{self.seen.get('PARK', {}).get('held', 0) + self.seen.get('PARK', {}).get('refused', 0)}"
        ticket = a["prev"] + 1
        self.put(key, _lock_item(key, lock))
        self.put(f.row_key(key, ticket), _row_item(f.row_key(key, ticket), row) if row else None)
        check = sp.PARK_UNLESS[a["kind"]]
        try:
            self.ddb.transact_write_items(TransactItems=sp.park_transaction(
                TABLE, key, ticket, a["kind"], _values(sp.PARK, a), _values(check, a)))
            ok = True
        except self.ddb.exceptions.TransactionCanceledException:
            ok = False
        raw_row = self.get(f.row_key(key, ticket))
        got = (_lock_of(self.get(key)), _row_of(raw_row) if raw_row else None)
        row_ok, row_after = m.park(row, a["me"], (a["me"], "current"), a["kind"])
        held = row_ok and m.park_unless(lock, a["kind"], a["me"], a["stale"], ticket)
        self.note("PARK", ok, got, (held, (lock, row_after if held else row)))


def _conformance(ddb, writes: dict, cases: int = 40) -> dict:
    check = Conformance(ddb)
    rng = random.Random(18)
    locks, rows = _random_locks(rng), _random_rows(rng)
    for _ in range(cases):
        for name, write in writes.items():
            a = _arguments(rng)
            if name == "PARK":
                check.park(next(locks), next(rows), a)
                continue
            item = next(rows) if MODEL_WRITES[name][0] else next(locks)
            if item is not None and not MODEL_WRITES[name][0]:  # often the holder, the entry, the turn there
                a["fence"] = rng.choice([item.fence, item.fence + 1])
                if rng.random() < 0.5 and item.entries:
                    a["me"] = a["next"] = rng.choice(item.entries)[0]
                if name.startswith("REAP") and any(over for _, over in item.entries):  # often one to reap
                    a["next"] = next(r for r, over in item.entries if over)
                if rng.random() < 0.5 and item.owner not in (None, sp.SHARED):
                    a["me"] = item.owner
                if rng.random() < 0.5 and item.served is not None:
                    a["prev"] = item.served - (name == "CLAIM_WRITE")
            if name == "DEQUEUE" and item is not None and item.owner and rng.random() < 0.5:
                a["me"] = item.owner  # often the waiter that parked on the row
            check.write(name, write, item, a)
    return check.seen


ALL_WRITES = {**sp.LOCK_WRITES, "FREE_EMPTY": sp.FREE_EMPTY, "FENCED_WRITE_CHECK": sp.FENCED_WRITE_CHECK,
              "MARK": sp.MARK, "LEAVE": sp.LEAVE,
              "DEQUEUE": sp.DEQUEUE,
              "PARK": sp.PARK}


@pytest.mark.parametrize("backend", ["moto", "dynamodb-local"])
def test_the_models_writes_read_the_items_as_dynamodb_reads_the_real_expressions(backend):
    from locked_workflow.testing import LocalCloud
    from locked_workflow.testing.pytest_plugin import require_backend

    require_backend(backend)
    with LocalCloud(backend) as cloud:
        seen = _conformance(cloud.dynamodb, ALL_WRITES)
    assert {name: s["disagree"][:1] for name, s in seen.items() if s["disagree"]} == {}
    # each conditional write was seen both held and refused
    assert all(s["held"] and s["refused"] for s in seen.values()), seen


def test_negative_control_the_conformance_check_catches_a_fast_read_that_ignores_the_queue():
    from locked_workflow.testing import LocalCloud

    careless = p.LockWrite(update=sp.FAST_READ.update, condition=sp.FAST_READ.condition.replace(
        f" AND {f.NOBODY_QUEUES}", ""))
    assert careless.condition != sp.FAST_READ.condition
    with LocalCloud("moto") as cloud:
        seen = _conformance(cloud.dynamodb, {"FAST_READ": careless})
    assert seen["FAST_READ"]["disagree"]


# ---- the protocol module ------------------------------------------------------------------


def test_every_write_names_its_reader_entry_and_takes_exactly_its_values():
    for name, write in {**sp.LOCK_WRITES, **sp.ROW_WRITES, **sp.PARK_UNLESS}.items():
        values = {v: {"S": "x"} for v in write.value_names()}
        args = sp.arguments("k", write, values, reader="arn:aws:states:r:1:execution:sm:e#u")
        names = args["ExpressionAttributeNames"]
        assert set(args["ExpressionAttributeValues"]) == set(write.value_names()), name
        if sp.READER_PLACEHOLDER in names:
            assert names[sp.READER_PLACEHOLDER] == "r:arn:aws:states:r:1:execution:sm:e#u"
    with pytest.raises(AssertionError, match="say whose"):
        sp.arguments("k", sp.FAST_READ, {v: {"S": "x"} for v in sp.FAST_READ.value_names()})


def test_the_shared_hold_is_no_owner_a_mutex_or_a_recovery_can_match():
    assert p.OWNER_SEPARATOR not in sp.SHARED and ":execution:" not in sp.SHARED
    # every write that makes a shared hold removes the writer's lease: ACQUIRE's lease clause is false
    for write in (sp.FAST_READ, sp.GRANT_READ):
        assert f"REMOVE #{p.ACQUIRED_AT}, #{p.EXPIRES_AT}, #{p.GRACE}" in write.update


def test_python_readings_of_a_lock_item():
    item = _lock_item("k", Lock(owner=sp.SHARED, readers=2, entries=(("r1", True), ("r2", False))))
    assert sorted(sp.readers_of(item)) == ["r1", "r2"]
    assert sp.expired_readers(item, now=NOW) == ["r1"]
    assert sp.row_kind(None) == sp.WRITE and sp.row_kind({sp.KIND: {"S": sp.READ}}) == sp.READ


# ---- presence: a hold's row and a probe's retire, on DynamoDB itself ------------------------

OWNER = "arn:aws:states:r:1:execution:sm:e#u"
A, LEASE_END, P_AT = 1_000_000, 9_000_000, 2_000_000  # the acquisition, its lease end, its token's write


class _Presence:
    """A lock item with one hold (a reader entry or a writer) and the hold's presence row."""

    def __init__(self, ddb, table: str):
        self.ddb, self.table = ddb, table

    def put(self, key: str, *, reader: bool, row: dict | None, acquired: int = A) -> None:
        hold = {p.ACQUIRED_AT: {"N": str(acquired)}, p.EXPIRES_AT: {"N": str(LEASE_END)}, p.GRACE: {"N": "9000"}}
        item = ({"pk": {"S": key}, p.OWNER: {"S": sp.SHARED}, sp.READERS: {"N": "1"}, sp.reader_attribute(OWNER): {"M": hold}}
                if reader else {"pk": {"S": key}, p.OWNER: {"S": OWNER}, **hold})
        self.ddb.put_item(TableName=self.table, Item=item)
        self.ddb.delete_item(TableName=self.table, Key={"pk": {"S": sp.presence_row_key(OWNER)}})
        if row is not None:
            self.ddb.put_item(TableName=self.table, Item={"pk": {"S": sp.presence_row_key(OWNER)}, **row})

    def get(self, key: str) -> dict:
        return self.ddb.get_item(TableName=self.table, Key={"pk": {"S": key}}, ConsistentRead=True).get("Item", {})

    def write(self, write: p.LockWrite, values: dict) -> bool:
        args = sp.arguments(sp.presence_row_key(OWNER), write, values)
        try:
            self.ddb.update_item(TableName=self.table, **args)
            return True
        except self.ddb.exceptions.ConditionalCheckFailedException:
            return False

    def gone(self, key: str, *, reader: bool, token: str = "T1", settled_before: int = P_AT + 1, until: int = 5_000_000,
             acquired: int = A, gone_row: p.LockWrite = sp.GONE_ROW) -> bool:
        row_values = {":token": {"S": token}, ":acquiredAt": {"N": str(acquired)},
                      ":settledBefore": {"N": str(settled_before)}}
        lock_values = {":acquiredAt": {"N": str(acquired)}, ":until": {"N": str(until)},
                       **({} if reader else {":owner": {"S": OWNER}})}
        delete = f.delete_arguments(sp.presence_row_key(OWNER), gone_row,
                                    {k: v for k, v in row_values.items() if k in gone_row.value_names()})
        del delete["ReturnValues"]
        items = sp.gone_transaction(self.table, key, sp.presence_row_key(OWNER), reader=OWNER if reader else None,
                                    row_values=row_values, lock_values=lock_values)
        items[0] = {"Delete": {"TableName": self.table, **delete}}  # (the write under test, or a careless one)
        try:
            self.ddb.transact_write_items(TransactItems=items)
            return True
        except self.ddb.exceptions.TransactionCanceledException:
            return False


def _row(token: str = "T1", of: int = A, at: int = P_AT, closed: int | None = None) -> dict:
    return {p.PRESENCE: {"S": token}, p.PRESENCE_OF: {"N": str(of)}, p.PRESENCE_AT: {"N": str(at)},
            **({p.PRESENCE_CLOSED: {"N": str(closed)}} if closed is not None else {})}


def _presence_cases(ddb, gone_row: p.LockWrite = sp.GONE_ROW) -> dict:
    """Each case: what DynamoDB did (True: written). The hold's own writes, then the probe's
    retire in every state a probe can meet, for a reader and a writer."""
    table = "presence"
    ddb.create_table(TableName=table, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                     AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
    t, out = _Presence(ddb, table), {}

    def present(token: str, acquired: int) -> bool:
        return t.write(sp.PRESENT_ROW, {":token": {"S": token}, ":acquiredAt": {"N": str(acquired)}, ":now": {"N": str(P_AT)}})

    def depart(acquired: int) -> bool:
        return t.write(sp.DEPART_ROW, {":acquiredAt": {"N": str(acquired)}})

    # the hold's writes: a registration after the departure is refused, before it is read back
    t.put("k", reader=True, row=None)
    out["present"], out["present again (a retry)"] = present("T1", A), present("T2", A)
    out["depart"], out["present after depart"] = depart(A), present("T3", A)
    out["a later acquisition presents"], out["it departs"] = present("T4", A + 5), depart(A + 5)
    out["an earlier acquisition departs after it"] = depart(A)
    t.put("k", reader=True, row=None)
    out["depart before any presence"], out["present after that"] = depart(A), present("T1", A)
    for reader in (True, False):
        kind = "reader" if reader else "writer"
        for case, row, kw in (
                ("closed token, settled", _row(), {}),
                ("not settled", _row(), {"settled_before": P_AT - 1}),
                ("another token on the row", _row(token="T2"), {}),
                ("departed", _row(closed=A), {}),
                ("no row", None, {}),
                ("a later acquisition holds", _row(), {"acquired": A, "_hold": A + 5}),
                ("would not shorten", _row(), {"until": LEASE_END}),
        ):
            hold = kw.pop("_hold", A)
            t.put(f"{kind}-{case}", reader=reader, row=row, acquired=hold)
            before = t.get(f"{kind}-{case}")
            ok = t.gone(f"{kind}-{case}", reader=reader, gone_row=gone_row, **kw)
            after, row_after = t.get(f"{kind}-{case}"), t.get(sp.presence_row_key(OWNER))
            lease = (after[sp.reader_attribute(OWNER)]["M"] if reader else after)[p.EXPIRES_AT]["N"]
            out[f"{kind}: {case}"] = ok
            # all or nothing: written, the row is gone and the lease ends at :until; else both as they were
            assert (lease, bool(row_after)) == (("5000000", False) if ok else
                                                ((before[sp.reader_attribute(OWNER)]["M"] if reader else before)
                                                 [p.EXPIRES_AT]["N"], row is not None)), case
        t.put(f"{kind}-twice", reader=reader, row=_row())
        out[f"{kind}: a second probe"] = [t.gone(f"{kind}-twice", reader=reader, gone_row=gone_row),
                                          t.gone(f"{kind}-twice", reader=reader, gone_row=gone_row, until=4_000_000)]
    return out


@pytest.mark.parametrize("backend", ["moto", "dynamodb-local"])
def test_the_presence_writes_order_a_hold_and_its_probe_on_dynamodb(backend):
    """A registration after the hold departed is refused (and one before it is what the hold
    reads back); a probe's retire is written only for that acquisition's closed, settled,
    never-departed token while it shortens the lease - row and lock item together or not at all
    - and only once."""
    from locked_workflow.testing import LocalCloud
    from locked_workflow.testing.pytest_plugin import require_backend

    require_backend(backend)
    with LocalCloud(backend) as cloud:
        out = _presence_cases(cloud.dynamodb)
    assert out == {
        "present": True, "present again (a retry)": True, "depart": True, "present after depart": False,
        "a later acquisition presents": True, "it departs": True, "an earlier acquisition departs after it": False,
        "depart before any presence": True, "present after that": False,
        **{f"{kind}: {case}": case == "closed token, settled" for kind in ("reader", "writer") for case in (
            "closed token, settled", "not settled", "another token on the row", "departed", "no row",
            "a later acquisition holds", "would not shorten")},
        "reader: a second probe": [True, False], "writer: a second probe": [True, False],
    }


def test_negative_control_a_probe_that_ignores_the_settle_time_retires_a_fresh_token():
    """Without its settle clause the retire takes a token just written - maybe a registration
    attempt that failed and is being retried, its hold alive: the check above would catch it."""
    from locked_workflow.testing import LocalCloud

    careless = p.LockWrite(update="", condition=sp.GONE_ROW.condition.replace(
        f" AND #{p.PRESENCE_AT} <= :settledBefore", ""))
    assert careless.condition != sp.GONE_ROW.condition
    with LocalCloud("moto") as cloud:
        out = _presence_cases(cloud.dynamodb, gone_row=careless)
    assert out["reader: not settled"] and out["writer: not settled"]


def test_a_probe_retires_only_a_cancelled_or_failed_hold_and_always_can_retire_a_cancelled_one():
    """Every interleaving of a hold's presence and work branches (registration attempts applied or
    not, responses lost, a failed work, the user's Parallel cancelling it at any step) with a
    waiter's probe rounds: a retire is written only for a hold whose work is not running and that
    never departed - cancelled, or failed - and a cancelled hold with its token on the row is
    always retired on some path."""
    out = m.explore_presence()
    assert out["retires"] <= {"cancelled", "failed"} and "cancelled" in out["retires"], out["retires"]
    assert out["stuck"] == [] and out["states"] > 50, out


@pytest.mark.parametrize("variant", ["settle_unchecked", "token_unchecked", "departure_unchecked"])
def test_negative_control_each_check_of_the_probes_retire_is_needed(variant):
    """Drop one check of the retire's transaction and a retire hits a hold at work: without the
    settle clause, a failed registration attempt's closed token while its retry goes on; without
    the token's equality, the same token read before the retry replaced it; without the departure
    mark, a hold whose registrations all failed and that departed (its work goes on without a
    token) - the probe had read the failed attempt's token before the departure."""
    out = m.explore_presence(variant)
    assert "work" in out["retires"], out["retires"]


def test_the_probe_reads_only_an_executions_hold_and_only_its_acquisitions_live_token():
    """The liveness check's suspect is the writer holder or one reader entry of an execution -
    never a ``LockClient`` (no presence, no execution) - with the acquisition it probes; the
    token it probes is that acquisition's, not departed (evaluated as the local runtime does)."""
    from locked_workflow.constructs_lib.kinds.shared_hold import presence_token as _presence_token, suspect as _suspect
    from locked_workflow.testing.patches.jsonata_evaluator import evaluate

    far = str(2 ** 52)
    execution, client = "arn:aws:states:r:1:execution:sm:e#u1", "client:host-1#u2"

    def entry(acquired: str) -> dict:
        return {"M": {p.EXPIRES_AT: {"N": far}, p.ACQUIRED_AT: {"N": acquired}, p.GRACE: {"N": "9000"}}}

    def suspect(item: dict, me: str = "arn:aws:states:r:1:execution:sm:me#u0", rounds: int = 0):
        owner = f"($exists($i.`{p.OWNER}`.S) ? $i.`{p.OWNER}`.S : '')"
        return evaluate(_suspect("$i", owner, "$me", "w"), {"i": item, "me": me, "w": {"rounds": rounds}})

    writer = {p.OWNER: {"S": execution}, p.EXPIRES_AT: {"N": far}, p.ACQUIRED_AT: {"N": "7"}, p.GRACE: {"N": "9000"}}
    assert suspect(writer) == {"owner": execution, "reader": False, "expiresAt": 2 ** 52, "grace": 9000,
                               "acquiredAt": 7}
    assert suspect({**writer, p.OWNER: {"S": client}}) is None  # a client writer: never probed
    shared = {p.OWNER: {"S": sp.SHARED}, sp.READERS: {"N": "2"}, sp.reader_attribute(client): entry("5"),
              sp.reader_attribute(execution): entry("6")}
    assert [suspect(shared, rounds=n)["owner"] for n in range(3)] == [execution] * 3  # the client never
    assert suspect(shared)["acquiredAt"] == 6 and suspect(shared)["reader"] is True

    def token(row) -> object:
        return evaluate(_presence_token("$r", "6"), {"r": row} if row is not None else {})

    row = {p.PRESENCE: {"S": "T"}, p.PRESENCE_OF: {"N": "6"}, p.PRESENCE_AT: {"N": "1"}}
    assert token(row) == "T"
    assert token({**row, p.PRESENCE_CLOSED: {"N": "5"}}) == "T"  # an earlier acquisition departed
    assert token({**row, p.PRESENCE_CLOSED: {"N": "6"}}) is None  # this one departed
    assert token({**row, p.PRESENCE_OF: {"N": "5"}}) is None  # another acquisition's token
    assert token({**row, p.PRESENCE: {"S": p.NO_PRESENCE}}) is None and token(None) is None
