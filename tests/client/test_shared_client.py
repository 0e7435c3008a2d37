"""``LockClient(read_write=True)``: Python readers and writers of the read/write lock, the client
alone (moto's DynamoDB, threads on real time; every wait is on a condition, with a generous
deadline): readers together, a writer alone, arrival order, a reader that gives up, a dead
reader reaped, a reader's heartbeat, lost responses, bad arguments, waiters that give up on a
drained key; the invariants over a concurrent mix, with a negative control that overlaps.
(Clients and workflows on one key: ``tests/lock/test_shared_client_workflows.py``.)
"""

from __future__ import annotations

import json
import random
import threading
import time

import boto3
import pytest
from moto import mock_aws

from locked_workflow.constructs_lib.lock_client import (
    LockClient,
    LockHeld,
    LockHeldInThisThread,
    LockLost,
    LockTimeout,
)
from locked_workflow.state_machines import fair_protocol as fp
from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import shared_protocol as sp
from deployed import run_in_thread


TABLE = "locks"

@pytest.fixture
def ddb(offline_aws_env):
    """moto's DynamoDB in this process (the workflow tests below have a deployment of their own:
    they must not see this fixture's credentials - DynamoDB Local keeps one database per key).
    moto's DynamoDB serialised as the offline runtime does: bare moto lets two conditional writes
    both win."""
    from contextlib import ExitStack

    from locked_workflow.testing.patches import serial_dynamodb

    with mock_aws(), ExitStack() as patched:
        serial_dynamodb.apply(patched)
        client = boto3.client("dynamodb")
        client.create_table(TableName=TABLE, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                            BillingMode="PAY_PER_REQUEST")
        yield client


def rw(ddb, **kwargs) -> LockClient:
    return LockClient(TABLE, dynamodb=ddb, read_write=True, stepfunctions=_NoStepFunctions(), **kwargs)


class _NoStepFunctions:
    """Only clients queue in these tests: a wake-up would be a defect."""

    def send_task_success(self, **_):
        raise AssertionError("a client-only queue sent a wake-up")


def item(ddb, key: str = "k") -> dict:
    return ddb.get_item(TableName=TABLE, Key={"pk": {"S": p.namespaced("", key)}}, ConsistentRead=True).get("Item", {})


