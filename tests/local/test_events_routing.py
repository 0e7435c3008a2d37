"""put_events routing with an InputTransformer (and the transformer itself, unit-level); the
router's at-least-once delivery faults (duplicate and late copies)."""

from __future__ import annotations

import json
import math

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.events import apply_input_transformer
from local_helpers import ROLE_ARN, create_state_machine, wait_until

ECHO = {"StartAt": "Echo", "States": {"Echo": {"Type": "Pass", "End": True}}}


def test_put_events_routes_through_an_input_transformer():
    with LocalCloud() as cloud:
        bus = cloud.client("events").create_event_bus(Name="customers")["EventBusArn"]
        machine = create_state_machine(ECHO)
        events = cloud.client("events")
        events.put_rule(
            Name="updates",
            EventBusName="customers",
            EventPattern=json.dumps({"source": ["crm"], "detail": {"customerId": [{"prefix": "c-"}]}}),
        )
        events.put_targets(
            Rule="updates",
            EventBusName="customers",
            Targets=[
                {
                    "Id": "sm",
                    "Arn": machine,
                    "RoleArn": ROLE_ARN,
                    "InputTransformer": {
                        "InputPathsMap": {"customer": "$.detail.customerId", "change": "$.detail.change", "kind": "$.detail-type"},
                        "InputTemplate": '{"detail": {"customerId": <customer>, "change": <change>}, "note": "<kind> for <customer>"}',
                    },
                }
            ],
        )
        cloud.put_events(
            [
                {"Source": "crm", "DetailType": "Update", "EventBusName": bus, "Detail": {"customerId": "c-1", "change": {"email": 'a"b@c'}}},
                {"Source": "crm", "DetailType": "Update", "EventBusName": bus, "Detail": {"customerId": "x-2", "change": {}}},
                {"Source": "crm", "DetailType": "Update", "Detail": {"customerId": "c-3", "change": {}}},  # default bus
            ]
        )
        executions = wait_until(lambda: cloud.executions(machine))
        outputs = [cloud.wait_for(e["executionArn"]).output for e in executions]
    assert outputs == [
        {"detail": {"customerId": "c-1", "change": {"email": 'a"b@c'}}, "note": "Update for c-1"}
    ]


def test_input_transformer_quotes_like_eventbridge():
    event = {"detail": {"n": 3, "s": 'x"y', "o": {"a": [1]}}, "detail-type": "T"}
    transformer = {
        "InputPathsMap": {"n": "$.detail.n", "s": "$.detail.s", "o": "$.detail.o", "missing": "$.detail.nope"},
        "InputTemplate": '{"n": <n>, "s": <s>, "in": "<s> and <n>", "o": <o>, "m": <missing>, "whole": <aws.events.event.json>}',
    }
    assert json.loads(apply_input_transformer(transformer, event)) == {
        "n": 3,
        "s": 'x"y',
        "in": 'x"y and 3',
        "o": {"a": [1]},
        "m": None,
        "whole": event,
    }


FAIL = {"StartAt": "Fail", "States": {"Fail": {"Type": "Fail", "Error": "Work.Failed", "Cause": "on purpose"}}}


def janitor_rule(cloud, failing: str, janitor: str) -> None:
    """A rule sending the failing machine's status-change events to the janitor machine."""
    events = cloud.client("events")
    events.put_rule(
        Name="janitor",
        EventPattern=json.dumps(
            {"source": ["aws.states"], "detail-type": ["Step Functions Execution Status Change"], "detail": {"stateMachineArn": [failing]}}
        ),
    )
    events.put_targets(Rule="janitor", Targets=[{"Id": "j", "Arn": janitor, "RoleArn": ROLE_ARN}])


def janitor_runs(cloud, janitor: str, count: int) -> list[str]:
    """The executionArn each of the janitor's ``count`` runs was told about (waits for them)."""
    runs = wait_until(lambda: len(cloud.executions(janitor)) >= count and cloud.executions(janitor), timeout=30)
    assert runs and len(runs) == count, f"janitor ran {len(cloud.executions(janitor))} times, expected {count}"
    return [cloud.wait_for(run["executionArn"]).output["detail"]["executionArn"] for run in runs]


def test_a_status_event_can_be_delivered_twice():
    with LocalCloud() as cloud:
        failing = create_state_machine(FAIL, "failing")
        janitor = create_state_machine(ECHO, "janitor")
        janitor_rule(cloud, failing, janitor)
        cloud.events.duplicate_deliveries = 1
        failed = cloud.start_execution(failing, {})
        told = janitor_runs(cloud, janitor, 2)
        kinds = [delivery.kind for delivery in cloud.events.deliveries]
        sent = list(cloud.events.status_events)
    assert told == [failed, failed]
    assert kinds == ["first", "duplicate"]
    assert [detail["executionArn"] for detail in sent].count(failed) == 1  # one event on the bus, two deliveries


def test_a_late_copy_arrives_when_the_test_says_so():
    with LocalCloud() as cloud:
        failing = create_state_machine(FAIL, "failing")
        janitor = create_state_machine(ECHO, "janitor")
        janitor_rule(cloud, failing, janitor)
        cloud.events.late_copies_after = math.inf
        failed = cloud.start_execution(failing, {})
        assert janitor_runs(cloud, janitor, 1) == [failed]
        held = wait_until(lambda: cloud.events.late_copies)
        still_one = len(cloud.executions(janitor))  # the copy waits: nothing else delivers it
        late = cloud.events.deliver_late_copies()
        told = janitor_runs(cloud, janitor, 2)
    assert len(held) == 1 and still_one == 1
    assert [(delivery.kind, delivery.ok) for delivery in late] == [("late", True)]
    assert told == [failed, failed]
    assert cloud.events.late_copies == []


def test_timed_late_copies_and_the_fault_scope():
    """A timed late copy arrives by itself; other events are faulted only when the filter says so."""
    with LocalCloud() as cloud:
        failing = create_state_machine(FAIL, "failing")
        janitor = create_state_machine(ECHO, "janitor")
        janitor_rule(cloud, failing, janitor)
        echo = create_state_machine(ECHO, "echo")
        events = cloud.client("events")
        events.put_rule(Name="crm", EventPattern=json.dumps({"source": ["crm"]}))
        events.put_targets(Rule="crm", Targets=[{"Id": "e", "Arn": echo, "RoleArn": ROLE_ARN}])
        cloud.events.duplicate_deliveries = 1
        cloud.events.late_copies_after = 0.2
        failed = cloud.start_execution(failing, {})
        told = janitor_runs(cloud, janitor, 3)  # first, duplicate, then the timed late copy
        cloud.put_events([{"Source": "crm", "DetailType": "Update", "Detail": {"n": 1}}])
        unfaulted = wait_until(lambda: cloud.executions(echo), timeout=30)
        cloud.events.late_copies_after = None
        cloud.events.delivery_fault_filter = lambda event: True
        cloud.put_events([{"Source": "crm", "DetailType": "Update", "Detail": {"n": 2}}])
        runs = wait_until(lambda: len(cloud.executions(echo)) == 3 and cloud.executions(echo), timeout=30)
        kinds = [delivery.kind for delivery in cloud.events.deliveries]
    assert told == [failed] * 3
    assert len(unfaulted) == 1 and len(runs) == 3
    assert kinds == ["first", "duplicate", "late", "first", "first", "duplicate"]
