"""A fair queue place given up (``LockClient.leave_queue``: a waiter giving up, the janitor for
an ended execution's parks) must never put back a row a handoff took meanwhile. LEAVE's
condition admits a row that is gone (a hole's: a waiter whose park never applied must leave a
mark), so a leave that found the row there and wrote LEAVE after a handoff's TAKE deleted it left
the row ``{owner, left}`` in the queue for good, at a ticket the handoff was deciding - granted
or passed - which nobody reads or deletes again. ``leave_queue`` writes LEAVE_PRESENT: refused
once the row is gone, and the leaver then reads the lock item as a taken row means (granted to
it: it claims the grant). Each test on both DynamoDB backends; the handoff's TAKE (and GRANT) is
placed just before the leave's write lands."""

from __future__ import annotations

import uuid
from typing import Callable

import pytest
from botocore.exceptions import ClientError

from locked_workflow.constructs_lib.lock_client import LockClient
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import shared_protocol as shared
from locked_workflow.state_machines.lock_item import lock_item_key
from lock_client_fakes import TABLE

pytestmark = pytest.mark.usefixtures("offline_aws_env")

#: The holder's lease end (epoch ms): held throughout, so the leave hands nothing on.
HELD_UNTIL = 2**42


@pytest.fixture(params=["moto", "dynamodb-local"])
def queue(request):
    """``(ddb, table_key, row_key)`` on either backend: the lock ``table_key`` held by ticket 1
    (``holder``) and the row of ticket 2 parked by ``w`` on a task token (a workflow waiter).
    Hooks a test registers on ``ddb`` (``request.node.hooks``) are removed after it (the
    DynamoDB Local client is the module's)."""
    ddb = request.getfixturevalue("ddb" if request.param == "moto" else "dynamodb_local")
    table_key = f"f#customer-{uuid.uuid4().hex[:8]}"
    row_key = fair.row_key(table_key, 2)
    ddb.put_item(TableName=TABLE, Item={**lock_item_key(table_key), "owner": {"S": "holder"},
                                        "acquiredAt": {"N": "1"}, "expiresAt": {"N": str(HELD_UNTIL)},
                                        "fence": {"N": "1"}, "served": {"N": "1"}, "tickets": {"N": "2"}})
    ddb.put_item(TableName=TABLE, Item={**lock_item_key(row_key), "owner": {"S": "w"},
                                        fair.TOKEN: {"S": "task-token-of-w"}, fair.LEASE: {"N": "60000"},
                                        fair.GRACE_MS: {"N": "0"}})
    request.node.hooks = []
    yield ddb, table_key, row_key
    for event, handler in request.node.hooks:
        ddb.meta.events.unregister(event, handler)


def _before_the_leave_lands(request, ddb, row_key: str, then: Callable[[], None]) -> list[str]:
    """Run ``then`` (a handoff's steps) once: just after the leaver's read of ``row_key``, if it
    reads it (``leave_queue`` did, before LEAVE_PRESENT), else just before its first write of it
    is sent. Returns what it fired on (one row key: the hook fired)."""
    fired: list[str] = []
    reading: list[bool] = []

    def fire(**_) -> None:
        if not fired:
            fired.append(row_key)
            then()

    def before(params, **_) -> None:
        reading[:] = [params.get("Key") == lock_item_key(row_key)]

    def after_read(**_) -> None:
        if reading and reading[0]:
            fire()

    def before_write(params, **_) -> None:
        if params.get("Key") == lock_item_key(row_key):
            fire()

    for event, handler in (("before-parameter-build.dynamodb.GetItem", before), ("after-call.dynamodb.GetItem", after_read),
                           ("before-parameter-build.dynamodb.UpdateItem", before_write)):
        ddb.meta.events.register(event, handler)
        request.node.hooks.append((event, handler))
    return fired


def _take(ddb, row_key: str) -> Callable[[], None]:
    """The handoff's TAKE: a DeleteItem of the row, returning it (it must have been parked)."""
    def take() -> None:
        taken = ddb.delete_item(TableName=TABLE, Key=lock_item_key(row_key), ReturnValues="ALL_OLD")["Attributes"]
        assert fair.TOKEN in taken  # the handoff took a parked row
    return take


def _row(ddb, row_key: str) -> dict | None:
    return ddb.get_item(TableName=TABLE, Key=lock_item_key(row_key), ConsistentRead=True).get("Item")


def _janitor(ddb) -> LockClient:
    return LockClient(TABLE, owner="janitor", dynamodb=ddb, fair=True)


