"""CDK constructs that run any Step Functions workflow under an exclusive DynamoDB lock."""

from constructs_lib.lock_table import LockTable
from constructs_lib.locked_workflow import LockedSection, LockedWorkflow
from state_machines.lock_protocol import WaitPolicy

__all__ = ["LockTable", "LockedSection", "LockedWorkflow", "WaitPolicy"]
