"""What the constructs synthesize: states, conditions, Catch/release paths, retries, trigger, IAM."""

from __future__ import annotations

import json

import pytest

from aws_cdk.assertions import Capture, Match

from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines.lock_protocol import jsonata

MACHINE = "ApplyCustomerUpdatesStateMachine"
BRANCH_STATES = {"Lock.Acquire", "Lock.Held?", "Lock.Wait", "Lock.Timeout", "Lock.Release", "Lock.Lost",
                 "Lock.LeftReentered", "Lock.ReleaseAgain", "Lock.ReleasedBefore?", "Lock.Released", "Lock.ReleaseResumed?",
                 "Lock.ReleaseAfterError", "Lock.Rethrow", "Lock.Inspect", "Lock.HolderIsExecution?",
                 "Lock.DescribeHolder", "Lock.Reentered?", "Lock.PassThrough", "Lock.MayStillRun?", "Lock.Retire",
                 "Lock.ProbeHolder", "Lock.Abandoned",
                 # a shared hold of a read/write lock's readers on the key (kinds.shared_hold.shared_hold_sweep)
                 "Lock.ReapLastReader", "Lock.ReapReader", "Lock.FreeEmptyShared", "Lock.DescribeReader",
                 "Lock.ReaderEnded?", "Lock.RetireEndedReader"}
OUTER_STATES = {"Lock", "Lock.EntryFailed?", "Lock.InvalidKey", "Lock.Failed"}


def _catches(state: dict) -> dict[str, dict]:
    return {c["Next"]: c for c in state.get("Catch", [])}


def all_states(definition: dict) -> dict[str, dict]:
    """Every state, nested ones (Parallel branches, Map processors) included."""
    found = {}
    for name, state in definition["States"].items():
        found[name] = state
        for branch in state.get("Branches", []) + ([state["ItemProcessor"]] if "ItemProcessor" in state else []):
            found.update(all_states(branch))
    return found


def branch(definition: dict, section: str = "Lock") -> dict:
    (only,) = definition["States"][section]["Branches"]
    return only


def test_state_machine_is_one_section_whose_branch_holds_the_lock_states(example):
    definition = example.definition(MACHINE)
    assert definition["QueryLanguage"] == "JSONata"
    assert definition["StartAt"] == "Lock"
    assert set(definition["States"]) == OUTER_STATES
    section = definition["States"]["Lock"]
    assert section["Type"] == "Parallel" and section["Output"] == "{% $states.result[0] %}"
    assert set(branch(definition)["States"]) == BRANCH_STATES | {"Apply update"}
    assert branch(definition)["StartAt"] == "Lock.Acquire"
    assert definition["TimeoutSeconds"] == 30 * 60


def test_section_entry_validates_the_key_and_draws_one_owner_per_acquisition(example):
    section = example.definition(MACHINE)["States"]["Lock"]
    arguments = section["Arguments"]
    assert '"customer#" & $lockKey' in arguments and "$states.input.detail.customerId" in arguments
    assert "$states.context.Execution.Id & '#' & $uuid()" in arguments
    assert "'input': $states.input" in arguments
    assert "RedriveCount" not in arguments  # no redrive gate: a redrive reruns no work that succeeded
    (entry_failed,) = [c for c in section["Catch"]]
    assert entry_failed["ErrorEquals"] == [p.QUERY_EVALUATION_ERROR, p.SIGNAL_RESUMED]
    # the error and the section's own input travel on: a redriven run re-enters with that input
    assert entry_failed["Output"] == "{% $merge([$states.errorOutput, {'sectionInput': $states.input}]) %}"
    states = example.definition(MACHINE)["States"]
    choice = states["Lock.EntryFailed?"]
    assert [c["Next"] for c in choice["Choices"]] == ["Lock.InvalidKey", "Lock"]
    # a task of the work that refused to resume after a redrive: enter again, once a redrive
    assert choice["Choices"][1]["Condition"] == jsonata(p.resumed_again_expression("lockRedrives"))
    assert "lockRedrives" in choice["Choices"][1]["Assign"]
    assert choice["Choices"][1]["Output"] == "{% $states.input.sectionInput %}"
    assert states["Lock.InvalidKey"]["Error"] == p.ERROR_INVALID_KEY
    # the section's own expression never contains the signal names contiguously
    assert p.ERROR_INVALID_KEY not in arguments


