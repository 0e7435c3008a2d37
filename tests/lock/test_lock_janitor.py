"""The janitor (the function the status events of ended executions invoke) on both DynamoDB
backends: any input size, any history length, late and duplicate events, a failed write retried
by Lambda, a history it cannot read; its template (retries, a dead-letter queue, least
privilege) and what it learns from the lock value. (The behaviour stack: conftest's
``deployed``; this file is in ``test_lock_recovery.py``'s group.)"""

from __future__ import annotations

import json
import uuid
from contextlib import contextmanager

import pytest

from locked_workflow.constructs_lib.lock_client import LockHeld
from deployed import new_key, start, update, wait_until
from template_iam import actions, role_statements
from locked_workflow.state_machines import lock_protocol as p
from test_lock_recovery import (
    GRACE_MS, GRACE_S, _acquisition_held_by, _status_event, _step_functions_only, _wait_for_retire,
)


# ---- the janitor: any input size, any history length, late and duplicate events --------------


#: Work of a holder the janitor tests stop (or inspect) while it holds: long enough that it
#: still holds at the test's next step on a loaded machine, within the protected Lambda's
#: timeout (behaviour_stack.FUNCTION_TIMEOUT_S), which the runtime enforces.
HELD_WORK_MS = 10_000


def _janitor_event(detail: dict) -> dict:
    """A status-change event as EventBridge delivers it to the janitor."""
    return {"version": "0", "id": str(uuid.uuid4()), "source": "aws.states",
            "detail-type": "Step Functions Execution Status Change", "account": "123456789012",
            "time": "2026-01-01T00:00:00Z", "region": "us-east-1", "resources": [detail["executionArn"]],
            "detail": detail}


def _invoke_janitor(deployed, detail: dict, machine: str = "Main") -> dict:
    """Deliver ``detail`` to ``machine``'s janitor (a synchronous invoke); what it did."""
    response = deployed.cloud.client("lambda").invoke(
        FunctionName=deployed.app.function_name(f"{machine}/Janitor/Function"),
        Payload=json.dumps(_janitor_event(detail)).encode(),
    )
    payload = json.loads(response["Payload"].read())
    assert "FunctionError" not in response, payload
    return payload


@contextmanager
def _status_event_dropped(deployed, execution_holder: list):
    """The status event of the execution named in ``execution_holder`` is not emitted (the
    test delivers it itself); every other one is."""
    deployed.cloud.events.status_event_filter = lambda d: d["executionArn"] not in execution_holder
    try:
        yield
    finally:
        deployed.cloud.events.status_event_filter = None


def _stop(deployed, execution: str, events) -> int:
    """Stop ``execution``; its status event's stopDate (epoch ms), once ``events`` has it."""
    deployed.cloud.stop_execution(execution, error="Operator.Stop", cause="stopped by the test")
    assert deployed.cloud.wait_for(execution).status == "ABORTED"
    wait_until(lambda: any(d["executionArn"] == execution for d in events), timeout=10)
    return _status_event(events, execution)["stopDate"]


def test_janitor_retires_a_holder_with_a_200_kb_input_and_a_duplicate_event_changes_nothing(deployed):
    """A state machine reading this history hit the 256 KiB result limit (the first page holds
    the input several times over); the function reads it whole. Issue 15, item 9."""
    key = new_key("big-input")
    holder = start(deployed, "Main", {**update(key, work_ms=HELD_WORK_MS), "padding": "x" * 200_000})
    held = _acquisition_held_by(deployed, "main", key, holder)
    stopped_ms = _stop(deployed, holder, deployed.cloud.events.status_events)
    _wait_for_retire(deployed, "main", key, str(stopped_ms + GRACE_MS), timeout=GRACE_S)
    retired = deployed.lock_item("main", key)
    assert (retired[p.OWNER], retired[p.FENCE]) == (held[p.OWNER], held[p.FENCE])  # not released
    # the same event again (EventBridge delivers at least once): nothing more happens
    again = _invoke_janitor(deployed, _status_event(deployed.cloud.events.status_events, holder))
    assert again["retired"] == [] and again["unchanged"] == [{"key": p.namespaced("main", key), "owner": held[p.OWNER]["S"]}]
    assert deployed.lock_item("main", key) == retired


