"""The Python LockClient against moto's DynamoDB: the same lock items as the state machines."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import re
import threading
import time
import uuid
from datetime import timedelta
from email.utils import formatdate

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from locked_workflow.constructs_lib.lock_client import (
    InvalidLockKey,
    Lease,
    LockClient,
    LockError,
    LockHeld,
    LockHeldInThisThread,
    LockLost,
    LockTimeout,
)
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines.lock_protocol import (
    ERROR_INVALID_KEY,
    ERROR_LOST,
    ERROR_TIMEOUT,
    MAX_KEY_BYTES,
)

TABLE = "locks"
#: How much later than true time a lease may be stamped from: DynamoDB's Date has whole seconds
#: (plus the bounds' drift allowance, rounded up).
AWS_CLOCK_WIDTH_MS = 1_010
T0 = 1_700_000_000_000  # epoch ms
KEY = "#k"  # the stored key of "k" in the default namespace ""


class FakeClock:
    """True time, moved by hand: epoch ms (call it), a monotonic clock (``monotonic``), a
    ``sleep`` that moves it, and clocks of the same time off by some seconds (``skewed``)."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += round(seconds * 1000) or (1 if seconds > 0 else 0)  # time moves on a sleep

    def monotonic(self) -> float:
        return self.now / 1000

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def skewed(self, seconds: float):
        """An epoch clock ``seconds`` ahead of true time (behind if negative)."""
        return lambda: self.now + round(seconds * 1000)


pytestmark = pytest.mark.usefixtures("offline_aws_env")


@pytest.fixture
def ddb():
    with mock_aws():
        client = boto3.client("dynamodb")
        client.create_table(  # as LockTable creates it: the partition key and nothing else
            TableName=TABLE,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


@pytest.fixture
def clock():
    return FakeClock()


def dated_by(connection, clock: FakeClock) -> None:
    """DynamoDB's responses on ``connection`` carry the fake clock's true time in their ``Date``
    header (AWS's clock, from which a client bounds its own)."""

    def date(parsed, **_):
        parsed.setdefault("ResponseMetadata", {}).setdefault("HTTPHeaders", {})["date"] = formatdate(
            clock.now / 1000, usegmt=True)

    connection.meta.events.register("after-call.dynamodb", date)


class Undated:
    """A DynamoDB client whose responses carry no ``Date`` header (a stand-in, or an endpoint
    that sends none): the client then knows no clock but its own."""

    def __init__(self, client) -> None:
        self._client = client

    def __getattr__(self, name):
        from botocore.exceptions import ClientError

        method = getattr(self._client, name)

        def call(*args, **kwargs):
            try:
                response = method(*args, **kwargs)
            except ClientError as error:
                error.response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).pop("date", None)
                raise
            response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).pop("date", None)
            return response

        return call


@pytest.fixture
def make_client(ddb, clock):
    """Clients on the fake clock: its epoch, its monotonic time, its sleep (a wait takes no
    time), and DynamoDB's ``Date`` headers."""
    dated_by(ddb, clock)

    def make(owner: str, **kwargs) -> LockClient:
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("monotonic", clock.monotonic)
        kwargs.setdefault("sleep", clock.sleep)
        kwargs.setdefault("dynamodb", ddb)
        return LockClient(TABLE, owner=owner, **kwargs)

    return make


@pytest.fixture
def alice(make_client):
    return make_client("alice")


@pytest.fixture
def bob(make_client):
    return make_client("bob")


def item(ddb, pk=KEY):
    return ddb.get_item(TableName=TABLE, Key={"pk": {"S": pk}}, ConsistentRead=True).get("Item")


def take_over(client: LockClient, clock: FakeClock, key: str = "k", **options) -> Lease:
    """How a client takes an abandoned lock over: it finds it held, watches it unchanged for its
    holder's lease (on its monotonic clock), then takes it."""
    with pytest.raises(LockHeld) as held:
        client.acquire(key)
    assert held.value.takeover_in is not None and held.value.takeover_in > 0
    clock.advance(held.value.takeover_in)
    return client.acquire(key, **options)


def client_lease(owner: str, seconds: float) -> dict:
    """The ``clientLease`` attribute of a client's acquisition."""
    return {"M": {"owner": {"S": owner}, "ms": {"N": str(round(seconds * 1000))}}}


def acquisition_of(client_owner: str, owner: str) -> uuid.UUID:
    """The uuid4 of an acquisition owned ``<client owner>#<uuid4>`` (fails for anything else)."""
    prefix, separator, acquisition = owner.partition("#")
    assert (prefix, separator) == (client_owner, "#"), owner
    drawn = uuid.UUID(acquisition)
    assert drawn.version == 4 and str(drawn) == acquisition, owner
    return drawn


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


def _too_long(size: int) -> str:
    return f"must be at most {MAX_KEY_BYTES} bytes of UTF-8 with its namespace prefix, got: {size} bytes"


@pytest.mark.parametrize(
    "namespace, key, problem",
    [
        ("", None, "is missing"),
        ("", 123, "must be a string, got: int"),
        ("", ["k"], "must be a string, got: list"),
        ("", "", "must not be empty"),
        ("", "\ud800", "must be valid Unicode text"),
        ("", "x" * MAX_KEY_BYTES, _too_long(MAX_KEY_BYTES + 1)),  # "#" + 2048 bytes
        ("customer", "x" * (MAX_KEY_BYTES - 8), _too_long(MAX_KEY_BYTES + 1)),
        # 512 characters only, but 4 bytes each: the limit is bytes of UTF-8, not characters
        ("", "\U0001F600" * 512, _too_long(MAX_KEY_BYTES + 1)),
    ],
    ids=["none", "int", "list", "empty", "surrogate", "too-long", "too-long-namespaced", "4-byte-chars"],
)
def test_bad_keys_raise_invalid_lock_key_without_any_dynamodb_call(namespace, key, problem):
    stub = RecordingStub()
    client = LockClient(TABLE, namespace=namespace, dynamodb=stub, owner="alice", clock=FakeClock())

    for call in (
        lambda: client.acquire(key),
        lambda: client.acquire(key, wait=5),
        lambda: client.acquire(key, owner="job-1"),
        lambda: client.hold(key).__enter__(),
        lambda: client.table_key(key),
    ):
        with pytest.raises(InvalidLockKey, match=re.escape(problem)) as raised:
            call()
        assert str(raised.value).startswith(f"{ERROR_INVALID_KEY}: the lock key ")
        assert isinstance(raised.value, (LockError, ValueError))

    assert stub.calls == []


@pytest.mark.parametrize("table_key", ["", None])
def test_a_lease_without_a_stored_key_is_refused_without_any_dynamodb_call(table_key):
    stub = RecordingStub()
    client = LockClient(TABLE, dynamodb=stub, owner="alice", clock=FakeClock())
    bad = Lease(key="k", table_key=table_key, owner="alice#1", fence=1, acquired_at=T0, expires_at=T0 + 1)

    for call in (lambda: client.release(bad), lambda: client.refresh(bad)):
        with pytest.raises(InvalidLockKey, match="the lease has no stored key"):
            call()

    assert stub.calls == []


