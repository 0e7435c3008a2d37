"""Every bad prop is refused at synth time with "`x` must ..., got: ..."."""

from __future__ import annotations

import json

from locked_workflow.state_machines import lock_protocol

import aws_cdk as cdk
import pytest
from aws_cdk import aws_dynamodb as dynamodb, aws_events as events, aws_stepfunctions as sfn
from aws_cdk import assertions, aws_stepfunctions_tasks as sfn_tasks

from locked_workflow import Lock, LockedSection, LockedWorkflow, WaitPolicy
from locked_workflow.state_machines.lock_protocol import jsonata

KEY = jsonata("$states.input.id")


def build(**overrides):
    stack = cdk.Stack(cdk.App(), "V")
    props = dict(lock=Lock.mutex(KEY), protected=sfn.Pass.jsonata(stack, "Work"))
    props.update(overrides)
    return LockedWorkflow(stack, "L", **props)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(first_interval=0), r"`first_interval` must be a whole number of seconds >= 1, got: 0"),
        (dict(first_interval=2, max_interval=1), r"`max_interval` must be .*>= first_interval \(2\), got: 1"),
        (dict(backoff_rate=0.5), r"`backoff_rate` must be between 1.0 and 10.0, got: 0.5"),
        (dict(retries_per_round=21), r"`retries_per_round` must be a whole number from 0 to 20, got: 21"),
        (dict(jitter="yes"), r"`jitter` must be True or False, got: 'yes'"),
    ],
)
def test_a_wait_policy_validates_itself(fields, message):
    with pytest.raises(ValueError, match=message):
        WaitPolicy(**fields)
    assert WaitPolicy() == WaitPolicy(first_interval=2)  # the defaults are valid


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(key_namespace="a b"), r"`key_namespace` must be at most 64 .*got: 'a b'"),
        (dict(key_namespace="x" * 65), r"`key_namespace` must be at most 64"),
        (dict(lock_variable="1lock"), r"`lock_variable` must be a JSONata variable name.*got: '1lock'"),
        (dict(lock_variable="states"), r"`lock_variable` must be .*got: 'states'"),
        (dict(timeout=cdk.Duration.millis(500)), r"`timeout` must be at least 1 second, got: 0.5 s"),
        (
            dict(state_machine_type=sfn.StateMachineType.EXPRESS, timeout=cdk.Duration.minutes(6)),
            r"`timeout` must be at most 5 minutes for EXPRESS state machines, got: 360.0 s",
        ),
        (
            dict(timeout=cdk.Duration.minutes(10), max_wait=cdk.Duration.minutes(10)),
            r"`max_wait` must be shorter than `timeout` \(600.0 s\), got: 600.0 s",
        ),
        (dict(lease=cdk.Duration.millis(10)), r"`lease` must be at least 1 second"),
        (
            dict(max_wait=cdk.Duration.hours(10), timeout=cdk.Duration.hours(12),
                 wait_policy=WaitPolicy(first_interval=1, backoff_rate=1.0, max_interval=1, jitter=False)),
            r"`max_wait` must keep the wait loop under 20000 history events .*got: 36000.0 s.*raise wait_policy.max_interval",
        ),
        (dict(lock=Lock.fair(KEY), liveness_check_every=0), r"`liveness_check_every` must be at least 1 with Lock.fair.*got: 0"),
        (
            dict(lock=Lock.fair(KEY, park_timeout=cdk.Duration.seconds(1)), max_wait=cdk.Duration.hours(10), timeout=cdk.Duration.hours(12)),
            r"`max_wait` must keep the queue's wait under 20000 history events .*got: 36000.0 s.*raise park_timeout",
        ),
    ],
)
def test_bad_props_raise_value_error(overrides, message):
    with pytest.raises(ValueError, match=message):
        build(**overrides)


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: Lock.mutex("$.id"), ValueError, r"`key` must be a JSONata template .*got: '\$\.id'"),
        (lambda: Lock.fair("{% %}"), ValueError, r"`key` must be a JSONata template"),
        (lambda: Lock.fair(KEY, park_timeout=cdk.Duration.millis(500)), ValueError,
         r"`park_timeout` must be whole seconds from 1 s to 1 hour, got: 0.5 s"),
        (lambda: Lock.fair(KEY, park_timeout=cdk.Duration.hours(2)), ValueError,
         r"`park_timeout` must be whole seconds from 1 s to 1 hour, got: 7200.0 s"),
        (lambda: Lock.fair(KEY, park_timeout=30), TypeError, r"`park_timeout` must be a Duration, got: int 30"),
        (lambda: Lock.on_record(dynamodb.Table(cdk.Stack(), "T", partition_key=dynamodb.Attribute(
            name="id", type=dynamodb.AttributeType.STRING)), KEY, must_exist="no"), TypeError,
         r"`must_exist` must be True or False, got: 'no'"),
    ],
)
def test_a_lock_kind_refuses_its_own_bad_settings(make, error, message):
    with pytest.raises(error, match=message):
        make()


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(lock=None), r"`lock` must be a Lock \(Lock.mutex\(key\), Lock.fair\(key\), ...\), got: NoneType"),
        (dict(lock=KEY), r"`lock` must be a Lock .*got: str '\{% \$states.input.id %\}'"),
    ],
)
def test_a_lock_that_is_not_a_lock_value_is_a_type_error(overrides, message):
    with pytest.raises(TypeError, match=message):
        build(**overrides)


