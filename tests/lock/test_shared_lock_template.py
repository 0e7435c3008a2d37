"""What the read/write lock (``Lock.shared`` / ``Lock.exclusive``) synthesizes: its states, their
IAM and its settings - the park's one transaction, the retries of a transaction conflict, the
liveness check, the holds' presence - and the refused nestings and kinds. Synth only: no
deployment (the stack's synthesis: ``test_shared_lock.py``'s ``shared_synth``)."""

from __future__ import annotations


import pytest

from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import shared_protocol as sp
from template_iam import actions
from test_shared_lock import shared_synth  # noqa: F401 - shared_synth: the stack's fixture


@pytest.mark.parametrize("outer, inner", [("shared", "exclusive"), ("shared", "shared"), ("exclusive", "shared"),
                                          ("exclusive", "exclusive"), ("mutex", "exclusive")])
def test_a_read_write_section_nested_on_the_same_key_is_refused_at_synth(outer, inner):
    """Not re-entrant: a nested hold on the key its enclosing section holds would wait for that
    very section (a writer for its own reader or writer; a reader for its own writer, or behind
    a writer queued meanwhile) until max_wait. The same key expression, table and namespace is
    refused; another key is allowed (the negative control)."""
    import aws_cdk as cdk
    from aws_cdk import aws_stepfunctions as sfn

    from locked_workflow import Lock, LockedSection, LockedWorkflow, LockTable

    def synth(inner_key: str) -> None:
        stack = cdk.Stack(cdk.App())
        table = LockTable(stack, "T").table
        nested = LockedSection(stack, "Inner", lock=getattr(Lock, inner)(inner_key), table=table, key_namespace="rw",
                               lock_variable="inner", lease=cdk.Duration.minutes(10),
                               protected=sfn.Pass(stack, "Work"))
        LockedWorkflow(stack, "Outer", lock=getattr(Lock, outer)("{% $states.input.key %}"), protected=nested,
                       table=table, key_namespace="rw")
        cdk.assertions.Template.from_stack(stack)

    synth("{% $states.input.other %}")  # another key: an ordinary nested lock
    with pytest.raises((ValueError, RuntimeError), match=rf"`lock` must not be Lock.{inner} on the key .* holds .*got: .*Inner"):
        synth("{% $states.input.key %}")


# -- synth: the states, their IAM and the settings ---------------------------------------------


@pytest.fixture(scope="module")
def template(shared_synth):
    from aws_cdk.assertions import Template

    return Template.from_json(shared_synth.template)


def _definition(template, prefix: str) -> dict:
    import json

    from aws_cdk.assertions import Capture, Match

    body = Capture()
    template.has_resource_properties("AWS::StepFunctions::StateMachine", Match.object_like({
        "StateMachineName": Match.string_like_regexp(f"^Shared-{prefix}-"), "DefinitionString": body}))
    parts = body.as_object()["Fn::Join"][1]
    return json.loads("".join(x if isinstance(x, str) else "TABLE" for x in parts))


def _states(definition: dict) -> dict:
    """Every state of a definition, nested ones included, by name."""
    out = {}
    for name, state in definition["States"].items():
        out[name] = state
        for branch in state.get("Branches", []):
            out.update(_states(branch))
    return out


def test_a_waiter_parks_in_one_transaction_with_the_protocols_expressions(template):
    states = _states(_definition(template, "Reader"))
    park = states["Lock.Park"]
    assert park["Resource"].endswith(":states:::aws-sdk:dynamodb:transactWriteItems.waitForTaskToken")
    check, update = park["Arguments"]["TransactItems"]
    assert check["ConditionCheck"]["ConditionExpression"] == sp.PARK_UNLESS[sp.READ].condition
    assert update["Update"]["ConditionExpression"] == sp.PARK.condition
    assert states["Lock.Acquire"]["Arguments"]["ConditionExpression"] == sp.FAST_READ.condition
    writer = _states(_definition(template, "Writer"))
    assert writer["Lock.Acquire"]["Arguments"]["ConditionExpression"] == sp.FAST_WRITE.condition
    assert writer["Lock.Park"]["Arguments"]["TransactItems"][0]["ConditionCheck"]["ConditionExpression"] == \
        sp.PARK_UNLESS[sp.WRITE].condition
    # every DynamoDB write of the lock is one of the protocol's (a writer's redrive retire: the mutex's)
    spelled = {w.condition for w in [*sp.LOCK_WRITES.values(), *sp.ROW_WRITES.values(), *sp.PARK_UNLESS.values(),
                                     *sp.PRESENCE_WRITES.values(), p.RETIRE]}
    held = {**_states(_definition_of(template, "CancelledReaderStateMachine")),
            **_states(_definition_of(template, "CancelledWriterStateMachine"))}  # (with their holds' presence)
    for name, state in {**states, **writer, **held}.items():
        arguments = state.get("Arguments")
        condition = arguments.get("ConditionExpression") if isinstance(arguments, dict) else None
        if condition and name.startswith(("Lock.", "CancelledReader.", "CancelledWriter.")):
            assert condition in spelled, name


