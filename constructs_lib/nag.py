"""cdk-nag suppressions for the example app, each with the reason a reviewer would accept."""

try:
    from cdk_nag import NagPackSuppression, NagSuppressions
except ImportError as error:
    raise ImportError(
        "locked_workflow.constructs_lib.nag needs cdk-nag, an optional dependency: pip install 'locked-workflow[nag]'",
        name=error.name,
    ) from error

from locked_workflow.constructs_lib.example_stack import CustomerUpdatesStack


def suppress_example_findings(stack: CustomerUpdatesStack) -> None:
    """Suppress, on the exact resources, the findings that are intended in the example."""
    fn = stack.apply_update
    NagSuppressions.add_resource_suppressions(
        fn,
        [
            NagPackSuppression(
                id="AwsSolutions-L1",
                reason="Pinned to Python 3.13, the newest runtime the pinned Powertools layer is published for.",
            )
        ],
    )
    NagSuppressions.add_resource_suppressions(
        fn.role,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM4",
                reason="AWSLambdaBasicExecutionRole only lets the function write its own log streams.",
                applies_to=[
                    "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"
                ],
            ),
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason="X-Ray PutTraceSegments/PutTelemetryRecords do not support resource-level permissions.",
                applies_to=["Resource::*"],
            ),
        ],
        apply_to_children=True,
    )
    workflow = stack.workflow
    janitor = workflow.janitor
    NagSuppressions.add_resource_suppressions(
        janitor.function.role,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason="X-Ray PutTraceSegments/PutTelemetryRecords do not support resource-level permissions.",
                applies_to=["Resource::*"],
            )
        ],
        apply_to_children=True,
    )
    NagSuppressions.add_resource_suppressions(
        workflow.state_machine.role,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason=(
                    "Resource::* is required by the X-Ray and CloudWatch Logs delivery actions "
                    "Step Functions uses for tracing and logging; neither supports resource-level permissions."
                ),
                applies_to=["Resource::*"],
            )
        ],
        apply_to_children=True,
    )
    executions = "Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:"
    NagSuppressions.add_resource_suppressions(
        workflow.section,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason=(
                    "The liveness check describes executions of this workflow's own state machine "
                    "only: execution ARNs are its ARN prefix plus the execution name."
                ),
                applies_to=[f"{executions}{workflow.state_machine_name}:*"],
            )
        ],
        apply_to_children=True,
    )
    NagSuppressions.add_resource_suppressions(
        janitor.function.role,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason=(
                    "The janitor reads the history of the watched state machine's executions only: "
                    "execution ARNs are its ARN prefix plus the execution name."
                ),
                applies_to=[
                    f"{executions}<{stack.get_logical_id(workflow.state_machine.node.default_child)}.Name>:*"
                ],
            )
        ],
        apply_to_children=True,
    )
    NagSuppressions.add_resource_suppressions(
        workflow.state_machine.role,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason="Invoking the example function's versions and aliases (its ARN with a qualifier).",
                applies_to=[f"Resource::<{stack.get_logical_id(fn.node.default_child)}.Arn>:*"],
            ),
        ],
        apply_to_children=True,
    )
    for queue in (workflow.dead_letter_queue, janitor.dead_letter_queue):
        NagSuppressions.add_resource_suppressions(
            queue,
            [
                NagPackSuppression(
                    id="AwsSolutions-SQS3",
                    reason="This queue is itself the dead-letter queue of an EventBridge rule target.",
                )
            ],
        )
