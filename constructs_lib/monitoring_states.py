"""The lock states of a synthesized state machine, from its sections' records (each kind
records the role of every lock state it builds): what
:class:`~locked_workflow.constructs_lib.monitoring.LockMonitoring` counts and times.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

from aws_cdk import Stack

from locked_workflow.constructs_lib.section_record import Role

#: Exit event of a state, by its type (history event types of the Step Functions API).
EXIT_EVENTS = {
    "Task": "TaskStateExited", "Pass": "PassStateExited", "Choice": "ChoiceStateExited",
    "Map": "MapStateExited", "Parallel": "ParallelStateExited", "Wait": "WaitStateExited",
}


@dataclass(frozen=True)
class LockStates:
    """The lock states of a synthesized state machine (:meth:`recorded`).

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
        look at the holder, ``<lock variable>Holder``: another participant's record; a fair
        handoff's and a read/write waiter's look at a record are listed: the metrics function
        measures a wait only from a record naming its own execution).
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
    def recorded(cls, definition: Mapping[str, Any], sections: Sequence[Any]) -> "LockStates":
        """The lock states of ``sections`` (and of the sections nested in them), from their
        records (:class:`~locked_workflow.constructs_lib.section_record.StateRecord`), in the
        order of the synthesized ``definition``, where each is found by its name (an exit's
        event type follows the state's type)."""
        records: dict[str, list] = {}
        for section in _with_nested(sections):
            for entry in section.state_record:
                records.setdefault(entry.name, []).append(entry)
        fails = {Role.TIMEOUT: [], Role.LOST: [], Role.SUPERSEDED: [], Role.QUEUE_FULL: [],
                 Role.LIVENESS_CHECK: []}
        takeovers, acquisitions, releases = [], {}, {}
        for name, state in all_states(definition.get("States", {})):
            for entry in records.get(name, ()):
                if entry.role in fails:
                    fails[entry.role].append(name)
                elif entry.role is Role.TAKEOVER:
                    takeovers.append((name, entry.variable))
                elif entry.role is Role.ACQUISITION:
                    acquisitions[name] = (EXIT_EVENTS[state["Type"]], entry.variable)
                elif entry.role is Role.RELEASE:
                    releases[name] = (EXIT_EVENTS[state["Type"]], entry.variable)
        return cls(tuple(fails[Role.TIMEOUT]), tuple(fails[Role.LOST]), tuple(fails[Role.LIVENESS_CHECK]),
                   tuple(takeovers), acquisitions, releases, tuple(fails[Role.SUPERSEDED]),
                   tuple(fails[Role.QUEUE_FULL]))


def _with_nested(sections: Sequence[Any]) -> list:
    """``sections`` and the sections nested in them (rendered inside them), each once."""
    found: dict = {}
    for section in sections:
        found.setdefault(id(section), section)
        for inner in section.section_state.nested.values():
            found.setdefault(id(inner), inner)
    return list(found.values())


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

