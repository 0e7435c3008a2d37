"""Workflows of the lock variants (semaphore, multi-key) around the probe Lambda, plus the
single-key and unlocked workflows they are checked against."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks
from constructs import Construct

from locked_workflow import Lock, LockedSection, LockedWorkflow
from safety_stack import FAST, beside_failing_sibling, probe_resources, sibling_gates
from locked_workflow.state_machines.lock_protocol import jsonata

#: Holders the semaphore admits.
LIMIT = 3
#: Stored keys of the fences -> the caller's keys (the probe's items).
FENCES_BY_KEY = "$merge($each($lock.fences, function($v, $k) { {$substringAfter($k, '#'): $v} }))"


class VariantsStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.locks, self.probe_fn = probe_resources(self)
        common = dict(table=self.locks, wait_policy=FAST, max_wait=cdk.Duration.seconds(90),
                      timeout=cdk.Duration.minutes(3), logging=False)

        # A semaphore of LIMIT holders (its probe allows LIMIT inside).
        LockedWorkflow(
            self, "Semaphore", lock=Lock.semaphore(jsonata("$states.input.key"), limit=LIMIT), key_namespace="sem",
            protected=self.probe("SemaphoreProbe", {"key": jsonata("$states.input.key"), "limit": LIMIT}),
            **common,
        )
        # The same semaphore, held across a Wait before the probe: a holder stopped there has
        # no work in flight (stop grace: the 5 s margin), and the others hold on meanwhile.
        hold = sfn.CustomState(
            self, "Hold", state_json={"Type": "Wait", "QueryLanguage": "JSONata", "Seconds": jsonata("$states.input.holdS")},
        )
        LockedWorkflow(
            self, "SemaphoreHold", lock=Lock.semaphore(jsonata("$states.input.key"), limit=LIMIT), key_namespace="sem",
            protected=hold.next(self.probe("SemaphoreHoldProbe", {"key": jsonata("$states.input.key"), "limit": LIMIT})),
            **common,
        )
        # LIMIT holders of the semaphore in one execution's Map, cancelled by a failing sibling
        # branch whose failure the user catches: the execution goes on RUNNING.
        held = sfn.CustomState(
            self, "CancelledHold", state_json={"Type": "Wait", "QueryLanguage": "JSONata", "Seconds": 60},
        )
        slots = sfn.Map.jsonata(
            self, "EachSlot", items=sfn.ProvideItems.jsonata(jsonata(f"[1..{LIMIT}]")), max_concurrency=0,
            item_selector={"key": jsonata("$states.context.Execution.Input.key")},
        ).item_processor(LockedSection(
            self, "CancelledSemaphore", lock=Lock.semaphore(jsonata("$states.input.key"), limit=LIMIT), key_namespace="sem",
            table=self.locks, wait_policy=FAST, max_wait=cdk.Duration.seconds(60), lease=cdk.Duration.minutes(8),
            protected=held,
        ))
        cancelled = sfn.StateMachine(
            self, "SemaphoreCancelled", state_machine_name="VariantsSemaphoreCancelled",
            definition_body=sfn.DefinitionBody.from_chainable(beside_failing_sibling(self, "Slots", slots)),
            query_language=sfn.QueryLanguage.JSONATA, timeout=cdk.Duration.minutes(4),
        )
        sibling_gates(self).grant_write_data(cancelled)
        # A transfer's section cancelled the same way, holding both accounts.
        transfer = LockedSection(
            self, "CancelledTransfer", lock=Lock.keys(jsonata("[$states.input.from, $states.input.to]")), key_namespace="acct", table=self.locks, wait_policy=FAST, max_wait=cdk.Duration.seconds(60),
            lease=cdk.Duration.minutes(8),
            protected=sfn.CustomState(self, "TransferHeld", state_json={"Type": "Wait", "QueryLanguage": "JSONata", "Seconds": 60}),
        )
        cancelled = sfn.StateMachine(
            self, "TransferCancelled", state_machine_name="VariantsTransferCancelled",
            definition_body=sfn.DefinitionBody.from_chainable(beside_failing_sibling(self, "Transfer", transfer)),
            query_language=sfn.QueryLanguage.JSONATA, timeout=cdk.Duration.minutes(4),
        )
        sibling_gates(self).grant_write_data(cancelled)
        # Transfers: both accounts at once, all or nothing.
        LockedWorkflow(
            self, "Transfer", lock=Lock.keys(jsonata("[$states.input.from, $states.input.to]")), key_namespace="acct",
            protected=self.probe("TransferProbe", {
                "keys": jsonata("[$states.input.from, $states.input.to]"), "fences": jsonata(FENCES_BY_KEY),
            }),
            **common,
        )
        # Transfers that give up after 3 s of waiting (Lock.Timeout), and that time out
        # (TIMED_OUT: the state machine's own limit) while holding both accounts.
        LockedWorkflow(
            self, "TransferImpatient", lock=Lock.keys(jsonata("[$states.input.from, $states.input.to]")), key_namespace="acct", protected=self.probe("ImpatientProbe", {
                "keys": jsonata("[$states.input.from, $states.input.to]"), "fences": jsonata(FENCES_BY_KEY),
            }),
            **{**common, "max_wait": cdk.Duration.seconds(3)},
        )
        LockedWorkflow(
            self, "TransferTimingOut", lock=Lock.keys(jsonata("[$states.input.from, $states.input.to]")), key_namespace="acct",
            protected=sfn.CustomState(self, "Stall", state_json={
                "Type": "Wait", "QueryLanguage": "JSONata", "Seconds": 30}),
            **{**common, "timeout": cdk.Duration.seconds(8), "max_wait": cdk.Duration.seconds(3)},
        )
        # A single-key holder of the same accounts (interoperates with the transfers).
        LockedWorkflow(
            self, "Single", lock=Lock.mutex(jsonata("$states.input.key")), key_namespace="acct",
            protected=self.probe("SingleProbe", {"key": jsonata("$states.input.key"), "fence": jsonata("$lock.fence")}),
            **common,
        )
        # The same single-key holder, held across a Wait first (longer than the probe's timeout).
        single_hold = sfn.CustomState(
            self, "SingleHoldWait", state_json={"Type": "Wait", "QueryLanguage": "JSONata", "Seconds": jsonata("$states.input.holdS")},
        )
        LockedWorkflow(
            self, "SingleHold", lock=Lock.mutex(jsonata("$states.input.key")), key_namespace="acct",
            protected=single_hold.next(self.probe("SingleHoldProbe", {"key": jsonata("$states.input.key"), "fence": jsonata("$lock.fence")})),
            **common,
        )
        # A transfer nested in a single-key hold of its source account: it passes through the
        # source (the enclosing hold's fence) and takes only the destination.
        inner = LockedSection(
            self, "InnerTransfer", lock=Lock.keys(jsonata("[$states.input.from, $states.input.to]")), key_namespace="acct", table=self.locks, wait_policy=FAST, max_wait=cdk.Duration.seconds(90),
            lease=cdk.Duration.minutes(8), lock_variable="transferLock",
            protected=self.probe("NestedTransferProbe", {
                "keys": jsonata("[$states.input.from, $states.input.to]"),
                "fences": jsonata(FENCES_BY_KEY.replace("$lock.", "$transferLock.")),
            }),
        )
        LockedWorkflow(
            self, "NestedTransfer", lock=Lock.mutex(jsonata("$states.input.from")), key_namespace="acct",
            protected=inner, **common,
        )
        # The negative control: the same transfer work with no lock at all.
        sfn.StateMachine(
            self, "Unlocked", state_machine_name="VariantsUnlocked",
            definition_body=sfn.DefinitionBody.from_chainable(
                self.probe("UnlockedProbe", {"keys": jsonata("[$states.input.from, $states.input.to]")})
            ),
            query_language=sfn.QueryLanguage.JSONATA, timeout=cdk.Duration.minutes(3),
        )

    def probe(self, construct_id: str, payload: dict) -> tasks.LambdaInvoke:
        return tasks.LambdaInvoke.jsonata(
            self, construct_id, lambda_function=self.probe_fn,
            payload=sfn.TaskInput.from_object({
                **payload, "workMs": jsonata("$states.input.workMs"),
                "fail": jsonata("$exists($states.input.fail) and $states.input.fail"),
            }),
            outputs=jsonata("$merge([$states.input, {'probe': $states.result.Payload}])"),
            retry_on_service_exceptions=False,
        )
