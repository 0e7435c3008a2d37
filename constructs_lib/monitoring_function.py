"""The function of :class:`~locked_workflow.constructs_lib.monitoring.LockMonitoring` that
publishes ``WaitTime`` and ``HoldTime`` (embedded metric format) from the execution log lines a
subscription filter sends it (a duration needs a subtraction, which a metric filter cannot do),
and the Powertools layer it runs with.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from aws_cdk import (
    Duration,
    RemovalPolicy,
    Stack,
    aws_iam as iam,
    aws_lambda as lambda_,
    aws_logs as logs,
)
from constructs import Construct

from locked_workflow.constructs_lib.assets import lambda_code

#: The Lambda's code: its own folder, deployed as the function's asset.
LOCK_METRICS_CODE = Path(__file__).resolve().parents[1] / "lambdas" / "lock_metrics"
#: Published Powertools for AWS Lambda (Python) v3 layer (python3.13, x86_64) used by default.
POWERTOOLS_LAYER_VERSION = 27


def metrics_function(monitoring: Any, layer: Optional[lambda_.ILayerVersion]) -> lambda_.Function:
    """The metrics function of ``monitoring`` (a LockMonitoring: its scope, its namespace, its
    state machine's name and lock states), with ``layer`` or the published Powertools layer."""
    log_group = logs.LogGroup(
        monitoring, "MetricsFunctionLogs", retention=logs.RetentionDays.ONE_MONTH,
        removal_policy=RemovalPolicy.DESTROY,
    )
    role = iam.Role(
        monitoring, "MetricsFunctionRole",
        assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        description="Writes the lock metrics function's own log (its embedded metrics)",
    )
    log_group.grant_write(role)  # logs:CreateLogStream, logs:PutLogEvents on that group only
    layer = layer or powertools_layer(monitoring)
    function = lambda_.Function(
        monitoring,
        "MetricsFunction",
        description=f"WaitTime and HoldTime of {monitoring.state_machine_name}, from its execution logs",
        runtime=lambda_.Runtime.PYTHON_3_13,
        handler="index.handler",
        code=lambda_code(LOCK_METRICS_CODE),
        timeout=Duration.seconds(30),
        memory_size=256,
        role=role,
        log_group=log_group,
        layers=[layer],
        environment={
            "POWERTOOLS_METRICS_NAMESPACE": monitoring.namespace,
            "POWERTOOLS_TRACE_DISABLED": "true",
            # state -> the lock variable it assigns, of every acquisition of every section
            "ACQUISITIONS": json.dumps(
                {name: variable for name, (_, variable) in sorted(monitoring.lock_states.acquisitions.items())},
                separators=(",", ":"),
            ),
            # state -> the variable it assigns the hold's length to, of every release
            "RELEASES": json.dumps(
                {name: variable for name, (_, variable) in sorted(monitoring.lock_states.releases.items())},
                separators=(",", ":"),
            ),
        },
    )
    # Pinned to python3.13, the newest runtime the pinned Powertools layer is published for
    # (cdk-nag's own metadata format: no cdk-nag import in the library).
    function.node.default_child.add_metadata(
        "cdk_nag",
        {
            "rules_to_suppress": [
                {
                    "id": "AwsSolutions-L1",
                    "reason": "Pinned to Python 3.13, the newest runtime the pinned Powertools layer is published for.",
                }
            ]
        },
    )
    return function


def powertools_layer(scope: Construct, construct_id: str = "Powertools") -> lambda_.ILayerVersion:
    """The published Powertools for AWS Lambda (Python) v3 layer (python3.13, x86_64), version
    :data:`POWERTOOLS_LAYER_VERSION`, in the stack's region."""
    stack = Stack.of(scope)
    return lambda_.LayerVersion.from_layer_version_arn(
        scope,
        construct_id,
        f"arn:{stack.partition}:lambda:{stack.region}:017000801446:layer:"
        f"AWSLambdaPowertoolsPythonV3-python313-x86_64:{POWERTOOLS_LAYER_VERSION}",
    )
