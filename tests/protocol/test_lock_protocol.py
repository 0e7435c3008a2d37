"""The protocol's JSONata pieces, evaluated with jsonata-python, and its expression helpers."""

from __future__ import annotations

import json
import math
import time

import pytest

from locked_workflow.state_machines import lock_protocol as p


def evaluate(expression: str, **variables):
    """Evaluate as the local runtime does (jsonata-python plus Step Functions' own functions)."""
    from locked_workflow.testing.patches.jsonata_evaluator import evaluate as runtime_evaluate

    return runtime_evaluate(expression, variables)


def key_of(input_document, namespace="customer", user_expression="$states.input.detail.customerId"):
    return evaluate(p.key_expression(user_expression, namespace), states={"input": input_document})


# ---- key validation -------------------------------------------------------------------


def test_valid_key_is_namespaced():
    assert key_of({"detail": {"customerId": "c-42"}}) == "customer#c-42"


def test_stored_keys_are_unambiguous_across_namespaces():
    # namespace "" + key "customer#1" used to be the same item as namespace "customer" + key "1"
    assert key_of({"detail": {"customerId": "customer#1"}}, namespace="") == "#customer#1"
    assert key_of({"detail": {"customerId": "1"}}, namespace="customer") == "customer#1"
    assert p.namespaced("", "customer#1") != p.namespaced("customer", "1")


def test_namespaces_cannot_contain_the_separator():
    assert p.namespace_problem("customer") == ""
    assert "never '#'" in p.namespace_problem("a#b")
    assert p.namespace_problem(None)


def test_namespace_with_quote_is_escaped_in_jsonata():
    # not a valid namespace for the constructs, but the JSONata literal must still be safe
    assert key_of({"detail": {"customerId": "x"}}, namespace='it"s') == 'it"s#x'


@pytest.mark.parametrize(
    "detail, problem",
    [
        ({}, "is missing"),
        ({"customerId": ""}, "must not be empty"),
        ({"customerId": 42}, "must be a string, got: number"),
        ({"customerId": {"id": "c"}}, "must be a string, got: object"),
        ({"customerId": ["c"]}, "must be a string, got: array"),
        ({"customerId": True}, "must be a string, got: boolean"),
        ({"customerId": None}, "must be a string, got: null"),
        # 2040 bytes of key + "customer#" (9 bytes) = 2049 bytes
        ({"customerId": "x" * 2040}, "must be at most 2048 bytes of UTF-8 with its namespace prefix, got: 2049 bytes"),
        # 4-byte characters: 511 of them is 2044 bytes, + 9 = 2053 bytes (only 511 characters)
        ({"customerId": "\U0001F600" * 511}, "must be at most 2048 bytes of UTF-8 with its namespace prefix, got: 2053 bytes"),
    ],
)
def test_bad_keys_raise_invalid_key(detail, problem):
    with pytest.raises(Exception) as raised:
        key_of({"detail": detail})
    assert f"{p.ERROR_INVALID_KEY}: the lock key {problem}" in str(raised.value)
    # Python participants apply the same rules, with the same words
    if isinstance(detail.get("customerId"), str):
        assert problem in p.key_problem(detail["customerId"], "customer")


@pytest.mark.parametrize("key", ["k" * 2039, "\u00e9" * 1019, "\U0001F600" * 509 + "abc", "a b/c?d=e&f%g#h"])
def test_keys_up_to_2048_bytes_pass_counted_in_utf8(key):
    stored = "customer#" + key
    assert len(stored.encode("utf-8")) <= p.MAX_KEY_BYTES
    assert key_of({"detail": {"customerId": key}}) == stored
    assert p.key_problem(key, "customer") == ""


def test_utf8_byte_count_matches_python():
    for text in ["", "abc", "é", "\u20ac", "\U0001F600", "a%b#c d", "\u00e9\U0001F600x%"]:
        assert evaluate(p.utf8_bytes("$t"), t=text) == len(text.encode("utf-8")), text


def test_owner_execution_is_the_arn_before_the_separator():
    arn = "arn:aws:states:us-east-1:1:execution:sm:run-1"
    assert p.owner_execution(f"{arn}#5f0c") == arn
    assert p.owner_execution("client:host:1:abc#def") is None
    assert p.owner_execution(None) is None


def test_lock_key_template_must_be_jsonata():
    with pytest.raises(ValueError, match=r"`key` must be a JSONata template"):
        p.unwrap_jsonata("$.detail.customerId")
    with pytest.raises(ValueError, match=r"`key` must be a JSONata template"):
        p.unwrap_jsonata("{%  %}")
    assert p.unwrap_jsonata("{% $states.input.id %}") == "$states.input.id"


