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
``pytest_plugin`` (the ``local_cloud`` fixture, registered with pytest by the package's
``pytest11`` entry point: no conftest line), ``synth`` (CDK stack -> template).

Importing this package (or its pytest plugin) has no side effect: the runtime's modules
(moto and the patches) load on first use of a name below.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "BACKENDS": "locked_workflow.testing.cloud",
    "ExecutionResult": "locked_workflow.testing.cloud",
    "ExecutionsStillRunning": "locked_workflow.testing.cloud",
    "LocalCloud": "locked_workflow.testing.cloud",
    "active_cloud": "locked_workflow.testing.cloud",
    "Deployment": "locked_workflow.testing.deployer",
    "UnsupportedResourceError": "locked_workflow.testing.deployer",
    "DynamoDBLocalUnavailable": "locked_workflow.testing.dynamodb_local",
    "EventRouter": "locked_workflow.testing.events",
    "ResolveError": "locked_workflow.testing.resolver",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'locked_workflow.testing' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
