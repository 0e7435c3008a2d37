"""What the constructs know at synth and say: a lease shorter than the run (a warning), a lock
table with the wrong key, a record table's key (TableV2 too), kinds an EXPRESS machine cannot
run, the query language of the work (issue 26).

One synth for every warning case (a synth costs seconds); refusals at construction need none.
"""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_stepfunctions as sfn

from locked_workflow import Lock, LockedSection, LockedWorkflow, LockTable
from locked_workflow.constructs_lib.lease_check import WARNING_ID
from locked_workflow.state_machines.lock_protocol import jsonata

KEY = jsonata("$states.input.id")


def _warnings(artifact, warning_id: str) -> dict[str, list[str]]:
    """The synthesized stack's warnings with ``warning_id``, by construct path."""
    found: dict[str, list[str]] = {}
    for message in artifact.messages:
        text = str(message.entry.data)
        if str(message.level).endswith("WARNING") and warning_id in text:
            found.setdefault(message.id, []).append(text)
    return found

def _section(stack: cdk.Stack, construct_id: str, table, lease: cdk.Duration) -> LockedSection:
    return LockedSection(
        stack, construct_id, lock=Lock.mutex(KEY), table=table, lease=lease,
        protected=sfn.Pass.jsonata(stack, f"{construct_id}Work"),
    )


def _machine(stack: cdk.Stack, construct_id: str, section: LockedSection, **props) -> sfn.StateMachine:
    return sfn.StateMachine(
        stack, construct_id, definition_body=sfn.DefinitionBody.from_chainable(section),
        query_language=sfn.QueryLanguage.JSONATA, **props,
    )


@pytest.fixture(scope="session")
def lease_warnings() -> dict[str, list[str]]:
    """Construct path -> the lease warnings synth reported there."""
    app = cdk.App()
    stack = cdk.Stack(app, "Leases")
    LockedWorkflow(stack, "ShortLease", lock=Lock.mutex(KEY), protected=sfn.Pass.jsonata(stack, "A"),
                   timeout=cdk.Duration.hours(1), lease=cdk.Duration.minutes(30))
    LockedWorkflow(stack, "DefaultLease", lock=Lock.mutex(KEY), protected=sfn.Pass.jsonata(stack, "B"),
                   timeout=cdk.Duration.hours(1))
    table = LockTable(stack, "Locks")
    for construct_id, props in (
        ("Bounded", {"timeout": cdk.Duration.hours(1)}),
        ("Unbounded", {}),
        ("Fits", {"timeout": cdk.Duration.minutes(5)}),
    ):
        section = _section(stack, f"{construct_id}Section", table, cdk.Duration.minutes(10))
        section.recover_stale_holders(_machine(stack, f"{construct_id}Machine", section, **props))
    artifact = app.synth().get_stack_by_name("Leases")
    return _warnings(artifact, WARNING_ID)


def _at(found: dict[str, list[str]], construct_path: str) -> list[str]:
    return [text for path, texts in found.items() if path == f"/Leases/{construct_path}" for text in texts]


def test_a_workflow_lease_shorter_than_its_timeout_is_warned_with_its_cost(lease_warnings):
    (warning,) = _at(lease_warnings, "ShortLease")
    assert "`lease` (30 min) is shorter than `timeout`" in warning and "(1 h)" in warning
    assert "Lock.Lost" in warning and "both are inside at once" in warning and "fence" in warning
    assert not _at(lease_warnings, "DefaultLease")  # timeout + 5 min: nothing to say


def test_a_section_lease_shorter_than_its_machine_is_warned(lease_warnings):
    (bounded,) = _at(lease_warnings, "BoundedSection")
    assert "`lease` (10 min) is shorter than the timeout of 'Leases/BoundedMachine' (1 h)" in bounded
    (unbounded,) = _at(lease_warnings, "UnboundedSection")
    assert "no timeout" in unbounded and "365 days" in unbounded
    assert not _at(lease_warnings, "FitsSection")  # 10 min lease, 5 min machine