# ---- clock and lease ------------------------------------------------------------------


def test_lease_end_is_now_plus_lease_as_dynamodb_number():
    before = int(time.time() * 1000)
    end = evaluate(p.lease_end_expression(90_000))
    after = int(time.time() * 1000) + 1  # $millis() rounds, int() truncates
    assert isinstance(end, str)
    assert before + 90_000 <= int(end) <= after + 90_000


def test_lock_variable_reads_the_acquire_result():
    attributes = {
        "pk": {"S": "customer#1"},
        "owner": {"S": "arn:exec"},
        "fence": {"N": "7"},
        "acquiredAt": {"N": "1000"},
        "expiresAt": {"N": "61000"},
    }
    lock = evaluate(
        p.lock_variable_expression(), states={"result": {"Attributes": attributes}, "input": {"requestedAt": 400},
                                              "context": {"Execution": {"RedriveCount": 2}}}
    )
    assert lock == {
        "key": "customer#1", "owner": "arn:exec", "fence": 7, "acquiredAt": 1000, "expiresAt": 61000,
        "requestedAt": 400,  # from the entry record: the acquire's log line shows the wait
        "redriveCount": 2,  # the generation the acquisition was made in (the work's redrive guard)
    }


@pytest.mark.parametrize("lock, redrives, runs", [
    ({"redriveCount": 0}, None, True),      # never redriven (no RedriveCount in the context)
    ({"redriveCount": 1}, 1, True),         # acquired after the first redrive
    ({"redriveCount": 0}, 1, False),        # acquired before a redrive: the resumed task refuses
    ({}, 1, False),                         # no generation (variables lost): refuses
    (None, 0, False),                       # no $lock at all: refuses
])
def test_the_redrive_guard_lets_a_task_run_only_in_its_acquisitions_generation(lock, redrives, runs):
    guard = f"( {p.resumed_guard_expression('lock')}; 'ran' )"
    context = {"Execution": {} if redrives is None else {"RedriveCount": redrives}}
    variables = {"states": {"context": context}, **({"lock": lock} if lock is not None else {})}
    if runs:
        assert evaluate(guard, **variables) == "ran"
    else:
        with pytest.raises(Exception, match="Lock.Resumed: the execution was redriven"):
            evaluate(guard, **variables)


# ---- wait loop ------------------------------------------------------------------------


def test_wait_bookkeeping_starts_then_counts():
    entered = {"context": {"State": {"EnteredTime": "2026-11-22T03:00:00.250Z"}}}
    first = evaluate(p.wait_bookkeeping_expression("lockWait"), lockWait=None, states=entered)
    # waiting began when the acquire state was entered (before its retries), not at the Catch
    assert first == {"since": 1795316400250, "rounds": 1}
    second = evaluate(p.wait_bookkeeping_expression("lockWait"), lockWait=first, states=entered)
    assert second == {"since": first["since"], "rounds": 2}


def test_waited_enough_only_after_max_wait():
    now = int(time.time() * 1000)
    assert evaluate(p.waited_enough_expression("w", 10_000), w={"since": now - 11_000, "rounds": 3})
    assert not evaluate(p.waited_enough_expression("w", 10_000), w={"since": now - 2_000, "rounds": 3})


def _waits(policy: p.WaitPolicy, rounds: int, remaining_ms: int = 10**9, samples: int = 300) -> list[int]:
    since = int(time.time() * 1000)
    expression = p.wait_seconds_expression(policy, "w", remaining_ms)
    return [evaluate(expression, w={"since": since, "rounds": rounds}) for _ in range(samples)]


@pytest.mark.parametrize("rounds", [1, 2, 3, 4, 6, 12])
def test_wait_follows_backoff_with_equal_jitter_and_cap(rounds):
    policy = p.WaitPolicy(first_interval=1, backoff_rate=2.0, max_interval=8, jitter=True)
    nominal = min(8, 2 ** (rounds - 1))
    waits = _waits(policy, rounds)
    assert all(isinstance(w, int) for w in waits)
    assert min(waits) >= max(1, math.floor(nominal / 2))
    assert max(waits) <= nominal
    if nominal >= 4:  # jitter actually spreads waiters out
        assert len(set(waits)) >= 2


def test_wait_without_jitter_is_exact_backoff_and_capped():
    policy = p.WaitPolicy(first_interval=2, backoff_rate=3.0, max_interval=10, jitter=False)
    assert set(_waits(policy, 1, samples=5)) == {2}
    assert set(_waits(policy, 2, samples=5)) == {6}
    assert set(_waits(policy, 3, samples=5)) == {10}


