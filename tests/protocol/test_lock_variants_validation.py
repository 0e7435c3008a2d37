"""The lock kinds' settings as the constructs take them (no runtime): each kind's validation at
synth, ``Lock`` values made by their factories, each kind's value beside its builder, the lost
cause, the lock on the record's props and attributes, and the semaphore's, multi-key lock's and
record lock's templates. (Their JSONata pieces: ``test_lock_variants_protocol.py``.)"""

from __future__ import annotations

import pytest

from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import multikey_protocol as m
from locked_workflow.state_machines import semaphore_protocol as s
from test_lock_variants_protocol import evaluate


# ---- construct validation -------------------------------------------------------------


def _lock(factory, *args, **kwargs):
    from locked_workflow import Lock

    return getattr(Lock, factory)(*args, **kwargs)


@pytest.mark.parametrize(
    "factory, args, kwargs, error, message",
    [
        ("semaphore", (p.jsonata("$states.input.k"),), {"limit": 1}, ValueError,
         "`limit` must be a whole number from 2 to 32 (one holder: Lock.mutex), got: 1"),
        ("semaphore", (p.jsonata("$states.input.k"),), {"limit": 33}, ValueError, "got: 33"),
        ("semaphore", (p.jsonata("$states.input.k"),), {"limit": True}, ValueError, "got: True"),
        ("semaphore", (p.jsonata("$states.input.k"),), {}, TypeError, "missing 1 required keyword-only argument: 'limit'"),
        ("keys", ("not a template",), {}, ValueError, "`keys` must be a JSONata template"),
        ("mutex", ("$.id",), {}, ValueError, "`key` must be a JSONata template"),
        ("fair", (p.jsonata("$k"),), {"polling": "yes"}, TypeError, "`polling` must be True or False, got: 'yes'"),
        ("on_record", (42, p.jsonata("$k")), {}, TypeError, "`table` must be a DynamoDB table"),
        ("on_record", (None, p.jsonata("$k")), {}, TypeError, "`table` must be a DynamoDB table"),
    ],
)
def test_bad_lock_kind_settings_are_refused_by_the_kind(factory, args, kwargs, error, message):
    with pytest.raises(error) as raised:
        _lock(factory, *args, **kwargs)
    assert message in str(raised.value)


def test_a_lock_is_a_value_made_by_its_factories():
    from locked_workflow import Lock

    with pytest.raises(TypeError, match=r"`Lock` values come from its factories") as refused:
        Lock()
    factories = [n for n, v in vars(Lock).items() if isinstance(v, staticmethod) and not n.startswith("_")]
    assert len(factories) == 8 and all(f"Lock.{n}(" in str(refused.value) for n in factories), factories
    key = p.jsonata("$states.input.k")
    assert Lock.mutex(key) == Lock.mutex(key) and Lock.mutex(key) != Lock.fair(key)
    assert Lock.semaphore(key, limit=3).kind == "semaphore" and Lock.keys(key).kind == "multi-key"
    assert Lock.rate(key, limit=3) == Lock.rate(key, limit=3) and Lock.rate(key, limit=3).kind == "rate"
    fair = Lock.fair(key)
    assert fair.for_express() != fair and fair.for_express().builder().polling and not fair.builder().polling
    assert fair.builder() is not fair.builder()  # each section builds its own states


