"""Offline local runtime: deploy a synthesized stack into an in-process AWS and run it.

Public API::

    from locked_workflow.testing import LocalCloud

    with LocalCloud(backend="moto") as cloud:            # or backend="dynamodb-local"
        app = cloud.deploy(template, assets_dir=Path("cdk.out"))
        app.resources                                    # logical id -> physical id
        app.skipped                                      # [(logical id, type)] not needed to run
        arn = cloud.start_execution(app.state_machine_arn("Locked"), {"id": "1"})
        result = cloud.wait_for(arn, timeout=60)         # .status .output .error .cause .history
        cloud.put_events([...])                          # routed to matching rules
        cloud.history(arn)
        cloud.dynamodb                                   # boto3 client of the active backend
        cloud.events.emit_status_events = False          # fault injection: drop status events

Modules: ``cloud`` (LocalCloud), ``resolver`` (intrinsic functions, pure), ``deployer``,
``events`` (EventBridge routing + status events), ``lambda_runtime`` (in-process
handlers), ``dynamodb_local`` (the Java server), ``patches`` (one module per moto gap),
``pytest_plugin`` (the ``local_cloud`` fixture), ``synth`` (CDK stack -> template).
"""

from locked_workflow.testing.node import use_project_node

use_project_node()  # before anything imports aws_cdk, which starts jsii on that Node


from locked_workflow.testing.cloud import BACKENDS, ExecutionResult, LocalCloud, active_cloud
from locked_workflow.testing.deployer import Deployment, UnsupportedResourceError
from locked_workflow.testing.dynamodb_local import DynamoDBLocalUnavailable
from locked_workflow.testing.events import EventRouter
from locked_workflow.testing.resolver import ResolveError

__all__ = [
    "BACKENDS",
    "Deployment",
    "DynamoDBLocalUnavailable",
    "EventRouter",
    "ExecutionResult",
    "LocalCloud",
    "ResolveError",
    "UnsupportedResourceError",
    "active_cloud",
]