def test_a_lock_on_the_record_takes_no_lock_table():
    stack = cdk.Stack(cdk.App(), "T")
    records = dynamodb.Table(stack, "Records", partition_key=dynamodb.Attribute(name="id", type=dynamodb.AttributeType.STRING))
    locks = dynamodb.Table.from_table_name(stack, "Existing", "locks")
    with pytest.raises(ValueError, match=r"`table` and `table_removal_policy` must be left unset with Lock.on_record"):
        LockedWorkflow(stack, "L", lock=Lock.on_record(records, KEY), protected=sfn.Pass.jsonata(stack, "Work"), table=locks)
    with pytest.raises(ValueError, match=r"`table` must be left unset with Lock.on_record"):
        LockedSection(stack, "S", lock=Lock.on_record(records, KEY), protected=sfn.Pass.jsonata(stack, "W2"), table=locks,
                      lease=cdk.Duration.minutes(1))
    with pytest.raises(ValueError, match=r"`table` must be given \(the lock table\) with Lock.mutex\(key\), got: None"):
        LockedSection(stack, "S2", lock=Lock.mutex(KEY), protected=sfn.Pass.jsonata(stack, "W3"), lease=cdk.Duration.minutes(1))


def test_long_wait_fits_the_history_budget_with_a_longer_interval():
    workflow = build(
        max_wait=cdk.Duration.hours(10), timeout=cdk.Duration.hours(12),
        wait_policy=WaitPolicy(first_interval=1, backoff_rate=2.0, max_interval=120, retries_per_round=4),
    )
    assert workflow.state_machine is not None


def test_history_budget_does_not_apply_to_express():
    build(
        state_machine_type=sfn.StateMachineType.EXPRESS,
        max_wait=cdk.Duration.minutes(4),
        wait_policy=WaitPolicy(first_interval=1, backoff_rate=1.0, max_interval=1, jitter=False),
    )


def test_existing_table_and_removal_policy_are_exclusive():
    stack = cdk.Stack(cdk.App(), "T")
    table = dynamodb.Table.from_table_name(stack, "Existing", "locks")
    with pytest.raises(ValueError, match=r"`table_removal_policy` must be left unset when an existing `table` is given"):
        LockedWorkflow(
            stack, "L", lock=Lock.mutex(KEY), protected=sfn.Pass.jsonata(stack, "Work"),
            table=table, table_removal_policy=cdk.RemovalPolicy.DESTROY,
        )


def test_existing_table_is_used_and_no_table_is_created():
    stack = cdk.Stack(cdk.App(), "T")
    table = dynamodb.Table.from_table_name(stack, "Existing", "locks")
    workflow = LockedWorkflow(stack, "L", lock=Lock.mutex(KEY), protected=sfn.Pass.jsonata(stack, "Work"), table=table)
    assert workflow.table is table and workflow.lock_table is None
    assert not any(
        c.node.default_child is not None and c.node.default_child.cfn_resource_type == "AWS::DynamoDB::Table"
        for c in stack.node.find_all() if hasattr(c, "node") and isinstance(c, dynamodb.Table)
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(retry_attempts=186), r"`retry_attempts` must be between 0 and 185, got: 186"),
        (dict(max_event_age=cdk.Duration.seconds(30)), r"`max_event_age` must be between 60 seconds and 24 hours, got: 30.0 s"),
    ],
)
def test_bad_trigger_props_raise(kwargs, message):
    workflow = build()
    rule = events.Rule(workflow, "Rule", event_pattern=events.EventPattern(source=["x"]))
    with pytest.raises(ValueError, match=message):
        workflow.trigger_from(rule, **kwargs)


