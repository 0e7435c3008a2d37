"""The Python LockClient against moto's DynamoDB: the same lock items as the state machines -
the classic scenarios, ownership per acquisition, takeover and fences, a release whose response
was lost."""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from datetime import timedelta

import boto3
import pytest

from locked_workflow.constructs_lib.lock_client import (
    Lease,
    LockClient,
    LockHeld,
    LockLost,
    LockTimeout,
)
from locked_workflow.state_machines.lock_protocol import ERROR_LOST
from lock_client_fakes import (
    KEY,
    T0,
    TABLE,
    acquisition_of,
    client_lease,
    dated_by,
    item,
    take_over,
)

pytestmark = pytest.mark.usefixtures("offline_aws_env")


# --------------------------------------------------------------------------------------
# The six classic scenarios
# --------------------------------------------------------------------------------------


def test_acquire_when_no_lock_exists(alice, ddb):
    lease = alice.acquire("k", lease=timedelta(seconds=30))

    acquisition_of("alice", lease.owner)
    assert lease == Lease(
        key="k", table_key=KEY, owner=lease.owner, fence=1, acquired_at=T0, expires_at=T0 + 30_000
    )
    assert item(ddb) == {
        "pk": {"S": KEY},
        "owner": {"S": lease.owner},
        "acquiredAt": {"N": str(T0)},
        "expiresAt": {"N": str(T0 + 30_000)},
        "grace": {"N": "0"},  # a client's lock is ended by its lease, never retired
        "fence": {"N": "1"},
        "clientLease": client_lease(lease.owner, 30),  # how long a client waiter watches it
    }


def test_acquire_when_the_old_lock_expired(alice, bob, clock, ddb):
    alice.acquire("k", lease=10)
    with pytest.raises(LockHeld) as held:  # bob sees it held: he starts watching it
        bob.acquire("k")
    assert held.value.takeover_in == 10
    clock.advance(9.999)
    with pytest.raises(LockHeld):  # unchanged, but not for a whole lease yet
        bob.acquire("k")
    clock.advance(0.001)

    lease = bob.acquire("k", lease=10)  # unchanged for alice's lease: taken over

    acquisition_of("bob", lease.owner)
    assert (lease.fence, lease.acquired_at) == (2, T0 + 10_000)
    assert item(ddb)["owner"] == {"S": lease.owner}


def test_acquire_is_rejected_while_another_holds_it(alice, bob, clock, ddb):
    first = alice.acquire("k", lease=10)
    clock.advance(10)  # the lease ends *after* expiresAt (strictly less than now)
    before = item(ddb)

    with pytest.raises(LockHeld) as held:
        bob.acquire("k")

    assert not isinstance(held.value, LockTimeout)
    assert (held.value.holder, held.value.expires_at) == (first.owner, T0 + 10_000)
    assert item(ddb) == before


def test_release_with_its_own_id(alice, ddb):
    lease = alice.acquire("k")

    alice.release(lease)

    assert item(ddb) == {"pk": {"S": KEY}, "fence": {"N": "1"}}  # grace removed with the owner


def test_cannot_release_a_lock_that_does_not_exist(alice, ddb):
    ghost = Lease(key="k", table_key=KEY, owner="alice#1", fence=1, acquired_at=T0, expires_at=T0 + 1)

    with pytest.raises(LockLost, match="no such lock") as lost:
        alice.release(ghost)

    assert lost.value.error == ERROR_LOST
    assert item(ddb) is None  # the failed release created nothing


def test_cannot_release_with_the_wrong_id(alice, bob, ddb):
    lease = alice.acquire("k")
    before = item(ddb)

    with pytest.raises(LockLost, match=re.escape(f"now held by '{lease.owner}'")):
        bob.release(dataclasses.replace(lease, owner=f"bob#{uuid.uuid4()}"))

    assert item(ddb) == before


# --------------------------------------------------------------------------------------
# Ownership per acquisition
# --------------------------------------------------------------------------------------


def test_two_acquisitions_by_one_client_are_different_holders(alice, ddb):
    first = alice.acquire("k")
    before = item(ddb)

    with pytest.raises(LockHeld) as held:
        alice.acquire("k")  # no owner=: a new acquisition, not a repeat of the first

    assert held.value.holder == first.owner
    assert item(ddb) == before  # refused: no fence bump, first still the holder
    alice.release(first)
    second = alice.acquire("k")
    assert acquisition_of("alice", second.owner) != acquisition_of("alice", first.owner)
    assert second.fence == 2