def test_each_kind_declares_its_value_beside_its_builder():
    """A new kind touches its own module: each factory's value (its settings, its validation,
    its builder) is declared in ``kinds/<kind>.py`` beside its builder, and is a ``Lock``; the
    ``Lock`` module declares no value class of its own (its factories delegate)."""
    import aws_cdk as cdk
    from aws_cdk import aws_dynamodb as dynamodb

    from locked_workflow import Lock
    from locked_workflow.constructs_lib import lock as lock_module

    key = p.jsonata("$states.input.k")
    stack = cdk.Stack(cdk.App(), "V")
    records = dynamodb.Table(stack, "Records", partition_key=dynamodb.Attribute(
        name="id", type=dynamodb.AttributeType.STRING))
    values = [
        ("mutex", Lock.mutex(key)), ("fair", Lock.fair(key)), ("semaphore", Lock.semaphore(key, limit=2)),
        ("multikey", Lock.keys(key)), ("record", Lock.on_record(records, key)), ("shared", Lock.shared(key)),
        ("shared", Lock.exclusive(key)), ("rate", Lock.rate(key, limit=2)), ("rate", Lock.rate(key, limit=2, at_once=1)),
    ]
    for module, value in values:
        assert isinstance(value, Lock), value
        assert type(value).__module__ == f"locked_workflow.constructs_lib.kinds.{module}", (module, type(value))
        assert type(value.builder()).__module__ == type(value).__module__, (module, type(value.builder()))
    declared = [v for v in vars(lock_module).values() if isinstance(v, type) and v.__module__ == lock_module.__name__]
    assert declared == [Lock], declared


def test_the_lost_cause_names_the_hold_as_its_kind_spells_it():
    """``Lock.Lost``'s cause: the base declares a single-key hold's (its key and fence); the
    multi-key kind spells its own (its keys and fences) - no other kind's cause reads a multi-key
    lock record. Each evaluates to the text every kind rendered before."""
    from locked_workflow.constructs_lib.kinds.multikey import MultiKeyKind
    from locked_workflow.constructs_lib.kinds.mutex import MutexKind

    single = MutexKind("$k").lost_cause("$lock")
    multi = MultiKeyKind("$k").lost_cause("$lock")
    assert "keys" not in single and "fences" not in single, single
    after = " was taken over by another holder before it was released"
    assert evaluate(single, lock={"key": "c#1", "fence": 7}) == "lock c#1 (fence 7)" + after
    assert evaluate(multi, lock={"keys": ["a#1", "a#2"], "fences": {"a#1": 3, "a#2": 5}}) == (
        'lock ["a#1","a#2"] (fence {"a#1":3,"a#2":5})' + after)


# ---- lock on the record ---------------------------------------------------------------


def _record_workflow(**props):
    import aws_cdk as cdk
    from aws_cdk import aws_dynamodb as dynamodb, aws_stepfunctions as sfn

    from locked_workflow import Lock, LockedWorkflow

    stack = cdk.Stack(cdk.App(), "R")
    key = props.pop("key", dynamodb.Attribute(name="customerId", type=dynamodb.AttributeType.STRING))
    sort = props.pop("sort", None)
    imported = props.pop("imported", False)
    if imported:
        table = dynamodb.Table.from_table_name(stack, "Customers", "customers")
    else:
        table = dynamodb.Table(stack, "Customers", partition_key=key, sort_key=sort)
    key_attribute = props.pop("key_attribute", None)
    if "lock" not in props:
        props["lock"] = Lock.on_record(table, p.jsonata("$states.input.id"), key_attribute=key_attribute)
    return stack, LockedWorkflow(stack, "W", protected=sfn.Pass(stack, "Work"), **props)


@pytest.mark.parametrize(
    "props, message",
    [
        ({"key": "number"}, "`table` must have a string partition key (the lock key), got: customerId"),
        ({"sort": "sk"}, "`table` must have no sort key (one record per lock key), got: sort key sk"),
        ({"imported": True}, "`key_attribute` must name the record table's partition key"),
        ({"key_attribute": "id"}, "`key_attribute` must be the table's partition key 'customerId'"),
        ({"key_namespace": "c"}, "`key_namespace` must be empty with Lock.on_record"),
    ],
)
def test_bad_record_props_are_refused_at_synth(props, message):
    from aws_cdk import aws_dynamodb as dynamodb

    if props.get("key") == "number":
        props["key"] = dynamodb.Attribute(name="customerId", type=dynamodb.AttributeType.NUMBER)
    if props.get("sort"):
        props["sort"] = dynamodb.Attribute(name=props["sort"], type=dynamodb.AttributeType.STRING)
    with pytest.raises(ValueError) as raised:
        _record_workflow(**props)
    assert message in str(raised.value)


