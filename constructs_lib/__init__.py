"""CDK constructs that run any Step Functions workflow under an exclusive DynamoDB lock.

The constructs are imported lazily, so runtime code (``constructs_lib.lock_client`` in a
Lambda, say) does not need aws-cdk-lib installed.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "LockTable": "constructs_lib.lock_table",
    "LockedSection": "constructs_lib.locked_workflow",
    "LockedWorkflow": "constructs_lib.locked_workflow",
    "WaitPolicy": "state_machines.lock_protocol",
    "LockClient": "constructs_lib.lock_client",
    "LockJanitor": "constructs_lib.janitor",
    "LockMonitoring": "constructs_lib.monitoring",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'constructs_lib' has no attribute {name!r}")
