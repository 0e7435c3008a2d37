"""The protocol's JSONata pieces around a section, evaluated with jsonata-python: the section's
entry (an owner per acquisition, the redrive gate, re-entrancy), re-raising, the liveness check,
the janitor's reading of a history, and the presence writes of a section cancelled by a sibling
branch. (The key, the clock, the wait loop and the write expressions: ``test_lock_protocol.py``.)"""

from __future__ import annotations

import json
import time

import pytest

from locked_workflow.state_machines import lock_protocol as p
from test_lock_protocol import evaluate

# ---- the section's entry: owner per acquisition, redrive gate, re-entrancy ---------------

EXECUTION = "arn:aws:states:us-east-1:1:execution:sm:run-1"


def entry(input_document, *, redrive_count=0, enclosing=(), **variables):
    expression = p.section_entry_expression(
        key_expression_=p.key_expression("$states.input.id", "c"),
        enclosing_lock_variables=list(enclosing),
    )
    context = {"Execution": {"Id": EXECUTION, "RedriveCount": redrive_count}}
    return evaluate(expression, states={"input": input_document, "context": context}, **variables)


def test_entry_draws_a_new_owner_per_acquisition_that_names_the_execution():
    before = int(time.time() * 1000)
    first, second = entry({"id": "1"}), entry({"id": "1"})
    assert first["key"] == "c#1" and first["input"] == {"id": "1"}
    assert before <= first[p.REQUESTED_AT] <= int(time.time() * 1000) + 1  # the wait starts now
    assert first["owner"] != second["owner"]  # Map iterations / branches are different holders
    assert p.owner_execution(first["owner"]) == EXECUTION
    assert "reentered" not in first


def test_entry_refuses_a_bad_key():
    with pytest.raises(Exception, match="Lock.InvalidKey: the lock key is missing"):
        entry({})


def test_a_redriven_entry_is_not_gated():
    """No redrive gate in the entry: a redriven Parallel that evaluates its Arguments again must
    not send a section whose work had succeeded back to acquire (and work) again."""
    assert entry({"id": "1"}, redrive_count=1)["key"] == "c#1"
    assert entry({"id": "1"}, redrive_count=2, lockRedrives=1)["key"] == "c#1"


def test_a_release_found_not_mine_was_mine_only_before_anyone_could_take_it_over():
    """After a lost response, the lease bounds a takeover; after a redrive since the acquire
    (the execution stopped in between), also the work's end + the stop grace."""
    now = int(time.time() * 1000)
    check = p.released_before_takeover_expression("lock", "lockDone")

    def released(*, generation: int, redrives: int, expires_in: int, done_in: int | None) -> bool:
        lock = {"expiresAt": now + expires_in, p.GENERATION: generation}
        done = {} if done_in is None else {"lockDone": {"until": now + done_in, p.GENERATION: generation}}
        return evaluate(check, states={"context": {"Execution": {"RedriveCount": redrives}}}, lock=lock, **done)

    assert released(generation=0, redrives=0, expires_in=60_000, done_in=None)  # a retry, lease on
    assert not released(generation=0, redrives=0, expires_in=-1, done_in=None)  # lease over
    assert released(generation=0, redrives=1, expires_in=60_000, done_in=5_000)  # redriven within the grace
    assert not released(generation=0, redrives=1, expires_in=60_000, done_in=-1)  # grace over: cannot tell
    assert not released(generation=0, redrives=1, expires_in=60_000, done_in=None)  # work's end unknown
    assert not released(generation=1, redrives=2, expires_in=-1, done_in=5_000)  # lease over
    # work that ended after the redrive (resumed in a Wait): its end says nothing of the stop
    lock = {"expiresAt": now + 60_000, p.GENERATION: 0}
    late = {"until": now + 5_000, p.GENERATION: 1}
    assert not evaluate(check, states={"context": {"Execution": {"RedriveCount": 1}}}, lock=lock, lockDone=late)
    resumed = p.redriven_since_acquired_expression("lock")
    context = lambda n: {"context": {"Execution": {"RedriveCount": n}}}  # noqa: E731
    assert evaluate(resumed, states=context(1), lock={p.GENERATION: 0})
    assert not evaluate(resumed, states=context(1), lock={p.GENERATION: 1})
    assert evaluate(resumed, states=context(0), lock={})  # no generation: not trusted
    # a refused *first* release: released only if a redrive resumed it, within the bound
    first = p.resumed_release_applied_expression("lock", "lockDone")
    done = {"until": now + 5_000, p.GENERATION: 0}
    assert evaluate(first, states=context(1), lock=lock, lockDone=done)
    assert not evaluate(first, states=context(0), lock=lock, lockDone=done)  # not resumed: Lock.Lost
    assert not evaluate(first, states=context(1), lock=lock, lockDone={**done, "until": now - 1})


