"""The lock states of a synthesized state machine, found by what they do (a Fail state's
``Error``, a task's resource, what a state assigns), not by a name: what
:class:`~locked_workflow.constructs_lib.monitoring.LockMonitoring` counts and times.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from aws_cdk import Stack

from locked_workflow.state_machines import errors
from locked_workflow.state_machines import lock_protocol as protocol

#: A release assigns the hold's length to ``<lock variable>Held``.
HELD_SUFFIX = "Held"
#: Exit event of a state, by its type (history event types of the Step Functions API).
EXIT_EVENTS = {
    "Task": "TaskStateExited", "Pass": "PassStateExited", "Choice": "ChoiceStateExited",
    "Map": "MapStateExited", "Parallel": "ParallelStateExited", "Wait": "WaitStateExited",
}


@dataclass(frozen=True)
class LockStates:
    """The lock states of a synthesized state machine, found by what they do.

    :param timeouts: Fail states whose ``Error`` is ``Lock.Timeout``.
    :param lost: Fail states whose ``Error`` is ``Lock.Lost``.
    :param superseded: Fail states whose ``Error`` is ``Lock.Superseded``.
    :param queue_full: Fail states whose ``Error`` is ``Lock.QueueFull``.
    :param liveness_checks: tasks calling ``sfn:describeExecution``.
    :param takeovers: ``(state, wait variable)`` of the liveness checks that mark a stale
        holder in their wait record (``lock_protocol.after_liveness_check_expression``).
    :param acquisitions: ``state -> (exit event type, lock variable)`` of the states that
        assign a lock record with its ``owner`` and ``acquiredAt`` (a re-entered section's
        pass-through and later updates of the record do not: they copy it; nor does a waiter's
        look at the holder, ``<lock variable>Holder``: another participant's record).
    :param releases: ``state -> (exit event type, held variable)`` of the releases, which
        assign ``<lock variable>Held`` (``lock_protocol.held_ms_expression``; a fair grant
        assigns it only when it hands on its own hold, else null).
    """

    timeouts: tuple = ()
    lost: tuple = ()
    liveness_checks: tuple = ()
    takeovers: tuple = ()
    acquisitions: Mapping[str, tuple] = field(default_factory=dict)
    releases: Mapping[str, tuple] = field(default_factory=dict)
    superseded: tuple = ()
    queue_full: tuple = ()

    @classmethod
    def of(cls, definition: Mapping[str, Any]) -> "LockStates":
        timeouts, lost, checks, takeovers, acquisitions, releases = [], [], [], [], {}, {}
        superseded, queue_full = [], []
        fails = {errors.ERROR_TIMEOUT: timeouts, errors.ERROR_LOST: lost,
                 errors.ERROR_SUPERSEDED: superseded, errors.ERROR_QUEUE_FULL: queue_full}
        for name, state in all_states(definition.get("States", {})):
            kind = state.get("Type")
            if kind == "Fail" and state.get("Error") in fails:
                fails[state["Error"]].append(name)
            assign = state.get("Assign") or {}
            if kind == "Task" and str(state.get("Resource", "")).endswith(":aws-sdk:sfn:describeExecution"):
                checks.append(name)
                for variable, value in assign.items():
                    holder = variable[: -len("Wait")] + protocol.HOLDER_SUFFIX
                    if variable.endswith("Wait") and value == protocol.jsonata(
                        protocol.after_liveness_check_expression(variable, holder)
                    ):
                        takeovers.append((name, variable))
            for variable, value in assign.items():
                if (isinstance(value, str) and kind in EXIT_EVENTS and not variable.endswith(protocol.HOLDER_SUFFIX)
                        and f"'{protocol.OWNER}':" in value and f"'{protocol.ACQUIRED_AT}':" in value):
                    acquisitions[name] = (EXIT_EVENTS[kind], variable)
                if (kind in EXIT_EVENTS and isinstance(value, str) and variable.endswith(HELD_SUFFIX)
                        and protocol.held_ms_expression(variable[: -len(HELD_SUFFIX)]) in value):
                    releases[name] = (EXIT_EVENTS[kind], variable)
        return cls(tuple(timeouts), tuple(lost), tuple(checks), tuple(takeovers), acquisitions, releases,
                   tuple(superseded), tuple(queue_full))


def all_states(states: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every state, in branches and Map processors too."""
    for name, state in states.items():
        yield name, state
        for branch in state.get("Branches", []):
            yield from all_states(branch.get("States", {}))
        for processor in ("ItemProcessor", "Iterator"):
            if processor in state:
                yield from all_states(state[processor].get("States", {}))


def synthesized_definition(state_machine: Any) -> dict:
    """The state machine's definition as synthesized (tokens drawn as ``TOKEN``: they are
    ARNs and names inside strings, never state names)."""
    resource = state_machine.node.default_child
    definition = Stack.of(state_machine).resolve(resource.definition_string)
    if isinstance(definition, dict):
        definition = "".join(p if isinstance(p, str) else "TOKEN" for p in definition["Fn::Join"][1])
    return json.loads(definition)

