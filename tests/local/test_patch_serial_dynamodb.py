"""Fix ``patches/serial_dynamodb``: concurrent conditional writes on one item - one winner.

The race in bare moto is real but narrow (the GIL rarely switches threads between the
read and the write of a conditional put), so the negative test widens it: a short sleep
inside moto's condition evaluation, between reading the current item and storing the new
one. The same widened window is used with the fix, where exactly one writer must win.
"""

from __future__ import annotations

import threading
import time
from unittest import mock

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.dynamodb.models import table as moto_table

from locked_workflow.testing import LocalCloud
from local_helpers import REGION, bare_moto

THREADS = 8


@pytest.fixture
def wide_race_window():
    """Sleep 200 ms between moto's read of the current item and its write (wide enough that two
    of the writers land in it even when a loaded machine prepares each request slowly)."""
    original = moto_table.get_filter_expression

    def slow(*args, **kwargs):
        time.sleep(0.2)
        return original(*args, **kwargs)

    with mock.patch.object(moto_table, "get_filter_expression", slow):
        yield


def conditional_put_race(client, table: str, key: str, threads: int = THREADS) -> int:
    """``threads`` writers put ``key`` with ``attribute_not_exists(pk)`` at once; returns the winners."""
    barrier = threading.Barrier(threads)
    winners: list[int] = []
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        barrier.wait()
        try:
            client.put_item(
                TableName=table,
                Item={"pk": {"S": key}, "writer": {"N": str(i)}},
                ConditionExpression="attribute_not_exists(pk)",
            )
            winners.append(i)
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                errors.append(error)

    workers = [threading.Thread(target=writer, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors, errors
    return len(winners)


def create_table(client, name: str = "locks") -> str:
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


def test_bare_moto_lets_several_conditional_writers_win(wide_race_window):
    with bare_moto():
        client = boto3.client("dynamodb", region_name=REGION)
        table = create_table(client)
        winners = [conditional_put_race(client, table, f"key-{round_}") for round_ in range(3)]
    assert max(winners) > 1, f"bare moto serialised the writers ({winners}): drop the serial_dynamodb fix?"


def test_runtime_lets_exactly_one_conditional_writer_win(wide_race_window):
    with LocalCloud() as cloud:
        table = create_table(cloud.dynamodb)
        winners = [conditional_put_race(cloud.dynamodb, table, f"key-{round_}") for round_ in range(3)]
    assert winners == [1, 1, 1]


def test_runtime_serialises_the_unwidened_race_too():
    with LocalCloud() as cloud:
        table = create_table(cloud.dynamodb)
        winners = [conditional_put_race(cloud.dynamodb, table, f"key-{round_}", threads=6) for round_ in range(10)]
    assert winners == [1] * 10
