"""``patches/serial_dynamodb`` serializes per item: requests on one item wait for each other,
requests on other items do not (DynamoDB orders only the writes to one item).

A writer is held inside moto (between its read of the current item and its write) by a gate
the test opens; while it is held, a request on another item must finish, and one on the same
item must not. Whether the held writer still wins is checked too: the hold changes no answer.
"""

from __future__ import annotations

import threading
from unittest import mock

import pytest
from botocore.exceptions import ClientError
from moto.dynamodb.models import table as moto_table

from locked_workflow.testing import LocalCloud
from test_patch_serial_dynamodb import create_table

#: A request whose ExpressionAttributeValues carry ``:hold`` = this waits inside moto for the gate.
HELD = {"S": "held"}
DEADLINE_S = 30.0


@pytest.fixture
def gate():
    """(inside, release): ``inside`` is set once a held request is in moto's condition
    evaluation; it stays there until ``release`` is set."""
    inside, release = threading.Event(), threading.Event()
    original = moto_table.get_filter_expression

    def held(expression, names=None, values=None, *args, **kwargs):
        if (values or {}).get(":hold") == HELD:
            inside.set()
            release.wait(DEADLINE_S)
        return original(expression, names, values, *args, **kwargs)

    with mock.patch.object(moto_table, "get_filter_expression", held):
        yield inside, release
    release.set()


def conditional_put(client, key: str, *, hold: bool = False, errors: list | None = None) -> None:
    values = {":hold": HELD if hold else {"S": "free"}}
    try:
        client.put_item(
            TableName="locks", Item={"pk": {"S": key}},
            ConditionExpression="attribute_not_exists(pk) AND :hold = :hold", ExpressionAttributeValues=values,
        )
    except ClientError as error:
        if errors is None:
            raise
        errors.append(error.response["Error"]["Code"])


def transaction(client, keys: list[str], *, hold: bool) -> None:
    client.transact_write_items(TransactItems=[
        {"Put": {"TableName": "locks", "Item": {"pk": {"S": key}},
                 "ConditionExpression": "attribute_not_exists(pk) AND :hold = :hold",
                 "ExpressionAttributeValues": {":hold": HELD if hold else {"S": "free"}}}}
        for key in keys
    ])


def in_thread(target, *args, **kwargs) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, kwargs=kwargs, daemon=True)
    thread.start()
    return thread


def test_a_request_on_another_item_proceeds_while_one_item_is_held(gate):
    inside, release = gate
    with LocalCloud() as cloud:
        client = cloud.dynamodb
        create_table(client)
        held = in_thread(conditional_put, client, "a", hold=True)
        assert inside.wait(DEADLINE_S), "the held writer never reached moto"
        other = in_thread(conditional_put, client, "b")
        other.join(DEADLINE_S)
        assert not other.is_alive(), "a write on item b waited for the one held on item a"
        assert held.is_alive(), "the held writer finished before the gate opened"
        release.set()
        held.join(DEADLINE_S)
        assert not held.is_alive()
        items = client.scan(TableName="locks")["Items"]
    assert sorted(item["pk"]["S"] for item in items) == ["a", "b"]


def test_a_request_on_the_held_item_waits_and_then_loses(gate):
    """The negative control of the test above: the same item is ordered (one winner)."""
    inside, release = gate
    errors: list[str] = []
    with LocalCloud() as cloud:
        client = cloud.dynamodb
        create_table(client)
        held = in_thread(conditional_put, client, "a", hold=True)
        assert inside.wait(DEADLINE_S), "the held writer never reached moto"
        same = in_thread(conditional_put, client, "a", errors=errors)
        same.join(0.5)
        assert same.is_alive(), "a write on item a went past the writer holding item a"
        release.set()
        for thread in (held, same):
            thread.join(DEADLINE_S)
            assert not thread.is_alive()
    assert errors == ["ConditionalCheckFailedException"]


def test_a_transaction_holds_all_its_items_at_once(gate):
    """A held TransactWriteItems on a and b keeps a write on b waiting; it holds its table alone
    (moto restores a copy of the table when a transaction fails), so c waits too - stricter
    than DynamoDB, never kinder - and everything lands once it commits."""
    inside, release = gate
    errors: list[str] = []
    with LocalCloud() as cloud:
        client = cloud.dynamodb
        create_table(client)
        held = in_thread(transaction, client, ["a", "b"], hold=True)
        assert inside.wait(DEADLINE_S), "the held transaction never reached moto"
        on_b = in_thread(conditional_put, client, "b", errors=errors)
        on_b.join(0.5)
        assert on_b.is_alive(), "a write on item b went past the transaction holding b"
        release.set()
        for thread in (held, on_b):
            thread.join(DEADLINE_S)
            assert not thread.is_alive()
        conditional_put(client, "c")
        items = client.scan(TableName="locks")["Items"]
    assert errors == ["ConditionalCheckFailedException"]
    assert sorted(item["pk"]["S"] for item in items) == ["a", "b", "c"]


def test_writers_on_many_items_in_a_burst_each_win_once():
    """No lost item, no error, one winner per item: 8 threads x 3 conditional puts on 3 shared
    keys each (every key contended by all threads)."""
    from test_patch_serial_dynamodb import conditional_put_race

    with LocalCloud() as cloud:
        create_table(cloud.dynamodb)
        winners = [[] for _ in range(3)]
        threads = [in_thread(lambda n=n: winners[n].append(conditional_put_race(cloud.dynamodb, "locks", f"k{n}")))
                   for n in range(3)]
        for thread in threads:
            thread.join(DEADLINE_S)
        assert [w for w in winners] == [[1], [1], [1]]