@pytest.mark.parametrize(
    "namespace, key",
    [
        ("", "x" * (MAX_KEY_BYTES - 1)),
        ("customer", "x" * (MAX_KEY_BYTES - 9)),
        ("", "\U0001F600" * 511 + "abc"),  # 2044 + 3 bytes after the "#"
    ],
    ids=["ascii", "namespaced", "4-byte-chars"],
)
def test_longest_key_is_accepted(make_client, ddb, namespace, key):
    client = make_client("alice", namespace=namespace)

    lease = client.acquire(key)

    assert len(lease.table_key.encode("utf-8")) == MAX_KEY_BYTES
    assert lease.fence == 1 and item(ddb, lease.table_key)["owner"] == {"S": lease.owner}
    client.release(lease)


def test_the_byte_limit_is_dynamodbs(ddb):
    """Negative control for the client's check: DynamoDB itself refuses one byte more."""
    from botocore.exceptions import ClientError

    too_long = "#" + "\U0001F600" * 512
    with pytest.raises(ClientError, match="2048 bytes"):
        ddb.update_item(
            TableName=TABLE, Key={"pk": {"S": too_long}},
            UpdateExpression="SET #f = :f", ExpressionAttributeNames={"#f": "fence"},
            ExpressionAttributeValues={":f": {"N": "1"}},
        )


@pytest.mark.parametrize(
    "options, problem",
    [
        ({"namespace": "a#b"}, "`namespace` must be at most 64 letters"),
        ({"namespace": "#"}, "`namespace`"),
        ({"namespace": "x" * 65}, "`namespace`"),
        ({"namespace": None}, "`namespace`"),
        ({"owner": "a#b"}, "`owner` must be a non-empty string without '#'"),
        ({"owner": ""}, "`owner`"),
    ],
)
def test_bad_namespace_or_client_owner_raises_value_error(options, problem):
    stub = RecordingStub()

    with pytest.raises(ValueError, match=re.escape(problem)):
        LockClient(TABLE, dynamodb=stub, **options)

    assert stub.calls == []


def test_namespace_characters_other_than_the_separator_are_accepted(make_client, ddb):
    client = make_client("alice", namespace="a.b:c/d=e+f@g_h-i")

    lease = client.acquire("k")

    assert lease.table_key == "a.b:c/d=e+f@g_h-i#k"
    client.release(lease)


# --------------------------------------------------------------------------------------
# Refresh, hold, wait
# --------------------------------------------------------------------------------------


def test_refresh_extends_expires_at(alice, bob, clock, ddb):
    lease = alice.acquire("k", lease=10)
    clock.advance(8)

    refreshed = alice.refresh(lease, lease=timedelta(seconds=30))

    # from the latest time AWS's clock can show (DynamoDB's Date has whole seconds): the
    # workflows never see a lease shorter than its holder does
    assert 0 <= refreshed.expires_at - (T0 + 8_000 + 30_000) <= AWS_CLOCK_WIDTH_MS
    assert (refreshed.owner, refreshed.fence, refreshed.acquired_at) == (
        lease.owner, lease.fence, lease.acquired_at
    )
    assert item(ddb)["expiresAt"] == {"N": str(refreshed.expires_at)}
    assert refreshed.check() == pytest.approx(30)  # the holder's own view: the lease it asked for
    clock.advance(10)  # past the original lease, within the refreshed one
    with pytest.raises(LockHeld):
        bob.acquire("k")
    again = alice.refresh(refreshed)  # default: 60 s
    assert 0 <= again.expires_at - (T0 + 18_000 + 60_000) <= AWS_CLOCK_WIDTH_MS


def test_refresh_after_takeover_raises_lock_lost(alice, bob, clock, ddb):
    zombie = alice.acquire("k", lease=5)
    current = take_over(bob, clock)
    before = item(ddb)

    with pytest.raises(LockLost, match=re.escape(f"now held by '{current.owner}'")):
        alice.refresh(zombie)

    assert item(ddb) == before


def test_hold_acquires_and_releases(alice, ddb):
    with alice.hold("k", lease=30) as lease:
        acquisition_of("alice", lease.owner)
        assert item(ddb)["owner"] == {"S": lease.owner}
        assert lease.expires_at == T0 + 30_000

    assert item(ddb) == {"pk": {"S": KEY}, "fence": {"N": "1"}}


def test_hold_releases_on_exception_and_reraises_it(alice, ddb):
    class WorkFailed(Exception):
        pass

    with pytest.raises(WorkFailed):
        with alice.hold("k"):
            raise WorkFailed("boom")

    assert item(ddb) == {"pk": {"S": KEY}, "fence": {"N": "1"}}
    with alice.hold("k") as again:  # the failed block left no re-entrant hold behind
        assert again.fence == 2


def test_hold_keeps_the_block_error_when_the_lock_was_lost(alice, bob, clock, ddb):
    taken = {}
    with pytest.raises(KeyError) as raised:
        with alice.hold("k", lease=5):
            taken["bob"] = take_over(bob, clock)
            raise KeyError("work failed")

    assert any("releasing the lock also failed" in note for note in raised.value.__notes__)
    assert item(ddb)["owner"] == {"S": taken["bob"].owner}


def test_hold_raises_lock_lost_when_the_lock_was_taken_over_during_the_block(alice, bob, clock, ddb):
    taken = {}
    with pytest.raises(LockLost):
        with alice.hold("k", lease=5):
            taken["bob"] = take_over(bob, clock)

    assert item(ddb)["owner"] == {"S": taken["bob"].owner}


def test_nested_hold_of_the_same_key_is_reentrant(alice, bob, ddb):
    with alice.hold("k", lease=30) as outer:
        held = item(ddb)
        with alice.hold("k", lease=99) as inner:
            assert inner == outer  # the enclosing lease: same owner, same fence
            assert item(ddb) == held  # nothing written (no fence bump, lease unchanged)
            with alice.hold("k") as innermost:
                assert innermost == outer
        assert item(ddb) == held  # leaving the nested holds released nothing
        with pytest.raises(LockHeld) as refused:
            bob.acquire("k")
        assert refused.value.holder == outer.owner
        with pytest.raises(ZeroDivisionError):
            with alice.hold("k"):
                1 / 0
        assert item(ddb) == held  # nor did a nested block that raised

    assert item(ddb) == {"pk": {"S": KEY}, "fence": {"N": "1"}}  # the outer exit did
    with alice.hold("k") as after:  # and a later hold is a new acquisition
        assert after.fence == 2 and after.owner != outer.owner


def test_nested_hold_with_the_enclosing_explicit_owner_is_reentrant_too(alice, bob, ddb):
    with alice.hold("k", owner="job") as outer:
        held = item(ddb)
        with alice.hold("k", owner="job") as inner:
            assert inner == outer and item(ddb) == held
        assert item(ddb) == held  # the inner exit did not release the enclosing hold
        with pytest.raises(LockHeld):
            bob.acquire("k")
    assert "owner" not in item(ddb)


def test_nested_hold_of_another_key_is_a_lock_of_its_own(alice, ddb):
    with alice.hold("k") as outer:
        with alice.hold("k2") as inner:
            assert inner.owner != outer.owner and inner.table_key == "#k2"
            assert item(ddb, "#k2")["owner"] == {"S": inner.owner}
        assert "owner" not in item(ddb, "#k2")
        assert item(ddb)["owner"] == {"S": outer.owner}


