"""The lock CLI on the queued kinds, both DynamoDB backends: a fair lock's waiters in order (and
the tickets a coalescing key superseded), its forced release and ``clear-head`` handing the lock
on, and a read/write lock's readers, one released by name. (The CLI itself: ``test_cli.py``.)"""

from __future__ import annotations

import json
import time

from locked_workflow.constructs_lib import cli
from locked_workflow.constructs_lib.lock_client import LockClient
from test_cli import cloud, item, run, table  # noqa: F401 - cloud, table: the CLI's fixtures


def _fair_queue(cloud, table, owners_and_tokens) -> None:
    """Queue rows (tickets 1, 2, ...) on the fair lock ``fair#q`` with these (owner, token)."""
    from locked_workflow.state_machines import fair_protocol as fp

    cloud.dynamodb.update_item(
        TableName=table, Key={"pk": {"S": "fair#q"}}, UpdateExpression="SET #s = :zero, #t = :n",
        ExpressionAttributeNames={"#s": fp.SERVED, "#t": fp.TICKETS},
        ExpressionAttributeValues={":zero": {"N": "0"}, ":n": {"N": str(len(owners_and_tokens))}})
    for ticket, (owner, token) in enumerate(owners_and_tokens, 1):
        cloud.dynamodb.put_item(TableName=table, Item={
            "pk": {"S": fp.row_key("fair#q", ticket)}, "owner": {"S": owner}, fp.TOKEN: {"S": token},
            fp.LEASE: {"N": "60000"}, fp.GRACE_MS: {"N": "0"}})


def test_show_lists_a_fair_locks_waiters_in_order_and_how_each_waits(cloud, table, capsys):
    from locked_workflow.state_machines import fair_protocol as fp

    holder = LockClient(table, namespace="fair", dynamodb=cloud.dynamodb, fair=True).acquire("q", lease=60)
    parked, polling = "arn:aws:states:us-east-1:123456789012:execution:m:e#1", "client:h:1:x#2"
    _fair_queue(cloud, table, [(parked, "token"), (polling, f"{fp.CLIENT_LEASE_PREFIX}9")])
    code, out, _ = run(cloud, capsys, "locks", "show", "q", "--namespace", "fair", "--table", table, "--json")
    shown = json.loads(out)
    assert code == 0 and shown["owner"] == holder.owner
    assert shown["waiters"] == [
        {"ticket": 1, "owner": parked, "execution": "arn:aws:states:us-east-1:123456789012:execution:m:e", "waits": "parked"},
        {"ticket": 2, "owner": polling, "execution": None, "waits": "polling"},
    ]
    code, out, _ = run(cloud, capsys, "locks", "show", "q", "--namespace", "fair", "--table", table)
    assert f"waiters: 2\n    1. {parked} (parked)\n    2. {polling} (polling)" in out
    code, out, _ = run(cloud, capsys, "locks", "list", "--table", table, "--json")
    assert [r["key"] for r in json.loads(out) if r["namespace"] == "fair"] == ["q"]  # rows are no locks


def test_show_marks_the_tickets_a_coalescing_key_superseded(cloud, table, capsys):
    """On a ``QueueLimit.keep_newest`` key the item's cut names the last superseded ticket: the
    rows at or below it wait for nothing (the handoff passes them); a plain fair key has no cut
    (the test above: the same rows show parked)."""
    from locked_workflow.state_machines import fair_protocol as fp

    LockClient(table, namespace="fair", dynamodb=cloud.dynamodb, fair=True).acquire("q", lease=60)
    older, newest = "arn:aws:states:us-east-1:123456789012:execution:m:a#1", "arn:aws:states:us-east-1:123456789012:execution:m:b#2"
    _fair_queue(cloud, table, [(older, "token-a"), (newest, "token-b")])
    cloud.dynamodb.update_item(TableName=table, Key={"pk": {"S": "fair#q"}}, UpdateExpression="SET #c = :one",
                               ExpressionAttributeNames={"#c": fp.CUT}, ExpressionAttributeValues={":one": {"N": "1"}})
    code, out, _ = run(cloud, capsys, "locks", "show", "q", "--namespace", "fair", "--table", table, "--json")
    assert code == 0 and [w["waits"] for w in json.loads(out)["waiters"]] == ["superseded", "parked"]


def test_a_forced_release_of_a_fair_lock_hands_it_to_the_next_waiter(cloud, table, capsys):
    from locked_workflow.state_machines import fair_protocol as fp

    holder = LockClient(table, namespace="fair", dynamodb=cloud.dynamodb, fair=True).acquire("q", lease=60)
    waiter = "client:h:1:w#1"
    _fair_queue(cloud, table, [(waiter, f"{fp.CLIENT_LEASE_PREFIX}{int(time.time() * 1000) + 60_000}")])
    code, out, _ = run(cloud, capsys, "locks", "release", "q", "--namespace", "fair", "--table", table, "--force",
                       "--json")
    item = cloud.dynamodb.get_item(TableName=table, Key={"pk": {"S": "fair#q"}}, ConsistentRead=True)["Item"]
    assert code == 0 and json.loads(out)["released"] and item["owner"]["S"] == waiter != holder.owner
    assert fp.counters(item) == (1, 1) and int(item["fence"]["N"]) == holder.fence + 1


