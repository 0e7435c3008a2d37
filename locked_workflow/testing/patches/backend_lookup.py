"""Backend lookup: finding a service's backend for a known account takes no process-wide lock.

Gap (moto 5.2.1): ``BackendDict.__getitem__`` (``dynamodb_backends[account_id]``, and so every
``[account_id][region]``) enters ``moto.core.base_backend.backend_lock``, one ``RLock`` for the
whole process, on every lookup, to create the account's backends if they are missing - and a
request looks up several: moto's dispatch (``mark_account_as_visited`` reads the IAM
backend), ``DynamoHandler.dynamodb_backend`` at each use, the runtime's meters (CloudWatch's
backend for each ``ConsumedCapacity`` metric). Requests that run at once (per-item DynamoDB
serialization lets requests on different items proceed together, as DynamoDB does) queue on
that one lock, and a thread preempted while holding it stalls them all. Sampled with py-spy
(``--gil``) over a burst of 30 threads each updating and reading an item of its own,
``BackendDict._create_account_specific_backend`` held 46 % of the time the threads held the
interpreter, almost all of it entering the lock.

Fix: a lookup whose account already has its backends returns them without the lock (a dict
read, atomic in CPython); a missing account goes through moto's own ``__getitem__``, which
creates it under the lock as before. moto's creation, reset and the objects returned are
unchanged.

AWS: no AWS behaviour: a cost of the runtime. It keeps what AWS documents for DynamoDB
(requests on different items proceed independently; only writes to one item are ordered:
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-isolation)
from queueing on a lock that no AWS service has.

Proof: ``tests/local/test_patch_backend_lookup.py``.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any, Callable

from moto.core.base_backend import BackendDict

from locked_workflow.testing.seams import patch_attribute


def _known_without_lock(original: Callable[[BackendDict, str], Any]) -> Callable[[BackendDict, str], Any]:
    def __getitem__(self: BackendDict, account_id: str) -> Any:
        found = dict.get(self, account_id)
        return found if found is not None else original(self, account_id)

    return __getitem__


def apply(stack: ExitStack) -> None:
    patch_attribute(stack, BackendDict, "__getitem__", _known_without_lock(BackendDict.__getitem__), by=__name__)
