"""The record of a locked section's states, kept while the section builds them: each state's
name with its role and the variable concerned. The checks that need to know which rendered
state is the lock's (the re-entrancy and EXPRESS checks, the work's stop grace and guard)
read this record and compare state names, never substrings of the rendered JSON: state
names are unique in a state machine's definition
(https://docs.aws.amazon.com/step-functions/latest/dg/statemachine-structure.html: "State names
must be unique within the scope of the whole state machine").
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Optional, Tuple


class Role(enum.Enum):
    """What a recorded state does for the lock."""

    #: The section's Parallel (its entry record; the whole section).
    SECTION = "section"
    #: Any other state of the lock's own (named by ``LockedSection.state_name``).
    LOCK = "lock"
    #: Its exit assigns a lock record (``owner``, ``acquiredAt``) to the variable: the section's
    #: own acquisition (its lock variable), or a record of another participant's hold it read (a
    #: fair handoff's grantee, a read/write waiter's look): the metrics function measures a wait
    #: only from a record naming its own execution.
    ACQUISITION = "acquisition"
    #: Its exit assigns the hold's length to ``<lock variable>Held``.
    RELEASE = "release"
    #: Asks Step Functions whether the holder's execution still runs.
    LIVENESS_CHECK = "liveness check"
    #: A liveness check that marks a stale holder in the wait record.
    TAKEOVER = "takeover"
    #: Registers the hold's presence token.
    PRESENCE = "presence"
    #: A waiter parks on a task token.
    PARK = "park"
    #: Fails ``Lock.Timeout``.
    TIMEOUT = "timeout"
    #: Fails ``Lock.Lost``.
    LOST = "lost"
    #: Fails ``Lock.Superseded``.
    SUPERSEDED = "superseded"
    #: Fails ``Lock.QueueFull``.
    QUEUE_FULL = "queue full"


@dataclass(frozen=True)
class RecordedState:
    """One recorded role of a state."""

    name: str
    role: Role
    #: The variable concerned (``None``: none).
    variable: Optional[str] = None


class StateRecord:
    """A section's states by name, each with its roles (a state may have several: a release
    that also ends in an acquisition's hand-off, a liveness check that takes over)."""

    def __init__(self) -> None:
        self._entries: dict[str, list[RecordedState]] = {}

    def add(self, name: str, role: Role, variable: Optional[str] = None) -> None:
        """Record that the state named ``name`` has ``role`` (about ``variable``)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"`name` must be a state name, got: {name!r}")
        if not isinstance(role, Role):
            raise ValueError(f"`role` must be a Role, got: {role!r}")
        entries = self._entries.setdefault(name, [])
        entry = RecordedState(name, role, variable)
        if entry not in entries:
            entries.append(entry)

    def names(self, *roles: Role) -> set:
        """Names of the recorded states (with one of ``roles``, when given)."""
        return {e.name for e in self if not roles or e.role in roles}

    def of(self, role: Role) -> Tuple[RecordedState, ...]:
        """The entries with ``role``, in the order they were recorded."""
        return tuple(e for e in self if e.role is role)

    @property
    def section_name(self) -> str:
        """The name of the section's Parallel."""
        (entry,) = self.of(Role.SECTION)
        return entry.name

    def __iter__(self) -> Iterator[RecordedState]:
        for entries in self._entries.values():
            yield from entries

    def __contains__(self, name: object) -> bool:
        return name in self._entries


def named_states(states: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``(name, state)`` of every rendered state in ``states``, in Parallel branches and Map
    item processors (inline or distributed) at any depth."""
    for name, state in states.items():
        yield name, state
        if not isinstance(state, Mapping):
            continue
        for branch in state.get("Branches", []) or []:
            yield from named_states(branch.get("States", {}))
        for processor in ("ItemProcessor", "Iterator"):
            if isinstance(state.get(processor), Mapping):
                yield from named_states(state[processor].get("States", {}))


def rendered_definition(resolved: Any) -> dict:
    """A state machine's definition, from its resolved ``definition_string`` (a string, or an
    ``Fn::Join`` of strings and tokens): each token is drawn as ``0`` - tokens are ARNs, names
    and numbers inside the definition, never state names - so the text parses as JSON."""
    if isinstance(resolved, Mapping) and "Fn::Join" in resolved:
        separator, parts = resolved["Fn::Join"]
        resolved = separator.join(p if isinstance(p, str) else "0" for p in parts)
    if not isinstance(resolved, str):
        raise ValueError(f"a state machine's definition must render to JSON text, got: {resolved!r}")
    return json.loads(resolved)


def state_names(definition: Mapping[str, Any]) -> set:
    """Every state name of a rendered definition (or branch), at any depth."""
    return {name for name, _ in named_states(definition.get("States", {}))}