def test_wait_never_overshoots_the_deadline_by_more_than_a_second():
    policy = p.WaitPolicy(first_interval=4, backoff_rate=1.0, max_interval=4, jitter=False)
    assert set(_waits(policy, 1, remaining_ms=1_500, samples=5)) == {2}
    assert set(_waits(policy, 1, remaining_ms=-500, samples=5)) == {1}


def test_shortest_wait_matches_the_expression_lower_bound():
    policy = p.WaitPolicy(first_interval=1, backoff_rate=1.5, max_interval=5, jitter=True)
    for rounds in range(1, 8):
        assert min(_waits(policy, rounds, samples=200)) >= policy.shortest_wait(rounds)


def test_worst_case_events_grow_with_max_wait_and_shrink_with_interval():
    fast = p.WaitPolicy(first_interval=1, backoff_rate=1.0, max_interval=1, jitter=False, retries_per_round=2)
    slow = p.WaitPolicy(first_interval=1, backoff_rate=2.0, max_interval=30, jitter=True)
    per_round = p.EVENTS_PER_ROUND + p.EVENTS_PER_ATTEMPT * (2 + 1)
    assert p.worst_case_wait_events(fast, 0) == 0
    assert p.worst_case_wait_events(fast, 100) == (100 + 1) * per_round
    assert p.worst_case_wait_events(slow, 3600) < p.worst_case_wait_events(fast, 3600)


def test_worst_case_events_count_the_liveness_path():
    # issue: WaitPolicy(1, 1.5, 1, retries_per_round=0) with max_wait 2200 s was accepted at
    # 19,809 events although liveness rounds add 12 events each; every round now waits too.
    policy = p.WaitPolicy(first_interval=1, backoff_rate=1.5, max_interval=1, retries_per_round=0)
    without = p.worst_case_wait_events(policy, 2200)
    every_2nd = p.worst_case_wait_events(policy, 2200, liveness_check_every=2)
    every = p.worst_case_wait_events(policy, 2200, liveness_check_every=1)
    assert without < 20_000 < every_2nd < every
    assert every - without == p.worst_case_rounds(policy, 2200) * p.EVENTS_PER_LIVENESS_CHECK


def test_timeout_bound_is_max_wait_plus_one_round_of_polls():
    policy = p.WaitPolicy(first_interval=1, backoff_rate=1.5, max_interval=2, retries_per_round=2)
    assert p.timeout_bound_s(policy, 12) == 12 + 1 + 1.5
    assert p.timeout_bound_s(policy, 12) <= 1.5 * 12


def test_retries_per_round_keep_a_round_within_half_of_max_wait():
    policy = p.WaitPolicy(first_interval=1, backoff_rate=2.0, max_interval=8, retries_per_round=4)
    assert policy.retries_for(3600) == 4
    assert policy.retries_for(4) == 1  # 1 <= 2 < 1 + 2
    assert policy.retries_for(1) == 0


# ---- expressions ----------------------------------------------------------------------


def test_writes_declare_exactly_the_placeholders_they_use():
    assert p.ACQUIRE.attribute_names() == {
        "#owner": "owner", "#acquiredAt": "acquiredAt", "#expiresAt": "expiresAt", "#grace": "grace",
        "#fence": "fence",
    }
    assert set(p.ACQUIRE.value_names()) == {":me", ":stale", ":now", ":expiresAt", ":grace", ":one"}
    assert set(p.RETIRE.value_names()) == {":owner", ":endedAt"}
    assert set(p.RELEASE.value_names()) == {":me", ":fence"}
    release = p.release_arguments(lock_variable="lock")
    assert set(release["ExpressionAttributeValues"]) == {":me", ":fence"}
    assert release["Key"] == {"pk": {"S": "{% $lock.key %}"}}
    # the removed attributes as they were (acquiredAt: the hold, on the release's log line)
    assert release["ReturnValues"] == "UPDATED_OLD"


def test_acquire_arguments_return_the_new_item():
    arguments = p.acquire_arguments(lease_ms=5000, grace_ms=7000)
    assert arguments["ExpressionAttributeValues"][":me"] == {"S": "{% $states.input.owner %}"}
    assert arguments["ExpressionAttributeValues"][":grace"] == {"N": "7000"}
    assert arguments["ReturnValues"] == "ALL_NEW"
    assert arguments["ExpressionAttributeValues"][":one"] == {"N": "1"}
    assert "5000" in arguments["ExpressionAttributeValues"][":expiresAt"]["N"]


def test_builder_refuses_values_that_do_not_match_the_expression():
    with pytest.raises(AssertionError, match="missing"):
        p.update_item_arguments("k", p.RELEASE, {":me": {"S": "x"}})


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