def test_hold_by_another_client_is_not_reentrant(alice, make_client):
    other = make_client("alice")  # same client id, different client

    with alice.hold("k"):
        with pytest.raises(LockHeld):
            with other.hold("k"):
                pass


def polling_sleep():
    """(an event set when a client first waits between polls, the sleep that sets it)."""
    polled = threading.Event()

    def sleep(seconds):
        polled.set()
        time.sleep(seconds)

    return polled, sleep


def test_another_thread_of_the_same_client_waits(make_client, ddb):
    polled, sleep = polling_sleep()
    client = make_client("alice", sleep=sleep, monotonic=time.monotonic)
    got = {}

    def other_thread():
        with client.hold("k", wait=10, poll_interval=0.01, max_poll_interval=0.02) as lease:
            got["lease"] = lease

    with client.hold("k") as outer:
        thread = threading.Thread(target=other_thread)
        thread.start()
        assert polled.wait(5), "the other thread never waited"
        assert thread.is_alive() and "lease" not in got
        assert item(ddb)["owner"] == {"S": outer.owner}
    thread.join(5)

    assert not thread.is_alive()
    lease = got["lease"]
    acquisition_of("alice", lease.owner)
    assert (lease.owner != outer.owner, lease.fence) == (True, outer.fence + 1)
    assert item(ddb) == {"pk": {"S": KEY}, "fence": {"N": "2"}}


def test_wait_times_out_with_lock_timeout(alice, make_client, clock, ddb):
    held = alice.acquire("k")
    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        clock.advance(seconds)

    waiter = make_client("bob", sleep=sleep)

    with pytest.raises(LockTimeout) as timeout:
        waiter.acquire("k", wait=0.05, poll_interval=0.01, max_poll_interval=0.02)

    assert timeout.value.error == ERROR_TIMEOUT and timeout.value.holder == held.owner
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

    acquisition_of("bob", lease.owner)
    assert (lease.fence, len(sleeps)) == (2, 2)


def test_wait_acquires_once_the_lease_ends(alice, make_client, clock):
    alice.acquire("k", lease=1)
    waiter = make_client("bob", sleep=lambda seconds: clock.advance(0.6))

    lease = waiter.acquire("k", wait=60, poll_interval=0.01)

    acquisition_of("bob", lease.owner)
    assert (lease.fence, lease.acquired_at) == (2, T0 + 1_200)


# --------------------------------------------------------------------------------------
# Clocks: no client's wall clock decides about another holder's lease
# --------------------------------------------------------------------------------------


def workflow_acquires(ddb, *, now_ms: int, lease_s: float, key: str = KEY) -> str:
    """What a state machine's acquire writes: the protocol's ACQUIRE, judged by the service
    clock (``$millis()`` = ``now_ms``). Returns the acquisition's owner."""
    owner = f"arn:aws:states:us-east-1:123456789012:execution:Main:run-{uuid.uuid4().hex[:6]}#{uuid.uuid4()}"
    write = protocol.ACQUIRE
    ddb.update_item(
        TableName=TABLE, Key={"pk": {"S": key}}, UpdateExpression=write.update,
        ConditionExpression=write.condition, ExpressionAttributeNames=write.attribute_names(),
        ExpressionAttributeValues={
            ":me": {"S": owner}, ":stale": {"S": owner}, ":now": {"N": str(now_ms)},
            ":expiresAt": {"N": str(now_ms + round(lease_s * 1000))}, ":grace": {"N": "5000"}, ":one": {"N": "1"},
        },
    )
    return owner


def test_a_client_11_minutes_ahead_does_not_take_a_running_workflows_lock(make_client, clock, ddb):
    """Issue 17: a client whose clock ran 11 minutes ahead took a running workflow's lock at
    once (its clock said the lease had ended). It now takes it only after watching it unchanged
    for the workflow's lease - when the workflows' own clock says it ended too."""
    workflow = workflow_acquires(ddb, now_ms=clock.now, lease_s=600)  # 10 min on the service clock
    fast = make_client("fast", clock=clock.skewed(11 * 60))

    with pytest.raises(LockHeld) as held:
        fast.acquire("k")
    assert (held.value.holder, held.value.takeover_in) == (workflow, 600)
    clock.advance(599.999)
    with pytest.raises(LockHeld):
        fast.acquire("k")
    assert item(ddb)["owner"] == {"S": workflow}
    clock.advance(0.001)

    lease = fast.acquire("k")

    assert lease.fence == 2
    assert clock.now >= int(held.value.expires_at)  # the service clock agrees: its lease is over


def test_a_client_11_minutes_ahead_never_takes_a_lock_its_holder_renews(make_client, clock, ddb):
    holder = make_client("holder")
    renewed = [holder.acquire("k", lease=30)]

    def holder_renews_meanwhile(seconds):  # every 10 s, while the fast client waits
        before = clock.now
        clock.advance(seconds)
        if before // 10_000 != clock.now // 10_000:
            renewed.append(holder.refresh(renewed[-1], lease=30))

    fast = make_client("fast", clock=clock.skewed(11 * 60), sleep=holder_renews_meanwhile)

    with pytest.raises(LockTimeout) as timeout:
        fast.acquire("k", wait=120)

    assert timeout.value.holder == renewed[0].owner and len(renewed) >= 12
    assert item(ddb)["owner"] == {"S": renewed[0].owner} and renewed[-1].check() > 0


def test_a_renewal_always_moves_expires_at_on(make_client, clock, ddb):
    """What a waiter watches: every renewal writes an ``expiresAt`` the acquisition never had -
    also when the clock stood still or a shorter lease would end sooner (an old value back on
    the item would look unchanged to a waiter that saw it then)."""
    alice = make_client("alice", dynamodb=Undated(ddb))  # its own clock only: exact stamps
    lease = alice.acquire("k", lease=30)
    clock.advance(10)

    first = alice.refresh(lease, lease=20)  # would end when the first lease ended
    again = alice.refresh(first, lease=20)  # the clock stood still
    shorter = alice.refresh(again, lease=5)

    assert [first.expires_at, again.expires_at, shorter.expires_at] == [T0 + 30_001, T0 + 30_002, T0 + 30_003]
    assert item(ddb)["clientLease"] == client_lease(lease.owner, 5)  # a waiter watches 5 s
    assert shorter.check() == pytest.approx(5)  # and so does the holder


def test_a_holder_whose_clock_steps_back_sees_its_lease_end_on_time(make_client, clock, ddb):
    """A holder counts its lease on its monotonic clock: its wall clock stepping back 30 s
    (NTP correcting it) does not make it believe it holds past the moment a waiter - who
    watched the lock from the start - may take it over."""
    step = [0]
    holder = make_client("holder", clock=lambda: clock.now + step[0])
    lease = holder.acquire("k", lease=30)
    waiter = make_client("waiter")
    with pytest.raises(LockHeld):
        waiter.acquire("k")  # watching from the start
    step[0] = -30_000

    clock.advance(28.9)
    assert lease.check() == pytest.approx(0.1)  # 30 s, less 1 s by which AWS's clock may be ahead
    clock.advance(0.1)
    with pytest.raises(LockLost, match=re.escape(f"the lease of lock {KEY!r} (fence 1) ran out")):
        lease.check()  # its wall clock says 30 s are left
    clock.advance(0.999)
    with pytest.raises(LockHeld):
        waiter.acquire("k")
    clock.advance(0.001)

    assert waiter.acquire("k").fence == 2  # now, and not before
    with pytest.raises(LockLost, match="now held by 'waiter#"):
        holder.refresh(lease)
    with pytest.raises(LockLost, match="now held by 'waiter#"):
        lease.check()


