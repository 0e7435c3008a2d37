"""The example app's stack: customer-update events serialized per customer by a LockedWorkflow."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import (
    Duration,
    RemovalPolicy,
    Stack,
    aws_dynamodb as dynamodb,
    aws_events as events,
    aws_events_targets as targets,
    aws_lambda as lambda_,
    aws_stepfunctions as sfn,
    aws_stepfunctions_tasks as tasks,
)
from constructs import Construct

from locked_workflow.constructs_lib.assets import lambda_code
from locked_workflow.constructs_lib.lock import Lock
from locked_workflow.constructs_lib.locked_workflow import LockedWorkflow
from locked_workflow.state_machines.lock_protocol import jsonata

#: The Lambda's code: its own folder, deployed as the function's asset.
APPLY_UPDATE_CODE = Path(__file__).resolve().parents[1] / "lambdas" / "apply_customer_update"
#: Event source and detail type of the customer updates the example consumes.
EVENT_SOURCE = "example.customers"
EVENT_DETAIL_TYPE = "CustomerUpdateRequested"
#: Published Powertools for AWS Lambda (Python) layer version used in AWS.
POWERTOOLS_LAYER_VERSION = 27


class CustomerUpdatesStack(Stack):
    """Event bus → rule → locked workflow (keyed on ``detail.customerId``) → fenced Lambda write.

    :param lock_enabled: run the work under the lock. ``False`` builds the same workflow
        without it - the negative control of the demo and the tests. Default: ``True``.
    :param max_wait: longest wait for a customer's lock. Default: 5 minutes.
    :param fair: the fair lock (arrival order, wake-up handoff). Default: ``False``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        lock_enabled: bool = True,
        max_wait: Duration = Duration.minutes(5),
        fair: bool = False,
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.bus = events.EventBus(self, "CustomerEvents")
        self.customers = dynamodb.Table(
            self,
            "Customers",
            partition_key=dynamodb.Attribute(name="customerId", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.apply_update = lambda_.Function(
            self,
            "ApplyCustomerUpdate",
            runtime=lambda_.Runtime.PYTHON_3_13,
            handler="index.handler",
            code=lambda_code(APPLY_UPDATE_CODE),
            timeout=Duration.seconds(30),
            tracing=lambda_.Tracing.ACTIVE,
            layers=[
                lambda_.LayerVersion.from_layer_version_arn(
                    self,
                    "Powertools",
                    f"arn:{self.partition}:lambda:{self.region}:017000801446:layer:"
                    f"AWSLambdaPowertoolsPythonV3-python313-x86_64:{POWERTOOLS_LAYER_VERSION}",
                )
            ],
            environment={
                "CUSTOMERS_TABLE": self.customers.table_name,
                "POWERTOOLS_SERVICE_NAME": "apply-customer-update",
                "POWERTOOLS_METRICS_NAMESPACE": "LockedWorkflow",
            },
        )
        self.customers.grant(self.apply_update, "dynamodb:GetItem", "dynamodb:PutItem")

        fence = "$lock.fence" if lock_enabled else "null"
        work = tasks.LambdaInvoke.jsonata(
            self,
            "Apply update",
            lambda_function=self.apply_update,
            payload=sfn.TaskInput.from_object(
                {
                    "customerId": jsonata("$states.input.detail.customerId"),
                    "fence": jsonata(fence),
                    "update": jsonata("$states.input.detail.update"),
                    "workMs": jsonata("$states.input.detail.workMs"),
                }
            ),
            outputs=jsonata("$states.result.Payload"),
        )
        rule = events.Rule(
            self,
            "CustomerUpdateRequested",
            event_bus=self.bus,
            event_pattern=events.EventPattern(
                source=[EVENT_SOURCE], detail_type=[EVENT_DETAIL_TYPE]
            ),
        )
        if lock_enabled:
            self.workflow = LockedWorkflow(
                self,
                "ApplyCustomerUpdates",
                lock=(Lock.fair if fair else Lock.mutex)(jsonata("$states.input.detail.customerId")),
                key_namespace="customer",
                protected=work,
                max_wait=max_wait,
                timeout=Duration.minutes(30),
                table_removal_policy=RemovalPolicy.DESTROY,
            )
            self.workflow.trigger_from(rule)
            self.state_machine = self.workflow.state_machine
        else:
            self.workflow = None
            self.state_machine = sfn.StateMachine(
                self,
                "UnlockedApplyCustomerUpdates",
                definition_body=sfn.DefinitionBody.from_chainable(work),
                query_language=sfn.QueryLanguage.JSONATA,
                timeout=Duration.minutes(30),
                tracing_enabled=True,
            )
            rule.add_target(targets.SfnStateMachine(self.state_machine))