def test_a_record_lock_uses_prefixed_attributes_on_the_record_table():
    from aws_cdk.assertions import Template

    stack, workflow = _record_workflow(key_attribute="customerId")
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::DynamoDB::Table", 1)  # no lock table: the records carry the lock
    assert workflow.lock_table is None and workflow.section.kind.item.key_attribute == "customerId"
    import json

    (machine,) = template.find_resources("AWS::StepFunctions::StateMachine").values()
    text = json.dumps(machine["Properties"]["DefinitionString"])
    assert '\\"#owner\\":\\"lw:owner\\"' in text and '\\"#owner\\":\\"owner\\"' not in text
    # the janitor retires with the record's names
    (janitor,) = template.find_resources("AWS::Lambda::Function", {"Properties": {"Environment": {"Variables": {
        "LOCK_KEY_ATTRIBUTE": "customerId", "LOCK_ATTRIBUTE_PREFIX": "lw:"}}}}).values()
    assert janitor["Properties"]["Environment"]["Variables"]["LOCK_TABLE"]["Ref"].startswith("Customers")


# ---- templates ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def variant_templates():
    import aws_cdk as cdk
    from aws_cdk import aws_stepfunctions as sfn
    from aws_cdk.assertions import Template

    from locked_workflow import Lock, LockedWorkflow

    stack = cdk.Stack(cdk.App(), "T")
    semaphore = LockedWorkflow(stack, "Sem", lock=Lock.semaphore(p.jsonata("$states.input.k"), limit=3), protected=sfn.Pass(stack, "SemWork"))
    multi = LockedWorkflow(stack, "Multi", lock=Lock.keys(p.jsonata("[$states.input.a, $states.input.b]")), protected=sfn.Pass(stack, "MultiWork"))
    return Template.from_stack(stack), semaphore, multi


def _definition(template, workflow) -> dict:
    import json

    stack = __import__("aws_cdk").Stack.of(workflow)
    logical = stack.get_logical_id(workflow.state_machine.node.default_child)
    machine = template.to_json()["Resources"][logical]
    parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    return json.loads("".join(x if isinstance(x, str) else "TOKEN" for x in parts))


def test_a_semaphore_template_tries_slots_and_validates_a_shorter_key(variant_templates):
    template, semaphore, _ = variant_templates
    definition = _definition(template, semaphore)
    assert f'"slot": {s.first_slot_expression(3)}' in definition["States"]["Lock"]["Arguments"]
    assert "at most 2045 bytes" in definition["States"]["Lock"]["Arguments"]
    acquire = definition["States"]["Lock"]["Branches"][0]["States"]["Lock.Acquire"]
    assert "$states.context.State.RetryCount" in acquire["Arguments"]["Key"]["pk"]["S"]
    assert acquire["Arguments"]["ConditionExpression"] == p.ACQUIRE.condition  # the mutex's write


def test_a_semaphore_acquire_moves_to_the_next_slot_only_when_refused(variant_templates):
    """Issues 25/29: the acquire's own Retry is its refusal's alone (its RetryCount, which picks
    the slot, then counts refused attempts only); a transient error - the write may have
    applied - is caught into AcquireAgain, which writes the slot the caught attempt tried (the
    Catch names it with the attempt's own expression) and retries it with the transient
    backoff, where ACQUIRE accepts its own owner."""
    from locked_workflow.state_machines.errors import CONDITION_FAILED, TRANSIENT_ERRORS

    template, semaphore, _ = variant_templates
    states = _definition(template, semaphore)["States"]["Lock"]["Branches"][0]["States"]
    acquire, again = states["Lock.Acquire"], states["Lock.AcquireAgain"]
    assert [r["ErrorEquals"] for r in acquire["Retry"]] == [[CONDITION_FAILED]]
    (transient,) = [c for c in acquire["Catch"] if c["Next"] == "Lock.AcquireAgain"]
    assert set(transient["ErrorEquals"]) == set(TRANSIENT_ERRORS)
    (slot_variable,) = transient["Assign"]
    assert again["Arguments"]["Key"]["pk"]["S"] == "{% $" + slot_variable + " %}"
    assert again["Arguments"]["ConditionExpression"] == p.ACQUIRE.condition
    assert [set(r["ErrorEquals"]) for r in again["Retry"]] == [set(TRANSIENT_ERRORS)]
    # refused there: the wait path, as Acquire's refusal; acquired: the work, as Acquire
    assert {c["Next"] for c in again["Catch"] if c["ErrorEquals"] == [CONDITION_FAILED]} == {"Lock.Held?"}
    assert again["Next"] == acquire["Next"]
    # the Catch names the slot the caught attempt wrote, for every attempt of every round
    named = transient["Assign"][slot_variable].removeprefix("{% ").removesuffix(" %}")
    wait = next(iter(acquire["Assign"].keys() - {semaphore.section.lock_variable}))
    for w in (None, {"rounds": 2, "since": 0}, {"rounds": 1, "staleKey": "~0~sem#k"}):
        for retry in range(4):
            scope = {"states": {"input": {"slot": 1, "key": "sem#k"}, "context": {"State": {"RetryCount": retry}}},
                     wait: w}
            tried = evaluate(acquire["Arguments"]["Key"]["pk"]["S"].removeprefix("{% ").removesuffix(" %}"), **scope)
            assert evaluate(named, **scope) == tried


