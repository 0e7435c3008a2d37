"""The LockClient and the clocks: no client's wall clock decides about another holder's lease
(AWS's clock, read from DynamoDB's ``Date`` headers, bounds it)."""

from __future__ import annotations

import re

import pytest
from botocore.exceptions import ClientError

from locked_workflow.constructs_lib.lock_client import LockHeld, LockLost, LockTimeout
from locked_workflow.state_machines import lock_protocol as protocol
from lock_client_fakes import KEY, T0, TABLE, Undated, client_lease, item, workflow_acquires

pytestmark = pytest.mark.usefixtures("offline_aws_env")


# --------------------------------------------------------------------------------------
# Clocks: no client's wall clock decides about another holder's lease
# --------------------------------------------------------------------------------------


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