def test_entry_passes_through_an_enclosing_hold_of_the_same_key_only():
    outer = {"key": "c#1", "owner": f"{EXECUTION}#x", "fence": 4}
    assert entry({"id": "1"}, enclosing=["outer"], outer=outer)["reentered"] == outer
    assert "reentered" not in entry({"id": "2"}, enclosing=["outer"], outer=outer)
    # nearest enclosing section first
    inner = {"key": "c#1", "owner": f"{EXECUTION}#y", "fence": 5}
    assert entry({"id": "1"}, enclosing=["near", "far"], near=inner, far=outer)["reentered"] == inner


def test_reentered_sections_signal_instead_of_writing():
    acquire = p.acquire_arguments(lease_ms=1000, grace_ms=0, reentrant=True)
    key = p.unwrap_jsonata(acquire["Key"]["pk"]["S"])
    assert evaluate(key, states={"input": {"key": "c#1"}}) == "c#1"
    with pytest.raises(Exception, match=p.SIGNAL_REENTERED):
        evaluate(key, states={"input": {"key": "c#1", "reentered": {"key": "c#1"}}})
    release_key = p.unwrap_jsonata(p.release_arguments(lock_variable="lock", reentrant=True)["Key"]["pk"]["S"])
    assert evaluate(release_key, lock={"key": "c#1"}) == "c#1"
    with pytest.raises(Exception, match=p.SIGNAL_REENTERED):
        evaluate(release_key, lock={"key": "c#1", "reentered": True})


# ---- re-raising, liveness, janitor ----------------------------------------------------------


@pytest.mark.parametrize(
    "error, cause, expected_error, expected_cause",
    [
        ("States.Timeout", "took too long", "Lock.States.Timeout", {"Error": "States.Timeout", "Cause": "took too long"}),
        ("States.QueryEvaluationError", "bad", "Lock.States.QueryEvaluationError", {"Error": "States.QueryEvaluationError", "Cause": "bad"}),
        ("StaleFenceError", "older fence", "StaleFenceError", "older fence"),
        ("Lock.Timeout", "inner wait", "Lock.Timeout", "inner wait"),
    ],
)
def test_rethrow_renames_only_states_errors(error, cause, expected_error, expected_cause):
    states = {"input": {"Error": error, "Cause": cause}}
    assert evaluate(p.rethrow_error_expression(), states=states) == expected_error
    got = evaluate(p.rethrow_cause_expression(), states=states)
    assert (json.loads(got) if isinstance(expected_cause, dict) else got) == expected_cause