def test_a_leave_never_puts_back_a_parked_row_a_handoff_took(request, queue):
    """The janitor leaves for ``w`` (stopped while parked) as the holder's release takes ``w``'s
    row: the row stays gone (before: ``{owner: w, left: 1}`` back at ticket 2, for good)."""
    ddb, table_key, row_key = queue
    fired = _before_the_leave_lands(request, ddb, row_key, _take(ddb, row_key))
    assert _janitor(ddb).leave_queue(row_key, "w") is None
    assert fired == [row_key]
    assert _row(ddb, row_key) is None
    assert ddb.get_item(TableName=TABLE, Key=lock_item_key(table_key))["Item"]["owner"] == {"S": "holder"}


def test_a_leave_whose_row_was_taken_and_granted_claims_the_grant(request, queue):
    """What a taken row means: the handoff granted ``w`` (TAKE, then GRANT) before the leave's
    write; the refused leave reads the lock item, finds the grant and claims it for ``w``."""
    ddb, table_key, row_key = queue
    take = _take(ddb, row_key)

    def take_and_grant() -> None:
        take()
        _grant_to_w(ddb, table_key, confirmed=False)

    fired = _before_the_leave_lands(request, ddb, row_key, take_and_grant)
    lease = _janitor(ddb).leave_queue(row_key, "w")
    assert fired == [row_key]
    assert lease is not None and lease.owner == "w" and lease.fence == 2
    assert fair.HANDED not in ddb.get_item(TableName=TABLE, Key=lock_item_key(table_key))["Item"]  # claimed
    assert _row(ddb, row_key) is None


def test_a_late_leave_of_a_waiter_that_had_left_never_puts_back_a_row_a_handoff_took(request, queue):
    """The janitor's hand-on of a waiter that had left by itself, arriving as a handoff takes
    (skips) its row (seen in the fresh-clone suite, fc13)."""
    ddb, _, row_key = queue
    ddb.put_item(TableName=TABLE, Item={**lock_item_key(row_key), "owner": {"S": "w"}, fair.LEFT: {"N": "1"}})
    fired = _before_the_leave_lands(request, ddb, row_key, lambda: ddb.delete_item(
        TableName=TABLE, Key=lock_item_key(row_key)))
    assert _janitor(ddb).leave_queue(row_key, "w") is None
    assert fired == [row_key] and _row(ddb, row_key) is None


def test_negative_control_a_parked_row_still_there_is_marked_left(queue):
    """Nobody takes the row: the leave marks it left (the handoff then skips it)."""
    ddb, _, row_key = queue
    assert _janitor(ddb).leave_queue(row_key, "w") is None
    row = _row(ddb, row_key)
    assert row is not None and row[fair.LEFT] == {"N": "1"} and fair.TOKEN not in row and row["owner"] == {"S": "w"}


def test_another_waiters_row_is_not_marked(queue):
    ddb, _, row_key = queue
    assert _janitor(ddb).leave_queue(row_key, "someone-else") is None
    assert fair.LEFT not in _row(ddb, row_key)


@pytest.mark.parametrize("write, creates", [(fair.LEAVE, True), (fair.LEAVE_PRESENT, False), (shared.DEQUEUE, False)],
                         ids=["LEAVE", "LEAVE_PRESENT", "DEQUEUE"])
def test_only_the_hole_leave_writes_a_row_that_is_not_there(queue, write, creates):
    """The leaves on a ticket with no row (a hole, or a row a handoff took): LEAVE marks it (a
    waiter whose park never applied leaves a hole the handoff must skip at once - the
    workflows' Leave, the read/write client's); LEAVE_PRESENT and the read/write janitor's
    DEQUEUE (``owner = :me``: only a row that waiter parked on) are refused and write nothing.
    The race above, with LEAVE, is this very write."""
    ddb, table_key, _ = queue
    hole = fair.row_key(table_key, 3)
    args = fair.arguments(hole, write, {":me": {"S": "w3"}, ":one": {"N": "1"}})
    try:
        ddb.update_item(TableName=TABLE, **args)
        applied = True
    except ClientError as error:
        assert error.response["Error"]["Code"] == "ConditionalCheckFailedException"
        applied = False
    assert applied is creates
    assert _row(ddb, hole) == ({**lock_item_key(hole), "owner": {"S": "w3"}, fair.LEFT: {"N": "1"}} if creates else None)