def test_every_dynamodb_task_of_the_lock_retries_a_transaction_conflict(template):
    """TC: DynamoDB refuses a write on an item an ongoing transaction touches (a waiter's park
    checks the lock item in one) with TransactionConflictException: every DynamoDB task of the
    lock tries again - a Retry, or a Catch to the state that retries or rechecks it (never
    only States.ALL, which gives up)."""
    conflicts = {f"DynamoDB.{p.TRANSACTION_CONFLICT}", f"DynamoDb.{p.TRANSACTION_CONFLICT}"}
    seen = 0
    for machine in ("Reader", "Writer"):
        for name, state in _states(_definition(template, machine)).items():
            if not name.startswith("Lock.") or state["Type"] != "Task" or ":dynamodb:" not in state["Resource"]:
                continue
            handled = {e for r in state.get("Retry", []) + state.get("Catch", []) for e in r["ErrorEquals"]}
            assert handled & conflicts, f"{machine}: {name} ({state['Resource']}) gives up on a conflict"
            seen += 1
    assert seen > 40


def test_every_lock_state_goes_on_to_another_state(template):
    """No lock state ends its branch by itself (a path that ended there would skip the work, or
    leave the lock held): only the work's own states, Succeed and Fail end."""
    for machine in ("Reader", "Writer"):
        for name, state in _states(_definition(template, machine)).items():
            if name.startswith("Lock.") and state["Type"] not in ("Succeed", "Fail", "Choice"):
                assert "Next" in state and not state.get("End"), f"{machine}: {name}"
            if name.startswith("Lock.") and state["Type"] == "Choice":
                assert "Default" in state, f"{machine}: {name}"  # (no States.NoChoiceMatched)