@pytest.mark.parametrize("table_class", ["Table", "TableV2"])
@pytest.mark.parametrize("keys,shown", [
    ({"partition_key": ("id", "STRING")}, "id (string)"),
    ({"partition_key": ("pk", "NUMBER")}, "pk (number)"),
    ({"partition_key": ("pk", "STRING"), "sort_key": ("sk", "STRING")}, "pk (string) and sort key sk (string)"),
])
def test_a_lock_table_with_the_wrong_key_is_refused(table_class, keys, shown):
    """Every run would fail ``DynamoDB.ValidationException``: refused at construction."""
    from aws_cdk import aws_dynamodb as dynamodb

    stack = cdk.Stack(cdk.App(), "Keys")
    table = getattr(dynamodb, table_class)(stack, "Mine", **{
        prop: dynamodb.Attribute(name=name, type=getattr(dynamodb.AttributeType, kind)) for prop, (name, kind) in keys.items()
    })
    with pytest.raises(ValueError, match=r"^`table` must have the string partition key `pk` and no sort key .*, got: "
                       + shown.replace("(", r"\(").replace(")", r"\)") + "$"):
        LockedWorkflow(stack, "Wrong", lock=Lock.mutex(KEY), protected=sfn.Pass.jsonata(stack, "W"), table=table)
    # a table with the key, a LockTable, or one whose schema cannot be read are taken
    right = getattr(dynamodb, table_class)(stack, "Right", partition_key=dynamodb.Attribute(
        name="pk", type=dynamodb.AttributeType.STRING))
    _section(stack, "RightKey", right, cdk.Duration.minutes(5))
    _section(stack, "Imported", dynamodb.Table.from_table_name(stack, "Imp", "locks"), cdk.Duration.minutes(5))


@pytest.mark.parametrize("sort,key_type,message", [
    (None, "STRING", None),
    ("sk", "STRING", "`table` must have no sort key (one record per lock key), got: sort key sk"),
    (None, "NUMBER", "`table` must have a string partition key (the lock key), got: customerId (number)"),
])
def test_a_lock_on_records_of_a_table_v2_reads_its_key(sort, key_type, message):
    """The quick start's own ``dynamodb.TableV2`` was taken for an imported table ("when its
    schema cannot be read"): its key is read, and the sort-key and key-type checks apply."""
    from aws_cdk import aws_dynamodb as dynamodb

    stack = cdk.Stack(cdk.App(), "Records")
    customers = dynamodb.TableV2(
        stack, "Customers",
        partition_key=dynamodb.Attribute(name="customerId", type=getattr(dynamodb.AttributeType, key_type)),
        sort_key=dynamodb.Attribute(name=sort, type=dynamodb.AttributeType.STRING) if sort else None,
    )
    if message is None:
        lock = Lock.on_record(customers, KEY)
        assert lock.builder().item.key_attribute == "customerId"
        with pytest.raises(ValueError, match="`key_attribute` must be the table's partition key 'customerId', got: 'id'"):
            Lock.on_record(customers, KEY, key_attribute="id")
    else:
        with pytest.raises(ValueError) as raised:
            Lock.on_record(customers, KEY)
        assert str(raised.value) == message


def _express_section(lock: Lock) -> cdk.Stack:
    stack = cdk.Stack(cdk.App(), "Express")
    section = LockedSection(stack, "S", lock=lock, table=LockTable(stack, "Locks"), lease=cdk.Duration.minutes(10),
                            protected=sfn.Pass.jsonata(stack, "W"), detect_cancellation=False)
    _machine(stack, "M", section, state_machine_type=sfn.StateMachineType.EXPRESS)
    return stack


@pytest.mark.parametrize("lock,message", [
    (Lock.fair(KEY), r"`lock` must be Lock.fair\(key, polling=True\) in an EXPRESS state machine .*got: Lock.fair\(key\) for 'Express/S'"),
    (Lock.shared(KEY), r"`lock` must not be Lock.shared in an EXPRESS state machine .*got: Lock.shared\(key\) for 'Express/S'"),
    (Lock.exclusive(KEY), r"`lock` must not be Lock.exclusive in an EXPRESS state machine .*got: Lock.exclusive\(key\)"),
])
def test_a_section_whose_waiters_park_is_refused_in_an_express_machine(lock, message):
    """EXPRESS state machines cannot park on a task token: the README promised the refusal,
    and only ``detect_cancellation`` was checked."""
    with pytest.raises(RuntimeError, match=message):
        cdk.assertions.Template.from_stack(_express_section(lock))