def test_every_task_of_the_work_refuses_to_resume_without_the_lock(example):
    """A redrive resumes a branch at its unsuccessful step, past the acquire: the work's task
    evaluates the generation guard first (in its Arguments); the lock's own states do not."""
    states = branch(example.definition(MACHINE))["States"]
    guard = p.resumed_guard_expression("lock")
    work = states["Apply update"]
    guarded = [v for v in work["Arguments"].values() if isinstance(v, str) and guard in v]
    assert len(guarded) == 1 and guarded[0].startswith("{% ( " + guard + "; ")
    assert all(guard not in json.dumps(states[name]) for name in states if name.startswith("Lock."))
    # the acquisition records its generation, which the guard compares
    assert p.GENERATION in states["Lock.Acquire"]["Assign"]["lock"]


def test_work_that_may_still_run_retires_the_acquisition_instead_of_releasing_it(example):
    """A task that timed out (its invocation or worker runs on) or refused to resume after a
    redrive (the run before the stop may still be going): the lock stays held for the grace."""
    states = branch(example.definition(MACHINE))["States"]
    work = states["Apply update"]
    assert [c["ErrorEquals"] for c in work["Catch"]] == [
        [p.QUERY_EVALUATION_ERROR, "States.Timeout", "States.HeartbeatTimeout", "Sandbox.Timedout"], ["States.ALL"]]
    assert [c["Next"] for c in work["Catch"]] == ["Lock.MayStillRun?", "Lock.ReleaseAfterError"]
    in_flight = states["Lock.MayStillRun?"]
    assert in_flight["Choices"] == [{"Condition": jsonata(p.may_still_run_expression()), "Next": "Lock.Retire"}]
    assert in_flight["Default"] == "Lock.ReleaseAfterError"
    retire = states["Lock.Retire"]
    assert retire["Arguments"]["UpdateExpression"] == p.RETIRE.update
    assert retire["Arguments"]["ConditionExpression"] == p.RETIRE.condition
    assert retire["Next"] == "Lock.Rethrow"


@pytest.mark.parametrize("error, cause, retire", [
    ("States.Timeout", "", True), ("States.HeartbeatTimeout", "", True), ("Sandbox.Timedout", "", True),
    ("States.QueryEvaluationError", "... Lock.Resumed: the execution was redriven ...", True),
    ("States.QueryEvaluationError", "a user's own expression failed", False),
    ("States.TaskFailed", "", False), ("MyError", "Lock.Resumed: in a user's message", False),
])
def test_which_errors_mean_the_work_may_still_run(error, cause, retire):
    from locked_workflow.testing.patches.jsonata_evaluator import evaluate

    assert evaluate(p.may_still_run_expression(), {"states": {"input": {"Error": error, "Cause": cause}}}) is retire


def test_acquire_is_one_conditional_update_returning_the_fence(example):
    acquire = branch(example.definition(MACHINE))["States"]["Lock.Acquire"]
    assert acquire["Resource"].endswith(":states:::dynamodb:updateItem")
    arguments = acquire["Arguments"]
    assert arguments["UpdateExpression"] == p.ACQUIRE.update
    assert arguments["ConditionExpression"] == p.ACQUIRE.condition
    assert arguments["ReturnValues"] == "ALL_NEW"
    assert arguments["TableName"].startswith("REF:ApplyCustomerUpdatesLockTable")
    assert "$states.input.key" in arguments["Key"]["pk"]["S"]
    assert arguments["ExpressionAttributeValues"][":me"]["S"] == "{% $states.input.owner %}"
    # lease = timeout (30 min) + 5 min margin; grace = Lambda's 10 s Init + its 30 s timeout + 5 s
    assert f"$millis() + {35 * 60 * 1000}" in arguments["ExpressionAttributeValues"][":expiresAt"]["N"]
    assert arguments["ExpressionAttributeValues"][":grace"] == {"N": "{% $string($states.input.grace) %}"}
    assert "'grace': 45000" in example.definition(MACHINE)["States"]["Lock"]["Arguments"]
    assert set(acquire["Assign"]) == {"lock", "lockWait"}
    assert acquire["Output"] == "{% $states.input.input %}"


