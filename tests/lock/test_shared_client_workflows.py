"""``LockClient(read_write=True)`` beside the read/write lock's workflows on one key, on both
DynamoDB backends: a client's release wakes parked workflows, a client queued behind workflows
is admitted in its turn, and clocks (a client's lease ends for its holder before anyone may
take over). Its faults (``test_shared_client_faults.py``) and a client behind a section a
sibling cancelled (``test_shared_client_cancelled.py``) share this file's fixture and group.
(The client alone: ``tests/client/test_shared_client.py``.)"""

from __future__ import annotations

import uuid

import pytest

from locked_workflow.constructs_lib.lock_client import LockClient, LockLost
from locked_workflow.state_machines import fair_protocol as fp
from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import shared_protocol as sp
from deployed import deployed_stack, run_in_thread
from shared_stack import SharedStack
from test_shared_lock import ReadWrite


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
    from lock_client_fakes import FakeClock

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
    from lock_client_fakes import FakeClock

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
    from lock_client_fakes import FakeClock

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
    from lock_client_fakes import FakeClock

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
