"""put_events routing with an InputTransformer (and the transformer itself, unit-level)."""

from __future__ import annotations

import json

from constructs_lib.local import LocalCloud
from constructs_lib.local.events import apply_input_transformer
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
