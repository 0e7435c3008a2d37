"""Stale-holder recovery, Python interop and fencing under pauses, on both DynamoDB backends.

Recovery times are reported in wait intervals (the test wait policy's max_interval, 2 s)
through ``record_property`` so the closing notes can quote them.

A holder whose execution ended without releasing keeps the lock for its stop grace after the
end (its Lambda invocation may still run): the janitor *retires* the acquisition (``expiresAt``
= stop time + grace) and the liveness check takes over only once the grace has passed. The
behaviour stack sets its sections' grace to 8 s (``behaviour_stack.STOP_GRACE_S``).
"""

from __future__ import annotations

import json
import random
import time
import uuid
from contextlib import contextmanager

import pytest

from behaviour_stack import SHORT_LEASE_S, SHORT_TIMEOUT_S, STOP_GRACE_S, TEST_WAIT_POLICY
from locked_workflow.constructs_lib.lock_client import LockHeld
from deployed import new_key, start, update, wait_until
from template_iam import actions, role_statements
from lock_invariants import state_entered
from locked_workflow.state_machines import lock_protocol as p

INTERVAL_S = TEST_WAIT_POLICY.max_interval
#: Stop grace of every behaviour-stack section (given explicitly: see behaviour_stack).
GRACE_S = STOP_GRACE_S
GRACE_MS = GRACE_S * 1000


def _holder(deployed, namespace: str, key: str) -> str | None:
    """The execution holding the lock (None when free or held by a client)."""
    return p.owner_execution(deployed.lock_item(namespace, key).get(p.OWNER, {}).get("S"))


def _held_by(deployed, namespace: str, key: str, execution: str):
    return lambda: _holder(deployed, namespace, key) == execution


def _acquired_at(result) -> float:
    """When the execution's acquire succeeded (service clock, seconds)."""
    exits = [
        e["timestamp"].timestamp()
        for e in result.history
        if e["type"] == "TaskStateExited" and e["stateExitedEventDetails"]["name"] == "Lock.Acquire"
    ]
    return exits[-1]


def _status_event(events, execution: str) -> dict:
    """The status event (emitted or dropped) of an ended execution: what the janitor reads."""
    (detail,) = [d for d in events if d["executionArn"] == execution]
    return detail


def _acquisition_held_by(deployed, namespace: str, key: str, execution: str) -> dict:
    """Wait until ``execution`` holds the lock; its lock item, checked for its owner and grace."""
    wait_until(_held_by(deployed, namespace, key, execution))
    item = deployed.lock_item(namespace, key)
    owner = item[p.OWNER]["S"]
    assert owner.startswith(execution + p.OWNER_SEPARATOR) and len(owner) > len(execution) + 1
    assert item[p.GRACE] == {"N": str(GRACE_MS)}, "the acquisition records its stop grace"
    return item


def _wait_for_retire(deployed, namespace: str, key: str, expires_at: str, timeout: float) -> float:
    """Wait until the lock's ``expiresAt`` is ``expires_at``; when it first was (time.time())."""
    try:
        return wait_until(
            lambda: deployed.lock_item(namespace, key).get(p.EXPIRES_AT, {}).get("N") == expires_at,
            timeout=timeout,
        )
    except AssertionError:
        raise AssertionError(
            f"expiresAt not {expires_at} (stop + grace) within {timeout} s - not retired? "
            f"item: {deployed.lock_item(namespace, key)}"
        ) from None


_last_waiter: list = []  # the waiter of the last _stop_holder_and_measure


