"""The lock on the record itself (``Lock.on_record``), on both DynamoDB backends: the acquire
returns the record, the release writes the work's update in the same fenced write, a run that
lost its lock cannot write, a missing record fails clearly, stopped, cancelled and redriven
holders, lost responses. The updates DynamoDB would refuse: ``test_lock_record_updates.py``
(this file's fixture and group)."""

from __future__ import annotations

import time
import uuid

import pytest

from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import record_protocol as r
from deployed import StackRun, deployed_stack
from lock_invariants import redrive, states_entered_after_redrive
from record_stack import RecordStack
from safety_stack import fail_sibling


LW = r.PREFIX


class Records(StackRun):
    def put(self, customer_id: str, **attributes) -> None:
        item = {"customerId": {"S": customer_id}}
        item.update({k: ({"N": str(v)} if isinstance(v, int) else {"S": v}) for k, v in attributes.items()})
        self.cloud.dynamodb.put_item(TableName=self.table("Customers"), Item=item)

    def record(self, customer_id: str) -> dict:
        return self.get("Customers", {"customerId": {"S": customer_id}})

    def run(self, machine: str, documents: list[dict], timeout: float = 180):
        arns = [self.start(machine, d) for d in documents]
        return [self.cloud.wait_for(a, timeout=timeout) for a in arns]


records = deployed_stack(RecordStack, "Record", Records, asset_metadata=False)


def customer() -> str:
    return f"c-{uuid.uuid4().hex[:8]}"


def test_concurrent_updates_of_one_record_are_serialized_and_written_by_the_release(records):
    c = customer()
    records.put(c, name="Ada", balance=10)
    results = records.run("Increment", [{"customerId": c, "waitS": 1}] * 5)
    assert [x.status for x in results] == ["SUCCEEDED"] * 5, [(x.error, x.cause) for x in results]
    item = records.record(c)
    assert item["balance"] == {"N": "15"}  # no lost update: each run read the record the acquire returned
    assert item["name"] == {"S": "Ada"}  # the record's own attributes are untouched
    assert item[f"{LW}{p.FENCE}"] == {"N": "5"}
    assert not [k for k in item if k.startswith(LW) and k != f"{LW}{p.FENCE}"]  # released


def test_the_unlocked_read_modify_write_loses_updates(records):
    c = customer()
    records.put(c, balance=10)
    results = records.run("Unlocked", [{"customerId": c, "waitS": 1}] * 5)
    assert all(x.status == "SUCCEEDED" for x in results)
    assert int(records.record(c)["balance"]["N"]) < 15  # the negative control: updates were lost


def test_a_run_that_lost_its_lock_cannot_write(records):
    c = customer()
    records.put(c, balance=0)
    slow = records.start("ShortLease", {"customerId": c, "waitS": 15})  # lease 2 s, holds 15 s
    deadline = time.time() + 60
    while not (f"{LW}{p.OWNER}" in records.record(c)  # the slow run holds, and its lease has ended
               and int(records.record(c)[f"{LW}{p.EXPIRES_AT}"]["N"]) < time.time() * 1000):
        assert time.time() < deadline, "the slow run never held the record"
        time.sleep(0.05)
    fast = records.run("Increment", [{"customerId": c, "waitS": 0}])[0]  # takes over the expired lease
    assert fast.status == "SUCCEEDED", (fast.error, fast.cause)
    lost = records.cloud.wait_for(slow, timeout=60)
    assert (lost.status, lost.error) == ("FAILED", p.ERROR_LOST)
    item = records.record(c)
    assert item["balance"] == {"N": "1"}  # only the holder's write; the loser's was refused
    assert f"{LW}{p.OWNER}" not in item


