"""The protocol's JSONata pieces, evaluated with jsonata-python, and its expression helpers."""

from __future__ import annotations

import math
import time

import jsonata as jsonata_lib
import pytest

from state_machines import lock_protocol as p


def evaluate(expression: str, **variables):
    compiled = jsonata_lib.Jsonata(expression)
    for name, value in variables.items():
        compiled.assign(name, value)
    return compiled.evaluate(None)


def key_of(input_document, namespace="customer", user_expression="$states.input.detail.customerId"):
    return evaluate(p.key_expression(user_expression, namespace), states={"input": input_document})


# ---- key validation -------------------------------------------------------------------


def test_valid_key_is_namespaced():
    assert key_of({"detail": {"customerId": "c-42"}}) == "customer#c-42"


def test_empty_namespace_keeps_key_as_is():
    assert key_of({"detail": {"customerId": "c-42"}}, namespace="") == "c-42"


def test_namespace_with_quote_is_escaped():
    assert key_of({"detail": {"customerId": "x"}}, namespace='it"s\\') == 'it"s\\#x'


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
        ({"customerId": "x" * (p.MAX_KEY_LENGTH + 1)}, f"must be at most {p.MAX_KEY_LENGTH} characters, got: {p.MAX_KEY_LENGTH + 1}"),
    ],
)
def test_bad_keys_raise_invalid_key(detail, problem):
    with pytest.raises(Exception) as raised:
        key_of({"detail": detail})
    assert f"{p.ERROR_INVALID_KEY}: the lock key {problem}" in str(raised.value)


def test_longest_allowed_key_passes():
    key = "k" * p.MAX_KEY_LENGTH
    assert key_of({"detail": {"customerId": key}}) == "customer#" + key


def test_lock_key_template_must_be_jsonata():
    with pytest.raises(ValueError, match=r"`lock_key` must be a JSONata template"):
        p.unwrap_jsonata("$.detail.customerId")
    with pytest.raises(ValueError, match=r"`lock_key` must be a JSONata template"):
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
    lock = evaluate(p.lock_variable_expression(), states={"result": {"Attributes": attributes}})
    assert lock == {"key": "customer#1", "owner": "arn:exec", "fence": 7, "acquiredAt": 1000, "expiresAt": 61000}


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


def test_retries_per_round_keep_a_round_within_half_of_max_wait():
    policy = p.WaitPolicy(first_interval=1, backoff_rate=2.0, max_interval=8, retries_per_round=4)
    assert policy.retries_for(3600) == 4
    assert policy.retries_for(4) == 1  # 1 <= 2 < 1 + 2
    assert policy.retries_for(1) == 0


# ---- expressions ----------------------------------------------------------------------


def test_writes_declare_exactly_the_placeholders_they_use():
    assert p.ACQUIRE.attribute_names() == {
        "#owner": "owner", "#acquiredAt": "acquiredAt", "#expiresAt": "expiresAt", "#fence": "fence"
    }
    assert set(p.ACQUIRE.value_names()) == {":me", ":stale", ":now", ":expiresAt", ":one"}
    assert set(p.RELEASE.value_names()) == {":me", ":fence"}
    release = p.release_arguments(lock_variable="lock")
    assert set(release["ExpressionAttributeValues"]) == {":me", ":fence"}
    assert release["Key"] == {"pk": {"S": "{% $lock.key %}"}}


def test_acquire_arguments_return_the_new_item():
    arguments = p.acquire_arguments(key_jsonata="'k'", lease_ms=5000)
    assert arguments["ReturnValues"] == "ALL_NEW"
    assert arguments["ExpressionAttributeValues"][":one"] == {"N": "1"}
    assert "5000" in arguments["ExpressionAttributeValues"][":expiresAt"]["N"]


def test_builder_refuses_values_that_do_not_match_the_expression():
    with pytest.raises(AssertionError, match="missing"):
        p._update_item("k", p.RELEASE, {":me": {"S": "x"}})