def _stop_holder_and_measure(deployed, key: str, record_property, label: str, *, retired: bool):
    """Stop a holder while another run waits; the waiter's recovery time (s) after the stop.

    During the grace the lock must stay the stopped holder's - retired by the janitor
    (``retired``) or untouched (no janitor event) - and the waiter must still wait.
    """
    holder = start(deployed, "Main", update(key, work_ms=15_000))
    held = _acquisition_held_by(deployed, "main", key, holder)
    waiter = start(deployed, "Main", update(key))
    time.sleep(1.0)  # the waiter is now polling
    deployed.cloud.stop_execution(holder, error="Operator.Stop", cause="stopped while holding the lock")
    assert deployed.cloud.wait_for(holder).status == "ABORTED"
    events = deployed.cloud.events.status_events if retired else deployed.cloud.events.dropped_status_events
    wait_until(lambda: any(d["executionArn"] == holder for d in events), timeout=5)
    stopped_ms = _status_event(events, holder)["stopDate"]  # what the janitor reads

    # Within the grace: still the holder's lock, and the waiter still waits. (The janitor is a
    # Lambda invocation: on a loaded machine it may retire late in the grace, so it gets all but
    # the last 1.5 s of it; the look inside the grace counts only when its reads ended in it.)
    expected_expiry = str(stopped_ms + GRACE_MS) if retired else held[p.EXPIRES_AT]["N"]
    _wait_for_retire(deployed, "main", key, expected_expiry,
                     timeout=max(1.0, stopped_ms / 1000 + GRACE_S - 1.5 - time.time()))
    mid_grace_s = stopped_ms / 1000 + GRACE_S / 2
    time.sleep(max(0.0, mid_grace_s - time.time()))
    during, waiting = deployed.lock_item("main", key), deployed.cloud.status(waiter)
    if time.time() < stopped_ms / 1000 + GRACE_S:
        assert (during.get(p.OWNER), during.get(p.FENCE)) == (held[p.OWNER], held[p.FENCE]), "freed inside the grace"
        assert during.get(p.EXPIRES_AT) == {"N": expected_expiry}
        assert waiting == "RUNNING"

    result = deployed.cloud.wait_for(waiter, timeout=90)
    _last_waiter[:] = [waiter]
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    recovery_s = _acquired_at(result) - stopped_ms / 1000
    record_property(f"{label}_recovery_intervals", round(recovery_s / INTERVAL_S, 2))
    record_property(f"{label}_recovery_after_grace_s", round(recovery_s - GRACE_S, 2))
    assert recovery_s >= GRACE_S, f"took over {recovery_s:.1f} s after the stop, inside the grace"
    assert deployed.customer(key)["lastFence"] == 2  # the waiter's fenced write went through
    return recovery_s


def test_janitor_retires_the_lock_of_a_stopped_execution_after_its_grace(deployed, record_property):
    # The janitor needs no index on the table: it reads the stopped execution's history.
    table = deployed.cloud.dynamodb.describe_table(TableName=deployed.locks_table)["Table"]
    assert table.get("GlobalSecondaryIndexes", []) == []
    key = new_key("stopped")
    recovery_s = _stop_holder_and_measure(deployed, key, record_property, "janitor", retired=True)
    # once the retired lease ends, the waiter's next poll takes the lock
    assert recovery_s <= GRACE_S + 2 * INTERVAL_S + 5, f"took {recovery_s:.1f} s"  # (a loaded machine is late)


def _step_functions_only(deployed) -> None:
    """The case is Step Functions behaviour (an execution's end, its history, DescribeExecution):
    the writes it makes are checked on both backends by the other cases."""
    if deployed.cloud.backend != "moto":
        pytest.skip("Step Functions behaviour: one backend suffices")


def test_liveness_check_recovers_after_the_grace_when_the_janitor_event_is_dropped(deployed, record_property):
    _step_functions_only(deployed)
    key = new_key("dropped")
    deployed.cloud.events.emit_status_events = False
    try:
        recovery_s = _stop_holder_and_measure(deployed, key, record_property, "liveness", retired=False)
    finally:
        deployed.cloud.events.emit_status_events = True
    # the waiter asks Step Functions every 2nd round of polls, and takes over at the first check
    # that finds the grace over (not by the lease): counted in its own history, not in seconds
    # (a loaded machine stretches every round)
    assert recovery_s >= GRACE_S
    history = deployed.cloud.stepfunctions.get_execution_history(
        executionArn=_last_waiter[0], maxResults=1000)["events"]
    checks = [e for e in history if e["type"] == "TaskStateExited"
              and e["stateExitedEventDetails"]["name"] == "Lock.DescribeHolder"]
    stale = [e for e in checks if '"stale":"arn:' in e["stateExitedEventDetails"].get("assignedVariables", {}).get("lockWait", "")]
    assert stale, "no liveness check found the holder ended"
    acquired = [e for e in history if e["type"] == "TaskStateExited"
                and e["stateExitedEventDetails"]["name"] == "Lock.Acquire"][-1]
    after_stale = [e for e in history if stale[0]["id"] < e["id"] < acquired["id"] and e["type"].endswith("StateEntered")]
    assert [e["stateEnteredEventDetails"]["name"] for e in after_stale] == ["Lock.Wait", "Lock.Acquire"]