def until(predicate, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for a condition"
        time.sleep(0.02)


def queued(ddb, key: str = "k") -> int:
    served, tickets = fp.counters(item(ddb, key))
    return tickets - served


def free(ddb, key: str = "k") -> bool:
    it = item(ddb, key)
    served, tickets = fp.counters(it)
    return p.OWNER not in it and not sp.readers_of(it) and served == tickets


class Inside:
    """Who is inside, counted at every entry (the probe): a writer with anyone, or a reader
    with a writer, is a violation."""

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.readers = self.writers = 0
        self.violations = 0
        self.readers_seen = 0
        self.log: list[tuple[str, str]] = []

    def enter(self, who: str, shared: bool) -> None:
        with self.mutex:
            if shared:
                self.readers += 1
            else:
                self.writers += 1
            if self.writers > 1 or (self.writers and self.readers):
                self.violations += 1
            self.readers_seen = max(self.readers_seen, self.readers)
            self.log.append(("in", who))

    def leave(self, who: str, shared: bool) -> None:
        with self.mutex:
            if shared:
                self.readers -= 1
            else:
                self.writers -= 1
            self.log.append(("out", who))


# ---- alone ----------------------------------------------------------------------------------


def test_readers_hold_together_and_a_writer_waits_for_all_of_them(ddb):
    writer_lease = rw(ddb).acquire("k")
    rw(ddb).release(writer_lease)  # fence 1: the version readers will read
    readers = [rw(ddb).acquire("k", shared=True) for _ in range(3)]  # wait 0: each enters at once
    assert [r.fence for r in readers] == [1, 1, 1] and all(r.shared for r in readers)
    it = item(ddb)
    assert it[p.OWNER]["S"] == sp.SHARED and int(it[sp.READERS]["N"]) == 3
    with pytest.raises(LockHeld, match="3 reader"):
        rw(ddb).acquire("k")
    thread, out = run_in_thread(lambda: rw(ddb).acquire("k", wait=60, poll_interval=0.05))
    until(lambda: queued(ddb) == 1)
    for r in readers[:2]:
        rw(ddb).release(r)
    time.sleep(0.3)
    assert "value" not in out  # one reader still inside
    rw(ddb).release(readers[2])
    thread.join(60)
    writer = out["value"]
    assert writer.fence == 2 and not writer.shared
    assert item(ddb)[p.OWNER]["S"] == writer.owner
    with pytest.raises(LockHeld):
        rw(ddb).acquire("k", shared=True)
    rw(ddb).release(writer)
    assert free(ddb)


def test_a_writer_queued_before_a_reader_goes_first_and_releases_every_reader_behind_it(ddb):
    first = rw(ddb).acquire("k", shared=True)
    inside = Inside()

    def participant(name: str, shared: bool):
        client = rw(ddb)
        with client.hold("k", shared=shared, wait=60, poll_interval=0.05) as lease:
            inside.enter(name, shared)
            if shared:  # a reader stays until the three are in together (or 20 s: then they were not)
                deadline = time.monotonic() + 20
                while inside.readers_seen < 3 and time.monotonic() < deadline:
                    time.sleep(0.02)
            else:
                time.sleep(0.2)
            inside.leave(name, shared)
        return lease

    w, w_out = run_in_thread(lambda: participant("w", False))
    until(lambda: queued(ddb) == 1)
    readers = []
    for i in range(3):  # arrive after the writer: they queue behind it (no fast read past it)
        readers.append(run_in_thread(lambda i=i: participant(f"r{i}", True)))
        until(lambda i=i: queued(ddb) == 2 + i)
    rw(ddb).release(first)
    for thread, _ in [(w, w_out), *readers]:
        thread.join(60)
    assert inside.violations == 0
    entries = [who for what, who in inside.log if what == "in"]
    assert entries[0] == "w"  # the writer first
    assert inside.readers_seen == 3  # the readers behind it, together
    assert [out["value"].fence for _, out in readers] == [w_out["value"].fence] * 3  # they read its version
    assert free(ddb)


def test_a_reader_that_gives_up_is_skipped_and_a_dead_readers_entry_is_reaped(ddb):
    writer = rw(ddb).acquire("k")
    with pytest.raises(LockTimeout):
        rw(ddb).acquire("k", shared=True, wait=0.5, poll_interval=0.05)
    served, tickets = fp.counters(item(ddb))
    row = ddb.get_item(TableName=TABLE, Key={"pk": {"S": fp.row_key("#k", tickets)}}, ConsistentRead=True)["Item"]
    assert fp.LEFT in row  # its place is marked left
    rw(ddb).release(writer)  # the handoff skips it
    assert free(ddb)
    # a reader that dies holding: its entry's lease ends, and a writer reaps it
    rw(ddb).acquire("k", shared=True, lease=1)
    lease = rw(ddb).acquire("k", wait=60, poll_interval=0.1)
    assert lease.fence == 2 and sp.readers_of(item(ddb)) == {}
    rw(ddb).release(lease)
    assert free(ddb)


def test_a_plain_mutex_client_reaps_a_dead_readers_entry_and_frees_an_empty_shared_hold(ddb):
    """A plain ``LockClient`` (no ``read_write``) is a writer on a read/write key, and its acquire
    never takes a shared hold over: a reader that died holding kept it out until its ``wait`` ran
    out (``LockTimeout``), whatever the entry's lease. Now a refusal by a shared hold reaps an
    entry whose lease is over (``REAP_LAST``) and frees a shared hold with no reader
    (``FREE_EMPTY``: the first protocol's item). The control: a live reader is not reaped."""
    plain = LockClient(TABLE, dynamodb=ddb, stepfunctions=_NoStepFunctions())
    rw(ddb).acquire("k", shared=True, lease=1)  # dies holding: its entry's lease ends in 1 s
    lease = plain.acquire("k", wait=20, poll_interval=0.1)
    assert lease.fence == 1 and sp.readers_of(item(ddb)) == {}
    plain.release(lease)
    # the first protocol's two-write leave, stopped between them: a shared hold with no reader
    ddb.put_item(TableName=TABLE, Item={"pk": {"S": "#e"}, p.OWNER: {"S": sp.SHARED}, sp.READERS: {"N": "0"},
                                        p.FENCE: {"N": "3"}})
    lease = plain.acquire("e", wait=20, poll_interval=0.1)
    assert lease.fence == 4
    plain.release(lease)
    # a live reader: refused until it leaves, its entry untouched
    reader = rw(ddb).acquire("k", shared=True, lease=60)
    with pytest.raises(LockTimeout):
        plain.acquire("k", wait=1.5, poll_interval=0.1)
    assert list(sp.readers_of(item(ddb))) == [reader.owner]
    rw(ddb).release(reader)
    assert plain.acquire("k", wait=5, poll_interval=0.1).fence == 2


def test_a_readers_heartbeat_keeps_its_entry_and_a_reaped_reader_learns_it_lost(ddb):
    client = rw(ddb)
    with client.hold("k", shared=True, lease=3, heartbeat=True) as lease:
        time.sleep(7)  # past two leases: the heartbeat (every 1.5 s) renewed the entry
        assert lease.check() > 0
        with pytest.raises(LockHeld):
            rw(ddb).acquire("k")  # the writer finds no expired entry to reap
    assert free(ddb)
    lease = client.acquire("k", shared=True, lease=0.2)
    time.sleep(0.4)
    rw(ddb).release(rw(ddb).acquire("k", wait=30, poll_interval=0.05))  # reaps it, writes, leaves
    with pytest.raises(LockLost, match="reaped"):
        client.release(lease)
    with pytest.raises(LockLost):
        client.refresh(lease)


def test_a_lost_response_counts_a_readers_entry_and_leave_once(ddb):
    connection = boto3.client("dynamodb")
    lost = {"FAST_READ": 1, "LEAVE_READ": 1}

    def needs_retry(attempts, request_dict, **_):
        body = json.loads(request_dict["body"])
        for name in list(lost):
            if body.get("ConditionExpression") == getattr(sp, name).condition and lost[name] and attempts == 1:
                lost[name] = 0
                return 0  # applied, but the answer is lost: botocore sends it again
        return None

    connection.meta.events.register_first("needs-retry.dynamodb.UpdateItem", needs_retry)
    client = rw(connection)
    other = rw(ddb).acquire("k", shared=True)
    lease = client.acquire("k", shared=True)
    assert lost["FAST_READ"] == 0 and int(item(ddb)[sp.READERS]["N"]) == 2
    client.release(lease)
    assert lost["LEAVE_READ"] == 0 and int(item(ddb)[sp.READERS]["N"]) == 1
    rw(ddb).release(other)
    assert free(ddb)


def test_a_readers_leave_refused_round_after_round_retires_its_entry_at_the_cap(ddb):
    """Issue 25, as the state machine's leave: LEAVE_READ / LEAVE_LAST condition on the reader
    count, so another reader that leaves before each of my LEAVE_READs and enters before each of
    my LEAVE_LASTs refuses every one. After ``shared_protocol.MAX_LEAVE_ROUNDS`` refusals the
    release retires my entry (it ends now: the next participant reaps it) and returns; before,
    it looped 1,000 times and raised ``AssertionError``."""
    connection = boto3.client("dynamodb")
    others, leaves = [rw(ddb).acquire("k", shared=True)], []

    def move_the_count(params, **_):
        condition = params.get("ConditionExpression")
        if condition == sp.LEAVE_READ.condition:  # I see 2 readers: the other one leaves first
            leaves.append("read")
            rw(ddb).release(others.pop())
        elif condition == sp.LEAVE_LAST.condition:  # I see 1: another one enters first
            leaves.append("last")
            others.append(rw(ddb).acquire("k", shared=True))

    connection.meta.events.register("provide-client-params.dynamodb.UpdateItem", move_the_count)
    client = rw(connection)
    lease = client.acquire("k", shared=True)
    client.release(lease)  # returns: no LockLost, no AssertionError
    assert len(leaves) == sp.MAX_LEAVE_ROUNDS and set(leaves) == {"read", "last"}, leaves
    entry = sp.readers_of(item(ddb))[lease.owner]
    assert int(entry[p.EXPIRES_AT]["N"]) <= int(time.time() * 1000) + 1_000  # retired: it ends now
    for other in others:
        rw(ddb).release(other)
    writer = rw(ddb).acquire("k", wait=60, poll_interval=0.1)  # reaps my retired entry: no lease to wait out
    assert sp.readers_of(item(ddb)) == {}
    rw(ddb).release(writer)
    assert free(ddb)


def test_bad_arguments_are_refused_before_any_call(ddb):
    with pytest.raises(ValueError, match="`shared` must be False on a client without `kind=LockClient.READ_WRITE`"):
        LockClient(TABLE, dynamodb=ddb).acquire("k", shared=True)
    with pytest.raises(TypeError, match="`shared` must be True or False, got: 'yes'"):
        rw(ddb).acquire("k", shared="yes")
    with pytest.raises(ValueError, match="`read_write` must be False with `fair`"):
        LockClient(TABLE, dynamodb=ddb, fair=True, read_write=True)
    with pytest.raises(TypeError, match="`read_write` must be True or False"):
        LockClient(TABLE, dynamodb=ddb, read_write=1)
    assert item(ddb) == {}
    client = rw(ddb)
    with client.hold("k", shared=True):
        with pytest.raises(LockHeldInThisThread, match="a reader cannot become the writer"):
            with client.hold("k"):
                pass
        with client.hold("k", shared=True) as again:  # re-entered: the same hold
            assert again.shared
    assert free(ddb)


@pytest.mark.parametrize("locked", [True, False], ids=["locked", "negative-control"])
def test_a_concurrent_mix_keeps_every_invariant(ddb, locked):
    """12 participants (4 writers, 8 readers) in a seeded random order: no writer with anyone,
    no lost update, fences strictly up, readers read the last writer's version - and without
    the lock the same load overlaps."""
    rng = random.Random(18)
    kinds = [False] * 4 + [True] * 8
    rng.shuffle(kinds)
    inside, state = Inside(), {"counter": 0, "fences": [], "stale": 0, "last": 0}

    def participant(i: int, shared: bool):
        client = rw(ddb)
        time.sleep(rng.uniform(0, 0.3))
        if locked:
            lease = client.acquire("k", shared=shared, wait=120, poll_interval=0.05, max_poll_interval=0.3)
        inside.enter(f"p{i}", shared)
        if shared:
            if locked and lease.fence != state["last"]:
                state["stale"] += 1
            time.sleep(0.15)
        else:
            seen = state["counter"]
            time.sleep(0.15)
            state["counter"] = seen + 1  # a lost update if another writer was inside
            if locked:
                state["fences"].append(lease.fence)
                state["last"] = lease.fence
        inside.leave(f"p{i}", shared)
        if locked:
            client.release(lease)

    threads = [run_in_thread(lambda i=i, s=s: participant(i, s)) for i, s in enumerate(kinds)]
    for thread, out in threads:
        thread.join(180)
        assert "error" not in out, out.get("error")
    if not locked:
        assert inside.violations > 0  # the probe does catch overlaps
        return
    assert inside.violations == 0
    assert state["counter"] == 4 and state["fences"] == sorted(set(state["fences"])) and len(state["fences"]) == 4
    assert state["stale"] == 0
    assert inside.readers_seen > 1
    assert free(ddb)


def test_waiters_that_give_up_leave_no_row_behind_on_a_drained_key(ddb):
    """R1: a waiter that gives up marks its row ``left`` and the handoff skips it - and nothing
    deleted it: six impatient readers and writers behind a writer left six rows on a drained key."""
    writer = rw(ddb).acquire("k")
    for shared in (True, False) * 3:
        with pytest.raises(LockTimeout):
            rw(ddb).acquire("k", shared=shared, wait=0.3, poll_interval=0.05)
    rw(ddb).release(writer)  # the handoff skips the six
    assert free(ddb)
    served, tickets = fp.counters(item(ddb))
    assert tickets == 6
    left = [t for t in range(1, tickets + 1) if ddb.get_item(
        TableName=TABLE, Key={"pk": {"S": fp.row_key("#k", t)}}, ConsistentRead=True).get("Item")]
    assert left == []

