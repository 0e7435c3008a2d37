"""The Python LockClient against moto's DynamoDB: the same lock items as the state machines."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import boto3
import pytest
from moto import mock_aws

from constructs_lib.lock_client import (
    InvalidLockKey,
    Lease,
    LockClient,
    LockError,
    LockHeld,
    LockLost,
    LockTimeout,
)
from state_machines.lock_protocol import (
    ERROR_INVALID_KEY,
    ERROR_LOST,
    ERROR_TIMEOUT,
    MAX_KEY_LENGTH,
    OWNER_INDEX,
)

TABLE = "locks"
T0 = 1_700_000_000_000  # epoch ms


class FakeClock:
    """Epoch ms, moved by hand."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += round(seconds * 1000)


pytestmark = pytest.mark.usefixtures("offline_aws_env")


@pytest.fixture
def ddb():
    with mock_aws():
        client = boto3.client("dynamodb")
        client.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "owner", "AttributeType": "S"},
            ],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": OWNER_INDEX,
                    "KeySchema": [{"AttributeName": "owner", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                }
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def make_client(ddb, clock):
    def make(owner: str, **kwargs) -> LockClient:
        kwargs.setdefault("clock", clock)
        return LockClient(TABLE, dynamodb=ddb, owner=owner, **kwargs)

    return make


@pytest.fixture
def alice(make_client):
    return make_client("alice")


@pytest.fixture
def bob(make_client):
    return make_client("bob")


def item(ddb, pk="k"):
    return ddb.get_item(TableName=TABLE, Key={"pk": {"S": pk}}, ConsistentRead=True).get("Item")


# --------------------------------------------------------------------------------------
# The six classic scenarios
# --------------------------------------------------------------------------------------


def test_acquire_when_no_lock_exists(alice, ddb):
    lease = alice.acquire("k", lease=timedelta(seconds=30))

    assert lease == Lease(
        key="k", table_key="k", owner="alice", fence=1, acquired_at=T0, expires_at=T0 + 30_000
    )
    assert item(ddb) == {
        "pk": {"S": "k"},
        "owner": {"S": "alice"},
        "acquiredAt": {"N": str(T0)},
        "expiresAt": {"N": str(T0 + 30_000)},
        "fence": {"N": "1"},
    }


def test_acquire_when_the_old_lock_expired(alice, bob, clock, ddb):
    alice.acquire("k", lease=10)
    clock.advance(10.001)

    lease = bob.acquire("k", lease=10)

    assert (lease.owner, lease.fence, lease.acquired_at) == ("bob", 2, T0 + 10_001)
    assert item(ddb)["owner"] == {"S": "bob"}


def test_acquire_is_rejected_while_another_holds_it(alice, bob, clock, ddb):
    alice.acquire("k", lease=10)
    clock.advance(10)  # the lease ends *after* expiresAt (strictly less than now)
    before = item(ddb)

    with pytest.raises(LockHeld) as held:
        bob.acquire("k")

    assert not isinstance(held.value, LockTimeout)
    assert (held.value.holder, held.value.expires_at) == ("alice", T0 + 10_000)
    assert item(ddb) == before


def test_release_with_its_own_id(alice, ddb):
    lease = alice.acquire("k")

    alice.release(lease)

    assert item(ddb) == {"pk": {"S": "k"}, "fence": {"N": "1"}}


def test_cannot_release_a_lock_that_does_not_exist(alice, ddb):
    ghost = Lease(key="k", table_key="k", owner="alice", fence=1, acquired_at=T0, expires_at=T0 + 1)

    with pytest.raises(LockLost, match="no such lock") as lost:
        alice.release(ghost)

    assert lost.value.error == ERROR_LOST
    assert item(ddb) is None  # the failed release created nothing


def test_cannot_release_with_the_wrong_id(alice, bob, ddb):
    lease = alice.acquire("k")
    before = item(ddb)

    with pytest.raises(LockLost, match="now held by 'alice'"):
        bob.release(dataclasses.replace(lease, owner="bob"))

    assert item(ddb) == before


# --------------------------------------------------------------------------------------
# Takeover, idempotency, fences
# --------------------------------------------------------------------------------------


def test_zombie_release_after_takeover_is_refused_and_keeps_the_new_lock(alice, bob, clock, ddb):
    zombie = alice.acquire("k", lease=5)
    clock.advance(6)
    current = bob.acquire("k", lease=60)
    before = item(ddb)

    with pytest.raises(LockLost, match=r"now held by 'bob' with fence 2"):
        alice.release(zombie)

    assert item(ddb) == before
    bob.release(current)  # still the holder's to release


def test_zombie_release_after_takeover_and_release_is_refused(alice, bob, clock, ddb):
    zombie = alice.acquire("k", lease=5)
    clock.advance(6)
    bob.release(bob.acquire("k"))

    with pytest.raises(LockLost, match="free, fence now 2"):
        alice.release(zombie)

    assert item(ddb) == {"pk": {"S": "k"}, "fence": {"N": "2"}}


def test_repeated_acquire_by_the_same_owner_is_idempotent(alice, ddb):
    first = alice.acquire("k")
    again = alice.acquire("k")  # e.g. a retried acquire whose first try succeeded

    assert again.owner == first.owner == "alice"
    assert again.fence == first.fence + 1
    alice.release(again)
    assert "owner" not in item(ddb)


def test_a_repeated_release_is_ok(alice, ddb):
    lease = alice.acquire("k")
    alice.release(lease)

    alice.release(lease)  # e.g. a retried release whose first attempt succeeded

    assert item(ddb) == {"pk": {"S": "k"}, "fence": {"N": "1"}}


def test_fences_strictly_increase_across_acquisitions(make_client, clock):
    clients = [make_client(f"owner-{i}") for i in range(3)]
    fences = []
    for round_ in range(9):
        client = clients[round_ % 3]
        lease = client.acquire("k", lease=1)
        fences.append(lease.fence)
        if round_ % 2:
            client.release(lease)
        else:
            clock.advance(2)  # abandoned: the next one takes over after the lease

    assert fences == list(range(1, 10))


def test_release_keeps_the_item_and_its_fence(alice, bob, ddb):
    alice.release(alice.acquire("k"))
    assert item(ddb) == {"pk": {"S": "k"}, "fence": {"N": "1"}}

    assert bob.acquire("k").fence == 2


def test_keys_are_independent(alice, bob):
    a = alice.acquire("k1")
    b = bob.acquire("k2")

    assert (a.fence, b.fence) == (1, 1)


def test_namespaced_key_and_owner_index(make_client, ddb):
    client = make_client("script-1", namespace="customer")

    lease = client.acquire("123")

    assert (lease.key, lease.table_key) == ("123", "customer#123")
    held = ddb.query(
        TableName=TABLE,
        IndexName=OWNER_INDEX,
        KeyConditionExpression="#o = :o",
        ExpressionAttributeNames={"#o": "owner"},
        ExpressionAttributeValues={":o": {"S": "script-1"}},
    )["Items"]
    assert [i["pk"]["S"] for i in held] == ["customer#123"]
    client.release(lease)
    assert item(ddb, "customer#123") == {"pk": {"S": "customer#123"}, "fence": {"N": "1"}}


def test_default_owner_is_unique_per_client(ddb):
    first, second = LockClient(TABLE, dynamodb=ddb), LockClient(TABLE, dynamodb=ddb)

    assert first.owner.startswith("client:") and first.owner != second.owner
    lease = first.acquire("k")
    with pytest.raises(LockHeld):
        second.acquire("k")
    first.release(lease)


# --------------------------------------------------------------------------------------
# Validation before any DynamoDB call
# --------------------------------------------------------------------------------------


class RecordingStub:
    """A DynamoDB client that records every use (and must never be used)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name):
        self.calls.append(name)
        raise AssertionError(f"DynamoDB called: {name}")


@pytest.mark.parametrize(
    "key, problem",
    [
        (None, "is missing"),
        (123, "must be a string, got: int"),
        (["k"], "must be a string, got: list"),
        ("", "must not be empty"),
        ("x" * (MAX_KEY_LENGTH + 1), f"must be at most {MAX_KEY_LENGTH} characters, got: {MAX_KEY_LENGTH + 1}"),
    ],
    ids=["none", "int", "list", "empty", "too-long"],
)
def test_bad_keys_raise_invalid_lock_key_without_any_dynamodb_call(key, problem):
    stub = RecordingStub()
    client = LockClient(TABLE, dynamodb=stub, owner="alice", clock=FakeClock())
    bad = Lease(key=key, table_key="k", owner="alice", fence=1, acquired_at=T0, expires_at=T0 + 1)

    for call in (
        lambda: client.acquire(key),
        lambda: client.acquire(key, wait=5),
        lambda: client.release(bad),
        lambda: client.refresh(bad),
        lambda: client.hold(key).__enter__(),
    ):
        with pytest.raises(InvalidLockKey, match=problem) as raised:
            call()
        assert str(raised.value).startswith(f"{ERROR_INVALID_KEY}: the lock key ")
        assert isinstance(raised.value, (LockError, ValueError))

    assert stub.calls == []


def test_longest_key_is_accepted(alice):
    assert alice.acquire("x" * MAX_KEY_LENGTH).fence == 1


# --------------------------------------------------------------------------------------
# Refresh, hold, wait
# --------------------------------------------------------------------------------------


def test_refresh_extends_expires_at(alice, bob, clock, ddb):
    lease = alice.acquire("k", lease=10)
    clock.advance(8)

    refreshed = alice.refresh(lease, lease=timedelta(seconds=30))

    assert refreshed.expires_at == T0 + 8_000 + 30_000
    assert (refreshed.fence, refreshed.acquired_at) == (lease.fence, lease.acquired_at)
    assert item(ddb)["expiresAt"] == {"N": str(T0 + 38_000)}
    clock.advance(10)  # past the original lease, within the refreshed one
    with pytest.raises(LockHeld):
        bob.acquire("k")
    assert alice.refresh(refreshed).expires_at == T0 + 18_000 + 60_000  # default: 60 s


def test_refresh_after_takeover_raises_lock_lost(alice, bob, clock, ddb):
    zombie = alice.acquire("k", lease=5)
    clock.advance(6)
    bob.acquire("k")
    before = item(ddb)

    with pytest.raises(LockLost, match="now held by 'bob'"):
        alice.refresh(zombie)

    assert item(ddb) == before


def test_hold_acquires_and_releases(alice, ddb):
    with alice.hold("k", lease=30) as lease:
        assert item(ddb)["owner"] == {"S": "alice"}
        assert lease.expires_at == T0 + 30_000

    assert item(ddb) == {"pk": {"S": "k"}, "fence": {"N": "1"}}


def test_hold_releases_on_exception_and_reraises_it(alice, ddb):
    class WorkFailed(Exception):
        pass

    with pytest.raises(WorkFailed):
        with alice.hold("k"):
            raise WorkFailed("boom")

    assert item(ddb) == {"pk": {"S": "k"}, "fence": {"N": "1"}}


def test_hold_keeps_the_block_error_when_the_lock_was_lost(alice, bob, clock, ddb):
    with pytest.raises(KeyError) as raised:
        with alice.hold("k", lease=5):
            clock.advance(6)
            bob.acquire("k")
            raise KeyError("work failed")

    assert any("releasing the lock also failed" in note for note in raised.value.__notes__)
    assert item(ddb)["owner"] == {"S": "bob"}


def test_hold_raises_lock_lost_when_the_lock_was_taken_over_during_the_block(alice, bob, clock, ddb):
    with pytest.raises(LockLost):
        with alice.hold("k", lease=5):
            clock.advance(6)
            bob.acquire("k")

    assert item(ddb)["owner"] == {"S": "bob"}


def test_wait_times_out_with_lock_timeout(alice, make_client, ddb):
    alice.acquire("k")
    sleeps = []
    waiter = make_client("bob", sleep=sleeps.append)  # fake sleep: the wait runs on real time

    with pytest.raises(LockTimeout) as timeout:
        waiter.acquire("k", wait=0.05, poll_interval=0.01, max_poll_interval=0.02)

    assert timeout.value.error == ERROR_TIMEOUT and timeout.value.holder == "alice"
    assert isinstance(timeout.value, LockHeld)
    assert sleeps and all(0 < s <= 0.02 for s in sleeps)


def test_wait_backs_off_with_jitter(alice, make_client):
    held = alice.acquire("k")
    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 8:
            alice.release(held)

    waiter = make_client("bob", sleep=sleep)
    waiter.acquire("k", wait=60, poll_interval=0.1, max_poll_interval=1.0, backoff_rate=2)

    nominal = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]
    assert all(n / 2 <= s <= n for s, n in zip(sleeps, nominal, strict=True)), sleeps
    assert len(set(sleeps)) == len(sleeps)  # jittered


def test_wait_acquires_once_the_holder_releases(alice, make_client):
    held = alice.acquire("k")
    sleeps = []

    def holder_releases_meanwhile(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 2:
            alice.release(held)

    waiter = make_client("bob", sleep=holder_releases_meanwhile)
    lease = waiter.acquire("k", wait=60, poll_interval=0.01)

    assert (lease.owner, lease.fence, len(sleeps)) == ("bob", 2, 2)


def test_wait_acquires_once_the_lease_ends(alice, make_client, clock):
    alice.acquire("k", lease=1)
    waiter = make_client("bob", sleep=lambda seconds: clock.advance(0.6))

    lease = waiter.acquire("k", wait=60, poll_interval=0.01)

    assert (lease.owner, lease.fence, lease.acquired_at) == ("bob", 2, T0 + 1_200)


@pytest.mark.parametrize(
    "kwargs",
    [{"lease": 0}, {"lease": -1}, {"wait": -1}, {"poll_interval": 0}, {"backoff_rate": 0.5}, {"lease": "1"}],
)
def test_bad_options_raise_value_error(kwargs):
    client = LockClient(TABLE, dynamodb=RecordingStub(), owner="alice")

    with pytest.raises(ValueError):
        client.acquire("k", **kwargs)