def test_negative_control_without_janitor_or_liveness_the_lock_stays_held(deployed):
    """Stopped holder, no event, no liveness check (NoWait has max_wait 0): still locked after
    the grace, with its lease untouched."""
    key = new_key("leaked")
    deployed.cloud.events.emit_status_events = False
    try:
        holder = start(deployed, "NoWait", update(key, work_ms=15_000))
        held = _acquisition_held_by(deployed, "nowait", key, holder)
        deployed.cloud.stop_execution(holder)
        stopped = deployed.cloud.wait_for(holder)
        assert stopped.status == "ABORTED"
        time.sleep(max(0.0, stopped.stop_date.timestamp() + GRACE_S + 1 - time.time()))  # past the grace
        (result,) = deployed.run("NoWait", [update(key)])
    finally:
        deployed.cloud.events.emit_status_events = True
    assert result.error == p.ERROR_TIMEOUT
    assert deployed.lock_item("nowait", key) == held  # same acquisition, lease not retired


def test_state_machine_timeout_while_holding_is_retired_and_recovered_after_the_grace(
    deployed, record_property
):
    _step_functions_only(deployed)
    key = new_key("timedout")
    holder = start(deployed, "ShortTimeout", update(key, work_ms=(SHORT_TIMEOUT_S + 5) * 1000))
    held = _acquisition_held_by(deployed, "shorttimeout", key, holder)
    assert deployed.cloud.wait_for(holder, timeout=SHORT_TIMEOUT_S + 10).status == "TIMED_OUT"
    wait_until(lambda: any(d["executionArn"] == holder for d in deployed.cloud.events.status_events), timeout=5)
    ended_ms = _status_event(deployed.cloud.events.status_events, holder)["stopDate"]

    retire_end = str(ended_ms + GRACE_MS)
    retired_at = _wait_for_retire(deployed, "shorttimeout", key, retire_end, timeout=GRACE_S / 2)
    record_property("timeout_retire_s", round(retired_at - ended_ms / 1000, 2))
    retired = deployed.lock_item("shorttimeout", key)
    assert (retired[p.OWNER], retired[p.FENCE]) == (held[p.OWNER], held[p.FENCE])  # not released
    # Within the grace the lock is still held: a client is refused until the retired lease ends.
    assert time.time() < ended_ms / 1000 + GRACE_S - 1, "too late to look inside the grace"
    with pytest.raises(LockHeld) as refused:
        deployed.client("shorttimeout").acquire(key, lease=10)
    assert p.owner_execution(refused.value.holder) == holder
    assert refused.value.expires_at == ended_ms + GRACE_MS

    time.sleep(max(0.0, ended_ms / 1000 + GRACE_S + 0.1 - time.time()))  # the grace is over
    # then anyone takes it over (a client here: a run of this machine, whose own timeout is short
    # by design, could time out on a loaded machine) - a client as soon as AWS's clock, which it
    # knows to the second from DynamoDB's Date header, is surely past the lease
    lease = deployed.client("shorttimeout").acquire(key, lease=10, wait=5)
    assert lease.acquired_at > ended_ms + GRACE_MS
    assert lease.fence == 2 and deployed.lock_item("shorttimeout", key)[p.FENCE] == {"N": "2"}
    deployed.client("shorttimeout").release(lease)


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

# ---- Python participants --------------------------------------------------------------------


def test_python_holder_blocks_a_workflow_until_it_releases(deployed):
    key = new_key("py-first")
    client = deployed.client("main")
    lease = client.acquire(key, lease=60)
    assert lease.owner.startswith(client.owner + p.OWNER_SEPARATOR)
    waiter = start(deployed, "Main", update(key))
    time.sleep(2.5)
    assert deployed.cloud.status(waiter) == "RUNNING"
    assert "customerId" not in deployed.customer(key)
    client.release(lease)
    result = deployed.cloud.wait_for(waiter, timeout=30)
    assert result.status == "SUCCEEDED"
    assert deployed.customer(key)["lastFence"] == lease.fence + 1