def test_a_refresh_after_the_lease_ran_out_proves_nobody_took_it(make_client, clock):
    alice = make_client("alice")
    lease = alice.acquire("k", lease=5)
    clock.advance(6)
    with pytest.raises(LockLost, match="ran out"):
        lease.check()

    alice.refresh(lease, lease=5)  # still the owner: nobody held the lock meanwhile

    assert 3.99 <= lease.check() <= 5  # the leases of one acquisition share its view (less up to 1 s
    # by which AWS's clock may be ahead of the stamp: DynamoDB's Date has whole seconds)


def test_a_client_30_s_behind_keeps_its_lease_against_workflows(make_client, clock, ddb):
    """Issue 17: a client 30 s behind, with a 30 s lease, was taken over by a workflow 0.25 s
    into its block - the workflows judge its ``expiresAt`` by the service clock. Its stamps are
    now held within the bounds DynamoDB's ``Date`` headers put on AWS's clock (its first
    acquisition, stamped before it knew them, is stamped again at once)."""
    slow = make_client("slow", clock=clock.skewed(-30))

    with slow.hold("k", lease=30) as lease:
        assert lease.expires_at == T0 + 31_000  # not T0: from the latest time AWS's clock can show
        for seconds in (0.25, 29.5):
            clock.advance(seconds)
            with pytest.raises(ClientError, match="ConditionalCheckFailed"):
                workflow_acquires(ddb, now_ms=clock.now, lease_s=600)
            assert lease.check() > 0
        clock.advance(0.25)
        with pytest.raises(LockLost, match="ran out"):
            lease.check()  # T0 + 30 s: the holder stops before the workflows may take over
        with pytest.raises(ClientError, match="ConditionalCheckFailed"):
            workflow_acquires(ddb, now_ms=clock.now + 1_000, lease_s=600)  # (T0 + 31 s)
        slow.refresh(lease, lease=30)

    assert "owner" not in item(ddb)


def test_without_aws_time_a_client_30_s_behind_is_taken_over_and_learns_it_at_its_next_step(make_client, clock, ddb):
    """The dependence that remains where DynamoDB's responses carry no ``Date``: a workflow
    judges a client's ``expiresAt`` - stamped with the client's own clock - by the service
    clock. 30 s behind with a 30 s lease, the lock is the workflows' at once; the holder learns
    it at its next step, and its release never touches the workflow's lock."""
    slow = make_client("slow", clock=clock.skewed(-30), dynamodb=Undated(ddb))
    with pytest.raises(LockLost, match="now held by 'arn:aws:states:"):
        with slow.hold("k", lease=30) as lease:
            assert lease.expires_at == T0  # its own clock's
            clock.advance(0.25)
            workflow = workflow_acquires(ddb, now_ms=clock.now, lease_s=600)
            with pytest.raises(LockLost, match=re.escape(f"now held by '{workflow}' with fence 2")):
                slow.refresh(lease, lease=30)  # its next step
            with pytest.raises(LockLost, match=re.escape(f"now held by '{workflow}'")):
                lease.check()  # and every step after it

    assert item(ddb)["owner"] == {"S": workflow}


def test_a_client_takes_over_a_workflows_lock_once_aws_clock_is_past_its_end(make_client, clock, ddb):
    """A workflow's lease is stamped by the service clock: a client judges it by AWS's clock as
    DynamoDB's ``Date`` bounds it (surely past ``expiresAt``), whatever its own clock says - a
    dead workflow's lock (retired by the janitor) is then taken over as soon as the workflows
    would, not after watching it for its whole lease."""
    workflow = workflow_acquires(ddb, now_ms=clock.now, lease_s=3600)
    clock.advance(5)
    ddb.update_item(  # the janitor's retire: the lease ends 8 s after the execution stopped
        TableName=TABLE, Key={"pk": {"S": KEY}}, UpdateExpression=protocol.RETIRE.update,
        ConditionExpression=protocol.RETIRE.condition, ExpressionAttributeNames=protocol.RETIRE.attribute_names(),
        ExpressionAttributeValues={":owner": {"S": workflow}, ":endedAt": {"N": str(clock.now - 3000)}},
    )  # expiresAt = ended + 5 s grace = T0 + 7 s
    behind, ahead = make_client("behind", clock=clock.skewed(-600)), make_client("ahead", clock=clock.skewed(600))

    for client in (behind, ahead):
        with pytest.raises(LockHeld) as held:
            client.acquire("k")
        assert held.value.takeover_in == pytest.approx(2.001)  # by AWS's clock, not its own
    clock.advance(2)
    with pytest.raises(LockHeld):
        ahead.acquire("k")  # T0 + 7 s: not past expiresAt yet

    clock.advance(0.01)  # (its bounds on AWS's clock widen by 100 ppm of their age)
    lease = behind.acquire("k")

    assert lease.fence == 2 and clock.now > T0 + 7_000
    behind.release(lease)
    workflow_acquires(ddb, now_ms=clock.now - 10_000, lease_s=5)  # ended 5 s ago by AWS's clock
    newcomer = make_client("newcomer", clock=clock.skewed(-600))  # knows neither the item nor AWS's time
    assert newcomer.acquire("k").fence == 4  # its refused try tells it both: it takes over at once


# --------------------------------------------------------------------------------------
# Heartbeat (real time: short leases, generous deadlines, no bare sleeps)
# --------------------------------------------------------------------------------------


class Serialized:
    """A DynamoDB client whose requests run one at a time, as DynamoDB's per-item writes do
    (bare moto evaluates a condition and writes without a lock: threads could interleave)."""

    def __init__(self, client) -> None:
        self._client = client
        self._mutex = threading.Lock()

    def __getattr__(self, name):
        method = getattr(self._client, name)

        def call(*args, **kwargs):
            with self._mutex:
                return method(*args, **kwargs)

        return call


def heartbeats() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("LockClient heartbeat")]


@pytest.fixture
def real_time_client(ddb):
    """Clients on real clocks, sharing one serialized connection."""
    connection = Serialized(ddb)

    def make(owner: str, **kwargs) -> LockClient:
        kwargs.setdefault("dynamodb", connection)
        return LockClient(TABLE, owner=owner, **kwargs)

    return make


def rival_thread(client: LockClient, got: dict, done: threading.Event, wait: float) -> threading.Thread:
    def run():
        try:
            got["lease"] = client.acquire("k", wait=wait, poll_interval=0.05, max_poll_interval=0.2)
        except LockError as error:
            got["error"] = error
        finally:
            done.set()

    thread = threading.Thread(target=run, name="rival")
    thread.start()
    return thread


