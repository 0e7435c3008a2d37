"""The record of a section's states (issue 28): the kinds record each lock state's role where
they build it, and the checks read the record - the re-entrancy and EXPRESS checks, the stop
grace and the work's guard, monitoring's lock states - never the rendered JSON.

A cross-check reads the synthesized definition the way the old string-matching code did
(a test may; the constructs may not) and reports a lock state the record misses; its negative
control drops one entry from a record and sees it reported.
"""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_dynamodb as dynamodb, aws_stepfunctions as sfn

from locked_workflow import Lock, LockedWorkflow
from locked_workflow.constructs_lib.monitoring_states import EXIT_EVENTS, LockStates, all_states, synthesized_definition
from locked_workflow.constructs_lib.section_record import Role, StateRecord
from locked_workflow.state_machines import errors
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines.lock_protocol import jsonata

KEY = jsonata("$states.input.key")


def _kinds(stack: cdk.Stack) -> dict:
    records = dynamodb.Table(stack, "Records", partition_key=dynamodb.Attribute(name="id", type=dynamodb.AttributeType.STRING))
    return {
        "mutex": Lock.mutex(KEY), "fair": Lock.fair(KEY), "coalescing": Lock.fair(KEY, polling=True),
        "semaphore": Lock.semaphore(KEY, limit=2), "keys": Lock.keys(jsonata("[$states.input.key]")),
        "record": Lock.on_record(records, KEY, must_exist=False), "shared": Lock.shared(KEY),
        "exclusive": Lock.exclusive(KEY), "rate": Lock.rate(KEY, limit=5),
    }


@pytest.fixture(scope="module")
def workflows():
    stack = cdk.Stack(cdk.App(), "Record")
    return {name: LockedWorkflow(stack, name.capitalize(), lock=lock, protected=sfn.Pass.jsonata(stack, f"{name}Work"),
                                 state_machine_name=f"record-{name}")
            for name, lock in _kinds(stack).items()}


def unrecorded(definition: dict, sections) -> list:
    """Lock states of ``definition`` that the sections' records miss, found the old way: a
    Fail state with a lock error, a task describing an execution, a state assigning a lock
    variable's ``Held`` (a release) or a lock record with its owner and acquiredAt."""
    states = LockStates.recorded(definition, sections)
    recorded = {
        errors.ERROR_TIMEOUT: set(states.timeouts), errors.ERROR_LOST: set(states.lost),
        errors.ERROR_SUPERSEDED: set(states.superseded), errors.ERROR_QUEUE_FULL: set(states.queue_full),
    }
    missed = []
    for name, state in all_states(definition.get("States", {})):
        if state.get("Type") == "Fail" and state.get("Error") in recorded and name not in recorded[state["Error"]]:
            missed.append((name, state["Error"]))
        if str(state.get("Resource", "")).endswith(":describeExecution") and name not in states.liveness_checks:
            missed.append((name, "liveness check"))
        for variable, value in (state.get("Assign") or {}).items():
            if variable.endswith("Held") and name not in states.releases:
                missed.append((name, "release"))
            if (isinstance(value, str) and "'owner':" in value and "'acquiredAt':" in value
                    and not variable.endswith(protocol.HOLDER_SUFFIX) and name not in states.acquisitions):
                missed.append((name, "acquisition"))
    return missed


@pytest.mark.parametrize("kind", ["mutex", "fair", "coalescing", "semaphore", "keys", "record", "shared", "exclusive", "rate"])
def test_every_kind_records_its_acquisitions_releases_and_timeout(workflows, kind):
    workflow = workflows[kind]
    definition = synthesized_definition(workflow.state_machine)
    states = LockStates.recorded(definition, [workflow.section])
    names = {name for name, _ in all_states(definition["States"])}
    assert states.acquisitions and states.timeouts, states
    for name, (event, variable) in {**states.acquisitions, **states.releases}.items():
        assert name in names and event in EXIT_EVENTS.values(), name
    assert "lock" in {v for _, v in states.acquisitions.values()}
    if workflow.section.kind.holds:  # (a rate limit's admissions are not held: no release)
        assert states.releases and states.lost and states.liveness_checks, states
        assert {v for _, v in states.releases.values()} == {"lockHeld"}
    assert unrecorded(definition, [workflow.section]) == []
    # the section's Parallel: recorded under its name
    assert workflow.section.state_record.section_name == "Lock" and "Lock" in definition["States"]


def test_a_state_the_record_misses_is_reported(workflows):
    """Negative control of the cross-check: without its release entries, a section's releases
    are reported missing."""
    section = workflows["mutex"].section
    definition = synthesized_definition(workflows["mutex"].state_machine)
    kept = section.state_record
    trimmed = StateRecord()
    for entry in kept:
        if entry.role is not Role.RELEASE:
            trimmed.add(entry.name, entry.role, entry.variable)
    section.state_record = trimmed
    try:
        missed = unrecorded(definition, [section])
    finally:
        section.state_record = kept
    assert ("Lock.Release", "release") in missed and ("Lock.ReleaseAfterError", "release") in missed, missed


@pytest.mark.parametrize("kind", ["shared", "exclusive"])
def test_a_read_write_section_derives_its_stop_grace_from_its_work_not_from_its_park(kind):
    """The stop grace comes from the protected work's tasks, the lock's own states left out. A
    read/write section's park and presence tasks are callbacks with a ``TimeoutSeconds`` (the
    park timeout); the old ``is_lock_state`` did not know their conditions, so they counted as
    work: the grace of every such section was their longest timeout + 5 s (35 s by default, 606 s
    for the matrix's ``ReaderSection``), and a stopped holder kept its key that long. With the
    record they are lock states: a Pass work's grace is the 5 s margin (35 s before the fix)."""
    stack = cdk.Stack(cdk.App(), "Grace")
    lock = Lock.shared(KEY) if kind == "shared" else Lock.exclusive(KEY)
    workflow = LockedWorkflow(stack, "Flow", lock=lock, protected=sfn.Pass.jsonata(stack, "Work"))
    entry = synthesized_definition(workflow.state_machine)["States"]["Lock"]["Arguments"]
    assert "'grace': 5000," in entry, entry


def test_express_check_tells_same_named_sections_apart():
    """Two workflows' sections share the Parallel name ``Lock``; only the one in the EXPRESS
    machine is refused (a name match would refuse both)."""
    from locked_workflow.constructs_lib.section_render import NotInExpress

    stack = cdk.Stack(cdk.App(), "Express")
    standard = LockedWorkflow(stack, "Standard", lock=Lock.fair(KEY), protected=sfn.Pass.jsonata(stack, "A"))
    express = LockedWorkflow(stack, "Express", lock=Lock.mutex(KEY), protected=sfn.Pass.jsonata(stack, "B"),
                             state_machine_type=sfn.StateMachineType.EXPRESS)
    assert standard.section.state_record.section_name == express.section.state_record.section_name
    assert NotInExpress(standard.section).in_express_machine() is None
    assert NotInExpress(express.section).in_express_machine() == express.state_machine.node.default_child.node.path