@pytest.mark.parametrize(
    "status, ended_ago_ms, grace_ms, stale",
    [
        ("RUNNING", None, 0, False),
        ("PENDING_REDRIVE", 60_000, 0, False),  # about to run again: alive
        ("ABORTED", 60_000, 10_000, True),
        ("ABORTED", 5_000, 10_000, False),  # its Lambda may still run
        ("TIMED_OUT", 20_000, 10_000, True),
        ("FAILED", 1_000, 0, True),
    ],
)
def test_liveness_marks_a_holder_stale_only_after_its_grace(status, ended_ago_ms, grace_ms, stale):
    owner = f"{EXECUTION}#abc"
    result = {"Status": status}
    if ended_ago_ms is not None:
        result["StopDate"] = int(time.time() * 1000) - ended_ago_ms
    got = evaluate(
        p.after_liveness_check_expression("w", "h"),
        w={"since": 1, "rounds": 2}, h={"owner": owner, "grace": grace_ms}, states={"result": result},
    )
    assert got["rounds"] == 2
    assert got.get("stale") == (owner if stale else None)


def test_liveness_reads_iso_stop_dates_too():
    result = {"Status": "ABORTED", "StopDate": "2020-01-01T00:00:00.000Z"}
    got = evaluate(p.after_liveness_check_expression("w", "h"), w={}, h={"owner": "o", "grace": 0},
                   states={"result": result})
    assert got["stale"] == "o"


def _at(ms):
    """A history event's timestamp as boto3 returns it."""
    import datetime

    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)


def _scheduled(ts_ms, table, key, owner, condition=p.ACQUIRE.condition):
    """A TaskScheduled history event as boto3 returns it."""
    parameters = {"TableName": table, "Key": {"pk": {"S": key}}, "ConditionExpression": condition,
                  "ExpressionAttributeValues": {":me": {"S": owner}}}
    return {"type": "TaskScheduled", "timestamp": _at(ts_ms),
            "taskScheduledEventDetails": {"resourceType": "dynamodb", "resource": "updateItem",
                                          "parameters": json.dumps(parameters)}}


def test_janitor_finds_every_acquisition_attempt_at_or_before_the_end_once():
    events = [
        _scheduled(1000, "locks", "c#1", "e#a"),
        _scheduled(1100, "locks", "c#1", "e#a"),  # a retry of the same acquisition
        _scheduled(1200, "locks", "c#2", "e#b"),  # a Map iteration's own acquisition
        _scheduled(1300, "other", "c#3", "e#c"),  # another table
        _scheduled(1400, "locks", "c#4", "e#d", condition=p.RELEASE.condition),  # a release
        _scheduled(5000, "locks", "c#5", "e#e"),  # at the very end
        _scheduled(9000, "locks", "c#1", "e#z"),  # after the end: a redriven run's acquisition
        {"type": "TaskStateEntered", "timestamp": _at(1000)},
    ]
    tasks = p.dynamodb_tasks_scheduled(iter(events), ended_at_ms=5000)
    assert p.acquisitions_in_history(tasks, table_name="locks") == [("c#1", "e#a"), ("c#2", "e#b"), ("c#5", "e#e")]
    assert p.acquisitions_in_history(p.dynamodb_tasks_scheduled([], ended_at_ms=5000), table_name="locks") == []


def test_janitor_says_so_when_the_history_hides_an_acquires_parameters():
    event = _scheduled(1000, "locks", "c#1", "e#a")
    del event["taskScheduledEventDetails"]["parameters"]  # read without includeExecutionData
    with pytest.raises(p.HistoryUnreadable, match="includeExecutionData"):
        p.dynamodb_tasks_scheduled([event], ended_at_ms=5000)


def test_retire_touches_only_an_acquisition_made_at_or_before_the_end():
    assert p.RETIRE.condition.endswith(f"#{p.ACQUIRED_AT} <= :endedAt")
    assert f"#{p.OWNER} = :owner" in p.RETIRE.condition


# ---- presence (a section cancelled by a sibling branch) ----------------------------------

