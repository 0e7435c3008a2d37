"""The probe's resources in a tool's stack (the stress campaign's, the fault matrix's): the lock
table, the probe's table and the probe Lambda (``lambdas/probe``: it counts the holders inside
the protected work at entry), with the Powertools layer its handler imports, as on AWS."""

from __future__ import annotations

from pathlib import Path
from typing import Any

PROBE_CODE = Path(__file__).resolve().parents[1] / "lambdas" / "probe"


def probe_resources(stack: Any, *, timeout_s: int) -> tuple[Any, Any]:
    """``(lock table, probe function)`` of ``stack``; the probe's timeout is ``timeout_s``
    (a stopped holder's stop grace is that + 5 s)."""
    import aws_cdk as cdk
    from aws_cdk import aws_dynamodb as dynamodb, aws_lambda as lambda_

    from locked_workflow import LockTable
    from locked_workflow.constructs_lib.assets import lambda_code
    from locked_workflow.constructs_lib.monitoring_function import powertools_layer

    locks = LockTable(stack, "Locks", removal_policy=cdk.RemovalPolicy.DESTROY).table
    probes = dynamodb.Table(
        stack, "Probes", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
        billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST, removal_policy=cdk.RemovalPolicy.DESTROY,
    )
    probe_fn = lambda_.Function(
        stack, "Probe", runtime=lambda_.Runtime.PYTHON_3_13, handler="index.handler",
        code=lambda_code(PROBE_CODE), timeout=cdk.Duration.seconds(timeout_s),
        environment={"PROBE_TABLE": probes.table_name, "POWERTOOLS_TRACE_DISABLED": "true"},
        layers=[powertools_layer(stack)],  # what the handler imports (Powertools), as on AWS
    )
    probes.grant_read_write_data(probe_fn)
    return locks, probe_fn