def test_acquire_routes_held_lock_to_wait_and_reentry_to_the_work(example):
    states = branch(example.definition(MACHINE))["States"]
    catches = _catches(states["Lock.Acquire"])
    assert catches["Lock.Held?"]["ErrorEquals"] == [p.CONDITION_FAILED]
    assert catches["Lock.Held?"]["Output"] == "{% $states.input %}"
    assert "lockWait" in catches["Lock.Held?"]["Assign"]
    # a query error is the re-entrancy signal - checked, so a fault never runs the work unlocked
    reentered = catches["Lock.Reentered?"]
    assert reentered["ErrorEquals"] == [p.QUERY_EVALUATION_ERROR]
    check = states["Lock.Reentered?"]
    assert p.SIGNAL_REENTERED in check["Choices"][0]["Condition"] and check["Default"] == "Lock.Rethrow"
    passing = states[check["Choices"][0]["Next"]]
    assert passing["Next"] == "Apply update"
    assert passing["Assign"]["lock"] == "{% " + p.reentered_lock_expression("$states.input.entry") + " %}"
    held = states["Lock.Held?"]
    assert held["Choices"][0]["Next"] == "Lock.Timeout"
    assert f">= {5 * 60 * 1000}" in held["Choices"][0]["Condition"]
    assert held["Choices"][1]["Next"] == "Lock.Inspect"
    assert held["Choices"][1]["Condition"] == "{% $lockWait.rounds % 2 = 0 %}"
    assert held["Default"] == "Lock.Wait"
    assert states["Lock.Wait"]["Next"] == "Lock.Acquire"
    assert "$random()" in states["Lock.Wait"]["Seconds"]
    assert states["Lock.Timeout"]["Error"] == p.ERROR_TIMEOUT


def test_held_lock_is_polled_by_jittered_retries_of_the_acquire_itself(example, shapes):
    (poll,) = [r for r in branch(example.definition(MACHINE))["States"]["Lock.Acquire"]["Retry"]
               if r["ErrorEquals"] == [p.CONDITION_FAILED]]
    policy = p.WaitPolicy()
    assert poll == {
        "ErrorEquals": [p.CONDITION_FAILED], "IntervalSeconds": policy.first_interval,
        "BackoffRate": policy.backoff_rate, "MaxDelaySeconds": policy.max_interval,
        "MaxAttempts": policy.retries_per_round, "JitterStrategy": "FULL",
    }
    # max_wait = 0 must not poll at all
    chain_acquire = branch(shapes.definition("Chain"))["States"]["Lock.Acquire"]
    assert all(r["ErrorEquals"] != [p.CONDITION_FAILED] for r in chain_acquire["Retry"])


def test_transient_errors_are_retried_with_backoff_on_every_lock_write(example):
    states = branch(example.definition(MACHINE))["States"]
    for name in ("Lock.Acquire", "Lock.ReleaseAgain", "Lock.ReleaseAfterError"):
        (retry,) = [r for r in states[name]["Retry"] if r["ErrorEquals"] != [p.CONDITION_FAILED]]
        assert set(retry["ErrorEquals"]) == set(p.TRANSIENT_ERRORS), name
        assert retry["BackoffRate"] > 1 and retry["MaxAttempts"] >= 3
        assert retry["JitterStrategy"] == "FULL"
    # the first release is not retried in place: a transient error moves to ReleaseAgain,
    # whose refusal is judged against the lease (a lost response is not a lost lock)
    assert "Retry" not in states["Lock.Release"]
    assert set(_catches(states["Lock.Release"])["Lock.ReleaseAgain"]["ErrorEquals"]) == set(p.TRANSIENT_ERRORS)
    assert _catches(states["Lock.ReleaseAgain"])["Lock.ReleasedBefore?"]["ErrorEquals"] == [p.CONDITION_FAILED]
    before = states["Lock.ReleasedBefore?"]
    assert before["Choices"][0]["Next"] == "Lock.Released" and before["Default"] == "Lock.Lost"
    assert "$lock.expiresAt" in before["Choices"][0]["Condition"]


