"""Presence on DynamoDB itself (both backends): a hold's row and a probe's retire are ordered as
the shared/exclusive lock's protocol says (state_machines/shared_protocol.py), each check of the
retire needed (its negative controls). (The model: ``test_shared_model.py``.)"""

from __future__ import annotations

import pytest

import shared_model_presence as m
from locked_workflow.state_machines import fair_protocol as f
from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import shared_protocol as sp


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

