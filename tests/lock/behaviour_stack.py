"""One stack holding every workflow variant the behaviour suites run (one synth per session).

All variants share one lock table and the example's fenced Lambda and customers table; each
uses its own key namespace, so tests isolate by customer id and namespace.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_lambda as lambda_, aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from locked_workflow import Lock, LockedWorkflow, LockTable, WaitPolicy
from locked_workflow.constructs_lib.example_stack import APPLY_UPDATE_CODE
from locked_workflow.constructs_lib.monitoring_function import powertools_layer
from locked_workflow.constructs_lib.section_work import SHORT_GRACE_WARNING_ID
from locked_workflow.state_machines.lock_protocol import jsonata

#: Fast polling for tests (the Wait state's unit is a whole second).
TEST_WAIT_POLICY = WaitPolicy(first_interval=1, backoff_rate=1.5, max_interval=2, jitter=True, retries_per_round=2)
SHORT_LEASE_S = 3
SHORT_WAIT_S = 4
SHORT_TIMEOUT_S = 8
#: The fenced Lambda's timeout: longer than any work a behaviour test asks of it (the runtime
#: fails an invocation at its function's timeout, as Lambda does) and than SHORT_TIMEOUT_S.
FUNCTION_TIMEOUT_S = 30
#: Stop grace of every behaviour workflow, given explicitly (shorter than the function's
#: timeout: a stopped holder's Lambda may outlive it; the fence keeps its late write out,
#: which some tests show). Derived graces are tested in the safety and variants suites.
STOP_GRACE_S = 8


class BehaviourStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        cdk.Annotations.of(self).acknowledge_warning(
            SHORT_GRACE_WARNING_ID, "STOP_GRACE_S is shorter than the function's run on purpose: the fence is shown")
        self.locks = LockTable(self, "Locks", removal_policy=cdk.RemovalPolicy.DESTROY)
        self.customers = dynamodb.Table(
            self, "Customers",
            partition_key=dynamodb.Attribute(name="customerId", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        self.fn = lambda_.Function(
            self, "ApplyCustomerUpdate",
            runtime=lambda_.Runtime.PYTHON_3_13, handler="index.handler",
            code=lambda_.Code.from_asset(str(APPLY_UPDATE_CODE)), timeout=cdk.Duration.seconds(FUNCTION_TIMEOUT_S),
            environment={"CUSTOMERS_TABLE": self.customers.table_name, "POWERTOOLS_TRACE_DISABLED": "true"},
            layers=[powertools_layer(self)],  # what the handler imports (Powertools), as on AWS
        )
        self.customers.grant_read_write_data(self.fn)

        self.locked("Main", max_wait=cdk.Duration.seconds(90))
        self.locked("NoWait", max_wait=cdk.Duration.seconds(0))
        self.locked("ShortWait", max_wait=cdk.Duration.seconds(SHORT_WAIT_S))
        self.locked(
            "ShortLease", max_wait=cdk.Duration.seconds(60),
            lease=cdk.Duration.seconds(SHORT_LEASE_S), tolerate_stale_fence=True,
        )
        self.locked(
            "ShortLeaseUnfenced", max_wait=cdk.Duration.seconds(60),
            lease=cdk.Duration.seconds(SHORT_LEASE_S), fence="null",
        )
        self.locked(
            "ShortTimeout", max_wait=cdk.Duration.seconds(SHORT_WAIT_S),
            timeout=cdk.Duration.seconds(SHORT_TIMEOUT_S),
        )
        sfn.StateMachine(
            self, "Unlocked",
            definition_body=sfn.DefinitionBody.from_chainable(self.work("UnlockedWork", fence="null")),
            query_language=sfn.QueryLanguage.JSONATA,
        )

    def work(self, construct_id: str, *, fence: str = "$lock.fence") -> tasks.LambdaInvoke:
        return tasks.LambdaInvoke.jsonata(
            self, construct_id,
            state_name="Apply update",
            lambda_function=self.fn,
            payload=sfn.TaskInput.from_object({
                "customerId": jsonata("$states.input.customerId"),
                "fence": jsonata(fence),
                "update": jsonata("$states.input.update"),
                "workMs": jsonata("$states.input.workMs"),
            }),
            outputs=jsonata("$states.result.Payload"),
            retry_on_service_exceptions=False,
        )

    def locked(
        self, name: str, *, tolerate_stale_fence: bool = False, fence: str = "$lock.fence", **props
    ) -> LockedWorkflow:
        work: sfn.IChainable = self.work(f"{name}Work", fence=fence)
        if tolerate_stale_fence:  # record the rejected write, let the release report Lock.Lost
            rejected = sfn.Pass.jsonata(
                self, f"{name}Rejected", state_name="Write rejected",
                outputs=jsonata("{'rejected': $states.input.Error}"),
            )
            work.add_catch(rejected, errors=["StaleFenceError"])  # now wrapped in a Parallel
        return LockedWorkflow(
            self, name,
            lock=Lock.mutex(jsonata("$states.input.customerId")), key_namespace=name.lower(),
            protected=work,
            table=self.locks.table,
            wait_policy=TEST_WAIT_POLICY,
            **{"timeout": cdk.Duration.minutes(5), "logging": False,
               "stop_grace": cdk.Duration.seconds(STOP_GRACE_S), **props},
        )