def test_a_heartbeat_keeps_a_hold_longer_than_its_lease(real_time_client, ddb):
    holder, rival = real_time_client("holder"), real_time_client("rival")
    got, done = {}, threading.Event()

    with holder.hold("k", lease=3, heartbeat=True) as lease:
        assert len(heartbeats()) == 1
        thread = rival_thread(rival, got, done, wait=30)
        assert not done.wait(4.5), f"the rival got in during a 4.5 s block with a 3 s lease: {got}"
        assert lease.check() > 0  # renewed meanwhile
        assert item(ddb)["owner"] == {"S": lease.owner}

    assert heartbeats() == []  # stopped with the release
    assert done.wait(30) and got["lease"].fence == lease.fence + 1  # then the rival got it
    thread.join(30)
    rival.release(got["lease"])


def test_without_a_heartbeat_a_hold_longer_than_its_lease_is_taken_over(real_time_client, ddb):
    holder, rival = real_time_client("holder"), real_time_client("rival")
    got, done = {}, threading.Event()

    with pytest.raises(LockLost, match="now held by 'rival#"):
        with holder.hold("k", lease=2) as lease:
            assert heartbeats() == []
            thread = rival_thread(rival, got, done, wait=30)
            assert done.wait(30) and "lease" in got, got  # after watching it unchanged for 2 s
            with pytest.raises(LockLost, match="ran out"):
                lease.check()
    thread.join(30)


def test_a_heartbeat_reports_a_takeover_at_the_holders_next_step(real_time_client, ddb):
    """A client 30 s behind holds with a heartbeat, where no ``Date`` tells it AWS's clock; a
    workflow takes the lock over at once (by the service clock, the client's lease is over).
    The heartbeat's next renewal finds it: the holder's next ``check()`` raises ``LockLost``
    naming the workflow - long before its own lease would run out - and the heartbeat ends."""
    slow = real_time_client("slow", clock=lambda: time.time() * 1000 - 30_000,
                            dynamodb=Undated(Serialized(ddb)))

    with pytest.raises(LockLost, match="now held by 'arn:aws:states:"):
        with slow.hold("k", lease=3, heartbeat=True) as lease:
            workflow = workflow_acquires(ddb, now_ms=int(time.time() * 1000), lease_s=600)
            deadline = time.monotonic() + 30
            while True:
                try:
                    lease.check()
                except LockLost as lost:
                    assert f"now held by '{workflow}'" in str(lost)  # found by a renewal, not run out
                    break
                assert time.monotonic() < deadline, "the heartbeat never reported the takeover"
                threading.Event().wait(0.05)
            assert [t.join(30) for t in heartbeats()] is not None and heartbeats() == []

    assert item(ddb)["owner"] == {"S": workflow}


# --------------------------------------------------------------------------------------
# Every argument is checked before any DynamoDB call
# --------------------------------------------------------------------------------------

LEASE_RANGE = "`lease` must be from 1 ms to 365 days (a timedelta or seconds), got: "
NOT_SECONDS = "must be a timedelta or a number of seconds"
BAD_ACQUIRE_OPTIONS = [
    # lease: no infinity, NaN, absurd length, None, bool or string
    ({"lease": 0}, ValueError, LEASE_RANGE + "0"),
    ({"lease": -1}, ValueError, LEASE_RANGE + "-1"),
    ({"lease": 0.0004}, ValueError, LEASE_RANGE + "0.0004"),  # 0 ms
    ({"lease": math.inf}, ValueError, "`lease` must be a finite number of seconds, got: inf"),
    ({"lease": -math.inf}, ValueError, "`lease` must be a finite number of seconds, got: -inf"),
    ({"lease": math.nan}, ValueError, "`lease` must be a finite number of seconds, got: nan"),
    ({"lease": 1e20}, ValueError, LEASE_RANGE + "1e+20"),
    ({"lease": 10**400}, ValueError, LEASE_RANGE),  # beyond any float
    ({"lease": timedelta(days=366)}, ValueError, LEASE_RANGE + "datetime.timedelta(days=366)"),
    ({"lease": None}, TypeError, f"`lease` {NOT_SECONDS}, got: None"),
    ({"lease": "1"}, TypeError, f"`lease` {NOT_SECONDS}, got: '1'"),
    ({"lease": True}, TypeError, f"`lease` {NOT_SECONDS}, got: True"),
    # wait: math.inf is "as long as it takes" (tested below); anything else must be >= 0
    ({"wait": -1}, ValueError, "`wait` must be 0 or more seconds (math.inf: no limit), got: -1"),
    ({"wait": -math.inf}, ValueError, "`wait` must be a number of seconds, got: -inf"),
    ({"wait": math.nan}, ValueError, "`wait` must be a number of seconds, got: nan"),
    ({"wait": None}, TypeError, f"`wait` {NOT_SECONDS} (math.inf: no limit), got: None"),
    ({"wait": False}, TypeError, "`wait` must be a timedelta"),
    # polling
    ({"poll_interval": 0}, ValueError, "`poll_interval` must be more than 0 and at most 3600 seconds, got: 0"),
    ({"poll_interval": 7200}, ValueError, "`poll_interval` must be more than 0 and at most 3600 seconds"),
    ({"poll_interval": math.nan}, ValueError, "`poll_interval` must be a finite number of seconds, got: nan"),
    ({"poll_interval": math.inf}, ValueError, "`poll_interval` must be a finite number of seconds, got: inf"),
    ({"poll_interval": None}, TypeError, f"`poll_interval` {NOT_SECONDS}, got: None"),
    ({"max_poll_interval": 0.1}, ValueError, "`max_poll_interval` must be from `poll_interval` (0.2) to 3600"),
    ({"max_poll_interval": math.inf}, ValueError, "`max_poll_interval` must be a finite number"),
    ({"max_poll_interval": None}, TypeError, "`max_poll_interval` must be a timedelta"),
    ({"backoff_rate": 0.5}, ValueError, "`backoff_rate` must be a finite number of at least 1, got: 0.5"),
    ({"backoff_rate": math.nan}, ValueError, "`backoff_rate` must be a finite number of at least 1, got: nan"),
    ({"backoff_rate": math.inf}, ValueError, "`backoff_rate` must be a finite number of at least 1, got: inf"),
    ({"backoff_rate": None}, TypeError, "`backoff_rate` must be a number of at least 1, got: None"),
    ({"backoff_rate": True}, TypeError, "`backoff_rate` must be a number of at least 1, got: True"),
    # owner: as the constructor's (the client's own acquisitions are "<client owner>#<uuid4>")
    ({"owner": "x#y"}, ValueError, "`owner` must be a non-empty string without '#', got: 'x#y'"),
    ({"owner": ""}, ValueError, "`owner` must be a non-empty string without '#', got: ''"),
    ({"owner": 42}, TypeError, "`owner` must be a non-empty string without '#', got: 42"),
]


@pytest.mark.parametrize("kwargs, error, message", BAD_ACQUIRE_OPTIONS, ids=lambda v: repr(v)[:40])
def test_bad_acquire_and_hold_arguments_raise_typed_errors_without_any_dynamodb_call(kwargs, error, message):
    stub = RecordingStub()
    client = LockClient(TABLE, dynamodb=stub, owner="alice")

    for call in (lambda: client.acquire("k", **kwargs), lambda: client.hold("k", **kwargs).__enter__()):
        with pytest.raises(error, match=re.escape(message)):
            call()
    assert stub.calls == []