def _presence_table():
    """A lock table on moto's DynamoDB, and a function applying one of the lock's writes."""
    import boto3
    from moto import mock_aws

    mock = mock_aws()
    mock.start()
    client = boto3.client("dynamodb", region_name="us-east-1")
    client.create_table(TableName="locks", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                        BillingMode="PAY_PER_REQUEST")

    def write(lock_write: p.LockWrite, **values) -> bool:
        try:
            client.update_item(
                TableName="locks", Key={"pk": {"S": "k"}}, UpdateExpression=lock_write.update,
                ConditionExpression=lock_write.condition, ExpressionAttributeNames=lock_write.attribute_names(),
                ExpressionAttributeValues={f":{k}": ({"N": str(v)} if isinstance(v, int) else {"S": v})
                                           for k, v in values.items()},
            )
            return True
        except client.exceptions.ConditionalCheckFailedException:
            return False

    return mock, client, write


def test_presence_writes_order_registration_departure_and_abandonment():
    """Walk the presence writes of one acquisition: what each allows, and what it refuses."""
    mock, client, write = _presence_table()
    try:
        now = int(time.time() * 1000)
        me, acquired = "arn:aws:states:us-east-1:1:execution:m:e#1", now - 60_000
        client.put_item(TableName="locks", Item={
            "pk": {"S": "k"}, "owner": {"S": me}, "acquiredAt": {"N": str(acquired)},
            "expiresAt": {"N": str(now + 600_000)}, "grace": {"N": "9000"}, "fence": {"N": "1"}})
        register = dict(me=me, acquiredAt=acquired)
        # another acquisition (same owner, another acquiredAt) registers nothing
        assert not write(p.PRESENT, me=me, acquiredAt=acquired + 1, token="T0", now=now)
        # a registration, then a second one of the same acquisition (a retried attempt) overwrites
        assert write(p.PRESENT, **register, token="T1", now=now - 50_000)
        assert write(p.PRESENT, **register, token="T2", now=now - 40_000)
        # a young closed token is not trusted; an old one is, once
        abandon = dict(owner=me, endedAt=now, token="T2")
        assert not write(p.ABANDONED, **abandon, settledBefore=now - 45_000)  # written 40 s ago
        assert not write(p.ABANDONED, **{**abandon, "token": "T1"}, settledBefore=now - 20_000)  # replaced
        assert write(p.ABANDONED, **abandon, settledBefore=now - 20_000)
        item = client.get_item(TableName="locks", Key={"pk": {"S": "k"}})["Item"]
        assert item["expiresAt"] == {"N": str(now + 9000)} and item["presenceClosed"] == {"N": str(acquired)}
        assert not write(p.ABANDONED, **{**abandon, "endedAt": now + 5000}, settledBefore=now)  # only once
        # after DEPART (or an abandonment) no token is registered any more for this acquisition
        assert write(p.DEPART, **register)
        assert not write(p.PRESENT, **register, token="T3", now=now)
        # a new acquisition starts over
        client.update_item(TableName="locks", Key={"pk": {"S": "k"}}, UpdateExpression="SET acquiredAt = :a",
                           ExpressionAttributeValues={":a": {"N": str(now)}})
        assert write(p.PRESENT, me=me, acquiredAt=now, token="T4", now=now)
    finally:
        mock.stop()


def test_the_liveness_check_probes_only_the_current_acquisitions_open_presence():
    item = {"pk": {"S": "k"}, "owner": {"S": "o"}, "grace": {"N": "9000"}, "acquiredAt": {"N": "5"},
            "presence": {"S": "T"}, "presenceOf": {"N": "5"}}

    def presence(**changes):
        return evaluate(p.holder_expression(), states={"result": {"Item": {**item, **changes}}})["presence"]

    assert presence() == "T"
    assert presence(presenceOf={"N": "4"}) is None  # an earlier acquisition's token
    assert presence(presenceClosed={"N": "5"}) is None  # departed, or abandoned once already
    assert presence(presenceClosed={"N": "4"}) == "T"
    assert presence(presence={"S": p.NO_PRESENCE}) is None
