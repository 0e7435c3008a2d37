"""The errors a locked section fails with, as users Catch them: ``LockErrors``."""

from __future__ import annotations

import json

import pytest

from locked_workflow.state_machines import errors


def test_lock_errors_is_exported_and_names_every_public_error():
    from locked_workflow import LockErrors

    public = {value for name, value in vars(errors).items() if name.startswith("ERROR_")}
    signals = {value for name, value in vars(errors).items() if name.startswith("SIGNAL_")}
    assert set(LockErrors.all()) == public
    assert not public & signals and signals  # internal signals are kept apart
    assert LockErrors.TIMEOUT == "Lock.Timeout" and LockErrors.LOST == "Lock.Lost"
    assert LockErrors.INVALID_KEY == "Lock.InvalidKey"
    with pytest.raises(TypeError, match="LockErrors.TIMEOUT"):
        LockErrors()


def _fail_errors(definition: dict) -> set[str]:
    """The literal ``Error`` of every Fail state of a rendered definition, nested ones included."""
    found: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            if node.get("Type") == "Fail" and isinstance(node.get("Error"), str) and "{%" not in node["Error"]:
                found.add(node["Error"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(definition)
    return found


def test_every_lock_error_a_section_of_any_kind_fails_with_is_a_lock_error_users_can_catch():
    """Each kind's section in one state machine: every ``Lock.*`` its Fail states raise is in
    ``LockErrors`` or is an internal signal (caught inside the section) (a new error without its name there fails this), and a Catch spelled with
    ``LockErrors`` around the sections is the Catch Step Functions gets."""
    import aws_cdk as cdk
    from aws_cdk import aws_dynamodb as dynamodb, aws_stepfunctions as sfn
    from aws_cdk.assertions import Template

    from locked_workflow import Lock, LockedSection, LockErrors, LockTable
    from locked_workflow.state_machines.lock_protocol import jsonata

    stack = cdk.Stack(cdk.App(), "Errors")
    table = LockTable(stack, "Locks").table
    records = dynamodb.Table(stack, "Records", partition_key=dynamodb.Attribute(
        name="id", type=dynamodb.AttributeType.STRING))
    key = jsonata("$states.input.id")
    kinds = {
        "Mutex": Lock.mutex(key), "Fair": Lock.fair(key), "Semaphore": Lock.semaphore(key, limit=2),
        "Keys": Lock.keys(jsonata("[$states.input.id]")), "Record": Lock.on_record(records, key),
        "Reader": Lock.shared(key), "Writer": Lock.exclusive(key),
    }
    chain = None
    for n, (name, lock) in enumerate(kinds.items()):
        placement = {} if name == "Record" else {"table": table, "key_namespace": name.lower()}
        section = LockedSection(stack, name, lock=lock, protected=sfn.Pass(stack, f"{name}Work"),
                                lock_variable=f"lock{n}", lease=cdk.Duration.minutes(10), **placement)
        chain = section if chain is None else chain.next(section)
    locked = sfn.Parallel(stack, "Locked").branch(chain)
    locked.add_catch(sfn.Pass(stack, "Busy"), errors=[LockErrors.TIMEOUT, LockErrors.LOST])
    sfn.StateMachine(stack, "Machine", definition_body=sfn.DefinitionBody.from_chainable(locked),
                     query_language=sfn.QueryLanguage.JSONATA)

    template = Template.from_stack(stack)
    (machine,) = template.find_resources("AWS::StepFunctions::StateMachine").values()
    parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    definition = json.loads("".join(p if isinstance(p, str) else "REF" for p in parts))
    raised = {e for e in _fail_errors(definition) if e.startswith("Lock.")}
    assert {LockErrors.TIMEOUT, LockErrors.LOST, LockErrors.INVALID_KEY} <= raised  # the walk finds them
    signals = {value for name, value in vars(errors).items() if name.startswith("SIGNAL_")}
    assert raised - signals <= set(LockErrors.all()), raised - signals - set(LockErrors.all())
    (catch,) = definition["States"]["Locked"]["Catch"]
    assert catch["ErrorEquals"] == ["Lock.Timeout", "Lock.Lost"] and catch["Next"] == "Busy"