def test_a_missing_record_fails_and_leaves_only_the_fence(records):
    c = customer()
    result = records.run("Increment", [{"customerId": c, "waitS": 0}])[0]
    assert (result.status, result.error) == ("FAILED", r.ERROR_RECORD_MISSING), result.cause
    assert f"no record with customerId = {c}" in result.cause
    assert records.record(c) == {"customerId": {"S": c}, f"{LW}{p.FENCE}": {"N": "1"}}
    # and it stays missing for the next run, with a higher fence
    again = records.run("Increment", [{"customerId": c, "waitS": 0}])[0]
    assert again.error == r.ERROR_RECORD_MISSING
    assert records.record(c)[f"{LW}{p.FENCE}"] == {"N": "2"}


def test_without_must_exist_the_acquire_creates_the_record(records):
    c = customer()
    result = records.run("Create", [{"customerId": c, "waitS": 0}])[0]
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert records.record(c)["balance"] == {"N": "1"}


@pytest.mark.parametrize(
    "update, message",
    [
        ({"set": {f"{LW}owner": {"S": "x"}}}, "must not name the key, a lock attribute"),
        ({"set": {"customerId": {"S": "other"}}}, "must not name the key"),
        ({"set": {"balance": 5}}, "must be DynamoDB AttributeValues"),
        ({"remove": "balance"}, "remove must be an array"),
        ("nonsense", "must be an object"),
    ],
)
def test_a_bad_update_is_released_without_writing(records, update, message):
    c = customer()
    records.put(c, balance=3)
    result = records.run("Custom", [{"customerId": c, "update": update}])[0]
    assert (result.status, result.error) == ("FAILED", r.ERROR_INVALID_UPDATE), result.cause
    assert message in result.cause
    item = records.record(c)
    assert item["balance"] == {"N": "3"} and f"{LW}{p.OWNER}" not in item  # released, nothing written


def test_an_update_may_set_and_remove(records):
    c = customer()
    records.put(c, balance=3, temp="x")
    result = records.run("Custom", [{"customerId": c, "update": {"set": {"status": {"S": "vip"}, "n": {"N": "2"}},
                                                                 "remove": ["temp"]}}])[0]
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    item = records.record(c)
    assert item["status"] == {"S": "vip"} and item["n"] == {"N": "2"} and "temp" not in item


def test_a_stopped_holder_is_retired_on_the_record(records):
    c = customer()
    records.put(c, balance=0)
    holder = records.start("Increment", {"customerId": c, "waitS": 60})
    deadline = time.time() + 20
    while f"{LW}{p.OWNER}" not in records.record(c) and time.time() < deadline:
        time.sleep(0.2)
    records.cloud.stepfunctions.stop_execution(executionArn=holder)
    stopped = time.time()
    result = records.run("Increment", [{"customerId": c, "waitS": 0}], timeout=120)[0]
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert time.time() - stopped >= 4  # the stop grace (no task in the work: 5 s)
    assert records.record(c)["balance"] == {"N": "1"} and records.record(c)[f"{LW}{p.FENCE}"] == {"N": "2"}


def test_a_record_held_by_a_cancelled_branch_is_free_after_its_grace(records):
    """The presence token lives on the record (``lw:presence``): a waiter's probe finds it
    closed once Step Functions cancelled the holding branch, and takes the record after the
    stop grace; the cancelled hold's update is never written."""
    if records.cloud.backend != "moto":
        pytest.skip("the cancellation is Step Functions behaviour (the mutex's case runs on both backends)")
    c = customer()
    records.put(c, balance=0, name="Ada")
    holder = records.cloud.start_execution(records.app.state_machine_arn("RecordCancelled"),
                                           {"customerId": c, "waitS": 60, "siblingGate": c})
    deadline = time.time() + 60  # registered before the sibling fails
    while f"{LW}{p.PRESENCE}" not in records.record(c) and time.time() < deadline:
        time.sleep(0.2)
    assert f"{LW}{p.PRESENCE}" in records.record(c)
    fail_sibling(records.cloud, records.app, c)
    result = records.run("Increment", [{"customerId": c, "waitS": 0}], timeout=150)[0]
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert records.cloud.stepfunctions.describe_execution(executionArn=holder)["status"] == "RUNNING"
    assert "Lock.Abandoned" in [e["stateEnteredEventDetails"]["name"] for e in result.history
                                if e["type"] == "TaskStateEntered"]
    record = records.record(c)
    assert (record["balance"], record["name"], record[f"{LW}{p.FENCE}"]) == ({"N": "1"}, {"S": "Ada"}, {"N": "2"})
    records.cloud.stepfunctions.stop_execution(executionArn=holder)


