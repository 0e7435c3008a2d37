"""``LockClient(read_write=True)``: Python readers and writers of the read/write lock.

First the client alone (moto's DynamoDB, threads on real time; every wait is on a condition,
with a generous deadline): readers together, a writer alone, arrival order, a reader that
gives up, a dead reader reaped, a reader's heartbeat, lost responses, bad arguments; the
invariants over a concurrent mix, with a negative control that overlaps. Then clients and
workflows on one key, on both backends: a client's release wakes parked workflows, and a
client queued behind workflows is admitted in its turn.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
import uuid

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
from deployed import deployed_stack
from shared_stack import SharedStack
from test_shared_lock import ReadWrite

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


def run_in_thread(target) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run():
        try:
            out["value"] = target()
        except BaseException as error:  # noqa: BLE001 - the test inspects it
            out["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


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


# ---- with workflows, on both backends --------------------------------------------------------


mixed = deployed_stack(SharedStack, "Shared", ReadWrite)


def workflow_client(mixed) -> LockClient:
    return LockClient(mixed.table("LocksTable"), namespace="rw", dynamodb=mixed.cloud.dynamodb,
                      stepfunctions=mixed.cloud.stepfunctions, read_write=True)


def test_a_client_writers_release_wakes_the_workflow_readers_queued_behind_it(mixed):
    k = f"k-{uuid.uuid4().hex[:8]}"
    lease = workflow_client(mixed).acquire(k)
    readers = [mixed.start("Reader", {"key": k, "workMs": 300}) for _ in range(3)]
    mixed.until(lambda: mixed.parked(k) == ["read"] * 3)
    workflow_client(mixed).release(lease)
    results = mixed.wait(readers)
    assert [r.status for r in results] == ["SUCCEEDED"] * 3, [r.cause for r in results]
    assert {r.output["probe"]["fence"] for r in results} == {lease.fence}  # the client's version
    assert mixed.probe(k).get("violations", 0) == 0 and mixed.free(k)


def test_a_client_reader_queued_behind_a_workflow_writer_is_admitted_in_its_turn(mixed):
    k = f"k-{uuid.uuid4().hex[:8]}"
    writer = mixed.start("WriterHold", {"key": k, "gate": "w", "workMs": 1})
    mixed.until(lambda: mixed.gate_token(k, "w"))  # the workflow writer is inside
    thread, out = run_in_thread(lambda: workflow_client(mixed).acquire(k, shared=True, wait=120, poll_interval=0.1))
    mixed.until(lambda: fp.counters(mixed.lock(k))[1] - fp.counters(mixed.lock(k))[0] == 1)
    late = mixed.start("Writer", {"key": k, "workMs": 1})  # a writer queued after the client
    mixed.until(lambda: mixed.parked(k) == ["read", "write"])  # the client's row (a polling lease), the writer's
    mixed.open(k, "w")
    thread.join(120)
    lease = out["value"]
    w = mixed.wait([writer])[0]
    assert w.status == "SUCCEEDED" and lease.shared and lease.fence == w.output["probe"]["fence"]
    # the writer's release granted the polling client (no wake-up: it found the grant at its look)
    states = [e["stateEnteredEventDetails"]["name"] for e in w.history if "stateEnteredEventDetails" in e]
    assert "Lock.Release.GrantReadPolling" in states and "Lock.Release.WakeReader" not in states
    assert mixed.lock(k)[p.OWNER]["S"] == sp.SHARED  # the late writer waits for the client reader
    workflow_client(mixed).release(lease)  # the last reader: hands the key to the late writer
    last = mixed.wait([late])[0]
    assert last.status == "SUCCEEDED" and last.output["probe"]["fence"] == lease.fence + 1
    assert mixed.probe(k).get("violations", 0) == 0 and mixed.free(k)


# ---- clocks, on both backends: a client's lease ends for its holder before anyone may take over -----

#: A whole second of epoch ms (DynamoDB's ``Date`` header has whole seconds).
T0 = 1_700_000_000_000


class Dated:
    """A DynamoDB client whose responses carry the fake clock's true time in their ``Date``
    header (AWS's clock, from which a client bounds its own) - the first ``dates`` of them
    (None: all; the others carry none); ``seen`` (optional) is called with each UpdateItem's
    arguments before it is sent."""

    def __init__(self, client, clock, seen=None, dates: int | None = None) -> None:
        self._client, self._clock, self._seen, self._dates = client, clock, seen, dates

    def __getattr__(self, name):
        from email.utils import formatdate

        from botocore.exceptions import ClientError

        method = getattr(self._client, name)

        def date(response) -> None:
            headers = response.setdefault("ResponseMetadata", {}).setdefault("HTTPHeaders", {})
            headers.pop("date", None)
            if self._dates is None or self._dates > 0:
                headers["date"] = formatdate(self._clock.now / 1000, usegmt=True)
                self._dates = None if self._dates is None else self._dates - 1

        def call(*args, **kwargs):
            if name == "update_item" and self._seen is not None:
                self._seen(kwargs)
            try:
                response = method(*args, **kwargs)
            except ClientError as error:
                date(error.response)
                raise
            date(response)
            return response

        return call


def skewed_client(mixed, clock, seconds: float, *, seen=None, dates: int | None = None) -> LockClient:
    """A read/write client on the fake clock whose wall clock is ``seconds`` off true time."""
    return LockClient(mixed.table("LocksTable"), namespace="rw", read_write=True,
                      dynamodb=Dated(mixed.cloud.dynamodb, clock, seen, dates), stepfunctions=mixed.cloud.stepfunctions,
                      clock=clock.skewed(seconds), monotonic=clock.monotonic, sleep=clock.sleep)


def workflow_write(mixed, key: str, write, *, now_ms: int, reader: str | None = None) -> str:
    """What a workflow writer's state writes (``FAST_WRITE``, ``REAP_LAST``...), judged by the
    service clock (``$millis()`` = ``now_ms``). Returns its owner; refused: ``ClientError``."""
    owner = f"arn:aws:states:us-east-1:123456789012:execution:Writer:run-{uuid.uuid4().hex[:6]}#{uuid.uuid4()}"
    values = {":me": {"S": owner}, ":stale": {"S": owner}, ":now": {"N": str(now_ms)},
              ":expiresAt": {"N": str(now_ms + 600_000)}, ":grace": {"N": "5000"}, ":one": {"N": "1"},
              ":zero": {"N": "0"}, ":minusOne": {"N": "-1"}, ":shared": {"S": sp.SHARED}}
    args = sp.arguments(p.namespaced("rw", key), write, {k: values[k] for k in write.value_names()}, reader=reader)
    mixed.cloud.dynamodb.update_item(TableName=mixed.table("LocksTable"), **args)
    return owner


def test_a_fresh_client_60_s_behind_keeps_its_writer_lease_against_workflows(mixed):
    """K1: a fresh client (a Lambda's cold start) 60 s behind, lease 30 s, stamped its first
    lease on its own clock - ``expiresAt`` 30 s in AWS's past - and a workflow writer entered
    2.2 s into its block. It now knows AWS's clock before it stamps: the workflows see the
    lease it asked for, and the lease ends for its holder before they may take over."""
    from botocore.exceptions import ClientError
    from test_lock_client import FakeClock

    k, clock = f"k-{uuid.uuid4().hex[:8]}", FakeClock(T0)
    slow = skewed_client(mixed, clock, -60)
    lease = slow.acquire(k, lease=30)
    for seconds in (2.2, 27.7):
        clock.advance(seconds)
        with pytest.raises(ClientError, match="ConditionalCheckFailed"):
            workflow_write(mixed, k, sp.FAST_WRITE, now_ms=clock.now)
        assert lease.check() > 0
    clock.advance(0.2)
    with pytest.raises(LockLost, match="ran out"):
        lease.check()  # the holder stops first ...
    with pytest.raises(ClientError, match="ConditionalCheckFailed"):
        workflow_write(mixed, k, sp.FAST_WRITE, now_ms=clock.now)  # ... while the workflows still wait
    slow.release(lease)
    assert mixed.free(k)


def test_a_fresh_client_reader_60_s_behind_is_not_reaped_by_a_workflow_writer(mixed):
    """K1, the reader: a workflow writer reaped the entry of a fresh client reader 60 s behind
    (lease 30 s) 7.6 s into its block."""
    from botocore.exceptions import ClientError
    from test_lock_client import FakeClock

    k, clock = f"k-{uuid.uuid4().hex[:8]}", FakeClock(T0)
    slow = skewed_client(mixed, clock, -60)
    lease = slow.acquire(k, shared=True, lease=30)
    for seconds in (7.6, 22.3):
        clock.advance(seconds)
        with pytest.raises(ClientError, match="ConditionalCheckFailed"):
            workflow_write(mixed, k, sp.REAP_LAST, now_ms=clock.now, reader=lease.owner)
        assert lease.check() > 0
    clock.advance(0.2)
    with pytest.raises(LockLost, match="ran out"):
        lease.check()
    with pytest.raises(ClientError, match="ConditionalCheckFailed"):
        workflow_write(mixed, k, sp.REAP_LAST, now_ms=clock.now, reader=lease.owner)
    slow.release(lease)
    assert mixed.free(k)


def test_a_client_writer_whose_clock_runs_fast_reaps_a_readers_entry_only_after_its_lease_ended(mixed):
    """K2: a waiter judged another client's lease by ``expiresAt < :now``, ``:now`` its clock
    held within its bounds on AWS's - up to their upper end, about a second ahead of AWS's. A
    writer 5 s fast reaped a reader's entry while the reader's ``check()`` said 0.999 s were
    left. A client now judges a lease by the lower bound: never before AWS's clock is past it."""
    from test_lock_client import FakeClock

    k, clock = f"k-{uuid.uuid4().hex[:8]}", FakeClock(T0 + 999)
    reader = skewed_client(mixed, clock, 0)
    lease = reader.acquire(k, shared=True, lease=10)  # AWS's clock bounded tightly (a Date at .999)
    reaps = []

    def seen(update: dict) -> None:
        if update.get("ConditionExpression") in (sp.REAP_READ.condition, sp.REAP_LAST.condition):
            try:
                left = lease.check()
            except LockLost:
                left = None
            reaps.append((clock.now, left))

    clock.advance(0.001)  # the writer's one Date at a whole second: its bounds are a second wide
    fast = skewed_client(mixed, clock, 5, seen=seen, dates=1)
    writer = fast.acquire(k, wait=60, poll_interval=0.05, max_poll_interval=0.1)
    assert reaps, "the writer entered without reaping the reader's entry"
    at, left = reaps[0]
    assert left is None, f"reaped while the reader's check() said {left:.3f} s were left"
    assert at > lease.expires_at  # and after the entry's end by AWS's clock
    fast.release(writer)
    with pytest.raises(LockLost, match="reaped"):
        reader.release(lease)
    assert mixed.free(k)


def test_a_fair_client_whose_clock_runs_fast_takes_a_clients_lock_only_after_its_lease_ended(mixed):
    """K2, the fair client: it judged another client's lease by ``expiresAt < :now`` with
    ``:now`` up to the upper end of its bounds on AWS's clock (about a second ahead), so a
    client 5 s fast took a fair lock while its holder's ``check()`` still said time was left.
    It now judges by the lower bound, as the read/write client does."""
    from test_lock_client import FakeClock

    def fair_client(seconds: float, *, dates: int | None) -> LockClient:
        return LockClient(mixed.table("LocksTable"), namespace="rw", fair=True,
                          dynamodb=Dated(mixed.cloud.dynamodb, clock, None, dates),
                          stepfunctions=mixed.cloud.stepfunctions, clock=clock.skewed(seconds),
                          monotonic=clock.monotonic, sleep=clock.sleep)

    k, clock = f"k-{uuid.uuid4().hex[:8]}", FakeClock(T0 + 999)
    lease = fair_client(0, dates=None).acquire(k, lease=10)  # AWS's clock bounded tightly
    clock.advance(0.001)  # the waiter's one Date at a whole second: its bounds are a second wide
    fast = fair_client(5, dates=1)
    taken = fast.acquire(k, wait=60, poll_interval=0.05, max_poll_interval=0.1)
    assert clock.now > lease.expires_at, f"taken {lease.expires_at - clock.now} ms before the lease ended"
    assert taken.fence == lease.fence + 1
    fast.release(taken)


# ---- TransactionConflictException: transient, retried on every client write (both backends) ------


def _conflict(write, key: str, times: int = 1):
    """DynamoDB's answer to an UpdateItem on an item a transaction is touching (a waiter's park
    checks the lock item in one), on ``write`` of ``key`` - before it applies."""
    from locked_workflow.testing.faults import Fault

    return Fault("UpdateItem", "TransactionConflictException", times=times, when=lambda params: (
        params.get("ConditionExpression") == write.condition and key in json.dumps(params.get("Key"))))


@pytest.mark.parametrize("write", ["FAST_READ", "LEAVE_READ", "LEAVE_LAST"])
def test_a_transaction_conflict_on_a_readers_write_is_retried(mixed, write):
    """TC: a reader's FAST_READ raised at once, its LEAVE_READ raised a raw ClientError from
    ``release()`` (a parked writer then waited out the reader's lease), its FREE_SHARED left the
    key shared with no reader (the last reader's LEAVE_LAST ends the hold now). Each is now
    retried as the transient error it is."""
    from locked_workflow.testing.faults import dynamodb_faults

    k = f"k-{uuid.uuid4().hex[:8]}"
    stored = p.namespaced("rw", k)
    with dynamodb_faults(_conflict(getattr(sp, write), stored, times=2)) as log:
        lease = workflow_client(mixed).acquire(k, shared=True, wait=30)
        workflow_client(mixed).release(lease)
    assert log.injected == 2, log.calls  # (twice: the retry is not a single lucky one)
    assert mixed.free(k)
    writer = workflow_client(mixed).acquire(k)  # nothing left behind: a writer enters at once
    workflow_client(mixed).release(writer)


@pytest.mark.parametrize("kind", ["mutex", "fair", "writer"])
def test_a_transaction_conflict_on_a_writers_acquire_and_release_is_retried(mixed, kind):
    """TC for the other clients: the mutex's CLIENT_ACQUIRE / CLIENT_RELEASE, the fair lock's
    FAST_ACQUIRE and RELEASE (its handoff), the read/write writer's FAST_WRITE and RELEASE_WRITE."""
    from locked_workflow.testing.faults import dynamodb_faults

    k = f"k-{uuid.uuid4().hex[:8]}"
    stored = p.namespaced("rw", k)
    client = (workflow_client(mixed) if kind == "writer" else
              LockClient(mixed.table("LocksTable"), namespace="rw", dynamodb=mixed.cloud.dynamodb,
                         stepfunctions=mixed.cloud.stepfunctions, fair=kind == "fair"))
    acquire, release = {"mutex": (p.CLIENT_ACQUIRE, p.CLIENT_RELEASE), "fair": (fp.FAST_ACQUIRE, p.RELEASE),
                        "writer": (sp.FAST_WRITE, sp.RELEASE_WRITE)}[kind]
    with dynamodb_faults(_conflict(acquire, stored), _conflict(release, stored)) as log:
        lease = client.acquire(k, wait=30)
        client.release(lease)
    assert log.injected == 2, log.calls
    assert p.OWNER not in mixed.lock(k)


def test_a_readers_release_whose_handoff_is_throttled_after_its_leave_still_returns(mixed):
    """The last reader's ``LEAVE_LAST`` applied (its hold is over), then the handoff's
    ``GRANT_WRITE`` to the parked workflow writer is throttled past botocore's retries. The
    release is done: it returns, and the writer's own look at its park timeout admits it.
    Before, ``release()`` raised the raw error, the application retried it, and the retry found
    the reader's entry gone: ``LockLost`` (fault matrix: ``client-rw:shared_protocol.GRANT_WRITE``
    x ``throttle``)."""
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = f"k-{uuid.uuid4().hex[:8]}"
    lease = workflow_client(mixed).acquire(k, shared=True)
    writer = mixed.start("Writer", {"key": k, "workMs": 100})
    mixed.until(lambda: mixed.parked(k) == ["write"])
    throttled = Fault("UpdateItem", "ThrottlingException", when=lambda params: (
        params.get("ConditionExpression"), params.get("UpdateExpression")) == (sp.GRANT_WRITE.condition, sp.GRANT_WRITE.update))
    with dynamodb_faults(throttled):
        try:
            workflow_client(mixed).release(lease)
            raised = None
        except Exception as error:  # noqa: BLE001 - what the application would see
            raised = error
    assert throttled.injected == 1
    assert raised is None, f"the release raised {type(raised).__name__}: {raised}"
    result = mixed.wait([writer])[0]
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert mixed.probe(k).get("violations", 0) == 0 and mixed.free(k)


# ---- a reader stopped right after its leave: the key is free for a plain mutex (both backends) ----


def test_a_reader_stopped_right_after_its_leave_leaves_the_key_to_a_plain_mutex(mixed):
    """L1: a reader stopped between LEAVE_READ (its entry gone, ``readers`` 0) and FREE_SHARED
    left ``{owner: shared, readers: 0}``: no entry, no lease, no execution - a plain mutex was
    refused forever (a LockClient's ``LockTimeout``, a workflow's ``Lock.Timeout``). The last
    reader's leave now ends the shared hold in the same write."""
    from botocore.exceptions import ClientError

    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = f"k-{uuid.uuid4().hex[:8]}"
    reader = workflow_client(mixed)
    lease = reader.acquire(k, shared=True)
    entry = sp.reader_attribute(lease.owner)
    # every write that takes the entry away: its answer never comes (the reader stops there)
    stop = Fault("UpdateItem", "InternalServerError", after_call=True, times=2, when=lambda params: (
        entry in json.dumps(params.get("ExpressionAttributeNames")) and params["UpdateExpression"].startswith("REMOVE")))
    with dynamodb_faults(stop), pytest.raises(ClientError, match="InternalServerError"):
        reader.release(lease)
    assert not sp.readers_of(mixed.lock(k))  # its entry is gone: the leave was written
    mutex = LockClient(mixed.table("LocksTable"), namespace="rw", dynamodb=mixed.cloud.dynamodb)
    mutex.release(mutex.acquire(k))  # at once (wait 0)
    run = mixed.wait([mixed.start("Mutex", {"key": k, "workMs": 1})])[0]
    assert run.status == "SUCCEEDED", run.cause
    assert mixed.free(k)


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


def test_a_polling_client_reader_at_the_head_of_a_key_at_the_reader_cap_gives_up_its_place_typed(mixed):
    """A client reader queued while the key had room (a workflow writer ahead of it), at the head
    once the key has no room: it marks its row left and raises ``TooManyReaders`` - never a
    loop of refused grants until ``wait`` runs out, never an entry past the cap."""
    from test_shared_lock import _aws_sized_owner, _fill_readers
    from locked_workflow.constructs_lib.shared_client import TooManyReaders

    k = f"k-{uuid.uuid4().hex[:8]}"
    stored = p.namespaced("rw", k)
    fake = [_aws_sized_owner(i) for i in range(sp.MAX_READERS)]
    _fill_readers(mixed, k, fake[:-1])
    writer = mixed.start("Writer", {"key": k, "workMs": 1})  # ticket 1, held back by the readers
    mixed.until(lambda: mixed.parked(k) == ["write"])
    out: dict = {}

    def read() -> None:
        try:
            out["lease"] = workflow_client(mixed).acquire(k, shared=True, wait=60)
        except Exception as error:  # noqa: BLE001 - the test asserts on it
            out["error"] = error

    thread = threading.Thread(target=read)
    thread.start()
    mixed.until(lambda: fp.counters(mixed.lock(k))[1] == 2)  # the reader's ticket: room for one more
    _fill_readers(mixed, k, fake[-1:], write=p.LockWrite(update=sp.FAST_READ.update, condition=""))
    mixed.cloud.stepfunctions.stop_execution(executionArn=writer)
    row = mixed.cloud.dynamodb.get_item(TableName=mixed.table("LocksTable"), ConsistentRead=True,
                                        Key={"pk": {"S": fp.row_key(stored, 1)}})["Item"]
    with contextlib.suppress(mixed.cloud.dynamodb.exceptions.ConditionalCheckFailedException):
        mixed.cloud.dynamodb.update_item(TableName=mixed.table("LocksTable"), **fp.arguments(
            fp.row_key(stored, 1), sp.LEAVE, {":me": row[p.OWNER], ":one": {"N": "1"}}))
    at_cap = mixed.lock(k)
    thread.join(60)
    assert not thread.is_alive()
    assert isinstance(out.get("error"), TooManyReaders), out
    after = mixed.lock(k)
    assert sp.readers_of(after) == sp.readers_of(at_cap) and int(after[sp.READERS]["N"]) == sp.MAX_READERS
    assert mixed.parked(k) == []  # its place given up


# ---- a client waiting behind a section a sibling cancelled (issue 25, D1, both backends) -----------

#: The stop grace of SharedStack's Cancelled* sections (the probe Lambda's Init limit + its
#: timeout + the margin: ``safety_stack.PROBE_GRACE_S``).
def _grace_s() -> float:
    from safety_stack import PROBE_GRACE_S

    return PROBE_GRACE_S


def _section_holding(mixed, k: str, machine: str, gate: str = "c") -> tuple[str, str]:
    """(execution, owner) of a ``machine`` (a SharedStack ``Cancelled*`` section beside a
    sibling branch) holding ``k`` at its gate ``gate``, its presence row registered and dated
    past the settle (``lock_invariants.presence_dated_back``; the settle is the state machines'
    tests' subject), its sibling parked."""
    from lock_invariants import presence_dated_back

    run = mixed.start(machine, {"key": k, "gate": gate, "workMs": 1})
    mixed.until(lambda: mixed.gate_token(k, gate))  # holds, at work

    def owner() -> str | None:
        item = mixed.lock(k)
        return next((o for o in (item.get(p.OWNER, {}).get("S", ""), *sp.readers_of(item)) if run in o), None)

    mixed.until(lambda: owner() is not None and p.PRESENCE in mixed.presence_row(owner()))
    presence_dated_back(mixed.cloud, mixed.table("LocksTable"), sp.presence_row_key(owner()))
    return run, owner()


def _hold_of(mixed, k: str, owner: str) -> dict:
    """The hold of ``owner`` on ``k`` as ``{owner, expiresAt}`` ({} when it has none): a reader's
    entry, or the lock item of a writer."""
    item = mixed.lock(k)
    hold = sp.readers_of(item).get(owner) or (item if item.get(p.OWNER, {}).get("S") == owner else {})
    return {p.OWNER: {"S": owner}, p.EXPIRES_AT: hold[p.EXPIRES_AT]} if hold else {}


def _fail_sibling(mixed, k: str, run: str) -> None:
    """The sibling branch of ``run`` fails: Step Functions cancels its section's branch; the user
    catches the Parallel's failure and the execution runs on."""
    mixed.until(lambda: mixed.gate_token(k, "sibling"))
    mixed.cloud.stepfunctions.send_task_failure(taskToken=mixed.gate_token(k, "sibling"), error="User.Failed",
                                                cause="the sibling fails")
    mixed.until(lambda: any(e["type"] == "ParallelStateFailed" for e in mixed.cloud.history(run)))


class ActionsSeen:
    """A boto3 client (DynamoDB or Step Functions) that records the IAM action of each call it
    passes on (a ``TransactWriteItems``: its items' actions) in ``seen``."""

    _TRANSACT = {"ConditionCheck": "ConditionCheckItem", "Update": "UpdateItem", "Delete": "DeleteItem",
                 "Put": "PutItem"}

    def __init__(self, client, service: str, seen: set) -> None:
        self._client, self._service, self.seen = client, service, seen

    def __getattr__(self, name):
        method = getattr(self._client, name)
        if not callable(method):
            return method

        def call(*args, **kwargs):
            if name == "transact_write_items":
                self.seen.update(f"dynamodb:{self._TRANSACT[t]}" for i in kwargs["TransactItems"] for t in i)
            else:
                self.seen.add(f"{self._service}:{self._client.meta.method_to_api_mapping[name]}")
            return method(*args, **kwargs)

        return call


#: (the client's mode, the cancelled section): a writer behind a reader and behind a writer, a
#: reader behind a writer.
_BEHIND = (("write", "CancelledReader"), ("write", "CancelledWriter"), ("read", "CancelledWriter"))


def test_a_client_waiting_behind_a_section_cancelled_by_a_sibling_gets_the_key_after_its_grace(mixed):
    """D1 for ``LockClient(read_write=True)``: a client writer (behind a reader, behind a
    writer) and a client reader (behind a writer) wait behind a hold whose branch Step Functions
    cancelled (the execution RUNNING: DescribeExecution cannot tell it). Each probes the hold's
    presence row (``SendTaskHeartbeat``: ``TaskTimedOut``), retires that acquisition from now
    (the row's GONE_ROW beside RETIRE_GONE_*: held for its stop grace) and gets the key after
    it - not at the 10-minute lease (before: ``LockTimeout`` after its 40 s wait)."""
    from lock_invariants import probe_as_client

    keys = {case: f"k-{uuid.uuid4().hex[:8]}" for case in _BEHIND}
    holds = {case: _section_holding(mixed, keys[case], case[1]) for case in _BEHIND}
    fences = {case: int(mixed.lock(keys[case]).get(p.FENCE, {}).get("N", "0")) for case in _BEHIND}
    for case in _BEHIND:
        _fail_sibling(mixed, keys[case], holds[case][0])
    cancelled = time.time()

    seen: set[str] = set()  # the IAM actions the waiting clients called

    def behind(case):
        client = LockClient(mixed.table("LocksTable"), namespace="rw", read_write=True,
                            dynamodb=ActionsSeen(mixed.cloud.dynamodb, "dynamodb", seen),
                            stepfunctions=ActionsSeen(mixed.cloud.stepfunctions, "states", seen))
        lease = client.acquire(keys[case], shared=case[0] == "read", wait=40, lease=30)
        return time.time() - cancelled, lease

    waiting = {case: run_in_thread(lambda case=case: behind(case)) for case in _BEHIND}
    for case, (thread, out) in waiting.items():
        thread.join(90)
        assert "value" in out, (case, out.get("error"))
        waited, lease = out["value"]
        k, (run, owner) = keys[case], holds[case]
        print(f"{case}: the client got the key {waited:.1f} s after the cancel")
        assert _grace_s() - 1 <= waited < _grace_s() + 10, (case, waited)  # its grace, not its lease
        assert mixed.cloud.status(run) == "RUNNING"  # only its branch was cancelled
        assert not mixed.presence_row(owner) and not _hold_of(mixed, k, owner)  # retired by the probe, then gone
        entered = probe_as_client(mixed.cloud, mixed.app, k, lease.fence, role=case[0])
        assert entered["insideAtEntry"] == 1, (case, entered)  # the cancelled work never ran
        # a writer's fence follows the last one; a reader reads the last writer's
        assert lease.fence == fences[case] + (case[0] == "write"), (case, lease.fence, fences[case])
        workflow_client(mixed).release(lease)
        assert mixed.free(k), mixed.lock(k)
        mixed.cloud.stop_execution(run)
    assert all(mixed.probe(k).get("violations", 0) == 0 for k in keys.values())
    # what grant_lock_client(read_write=True) grants covers the calls (the probe, the retire's
    # transaction of a Delete and an Update among them)
    from locked_workflow.constructs_lib.client_layer import lock_client_actions

    assert {"states:SendTaskHeartbeat", "dynamodb:DeleteItem"} <= seen <= lock_client_actions(read_write=True), seen


def test_negative_control_a_client_never_retires_a_reader_or_writer_section_whose_branch_runs(mixed):
    """The same holds at work, not cancelled: a client writer behind the reader and a client
    reader behind the writer probe them (their heartbeats are accepted), never retire them (the
    holds' leases never move, their presence rows stay), and wait out their 8 s in
    ``LockTimeout``."""
    from lock_invariants import HeartbeatCounter, LeaseEndsSeen

    cases = (("write", "CancelledReader"), ("read", "CancelledWriter"))
    keys = {case: f"k-{uuid.uuid4().hex[:8]}" for case in cases}
    holds = {case: _section_holding(mixed, keys[case], case[1]) for case in cases}
    held_until = {case: _hold_of(mixed, keys[case], holds[case][1])[p.EXPIRES_AT]["N"] for case in cases}
    heartbeats = {case: HeartbeatCounter(mixed.cloud.stepfunctions) for case in cases}

    def behind(case):
        client = LockClient(mixed.table("LocksTable"), namespace="rw", dynamodb=mixed.cloud.dynamodb,
                            stepfunctions=heartbeats[case], read_write=True)
        run, owner = holds[case]
        with LeaseEndsSeen(lambda: _hold_of(mixed, keys[case], owner), run) as seen:
            with pytest.raises(LockTimeout):
                client.acquire(keys[case], shared=case[0] == "read", wait=8, lease=30)
        return seen

    waiting = {case: run_in_thread(lambda case=case: behind(case)) for case in cases}
    for case, (thread, out) in waiting.items():
        thread.join(60)
        assert "value" in out, (case, out.get("error"))
        run, owner = holds[case]
        assert len(heartbeats[case].calls) >= 2, (case, heartbeats[case].calls)  # probed, more than once ...
        assert {str(v) for v in out["value"]} == {held_until[case]}, (case, out["value"])  # ... never retired
        row = mixed.presence_row(owner)
        assert p.PRESENCE in row and p.PRESENCE_CLOSED not in row, row
        mixed.cloud.stop_execution(run)


def test_a_client_writer_behind_two_readers_retires_the_cancelled_one_and_waits_for_the_live_one(mixed):
    """Readers hold several entries: the waiter probes each holder it is blocked by (in turn,
    as the state machines' waiters do). Of two reader sections, one cancelled by its sibling,
    one at work: the cancelled entry is retired and reaped after its grace, the live one is
    never touched, and the writer enters when the live reader leaves."""
    k = f"k-{uuid.uuid4().hex[:8]}"
    live, live_owner = _section_holding(mixed, k, "CancelledReader", gate="live")
    mixed.until(lambda: mixed.gate_token(k, "sibling"))
    live_sibling = mixed.gate_token(k, "sibling")
    gone, gone_owner = _section_holding(mixed, k, "CancelledReader", gate="gone")
    # (both siblings store their token under one key: the later one's is the cancelled run's)
    mixed.until(lambda: mixed.gate_token(k, "sibling") not in (None, live_sibling))
    live_until = _hold_of(mixed, k, live_owner)[p.EXPIRES_AT]["N"]
    _fail_sibling(mixed, k, gone)
    cancelled = time.time()
    thread, out = run_in_thread(lambda: workflow_client(mixed).acquire(k, wait=60, lease=30))
    mixed.until(lambda: not _hold_of(mixed, k, gone_owner), timeout=60)  # retired, then reaped
    reaped = time.time() - cancelled
    print(f"the cancelled reader's entry was reaped {reaped:.1f} s after the cancel")
    assert _grace_s() - 1 <= reaped < _grace_s() + 10, reaped
    assert _hold_of(mixed, k, live_owner)[p.EXPIRES_AT]["N"] == live_until  # the live reader: untouched
    assert thread.is_alive() and p.PRESENCE in mixed.presence_row(live_owner)  # the writer waits for it
    mixed.open(k, "live")  # the live reader's work ends: it leaves, and hands the key to the writer
    thread.join(60)
    assert "value" in out, out.get("error")
    lease = out["value"]
    assert mixed.lock(k)[p.OWNER]["S"] == lease.owner and not sp.readers_of(mixed.lock(k))
    workflow_client(mixed).release(lease)
    assert mixed.probe(k).get("violations", 0) == 0 and mixed.free(k)
    mixed.cloud.stepfunctions.send_task_success(taskToken=live_sibling, output="{}")  # (its execution ends)
    mixed.cloud.stop_execution(gone)
