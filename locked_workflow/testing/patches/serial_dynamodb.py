"""Serial DynamoDB: every request to moto's DynamoDB backend runs alone.

Gap (moto 5.2.1): the DynamoDB backend has no locking. A conditional write reads the
current item, evaluates the condition, then stores the new item; two threads can both
read "absent" and both win ``attribute_not_exists(pk)``. Real DynamoDB serialises writes
to an item, so a lock built on conditional writes is meaningless without this fix.

Fix: one process-wide lock around ``DynamoHandler.call_action`` - the entry point of every
DynamoDB API call (boto3 clients of the test, of Step Functions tasks, of in-process
Lambdas). Coarser than DynamoDB's per-item guarantee, and equally correct.

AWS: a conditional write succeeds only if its condition holds against the item as it is
when the write is applied - ``attribute_not_exists`` on the key prevents an overwrite
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.ConditionExpressions.html#Expressions.ConditionExpressions.PreventingOverwrites).

Proof: ``tests/local/test_patch_serial_dynamodb.py``.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack
from unittest import mock

from moto.dynamodb.responses import DynamoHandler

#: Held while moto handles one DynamoDB request.
DYNAMODB_REQUEST_LOCK = threading.RLock()


def apply(stack: ExitStack) -> None:
    original = DynamoHandler.call_action

    def call_action(self):  # type: ignore[no-untyped-def]
        with DYNAMODB_REQUEST_LOCK:
            return original(self)

    stack.enter_context(mock.patch.object(DynamoHandler, "call_action", call_action))