def test_a_multi_key_template_uses_transactions_with_least_privilege(variant_templates):
    from aws_cdk.assertions import Match

    template, _, multi = variant_templates
    states = _definition(template, multi)["States"]["Lock"]["Branches"][0]["States"]
    assert states["Lock.Acquire"]["Resource"].endswith(":::aws-sdk:dynamodb:transactWriteItems")
    assert states["Lock.ReadFences"]["Resource"].endswith(":::aws-sdk:dynamodb:transactGetItems")
    assert states["Lock.Release"]["Resource"].endswith(":::aws-sdk:dynamodb:transactWriteItems")
    catches = {c["Next"]: c["ErrorEquals"] for c in states["Lock.Acquire"]["Catch"]}
    assert catches["Lock.Held?"] == [m.TRANSACTION_CANCELED]
    assert {c["Next"] for c in states["Lock.ReadFences"]["Catch"]} == {"Lock.ReleaseAfterError"}
    assert {c["Next"] for c in states["Lock.Release"]["Catch"]} >= {"Lock.ReleaseEach", "Lock.LeftReentered"}
    # a transaction is authorized per action inside it, on the lock table only
    template.has_resource_properties("AWS::IAM::Policy", {
        "PolicyDocument": {"Statement": Match.array_with([
            Match.object_like({"Action": "dynamodb:UpdateItem", "Resource": Match.any_value()}),
            Match.object_like({"Action": "dynamodb:GetItem", "Resource": Match.any_value()}),
        ])},
    })
    for policy in template.find_resources("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            assert not [a for a in actions if a.startswith("dynamodb:") and statement["Resource"] == "*"]


@pytest.mark.parametrize("result, units", [
    ({"ConsumedCapacity": {"CapacityUnits": 9, "Table": {"CapacityUnits": 3}}}, 3),  # INDEXES: the table's own
    ({"ConsumedCapacity": {"CapacityUnits": 5}}, 5),                                 # TOTAL
    ({}, -1),                                                                        # none: unknown
])
def test_a_record_is_read_only_when_its_write_units_say_it_is_small_enough(result, units):
    from locked_workflow.state_machines import record_protocol as r

    assert evaluate(r.write_units_expression(), states={"result": result}) == units
    read_key = r.read_key_expression("lock")
    assert evaluate(read_key, lock={"key": "c-1", "recordKb": r.RECORD_SIZE_LIMIT_KB}) == "c-1"
    for too_large, said in ((r.RECORD_SIZE_LIMIT_KB + 1, f"is {r.RECORD_SIZE_LIMIT_KB + 1} KB"), (-1, "is of unknown size")):
        with pytest.raises(Exception, match=rf"{r.ERROR_RECORD_TOO_LARGE}: the record c-1 {said}, over the"):
            evaluate(read_key, lock={"key": "c-1", "recordKb": too_large})
