"""The read/write lock's janitor on both DynamoDB backends: what it finds of an execution (its
parks in both queues, its own holds, its presence rows), the rows it marks left and forgets,
its retire (the end plus the grace, never longer), its writes tried again after a transaction
conflict, and its IAM. (The stack's fixture: ``test_shared_lock.py``'s; this file is in
``test_shared_recovery.py``'s group.)"""

from __future__ import annotations

import json

from locked_workflow.state_machines import fair_protocol as fp
from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import shared_protocol as sp
from template_iam import actions, role_statements
from test_shared_lock import NAMESPACE, entered_states, new_key, probe_of, rw  # noqa: F401 - rw: the stack's fixture
from test_shared_lock import shared_synth  # noqa: F401 - the fixture template reads
from test_shared_lock_template import template  # noqa: F401 - the template's fixture


def test_the_janitor_marks_a_stopped_parked_writers_row_left_and_the_handoff_skips_it(rw):
    """A writer stopped while parked (its row: a token that will never answer): the janitor
    finds its park - a TransactWriteItems - in its history and marks the row left. The holder's
    release then skips it and grants the reader behind it at once, instead of granting the dead
    writer (whose wake-up fails) and leaving the reader to wait out the claim window."""
    k = new_key()
    holder = rw.start("WriterHold", {"key": k, "gate": "w0", "workMs": 1})
    rw.until(lambda: rw.gate_token(k, "w0"))
    dead = rw.start("Writer", {"key": k, "workMs": 1})
    rw.until(lambda: rw.parked(k) == ["write"])
    reader = rw.start("Reader", {"key": k, "workMs": 1})
    rw.until(lambda: rw.parked(k) == ["write", "read"])
    served, _ = fp.counters(rw.lock(k))
    row_key = fp.row_key(p.namespaced(NAMESPACE, k), served + 1)
    rw.cloud.stop_execution(dead)
    assert rw.cloud.wait_for(dead, timeout=60).status == "ABORTED"

    def row():
        return rw.cloud.dynamodb.get_item(TableName=rw.table("LocksTable"), Key={"pk": {"S": row_key}},
                                          ConsistentRead=True).get("Item", {})
    rw.until(lambda: fp.LEFT in row())  # the janitor marked it
    assert row()[p.OWNER]["S"].startswith(dead + "#") and fp.TOKEN not in row()
    rw.open(k, "w0")
    h, r = rw.wait([holder, reader])
    assert (h.status, r.status) == ("SUCCEEDED", "SUCCEEDED"), r.cause
    released = entered_states(h)
    assert "Lock.Release.Skip" in released and "Lock.Release.GrantWrite" not in released
    assert "Lock.Release.GrantRead" in released and "Lock.Claim" in entered_states(r)
    assert probe_of(r)["fence"] == probe_of(h)["fence"] and rw.free(k)


def test_the_janitor_finds_an_executions_parks_of_both_queues():
    """One finder for the fair queue's park (an UpdateItem) and the read/write queue's (the
    row's Update in a TransactWriteItems); another table's, or a ConditionCheck's, is not one."""
    me, table = "arn:x:execution:m:a#1", "Locks"
    transact = sp.park_transaction(table, "rw#k", 7, sp.WRITE, {":me": {"S": me}, ":token": {"S": "t"},
                                                               ":lease": {"N": "1"}, ":grace": {"N": "0"}},
                                   {n: {"S": "x"} for n in sp.PARK_UNLESS[sp.WRITE].value_names()})
    fair_park = {"TableName": table, **fp.arguments("!3!f#k", fp.PARK, {
        ":me": {"S": me}, ":token": {"S": "t"}, ":lease": {"N": "1"}, ":grace": {"N": "0"}})}
    tasks = [p.ScheduledTask("transactWriteItems.waitForTaskToken", {"TransactItems": transact}),
             p.ScheduledTask("updateItem", fair_park)]
    assert fp.enqueues_in_history(tasks, table_name=table) == [("!7!rw#k", me), ("!3!f#k", me)]
    assert fp.enqueues_in_history(tasks, table_name="Other") == []


