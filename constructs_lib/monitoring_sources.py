"""What :class:`~locked_workflow.constructs_lib.monitoring.LockMonitoring` monitors: a
:class:`~locked_workflow.constructs_lib.LockedWorkflow`, or a state machine of this app and its
sections - their state machine, its name, its execution log group, its synthesized definition
and the janitors - each checked before anything is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from aws_cdk import aws_logs as logs, aws_stepfunctions as sfn
from constructs import Construct

from locked_workflow.constructs_lib import prop_types
from locked_workflow.constructs_lib.monitoring_states import all_states, synthesized_definition


@dataclass(frozen=True)
class Monitored:
    """What the monitoring reads of a workflow, or of a hand-built state machine."""

    state_machine: Any
    name: str
    log_group: logs.ILogGroup
    definition: dict
    janitors: tuple
    #: The monitored sections (a workflow's one; the given ones), whose records name the lock
    #: states (the sections nested in them are read through them).
    sections: tuple = ()


def monitored_workflow(workflow: Any, sections: Sequence[Any]) -> Monitored:
    if workflow is None:
        raise ValueError("`workflow` or `state_machine` must be given (exactly one), got: neither")
    for attribute in ("state_machine", "state_machine_name", "section"):
        if getattr(workflow, attribute, None) is None:
            raise ValueError(
                f"`workflow` must be a LockedWorkflow (it has `{attribute}`), got: {type(workflow).__name__}"
            )
    if sections:
        raise ValueError(
            "`sections` must be left unset with `workflow` (its section is read from it), got: "
            f"{len(sections)} section{'s' if len(sections) != 1 else ''}"
        )
    log_group = getattr(workflow, "log_group", None)
    if log_group is None:
        raise ValueError(
            "`workflow` must log its executions (LockedWorkflow(logging=True), the default): the "
            "metrics come from its execution logs, got: a workflow without a log group"
        )
    janitor = getattr(workflow, "janitor", None)
    return Monitored(workflow.state_machine, workflow.state_machine_name, log_group,
                      synthesized_definition(workflow.state_machine), (janitor,) if janitor is not None else (),
                      (workflow.section,))


#: How a hand-built state machine must log (the message of its refusal).
_LOGS_NEEDED = (
    "`state_machine` must log its executions at level ALL with execution data "
    "(logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ALL, include_execution_data=True)): "
    "the metrics come from its execution logs, got: "
)


def monitored_state_machine(scope: Construct, state_machine: Any, sections: Sequence[Any]) -> Monitored:
    """A state machine of this app and its sections: its log group is the destination of its
    logging configuration (level ALL with execution data, or refused)."""
    from locked_workflow.constructs_lib.locked_section import LockedSection  # (it imports the janitor)

    prop_types.instance("state_machine", state_machine, sfn.StateMachine, "an sfn.StateMachine of this app",
                        required=True)
    if isinstance(sections, (str, bytes)) or not isinstance(sections, Sequence) or not sections:
        raise ValueError(f"`sections` must name the LockedSections of `state_machine` (at least one), got: {sections!r}")
    for section in sections:
        prop_types.instance("sections", section, LockedSection, "LockedSections", required=True)
    resource = state_machine.node.default_child
    definition = synthesized_definition(state_machine)
    names = {name for name, _ in all_states(definition.get("States", {}))}
    for section in sections:
        if section.section_state.state_id not in names:
            raise ValueError(
                "`sections` must be sections of `state_machine` (their states in its definition), got: "
                f"{section.node.path!r} (no state {section.section_state.state_id!r} in it)"
            )
    config = resource.logging_configuration
    destinations = getattr(config, "destinations", None) or []
    if config is None or not destinations:
        raise ValueError(_LOGS_NEEDED + "no execution logs")
    if config.level != "ALL" or config.include_execution_data is not True:
        data = "with" if config.include_execution_data is True else "without"
        raise ValueError(_LOGS_NEEDED + f"level {config.level}, {data} execution data")
    arn = destinations[0].cloud_watch_logs_log_group.log_group_arn
    log_group = logs.LogGroup.from_log_group_arn(scope, "StateMachineLogs", arn)
    janitors = tuple(dict.fromkeys(s.janitor for s in sections if s.janitor is not None))
    return Monitored(state_machine, state_machine.state_machine_name, log_group, definition, janitors,
                     tuple(sections))