@pytest.mark.filterwarnings("ignore:No application metrics to publish")  # a failed invocation
def test_a_janitor_event_whose_first_invocation_fails_a_write_is_retried_by_lambda_and_retires_the_lock(deployed):
    """Issue 25: the janitor's retire write fails with a 5xx that outlasted botocore's retries
    (the fault sits above botocore's retry loop): that invocation fails. Lambda runs an
    asynchronous invocation that failed twice more
    (https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html), and
    the janitor's writes are idempotent: the retry retires the lock, within the stop grace."""
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    key = new_key("janitor-5xx")
    stored = p.namespaced("main", key)
    janitor = deployed.app.function_name("Main/Janitor/Function")
    holder = start(deployed, "Main", update(key, work_ms=HELD_WORK_MS))
    held = _acquisition_held_by(deployed, "main", key, holder)
    before = len(deployed.cloud.async_invoke_options.of(janitor))
    fails = Fault("UpdateItem", "InternalServerError", when=lambda params: (
        params.get("UpdateExpression") == p.RETIRE_BY.update and stored in json.dumps(params.get("Key"))))
    with dynamodb_faults(fails) as log:
        stopped_ms = _stop(deployed, holder, deployed.cloud.events.status_events)
        _wait_for_retire(deployed, "main", key, str(stopped_ms + GRACE_MS), timeout=GRACE_S)
    assert log.injected == 1
    retired = deployed.lock_item("main", key)
    assert (retired[p.OWNER], retired[p.FENCE]) == (held[p.OWNER], held[p.FENCE])  # retired, not released
    def outcomes() -> list[str]:
        return [a.outcome for a in deployed.cloud.async_invoke_options.of(janitor)[before:]]

    # the first invocation failed; Lambda's retry did it (its attempt is logged once the
    # invocation returns, which can be after its write is seen)
    wait_until(lambda: "failed" in outcomes() and "ok" in outcomes()[outcomes().index("failed"):], timeout=60)


@pytest.mark.filterwarnings("ignore:No application metrics to publish")  # a failed invocation
def test_janitor_reads_every_page_of_a_long_wait_before_the_stop(deployed):
    """The holder polled a held lock for a while (its acquire attempts fill the history) and
    then held it when it was stopped: read in pages of 5 events, the acquisition is on a late
    page, and it is retired."""
    _step_functions_only(deployed)
    from botocore.exceptions import ClientError

    from locked_workflow.lambdas.lock_janitor.logic import EndedExecution, RecoveryFailed, recover
    from locked_workflow.lambdas.lock_janitor.settings import JanitorSettings

    key = new_key("long-wait")
    client = deployed.client("main")
    blocking = client.acquire(key, lease=60)
    holder: list[str] = []
    with _status_event_dropped(deployed, holder):
        holder.append(start(deployed, "Main", update(key, work_ms=HELD_WORK_MS)))
        wait_until(lambda: sum(e["type"] == "TaskFailed" for e in deployed.cloud.history(holder[0])) >= 4, timeout=60)
        client.release(blocking)
        held = _acquisition_held_by(deployed, "main", key, holder[0])
        stopped_ms = _stop(deployed, holder[0], deployed.cloud.events.dropped_status_events)
    history = deployed.cloud.history(holder[0])
    attempts = [e for e in history if e["type"] == "TaskScheduled"
                and p.ACQUIRE.condition in e["taskScheduledEventDetails"]["parameters"]]
    assert len(attempts) >= 5 and len(history) > 25  # many attempts, six pages of 5 or more
    assert history.index(attempts[-1]) >= 15  # the attempt that took the lock: page 4 or later
    ended = EndedExecution.from_detail(_status_event(deployed.cloud.events.dropped_status_events, holder[0]))
    settings = JanitorSettings(table_name=deployed.locks_table)

    class Throttled:  # DynamoDB still refusing after botocore's retries
        def get_item(self, **_):
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "GetItem")

        update_item = get_item

    with pytest.raises(RecoveryFailed) as failed:  # says so, naming the execution and the key
        recover(ended, settings, dynamodb=Throttled(), stepfunctions=deployed.cloud.stepfunctions, page_size=5)
    assert holder[0] in str(failed.value) and repr(p.namespaced("main", key)) in str(failed.value)
    assert deployed.lock_item("main", key) == held

    recovery = recover(ended, settings, dynamodb=deployed.cloud.dynamodb,
                       stepfunctions=deployed.cloud.stepfunctions, page_size=5)
    assert recovery.retired == [(p.namespaced("main", key), held[p.OWNER]["S"])]
    assert deployed.lock_item("main", key)[p.EXPIRES_AT] == {"N": str(stopped_ms + GRACE_MS)}