def test_the_janitor_finds_only_an_executions_own_holds():
    me, other, table = "arn:x:execution:m:a#1", "arn:x:execution:m:b#2", "Locks"

    def update(write, *, reader=None, values=None):
        return p.ScheduledTask("updateItem", {"TableName": table, **sp.arguments(
            "rw#k", write, {n: {"S": v} for n, v in (values or {}).items()} | {
                n: {"S": "x"} for n in write.value_names() if n not in (values or {})}, reader=reader)})

    tasks = [update(sp.FAST_READ, reader=me, values={":me": me}),
             update(sp.GRANT_READ, reader=other, values={":me": me}),  # a handoff to another reader
             update(sp.CLAIM_WRITE, values={":me": me})]
    assert sp.holds_in_history(tasks, table_name=table) == [("rw#k", me, sp.READ), ("rw#k", me, sp.WRITE)]
    assert sp.holds_in_history(tasks, table_name="Other") == []


def test_the_janitor_finds_an_executions_presence_rows():
    """Its registrations (a ``.waitForTaskToken`` UpdateItem) and departures (which write the
    row when no registration did), once each; not another table's, nor a lock item's write."""
    table, owner = "Locks", "arn:x:execution:m:a#1"
    row = sp.presence_row_key(owner)

    def update(write, key: str = row, resource: str = "updateItem", in_table: str = table):
        values = {n: {"S": "x"} for n in write.value_names()}
        return p.ScheduledTask(resource, {"TableName": in_table, **sp.arguments(key, write, values, reader=owner)})

    tasks = [update(sp.PRESENT_ROW, resource="updateItem.waitForTaskToken"), update(sp.DEPART_ROW),
             update(sp.DEPART_ROW, key=sp.presence_row_key("arn:x:execution:m:a#2")),
             update(sp.PRESENT_ROW, in_table="Other", resource="updateItem.waitForTaskToken"),
             update(sp.FAST_READ, key="rw#k")]
    assert sp.presence_rows_in_history(tasks, table_name=table) == [row, sp.presence_row_key("arn:x:execution:m:a#2")]
    assert sp.presence_rows_in_history(tasks, table_name="Nothing") == []


def test_the_janitor_forgets_a_presence_row_unless_registered_after_the_end(rw):
    """FORGET_ROW on DynamoDB: a row registered at or before the end goes, and a departed-only
    row (no registration); a redriven hold's row (registered after the end) stays; no row, or a
    second delivery of the event, deletes nothing."""
    from locked_workflow.lambdas.lock_janitor.logic import forget_row
    from locked_workflow.lambdas.lock_janitor.settings import JanitorSettings

    end = 1_700_000_000_000
    rows = {"registered before the end": {p.PRESENCE: {"S": "T"}, p.PRESENCE_OF: {"N": "5"}, p.PRESENCE_AT: {"N": str(end - 1)}},
            "registered at the end": {p.PRESENCE: {"S": "T"}, p.PRESENCE_OF: {"N": "5"}, p.PRESENCE_AT: {"N": str(end)}},
            "departed only": {p.PRESENCE_CLOSED: {"N": "5"}},
            "a redriven hold's": {p.PRESENCE: {"S": "T"}, p.PRESENCE_OF: {"N": "5"}, p.PRESENCE_AT: {"N": str(end + 1)},
                                  p.PRESENCE_CLOSED: {"N": "5"}},
            "no row": None}
    ddb, table, tag = rw.cloud.dynamodb, rw.table("LocksTable"), new_key()

    def row_key(case: str) -> str:
        return sp.presence_row_key(f"{case}#{tag}")

    for case, row in rows.items():
        if row is not None:
            ddb.put_item(TableName=table, Item={"pk": {"S": row_key(case)}, **row})
    settings = JanitorSettings(table_name=table)
    forgotten = {case: forget_row(ddb, settings, row_key(case), end) for case in rows}
    again = {case: forget_row(ddb, settings, row_key(case), end) for case in rows}
    left = {case for case in rows
            if ddb.get_item(TableName=table, Key={"pk": {"S": row_key(case)}}, ConsistentRead=True).get("Item")}
    assert forgotten == {"registered before the end": True, "registered at the end": True, "departed only": True,
                         "a redriven hold's": False, "no row": False}
    assert not any(again.values()) and left == {"a redriven hold's"}


