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

``state_delays(Delay("Lock.Turn", seconds=4))`` makes a Wait state end late: what a loaded
scheduler does, and AWS does not bound.

``transaction_conflicts(window_s=...)`` (``patches/transaction_conflicts``, re-exported here)
makes DynamoDB answer what it answers a request that meets a transaction in flight.
"""

from __future__ import annotations

import sys
import threading
import time
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


def _error(code: str, operation: str) -> ClientError:
    status = 400 if code.endswith(("ThroughputExceededException", "ThrottlingException", "RequestLimitExceeded")) else 500
    return ClientError(
        {
            "Error": {"Code": code, "Message": f"injected fault: {code}"},
            "ResponseMetadata": {"HTTPStatusCode": status, "RequestId": "injected-fault"},
        },
        operation,
    )


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
        raise _modeled_error(client, fault.error_code, operation, params)

    with mock.patch.object(BaseClient, "_make_api_call", _make_api_call):
        yield log


@dataclass(frozen=True)
class CallingState:
    """The Task state of a local execution that makes the current call (see :func:`calling_state`)."""

    execution_arn: str
    state_name: str
    environment: Any  # the interpreter's Environment of the state (its branch's, in a Parallel)


def calling_state() -> CallingState | None:
    """The Task state, and its execution, whose call is running in this thread - ``None`` for a
    call that no state makes (a Lambda's, a client's, the test's own). For ``when``/``then`` of a
    :class:`Fault` that must hit one state's call: ``when=lambda p: (c := calling_state()) and
    c.state_name == "Lock.Acquire"``. The local runtime runs every Task's attempt in a thread
    of its own, in the interpreter's ``ExecutionState._eval_execution`` (moto's parser, ported
    from LocalStack's); that frame holds the state and its environment."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_eval_execution":
            state, env = frame.f_locals.get("self"), frame.f_locals.get("env")
            name = getattr(state, "name", None)
            try:
                arn = env.states.context_object.context_object_data["Execution"]["Id"]
            except (AttributeError, KeyError, TypeError):
                arn = None
            if isinstance(name, str) and isinstance(arn, str):
                return CallingState(arn, name, env)
        frame = frame.f_back
    return None


class FaultRegistry:
    """Faults added and removed while the hook stays in place (:func:`fault_registry`): what
    scenarios running side by side need, each placing its own faults on its own keys."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self._guard = threading.Lock()
        #: Called with (service, operation, params) before every call (they must not call AWS).
        self.observers: list[Callable[[str, str, dict], None]] = []
        #: Called likewise once a call has returned or failed (in the calling thread).
        self.completions: list[Callable[[str, str, dict], None]] = []

    def add(self, fault: Fault) -> Fault:
        with self._guard:
            self._faults.append(fault)
        return fault

    def remove(self, fault: Fault) -> None:
        with self._guard:
            self._faults = [other for other in self._faults if other is not fault]

    def due(self, service: str, operation: str, params: dict) -> Fault | None:
        with self._guard:
            for fault in self._faults:
                if (fault.service, fault.operation) == (service, operation) and fault.injected < fault.times \
                        and fault.when(params):
                    fault.injected += 1
                    return fault
        return None


@contextmanager
def fault_registry() -> Iterator[FaultRegistry]:
    """A :class:`FaultRegistry` whose faults apply (as :func:`dynamodb_faults`' do) to every
    call of any service while the block runs."""
    registry = FaultRegistry()
    original = BaseClient._make_api_call

    def _make_api_call(client: BaseClient, operation: str, params: dict) -> Any:
        service = client.meta.service_model.service_name
        for observe in list(registry.observers):
            observe(service, operation, params)
        try:
            fault = registry.due(service, operation, params)
            if fault is None:
                return original(client, operation, params)
            if fault.after_call:
                original(client, operation, params)
            if fault.then is not None:
                fault.then()
            raise _modeled_error(client, fault.error_code, operation, params)
        finally:
            for complete in list(registry.completions):
                complete(service, operation, params)

    with mock.patch.object(BaseClient, "_make_api_call", _make_api_call):
        yield registry


def _modeled_error(client: BaseClient, code: str, operation: str, params: dict) -> ClientError:
    """:func:`_error` as botocore raises it: the service's modeled exception class for ``code``
    (what Step Functions' ``aws-sdk`` integrations name their errors by: ``DynamoDb.<Class>``), and
    a cancelled transaction's ``CancellationReasons`` (its first item in conflict).
    https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html"""
    error = _error(code, operation)
    if code == "TransactionCanceledException":
        reasons = [{"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}]
        reasons += [{"Code": "None"}] * (len(params.get("TransactItems", [])) - 1)
        error.response["CancellationReasons"] = reasons
        error.response["Error"]["Message"] = (
            "Transaction cancelled, please refer cancellation reasons for specific reasons "
            f"[{', '.join(reason['Code'] for reason in reasons)}]")
    modeled = client.exceptions.from_code(code)
    return modeled(error.response, operation) if modeled is not ClientError else error


@dataclass
class Delay:
    """End the first ``times`` runs of the Wait state ``state`` (its name) for which
    ``when(execution_arn)`` holds ``seconds`` late (see :func:`state_delays`)."""

    state: str
    seconds: float
    times: int = 1
    when: Callable[[str], bool] = lambda execution_arn: True
    injected: int = 0


@contextmanager
def state_delays(*delays: Delay) -> Iterator[tuple[Delay, ...]]:
    """Wait states that end late: after a matching Wait has waited its time, its run sleeps
    ``seconds`` more before it leaves the state - the delay a loaded scheduler adds after a
    Wait (AWS documents no bound on it:
    https://docs.aws.amazon.com/step-functions/latest/dg/state-wait.html). The hook wraps the
    local interpreter's Wait state (moto's ``StateWait._eval_state``, ported from LocalStack's),
    so it sees every execution's Wait states while the block runs."""
    from moto.stepfunctions.parser.asl.component.state.wait.state_wait import StateWait

    guard = threading.Lock()
    original = StateWait._eval_state

    def _due(name: str, arn: str) -> Delay | None:
        with guard:
            for delay in delays:
                if delay.state == name and delay.injected < delay.times and delay.when(arn):
                    delay.injected += 1
                    return delay
        return None

    def _eval_state(state: Any, env: Any) -> None:
        original(state, env)
        try:
            arn = env.states.context_object.context_object_data["Execution"]["Id"]
        except (AttributeError, KeyError, TypeError):
            arn = ""
        delay = _due(state.name, arn)
        if delay is not None:
            time.sleep(delay.seconds)

    with mock.patch.object(StateWait, "_eval_state", _eval_state):
        yield delays
