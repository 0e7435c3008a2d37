"""The shared/exclusive lock model's writes read the items as DynamoDB reads the real expressions
of state_machines/shared_protocol.py (both backends), with a negative control; and the protocol
module's own spelling of its writes and readings. (The model itself: ``test_shared_model.py``.)"""

from __future__ import annotations

import random

import pytest

import fair_model_writes as fw
import shared_model_writes as m
from shared_model_writes import KindRow, Lock
from locked_workflow.state_machines import fair_protocol as f
from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import shared_protocol as sp
from test_fair_model import MARKS, NOW, _row_from_dynamodb, _row_to_dynamodb, _rows


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
    "RELEASE_WRITE": (False, None, lambda it, a: fw.release(it, a["me"], a["fence"])),
    "FENCED_WRITE_CHECK": (False, None, lambda it, a: (it.owner == a["me"] and it.fence == a["fence"], it)),
    "MARK": (True, None, lambda it, a: fw.mark(it, a["since"])),
    "LEAVE": (True, None, lambda it, a: fw.leave(it, a["me"])),
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