def test_the_janitors_retire_shortens_a_lease_to_the_end_plus_the_grace_and_never_lengthens_it(rw):
    """The janitor reads the lock item and retires that exact acquisition to its end + its stop
    grace only if that is sooner than its lease's end: a holder stopped near its lease's end
    keeps its lease (the protocol's RETIRE, the negative control, would lengthen it). A writer
    (RETIRE_BY) and a reader entry (RETIRE_GONE_READER); not another owner's, not an
    acquisition made after the end, and a duplicate event retires nothing more."""
    from locked_workflow.lambdas.lock_janitor.logic import retire, retire_reader
    from locked_workflow.lambdas.lock_janitor.settings import JanitorSettings

    ddb, table = rw.cloud.dynamodb, rw.table("LocksTable")
    settings, end, grace, me = JanitorSettings(table_name=table), 1_700_000_000_000, 60_000, "arn:x:execution:m:e#1"
    hold = lambda acquired, expires: {p.ACQUIRED_AT: {"N": str(acquired)}, p.EXPIRES_AT: {"N": str(expires)},  # noqa: E731
                                      p.GRACE: {"N": str(grace)}}
    cases = {  # name -> (acquiredAt, expiresAt, owner of the write)
        "sooner": (end - 5_000, end + 600_000, me), "the lease ends first": (end - 5_000, end + 30_000, me),
        "made after the end": (end + 1, end + 600_000, me), "another owner's": (end - 5_000, end + 600_000, "o#2"),
    }
    out = {}
    for reader in (False, True):
        for case, (acquired, expires, owner) in cases.items():
            k = p.namespaced(NAMESPACE, new_key())
            item = ({p.OWNER: {"S": sp.SHARED}, sp.READERS: {"N": "1"}, sp.reader_attribute(owner): {"M": hold(acquired, expires)}}
                    if reader else {p.OWNER: {"S": owner}, **hold(acquired, expires)})
            ddb.put_item(TableName=table, Item={"pk": {"S": k}, **item})
            write = retire_reader if reader else retire
            done = [write(ddb, settings, k, me, end), write(ddb, settings, k, me, end)]  # (a duplicate event)
            after = ddb.get_item(TableName=table, Key={"pk": {"S": k}}, ConsistentRead=True)["Item"]
            entry = sp.readers_of(after)[owner] if reader else after
            out[("reader" if reader else "writer", case)] = (done, int(entry[p.EXPIRES_AT]["N"]) - end)
    for kind in ("writer", "reader"):
        assert out[(kind, "sooner")] == ([True, False], grace)
        assert out[(kind, "the lease ends first")] == ([False, False], 30_000)  # its lease, not end + grace
        assert out[(kind, "made after the end")] == ([False, False], 600_000)
        assert out[(kind, "another owner's")] == ([False, False], 600_000)
    # the negative control: the protocol's RETIRE (the liveness check's) sets end + grace whatever the lease
    k = p.namespaced(NAMESPACE, new_key())
    ddb.put_item(TableName=table, Item={"pk": {"S": k}, p.OWNER: {"S": me}, **hold(end - 5_000, end + 30_000)})
    ddb.update_item(TableName=table, Key={"pk": {"S": k}}, UpdateExpression=p.RETIRE.update, ConditionExpression=p.RETIRE.condition,
                    ExpressionAttributeNames=p.RETIRE.attribute_names(),
                    ExpressionAttributeValues={":owner": {"S": me}, ":endedAt": {"N": str(end)}})
    lengthened = ddb.get_item(TableName=table, Key={"pk": {"S": k}}, ConsistentRead=True)["Item"][p.EXPIRES_AT]["N"]
    assert int(lengthened) - end == grace > 30_000