def test_single_task_work_carries_the_release_catch_itself(example):
    states = branch(example.definition(MACHINE))["States"]
    work = states["Apply update"]
    assert work["Next"] == "Lock.Release"
    assert _catches(work)["Lock.ReleaseAfterError"]["ErrorEquals"] == ["States.ALL"]
    assert states["Lock.Acquire"]["Next"] == "Apply update"
    assert "$lock.fence" in work["Arguments"]["Payload"]["fence"]


def test_release_is_owner_conditioned_and_lost_lock_fails_typed(example):
    states = branch(example.definition(MACHINE))["States"]
    release = states["Lock.Release"]
    assert release["Arguments"]["UpdateExpression"] == p.RELEASE.update
    assert release["Arguments"]["ConditionExpression"] == p.RELEASE.condition
    assert "$lock.key" in release["Arguments"]["Key"]["pk"]["S"]
    assert release["End"] is True and release["Output"] == "{% $states.input %}"
    assert _catches(release)["Lock.ReleaseResumed?"]["ErrorEquals"] == [p.CONDITION_FAILED]
    assert _catches(release)["Lock.LeftReentered"]["ErrorEquals"] == [p.QUERY_EVALUATION_ERROR]
    # refused: Lock.Lost - unless a redrive resumed this release (its first run may have applied)
    resumed = states["Lock.ReleaseResumed?"]
    assert resumed["Choices"] == [{"Condition": jsonata(p.resumed_release_applied_expression("lock", "lockDone")),
                                   "Next": "Lock.Released"}]
    assert resumed["Default"] == "Lock.Lost" and states["Lock.Lost"]["Error"] == p.ERROR_LOST
    released_before = states["Lock.ReleasedBefore?"]
    assert released_before["Choices"][0]["Condition"] == jsonata(p.released_before_takeover_expression("lock", "lockDone"))
    # the work's end + the stop grace (Init 10 s + the Lambda's 30 s timeout + 5 s), assigned by the work's own state
    assert states["Apply update"]["Assign"]["lockDone"] == jsonata(p.work_done_expression(45_000))


def test_errors_release_then_rethrow_the_error_renaming_only_states_errors(example):
    states = branch(example.definition(MACHINE))["States"]
    after_error = states["Lock.ReleaseAfterError"]
    assert after_error["Arguments"]["ConditionExpression"] == p.RELEASE.condition
    assert after_error["Next"] == "Lock.Rethrow"
    lost_meanwhile = _catches(after_error)["Lock.Rethrow"]
    assert set(lost_meanwhile["ErrorEquals"]) == {p.CONDITION_FAILED, p.QUERY_EVALUATION_ERROR}
    assert lost_meanwhile["Output"] == "{% $states.input %}"  # keeps the original error
    assert states["Lock.Rethrow"] == {
        "Type": "Fail", "QueryLanguage": "JSONata", "Error": "{% " + p.rethrow_error_expression() + " %}",
        "Cause": "{% " + p.rethrow_cause_expression() + " %}",
    }


def test_chain_work_runs_in_one_branch_parallel_that_catches_everything(shapes):
    states = branch(shapes.definition("Chain"))["States"]
    protected = states["Lock.Protected"]
    assert protected["Type"] == "Parallel" and len(protected["Branches"]) == 1
    assert set(protected["Branches"][0]["States"]) == {"Prepare", "Finish"}
    assert protected["Output"] == "{% $states.result[0] %}"
    assert _catches(protected)["Lock.ReleaseAfterError"]["ErrorEquals"] == ["States.ALL"]
    # max_wait = 0: a held lock fails at once, no wait states exist
    assert _catches(states["Lock.Acquire"])["Lock.Timeout"]["ErrorEquals"] == [p.CONDITION_FAILED]
    assert "Lock.Wait" not in states and "Lock.Held?" not in states