@pytest.mark.filterwarnings("ignore:No application metrics to publish")  # a failed invocation
def test_janitor_fails_the_invocation_when_it_cannot_read_the_history(deployed):
    """The event goes back to Lambda (retries, then the dead-letter queue) with the execution
    named; a malformed event is refused the same way."""
    gone = deployed.machine("Main").replace(":stateMachine:", ":execution:") + ":no-such-run"
    detail = {"executionArn": gone, "stateMachineArn": deployed.machine("Main"), "status": "ABORTED",
              "stopDate": 1_700_000_000_000}
    lambda_client = deployed.cloud.client("lambda")
    name = deployed.app.function_name("Main/Janitor/Function")
    response = lambda_client.invoke(FunctionName=name, Payload=json.dumps(_janitor_event(detail)).encode())
    error = json.loads(response["Payload"].read())
    assert response.get("FunctionError") and error["errorType"] == "RecoveryFailed"
    assert gone in error["errorMessage"] and "reading its history" in error["errorMessage"]
    response = lambda_client.invoke(FunctionName=name, Payload=json.dumps(_janitor_event({**detail, "stopDate": None})).encode())
    assert json.loads(response["Payload"].read())["errorType"] == "InvalidJanitorEvent"


def test_a_late_event_never_retires_the_lock_a_redriven_holder_took_after_it(deployed):
    """Issue 15, item 1 (second case): a waiter is stopped, redriven - its acquire resumes with
    its old owner and takes the lock - and then its first end's event arrives (EventBridge
    retries for up to 24 h). The owner matches, but the acquisition is newer than that end:
    the janitor must leave it alone, or a newcomer would enter beside the redriven holder."""
    key = new_key("late-event")
    client = deployed.client("main")
    blocking = client.acquire(key, lease=60)
    holder: list[str] = []
    with _status_event_dropped(deployed, holder):
        holder.append(start(deployed, "Main", update(key, work_ms=HELD_WORK_MS)))
        wait_until(lambda: any(e["type"] == "TaskFailed" for e in deployed.cloud.history(holder[0])), timeout=30)
        _stop(deployed, holder[0], deployed.cloud.events.dropped_status_events)
    first_end = _status_event(deployed.cloud.events.dropped_status_events, holder[0])
    on_time = _invoke_janitor(deployed, first_end)  # it never held the lock: nothing to retire
    assert on_time["retired"] == [] and [a["key"] for a in on_time["unchanged"]] == [p.namespaced("main", key)]
    client.release(blocking)

    deployed.cloud.stepfunctions.redrive_execution(executionArn=holder[0])
    held = _acquisition_held_by(deployed, "main", key, holder[0])
    assert held[p.OWNER]["S"] == on_time["unchanged"][0]["owner"]  # the same owner: RETIRE's owner test passes
    assert int(held[p.ACQUIRED_AT]["N"]) > first_end["stopDate"]
    late = _invoke_janitor(deployed, first_end)
    assert late["retired"] == [] and late["unchanged"] == on_time["unchanged"]
    assert deployed.lock_item("main", key) == held  # its lease untouched: nobody can enter beside it
    with pytest.raises(LockHeld):
        client.acquire(key, lease=10)
    assert deployed.cloud.wait_for(holder[0], timeout=60).status == "SUCCEEDED"