def test_unresolved_tokens_are_not_validated():
    stack = cdk.Stack(cdk.App(), "Tok")
    seconds = cdk.CfnParameter(stack, "Seconds", type="Number").value_as_number
    LockedWorkflow(
        stack, "L", lock=Lock.mutex(KEY), protected=sfn.Pass.jsonata(stack, "Work"),
        timeout=cdk.Duration.seconds(seconds), lease=cdk.Duration.minutes(10),
    )


def test_token_timeout_needs_an_explicit_lease():
    stack = cdk.Stack(cdk.App(), "Tok2")
    seconds = cdk.CfnParameter(stack, "Seconds", type="Number").value_as_number
    with pytest.raises(ValueError, match=r"`lease` must be given when `timeout` is a token"):
        LockedWorkflow(
            stack, "L", lock=Lock.mutex(KEY), protected=sfn.Pass.jsonata(stack, "Work"),
            timeout=cdk.Duration.seconds(seconds),
        )


def test_lease_must_not_be_a_token():
    stack = cdk.Stack(cdk.App(), "Tok3")
    minutes = cdk.CfnParameter(stack, "Minutes", type="Number").value_as_number
    table = dynamodb.Table.from_table_name(stack, "Existing", "locks")
    with pytest.raises(ValueError, match=r"`lease` must be a concrete duration, got: a token"):
        LockedSection(
            stack, "S", lock=Lock.mutex(KEY), protected=sfn.Pass.jsonata(stack, "Work"), table=table,
            lease=cdk.Duration.minutes(minutes),
        )


# ---- issue 8: defaults that fit, nesting, history bound, namespaces ------------------------


def test_express_with_defaults_synthesizes_and_waits_at_most_half_its_timeout():
    locked = build(state_machine_type=sfn.StateMachineType.EXPRESS)
    assert locked.section.max_wait.to_seconds() == 150  # half of the 5-minute Express timeout


def test_default_max_wait_is_15_minutes_or_half_the_timeout():
    assert build().section.max_wait.to_minutes() == 15
    assert build(timeout=cdk.Duration.minutes(10)).section.max_wait.to_seconds() == 300


def test_namespace_with_the_separator_is_refused():
    with pytest.raises(ValueError, match=r"`key_namespace` must be .*never '#'.*got: 'a#b'"):
        build(key_namespace="a#b")


def _nested(inner_variable: str, *, same_table: bool = True):
    stack = cdk.Stack(cdk.App(), "N")
    table = dynamodb.Table(stack, "T", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING))
    other = dynamodb.Table(stack, "O", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING))
    inner = LockedSection(stack, "Inner", lock=Lock.mutex(KEY), protected=sfn.Pass.jsonata(stack, "W"),
                          table=table if same_table else other, lease=cdk.Duration.minutes(5),
                          lock_variable=inner_variable)
    outer = LockedSection(stack, "Outer", lock=Lock.mutex(KEY), protected=sfn.Pass.jsonata(stack, "P").next(inner),
                          table=table, lease=cdk.Duration.minutes(5))
    machine = sfn.StateMachine(stack, "M", definition_body=sfn.DefinitionBody.from_chainable(outer),
                               query_language=sfn.QueryLanguage.JSONATA)
    return stack, machine


def test_nested_sections_with_the_same_lock_variable_are_refused():
    # raised while the state machine renders its definition (jsii hands it over as RuntimeError)
    with pytest.raises((ValueError, RuntimeError), match=r"`lock_variable` must differ from that of the enclosing section .*got: 'lock'"):
        _nested("lock")
    with pytest.raises((ValueError, RuntimeError), match=r"clashing: \['lockWait'\]"):
        _nested("lockWait")  # the inner's lock variable would be the outer's wait variable


def test_nested_section_on_the_same_table_checks_the_enclosing_hold_only_then():
    import json

    def inner_arguments(same_table: bool) -> str:
        stack, machine = _nested("inner", same_table=same_table)
        template = cdk.assertions.Template.from_stack(stack).to_json()
        (definition,) = [r["Properties"]["DefinitionString"] for r in template["Resources"].values()
                         if r["Type"] == "AWS::StepFunctions::StateMachine"]
        return json.dumps(definition)

    assert "{'reentered': $lock}" in inner_arguments(True)
    assert "{'reentered': $lock}" not in inner_arguments(False)