def _grant_to_w(ddb, table_key: str, *, confirmed: bool) -> None:
    """The holder's handoff granted ticket 2 to ``w`` (GRANT: ``handed`` = holder); ``confirmed``:
    ``w`` confirmed it since (CLAIM removed ``handed``) - a redriven run of ``w`` at work."""
    ddb.update_item(TableName=TABLE, Key=lock_item_key(table_key),
                    UpdateExpression="SET #o = :w, #s = :two, #h = :holder, #x = :until ADD #f :one",
                    ExpressionAttributeNames={"#o": "owner", "#s": fair.SERVED, "#h": fair.HANDED,
                                              "#x": "expiresAt", "#f": "fence"},
                    ExpressionAttributeValues={":w": {"S": "w"}, ":two": {"N": "2"}, ":holder": {"S": "holder"},
                                               ":until": {"N": str(HELD_UNTIL)}, ":one": {"N": "1"}})
    if confirmed:
        ddb.update_item(TableName=TABLE, **{k: v for k, v in fair.arguments(
            table_key, fair.CLAIM, {":me": {"S": "w"}, ":ticket": {"N": "2"}}).items() if k != "ReturnValues"})


def _lock(ddb, table_key: str) -> dict:
    return ddb.get_item(TableName=TABLE, Key=lock_item_key(table_key), ConsistentRead=True)["Item"]


def test_the_janitors_leave_takes_back_an_unconfirmed_grant(request, queue):
    """The janitor (``ended``) for ``w``, granted as its row was taken and never confirmed: the
    grant is taken back (DROP_GRANT: the lock freed, never claimed), nobody else queues."""
    ddb, table_key, row_key = queue
    take = _take(ddb, row_key)
    fired = _before_the_leave_lands(request, ddb, row_key,
                                    lambda: (take(), _grant_to_w(ddb, table_key, confirmed=False)))
    assert _janitor(ddb).leave_queue(row_key, "w", ended=True) is None
    item = _lock(ddb, table_key)
    assert fired == [row_key] and "owner" not in item and fair.HANDED not in item, item
    assert fair.counters(item) == (2, 2) and _row(ddb, fair.row_key(table_key, 3)) is None  # no mark: no ticket out


def test_the_janitors_leave_never_takes_a_grant_its_redriven_waiter_confirmed(queue):
    """Issue 25: ``w`` (ended, then redriven) confirmed its grant and works under it when the
    janitor's event for its first end comes: the grant stays ``w``'s - nothing claimed, nothing
    handed on. The negative control: CLAIM cannot tell (idempotent), so the janitor that claimed
    for ``w`` got the lease - and released it beside ``w``'s work."""
    ddb, table_key, row_key = queue
    ddb.delete_item(TableName=TABLE, Key=lock_item_key(row_key))  # taken by the grant's handoff
    _grant_to_w(ddb, table_key, confirmed=True)
    held = _lock(ddb, table_key)
    assert _janitor(ddb).leave_queue(row_key, "w", ended=True) is None
    assert _lock(ddb, table_key) == held
    lease = _janitor(ddb).leave_queue(row_key, "w")  # (the janitor before the fix)
    assert lease is not None and lease.owner == "w" and lease.fence == int(held["fence"]["N"])


@pytest.mark.parametrize("ended", [True, False], ids=["janitor", "negative-control-waiter-leave"])
def test_a_janitor_retry_after_its_drop_hands_the_free_lock_on(queue, ended):
    """The janitor's invocation failed after its DROP_GRANT (Lambda retries it): its retry finds
    the lock free at ``w``'s ticket and hands it to ``x`` (ticket 3, polling). A waiter's own
    leave hands on only a lock free before its ticket (the negative control: nothing moves)."""
    import time

    ddb, table_key, row_key = queue
    ddb.delete_item(TableName=TABLE, Key=lock_item_key(row_key))
    ddb.put_item(TableName=TABLE, Item={**lock_item_key(table_key), "fence": {"N": "2"}, "served": {"N": "2"},
                                        "tickets": {"N": "3"}})  # (as DROP_GRANT left it)
    polling = f"{fair.CLIENT_LEASE_PREFIX}{int(time.time() * 1000) + 600_000}"  # x polls for 10 min
    ddb.put_item(TableName=TABLE, Item={**lock_item_key(fair.row_key(table_key, 3)), "owner": {"S": "x"},
                                        fair.TOKEN: {"S": polling},
                                        fair.LEASE: {"N": "60000"}, fair.GRACE_MS: {"N": "0"}})
    assert _janitor(ddb).leave_queue(row_key, "w", ended=ended) is None
    item = _lock(ddb, table_key)
    if ended:
        assert (item["owner"]["S"], fair.counters(item), item[fair.HANDED]["S"]) == ("x", (3, 3), fair.JANITOR), item
    else:
        assert "owner" not in item and fair.counters(item) == (2, 3), item
