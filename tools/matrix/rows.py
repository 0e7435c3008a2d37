"""The fault matrix's rows: every lock state that calls DynamoDB or Step Functions, read from
the synthesized definitions, plus every call of the :class:`LockClient` and of the janitor.

A workflow row is ``(kind, state name)``: walking a definition (into Parallel branches and
Map item processors) keeps each Task whose ``Resource`` is a DynamoDB or Step Functions
integration (``arn:aws:states:::dynamodb:*``, ``:::aws-sdk:dynamodb:*``, ``:::aws-sdk:sfn:*``,
``:::states:*``, with or without ``.waitForTaskToken``); the Lambda tasks (the work) are not
the lock's. The call a row makes is named as botocore names it (service, operation), so the
fault hook (:mod:`locked_workflow.testing.faults`) can match exactly that state's call: by the
calling state and execution (:func:`~locked_workflow.testing.faults.calling_state`).

Client and janitor rows are ``(kind, call)``, the call named by the protocol write it
performs (:func:`write_name`: its update and condition compared with every ``LockWrite`` of
``state_machines``), or by its operation for a read. They are declared
(:data:`CLIENT_CALLS`, :data:`JANITOR_CALLS`); ``tests/tools/test_fault_matrix.py`` runs each client
mode and checks every call it makes has a row, and the cells flag any call of a client or the
janitor that has none.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from locked_workflow.state_machines import (
    fair_protocol,
    lock_protocol,
    multikey_protocol,
    record_protocol,
    semaphore_protocol,
    shared_protocol,
)
from locked_workflow.state_machines.lock_protocol import LockWrite

#: Integrations of the lock's path: ``:::<service>:<action>`` (optimized) or
#: ``:::aws-sdk:<service>:<action>``, maybe ``.waitForTaskToken``.
_RESOURCE = re.compile(r":states:::(?:aws-sdk:)?(dynamodb|sfn|states):(\w+)(\.waitForTaskToken|\.sync(?::2)?)?$")
#: Step Functions' service name in an ARN -> botocore's.
_SERVICES = {"dynamodb": "dynamodb", "sfn": "stepfunctions", "states": "stepfunctions"}


@dataclass(frozen=True, order=True)
class Row:
    """One row of the matrix: a state (or a client's or the janitor's call) and what it calls."""

    kind: str  # mutex, nested, fair, ... ; client-mutex, client-fair, client-rw; janitor
    state: str  # the state's name; a client's or the janitor's call name
    service: str  # botocore's: dynamodb | stepfunctions
    operation: str  # botocore's: UpdateItem, TransactWriteItems, SendTaskSuccess ...
    callback: bool = False  # .waitForTaskToken: the call parks the execution

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.state}"

    @property
    def writes(self) -> bool:
        """A write (a transaction on the same item can conflict with it)."""
        return self.service == "dynamodb" and not self.operation.startswith(("Get", "TransactGet", "Query", "Scan"))


def _operation(action: str) -> str:
    return action[:1].upper() + action[1:]


def task_rows(kind: str, definition: Mapping[str, Any]) -> list[Row]:
    """Every Task of ``definition`` (a parsed ASL document) that calls DynamoDB or Step
    Functions, as rows of ``kind``, in the order of the walk."""
    rows = []
    for name, state in _tasks(definition.get("States", {})):
        resource = state.get("Resource")
        found = _RESOURCE.search(resource) if isinstance(resource, str) else None
        if found:
            service, action, suffix = found.groups()
            rows.append(Row(kind, name, _SERVICES[service], _operation(action), suffix == ".waitForTaskToken"))
    return rows


def _tasks(states: Mapping[str, Any]) -> Iterator[tuple[str, dict]]:
    for name, state in states.items():
        if state.get("Type") == "Task":
            yield name, state
        for branch in state.get("Branches", []):
            yield from _tasks(branch.get("States", {}))
        processor = state.get("ItemProcessor") or state.get("Iterator")
        if processor:
            yield from _tasks(processor.get("States", {}))


def definitions(template: Mapping[str, Any], machines: Mapping[str, str]) -> dict[str, dict]:
    """Kind -> the parsed definition of its state machine (``machines``: kind -> state machine
    name) in a synthesized ``template``; references to other resources become placeholders."""
    by_name = {}
    for resource in template["Resources"].values():
        if resource["Type"] != "AWS::StepFunctions::StateMachine":
            continue
        body = resource["Properties"]["DefinitionString"]
        text = body if isinstance(body, str) else "".join(
            part if isinstance(part, str) else "TOKEN" for part in body["Fn::Join"][1])
        by_name[resource["Properties"].get("StateMachineName")] = json.loads(text)
    missing = sorted(set(machines.values()) - set(by_name))
    if missing:
        raise ValueError(f"`machines` must name state machines of the template, got: {missing}")
    return {kind: by_name[name] for kind, name in machines.items()}


# -- the writes of the protocol, by name -------------------------------------------------------

def protocol_writes() -> dict[str, LockWrite]:
    """Every ``LockWrite`` the protocol modules define, by ``<module>.<NAME>`` (a dict of
    writes: ``<module>.<NAME>[<key>]``)."""
    found: dict[str, LockWrite] = {}
    for module in (lock_protocol, fair_protocol, shared_protocol, multikey_protocol, record_protocol,
                   semaphore_protocol):
        short = module.__name__.rpartition(".")[2]
        for name, value in vars(module).items():
            if isinstance(value, LockWrite) and name.isupper():
                found.setdefault(f"{short}.{name}", value)
            elif isinstance(value, dict) and name.isupper():
                for key, write in value.items():
                    if isinstance(write, LockWrite):
                        found.setdefault(f"{short}.{name}[{key}]", write)
    return found


_WRITES = None


def write_name(operation: str, params: Mapping[str, Any]) -> str:
    """The call's name: the protocol write whose update and condition it carries (each item's,
    ``+``-joined, for a transaction), else its operation (a read, an unconditional delete)."""
    global _WRITES
    if _WRITES is None:
        _WRITES = {}
        for name, write in protocol_writes().items():  # the first name of a write: the module's own
            _WRITES.setdefault((write.update, write.condition), name)
    if operation == "TransactWriteItems":
        parts = []
        for entry in params.get("TransactItems", []):
            (action, body), = entry.items()
            parts.append(_one_write(action, body))
        return "+".join(parts)
    return _one_write(operation, params)


def _one_write(action: str, body: Mapping[str, Any]) -> str:
    update, condition = body.get("UpdateExpression", ""), body.get("ConditionExpression", "")
    if not update and not condition:
        return action
    named = _WRITES.get((update, condition))
    if named is None and not update:  # a condition check or delete under a write's condition
        named = next((n for (u, c), n in _WRITES.items() if c == condition), None)
    return named or f"{action}(unknown)"


# -- the clients' and the janitor's calls ---------------------------------------------------

#: Every call a :class:`LockClient` makes, per mode: (kind, call name, service, operation).
CLIENT_CALLS: tuple[Row, ...] = tuple(Row(kind, call, service, operation) for kind, call, service, operation in (
    ("client-mutex", "lock_protocol.CLIENT_ACQUIRE", "dynamodb", "UpdateItem"),
    ("client-mutex", "lock_protocol.CLIENT_TAKEOVER", "dynamodb", "UpdateItem"),
    ("client-mutex", "lock_protocol.CLIENT_REFRESH", "dynamodb", "UpdateItem"),
    ("client-mutex", "lock_protocol.CLIENT_RELEASE", "dynamodb", "UpdateItem"),
    ("client-mutex", "GetItem", "dynamodb", "GetItem"),
    # a waiter's liveness check of a workflow holder (constructs_lib/client_liveness.py)
    ("client-mutex", "SendTaskHeartbeat", "stepfunctions", "SendTaskHeartbeat"),
    ("client-mutex", "lock_protocol.ABANDONED", "dynamodb", "UpdateItem"),
    ("client-mutex", "DescribeExecution", "stepfunctions", "DescribeExecution"),
    ("client-mutex", "lock_protocol.RETIRE_BY", "dynamodb", "UpdateItem"),
    ("client-fair", "fair_protocol.FAST_ACQUIRE", "dynamodb", "UpdateItem"),
    ("client-fair", "fair_protocol.ENQUEUE", "dynamodb", "UpdateItem"),
    ("client-fair", "fair_protocol.PARK", "dynamodb", "UpdateItem"),
    ("client-fair", "fair_protocol.CLAIM", "dynamodb", "UpdateItem"),
    ("client-fair", "fair_protocol.GRANT", "dynamodb", "UpdateItem"),
    ("client-fair", "fair_protocol.SKIP", "dynamodb", "UpdateItem"),
    ("client-fair", "fair_protocol.REVOKE", "dynamodb", "UpdateItem"),
    ("client-fair", "fair_protocol.MARK", "dynamodb", "UpdateItem"),
    ("client-fair", "fair_protocol.LEAVE_PRESENT", "dynamodb", "UpdateItem"),  # leave_queue: a row read present
    ("client-fair", "fair_protocol.RELEASE_ALONE", "dynamodb", "UpdateItem"),
    ("client-fair", "lock_protocol.CLIENT_RELEASE", "dynamodb", "UpdateItem"),
    ("client-fair", "lock_protocol.CLIENT_REFRESH", "dynamodb", "UpdateItem"),
    ("client-fair", "lock_protocol.REFRESH", "dynamodb", "UpdateItem"),
    ("client-fair", "lock_protocol.RELEASE", "dynamodb", "UpdateItem"),
    ("client-fair", "DeleteItem", "dynamodb", "DeleteItem"),
    ("client-fair", "GetItem", "dynamodb", "GetItem"),
    ("client-fair", "DescribeExecution", "stepfunctions", "DescribeExecution"),  # a grantee's; a holder's too
    ("client-fair", "SendTaskHeartbeat", "stepfunctions", "SendTaskHeartbeat"),
    ("client-fair", "lock_protocol.ABANDONED", "dynamodb", "UpdateItem"),
    ("client-fair", "lock_protocol.RETIRE_BY", "dynamodb", "UpdateItem"),
    ("client-fair", "SendTaskSuccess", "stepfunctions", "SendTaskSuccess"),
    ("client-fair", "SendTaskFailure", "stepfunctions", "SendTaskFailure"),
    # a coalescing key (QueueLimit.keep_newest): its handoff passes superseded tickets
    ("client-fair", "fair_protocol.JUMP", "dynamodb", "UpdateItem"),
    ("client-rw", "shared_protocol.FAST_READ", "dynamodb", "UpdateItem"),
    ("client-rw", "shared_protocol.FAST_WRITE", "dynamodb", "UpdateItem"),
    ("client-rw", "shared_protocol.ENQUEUE_READ", "dynamodb", "UpdateItem"),
    ("client-rw", "shared_protocol.ENQUEUE_WRITE", "dynamodb", "UpdateItem"),
    ("client-rw", "shared_protocol.CLAIM_READ", "dynamodb", "UpdateItem"),
    ("client-rw", "shared_protocol.CLAIM_WRITE", "dynamodb", "UpdateItem"),
    ("client-rw", "shared_protocol.GRANT_READ", "dynamodb", "UpdateItem"),
    ("client-rw", "shared_protocol.GRANT_WRITE", "dynamodb", "UpdateItem"),
    ("client-rw", "shared_protocol.SKIP", "dynamodb", "UpdateItem"),
    ("client-rw", "fair_protocol.MARK", "dynamodb", "UpdateItem"),  # shared_protocol.MARK: the same write
    ("client-rw", "fair_protocol.LEAVE", "dynamodb", "UpdateItem"),  # shared_protocol.LEAVE: the same
    ("client-rw", "shared_protocol.LEAVE_READ", "dynamodb", "UpdateItem"),
    ("client-rw", "shared_protocol.REAP_READ", "dynamodb", "UpdateItem"),
    ("client-rw", "shared_protocol.LEAVE_LAST", "dynamodb", "UpdateItem"),
    ("client-rw", "shared_protocol.REAP_LAST", "dynamodb", "UpdateItem"),
    ("client-rw", "shared_protocol.PARK+shared_protocol.PARK_UNLESS", "dynamodb", "TransactWriteItems"),
    ("client-rw", "lock_protocol.RELEASE", "dynamodb", "UpdateItem"),  # shared_protocol.RELEASE_WRITE
    ("client-rw", "lock_protocol.REFRESH", "dynamodb", "UpdateItem"),
    ("client-rw", "DeleteItem", "dynamodb", "DeleteItem"),
    ("client-rw", "GetItem", "dynamodb", "GetItem"),
    ("client-rw", "SendTaskSuccess", "stepfunctions", "SendTaskSuccess"),
    # a waiter's liveness check of the workflow holds it is blocked by (client_liveness.py,
    # shared_client.ReadWriteHolds): the hold's presence row (GetItem, above), its probe, the
    # retire of an abandoned writer's / reader's hold (the row's delete beside the lock item's
    # update), the question about its execution and the retire of an ended one
    ("client-rw", "SendTaskHeartbeat", "stepfunctions", "SendTaskHeartbeat"),
    ("client-rw", "lock_protocol.RETIRE_BY+shared_protocol.GONE_ROW", "dynamodb", "TransactWriteItems"),
    ("client-rw", "shared_protocol.GONE_ROW+shared_protocol.RETIRE_GONE_READER", "dynamodb", "TransactWriteItems"),
    ("client-rw", "DescribeExecution", "stepfunctions", "DescribeExecution"),
    ("client-rw", "lock_protocol.RETIRE_BY", "dynamodb", "UpdateItem"),  # shared_protocol.RETIRE_GONE_WRITER
    ("client-rw", "shared_protocol.RETIRE_GONE_READER", "dynamodb", "UpdateItem"),
))

#: Every call of the janitor (``lambdas/lock_janitor``): the history it reads, the lock item
#: it reads before a retire, its retires, the presence rows it forgets, the entries it dequeues
#: (a fair waiter's: ``LockClient.leave_queue``, which may hand the lock on).
JANITOR_CALLS: tuple[Row, ...] = tuple(Row("janitor", call, service, operation) for call, service, operation in (
    ("GetExecutionHistory", "stepfunctions", "GetExecutionHistory"),
    ("GetItem", "dynamodb", "GetItem"),
    ("lock_protocol.RETIRE_BY", "dynamodb", "UpdateItem"),
    ("shared_protocol.RETIRE_GONE_READER", "dynamodb", "UpdateItem"),
    ("shared_protocol.FORGET_ROW", "dynamodb", "DeleteItem"),
    ("shared_protocol.DEQUEUE", "dynamodb", "UpdateItem"),
    # a fair waiter's entry: the janitor leaves the queue as the fair client does (and hands on)
    ("fair_protocol.LEAVE_PRESENT", "dynamodb", "UpdateItem"),  # never a row a handoff took
    ("fair_protocol.GRANT", "dynamodb", "UpdateItem"),
    # a grant to the ended waiter nobody confirmed: taken back (never claimed: issue 25)
    ("fair_protocol.DROP_GRANT", "dynamodb", "UpdateItem"),
    ("fair_protocol.SKIP", "dynamodb", "UpdateItem"),  # its handoff passes a waiter gone (seen by the matrix)
    ("fair_protocol.REVOKE", "dynamodb", "UpdateItem"),
    ("fair_protocol.MARK", "dynamodb", "DeleteItem"),  # its handoff's unmark: a delete under MARK's condition
    ("fair_protocol.JUMP", "dynamodb", "UpdateItem"),  # its handoff on a coalescing key (superseded tickets)
    # (it never holds a lock: no RELEASE - its hand-on used to claim the grant and release it)
    ("SendTaskFailure", "stepfunctions", "SendTaskFailure"),  # ... and a superseded waiter's wake-up
    ("DeleteItem", "dynamodb", "DeleteItem"),
    ("SendTaskSuccess", "stepfunctions", "SendTaskSuccess"),
    # ... whose wake-up failed: does the grantee still run (seen by the matrix)
    ("DescribeExecution", "stepfunctions", "DescribeExecution"),
))


def call_row(kind: str, operation: str, params: Mapping[str, Any]) -> str:
    """A client's or the janitor's call as its row names it (a transaction whose items all
    carry one write of a dict of writes - ``PARK_UNLESS[...]`` - by that dict's name)."""
    name = write_name(operation, params)
    if operation == "TransactWriteItems":
        parts = {re.sub(r"\[.*\]$", "", part) for part in name.split("+")}
        return "+".join(sorted(parts))
    return re.sub(r"\[.*\]$", "", name)
