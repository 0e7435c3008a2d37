"""The LockClient refuses bad keys and arguments with typed errors before any DynamoDB call, and
takes its kind as a value the way the constructs do."""

from __future__ import annotations

import dataclasses
import math
import re
from datetime import timedelta

import boto3
import pytest
from botocore.exceptions import ClientError

from locked_workflow.constructs_lib.lock_client import InvalidLockKey, Lease, LockClient, LockError
from locked_workflow.state_machines.lock_protocol import ERROR_INVALID_KEY, MAX_KEY_BYTES
from lock_client_fakes import KEY, T0, TABLE, FakeClock, item

pytestmark = pytest.mark.usefixtures("offline_aws_env")


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

