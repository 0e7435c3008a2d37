"""``LockClient.admit`` (the rate limit's client path) on the fake clock: an ADMIT answered
late by about the entry margin keeps the free permit it reserved (the protocol's lead: its round
trip comes out of the lead, not out of the margin); a wake-up later than lead and margin still
gives the permit up. (The rate limit beside the workflows, on both backends:
``tests/lock/test_rate_limit.py``.)"""

from __future__ import annotations

import pytest

from locked_workflow.constructs_lib.lock_client import LockTimeout
from locked_workflow.state_machines import rate_protocol as rate


def _admits_answered_late(ddb, clock, seconds: float) -> None:
    """Every ADMIT (an UpdateItem) reaches DynamoDB ``seconds`` late: a paused client, a slow
    network - its response's ``Date`` shows the time it was applied."""
    ddb.meta.events.register("before-call.dynamodb.UpdateItem", lambda **_: clock.advance(seconds))


def test_a_client_whose_admit_answers_late_by_about_the_margin_keeps_the_free_permit(ddb, clock, make_client):
    client = make_client("alice")
    client.rate_item("warm-up")  # a first read: the client knows AWS's clock within its bounds
    # 1.5 s: before the lead, a client gave its permit up past 0.5 s (the margin less the width
    # of its clock bounds, a second: Date headers show whole seconds)
    _admits_answered_late(ddb, clock, 1.5)
    admitted = client.admit("k", limit=3, period=60)
    assert admitted.number == 1  # the permit it reserved, not a second one after giving it up
    assert int(client.rate_item("k")[rate.ADMISSIONS]["N"]) == 1
    # it entered at or after its reserved time, by the earliest time AWS's clock can show
    assert client.earliest_ms() >= admitted.admitted_at
    assert rate.on_time(client.latest_ms(), admitted.admitted_at)


def test_a_client_whose_admit_answers_later_than_the_lead_and_margin_gives_the_permit_up(ddb, clock, make_client):
    client = make_client("alice")
    client.rate_item("warm-up")
    _admits_answered_late(ddb, clock, (rate.ADMIT_LEAD_MS + rate.ENTRY_MARGIN_MS) / 1000 + 0.5)
    with pytest.raises(LockTimeout):  # wait 0: its permit given up, and its wait over
        client.admit("k", limit=3, period=60)
    assert int(client.rate_item("k")[rate.ADMISSIONS]["N"]) == 1  # spent, unused