@pytest.mark.parametrize("heartbeat", [None, 1, "yes"])
def test_hold_refuses_a_heartbeat_that_is_not_a_bool(heartbeat):
    stub = RecordingStub()
    client = LockClient(TABLE, dynamodb=stub, owner="alice")

    with pytest.raises(TypeError, match=re.escape(f"`heartbeat` must be True or False, got: {heartbeat!r}")):
        client.hold("k", heartbeat=heartbeat).__enter__()
    assert stub.calls == []


@pytest.mark.parametrize("lease, error, message", [
    (math.inf, ValueError, "`lease` must be a finite number of seconds, got: inf"),
    (math.nan, ValueError, "`lease` must be a finite number of seconds, got: nan"),
    (1e20, ValueError, LEASE_RANGE + "1e+20"),
    (0, ValueError, LEASE_RANGE + "0"),
    (None, TypeError, f"`lease` {NOT_SECONDS}, got: None"),
    (False, TypeError, f"`lease` {NOT_SECONDS}, got: False"),
])
def test_bad_refresh_lease_raises_a_typed_error_without_any_dynamodb_call(lease, error, message):
    stub = RecordingStub()
    client = LockClient(TABLE, dynamodb=stub, owner="alice")
    held = Lease(key="k", table_key=KEY, owner="alice#1", fence=1, acquired_at=T0, expires_at=T0 + 1)

    with pytest.raises(error, match=re.escape(message)):
        client.refresh(held, lease=lease)
    assert stub.calls == []


@pytest.mark.parametrize("not_a_lease", [None, "alice#1", {"owner": "alice#1"}])
def test_release_and_refresh_of_something_else_than_a_lease_raise_type_error(not_a_lease):
    stub = RecordingStub()
    client = LockClient(TABLE, dynamodb=stub, owner="alice")

    for call in (lambda: client.release(not_a_lease), lambda: client.refresh(not_a_lease)):
        with pytest.raises(TypeError, match=re.escape(f"`lease` must be a Lease (from acquire(), hold() or refresh()), got: {not_a_lease!r}")):
            call()
    assert stub.calls == []


@pytest.mark.parametrize("options, error, message", [
    ({"table_name": None}, TypeError, "`table_name` must be a non-empty string, got: None"),
    ({"table_name": ""}, ValueError, "`table_name` must be a non-empty string, got: ''"),
    ({"owner": 7}, TypeError, "`owner` must be a non-empty string without '#', got: 7"),
    ({"fair": "yes"}, TypeError, "`fair` must be True or False, got: 'yes'"),
    ({"fair": None}, TypeError, "`fair` must be True or False, got: None"),
    ({"claim_window": math.nan}, ValueError, "`claim_window` must be a finite number of seconds, got: nan"),
    ({"claim_window": math.inf}, ValueError, "`claim_window` must be a finite number of seconds, got: inf"),
    ({"claim_window": -1}, ValueError, "`claim_window` must be from 0 to 3600 seconds, got: -1"),
    ({"claim_window": None}, TypeError, f"`claim_window` {NOT_SECONDS}, got: None"),
    ({"clock": 5}, TypeError, "`clock` must be a function returning epoch milliseconds or None, got: 5"),
    ({"monotonic": "now"}, TypeError, "`monotonic` must be a function returning seconds or None, got: 'now'"),
    ({"sleep": 0.1}, TypeError, "`sleep` must be a function taking seconds or None, got: 0.1"),
    ({"dynamodb": "locks"}, TypeError, "`dynamodb` must be a boto3 dynamodb client (boto3.client('dynamodb'))"),
    ({"stepfunctions": 1}, TypeError, "`stepfunctions` must be a boto3 stepfunctions client"),
])
def test_bad_client_arguments_raise_typed_errors(options, error, message):
    options = {"table_name": TABLE, **options}

    with pytest.raises(error, match=re.escape(message)):
        LockClient(options.pop("table_name"), **options)


def test_a_boto3_resource_is_refused_where_a_client_is_expected():
    resource = boto3.resource("dynamodb")  # the natural mistake (no call is made)

    for given in (resource, resource.Table(TABLE)):
        with pytest.raises(TypeError, match=re.escape("`dynamodb` must be a boto3 dynamodb client")):
            LockClient(TABLE, dynamodb=given)


def test_bad_arguments_of_the_fair_helpers_raise_typed_errors_without_any_dynamodb_call():
    stub = RecordingStub()
    client = LockClient(TABLE, dynamodb=stub, owner="alice", fair=True)

    for call, error, message in [
        (lambda: client.handoff(KEY, me="x", served=True, fence=None), TypeError, "`served` must be an integer"),
        (lambda: client.handoff(KEY, me="x", served=-1, fence=None), ValueError, "`served` must be an integer of at least 0"),
        (lambda: client.handoff(KEY, me="x", served=1, fence=0), ValueError, "`fence` must be an integer of at least 1"),
        (lambda: client.handoff(KEY, me="x", served=1, fence=None, hole_s=math.nan), ValueError, "`hole_s` must be a finite"),
        (lambda: client.handoff(KEY, me=None, served=1, fence=None), TypeError, "`me` must be a non-empty string"),
        (lambda: client.handoff("", me="x", served=1, fence=None), ValueError, "`table_key` must be a non-empty string"),
        (lambda: client.leave_queue("#k", "x"), ValueError, "`row_key` must be a fair queue row's key"),
        (lambda: client.leave_queue(None, "x"), TypeError, "`row_key` must be a non-empty string"),
        (lambda: client.claim("k", KEY, "x", 0), ValueError, "`ticket` must be an integer of at least 1"),
        (lambda: client.claim("k", KEY, "x", 1.5), TypeError, "`ticket` must be an integer"),
    ]:
        with pytest.raises(error, match=re.escape(message)):
            call()
    assert stub.calls == []


def test_a_lease_is_still_a_plain_value(alice):
    lease = alice.acquire("k")

    assert dataclasses.asdict(lease)["fence"] == 1  # (its holder's view is not copied)
    assert dataclasses.replace(lease, key="other").check() > 0  # nor lost by a copy
    assert "holding" not in repr(lease)


def test_a_check_of_a_lease_built_by_hand_is_refused():
    hand_made = Lease(key="k", table_key=KEY, owner="alice#1", fence=1, acquired_at=T0, expires_at=T0 + 1)

    with pytest.raises(ValueError, match=re.escape("`lease` must come from LockClient.acquire(), hold() or refresh()")):
        hand_made.check()


def test_wait_forever_waits_until_the_lock_is_free(alice, make_client, clock):
    """``wait=math.inf`` is "as long as it takes" (it raised OverflowError): many polls with a
    steep backoff, no deadline, then the lock - for hold() too."""
    held = alice.acquire("k", lease=timedelta(days=1))
    polls = []

    def sleep(seconds):
        polls.append(seconds)
        clock.advance(seconds)
        if len(polls) == 40:  # 1e10 ** 39 is no float any more: the backoff must not compute it
            alice.release(held)

    waiter = make_client("bob", sleep=sleep)
    lease = waiter.acquire("k", wait=math.inf, poll_interval=0.1, max_poll_interval=2, backoff_rate=1e10)

    assert lease.fence == 2 and len(polls) == 40 and max(polls) <= 2
    waiter.release(lease)
    # (released by the sleep above after 40 polls; a day's lease: 40 polls of 1-2 s could
    # outlast the default 60 s one, and the waiter would take it over a poll early)
    held = alice.acquire("k", lease=timedelta(days=1))
    polls.clear()
    with waiter.hold("k", wait=math.inf, poll_interval=0.1, max_poll_interval=2, backoff_rate=1e10) as inside:
        assert inside.fence == 4 and len(polls) == 40