def test_janitor_template_targets_the_function_with_retries_and_a_dead_letter_queue(example):
    from aws_cdk.assertions import Capture, Match

    function, queue = Capture(), Capture()
    example.assertions.has_resource_properties("AWS::Events::Rule", {
        "EventPattern": {
            "source": ["aws.states"], "detail-type": ["Step Functions Execution Status Change"],
            "detail": {"status": ["ABORTED", "TIMED_OUT", "FAILED"], "stateMachineArn": [{"Ref": Match.string_like_regexp("ApplyCustomerUpdatesStateMachine")}]},
        },
        "Targets": [{"Id": Match.any_value(), "Arn": {"Fn::GetAtt": [function, "Arn"]},
                     "RetryPolicy": {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 86400},
                     "DeadLetterConfig": {"Arn": {"Fn::GetAtt": [queue, "Arn"]}}}],
    })
    assert function.as_string().startswith("ApplyCustomerUpdatesJanitorFunction")
    janitor = example.template["Resources"][function.as_string()]["Properties"]
    # a failed invocation: Lambda retries it twice, then the same dead-letter queue
    assert janitor["DeadLetterConfig"] == {"TargetArn": {"Fn::GetAtt": [queue.as_string(), "Arn"]}}
    example.assertions.has_resource_properties("AWS::Lambda::EventInvokeConfig", {
        "FunctionName": {"Ref": function.as_string()}, "MaximumRetryAttempts": 2, "MaximumEventAgeInSeconds": 21600})
    lock_table = next(k for k in example.template["Resources"] if k.startswith("ApplyCustomerUpdatesLockTable"))
    assert janitor["Environment"]["Variables"]["LOCK_TABLE"] == {"Ref": lock_table}


def test_janitor_iam_is_least_privilege(example):
    (janitor,) = [r["Properties"] for k, r in example.template["Resources"].items()
                  if k.startswith("ApplyCustomerUpdatesJanitorFunction") and r["Type"] == "AWS::Lambda::Function"]
    statements = role_statements(example.template, janitor["Role"]["Fn::GetAtt"][0])
    by_action = {a: s["Resource"] for s in statements for a in actions(s)}
    assert set(by_action) == {"states:GetExecutionHistory", "dynamodb:UpdateItem", "dynamodb:GetItem", "sqs:SendMessage",
                              "logs:CreateLogStream", "logs:PutLogEvents",
                              "xray:PutTraceSegments", "xray:PutTelemetryRecords"}
    unscoped = {a for a, resource in by_action.items() if resource == "*"}
    assert unscoped == {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}  # X-Ray has no resources
    history = json.dumps(by_action["states:GetExecutionHistory"])
    assert ":execution:" in history and '"ApplyCustomerUpdatesStateMachine' in history  # the watched one only
    lock_table = next(k for k in example.template["Resources"] if k.startswith("ApplyCustomerUpdatesLockTable"))
    for action in ("dynamodb:UpdateItem", "dynamodb:GetItem"):  # the lock table only
        assert by_action[action]["Fn::Join"][1][-2:] == [":table/", {"Ref": lock_table}]


def _janitor_template(name: str, **props):
    """A stack of one watched machine and its janitor (``props`` beside ``table``/``watched``):
    its template, and the janitor function's properties."""
    import aws_cdk as cdk
    from aws_cdk import aws_stepfunctions as sfn
    from aws_cdk.assertions import Template

    from locked_workflow import LockJanitor, LockTable

    stack = cdk.Stack(cdk.App(), name)
    machine = sfn.StateMachine(stack, "M", definition_body=sfn.DefinitionBody.from_chainable(sfn.Pass(stack, "P")))
    LockJanitor(stack, "Janitor", table=LockTable(stack, "Locks").table, watched=[machine], **props)
    template = Template.from_stack(stack).to_json()
    (janitor,) = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    return template, janitor


