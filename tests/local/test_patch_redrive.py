"""Fix ``patches/redrive``: RedriveExecution continues an ended execution under its ARN, as
Step Functions documents it: only the unsuccessful steps run again, down to the failed (or
cut-short) step inside a Parallel branch or an Inline Map iteration."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.exceptions import ClientError

from locked_workflow.testing import LocalCloud
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end, wait_until

COUNTERS = "counters"
FIRST_RUN = "$states.context.Execution.RedriveCount = 0"


def count(name: str, next_state: str | None = None, key: str = "'{name}'") -> dict:
    """A Task adding 1 to the counter item ``key`` (JSONata), passing its input on."""
    return {
        "Type": "Task", "Resource": "arn:aws:states:::dynamodb:updateItem",
        "Arguments": {"TableName": COUNTERS, "Key": {"pk": {"S": "{% " + key.format(name=name) + " %}"}},
                      "UpdateExpression": "ADD n :one", "ExpressionAttributeValues": {":one": {"N": "1"}}},
        "Output": "{% $states.input %}",
        **({"Next": next_state} if next_state else {"End": True}),
    }


def flaky(output: str = "$states.input", condition: str = FIRST_RUN) -> dict:
    """A Pass that fails while ``condition`` holds (by default: in the first run only)."""
    return {"Type": "Pass", "Output": "{% " + condition + " ? $error('Flaky.Broken: first run') : " + output + " %}",
            "End": True}


def park(next_state: str | None = None) -> dict:
    """A Task that writes its task token to the item ``park`` and waits; passes its input on."""
    return {
        "Type": "Task", "Resource": "arn:aws:states:::aws-sdk:dynamodb:putItem.waitForTaskToken",
        "Arguments": {"TableName": COUNTERS,
                      "Item": {"pk": {"S": "park"}, "token": {"S": "{% $states.context.Task.Token %}"}}},
        "Output": "{% $states.input %}",
        **({"Next": next_state} if next_state else {"End": True}),
    }


def machine(start: str, states: dict) -> dict:
    return {"QueryLanguage": "JSONata", "StartAt": start, "States": states}


def branch(start: str, states: dict) -> dict:
    """A Parallel branch or Map item processor (the language is the state machine's)."""
    return {"StartAt": start, "States": states}


#: Prepare (a Pass) runs once; Work fails in the first run and succeeds once redriven.
FLAKY = machine("Prepare", {
    "Prepare": {"Type": "Pass", "Assign": {"prepared": "{% $states.input.n %}"}, "Next": "Work"},
    "Work": flaky("{'prepared': $prepared, 'redrives': $states.context.Execution.RedriveCount}"),
})
#: Branch 0 counts, assigns, parks (until branch 1 is done), then fails (first run); branch 1 counts.
PARALLEL = machine("Section", {
    "Section": {
        "Type": "Parallel", "End": True,
        "Branches": [
            branch("CountA", {"CountA": {**count("a", "ParkA"), "Assign": {"seen": "{% $states.input.n %}"}},
                              "ParkA": park("Flaky"),
                              "Flaky": flaky("{'seen': $seen, 'redrives': $states.context.Execution.RedriveCount}")}),
            branch("CountB", {"CountB": count("b")}),
        ],
    },
})
#: A branch counts, then parks.
PARKED = machine("Section", {
    "Section": {"Type": "Parallel", "End": True,
                "Branches": [branch("Count", {"Count": count("parked", "Park"), "Park": park()})]},
})
#: Each of 3 items, one at a time, counts itself; item 3's check fails in the first run.
MAPPED = machine("Each", {
    "Each": {
        "Type": "Map", "Items": "{% $states.input.items %}", "MaxConcurrency": 1, "End": True,
        "ItemProcessor": {"ProcessorConfig": {"Mode": "INLINE"}, **branch("CountItem", {
            "CountItem": count("item", "Check", key="'item' & $string($states.input)"),
            "Check": flaky("$states.input * 10", condition=f"{FIRST_RUN} and $states.input = 3"),
        })},
    },
})
#: Outer [Inner [X, Y (parks until X and Z are done, then fails once)], Z].
NESTED = machine("Outer", {
    "Outer": {
        "Type": "Parallel", "End": True,
        "Branches": [
            branch("Inner", {"Inner": {"Type": "Parallel", "End": True, "Branches": [
                branch("CountX", {"CountX": count("x")}),
                branch("CountY", {"CountY": count("y", "ParkY"), "ParkY": park("FlakyY"), "FlakyY": flaky()}),
            ]}}),
            branch("CountZ", {"CountZ": count("z")}),
        ],
    },
})
#: The Parallel's Arguments draw a fresh uuid; branch 1 parks at its first step (the test fails it).
UUID_ARGUMENTS = machine("Section", {
    "Section": {
        "Type": "Parallel", "End": True, "Arguments": "{% {'id': $uuid()} %}",
        "Branches": [branch("Echo", {"Echo": {"Type": "Pass", "End": True}}), branch("Gate", {"Gate": park()})],
    },
})
#: A branch's Task fails on every attempt (no such table), retried once.
RETRIED = machine("Section", {
    "Section": {
        "Type": "Parallel", "End": True,
        "Branches": [branch("Read", {"Read": {
            "Type": "Task", "Resource": "arn:aws:states:::dynamodb:getItem", "End": True,
            "Arguments": {"TableName": "no-such-table", "Key": {"pk": {"S": "k"}}},
            "Retry": [{"ErrorEquals": ["States.ALL"], "MaxAttempts": 1, "IntervalSeconds": 1}],
        }})],
    },
})
#: Branch outputs too large together in the first run: the Parallel fails with DataLimitExceeded.
OVERSIZED = machine("Section", {
    "Section": {
        "Type": "Parallel", "End": True,
        "Branches": [branch(f"Big{i}", {f"Big{i}": {
            "Type": "Pass", "End": True,
            "Output": "{% $pad('', " + FIRST_RUN + " ? 150000 : 10, 'x') %}"}}) for i in (0, 1)],
    },
})


@pytest.fixture(scope="module")
def shared_cloud():
    """One cloud for the module's runtime tests (the bare-moto test, first, runs without it)."""
    with LocalCloud() as cloud:
        cloud.dynamodb.create_table(
            TableName=COUNTERS, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
        yield cloud


@pytest.fixture
def cloud(shared_cloud):
    """The shared cloud with empty counters and the default redrive options."""
    for item in shared_cloud.dynamodb.scan(TableName=COUNTERS)["Items"]:
        shared_cloud.dynamodb.delete_item(TableName=COUNTERS, Key={"pk": item["pk"]})
    shared_cloud.redrive_options.reevaluates_arguments = False
    shared_cloud.redrive_options.restores_variables = True
    return shared_cloud


def counters(cloud) -> dict[str, int]:
    items = cloud.dynamodb.scan(TableName=COUNTERS, ConsistentRead=True)["Items"]
    return {i["pk"]["S"]: int(i["n"]["N"]) for i in items if "n" in i}


def parked_token(cloud) -> str:
    """The token of the Task parked now (its item is removed: the next park writes a new one)."""
    item = wait_until(lambda: cloud.dynamodb.get_item(TableName=COUNTERS, Key={"pk": {"S": "park"}}).get("Item"))
    assert item, "nothing parked"
    cloud.dynamodb.delete_item(TableName=COUNTERS, Key={"pk": {"S": "park"}})
    return item["token"]["S"]


def wait_exited(cloud, arn: str, *names: str) -> None:
    """Wait until the states ``names`` have exited (the siblings of a branch about to fail)."""
    def done() -> bool:
        history = cloud.history(arn)
        return {e["stateExitedEventDetails"]["name"] for e in history if e["type"].endswith("StateExited")} >= set(names)

    assert wait_until(done, timeout=30), f"{names} did not exit"


def unpark_after(*names: str):
    """A ``before_failure``: once ``names`` have exited, the parked Task goes on (to the failure)."""
    def unpark(cloud, arn: str) -> None:
        wait_exited(cloud, arn, *names)
        cloud.stepfunctions.send_task_success(taskToken=parked_token(cloud), output="{}")

    return unpark


def fail_then_redrive(cloud, definition: dict, document: dict | None = None, name: str = "m", *,
                      before_failure=None, after_redrive=None):
    """Run ``definition`` (it must fail), redrive it; the first result and the redriven one."""
    arn = cloud.start_execution(create_state_machine(definition, name=name), document or {})
    if before_failure:
        before_failure(cloud, arn)
    first = cloud.wait_for(arn)
    assert first.status == "FAILED", first
    cloud.stepfunctions.redrive_execution(executionArn=arn)
    if after_redrive:
        after_redrive(cloud, arn)
    return first, cloud.wait_for(arn, timeout=30)


def entered(history: list[dict], after_redrive: bool = False) -> list[str]:
    """Names of the states entered (only those after the last ExecutionRedriven if asked)."""
    if after_redrive:
        last = max(i for i, e in enumerate(history) if e["type"] == "ExecutionRedriven")
        history = history[last:]
    return [e["stateEnteredEventDetails"]["name"] for e in history if e["type"].endswith("StateEntered")]


def test_bare_moto_cannot_redrive():
    with bare_moto():
        sfn = boto3.client("stepfunctions", region_name=REGION)
        arn = sfn.start_execution(stateMachineArn=create_state_machine({
            "StartAt": "F", "States": {"F": {"Type": "Fail", "Error": "E"}}}), name="x")["executionArn"]
        wait_for_end(arn)
        with pytest.raises(Exception):
            sfn.redrive_execution(executionArn=arn)


def test_a_failed_execution_continues_from_its_failed_state_with_its_variables(cloud):
    first, again = fail_then_redrive(cloud, FLAKY, {"n": 7}, name="flaky")
    description = cloud.describe(again.arn)
    assert "Flaky.Broken: first run" in first.cause
    assert again.status == "SUCCEEDED" and again.output == {"prepared": 7, "redrives": 1}
    assert entered(again.history) == ["Prepare", "Work", "Work"]  # the successful step is not run again
    types = [e["type"] for e in again.history]
    assert types.index("ExecutionRedriven") > types.index("ExecutionFailed")
    redriven = next(e for e in again.history if e["type"] == "ExecutionRedriven")
    assert redriven["executionRedrivenEventDetails"]["redriveCount"] == 1
    assert description["redriveCount"] == 1 and "redriveDate" in description
    assert description["redriveStatus"] == "NOT_REDRIVABLE"


def test_a_parallel_reruns_only_its_failed_branch_from_its_failed_step(cloud):
    first, again = fail_then_redrive(cloud, PARALLEL, {"n": 3}, name="parallel",
                                     before_failure=unpark_after("CountB"))
    assert again.status == "SUCCEEDED", (again.error, again.cause)
    # branch 0 resumes at Flaky with its variable; branch 1 keeps its first run's output
    assert again.output == [{"seen": 3, "redrives": 1}, {"n": 3}]
    assert entered(again.history, after_redrive=True) == ["Section", "Flaky"]
    assert counters(cloud) == {"a": 1, "b": 1}  # the succeeded steps ran once


def test_variables_can_be_lost_instead_of_restored(cloud):
    cloud.redrive_options.restores_variables = False
    first, again = fail_then_redrive(cloud, PARALLEL, {"n": 3}, name="forgetful",
                                     before_failure=unpark_after("CountB"))
    assert again.status == "SUCCEEDED" and again.output == [{"redrives": 1}, {"n": 3}]  # no $seen: left out


def test_a_task_stopped_inside_a_branch_is_started_again_not_its_branch(cloud):
    arn = cloud.start_execution(create_state_machine(PARKED, name="parked"), {})
    stale = parked_token(cloud)
    cloud.stop_execution(arn)
    assert cloud.wait_for(arn).status == "ABORTED"
    cloud.stepfunctions.redrive_execution(executionArn=arn)
    token = parked_token(cloud)  # Park ran again: a new token
    cloud.stepfunctions.send_task_success(taskToken=token, output=json.dumps({"woken": True}))
    again = cloud.wait_for(arn, timeout=30)
    assert token != stale
    assert again.status == "SUCCEEDED" and again.output == [{}]
    assert entered(again.history, after_redrive=True) == ["Section", "Park"]
    assert counters(cloud) == {"parked": 1}
    ends = [e for e in cloud.events.status_events if e["executionArn"] == arn]
    assert [(e["status"], e["redriveCount"]) for e in ends] == [("ABORTED", 0), ("SUCCEEDED", 1)]


def test_an_inline_map_reruns_only_its_failed_iteration(cloud):
    first, again = fail_then_redrive(cloud, MAPPED, {"items": [1, 2, 3]}, name="mapped")
    assert again.status == "SUCCEEDED" and again.output == [10, 20, 30]
    assert entered(again.history, after_redrive=True) == ["Each", "Check"]
    started = [e["mapIterationStartedEventDetails"]["index"] for e in again.history[len(first.history):]
               if e["type"] == "MapIterationStarted"]
    assert started == [2]
    assert counters(cloud) == {"item1": 1, "item2": 1, "item3": 1}


def test_nested_parallels_rerun_only_the_failed_inner_branch(cloud):
    first, again = fail_then_redrive(cloud, NESTED, {"v": 1}, name="nested",
                                     before_failure=unpark_after("CountX", "CountZ"))
    assert again.status == "SUCCEEDED" and again.output == [[{"v": 1}, {"v": 1}], {"v": 1}]
    assert entered(again.history, after_redrive=True) == ["Outer", "Inner", "FlakyY"]
    assert counters(cloud) == {"x": 1, "y": 1, "z": 1}


@pytest.mark.parametrize("reevaluates", [False, True])
def test_a_redriven_parallel_evaluates_its_arguments_again_only_when_asked(cloud, reevaluates):
    cloud.redrive_options.reevaluates_arguments = reevaluates

    def close_gate(cloud, arn):
        wait_exited(cloud, arn, "Echo")
        cloud.stepfunctions.send_task_failure(taskToken=parked_token(cloud), error="Gate.Closed")

    def open_gate(cloud, arn):
        cloud.stepfunctions.send_task_success(taskToken=parked_token(cloud), output="{}")

    first, again = fail_then_redrive(cloud, UUID_ARGUMENTS, name=f"uuid-{reevaluates}",
                                     before_failure=close_gate, after_redrive=open_gate)
    kept, rerun = again.output
    first_id = json.loads(next(e for e in first.history if e["type"] == "PassStateEntered")
                          ["stateEnteredEventDetails"]["input"])["id"]
    assert kept == {"id": first_id}  # the succeeded branch's output, from the first run
    assert (rerun["id"] != first_id) is reevaluates  # a fresh uuid only if Arguments ran again


def test_retry_counts_start_again_after_a_redrive(cloud):
    first, again = fail_then_redrive(cloud, RETRIED, name="retried")

    def attempts(history):
        return sum(e["type"] == "TaskFailed" for e in history)

    assert attempts(first.history) == 2  # one attempt and its one retry
    assert again.status == "FAILED" and attempts(again.history) == 4  # and both again


def test_a_parallel_that_exceeded_the_data_limit_is_rerun_whole(cloud):
    first, again = fail_then_redrive(cloud, OVERSIZED, name="oversized")
    assert first.error == "States.DataLimitExceeded"
    assert again.status == "SUCCEEDED" and again.output == ["x" * 10] * 2
    assert sorted(entered(again.history, after_redrive=True)) == ["Big0", "Big1", "Section"]


def test_running_and_succeeded_executions_are_not_redrivable(cloud):
    running = cloud.start_execution(create_state_machine(PARKED, name="running"), {})
    with pytest.raises(ClientError, match="ExecutionNotRedrivable"):
        cloud.stepfunctions.redrive_execution(executionArn=running)
    cloud.stop_execution(running)
    done = cloud.start_execution(create_state_machine({
        "StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}, name="ok"), {})
    assert cloud.wait_for(done).status == "SUCCEEDED"
    with pytest.raises(ClientError, match="ExecutionNotRedrivable"):
        cloud.stepfunctions.redrive_execution(executionArn=done)