# --------------------------------------------------------------------------------------
# Re-entrancy follows the flow of control: asyncio tasks, threads, generators
# (each probe on both DynamoDB backends)
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dynamodb_local():
    """One DynamoDB Local server for the module, with the lock table (tests use keys of their own)."""
    from locked_workflow.testing.dynamodb_local import DynamoDBLocal
    from locked_workflow.testing.pytest_plugin import require_backend

    require_backend("dynamodb-local")
    with DynamoDBLocal() as server:
        client = server.client()
        client.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


@pytest.fixture(params=["moto", "dynamodb-local"])
def backend(request, clock):
    """``(make_client, ddb, key)`` on either DynamoDB backend; ``key`` is new for each test."""
    ddb = request.getfixturevalue("ddb" if request.param == "moto" else "dynamodb_local")

    def make(owner: str = "alice", **kwargs) -> LockClient:
        return LockClient(TABLE, owner=owner, dynamodb=ddb, clock=clock, **kwargs)

    return make, ddb, f"flow-{uuid.uuid4().hex[:8]}"


class Probe:
    """What critical sections see: holders inside at entry (a correct lock always sees 1), the
    fences, and a read-modify-write counter (equal to the writes when no update is lost)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self.inside = 0
        self.inside_at_entry: list[int] = []
        self.fences: list[int] = []
        self.counter = 0
        self.writes = 0

    def enter(self, lease: Lease) -> int:
        with self._mutex:
            self.inside += 1
            self.inside_at_entry.append(self.inside)
            self.fences.append(lease.fence)
        return self.counter  # the read

    def leave(self, read: int) -> None:
        self.counter = read + 1  # the write
        with self._mutex:
            self.writes += 1
            self.inside -= 1

    def assert_serialized(self, sections: int) -> None:
        assert self.inside_at_entry == [1] * sections, self.inside_at_entry
        assert self.fences == sorted(set(self.fences)) and len(self.fences) == sections, self.fences
        assert self.counter == self.writes == sections


def free_with_fence(ddb, key: str, fence: int) -> dict:
    return {"pk": {"S": f"#{key}"}, "fence": {"N": str(fence)}}


def test_two_asyncio_tasks_take_turns(backend):
    """Two tasks share a thread: the second's hold() must not pass into the first's block."""
    make, ddb, key = backend
    sleeps = []
    client = make(sleep=sleeps.append)
    probe, refused, holders = Probe(), [], []

    async def main():
        entered, tried = asyncio.Event(), asyncio.Event()

        async def first():
            with client.hold(key) as lease:
                holders.append(lease.owner)
                read = probe.enter(lease)
                entered.set()
                await tried.wait()  # the other task tries while this one is inside
                probe.leave(read)

        async def second():
            await entered.wait()
            while True:
                try:
                    with client.hold(key, wait=30) as lease:
                        tried.set()
                        read = probe.enter(lease)
                        await asyncio.sleep(0)
                        probe.leave(read)
                        return
                except LockHeldInThisThread as error:
                    refused.append(error)
                    tried.set()
                    await asyncio.sleep(0.01)  # a task waits by awaiting, then tries again

        await asyncio.wait_for(asyncio.gather(first(), second()), 60)

    asyncio.run(main())

    probe.assert_serialized(2)
    assert refused and sleeps == []  # refused at once: no blocking wait on the event loop's thread
    assert {error.holder for error in refused} == {holders[0]}
    assert item(ddb, f"#{key}") == free_with_fence(ddb, key, 2)


def test_two_threads_of_one_client_take_turns(backend):
    make, ddb, key = backend
    polled, sleep = polling_sleep()
    client = make(sleep=sleep)
    probe, entered, errors = Probe(), threading.Event(), []

    def first():
        with client.hold(key) as lease:
            read = probe.enter(lease)
            entered.set()
            assert polled.wait(30), "the other thread never waited"
            probe.leave(read)

    def second():
        assert entered.wait(30)
        with client.hold(key, wait=30, poll_interval=0.01, max_poll_interval=0.05) as lease:
            probe.leave(probe.enter(lease))

    def run(target):
        try:
            target()
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(t,)) for t in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert errors == [] and not any(t.is_alive() for t in threads)
    probe.assert_serialized(2)
    assert item(ddb, f"#{key}") == free_with_fence(ddb, key, 2)


def test_a_generator_suspended_inside_its_hold_keeps_the_lock_to_itself(backend):
    """The caller of a generator suspended in a ``with hold()`` block is not inside that block;
    the generator is, wherever it is resumed."""
    make, ddb, key = backend
    client = make()

    def steps():
        with client.hold(key) as outer:
            yield outer
            with client.hold(key) as inner:  # its own nested hold: re-entrant
                yield inner

    def resume_on_another_thread(generator):
        got = {}
        thread = threading.Thread(target=lambda: got.setdefault("value", next(generator, None)))
        thread.start()
        thread.join(30)
        assert not thread.is_alive()
        return got["value"]

    generator = steps()
    outer = next(generator)
    with pytest.raises(LockHeldInThisThread):
        with client.hold(key):
            pytest.fail("passed into the block of a suspended generator")

    inner = resume_on_another_thread(generator)  # resumed elsewhere

    assert inner == outer  # the generator's nested hold re-entered its own
    with pytest.raises(LockHeldInThisThread):  # (the thread that took the lock)
        with client.hold(key):
            pytest.fail("passed into the block of a generator suspended on another thread")
    assert item(ddb, f"#{key}")["owner"] == {"S": outer.owner}
    assert resume_on_another_thread(generator) is None  # it ends there: and releases
    assert item(ddb, f"#{key}") == free_with_fence(ddb, key, 1)


def test_a_task_created_inside_a_hold_does_not_pass_into_it(backend):
    make, ddb, key = backend
    client = make()
    probe, refused = Probe(), []

    async def child():
        try:
            with client.hold(key, wait=30) as lease:
                probe.leave(probe.enter(lease))
        except LockHeldInThisThread as error:
            refused.append(error)

    async def main():
        with client.hold(key) as lease:
            read = probe.enter(lease)
            await asyncio.wait_for(asyncio.create_task(child()), 60)  # concurrent with its parent
            probe.leave(read)
        return lease

    parent = asyncio.run(main())

    probe.assert_serialized(1)
    assert [error.holder for error in refused] == [parent.owner]
    assert item(ddb, f"#{key}") == free_with_fence(ddb, key, 1)


def test_a_thread_with_a_copy_of_the_context_waits_for_the_hold(backend):
    """``asyncio.to_thread`` runs in a copy of the caller's context: still another flow, so it
    waits for the parent's release (the parent must not await it inside the hold)."""
    make, ddb, key = backend
    polled, sleep = polling_sleep()
    client = make(sleep=sleep)
    probe = Probe()

    def child():
        with client.hold(key, wait=30, poll_interval=0.01, max_poll_interval=0.05) as lease:
            probe.leave(probe.enter(lease))

    async def main():
        with client.hold(key) as lease:
            read = probe.enter(lease)
            waiting = asyncio.create_task(asyncio.to_thread(child))
            assert await asyncio.to_thread(polled.wait, 30), "the child never waited"
            probe.leave(read)
        await asyncio.wait_for(waiting, 60)

    asyncio.run(main())

    probe.assert_serialized(2)
    assert item(ddb, f"#{key}") == free_with_fence(ddb, key, 2)


