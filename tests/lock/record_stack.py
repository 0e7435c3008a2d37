"""Workflows with the lock on the customer record itself, and an unlocked negative control.

The protected work is a read-modify-write of ``balance`` with no Lambda: it reads the record
from ``$lock.item`` (the acquire returned it), waits, and returns ``recordUpdate`` - which the
release writes in the same conditional UpdateItem that frees the lock.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb, aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks
from constructs import Construct

from locked_workflow import Lock, LockedSection, LockedWorkflow
from safety_stack import FAST, beside_failing_sibling, sibling_gates
from locked_workflow.state_machines.lock_protocol import jsonata

#: The work's new balance, from the record the acquire returned.
INCREMENT = (
    "{'recordUpdate': {'set': {'balance': {'N': $string(($exists($lock.item.balance.N) "
    "? $number($lock.item.balance.N) : 0) + 1)}}, 'remove': $exists($states.input.remove) ? $states.input.remove : []}}"
)


class RecordStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.customers = dynamodb.Table(
            self, "Customers",
            partition_key=dynamodb.Attribute(name="customerId", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST, removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        common = dict(wait_policy=FAST, max_wait=cdk.Duration.seconds(90),
                      timeout=cdk.Duration.minutes(3), logging=False)
        self.workflow = LockedWorkflow(
            self, "Increment", lock=Lock.on_record(self.customers, jsonata("$states.input.customerId")), protected=self.work("Work"), **common,
        )
        LockedWorkflow(
            self, "Create", lock=Lock.on_record(self.customers, jsonata("$states.input.customerId"), must_exist=False), protected=self.work("CreateWork"), **common,
        )
        # the same lock with a short lease: the holder that waits past it loses the record
        LockedWorkflow(
            self, "ShortLease", lock=Lock.on_record(self.customers, jsonata("$states.input.customerId")), lease=cdk.Duration.seconds(2),
            protected=self.work("ShortWork"), **common,
        )
        # the same work with a custom update (a bad one, for the invalid-update test)
        LockedWorkflow(
            self, "Custom", lock=Lock.on_record(self.customers, jsonata("$states.input.customerId")), protected=sfn.Pass.jsonata(self, "CustomWork", outputs=jsonata("{'recordUpdate': $states.input.update}")),
            **common,
        )
        # the record lock in a branch that Step Functions cancels (a sibling fails, the user
        # catches it and the execution runs on)
        section = LockedSection(
            self, "CancelledRecord", lock=Lock.on_record(self.customers, jsonata("$states.input.customerId")), wait_policy=FAST, max_wait=cdk.Duration.seconds(60), lease=cdk.Duration.minutes(8),
            protected=self.work("CancelledWork"),
        )
        cancelled = sfn.StateMachine(
            self, "RecordCancelled",
            definition_body=sfn.DefinitionBody.from_chainable(beside_failing_sibling(self, "Record", section)),
            query_language=sfn.QueryLanguage.JSONATA, timeout=cdk.Duration.minutes(4),
        )
        sibling_gates(self).grant_write_data(cancelled)
        # the negative control: read, wait, write back - no lock
        read = tasks.DynamoGetItem.jsonata(
            self, "Read", table=self.customers,
            key={"customerId": tasks.DynamoAttributeValue.from_string(jsonata("$states.input.customerId"))},
            consistent_read=True,
            outputs=jsonata("{'customerId': $states.input.customerId, 'waitS': $states.input.waitS, "
                            "'balance': $exists($states.result.Item.balance.N) ? $number($states.result.Item.balance.N) : 0}"),
        )
        write = tasks.DynamoUpdateItem.jsonata(
            self, "Write", table=self.customers,
            key={"customerId": tasks.DynamoAttributeValue.from_string(jsonata("$states.input.customerId"))},
            update_expression="SET balance = :b",
            expression_attribute_values={":b": tasks.DynamoAttributeValue.number_from_string(
                jsonata("$string($states.input.balance + 1)"))},
        )
        sfn.StateMachine(
            self, "Unlocked",
            definition_body=sfn.DefinitionBody.from_chainable(read.next(self.wait("UnlockedWait")).next(write)),
            query_language=sfn.QueryLanguage.JSONATA, timeout=cdk.Duration.minutes(3),
        )

    def wait(self, construct_id: str) -> sfn.CustomState:
        return sfn.CustomState(self, construct_id, state_json={
            "Type": "Wait", "QueryLanguage": "JSONata", "Seconds": jsonata("$states.input.waitS"),
        })

    def work(self, construct_id: str) -> sfn.IChainable:
        return self.wait(f"{construct_id}Wait").next(
            sfn.Pass.jsonata(self, construct_id, outputs=jsonata(INCREMENT))
        )