def test_repeated_acquire_with_an_explicit_owner_is_idempotent(alice, ddb):
    first = alice.acquire("k", owner="job-42")
    again = alice.acquire("k", owner="job-42")  # e.g. a retried acquire whose first try succeeded

    assert again.owner == first.owner == "job-42"  # used as-is, no uuid appended
    assert again.fence == first.fence + 1
    repeated = alice.acquire("k", owner=first.owner)
    assert repeated.fence == first.fence + 2
    with pytest.raises(LockHeld):
        alice.acquire("k", owner="job-43")  # a different explicit owner is another holder
    alice.release(repeated)
    assert "owner" not in item(ddb)


def test_a_repeated_release_is_ok(alice, ddb):
    lease = alice.acquire("k")
    alice.release(lease)

    alice.release(lease)  # e.g. a retried release whose first attempt succeeded

    assert item(ddb) == {"pk": {"S": KEY}, "fence": {"N": "1"}}


# --------------------------------------------------------------------------------------
# Takeover, fences
# --------------------------------------------------------------------------------------


def test_zombie_release_after_takeover_is_refused_and_keeps_the_new_lock(alice, bob, clock, ddb):
    zombie = alice.acquire("k", lease=5)
    current = take_over(bob, clock, lease=60)
    before = item(ddb)

    with pytest.raises(LockLost, match=re.escape(f"now held by '{current.owner}' with fence 2")):
        alice.release(zombie)

    assert item(ddb) == before
    bob.release(current)  # still the holder's to release


def test_zombie_release_after_takeover_and_release_is_refused(alice, bob, clock, ddb):
    zombie = alice.acquire("k", lease=5)
    bob.release(take_over(bob, clock))

    with pytest.raises(LockLost, match="free, fence now 2"):
        alice.release(zombie)

    assert item(ddb) == {"pk": {"S": KEY}, "fence": {"N": "2"}}


def test_fences_strictly_increase_across_acquisitions(make_client, clock):
    clients = [make_client(f"owner-{i}") for i in range(3)]
    fences = []
    abandoned = False
    for round_ in range(9):
        client = clients[round_ % 3]
        lease = take_over(client, clock, lease=1) if abandoned else client.acquire("k", lease=1)
        fences.append(lease.fence)
        abandoned = not round_ % 2
        if not abandoned:
            client.release(lease)  # else the next one takes over after the lease

    assert fences == list(range(1, 10))


def test_release_keeps_the_item_and_its_fence(alice, bob, ddb):
    alice.release(alice.acquire("k"))
    assert item(ddb) == {"pk": {"S": KEY}, "fence": {"N": "1"}}

    assert bob.acquire("k").fence == 2


def test_keys_are_independent(alice, bob):
    a = alice.acquire("k1")
    b = bob.acquire("k2")

    assert (a.fence, b.fence) == (1, 1)


class RecordingDynamoDB:
    """A real DynamoDB client whose every use is recorded by operation name."""

    def __init__(self, client) -> None:
        self._client = client
        self.calls: list[str] = []

    def __getattr__(self, name):
        self.calls.append(name)
        return getattr(self._client, name)


def test_no_index_is_needed_every_call_is_a_keyed_update(make_client, clock, ddb):
    """The table has the partition key only; the client finds every lock by its key."""
    table = ddb.describe_table(TableName=TABLE)["Table"]
    assert table.get("GlobalSecondaryIndexes", []) == table.get("LocalSecondaryIndexes", []) == []
    recording = RecordingDynamoDB(ddb)
    client = make_client("script-1", namespace="customer", dynamodb=recording)
    other = make_client("script-2", namespace="customer", dynamodb=recording)

    lease = client.acquire("123", lease=5)
    with pytest.raises(LockHeld) as held:
        other.acquire("123")
    refreshed = client.refresh(lease, lease=5)
    client.release(refreshed)
    clock.advance(1)
    with pytest.raises(LockLost):
        client.refresh(refreshed)  # released: no longer ours

    assert (lease.key, lease.table_key) == ("123", "customer#123")
    assert held.value.holder == lease.owner  # the holder comes back with the refused write
    assert recording.calls == ["update_item"] * 5  # no query, scan or get
    assert item(ddb, "customer#123") == {"pk": {"S": "customer#123"}, "fence": {"N": "1"}}  # no clientLease left
    assert item(ddb) is None  # "123" in namespace "customer" is not "#123" nor "k"


