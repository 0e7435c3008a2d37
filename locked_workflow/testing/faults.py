"""Fault injection for DynamoDB calls (and other services': ``Fault(service=...)``), on either
backend (tests of your own workflows too).

::

    acquire = Fault("UpdateItem", "ProvisionedThroughputExceededException", times=2,
                    when=lambda params: "ADD" in params["UpdateExpression"])
    with dynamodb_faults(acquire) as log:
        ...                                   # the first two matching calls fail (throttled)
    assert log.injected == 2

``after_call=True`` lets the call reach DynamoDB and then fails it: the write happened but
its response was lost, as with a timeout - what a retry must cope with. ``then`` runs in
between (after the write, if any, before the error reaches the caller): what others do
meanwhile, e.g. a waiter taking the lock the lost release freed, or the caller's execution
being stopped right there. ``when`` must not call AWS (it runs under the hook's lock).

The hook sits in botocore (``BaseClient._make_api_call``), upstream of both moto and
DynamoDB Local, so it sees the state machines', the Lambdas' and the tests' own calls.

``transaction_conflicts(window_s=...)`` (``patches/transaction_conflicts``, re-exported here)
makes DynamoDB answer what it answers a request that meets a transaction in flight.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator
from unittest import mock

from botocore.client import BaseClient
from botocore.exceptions import ClientError

from locked_workflow.testing.patches.transaction_conflicts import (  # noqa: F401 - the fault API in one place
    ConflictLog,
    transaction_conflicts,
)


@dataclass
class Fault:
    """Fail the first ``times`` ``operation`` calls of ``service`` (botocore's name: ``dynamodb``,
    ``stepfunctions`` ...) for which ``when(params)`` holds."""

    operation: str
    error_code: str
    times: int = 1
    after_call: bool = False
    when: Callable[[dict], bool] = lambda params: True
    then: Callable[[], Any] | None = None
    injected: int = 0
    service: str = "dynamodb"


@dataclass
class FaultLog:
    faults: tuple[Fault, ...]
    calls: list[tuple[str, str]] = field(default_factory=list)  # (operation, outcome)

    @property
    def injected(self) -> int:
        return sum(f.injected for f in self.faults)


def _error(client: BaseClient, code: str, operation: str) -> ClientError:
    """The error botocore raises for ``code``: the service's modeled exception class where it
    has one (as for a real response), so a Step Functions aws-sdk task names it
    ``<Service>.<code>`` - a plain ``ClientError`` would surface as ``DynamoDb.DynamoDbException``,
    which no Retry on a named error matches."""
    status = 400 if code.endswith(("ThroughputExceededException", "ThrottlingException", "RequestLimitExceeded")) else 500
    response = {
        "Error": {"Code": code, "Message": f"injected fault: {code}"},
        "ResponseMetadata": {"HTTPStatusCode": status, "RequestId": "injected-fault"},
    }
    return client.exceptions.from_code(code)(response, operation)


@contextmanager
def dynamodb_faults(*faults: Fault) -> Iterator[FaultLog]:
    log = FaultLog(faults)
    guard = threading.Lock()
    original = BaseClient._make_api_call

    services = {fault.service for fault in faults}

    def _due(service: str, operation: str, params: dict) -> Fault | None:
        with guard:
            for fault in faults:
                if (fault.service, fault.operation) == (service, operation) and fault.injected < fault.times \
                        and fault.when(params):
                    fault.injected += 1
                    return fault
        return None

    def _make_api_call(client: BaseClient, operation: str, params: dict) -> Any:
        service = client.meta.service_model.service_name
        if service not in services:
            return original(client, operation, params)
        fault = _due(service, operation, params)
        if fault is None:
            log.calls.append((operation, "ok"))
            return original(client, operation, params)
        if fault.after_call:
            original(client, operation, params)
            log.calls.append((operation, f"done, then {fault.error_code}"))
            if fault.then is not None:
                fault.then()
        else:
            log.calls.append((operation, fault.error_code))
            if fault.then is not None:
                fault.then()
        raise _error(client, fault.error_code, operation)

    with mock.patch.object(BaseClient, "_make_api_call", _make_api_call):
        yield log
