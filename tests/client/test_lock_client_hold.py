"""The LockClient's refresh, ``hold`` (re-entrant in one flow of control), waits, and heartbeat
(real time: short leases, generous deadlines, no bare sleeps)."""

from __future__ import annotations

import re
import threading
import time
from datetime import timedelta

import pytest

from locked_workflow.constructs_lib.lock_client import (
    LockClient,
    LockError,
    LockHeld,
    LockLost,
    LockTimeout,
)
from locked_workflow.state_machines.lock_protocol import ERROR_TIMEOUT
from lock_client_fakes import (
    AWS_CLOCK_WIDTH_MS,
    KEY,
    T0,
    TABLE,
    Undated,
    acquisition_of,
    item,
    polling_sleep,
    take_over,
    workflow_acquires,
)

pytestmark = pytest.mark.usefixtures("offline_aws_env")


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