def test_the_park_may_check_the_lock_item_and_no_action_is_a_wildcard(template):
    from aws_cdk.assertions import Match

    template.has_resource_properties("AWS::IAM::Policy", Match.object_like({"PolicyDocument": {"Statement": Match.array_with([
        Match.object_like({"Action": "dynamodb:ConditionCheckItem", "Effect": "Allow"})])}}))
    for policy in template.find_resources("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            assert not any(a == "*" or a.endswith(":*") for a in actions(statement)), statement


def test_the_kinds_are_values_with_their_own_validation():
    import aws_cdk as cdk
    from aws_cdk import aws_stepfunctions as sfn

    from locked_workflow import Lock, LockedWorkflow, LockTable

    a, b = Lock.shared("{% $states.input.k %}"), Lock.shared("{% $states.input.k %}")
    assert a == b and a.kind == "shared" and Lock.exclusive("{% $states.input.k %}").kind == "exclusive"
    with pytest.raises(ValueError, match=r"`park_timeout` must be whole seconds from 1 s to 1 hour, got: 0.5 s"):
        Lock.exclusive("{% $states.input.k %}", park_timeout=cdk.Duration.millis(500))
    stack = cdk.Stack(cdk.App())
    with pytest.raises(ValueError, match=r"`state_machine_type` must be STANDARD with Lock.shared .*got: EXPRESS"):
        LockedWorkflow(stack, "W", lock=a, protected=sfn.Pass(stack, "P"), table=LockTable(stack, "T").table,
                       state_machine_type=sfn.StateMachineType.EXPRESS, timeout=cdk.Duration.minutes(1))


def test_the_fallbacks_liveness_check_describes_executions_it_may_name_only(template):
    """The states (DescribeHolder, then RETIRE or RETIRE_READER - the protocol's) are there with
    the check on, absent with it off; DescribeExecution is granted on executions, never on *."""
    import json

    for machine in ("Reader", "Writer"):
        states = _states(_definition(template, machine))
        assert states["Lock.DescribeHolder"]["Resource"].endswith(":states:::aws-sdk:sfn:describeExecution")
        assert states["Lock.RetireHolder"]["Arguments"]["ConditionExpression"] == p.RETIRE.condition
        assert states["Lock.RetireReader"]["Arguments"]["ConditionExpression"] == sp.RETIRE_READER.condition
    blind = _states(_definition(template, "WriterBlind"))
    assert not {"Lock.DescribeHolder", "Lock.RetireHolder", "Lock.RetireReader"} & set(blind)
    grants = [s for policy in template.find_resources("AWS::IAM::Policy").values()
              for s in policy["Properties"]["PolicyDocument"]["Statement"] if "states:DescribeExecution" in s["Action"]]
    assert grants
    for statement in grants:
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        assert statement["Action"] == "states:DescribeExecution"
        assert all(":execution:" in json.dumps(r) and r != "*" for r in resources), statement


def _definition_of(template, logical_prefix: str) -> dict:
    """The definition of the state machine whose logical ID starts with ``logical_prefix``."""
    import json

    (machine,) = [r for lid, r in template.find_resources("AWS::StepFunctions::StateMachine").items()
                  if lid.startswith(logical_prefix) and not lid.startswith(logical_prefix + "Blind")]
    parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    return json.loads("".join(x if isinstance(x, str) else "TABLE" for x in parts))


def test_the_holds_presence_and_the_probe_use_the_protocols_writes(template):
    """A section's hold registers its token on its own row (PRESENT_ROW, ``.waitForTaskToken``),
    departs with DEPART_ROW and deletes the row after; the waiter's fallback reads the row,
    heartbeats the token and retires in one transaction (GONE_ROW beside RETIRE_GONE_*). With
    ``detect_cancellation=False`` the hold has none of it. IAM: the token calls on ``*`` (task
    tokens cannot be scoped), the row's DeleteItem on the lock table only."""
    for mode in ("Reader", "Writer"):
        states, n = _states(_definition_of(template, f"Cancelled{mode}StateMachine")), f"Cancelled{mode}."
        presence = states[n + "Presence"]
        assert presence["Resource"].endswith(":states:::aws-sdk:dynamodb:updateItem.waitForTaskToken")
        assert presence["Arguments"]["ConditionExpression"] == sp.PRESENT_ROW.condition
        assert sp.PRESENCE_ROW_MARK in presence["Arguments"]["Key"]["pk"]["S"]
        assert states[n + "Depart"]["Arguments"]["ConditionExpression"] == sp.DEPART_ROW.condition
        assert states[n + "PresenceUnsure"]["Arguments"]["ConditionExpression"] == sp.DEPART_ROW.condition
        assert sp.PRESENCE_ROW_MARK in states[n + "Forget"]["Arguments"]["Key"]["pk"]["S"]
        assert sp.PRESENCE_ROW_MARK in states[n + "ForgetAfterError"]["Arguments"]["Key"]["pk"]["S"]
        blind = _states(_definition_of(template, f"Cancelled{mode}BlindStateMachine"))
        assert f"Cancelled{mode}Blind.Acquire" in blind
        assert not {f"Cancelled{mode}Blind.{x}" for x in ("Presence", "Depart", "Forget")} & set(blind)
    for machine in ("Reader", "Writer", "WriterBlind"):
        states = _states(_definition(template, machine))
        if machine == "WriterBlind":  # no liveness check: no probe either
            assert not {"Lock.ReadPresence", "Lock.ProbeHolder", "Lock.AbandonReader"} & set(states)
            continue
        assert sp.PRESENCE_ROW_MARK in states["Lock.ReadPresence"]["Arguments"]["Key"]["pk"]["S"]
        assert states["Lock.ProbeHolder"]["Resource"].endswith(":states:::aws-sdk:sfn:sendTaskHeartbeat")
        catches = states["Lock.ProbeHolder"]["Catch"]
        assert catches[0]["ErrorEquals"] == [p.PRESENCE_GONE] and catches[0]["Next"] == "Lock.DescribeHolder"
        for name, write in (("Lock.AbandonReader", sp.RETIRE_GONE_READER), ("Lock.AbandonHolder", sp.RETIRE_GONE_WRITER)):
            row, lock = states[name]["Arguments"]["TransactItems"]
            assert states[name]["Resource"].endswith(":states:::aws-sdk:dynamodb:transactWriteItems")
            assert row["Delete"]["ConditionExpression"] == sp.GONE_ROW.condition
            assert lock["Update"]["ConditionExpression"] == write.condition
            assert lock["Update"]["UpdateExpression"] == write.update
    token_actions = {"states:SendTaskHeartbeat", "states:SendTaskSuccess"}
    seen = set()
    for policy in template.find_resources("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            named = set(actions(statement))
            if token_actions & named:
                assert named <= token_actions and statement["Resource"] == "*", statement
                seen |= named
            if "dynamodb:DeleteItem" in named:  # (the lock table, never *)
                resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
                assert resources and "*" not in resources, statement
    assert seen == token_actions
