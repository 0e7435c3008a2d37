"""``LockClient(read_write=True)`` beside the read/write lock's workflows on one key, on both
DynamoDB backends: a client's release wakes parked workflows, a client queued behind workflows
is admitted in its turn, clocks (a client's lease ends for its holder before anyone may take
over), transaction conflicts retried, a reader stopped after its leave, a client waiting behind
a section a sibling cancelled. (The client alone: ``tests/client/test_shared_client.py``.)
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid

import pytest

from locked_workflow.constructs_lib.lock_client import LockClient, LockLost, LockTimeout
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