def test_wrapping_hold_in_a_context_manager_keeps_nesting_reentrant(backend):
    """``@contextmanager`` wrappers, ``ExitStack`` and the decorator form belong to the ``with``
    statement that uses them: nested, they re-enter."""
    make, ddb, key = backend
    client = make()

    @contextlib.contextmanager
    def customer_lock():
        with client.hold(key) as lease:
            yield lease

    @client.hold(key)
    def decorated():
        with client.hold(key) as lease:
            return lease

    with customer_lock() as outer:
        with customer_lock() as inner, contextlib.ExitStack() as stack:
            innermost = stack.enter_context(client.hold(key))
            with client.hold(key) as under_the_stack:
                nested = {inner, innermost, under_the_stack}
        held = item(ddb, f"#{key}")

    assert nested == {outer} and held["owner"] == {"S": outer.owner}
    assert item(ddb, f"#{key}") == free_with_fence(ddb, key, 1)
    assert decorated().fence == 2 and item(ddb, f"#{key}") == free_with_fence(ddb, key, 2)


def test_a_nested_block_that_outlives_its_enclosing_hold_raises_lock_lost(backend):
    make, ddb, key = backend
    client = make()

    def nested():
        with client.hold(key) as lease:  # re-enters the caller's block
            yield lease

    with client.hold(key) as outer:
        generator = nested()
        assert next(generator) == outer
    assert item(ddb, f"#{key}") == free_with_fence(ddb, key, 1)  # the enclosing block released

    with pytest.raises(LockLost, match="ran partly without the lock"):
        next(generator)  # the nested block ends now: it was not covered to its end
    with client.hold(key) as later:  # and nothing of it is left behind
        assert later.fence == 2


def test_generators_interleaved_inside_one_hold_do_not_share_it(backend):
    """Two generators that the block runs side by side are beside each other, not nested."""
    make, ddb, key = backend
    client = make()

    def section():
        with client.hold(key) as lease:
            yield lease

    with client.hold(key) as outer:
        first = section()
        assert next(first) == outer  # nested in the block: re-entrant
        second = section()
        with pytest.raises(LockHeldInThisThread):
            next(second)  # the first is suspended inside its nested block
        assert next(first, None) is None  # the first leaves its block
        third = section()
        assert next(third) == outer  # nothing beside any more
        third.close()
        assert item(ddb, f"#{key}")["owner"] == {"S": outer.owner}
    assert item(ddb, f"#{key}") == free_with_fence(ddb, key, 1)


# ---- the client's kind, as a value --------------------------------------------------------


def test_a_client_takes_its_kind_as_a_value_the_way_the_constructs_do(make_client):
    """``kind=LockClient.FAIR`` / ``READ_WRITE`` / ``MUTEX`` (the default), or the workflows'
    own ``Lock`` value on the same keys: no deprecated flag, no warning."""
    import warnings

    from locked_workflow import Lock
    from locked_workflow.constructs_lib.client_kind import ClientKind

    key = "{% $states.input.k %}"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the kind spelling warns of nothing
        chosen = {
            LockClient.MUTEX: [LockClient(TABLE), LockClient(TABLE, kind=LockClient.MUTEX),
                               LockClient(TABLE, kind=Lock.mutex(key))],
            LockClient.FAIR: [LockClient(TABLE, kind=LockClient.FAIR), LockClient(TABLE, kind=Lock.fair(key)),
                              LockClient(TABLE, kind=Lock.fair(key, polling=True))],
            LockClient.READ_WRITE: [LockClient(TABLE, kind=LockClient.READ_WRITE),
                                    LockClient(TABLE, kind=Lock.shared(key)), LockClient(TABLE, kind=Lock.exclusive(key))],
        }
    assert set(chosen) == set(ClientKind)
    for kind, clients in chosen.items():
        for client in clients:
            assert client.kind is kind
            assert (client.fair, client.read_write) == (kind is LockClient.FAIR, kind is LockClient.READ_WRITE)
    # the kind is the client's protocol: two readers share a key only on a read/write client
    readers = [make_client(name, kind=Lock.shared(key)) for name in ("r1", "r2")]
    leases = [reader.acquire("k", shared=True) for reader in readers]
    assert all(lease.shared for lease in leases)
    with pytest.raises(ValueError, match=re.escape("`shared` must be False on a client")):
        make_client("m", kind=LockClient.MUTEX).acquire("k2", shared=True)


def test_a_kind_the_client_cannot_serve_is_a_typed_error():
    import aws_cdk as cdk
    from aws_cdk import aws_dynamodb as dynamodb

    from locked_workflow import Lock
    from locked_workflow.constructs_lib.lock_client import LockError, LockKindNotServed

    key = "{% $states.input.k %}"
    records = dynamodb.Table(cdk.Stack(cdk.App(), "S"), "Records", partition_key=dynamodb.Attribute(
        name="id", type=dynamodb.AttributeType.STRING))
    for lock in (Lock.semaphore(key, limit=2), Lock.keys(key), Lock.on_record(records, key),
                 Lock.rate(key, limit=2)):
        with pytest.raises(LockKindNotServed, match=re.escape(f"got: Lock.{lock.factory}")) as refused:
            LockClient(TABLE, kind=lock)
        assert isinstance(refused.value, ValueError) and isinstance(refused.value, LockError)
        assert str(refused.value).startswith("`kind` must be a lock kind a LockClient takes part in")
    assert "LockClient.admit" in str(refused.value)  # a rate limit's permits: any client's admit()
    for wrong in ("fair", True, Lock):
        with pytest.raises(TypeError, match=re.escape(f"`kind` must be LockClient.MUTEX, LockClient.FAIR, "
                                                      f"LockClient.READ_WRITE or a Lock value, got: {wrong!r}")):
            LockClient(TABLE, kind=wrong)


def test_the_deprecated_flags_still_choose_the_kind_with_a_warning():
    with pytest.warns(DeprecationWarning, match=re.escape("`fair=True` is deprecated: use kind=LockClient.FAIR")):
        assert LockClient(TABLE, fair=True).kind is LockClient.FAIR
    with pytest.warns(DeprecationWarning, match=re.escape("`read_write=True` is deprecated: use kind=LockClient.READ_WRITE")):
        assert LockClient(TABLE, read_write=True).kind is LockClient.READ_WRITE
    with pytest.raises(ValueError, match=re.escape("`fair` must be False with `kind` (the kind says it), got: True")):
        LockClient(TABLE, kind=LockClient.FAIR, fair=True)
    with pytest.raises(ValueError, match=re.escape("`read_write` must be False with `kind` (the kind says it), got: True")):
        LockClient(TABLE, kind=LockClient.MUTEX, read_write=True)
