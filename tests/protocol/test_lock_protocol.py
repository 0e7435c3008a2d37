"""The protocol's JSONata pieces, evaluated with jsonata-python, and its expression helpers: the
key, the clock and lease, the wait loop, the write expressions. (A section's entry, re-raising,
liveness, the janitor and presence: ``test_lock_protocol_section.py``.)"""

from __future__ import annotations

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