def test_a_fair_janitor_may_also_read_the_queue_and_wake_any_task_token():
    from locked_workflow import Lock

    template, janitor = _janitor_template("FairJanitor", lock=Lock.fair("{% $states.input.key %}"))
    assert janitor["Environment"]["Variables"]["FAIR_LOCK"] == "true"
    by_action = {a: s["Resource"] for s in role_statements(template, janitor["Role"]["Fn::GetAtt"][0]) for a in actions(s)}
    assert {"dynamodb:UpdateItem", "dynamodb:GetItem", "dynamodb:DeleteItem", "states:SendTaskSuccess",
            "states:DescribeExecution"} <= set(by_action)
    unscoped = {a for a, resource in by_action.items() if resource == "*"}
    # (task tokens cannot be scoped: waking a parked waiter, or telling it to look by itself)
    assert unscoped == {"states:SendTaskSuccess", "states:SendTaskFailure", "xray:PutTraceSegments",
                        "xray:PutTelemetryRecords"}


def test_the_janitor_learns_what_to_clean_up_from_the_lock_value():
    """``lock=`` decides the janitor's item, queue and presence-row duties (no protocol flags):
    the same template as the deprecated flags spelled; a mutex needs neither queue nor rows."""
    import warnings

    from locked_workflow import Lock

    key = "{% $states.input.key %}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        flagged = {
            "fair": _janitor_template("J", fair=True)[0],
            "rows": _janitor_template("J", presence_rows=True)[0],
            "plain": _janitor_template("J")[0],
        }
    assert _janitor_template("J", lock=Lock.fair(key))[0] == flagged["fair"]
    assert _janitor_template("J", lock=Lock.exclusive(key))[0] == flagged["rows"]
    assert _janitor_template("J", lock=Lock.shared(key), detect_cancellation=False)[0] == flagged["plain"]
    assert _janitor_template("J", lock=Lock.mutex(key))[0] == flagged["plain"]
    assert flagged["fair"] != flagged["plain"] and flagged["rows"] != flagged["plain"]  # (the comparisons can fail)


def test_the_janitors_flags_are_deprecated_and_never_beside_a_lock_value():
    from locked_workflow import Lock

    with pytest.warns(DeprecationWarning, match="`fair` are deprecated"):
        _janitor_template("J", fair=True)
    with pytest.raises(ValueError, match="`lock` says what the janitor cleans up: leave out `fair`"):
        _janitor_template("J", lock=Lock.fair("{% $states.input.key %}"), fair=True)
    with pytest.raises(ValueError, match="`lock` must be a kind that holds its key"):
        _janitor_template("J", lock=Lock.rate("{% $states.input.key %}", limit=2))
    with pytest.raises(ValueError, match="`detect_cancellation` must be True or False, got: 'yes'"):
        _janitor_template("J", detect_cancellation="yes")


def test_janitor_finds_each_fair_queue_row_of_the_table_once():
    from locked_workflow.state_machines import fair_protocol as fair

    def park(table: str, key: str, owner: str, condition: str = fair.PARK.condition) -> p.ScheduledTask:
        return p.ScheduledTask("updateItem", {"TableName": table, "Key": {p.KEY_ATTRIBUTE: {"S": key}},
                                              "ConditionExpression": condition,
                                              "ExpressionAttributeValues": {":me": {"S": owner}}})

    tasks = [park("locks", "!1!k#1", "e#a"), park("locks", "!1!k#1", "e#a"),  # a park again
             park("other", "!2!k#2", "e#a"), park("locks", "k#3", "e#a", condition=fair.ENQUEUE.condition)]
    assert fair.enqueues_in_history(tasks, table_name="locks") == [("!1!k#1", "e#a")]