def test_history_bound_counts_the_liveness_path():
    # accepted before (claimed 19,809 events); the liveness rounds make it exceed the budget
    with pytest.raises(ValueError, match=r"`max_wait` must keep the wait loop under 20000 history events"):
        build(wait_policy=WaitPolicy(1, 1.5, 1, retries_per_round=0), max_wait=cdk.Duration.seconds(2200),
              timeout=cdk.Duration.hours(2))
    build(wait_policy=WaitPolicy(1, 1.5, 1, retries_per_round=0), max_wait=cdk.Duration.seconds(2200),
          timeout=cdk.Duration.hours(2), liveness_check_every=0)  # fits without the check


def test_a_section_in_a_hand_built_state_machine_recovers_stale_holders_with_one_line():
    from aws_cdk import assertions

    stack = cdk.Stack(cdk.App(), "R")
    table = dynamodb.Table(stack, "T", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING))
    section = LockedSection(stack, "S", lock=Lock.mutex(KEY), protected=sfn.Pass.jsonata(stack, "W"), table=table,
                            lease=cdk.Duration.minutes(5))
    machine = sfn.StateMachine(stack, "M", definition_body=sfn.DefinitionBody.from_chainable(section),
                               query_language=sfn.QueryLanguage.JSONATA)
    janitor = section.recover_stale_holders(machine)
    template = assertions.Template.from_stack(stack)
    template.has_resource_properties("AWS::Events::Rule", {
        "EventPattern": assertions.Match.object_like({"detail": {
            "status": ["ABORTED", "TIMED_OUT", "FAILED"],
            "stateMachineArn": [{"Ref": stack.get_logical_id(machine.node.default_child)}]}}),
    })
    template.has_resource_properties("AWS::IAM::Policy", {
        "PolicyDocument": {"Statement": [assertions.Match.object_like({"Action": "states:DescribeExecution"})]},
        "Roles": [{"Ref": assertions.Match.string_like_regexp("MRole")}],
    })
    assert janitor.function is not None and janitor.rule is not None


def _children_of_one_hold(shape: str, *, inner_namespace: str = "", max_concurrency: int = 0):
    """An outer section whose work runs inner sections on the same table: as the iterations of
    a Map, in two branches of a Parallel, or one after the other."""
    stack = cdk.Stack(cdk.App(), "C")
    table = dynamodb.Table(stack, "T", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING))

    def inner(name: str) -> LockedSection:
        return LockedSection(stack, name, lock=Lock.mutex(KEY), protected=sfn.Pass.jsonata(stack, f"{name}Work"),
                             table=table, lease=cdk.Duration.minutes(5), lock_variable=f"{name.lower()}Lock",
                             key_namespace=inner_namespace)

    if shape == "map":
        work = sfn.Map.jsonata(stack, "Each", items=sfn.ProvideItems.jsonata("{% [1, 2, 3] %}"),
                               max_concurrency=max_concurrency).item_processor(inner("Child"))
    elif shape == "parallel":
        work = sfn.Parallel.jsonata(stack, "Both").branch(inner("Left")).branch(inner("Right"))
    else:
        work = inner("First").next(inner("Second"))
    outer = LockedSection(stack, "Outer", lock=Lock.mutex(KEY), protected=work, table=table, lease=cdk.Duration.minutes(5))
    sfn.StateMachine(stack, "M", definition_body=sfn.DefinitionBody.from_chainable(outer),
                     query_language=sfn.QueryLanguage.JSONATA)
    return assertions.Template.from_stack(stack)


@pytest.mark.parametrize("shape, where", [("map", "the iterations of Map 'Each'"),
                                          ("parallel", "the branches of Parallel 'Both'")])
def test_concurrent_children_of_one_hold_on_its_lock_are_refused(shape, where):
    """Issue 15.2: three Map iterations each re-entered the enclosing hold (holders [1, 2, 3],
    fences [1, 1, 1]): re-entrancy is for sequential nesting only."""
    with pytest.raises((ValueError, RuntimeError), match=rf"must not run in {where}: concurrent children .*got: 'C/"):
        _children_of_one_hold(shape)