def test_every_janitor_write_is_tried_again_after_a_transaction_conflict(rw):
    """A janitor write whose item is in a transaction in flight (a waiter's park, a transfer)
    is refused with ``TransactionConflictException`` and nothing is written; botocore does not
    retry it, so the janitor must, like the clients (``client_lease.retry_conflicts``), or the
    ended execution's retire, presence row or queue row stays (fault matrix:
    ``janitor:shared_protocol.DEQUEUE`` x ``conflict``). Each write meets two conflicts, then
    does what it does without them."""
    from locked_workflow.lambdas.lock_janitor.logic import dequeue, forget_row, retire, retire_reader
    from locked_workflow.lambdas.lock_janitor.settings import JanitorSettings
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    ddb, table = rw.cloud.dynamodb, rw.table("LocksTable")
    settings, end, grace, me = JanitorSettings(table_name=table), 1_700_000_000_000, 60_000, "arn:x:execution:m:c#1"
    hold = {p.ACQUIRED_AT: {"N": str(end - 5_000)}, p.EXPIRES_AT: {"N": str(end + 600_000)}, p.GRACE: {"N": str(grace)}}
    writer, reader = p.namespaced(NAMESPACE, new_key()), p.namespaced(NAMESPACE, new_key())
    presence, queue_row = sp.presence_row_key(f"{me}-{new_key()}"), fp.row_key(p.namespaced(NAMESPACE, new_key()), 1)
    items = {writer: {p.OWNER: {"S": me}, **hold},
             reader: {p.OWNER: {"S": sp.SHARED}, sp.READERS: {"N": "1"}, sp.reader_attribute(me): {"M": hold}},
             presence: {p.PRESENCE: {"S": "T"}, p.PRESENCE_OF: {"N": "5"}, p.PRESENCE_AT: {"N": str(end - 1)}},
             queue_row: {p.OWNER: {"S": me}}}
    for key, item in items.items():
        ddb.put_item(TableName=table, Item={"pk": {"S": key}, **item})
    conflicts = [Fault(operation, p.TRANSACTION_CONFLICT, times=2, when=lambda params, key=key: params["Key"]["pk"]["S"] == key)
                 for operation, key in (("UpdateItem", writer), ("UpdateItem", reader), ("DeleteItem", presence),
                                        ("UpdateItem", queue_row))]
    writes = {"retire": lambda: retire(ddb, settings, writer, me, end),
              "retire_reader": lambda: retire_reader(ddb, settings, reader, me, end),
              "forget_row": lambda: forget_row(ddb, settings, presence, end),
              "dequeue": lambda: dequeue(ddb, settings, queue_row, me)}
    done = {}
    with dynamodb_faults(*conflicts) as log:
        for name, write in writes.items():
            try:
                done[name] = write()
            except Exception as error:  # noqa: BLE001 - today's defect: the conflict reaches the janitor
                done[name] = type(error).__name__
    assert done == {"retire": True, "retire_reader": True, "forget_row": True, "dequeue": True}
    assert log.injected == 8

    def read(key: str) -> dict:
        return ddb.get_item(TableName=table, Key={"pk": {"S": key}}, ConsistentRead=True).get("Item", {})
    assert int(read(writer)[p.EXPIRES_AT]["N"]) - end == grace
    assert int(sp.readers_of(read(reader))[me][p.EXPIRES_AT]["N"]) - end == grace
    assert read(presence) == {} and fp.LEFT in read(queue_row)


def test_only_a_janitor_of_holds_with_presence_rows_may_delete_and_only_those_rows(template):
    """The janitor of read/write sections with presence deletes presence rows (DeleteItem on the
    lock table, its partition keys starting with the row mark), and no other janitor deletes."""
    rendered = template.to_json()

    def janitor_statements(workflow: str) -> list[dict]:
        (role,) = [k for k, r in rendered["Resources"].items()
                   if k.startswith(f"{workflow}JanitorRole") and r["Type"] == "AWS::IAM::Role"]
        return role_statements(rendered, role)

    for section in ("MapReadersSection", "MapWritersSection"):
        (delete,) = [st for st in janitor_statements(section) if "dynamodb:DeleteItem" in actions(st)]
        assert actions(delete) == ["dynamodb:DeleteItem"] and ":table/" in json.dumps(delete["Resource"])
        assert delete["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{sp.PRESENCE_ROW_MARK}*"]}}
    # a workflow's own section has no presence (nothing of the machine's can cancel it), a mutex
    # keeps its presence on the lock item: their janitors delete nothing
    for workflow in ("Reader", "Writer", "Mutex"):
        assert not [st for st in janitor_statements(workflow) if "dynamodb:DeleteItem" in actions(st)], workflow


def test_a_stopped_writer_is_recovered_by_the_janitor(rw):
    """The writer is stopped at its gate, before its work wrote: it moved the fence (1) without a
    write, so the reader after it reads fence 1 while the probe's last write is none (0). That is
    the fault matrix's ``staleReads`` with no fault injected (triaged: the probe's strict count,
    not a defect); ``overtakenReads`` - a write during the read, or newer than the reader's fence -
    is what the matrix judges, and stays 0."""
    k = new_key()
    writer = rw.start("WriterHold", {"key": k, "gate": "w", "workMs": 1})
    rw.until(lambda: rw.gate_token(k, "w"))
    rw.cloud.stop_execution(writer)  # the janitor retires it: held for its stop grace, then free
    result = rw.wait([rw.start("Reader", {"key": k, "workMs": 1})])[0]
    assert result.status == "SUCCEEDED", result.cause
    assert probe_of(result)["fence"] == int(rw.lock(k)[p.FENCE]["N"]) == 1 and rw.free(k)
    assert probe_of(result)["read"]["lastFence"] == [0, 0]
    assert rw.probe(k).get("staleReads") == 1 and rw.probe(k).get("overtakenReads", 0) == 0
