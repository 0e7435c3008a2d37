"""EventBridge targets: rules deliver to state machines and Lambda functions (and SQS,
with input handling).

Gap (moto 5.2.1): ``Rule.send_to_targets`` raises ``NotImplementedError`` for a Step
Functions or Lambda target, so ``put_events`` matching such a rule fails; it ignores a target's
``Input`` and ``InputPath``, mangles ``InputTransformer`` values that hold quotes or
objects, ignores ``DeadLetterConfig``, and delivers for disabled rules.

Fix: for ENABLED rules whose ``EventPattern`` matches (moto's own matcher), hand
state-machine, Lambda and SQS targets to :class:`locked_workflow.testing.events.EventRouter`; other
targets (logs, archives, buses, API destinations) keep moto's delivery.

AWS: a rule sends each matching event to its targets, a state machine or a Lambda function
among them (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-targets.html), with
the target's ``Input``, ``InputPath`` or ``InputTransformer`` applied
(https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-transform-target-input.html); "a
disabled rule won't match any events"
(https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_DisableRule.html).

Proof: ``tests/local/test_patch_eventbridge_targets.py``.
"""

from __future__ import annotations

import copy
from contextlib import ExitStack

from moto.events.models import Rule

from locked_workflow.testing.events import EventRouter, delivered_event
from locked_workflow.testing.seams import patch_attribute

ROUTED_SERVICES = frozenset({"states", "sqs", "lambda"})


def apply(stack: ExitStack, router: EventRouter) -> None:
    original = Rule.send_to_targets

    def send_to_targets(self, original_event, transform_input=True):  # type: ignore[no-untyped-def]
        if self.state != "ENABLED" or not self.event_pattern.matches_event(original_event):
            return
        event = delivered_event(original_event)
        others = []
        for target in self.targets:
            if target["Arn"].split(":")[2] in ROUTED_SERVICES:
                router.deliver(self, target, event)
            else:
                others.append(target)
        if others:
            rest = copy.copy(self)
            rest.targets = others
            original(rest, original_event, transform_input)

    patch_attribute(stack, Rule, "send_to_targets", send_to_targets, by=__name__)