# --------------------------------------------------------------------------------------
# A redrive after the release: the update lands once, the run ends released
# --------------------------------------------------------------------------------------


def _release_of(c: str):
    """``when``: the release with the update of record ``c`` (an acquire has no REMOVE)."""
    def when(params: dict) -> bool:
        expression = params.get("UpdateExpression", "")
        return params.get("Key", {}).get("customerId") == {"S": c} and "REMOVE" in expression and "SET" in expression
    return when


def _stopped_at_its_release_while_another_run_takes_the_record(records, c: str, *, applied: bool):
    """A holder of ``c`` stopped right in its release (the write applied or not), and a second
    run holding ``c`` after it (at once, or after the stop grace when the holder's write did not
    apply). Returns (holder ARN, second run's ARN)."""
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    records.put(c, balance=0)
    arns: list[str] = []
    stop = Fault("UpdateItem", "InternalServerError", after_call=applied, when=_release_of(c),
                 then=lambda: records.cloud.stop_execution(arns[0]))
    with dynamodb_faults(stop) as log:
        arns.append(records.start("Increment", {"customerId": c, "waitS": 1}))
        deadline = time.time() + 60
        while f"{LW}{p.OWNER}" not in records.record(c):
            assert time.time() < deadline, "the first run never held the record"
            time.sleep(0.05)
        arns.append(records.start("Increment", {"customerId": c, "waitS": 4}))
        assert records.cloud.wait_for(arns[0], timeout=60).status == "ABORTED"
    assert log.injected == 1
    while not records.record(c).get(f"{LW}{p.OWNER}", {}).get("S", "").startswith(arns[1]):
        assert time.time() < deadline + 30, "the second run never took the record"
        time.sleep(0.05)
    return arns[0], arns[1]


def test_an_acquire_retried_after_its_response_was_lost_holds_and_releases_once(records):
    """Fault matrix ``record:Lock.Acquire`` x ``lost``: the acquire applied, its response was
    lost, the retry (same owner) applied again. ``UPDATED_NEW`` returns "the updated attributes"
    (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateItem.html#DDB-UpdateItem-request-ReturnValues):
    moto leaves out an attribute a SET left unchanged - the owner, here - and DynamoDB Local
    returns it. The lock must hold under both readings: its owner is the one it wrote (its
    entry's), never read back. Before the fix, on moto, the release sent ``":me": {}`` and the
    run failed after ``Lock.ReleaseAfterError``."""
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    c = customer()
    records.put(c, balance=3)

    def acquire_of_c(params: dict) -> bool:
        return params.get("Key", {}).get("customerId") == {"S": c} and " ADD " in params.get("UpdateExpression", "")

    lost = Fault("UpdateItem", "InternalServerError", after_call=True, when=acquire_of_c)
    with dynamodb_faults(lost) as log:
        (result,) = records.run("Increment", [{"customerId": c, "waitS": 1}])
    assert log.injected == 1
    assert (result.status, result.error) == ("SUCCEEDED", None), (result.error, result.cause)
    item = records.record(c)
    assert item["balance"] == {"N": "4"}  # the work ran once and its release wrote
    assert item[f"{LW}{p.FENCE}"] == {"N": "2"}  # both attempts applied (ADD): the fence moved twice
    assert not [k for k in item if k.startswith(LW) and k != f"{LW}{p.FENCE}"]  # released


