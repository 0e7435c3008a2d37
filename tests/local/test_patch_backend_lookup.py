"""Fix ``patches/backend_lookup``: a request finds its account's backends without moto's
process-wide lock, and a new account's backends are still created."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator
from unittest import mock

import boto3
from moto.core import base_backend
from moto.dynamodb.models import dynamodb_backends

from locked_workflow.testing import LocalCloud
from local_helpers import REGION, bare_moto

TABLE = "lookups"


class CountingLock:
    """moto's ``backend_lock`` (an RLock), counting how often it is entered."""

    def __init__(self, lock) -> None:  # type: ignore[no-untyped-def]
        self.lock, self.entered = lock, 0

    def __enter__(self) -> bool:
        self.entered += 1
        return self.lock.__enter__()

    def __exit__(self, *exc) -> None:  # type: ignore[no-untyped-def]
        self.lock.__exit__(*exc)


@contextmanager
def counting_backend_lock() -> Iterator[CountingLock]:
    counting = CountingLock(base_backend.backend_lock)
    with mock.patch.object(base_backend, "backend_lock", counting):
        yield counting


def entered_for_ten_reads() -> int:
    client = boto3.client("dynamodb", region_name=REGION)
    client.create_table(TableName=TABLE, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                        BillingMode="PAY_PER_REQUEST")
    client.put_item(TableName=TABLE, Item={"pk": {"S": "a"}, "n": {"N": "1"}})
    with counting_backend_lock() as lock:
        for _ in range(10):
            assert client.get_item(TableName=TABLE, Key={"pk": {"S": "a"}})["Item"]["n"] == {"N": "1"}
    return lock.entered


def test_bare_moto_enters_the_process_lock_at_every_lookup():
    with bare_moto():
        assert entered_for_ten_reads() >= 20  # several lookups a request


def test_runtime_finds_known_backends_without_the_lock():
    with LocalCloud():
        assert entered_for_ten_reads() == 0


def test_a_new_account_still_gets_its_backends():
    with LocalCloud(), counting_backend_lock() as lock:
        backend = dynamodb_backends["210987654321"][REGION]
        assert backend.account_id == "210987654321"
        assert dynamodb_backends["210987654321"][REGION] is backend
    assert lock.entered >= 1  # created under moto's lock, once
