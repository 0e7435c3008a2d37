"""The lock on the record itself (``record_table``), on both DynamoDB backends: the acquire
returns the record, the release writes the work's update in the same fenced write, a run that
lost its lock cannot write, a missing record fails clearly, and bad input is refused."""

from __future__ import annotations

import time
import uuid

import pytest

from state_machines import lock_protocol as p
from state_machines import record_protocol as r

LW = r.PREFIX


@pytest.fixture(scope="session")
def record_synth():
    from constructs_lib.local.synth import synth_app
    from record_stack import RecordStack

    return synth_app(lambda app: RecordStack(app, "Record"))


@pytest.fixture(scope="module", params=["moto", "dynamodb-local"])
def records(request, record_synth):
    from deployed import local_deployment

    for cloud, app in local_deployment(request.param, record_synth):
        yield Records(cloud, app)


class Records:
    def __init__(self, cloud, app):
        self.cloud, self.app = cloud, app
        self.table = next(v for k, v in app.resources.items() if k.startswith("Customers"))

    def put(self, customer_id: str, **attributes) -> None:
        item = {"customerId": {"S": customer_id}}
        item.update({k: ({"N": str(v)} if isinstance(v, int) else {"S": v}) for k, v in attributes.items()})
        self.cloud.dynamodb.put_item(TableName=self.table, Item=item)

    def get(self, customer_id: str) -> dict:
        return self.cloud.dynamodb.get_item(
            TableName=self.table, Key={"customerId": {"S": customer_id}}, ConsistentRead=True
        ).get("Item", {})

    def start(self, machine: str, document: dict) -> str:
        name = machine if machine == "Unlocked" else f"{machine}StateMachine"
        return self.cloud.start_execution(self.app.state_machine_arn(name), document)

    def run(self, machine: str, documents: list[dict], timeout: float = 180):
        arns = [self.start(machine, d) for d in documents]
        return [self.cloud.wait_for(a, timeout=timeout) for a in arns]


def customer() -> str:
    return f"c-{uuid.uuid4().hex[:8]}"


def test_concurrent_updates_of_one_record_are_serialized_and_written_by_the_release(records):
    c = customer()
    records.put(c, name="Ada", balance=10)
    results = records.run("Increment", [{"customerId": c, "waitS": 1}] * 5)
    assert [x.status for x in results] == ["SUCCEEDED"] * 5, [(x.error, x.cause) for x in results]
    item = records.get(c)
    assert item["balance"] == {"N": "15"}  # no lost update: each run read the record the acquire returned
    assert item["name"] == {"S": "Ada"}  # the record's own attributes are untouched
    assert item[f"{LW}{p.FENCE}"] == {"N": "5"}
    assert not [k for k in item if k.startswith(LW) and k != f"{LW}{p.FENCE}"]  # released


def test_the_unlocked_read_modify_write_loses_updates(records):
    c = customer()
    records.put(c, balance=10)
    results = records.run("Unlocked", [{"customerId": c, "waitS": 1}] * 5)
    assert all(x.status == "SUCCEEDED" for x in results)
    assert int(records.get(c)["balance"]["N"]) < 15  # the negative control: updates were lost


def test_a_run_that_lost_its_lock_cannot_write(records):
    c = customer()
    records.put(c, balance=0)
    slow = records.start("ShortLease", {"customerId": c, "waitS": 5})  # lease 2 s, holds 5 s
    time.sleep(3)
    fast = records.run("Increment", [{"customerId": c, "waitS": 0}])[0]  # takes over the expired lease
    assert fast.status == "SUCCEEDED", (fast.error, fast.cause)
    lost = records.cloud.wait_for(slow, timeout=60)
    assert (lost.status, lost.error) == ("FAILED", p.ERROR_LOST)
    item = records.get(c)
    assert item["balance"] == {"N": "1"}  # only the holder's write; the loser's was refused
    assert f"{LW}{p.OWNER}" not in item


def test_a_missing_record_fails_and_leaves_only_the_fence(records):
    c = customer()
    result = records.run("Increment", [{"customerId": c, "waitS": 0}])[0]
    assert (result.status, result.error) == ("FAILED", r.ERROR_RECORD_MISSING), result.cause
    assert f"no record with customerId = {c}" in result.cause
    assert records.get(c) == {"customerId": {"S": c}, f"{LW}{p.FENCE}": {"N": "1"}}
    # and it stays missing for the next run, with a higher fence
    again = records.run("Increment", [{"customerId": c, "waitS": 0}])[0]
    assert again.error == r.ERROR_RECORD_MISSING
    assert records.get(c)[f"{LW}{p.FENCE}"] == {"N": "2"}


def test_without_must_exist_the_acquire_creates_the_record(records):
    c = customer()
    result = records.run("Create", [{"customerId": c, "waitS": 0}])[0]
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert records.get(c)["balance"] == {"N": "1"}


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
    item = records.get(c)
    assert item["balance"] == {"N": "3"} and f"{LW}{p.OWNER}" not in item  # released, nothing written


def test_an_update_may_set_and_remove(records):
    c = customer()
    records.put(c, balance=3, temp="x")
    result = records.run("Custom", [{"customerId": c, "update": {"set": {"status": {"S": "vip"}, "n": {"N": "2"}},
                                                                 "remove": ["temp"]}}])[0]
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    item = records.get(c)
    assert item["status"] == {"S": "vip"} and item["n"] == {"N": "2"} and "temp" not in item


def test_a_stopped_holder_is_retired_on_the_record(records):
    c = customer()
    records.put(c, balance=0)
    holder = records.start("Increment", {"customerId": c, "waitS": 60})
    deadline = time.time() + 20
    while f"{LW}{p.OWNER}" not in records.get(c) and time.time() < deadline:
        time.sleep(0.2)
    records.cloud.stepfunctions.stop_execution(executionArn=holder)
    stopped = time.time()
    result = records.run("Increment", [{"customerId": c, "waitS": 0}], timeout=120)[0]
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert time.time() - stopped >= 4  # the stop grace (no task in the work: 5 s)
    assert records.get(c)["balance"] == {"N": "1"} and records.get(c)[f"{LW}{p.FENCE}"] == {"N": "2"}