def test_a_polling_fair_section_and_a_mutex_run_in_an_express_machine():
    for lock in (Lock.fair(KEY, polling=True), Lock.mutex(KEY)):
        cdk.assertions.Template.from_stack(_express_section(lock)).resource_count_is("AWS::StepFunctions::StateMachine", 1)


@pytest.mark.parametrize("props,message", [
    ({"monitoring": "yes"}, "`monitoring` must be True, False or a dict of LockMonitoring props, got: str 'yes'"),
    ({"monitoring": 1}, "`monitoring` must be True, False or a dict of LockMonitoring props, got: int 1"),
    ({"logging": "no"}, "`logging` must be True or False, got: 'no'"),
    ({"janitor": None}, "`janitor` must be True or False, got: None"),
    ({"monitoring": {"dashboard": "no"}}, "`dashboard` must be True or False, got: 'no'"),
])
def test_a_flag_of_the_wrong_type_is_a_type_error(props, message):
    """``monitoring="yes"`` was taken for its truthiness; the README promises a TypeError."""
    stack = cdk.Stack(cdk.App(), "Flags")
    with pytest.raises(TypeError) as raised:
        LockedWorkflow(stack, "W", lock=Lock.mutex(KEY), protected=sfn.Pass.jsonata(stack, "P"), **props)
    assert str(raised.value) == message


def test_a_jsonpath_task_is_refused_at_construction_with_the_fix():
    """A classic ``tasks.LambdaInvoke(...)`` failed at ``app.synth()`` with a RuntimeError
    that did not say the fix."""
    from aws_cdk import aws_lambda as lambda_, aws_stepfunctions_tasks as tasks

    stack = cdk.Stack(cdk.App(), "JsonPath")
    function = lambda_.Function(stack, "Fn", runtime=lambda_.Runtime.PYTHON_3_13, handler="index.handler",
                                code=lambda_.Code.from_inline("def handler(e, c): return e"))
    classic = tasks.LambdaInvoke(stack, "Apply update", lambda_function=function)
    with pytest.raises(ValueError) as raised:
        LockedSection(stack, "S", lock=Lock.mutex(KEY), table=LockTable(stack, "Locks"),
                      lease=cdk.Duration.minutes(5), protected=sfn.Pass.jsonata(stack, "Prepare").next(classic))
    message = str(raised.value)
    assert message.startswith("`protected` must use JSONata in its task states")
    assert "tasks.LambdaInvoke.jsonata(...)" in message and message.endswith("got: JSONPath task 'Apply update'")
    stack = cdk.Stack(cdk.App(), "Nested")  # (a refused construct stays in its tree: a fresh stack)
    function = lambda_.Function(stack, "Fn", runtime=lambda_.Runtime.PYTHON_3_13, handler="index.handler",
                                code=lambda_.Code.from_inline("def handler(e, c): return e"))
    nested = sfn.Parallel.jsonata(stack, "Branches").branch(tasks.LambdaInvoke(stack, "Deep", lambda_function=function))
    # inside a branch of the work's own Parallel (rendered only with its state machine): the
    # same message, when the state machine renders
    with pytest.raises((ValueError, RuntimeError), match=r"`protected` must use JSONata in its task states .*"
                       r"tasks\.LambdaInvoke\.jsonata\(\.\.\.\).*got: JSONPath task 'Deep'$"):
        LockedWorkflow(stack, "W", lock=Lock.mutex(KEY), protected=nested)
    stack = cdk.Stack(cdk.App(), "Shapes")
    with pytest.raises(ValueError, match=r"^`protected` must use JSONata in every state .*got: JSONPath state 'Shape'$"):
        LockedWorkflow(stack, "W2", lock=Lock.mutex(KEY), protected=sfn.Pass(stack, "Shape", parameters={"a.$": "$.b"}))


