"""The janitor of a fair lock's ended participants, on both DynamoDB backends: a release that
granted the lock to a waiter already ended (``Lock.Release.Grant``, its wake-up failing) and was
itself stopped before its fallback revoked that grant (issue 25, fault matrix: "left: f#<key> held
by <the dead waiter> for 499 s more"). Whichever order the two janitors run in, and whether the
waiter's janitor looked before the grant landed (its row taken, the lock still the releaser's:
nothing for it to do) or after, no lock stays granted to an ended execution once both ran - and a
grant to a live grantee is never revoked.

Split from ``test_fair_lock.py`` (its stack fixture ``fair`` and helpers).
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from locked_workflow.state_machines import fair_protocol as fp
from locked_workflow.state_machines import lock_protocol as p
from test_fair_lock import fair, key, queued  # noqa: F401 - fair: the stack's fixture


def _janitor(fair, machine: str, execution: str) -> dict:
    """Deliver the (held back) status event of ``execution`` to ``machine``'s janitor."""
    (detail,) = [d for d in fair.cloud.events.dropped_status_events if d["executionArn"] == execution]
    event = {"version": "0", "id": str(uuid.uuid4()), "source": "aws.states",
             "detail-type": "Step Functions Execution Status Change", "account": "123456789012",
             "time": "2026-01-01T00:00:00Z", "region": "us-east-1", "resources": [execution], "detail": detail}
    response = fair.cloud.client("lambda").invoke(
        FunctionName=fair.app.function_name(f"{machine}/Janitor/Function"), Payload=json.dumps(event).encode())
    assert "FunctionError" not in response, response["Payload"].read()
    return json.loads(response["Payload"].read())


def _stop(fair, execution: str) -> None:
    fair.cloud.stepfunctions.stop_execution(executionArn=execution)
    assert fair.cloud.wait_for(execution).status == "ABORTED"


def _take_row(fair, k: str, ticket: int) -> dict:
    """The release's TAKE of the waiter's row (``Lock.Release.TakeAny``): the row it returned."""
    return fair.cloud.dynamodb.delete_item(
        TableName=fair.table("LocksTable"), Key={"pk": {"S": fp.row_key(p.namespaced("f", k), ticket)}},
        ReturnValues="ALL_OLD")["Attributes"]


def _grant(fair, k: str, *, releaser: str, row: dict, ticket: int) -> None:
    """The release's GRANT of ``ticket`` to the row's waiter (``Lock.Release.Grant``), as
    ``releaser``: the lock item owned by the waiter, ``handed`` = the releaser, not confirmed."""
    now = int(time.time() * 1000)  # (the releaser's clock: after the waiter's end)
    fair.cloud.dynamodb.update_item(
        TableName=fair.table("LocksTable"), Key={"pk": {"S": p.namespaced("f", k)}},
        UpdateExpression=fp.GRANT.update, ConditionExpression=fp.GRANT.condition,
        ExpressionAttributeNames=fp.attribute_names(fp.GRANT),
        ExpressionAttributeValues={
            ":me": {"S": releaser}, ":next": {"S": row[p.OWNER]["S"]}, ":stale": {"S": releaser},
            ":now": {"N": str(now)}, ":expiresAt": {"N": str(now + int(row[fp.LEASE]["N"]))},
            ":grace": {"N": row.get(fp.GRACE_MS, {}).get("N", "0")}, ":one": {"N": "1"},
            ":prev": {"N": str(ticket - 1)}, ":ticket": {"N": str(ticket)}})


def _granted_to_a_waiter(fair, k: str, *, stop_waiter: bool):
    """A FairHold holder and a FairPatient waiter parked behind it (their status events held
    back: the test runs their janitors); the waiter stopped if ``stop_waiter``. Returns
    ``(holder, waiter, releaser's owner, the waiter's ticket)`` - its row not yet taken."""
    held_back: set[str] = set()
    fair.cloud.events.status_event_filter = lambda detail: detail["executionArn"] not in held_back
    holder = fair.start("FairHold", {"key": k, "workMs": 1})
    held_back.add(holder)
    fair.until(lambda: p.OWNER in fair.lock(k))
    waiter = fair.start("FairPatient", {"key": k, "workMs": 1})
    held_back.add(waiter)
    fair.until(lambda: len(fair.queue(k)) == 1)
    releaser = fair.lock(k)[p.OWNER]["S"]
    ticket = fp.counters(fair.lock(k))[1]
    if stop_waiter:
        _stop(fair, waiter)
    return holder, waiter, releaser, ticket


ORDERS = {
    # the waiter's janitor looks after the take, before the grant (issue 25's order)
    "waiter-before-grant": ("take", "waiter", "grant", "stop-holder", "holder"),
    "holder-then-waiter": ("take", "grant", "stop-holder", "holder", "waiter"),
    "waiter-then-holder": ("take", "grant", "stop-holder", "waiter", "holder"),
    # each twice, the copies one after the other (EventBridge delivers at least once)
    "duplicated": ("take", "waiter", "grant", "stop-holder", "holder", "holder", "waiter", "waiter"),
}


@pytest.mark.parametrize("order", ORDERS)
def test_a_grant_to_an_ended_waiter_by_a_releaser_stopped_before_its_fallback_is_revoked_by_a_janitor(fair, order):
    """Issue 25: the lock item owned by an ended waiter, ``handed`` = an ended releaser, the
    waiter's row taken; once both janitors ran (in any order), nobody holds the lock and the
    queue is drained (before the fix, in ``waiter-before-grant``: held by the dead waiter for its
    whole lease)."""
    k = key()
    holder, waiter, releaser, ticket = _granted_to_a_waiter(fair, k, stop_waiter=True)
    row = None
    try:
        for step in ORDERS[order]:
            if step == "take":
                row = _take_row(fair, k, ticket)
            elif step == "grant":
                _grant(fair, k, releaser=releaser, row=row, ticket=ticket)
                assert fair.lock(k)[fp.HANDED]["S"] == releaser
            elif step == "stop-holder":
                _stop(fair, holder)
            else:
                _janitor(fair, "FairHold" if step == "holder" else "FairPatient",
                         holder if step == "holder" else waiter)
    finally:
        fair.cloud.events.status_event_filter = None
    item = fair.lock(k)
    assert p.OWNER not in item, f"held by {item.get(p.OWNER)} (handed {item.get(fp.HANDED)}) after both janitors"
    assert fair.drained(k)


def test_negative_control_a_janitor_never_revokes_a_grant_to_a_live_waiter(fair):
    """The same grant to a waiter still parked (RUNNING, its park timeout 2 min): the releaser's
    janitor (and a copy of its event) leaves the grant as it is - the waiter confirms it when it
    looks."""
    k = key()
    holder, waiter, releaser, ticket = _granted_to_a_waiter(fair, k, stop_waiter=False)
    try:
        row = _take_row(fair, k, ticket)
        _grant(fair, k, releaser=releaser, row=row, ticket=ticket)
        granted = fair.lock(k)
        _stop(fair, holder)
        for _ in range(2):
            _janitor(fair, "FairHold", holder)
        assert fair.cloud.stepfunctions.describe_execution(executionArn=waiter)["status"] == "RUNNING"
        assert fair.lock(k) == granted  # not revoked, not retired: the live waiter's
        assert granted[fp.HANDED]["S"] == releaser and row[p.OWNER]["S"] == granted[p.OWNER]["S"]
    finally:
        fair.cloud.events.status_event_filter = None
        fair.cloud.stepfunctions.stop_execution(executionArn=waiter)  # (it would park for 2 min)
