"""A fair queue place given up (``LockClient.leave_queue``: a waiter giving up, the janitor for
an ended execution's parks) must never put back a row a handoff took meanwhile: LEAVE's
condition admits a row that is gone (a hole's), so a leave that read the row, then wrote it after
the handoff deleted it, would leave it in the queue for good."""

from __future__ import annotations

from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines.lock_item import lock_item_key
from lock_client_fakes import TABLE

TABLE_KEY = "f#customer-1"
ROW = fair.row_key(TABLE_KEY, 2)


def _queue_with_a_waiter_that_left(ddb) -> None:
    """Ticket 1 holds (for an hour), ticket 2 (``w``) gave up its place by itself."""
    ddb.put_item(TableName=TABLE, Item={**lock_item_key(TABLE_KEY), "owner": {"S": "holder"},
                                        "expiresAt": {"N": str(2**42)}, "fence": {"N": "1"},
                                        "served": {"N": "1"}, "tickets": {"N": "2"}})
    ddb.put_item(TableName=TABLE, Item={**lock_item_key(ROW), "owner": {"S": "w"}, fair.LEFT: {"N": "1"}})


def _taken_right_after_its_read(ddb) -> list[str]:
    """A handoff takes (deletes) the row just after the leave's read of it returns."""
    taken: list[str] = []
    reads: list[dict] = []

    def take(**_):
        if reads and reads[-1] == lock_item_key(ROW) and not taken:
            taken.append(ROW)
            ddb.delete_item(TableName=TABLE, Key=lock_item_key(ROW))

    ddb.meta.events.register("before-parameter-build.dynamodb.GetItem", lambda params, **_: reads.append(params["Key"]))
    ddb.meta.events.register("after-call.dynamodb.GetItem", take)
    return taken


def test_a_late_leave_of_a_waiter_that_had_left_never_puts_back_a_row_a_handoff_took(ddb, make_client):
    _queue_with_a_waiter_that_left(ddb)
    taken = _taken_right_after_its_read(ddb)
    assert make_client("janitor", fair=True).leave_queue(ROW, "w") is None
    assert taken == [ROW]
    assert "Item" not in ddb.get_item(TableName=TABLE, Key=lock_item_key(ROW), ConsistentRead=True)


def test_negative_control_a_parked_waiters_row_is_still_marked_left(ddb, make_client):
    """The leave still marks a row that is there and not yet left (a parked waiter's)."""
    _queue_with_a_waiter_that_left(ddb)
    ddb.update_item(TableName=TABLE, Key=lock_item_key(ROW), UpdateExpression="REMOVE #left SET #token = :t",
                    ExpressionAttributeNames={"#left": fair.LEFT, "#token": fair.TOKEN},
                    ExpressionAttributeValues={":t": {"S": "task-token"}})
    make_client("janitor", fair=True).leave_queue(ROW, "w")
    row = ddb.get_item(TableName=TABLE, Key=lock_item_key(ROW), ConsistentRead=True)["Item"]
    assert row[fair.LEFT] == {"N": "1"} and fair.TOKEN not in row