def test_uncontended_run_adds_three_or_four_transitions(example, shapes):
    def success_path(definition):
        states, name, path = definition["States"], definition["StartAt"], []
        while name:
            path.append(name)
            if states[name]["Type"] == "Parallel" and name in ("Lock",):
                path += success_path(states[name]["Branches"][0])
            name = states[name].get("Next")
        return path

    assert success_path(example.definition(MACHINE)) == ["Lock", "Lock.Acquire", "Apply update", "Lock.Release"]
    assert success_path(shapes.definition("Chain")) == ["Lock", "Lock.Acquire", "Lock.Protected", "Lock.Release"]


def test_two_sections_in_one_machine_use_their_own_names_and_variables(shapes):
    definition = shapes.definition("TwoLocks")
    assert definition["States"]["Account"]["Next"] == "Order"
    states = all_states(definition)
    assert set(states["Order.Acquire"]["Assign"]) == {"orderLock", "orderLockWait"}
    assert "$orderLock.key" in states["Order.Release"]["Arguments"]["Key"]["pk"]["S"]
    assert '"account#"' in definition["States"]["Account"]["Arguments"]


def test_logging_and_tracing_are_on(example):
    example.assertions.has_resource_properties(
        "AWS::StepFunctions::StateMachine",
        {
            "TracingConfiguration": {"Enabled": True},
            "LoggingConfiguration": Match.object_like(
                {"Level": "ALL", "IncludeExecutionData": True}
            ),
        },
    )


def test_trigger_retries_caps_event_age_and_has_a_dead_letter_queue(example):
    machine = Capture()
    queue = Capture()
    example.assertions.has_resource_properties(
        "AWS::Events::Rule",
        {
            "EventBusName": {"Ref": Match.string_like_regexp("CustomerEvents")},
            "EventPattern": {"source": ["example.customers"], "detail-type": ["CustomerUpdateRequested"]},
            "Targets": [
                Match.object_like(
                    {
                        "Arn": {"Ref": machine},
                        "RetryPolicy": {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 86400},
                        "DeadLetterConfig": {"Arn": {"Fn::GetAtt": [queue, "Arn"]}},
                    }
                )
            ],
        },
    )
    assert example.template["Resources"][machine.as_string()]["Type"] == "AWS::StepFunctions::StateMachine"
    assert example.template["Resources"][queue.as_string()]["Type"] == "AWS::SQS::Queue"


def test_lock_table_keys_and_no_index(example):
    example.assertions.has_resource_properties(
        "AWS::DynamoDB::Table",
        {
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
            "BillingMode": "PAY_PER_REQUEST",
            "GlobalSecondaryIndexes": Match.absent(),
        },
    )
    # no TTL on lock items: the fence must never restart
    for table in example.resources("AWS::DynamoDB::Table").values():
        assert "TimeToLiveSpecification" not in table["Properties"]


def _statements(template: dict):
    for resource in template["Resources"].values():
        if resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::Role"):
            documents = [resource["Properties"].get("PolicyDocument")] + [
                p["PolicyDocument"] for p in resource["Properties"].get("Policies", [])
            ]
            for document in filter(None, documents):
                yield from document["Statement"]


def test_no_iam_statement_allows_a_wildcard_action(example, shapes):
    for template in (example.template, shapes.template):
        for statement in _statements(template):
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            assert not any(a == "*" or a.endswith(":*") for a in actions), statement


def test_lock_table_access_is_update_and_get_on_that_table_only(example):
    dynamodb = [
        s for s in _statements(example.template)
        if any(str(a).startswith("dynamodb:") for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]]))
    ]
    lock_table = next(k for k in example.resources("AWS::DynamoDB::Table") if "LockTable" in k)
    lock_statements = [s for s in dynamodb if lock_table in str(s["Resource"])]
    assert lock_statements, "the state machine must be allowed to write the lock table"
    for statement in lock_statements:
        assert statement["Action"] in {"dynamodb:UpdateItem", "dynamodb:GetItem"}
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        assert len(resources) == 1
        (arn,) = resources
        assert arn["Fn::Join"][1][-2:] == [":table/", {"Ref": lock_table}], arn  # nothing wider
    assert {s["Action"] for s in lock_statements} == {"dynamodb:UpdateItem", "dynamodb:GetItem"}


