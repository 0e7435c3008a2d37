"""What the LockClient tests fake and read: a clock moved by hand, DynamoDB ``Date`` headers on
that clock (or none), the lock table's items, and a takeover as a client performs it."""

from __future__ import annotations

import threading
import time
import uuid
from email.utils import formatdate

import pytest
from botocore.exceptions import ClientError

from locked_workflow.constructs_lib.lock_client import Lease, LockClient, LockHeld
from locked_workflow.state_machines import lock_protocol as protocol


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


def polling_sleep():
    """(an event set when a client first waits between polls, the sleep that sets it)."""
    polled = threading.Event()

    def sleep(seconds):
        polled.set()
        time.sleep(seconds)

    return polled, sleep


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