@pytest.mark.parametrize("shape, props", [
    ("sequence", {}),                                # sequential nesting re-enters
    ("map", {"max_concurrency": 1}),                 # a Map one iteration at a time is sequential
    ("map", {"inner_namespace": "child"}),           # another namespace can never re-enter
    ("parallel", {"inner_namespace": "child"}),
])
def test_sequential_children_and_other_namespaces_synthesize(shape, props):
    template = _children_of_one_hold(shape, **props)
    template.resource_count_is("AWS::StepFunctions::StateMachine", 1)


def test_a_jsonpath_task_in_the_protected_work_is_refused():
    """The redrive guard is JSONata in a task's Arguments: a JSONPath task cannot carry it."""
    stack = cdk.Stack(cdk.App(), "J")
    table = dynamodb.Table(stack, "T", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING))
    work = sfn_tasks.DynamoGetItem(stack, "Read", table=table,
                                   key={"pk": sfn_tasks.DynamoAttributeValue.from_string("x")})
    with pytest.raises(ValueError, match=r"^`protected` must use JSONata in its task states .*jsonata.*got: JSONPath task 'Read'$"):
        LockedSection(stack, "S", lock=Lock.mutex(KEY), protected=work, table=table, lease=cdk.Duration.minutes(5))


# ---- issue 15 part 2.3: a section cancelled by a sibling branch --------------------------

def _section_machine(machine_type=sfn.StateMachineType.STANDARD, **props):
    stack = cdk.Stack(cdk.App(), "Presence")
    table = dynamodb.Table(stack, "T", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING))
    section = LockedSection(stack, "S", lock=Lock.mutex(KEY), protected=sfn.Pass.jsonata(stack, "W"), table=table,
                            lease=cdk.Duration.minutes(5), **props)
    sfn.StateMachine(stack, "M", definition_body=sfn.DefinitionBody.from_chainable(section),
                     query_language=sfn.QueryLanguage.JSONATA, state_machine_type=machine_type)
    return stack


def _definition(stack) -> dict:
    template = cdk.assertions.Template.from_stack(stack).to_json()
    (definition,) = [r["Properties"]["DefinitionString"] for r in template["Resources"].values()
                     if r["Type"] == "AWS::StepFunctions::StateMachine"]
    parts = definition["Fn::Join"][1] if isinstance(definition, dict) else [definition]
    import json
    return json.loads("".join(x if isinstance(x, str) else "REF" for x in parts))


def test_a_section_holds_its_work_beside_a_presence_task_bounded_by_its_lease():
    hold = _definition(_section_machine())["States"]["S"]["Branches"][0]["States"]["S.Hold"]
    work, presence = hold["Branches"]
    assert work["StartAt"] == "W" and set(work["States"]) == {"W", "S.Depart", "S.Departed", "S.Dismiss", "S.LostInHold", "S.Worked"}
    assert (work["States"]["W"]["Next"], work["States"]["S.Depart"]["Next"], work["States"]["S.Departed"]["Next"]) == (
        "S.Depart", "S.Departed", "S.Dismiss")
    task = presence["States"]["S.Presence"]
    assert task["Resource"].endswith(":states:::aws-sdk:dynamodb:updateItem.waitForTaskToken")
    assert (task["TimeoutSeconds"], task["HeartbeatSeconds"]) == (301, 300)
    assert task["Arguments"]["ConditionExpression"] == lock_protocol.PRESENT.condition
    assert "$states.context.Task.Token" in task["Arguments"]["ExpressionAttributeValues"][":token"]["S"]
    assert {c["ErrorEquals"][0]: c["Next"] for c in hold["Catch"]}["Lock.LostInHold"] == "S.Lost"


def _longest_backoff_ms(retry: dict) -> int:
    """The longest a Retrier waits in all (FULL jitter waits at most the computed interval)."""
    return sum(int(retry["IntervalSeconds"] * 1000 * retry["BackoffRate"] ** n) for n in range(retry["MaxAttempts"]))