def test_default_owner_is_unique_per_client(ddb):
    first, second = LockClient(TABLE, dynamodb=ddb), LockClient(TABLE, dynamodb=ddb)

    assert first.owner.startswith("client:") and first.owner != second.owner
    assert "#" not in first.owner
    lease = first.acquire("k")
    acquisition_of(first.owner, lease.owner)
    with pytest.raises(LockHeld):
        second.acquire("k")
    first.release(lease)


# --------------------------------------------------------------------------------------
# A release whose response was lost
# --------------------------------------------------------------------------------------


def lose_the_first_release_response(client, meanwhile) -> dict:
    """Make ``client``'s next release look like a lost response: the first attempt reaches
    DynamoDB and succeeds, then botocore retries it (as after a connection reset) once
    ``meanwhile()`` has run. Returns a record of what happened."""
    record = {"armed": True, "retried": 0}

    def needs_retry(attempts, request_dict, **_):
        body = json.loads(request_dict["body"])
        if not body["UpdateExpression"].startswith("REMOVE"):
            return None  # only the release
        if attempts == 1 and record["armed"]:
            record["armed"] = False
            record["meanwhile"] = meanwhile()
            return 0  # botocore: retry now
        record["retried"] = attempts - 1
        return None

    client.meta.events.register_first("needs-retry.dynamodb.UpdateItem", needs_retry)
    return record


@pytest.fixture
def alice_with_a_lossy_connection(ddb, clock):
    """alice on her own connection (bob keeps the fixture's)."""
    connection = boto3.client("dynamodb")
    dated_by(connection, clock)
    return LockClient(TABLE, dynamodb=connection, owner="alice", clock=clock, monotonic=clock.monotonic), connection


def test_a_lost_release_response_is_a_release_while_the_lease_runs(
    alice_with_a_lossy_connection, bob, clock, ddb
):
    alice, connection = alice_with_a_lossy_connection
    lease = alice.acquire("k", lease=30)
    record = lose_the_first_release_response(connection, lambda: bob.acquire("k", lease=60))
    clock.advance(28.999)  # the lease has not ended (30 s, less 1 s by which AWS's clock may be
    # ahead of its stamp): nobody could have taken it over yet

    alice.release(lease)  # the retry finds bob's lock: our first attempt released it

    taken = record["meanwhile"]
    assert (record["retried"], taken.fence) == (1, 2)  # botocore did retry; bob got in between
    assert item(ddb)["owner"] == {"S": taken.owner}  # bob's lock is untouched
    assert item(ddb)["fence"] == {"N": "2"}


def test_a_lost_release_response_after_the_lease_ended_raises_lock_lost(
    alice_with_a_lossy_connection, bob, clock, ddb
):
    """The same retry once the lease has ended: a waiter may have taken over by expiry before
    the first attempt, so the client cannot tell a lost response from a lost lock."""
    alice, connection = alice_with_a_lossy_connection
    lease = alice.acquire("k", lease=30)
    record = lose_the_first_release_response(connection, lambda: bob.acquire("k", lease=60))
    clock.advance(30)  # the lease is over (on alice's monotonic clock): anyone may have taken over

    with pytest.raises(LockLost, match=re.escape("now held by 'bob#")) as lost:
        alice.release(lease)

    taken = record["meanwhile"]
    assert record["retried"] == 1
    assert f"now held by '{taken.owner}' with fence 2" in str(lost.value)
    assert item(ddb)["owner"] == {"S": taken.owner}


def test_a_refused_release_without_a_retry_raises_lock_lost_while_the_lease_runs(alice, bob, ddb):
    """Negative control: no retry, so the lease not having ended proves nothing."""
    lease = alice.acquire("k", lease=30)
    stranger = Lease(key="k", table_key=KEY, owner="bob#x", fence=1, acquired_at=T0, expires_at=T0 + 30_000)

    with pytest.raises(LockLost):
        bob.release(stranger)

    assert item(ddb)["owner"] == {"S": lease.owner}