def test_liveness_check_takes_over_only_from_an_ended_execution_after_its_grace(example):
    states = branch(example.definition(MACHINE))["States"]
    inspect = states["Lock.Inspect"]
    assert inspect["Resource"].endswith(":states:::dynamodb:getItem")
    assert inspect["Arguments"]["ConsistentRead"] is True
    # the whole lock item (a lock table's: at most MAX_READERS reader entries of a read/write
    # lock's shared hold, whose names no projection can list; a lock on a record projects)
    assert "ProjectionExpression" not in inspect["Arguments"]
    assert "'shared':" in inspect["Assign"]["lockHolder"]
    assert inspect["Next"] == "Lock.HolderIsExecution?"
    assert _catches(inspect)["Lock.Wait"]["ErrorEquals"] == ["States.ALL"]  # waiting never fails on it
    is_execution = states["Lock.HolderIsExecution?"]
    # a shared hold whose readers are gone is freed (reaped, an empty one freed, an ended
    # reader retired); a holder's presence token is probed first; a closed one retires its acquisition
    assert [c["Next"] for c in is_execution["Choices"]] == [
        "Lock.ReapLastReader", "Lock.ReapReader", "Lock.FreeEmptyShared", "Lock.DescribeReader",
        "Lock.ProbeHolder", "Lock.DescribeHolder"]
    from locked_workflow.state_machines import shared_protocol as sp

    for name, write in (("Lock.ReapLastReader", sp.REAP_LAST), ("Lock.ReapReader", sp.REAP_READ),
                        ("Lock.FreeEmptyShared", sp.FREE_EMPTY), ("Lock.RetireEndedReader", sp.RETIRE_READER)):
        assert states[name]["Arguments"]["ConditionExpression"] == write.condition, name
        assert states[name]["Next"] == "Lock.Wait" and _catches(states[name])["Lock.Wait"]["ErrorEquals"] == ["States.ALL"]
    assert is_execution["Default"] == "Lock.Wait"
    probe = states["Lock.ProbeHolder"]
    assert probe["Resource"].endswith(":states:::aws-sdk:sfn:sendTaskHeartbeat") and probe["Next"] == "Lock.Wait"
    assert [(c["ErrorEquals"], c["Next"]) for c in probe["Catch"]] == [
        ([p.PRESENCE_GONE], "Lock.Abandoned"), (["States.ALL"], "Lock.DescribeHolder")]
    assert states["Lock.Abandoned"]["Arguments"]["ConditionExpression"] == p.ABANDONED.condition
    describe = states["Lock.DescribeHolder"]
    assert describe["Resource"].endswith(":states:::aws-sdk:sfn:describeExecution")
    assert describe["Arguments"] == {"ExecutionArn": "{% $substringBefore($lockHolder.owner, '#') %}"}
    assert "'PENDING_REDRIVE'" in describe["Assign"]["lockWait"] and "grace" in describe["Assign"]["lockWait"]
    assert describe["Next"] == "Lock.Wait"  # every round lets time pass: the history bound holds
    assert _catches(describe)["Lock.Wait"]["ErrorEquals"] == ["States.ALL"]
    # the takeover is the acquire itself, conditioned on that exact (stale) owner
    stale = states["Lock.Acquire"]["Arguments"]["ExpressionAttributeValues"][":stale"]["S"]
    assert "$lockWait.stale" in stale and "#owner IN (:me, :stale)" in p.ACQUIRE.condition


def test_liveness_check_may_describe_only_this_machines_executions(example):
    statements = [s for s in _statements(example.template) if "states:DescribeExecution" in str(s["Action"])]
    assert len(statements) == 1
    (resource,) = [statements[0]["Resource"]]
    parts = resource["Fn::Join"][1]
    assert parts[-1].startswith(":execution:CustomerUpdates-ApplyCustomerUpdates") and parts[-1].endswith(":*")
