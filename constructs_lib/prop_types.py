"""Type checks of construct props, at synth, before anything is built.

jsii interfaces (``dynamodb.ITable``, ``sfn.IChainable`` ...) cannot be checked with
``isinstance``: a value is checked for the members the construct uses. A wrong type raises
``TypeError`` with the project's message form: "`x` must …, got: …".
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from aws_cdk import Duration

from locked_workflow.constructs_lib.lock_table import LockTable

_TABLE_MEMBERS = ("table_name", "table_arn", "grant")
_CHAINABLE_MEMBERS = ("start_state", "end_states", "id")
_STATE_MACHINE_MEMBERS = ("state_machine_arn", "grant_start_execution")


def _shown(value: Any) -> str:
    return f"{type(value).__name__} {value!r}" if isinstance(value, (str, int, float)) else type(value).__name__


def _has(value: Any, members: Sequence[str]) -> bool:
    return all(hasattr(value, member) for member in members)


def table(name: str, value: Any, *, required: bool = False) -> Optional[Any]:
    """A DynamoDB table prop (optional unless ``required``); a :class:`LockTable` stands for
    its ``table``."""
    if value is None and not required:
        return None
    if isinstance(value, LockTable):
        return value.table
    if not _has(value, _TABLE_MEMBERS):
        raise TypeError(f"`{name}` must be a DynamoDB table (dynamodb.ITable, or a LockTable), got: {_shown(value)}")
    return value


def chainable(name: str, value: Any) -> Any:
    """A Step Functions chainable prop (a state, a chain, a construct of states)."""
    if not _has(value, _CHAINABLE_MEMBERS):
        raise TypeError(f"`{name}` must be a Step Functions state or chain (sfn.IChainable), got: {_shown(value)}")
    return value


def instance(name: str, value: Any, cls: type, what: str, *, required: bool = False) -> Any:
    """A prop of class ``cls``, optional unless ``required`` (``what``: how the message names it)."""
    if (value is not None or required) and not isinstance(value, cls):
        raise TypeError(f"`{name}` must be {what}, got: {_shown(value)}")
    return value


def boolean(name: str, value: Any) -> bool:
    """A ``True``/``False`` prop (no truthiness: ``"yes"`` is refused)."""
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` must be True or False, got: {value!r}")
    return value


def flag_or_props(name: str, value: Any, what: str) -> Optional[Mapping[str, Any]]:
    """A prop that is ``True``/``False`` or a mapping of a construct's props (``what``): the
    props to use (``{}`` for ``True``), or ``None`` for ``False``."""
    if isinstance(value, bool):
        return {} if value else None
    if isinstance(value, Mapping):
        return value
    raise TypeError(f"`{name}` must be True, False or a dict of {what} props, got: {_shown(value)}")


def state_machines(name: str, value: Any) -> tuple:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"`{name}` must be a sequence of state machines (sfn.IStateMachine), got: {_shown(value)}")
    machines = tuple(value)
    for machine in machines:
        if not _has(machine, _STATE_MACHINE_MEMBERS):
            raise TypeError(f"`{name}` must hold state machines (sfn.IStateMachine), got: {_shown(machine)}")
    return machines


def seconds(duration: Duration) -> Optional[float]:
    """The duration in seconds, or None while it is an unresolved token."""
    return None if duration.is_unresolved() else duration.to_milliseconds() / 1000


def concrete_ms(name: str, duration: Any) -> int:
    """Milliseconds of a duration that ends up inside a JSONata expression (no tokens)."""
    if not isinstance(duration, Duration):
        raise TypeError(f"`{name}` must be a Duration, got: {_shown(duration)}")
    if duration.is_unresolved():
        raise ValueError(f"`{name}` must be a concrete duration, got: a token ({duration.to_string()})")
    return int(duration.to_milliseconds())