def test_workflow_holder_blocks_a_python_client_until_it_releases(deployed):
    key = new_key("wf-first")
    holder = start(deployed, "Main", update(key, work_ms=3_000))
    wait_until(_held_by(deployed, "main", key, holder))
    client = deployed.client("main")
    with pytest.raises(LockHeld) as held:
        client.acquire(key, lease=10)
    assert p.owner_execution(held.value.holder) == holder
    assert held.value.holder == deployed.lock_item("main", key)[p.OWNER]["S"]
    lease = client.acquire(key, lease=10, wait=20)  # waits for the workflow's release
    returned = time.time()
    result = deployed.cloud.wait_for(holder, timeout=10)  # (it ends a moment after releasing)
    assert result.status == "SUCCEEDED"
    (released,) = [e["timestamp"].timestamp() for e in result.history if e["type"] == "TaskSucceeded"
                   and e["taskSucceededEventDetails"]["resource"] == "updateItem"
                   and p.FENCE not in json.loads(e["taskSucceededEventDetails"]["output"]).get("Attributes", {})]
    # the client got it only after the release: the release's success came before the acquire
    # returned (both on this machine's clock - not the client's estimate of AWS's clock, whose
    # stamps may lie a Date header's second either way), and its fence is the next one
    assert released <= returned
    assert lease.fence == 2
    client.release(lease)


# ---- fencing under pauses -------------------------------------------------------------------


def _pause_load(key: str, seed: int) -> list[dict]:
    """Runs whose work sometimes pauses well past the lease (zombies), in random order."""
    rng = random.Random(seed)
    runs = [update(key, work_ms=(SHORT_LEASE_S + 4) * 1000) for _ in range(2)]
    runs += [update(key, work_ms=rng.randint(0, 300)) for _ in range(5)]
    rng.shuffle(runs)
    return runs


def _accepted_writes(results) -> int:
    return sum(
        1
        for r in results
        for e in r.history
        if e["type"] == "TaskSucceeded" and e["taskSucceededEventDetails"].get("resourceType") == "lambda"
    )


def test_fenced_counter_loses_no_update_under_pauses_past_the_lease(deployed):
    key = new_key("fenced")
    results = deployed.run("ShortLease", _pause_load(key, seed=7), stagger_s=0.2)
    rejected = sum("Write rejected" in state_entered(r) for r in results)
    accepted = _accepted_writes(results)
    assert rejected >= 1, "no zombie write happened: the scenario did not pause past the lease"
    assert deployed.customer(key)["updates"] == accepted  # every accepted write counts
    assert accepted + rejected == len(results)


def test_negative_control_unfenced_counter_loses_updates_under_the_same_pauses(deployed):
    key = new_key("unfenced")
    results = deployed.run("ShortLeaseUnfenced", _pause_load(key, seed=7), stagger_s=0.2)
    accepted = _accepted_writes(results)
    assert accepted == len(results)  # nothing rejects a zombie's write...
    assert deployed.customer(key)["updates"] < accepted  # ...so a taken-over holder overwrote one
    assert any(r.error == p.ERROR_LOST for r in results)


def test_janitor_finds_each_fair_queue_row_of_the_table_once():
    from locked_workflow.state_machines import fair_protocol as fair

    def park(table: str, key: str, owner: str, condition: str = fair.PARK.condition) -> p.ScheduledTask:
        return p.ScheduledTask("updateItem", {"TableName": table, "Key": {p.KEY_ATTRIBUTE: {"S": key}},
                                              "ConditionExpression": condition,
                                              "ExpressionAttributeValues": {":me": {"S": owner}}})

    tasks = [park("locks", "!1!k#1", "e#a"), park("locks", "!1!k#1", "e#a"),  # a park again
             park("other", "!2!k#2", "e#a"), park("locks", "k#3", "e#a", condition=fair.ENQUEUE.condition)]
    assert fair.enqueues_in_history(tasks, table_name="locks") == [("!1!k#1", "e#a")]