def test_the_presence_settle_outlasts_every_write_a_failed_registration_still_makes():
    """Why PRESENCE_SETTLE_MS is 20 s (issue 25, D1): a registration whose write applied but
    whose response was lost closes its token while its branch still has writes to make (the
    retry, then DEPART); a waiter must not trust the closed token before the last of them could
    land. The shared model (tests/protocol/shared_model.py, presence) checks the order abstractly; the
    number is the synthesized retries' longest backoff plus an allowance per call."""
    hold = _definition(_section_machine())["States"]["S"]["Branches"][0]["States"]["S.Hold"]
    states = hold["Branches"][1]["States"]
    (presence_retry,) = states["S.Presence"]["Retry"]
    (unsure_retry,) = states["S.PresenceUnsure"]["Retry"]
    # worst case: the first attempt's token closes; the registration's retries fail before they
    # apply, then DEPART's first attempts do, and its last attempt applies: every backoff waited
    calls = presence_retry["MaxAttempts"] + unsure_retry["MaxAttempts"] + 1
    backoff_ms = _longest_backoff_ms(presence_retry) + _longest_backoff_ms(unsure_retry)
    assert (backoff_ms, calls) == (10_000, 6)
    bound_ms = backoff_ms + calls * lock_protocol.PRESENCE_CALL_ALLOWANCE_MS
    assert bound_ms <= lock_protocol.PRESENCE_SETTLE_MS < bound_ms + lock_protocol.PRESENCE_CALL_ALLOWANCE_MS


def test_a_section_without_cancellation_detection_runs_its_work_alone():
    states = _definition(_section_machine(detect_cancellation=False))["States"]["S"]["Branches"][0]["States"]
    assert "S.Hold" not in states and "S.Presence" not in json.dumps(states)
    assert states["S.Protected"]["Branches"][0]["StartAt"] == "W"


def test_a_section_that_detects_cancellation_is_refused_in_an_express_machine():
    with pytest.raises((ValueError, RuntimeError), match=r"`detect_cancellation` must be False for a section in an "
                       r"EXPRESS state machine .*got: True for 'Presence/S'"):
        cdk.assertions.Template.from_stack(_section_machine(sfn.StateMachineType.EXPRESS))
    _definition(_section_machine(sfn.StateMachineType.EXPRESS, detect_cancellation=False))


def test_detect_cancellation_must_be_a_bool():
    with pytest.raises(ValueError, match=r"`detect_cancellation` must be True or False, got: 'yes'"):
        _section_machine(detect_cancellation="yes")


@pytest.mark.parametrize("construct", ["workflow", "section"])
@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(protected="a Lambda"), r"`protected` must be a Step Functions state or chain \(sfn.IChainable\), got: str 'a Lambda'"),
        (dict(table="locks"), r"`table` must be a DynamoDB table \(dynamodb.ITable, or a LockTable\), got: str 'locks'"),
        (dict(lock="{% $states.input.id %}"), r"`lock` must be a Lock .*got: str '\{% \$states.input.id %\}'"),
        (dict(wait_policy={"first_interval": 1}), r"`wait_policy` must be a WaitPolicy, got: dict"),
        (dict(lease=30), r"`lease` must be a Duration, got: int 30"),
    ],
)
def test_a_wrong_type_gets_the_projects_error_at_synth(construct, overrides, message):
    stack = cdk.Stack(cdk.App(), "T")
    props = dict(lock=Lock.mutex(KEY), protected=sfn.Pass.jsonata(stack, "Work"), lease=cdk.Duration.minutes(1))
    if construct == "section":
        props["table"] = dynamodb.Table(stack, "Locks", partition_key=dynamodb.Attribute(
            name="pk", type=dynamodb.AttributeType.STRING))
    props.update(overrides)
    with pytest.raises(TypeError, match=message):
        (LockedWorkflow if construct == "workflow" else LockedSection)(stack, "L", **props)


def test_a_lock_table_construct_is_accepted_where_a_table_is_expected():
    from locked_workflow import LockTable

    stack = cdk.Stack(cdk.App(), "T")
    locks = LockTable(stack, "Locks")
    LockedWorkflow(stack, "W", lock=Lock.mutex(KEY), protected=sfn.Pass.jsonata(stack, "Work"), table=locks)
    section = LockedSection(stack, "S", lock=Lock.mutex(KEY), protected=sfn.Pass.jsonata(stack, "Other"), table=locks,
                            lease=cdk.Duration.minutes(1))
    assert section.table is locks.table
    sfn.StateMachine(stack, "M", definition_body=sfn.DefinitionBody.from_chainable(section),
                     query_language=sfn.QueryLanguage.JSONATA)
    template = assertions.Template.from_stack(stack)
    template.resource_count_is("AWS::DynamoDB::Table", 1)  # the one given, nothing created