def _jsonpath_machine(app: cdk.App) -> cdk.Stack:
    """A JSONPath state machine (the default) with a section around JSONata work."""
    stack = cdk.Stack(app, "JsonPathMachine")
    section = LockedSection(
        stack, "S", lock=Lock.mutex(KEY), table=LockTable(stack, "Locks", removal_policy=cdk.RemovalPolicy.DESTROY),
        lease=cdk.Duration.minutes(10),
        protected=sfn.Pass.jsonata(stack, "Work", outputs={"fence": "{% $lock.fence %}", "id": "{% $states.input.id %}"}),
    )
    before = sfn.Pass(stack, "Before", parameters={"id.$": "$.id"})
    after = sfn.Pass(stack, "After", parameters={"out.$": "$"})
    sfn.StateMachine(stack, "M", definition_body=sfn.DefinitionBody.from_chainable(before.next(section).next(after)))
    return stack


@pytest.mark.parametrize("backend", ["moto", "dynamodb-local"])
def test_a_section_runs_in_a_jsonpath_state_machine(backend):
    """A JSONPath state machine may hold JSONata states (every lock state says so), not the
    other way round (https://docs.aws.amazon.com/step-functions/latest/dg/transforming-data.html)."""
    from locked_workflow.testing import LocalCloud
    from locked_workflow.testing.pytest_plugin import require_backend
    from locked_workflow.testing.synth import synth_app

    require_backend(backend)
    synthesized = synth_app(_jsonpath_machine)
    (machine,) = [r for r in synthesized.template["Resources"].values() if r["Type"] == "AWS::StepFunctions::StateMachine"]
    with LocalCloud(backend) as cloud:
        app = cloud.deploy(synthesized.template, assets_dir=synthesized.assets_dir)
        runs = [cloud.start_execution(app.state_machine_arn("M"), {"id": "a"}) for _ in range(2)]
        results = [cloud.wait_for(arn, timeout=120) for arn in runs]
    assert [r.status for r in results] == ["SUCCEEDED"] * 2, [(r.error, r.cause) for r in results]
    assert sorted(r.output["out"]["fence"] for r in results) == [1, 2]


@pytest.fixture(scope="session")
def grace_warnings() -> dict[str, list[str]]:
    """Construct path -> the short stop grace warnings synth reported there: workflows around a
    Lambda task (a 3 s timeout: its longest run is Lambda's 10 s Init limit + 3 s)."""
    from aws_cdk import aws_lambda as lambda_, aws_stepfunctions_tasks as tasks

    from locked_workflow.constructs_lib.section_work import SHORT_GRACE_WARNING_ID

    app = cdk.App()
    stack = cdk.Stack(app, "Graces")
    function = lambda_.Function(stack, "Work", runtime=lambda_.Runtime.PYTHON_3_12, handler="index.handler",
                                code=lambda_.Code.from_inline("def handler(event, context): pass"),
                                timeout=cdk.Duration.seconds(3))
    for construct_id, grace in (("Short", 12), ("Covers", 13), ("Derived", None)):
        LockedWorkflow(stack, construct_id, lock=Lock.mutex(KEY),
                       protected=tasks.LambdaInvoke.jsonata(stack, f"{construct_id}Invoke", lambda_function=function),
                       **({} if grace is None else {"stop_grace": cdk.Duration.seconds(grace)}))
    LockedWorkflow(stack, "NoLambda", lock=Lock.mutex(KEY), protected=sfn.Pass.jsonata(stack, "Nothing"),
                   stop_grace=cdk.Duration.seconds(0))
    artifact = app.synth().get_stack_by_name("Graces")
    return _warnings(artifact, SHORT_GRACE_WARNING_ID)


def test_an_explicit_stop_grace_shorter_than_a_lambda_tasks_run_is_warned_with_its_cost(grace_warnings):
    """A holder stopped as its Lambda task invoked the function may run it for Lambda's Init
    limit + the function's timeout after the stop: a shorter explicit grace lets the next
    holder in beside it. Allowed (as a short lease is), said at synth, once."""
    short = [texts for path, texts in grace_warnings.items() if path.startswith("/Graces/Short/")]
    assert len(short) == 1 and len(short[0]) == 1, grace_warnings
    (warning,) = short[0]
    assert "`stop_grace` (12 s) is shorter than the longest run of the Lambda function 'Graces/Work' (13 s" in warning
    assert "Init" in warning and "beside" in warning and "fence" in warning
    # nothing to say: a grace that covers Init + the timeout, the derived one, a work with no Lambda
    assert not [p for p in grace_warnings if p.startswith(("/Graces/Covers/", "/Graces/Derived/", "/Graces/NoLambda/"))]