def test_clear_head_takes_a_dead_head_out_of_a_fair_queue_and_hands_the_free_lock_on(cloud, table, capsys):
    from locked_workflow.state_machines import fair_protocol as fp

    LockClient(table, namespace="fair", dynamodb=cloud.dynamodb, fair=True).acquire("q", lease=60)
    cloud.dynamodb.update_item(TableName=table, Key={"pk": {"S": "fair#q"}}, UpdateExpression="REMOVE #o",
                               ExpressionAttributeNames={"#o": "owner"})  # free: its head should have taken it
    dead, waiter = "arn:aws:states:us-east-1:123456789012:execution:m:gone#1", "client:h:1:w#2"
    _fair_queue(cloud, table, [(dead, "token-of-a-stopped-execution"),
                               (waiter, f"{fp.CLIENT_LEASE_PREFIX}{int(time.time() * 1000) + 60_000}")])
    code, out, _ = run(cloud, capsys, "locks", "clear-head", "q", "--namespace", "fair", "--table", table, "--json")
    item = cloud.dynamodb.get_item(TableName=table, Key={"pk": {"S": "fair#q"}}, ConsistentRead=True)["Item"]
    assert code == 0 and json.loads(out)["cleared"]
    assert item["owner"]["S"] == waiter and fp.counters(item) == (2, 2)  # the dead head skipped, the next granted
    code, out, _ = run(cloud, capsys, "locks", "clear-head", "q", "--namespace", "fair", "--table", table, "--json")
    assert code == 0 and not json.loads(out)["cleared"]  # nobody queues any more


def test_a_read_write_locks_readers_are_shown_and_one_is_released_by_name(cloud, table, capsys):
    """A shared hold: `show` lists its readers, each with its own lease; `release` needs
    `--reader`, removes only that reader's hold, and the last reader out hands the key to the
    writer queued behind (a polling client: granted, it claims at its next look)."""
    import threading

    from locked_workflow.state_machines import fair_protocol as fp

    def rw():
        return LockClient(table, namespace="rw", dynamodb=cloud.dynamodb, stepfunctions=cloud.stepfunctions,
                          read_write=True)

    first, second = rw().acquire("q", shared=True, lease=60), rw().acquire("q", shared=True, lease=60)
    code, out, _ = run(cloud, capsys, "locks", "show", "q", "--namespace", "rw", "--table", table, "--json")
    shown = json.loads(out)
    assert code == 0 and shown["mode"] == "shared" and shown["state"] == "held" and shown["owner"] is None
    assert sorted(r["owner"] for r in shown["readers"]) == sorted([first.owner, second.owner])
    assert {r["state"] for r in shown["readers"]} == {"held"}
    code, out, _ = run(cloud, capsys, "locks", "list", "--table", table, "--held", "--json")
    assert [(r["key"], r["mode"], len(r["readers"])) for r in json.loads(out) if r["namespace"] == "rw"] == [
        ("q", "shared", 2)]
    code, out, _ = run(cloud, capsys, "locks", "show", "q", "--namespace", "rw", "--table", table)
    assert "readers: 2" in out and f"    {first.owner} (held, since " in out
    code, out, _ = run(cloud, capsys, "locks", "list", "--table", table)
    assert "rw#q: held, fence None, shared by 2 reader(s)" in out
    # a writer queues behind the readers
    got = {}
    writer = threading.Thread(target=lambda: got.update(lease=rw().acquire("q", wait=60, poll_interval=0.1)))
    writer.start()
    deadline = time.time() + 60
    while fp.counters(item(cloud, table, "rw#q")) != (0, 1):
        assert time.time() < deadline
        time.sleep(0.05)
    code, out, err = run(cloud, capsys, "locks", "release", "q", "--namespace", "rw", "--table", table, "--force")
    assert code == 1 and "give --reader OWNER" in err
    code, out, err = run(cloud, capsys, "locks", "release", "q", "--namespace", "rw", "--table", table, "--force",
                         "--reader", "client:nobody#1")
    assert code == 1 and "holds no shared hold" in err
    code, out, _ = run(cloud, capsys, "locks", "release", "q", "--namespace", "rw", "--table", table,
                       "--reader", first.owner, "--json")
    assert code == cli.REFUSED and not json.loads(out)["released"]
    code, out, _ = run(cloud, capsys, "locks", "release", "q", "--namespace", "rw", "--table", table, "--force",
                       "--reader", first.owner, "--json")
    assert code == 0 and json.loads(out)["released"]
    assert sorted(rw_entries(item(cloud, table, "rw#q"))) == [second.owner]  # only that reader's hold went
    rw().release(second)  # the last reader: the key goes to the queued writer
    writer.join(60)
    assert got["lease"].ticket == 1 and item(cloud, table, "rw#q")["owner"]["S"] == got["lease"].owner
    code, out, _ = run(cloud, capsys, "locks", "release", "q", "--namespace", "rw", "--table", table, "--force",
                       "--json")
    assert code == 0 and json.loads(out)["released"]  # a writer's forced release, as a mutex's
    assert "owner" not in item(cloud, table, "rw#q")


def rw_entries(lock_item: dict) -> dict:
    from locked_workflow.state_machines import shared_protocol as rwp

    return rwp.readers_of(lock_item)
