"""The Python side of the lock: ``LockClient`` on moto's DynamoDB (and its layer in a user's
Lambda function), and the lock CLI on both DynamoDB backends (``deployed.backend_cloud``).
Tests on both backends borrow DynamoDB Local through ``dynamodb_local``.

The ``LockClient`` tests' fixtures: ``ddb`` (moto's DynamoDB with the lock table), ``clock`` (true
time moved by hand), ``make_client``, ``alice`` and ``bob`` (clients on that clock); what they
fake is in ``tests/lock_client_fakes.py``."""

from __future__ import annotations


import boto3
import pytest
from moto import mock_aws

from locked_workflow.constructs_lib.lock_client import LockClient
from lock_client_fakes import TABLE, FakeClock, dated_by


@pytest.fixture
def ddb():
    with mock_aws():
        client = boto3.client("dynamodb")
        client.create_table(  # as LockTable creates it: the partition key and nothing else
            TableName=TABLE,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


@pytest.fixture(scope="module")
def dynamodb_local():
    """The process's DynamoDB Local server (``SERVERS``: the one the clouds borrow, not a JVM of
    the module's own), with the lock table (tests use keys of their own)."""
    from locked_workflow.testing.dynamodb_local import SERVERS
    from locked_workflow.testing.pytest_plugin import require_backend

    require_backend("dynamodb-local")
    with SERVERS.lend() as server:
        client = server.client()
        client.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def make_client(ddb, clock):
    """Clients on the fake clock: its epoch, its monotonic time, its sleep (a wait takes no
    time), and DynamoDB's ``Date`` headers."""
    dated_by(ddb, clock)

    def make(owner: str, **kwargs) -> LockClient:
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("monotonic", clock.monotonic)
        kwargs.setdefault("sleep", clock.sleep)
        kwargs.setdefault("dynamodb", ddb)
        return LockClient(TABLE, owner=owner, **kwargs)

    return make


@pytest.fixture
def alice(make_client):
    return make_client("alice")


@pytest.fixture
def bob(make_client):
    return make_client("bob")