@pytest.mark.parametrize("reevaluates", [False, True], ids=["strict", "reevaluate"])
def test_a_run_stopped_after_its_release_applied_ends_released_when_redriven_and_writes_once(records, reevaluates):
    """Fault matrix ``record:Lock.Release`` x ``redrive`` / ``redrive-reeval``. The release (with
    the update) applied, the run was stopped right after, another run took the record, then the
    stopped run was redriven. AWS reruns only the unsuccessful step - the release - never the
    work that succeeded (https://docs.aws.amazon.com/step-functions/latest/dg/redrive-executions.html);
    whether the section's Parallel evaluates its Arguments again is undocumented (both readings).
    The resumed release finds the record another run's: its own write had applied (nobody could
    take over a stopped holder before its stop grace), so it ends released - not ``Lock.Lost`` -
    and the section does not run again: the update lands once."""
    c = customer()
    holder, second = _stopped_at_its_release_while_another_run_takes_the_record(records, c, applied=True)
    redriven = redrive(records.cloud, holder, reevaluates=reevaluates)
    assert (redriven.status, redriven.error) == ("SUCCEEDED", None), (redriven.error, redriven.cause)
    assert records.cloud.wait_for(second, timeout=60).status == "SUCCEEDED"
    entered = states_entered_after_redrive(redriven)
    assert "Lock.Acquire" not in entered and "Work" not in entered, entered  # nothing that succeeded ran again
    item = records.record(c)
    assert item["balance"] == {"N": "2"} and item[f"{LW}{p.FENCE}"] == {"N": "2"}, item
    assert f"{LW}{p.OWNER}" not in item


@pytest.mark.parametrize("reevaluates", [False, True], ids=["strict", "reevaluate"])
def test_a_run_stopped_before_its_release_applied_is_lost_when_redriven_after_a_takeover(records, reevaluates):
    """The control of the one above: the release did *not* apply when the run was stopped, the
    record was taken over after the stop grace, then the run was redriven. Its update was never
    written: the resumed release must fail ``Lock.Lost``, not claim it released."""
    c = customer()
    holder, second = _stopped_at_its_release_while_another_run_takes_the_record(records, c, applied=False)
    redriven = redrive(records.cloud, holder, reevaluates=reevaluates)
    assert (redriven.status, redriven.error) == ("FAILED", p.ERROR_LOST), (redriven.error, redriven.cause)
    assert records.cloud.wait_for(second, timeout=60).status == "SUCCEEDED"
    assert records.record(c)["balance"] == {"N": "1"}  # the second run's update only


@pytest.mark.parametrize("reevaluates", [False, True], ids=["strict", "reevaluate"])
def test_a_run_stopped_in_its_work_and_redriven_after_a_takeover_is_lost_not_released(records, reevaluates):
    """A redrive resumes the work's Wait (Wait and Pass states are not guarded), the work ends,
    and the release finds the record taken over during the stop. The work's end came after the
    redrive, so it says nothing of when the stop was: ``Lock.Lost``, the update not written."""
    c = customer()
    records.put(c, balance=0)
    holder = records.start("Increment", {"customerId": c, "waitS": 3})
    deadline = time.time() + 60
    while not any(e.get("stateEnteredEventDetails", {}).get("name") == "WorkWait" for e in records.cloud.history(holder)):
        assert time.time() < deadline, "the first run never entered its work"
        time.sleep(0.05)
    records.cloud.stop_execution(holder)  # inside its 3 s Wait
    assert records.cloud.wait_for(holder, timeout=60).status == "ABORTED"
    second = records.start("Increment", {"customerId": c, "waitS": 4})
    while not records.record(c).get(f"{LW}{p.OWNER}", {}).get("S", "").startswith(second):
        assert time.time() < deadline + 30, "the second run never took the record"
        time.sleep(0.05)
    redriven = redrive(records.cloud, holder, reevaluates=reevaluates)
    entered = states_entered_after_redrive(redriven)
    assert (redriven.status, redriven.error) == ("FAILED", p.ERROR_LOST), (redriven.error, redriven.cause, entered)
    assert "Work" in entered  # it did resume its work
    assert records.cloud.wait_for(second, timeout=60).status == "SUCCEEDED"
    assert records.record(c)["balance"] == {"N": "1"}  # the second run's update only
