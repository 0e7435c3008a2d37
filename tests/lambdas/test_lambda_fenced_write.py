"""The example Lambda: a fenced read-modify-write on the customers table (moto DynamoDB)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import boto3
import pytest
from moto import mock_aws

TABLE = "customers"


@pytest.fixture(autouse=True)
def _env(offline_aws_env, monkeypatch):
    monkeypatch.setenv("CUSTOMERS_TABLE", TABLE)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")


@pytest.fixture
def ddb():
    with mock_aws():
        client = boto3.client("dynamodb")
        client.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "customerId", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "customerId", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


@pytest.fixture
def logic():
    return importlib.import_module("locked_workflow.lambdas.apply_customer_update.logic")


@pytest.fixture
def index(ddb, monkeypatch):
    module = importlib.import_module("locked_workflow.lambdas.apply_customer_update.index")
    monkeypatch.setattr(module, "_dynamodb", ddb)  # the mocked client, not a cached one
    return module


def event(customer="c-1", fence=1, delta=10, **extra):
    return {"customerId": customer, "fence": fence, "update": {"balanceDelta": delta}, **extra}


def apply(logic, ddb, evt, **kwargs):
    update = logic.CustomerUpdate.from_event(evt)
    return logic.apply_update(update, table_name=TABLE, dynamodb=ddb, **kwargs)


def stored(ddb, customer="c-1"):
    return ddb.get_item(TableName=TABLE, Key={"customerId": {"S": customer}}, ConsistentRead=True).get(
        "Item"
    )


# --------------------------------------------------------------------------------------
# Fencing
# --------------------------------------------------------------------------------------


def test_first_write_creates_the_record(logic, ddb):
    record = apply(logic, ddb, event(fence=1, delta=10))

    assert record.summary() == {"customerId": "c-1", "balance": 10, "updates": 1, "lastFence": 1}
    assert stored(ddb) == {
        "customerId": {"S": "c-1"},
        "balance": {"N": "10"},
        "updates": {"N": "1"},
        "lastFence": {"N": "1"},
    }


def test_newer_fence_wins(logic, ddb):
    apply(logic, ddb, event(fence=1, delta=10))
    record = apply(logic, ddb, event(fence=5, delta=-3))

    assert (record.balance, record.updates, record.last_fence) == (7, 2, 5)
    assert stored(ddb)["lastFence"] == {"N": "5"}


@pytest.mark.parametrize("zombie_fence", [4, 5], ids=["older", "equal"])
def test_older_or_equal_fence_is_rejected_and_record_unchanged(logic, ddb, zombie_fence):
    apply(logic, ddb, event(fence=5, delta=10))
    before = stored(ddb)

    with pytest.raises(logic.StaleFenceError, match=rf"fence {zombie_fence} is not newer than lastFence 5"):
        apply(logic, ddb, event(fence=zombie_fence, delta=1000))

    assert stored(ddb) == before


def test_zombie_write_between_read_and_write_is_not_lost(logic, ddb):
    """A fence alone does not save a read-modify-write: the newer holder re-reads instead."""
    apply(logic, ddb, event(fence=1, delta=100))
    writes = []

    def zombie_writes_meanwhile(_seconds):
        if not writes:  # once, between the newer holder's read and its write
            writes.append(apply(logic, ddb, event(fence=2, delta=1)))

    record = apply(logic, ddb, event(fence=3, delta=10, workMs=1), sleep=zombie_writes_meanwhile)

    assert (record.balance, record.updates, record.last_fence) == (111, 3, 3)
    assert stored(ddb)["balance"] == {"N": "111"}


def test_fenced_write_to_a_record_without_last_fence(logic, ddb):
    apply(logic, ddb, event(fence=None, delta=5))  # lockless: no lastFence stored
    assert "lastFence" not in stored(ddb)

    record = apply(logic, ddb, event(fence=1, delta=5))

    assert (record.balance, record.updates, record.last_fence) == (10, 2, 1)


def test_fenced_write_to_a_seeded_record(logic, ddb):
    ddb.put_item(TableName=TABLE, Item={"customerId": {"S": "c-1"}, "balance": {"N": "50"}})

    record = apply(logic, ddb, event(fence=3, delta=5))

    assert (record.balance, record.updates, record.last_fence) == (55, 1, 3)


# --------------------------------------------------------------------------------------
# Lockless mode (the negative control)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("evt", [event(fence=None), {"customerId": "c-1", "update": {"balanceDelta": 10}}])
def test_lockless_write_is_unconditional_and_keeps_the_last_fence(logic, ddb, evt):
    apply(logic, ddb, event(fence=9, delta=1))

    record = apply(logic, ddb, evt)

    assert (record.balance, record.updates, record.last_fence) == (11, 2, 9)


def test_lockless_overlapping_runs_lose_an_update(logic, ddb):
    """Without the lock the read-then-write loses updates: what the negative control shows."""
    apply(logic, ddb, event(fence=None, delta=0))

    def other_run_meanwhile(_seconds):
        apply(logic, ddb, event(fence=None, delta=1))

    apply(logic, ddb, event(fence=None, delta=1, workMs=1), sleep=other_run_meanwhile)

    item = stored(ddb)
    assert item["balance"] == {"N": "1"}  # two increments of 1, one lost
    assert item["updates"] == {"N": "2"}  # of three runs


# --------------------------------------------------------------------------------------
# The event model
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "evt, problem",
    [
        (None, "must be an object"),
        ({"fence": 1, "update": {"balanceDelta": 1}}, "customerId"),
        (event(customer=""), "customerId"),
        (event(customer=42), "customerId"),
        (event(fence="7"), "fence must be an integer"),
        (event(fence=True), "fence must be an integer"),
        (event(fence=1.5), "fence must be an integer"),
        (event(fence=0), "fence must be at least 1"),
        ({"customerId": "c-1", "fence": 1}, "update must be an object"),
        ({"customerId": "c-1", "fence": 1, "update": {}}, "update must set"),
        (event(delta="10"), "balanceDelta must be an integer"),
        ({"customerId": "c-1", "fence": 1, "update": {"email": "nope"}}, "e-mail"),
        ({"customerId": "c-1", "fence": 1, "update": {"balance": 1}}, "unknown update fields"),
        (event(extra=1), "unknown event fields"),
        (event(workMs=-1), "workMs"),
    ],
)
def test_bad_event_raises_invalid_update_error(logic, evt, problem):
    with pytest.raises(logic.InvalidUpdateError, match=problem):
        logic.CustomerUpdate.from_event(evt)


def test_event_model_accepts_integral_floats_and_email(logic):
    update = logic.CustomerUpdate.from_event(
        {"customerId": "c-1", "fence": 3.0, "update": {"balanceDelta": -2, "email": "a@b.c"}, "workMs": 5}
    )

    assert update == logic.CustomerUpdate("c-1", fence=3, balance_delta=-2, email="a@b.c", work_ms=5)


# --------------------------------------------------------------------------------------
# The handler, with a fake Lambda context
# --------------------------------------------------------------------------------------


@dataclass
class FakeContext:
    function_name: str = "apply-customer-update"
    memory_limit_in_mb: int = 128
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:apply-customer-update"
    aws_request_id: str = "52fdfc07-2182-154f-163f-5f0f9a621d72"


def test_handler_applies_the_update_and_returns_the_summary(index, ddb, capsys):
    result = index.handler(event(fence=2, delta=10, workMs=1), FakeContext())

    assert result == {"customerId": "c-1", "balance": 10, "updates": 1, "lastFence": 2}
    out = capsys.readouterr().out
    assert '"CustomerUpdateApplied"' in out and '"LockedWorkflow"' in out  # EMF metrics
    assert index.logger.get_current_keys()["function_request_id"] == FakeContext.aws_request_id


def test_handler_raises_stale_fence_error_by_name(index, ddb):
    index.handler(event(fence=2), FakeContext())

    with pytest.raises(index.StaleFenceError) as raised:
        index.handler(event(fence=1), FakeContext())

    # Step Functions Catches a Lambda error by its errorType: the class name.
    assert type(raised.value).__name__ == "StaleFenceError"
    assert stored(ddb)["lastFence"] == {"N": "2"}


def test_handler_raises_invalid_update_error_by_name(index, ddb):
    with pytest.raises(index.InvalidUpdateError) as raised:
        index.handler({"customerId": "c-1"}, FakeContext())

    assert type(raised.value).__name__ == "InvalidUpdateError"
    assert stored(ddb) is None


def test_handler_runs_with_tracing_left_to_its_defaults(index, ddb, monkeypatch):
    """Outside Lambda (no LAMBDA_TASK_ROOT, no X-Ray daemon) the Tracer disables itself."""
    monkeypatch.delenv("POWERTOOLS_TRACE_DISABLED")
    monkeypatch.delenv("LAMBDA_TASK_ROOT", raising=False)

    assert index.tracer._is_tracer_disabled() is True
    assert index.handler(event(fence=1), FakeContext())["balance"] == 10
