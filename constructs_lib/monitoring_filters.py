"""The CloudWatch Logs filter patterns of :class:`~locked_workflow.constructs_lib.monitoring.LockMonitoring`:
lines of a state's history events, matched one line at a time (what a metric filter or a
subscription filter sees).
"""

from __future__ import annotations

from typing import Sequence

from aws_cdk import aws_logs as logs


def field_is(field: str, value: str) -> logs.JsonPattern:
    """Lines whose JSON ``field`` equals ``value``."""
    return logs.FilterPattern.string_value(field, "=", value)


def state_filter(event_type: str, state_name: str, *more: logs.JsonPattern) -> logs.JsonPattern:
    """Lines of history events of ``event_type`` of the state ``state_name``."""
    return logs.FilterPattern.all(field_is("$.type", event_type), field_is("$.details.name", state_name), *more)


def states_filter(event_type: str, state_names: Sequence[str], *more: logs.JsonPattern) -> logs.IFilterPattern:
    """Lines of history events of ``event_type`` of any of ``state_names`` (none: no line)."""
    if not state_names:
        return field_is("$.type", NO_EVENT)
    names = [field_is("$.details.name", name) for name in sorted(set(state_names))]
    return logs.FilterPattern.all(
        field_is("$.type", event_type), names[0] if len(names) == 1 else logs.FilterPattern.any(*names), *more
    )


#: An event type no line has: the pattern of a metric with no state to count.
NO_EVENT = "LockMonitoring.NoSuchState"
#: Longest filter pattern CloudWatch Logs accepts (characters).
MAX_PATTERN_LENGTH = 1024
