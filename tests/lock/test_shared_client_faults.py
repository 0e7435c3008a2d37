"""``LockClient(read_write=True)`` beside the read/write lock's workflows under faults, on both
DynamoDB backends: transaction conflicts retried, a reader's release whose handoff is throttled,
a reader stopped right after its leave, a polling client reader at the head of a key at the
reader cap. (The fixture: ``test_shared_client_workflows.py``, whose group this file is in.)"""

from __future__ import annotations

import contextlib
import json
import threading
import uuid

import pytest

from locked_workflow.constructs_lib.lock_client import LockClient
from locked_workflow.state_machines import fair_protocol as fp
from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import shared_protocol as sp
from test_shared_client_workflows import mixed, workflow_client  # noqa: F401 - mixed: the stack's fixture


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
    from test_shared_faults import _aws_sized_owner, _fill_readers
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
