"""locked-workflow: AWS CDK constructs that serialize Step Functions workflows with a
pessimistic DynamoDB lock.

The package's layout::

    locked_workflow                  the public API (below), imported lazily
    locked_workflow.constructs_lib   the constructs, the lock client and the CLI
    locked_workflow.state_machines   the lock protocols: every DynamoDB expression, spelled once
    locked_workflow.lambdas          the code of the Lambda functions the constructs deploy
    locked_workflow.testing          the offline runtime (LocalCloud) and its pytest plugin

The constructs are imported lazily, so runtime code (``LockClient`` in a Lambda function,
say) does not need aws-cdk-lib installed.

In a checkout of the repository the subpackages are the top-level folders ``constructs_lib/``,
``state_machines/`` and ``lambdas/``: the wheel and the editable install (``pip install -e .``,
``make deps``) map them under this package (``[tool.setuptools] package-dir`` in
pyproject.toml), so the package is used installed, never from the checkout's path alone.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "Lock": "locked_workflow.constructs_lib.lock",
    "LockTable": "locked_workflow.constructs_lib.lock_table",
    "QueueLimit": "locked_workflow.constructs_lib.queue_limit",
    "LockedSection": "locked_workflow.constructs_lib.locked_section",
    "LockedWorkflow": "locked_workflow.constructs_lib.locked_workflow",
    "WaitPolicy": "locked_workflow.state_machines.wait_policy",
    "LockErrors": "locked_workflow.state_machines.errors",
    "LockClient": "locked_workflow.constructs_lib.lock_client",
    "LockClientLayer": "locked_workflow.constructs_lib.client_layer",
    "LockJanitor": "locked_workflow.constructs_lib.janitor",
    "LockMonitoring": "locked_workflow.constructs_lib.monitoring",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'locked_workflow' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
