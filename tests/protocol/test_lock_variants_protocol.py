"""The semaphore's and multi-key lock's JSONata pieces (no runtime). (The kinds' construct validation
and templates: ``test_lock_variants_validation.py``.)"""

from __future__ import annotations

import pytest

from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import multikey_protocol as m
from locked_workflow.state_machines import semaphore_protocol as s


def evaluate(expression: str, **variables):
    from locked_workflow.testing.patches.jsonata_evaluator import evaluate as runtime_evaluate

    return runtime_evaluate(expression, variables)


# ---- semaphore ------------------------------------------------------------------------


def test_slot_keys_can_never_be_mutex_keys():
    key = s.slot_key(p.namespaced("sem", "k"), 2)
    assert key == "~2~sem#k"
    # a mutex stored key starts with a namespace, which cannot contain the slot mark
    assert p.namespace_problem(key.split(p.NAMESPACE_SEPARATOR)[0])


def test_attempts_sweep_every_slot_from_a_random_start():
    expression = s.attempt_key_expression(limit=3, wait_variable="w", attempts_per_round=2)

    def attempt(slot, retry, w):
        context = {"State": {"RetryCount": retry}}
        return evaluate(expression, states={"input": {"slot": slot, "key": "sem#k"}, "context": context}, w=w)

    tried = [attempt(1, r, None) for r in range(2)] + [attempt(1, r, {"rounds": 1}) for r in range(2)]
    assert tried == ["~1~sem#k", "~2~sem#k", "~0~sem#k", "~1~sem#k"]  # 3 attempts cover the 3 slots
    # a slot the liveness check proved stale is tried next
    assert attempt(1, 0, {"rounds": 1, "staleKey": "~2~sem#k"}) == "~2~sem#k"


def _inspected_on_due_rounds(expression_for, every, rounds=24):
    """The items a waiter's liveness checks inspect over ``rounds`` rounds of polls (the check
    runs on the rounds where ``liveness_due_expression`` holds)."""
    due = p.liveness_due_expression("w", every)
    seen = []
    for r in range(1, rounds + 1):
        if evaluate(due, w={"rounds": r}):
            seen.append(expression_for(r))
    return seen


@pytest.mark.parametrize("every", [1, 2, 3])
@pytest.mark.parametrize("count", [2, 3, 4])
def test_the_liveness_check_inspects_every_slot_and_every_key(every, count):
    """Each of N slots or keys is inspected within N checks, whatever ``every`` is (counting
    rounds instead of checks inspected only the first of 2 keys when every=2)."""
    slots = s.inspect_key_expression(limit=count, wait_variable="w", every=every)
    keys = [f"ns#k{i}" for i in range(count)]
    key_of = m.inspect_key_expression("w", every)
    inspected_slots = _inspected_on_due_rounds(
        lambda r: evaluate(slots, states={"input": {"slot": 1, "key": "sem#k"}}, w={"rounds": r}), every
    )
    inspected_keys = _inspected_on_due_rounds(
        lambda r: evaluate(key_of, states={"input": {"keys": keys, "acquire": keys}}, w={"rounds": r}), every
    )
    for inspected, everything in ((inspected_slots, {f"~{i}~sem#k" for i in range(count)}), (inspected_keys, set(keys))):
        assert len(inspected) >= 2 * count
        for start in range(len(inspected) - count + 1):  # any `count` checks in a row cover all
            assert set(inspected[start:start + count]) == everything, inspected


def test_first_slot_is_within_the_limit():
    assert {evaluate(s.first_slot_expression(3)) for _ in range(60)} == {0, 1, 2}


def test_a_nested_semaphore_passes_through_only_on_its_own_key_and_kind():
    holds = s.holds_slot_expression("v")
    assert evaluate(holds, v={"key": "~1~sem#k"}, key="sem#k") is True
    assert evaluate(holds, v={"key": "~1~sem#other"}, key="sem#k") is False
    assert evaluate(holds, v={"key": "sem#k"}, key="sem#k") is False  # a mutex on the key
    assert evaluate(holds, key="sem#k") is False


def test_the_key_limit_leaves_room_for_the_slot_mark():
    assert s.reserve_bytes(3) == 3 and s.reserve_bytes(32) == 4
    expression = p.key_expression("$states.input.k", "sem", s.reserve_bytes(3))
    assert evaluate(expression, states={"input": {"k": "x" * (p.MAX_KEY_BYTES - 7)}}).startswith("sem#")
    with pytest.raises(Exception, match="at most 2045 bytes"):
        evaluate(expression, states={"input": {"k": "x" * (p.MAX_KEY_BYTES - 6)}})
    assert "at most 2045 bytes" in p.key_problem("x" * (p.MAX_KEY_BYTES - 6), "sem", s.reserve_bytes(3))


# ---- multi-key ------------------------------------------------------------------------


def keys_of(value, namespace="acct"):
    return evaluate(m.keys_expression("$states.input.keys", namespace), states={"input": {"keys": value}})


def test_keys_are_namespaced_deduplicated_and_sorted():
    assert keys_of(["b", "a", "b"]) == ["acct#a", "acct#b"]
    assert keys_of(["only"]) == ["acct#only"]  # always an array


@pytest.mark.parametrize(
    "value, message",
    [
        ("a", "must be an array of strings, got: string"),
        ([], "must not be empty"),
        (["a", 3], "item 1 must be a string, got: number"),
        (["a", ""], "item 1 must not be empty"),
        (["x" * p.MAX_KEY_BYTES], "item 0 must be at most 2048 bytes"),
        ([f"k{i}" for i in range(m.MAX_KEYS + 1)], f"must be at most {m.MAX_KEYS} distinct keys, got: 101"),
        # each key valid, all together too much state data: 9 x (1,996 + 4) bytes ("acct#" prefix)
        ([f"{i}" + "é" * 997 for i in range(9)], f"must be at most {m.MAX_TOTAL_KEY_BYTES} bytes of UTF-8 in all"),
    ],
)
def test_bad_key_lists_raise_invalid_key(value, message):
    with pytest.raises(Exception, match=p.ERROR_INVALID_KEY) as raised:
        keys_of(value)
    assert message in str(raised.value)


def test_duplicates_do_not_count_towards_the_transaction_limit():
    assert len(keys_of(["same"] * (m.MAX_KEYS + 5))) == 1


def test_the_fences_are_read_with_a_projection():
    """A bounded result: the key, fence and lease times of each item, nothing else."""
    items = evaluate(p.unwrap_jsonata(m.read_fences_arguments(table_name="T")["TransactItems"]),
                     states={"input": {"acquire": ["acct#a"]}})
    assert items[0]["Get"]["ProjectionExpression"] == "#pk, #fence, #acquiredAt, #expiresAt"
    assert items[0]["Get"]["ExpressionAttributeNames"]["#fence"] == p.FENCE


def test_the_acquire_transaction_is_the_mutex_acquire_on_every_key():
    arguments = m.acquire_arguments(table_name="T", lease_ms=1000, stale_owner_jsonata=f"{p.ENTRY}.owner")
    items = evaluate(p.unwrap_jsonata(arguments["TransactItems"]),
                     states={"input": {"keys": ["acct#a", "acct#b"], "acquire": ["acct#a", "acct#b"],
                                       "owner": "me", "grace": 7}})
    assert [i["Update"]["Key"] for i in items] == [{"pk": {"S": "acct#a"}}, {"pk": {"S": "acct#b"}}]
    for item in items:
        update = item["Update"]
        assert (update["UpdateExpression"], update["ConditionExpression"]) == (p.ACQUIRE.update, p.ACQUIRE.condition)
        assert update["ExpressionAttributeValues"][":me"] == {"S": "me"}
        assert update["ExpressionAttributeValues"][":grace"] == {"N": "7"}
    # one clock reading for every key
    assert len({i["Update"]["ExpressionAttributeValues"][":now"]["N"] for i in items}) == 1


def test_the_lock_record_maps_every_key_to_its_fence():
    result = {"Responses": [
        {"Item": {"pk": {"S": k}, "fence": {"N": f}, "acquiredAt": {"N": "5"}, "expiresAt": {"N": "9"}}}
        for k, f in (("acct#a", "3"), ("acct#b", "1"))
    ]}
    lock = evaluate(m.lock_variable_expression("lock"),
                    states={"input": {"keys": ["acct#a", "acct#b"], "acquire": ["acct#a", "acct#b"], "inherited": {},
                                      "owner": "me"}, "result": result},
                    lock={"keys": ["acct#a", "acct#b"], "owner": "me", "fences": {}, "redriveCount": 2})
    assert lock == {"keys": ["acct#a", "acct#b"], "acquire": ["acct#a", "acct#b"], "owner": "me",
                    "fences": {"acct#a": 3, "acct#b": 1},
                    "acquiredAt": 5, "expiresAt": 9, "redriveCount": 2}  # the acquire's generation
    release = evaluate(p.unwrap_jsonata(m.release_arguments(table_name="T", lock_variable="lock")["TransactItems"]),
                       lock=lock)
    assert [r["Update"]["ExpressionAttributeValues"][":fence"] for r in release] == [{"N": "3"}, {"N": "1"}]
    assert {r["Update"]["ConditionExpression"] for r in release} == {p.RELEASE.condition}


def test_a_nested_multi_key_section_inherits_the_keys_its_enclosing_holds_hold():
    """Issue 15.5: the keys held by enclosing sections (single-key or multi-key) pass through
    with their fences; only the others are acquired (they were all waited for before)."""
    keys = ["acct#a", "acct#b", "acct#c"]
    inherited = m.inherited_expression(["outer", "middle"])
    single = {"key": "acct#b", "fence": 7}
    multi = {"keys": ["acct#c", "acct#z"], "fences": {"acct#c": 4, "acct#z": 9}}
    assert evaluate(inherited, key=keys, outer=single, middle=multi) == {"acct#b": 7, "acct#c": 4}
    assert evaluate(inherited, key=keys, outer={"key": "acct#q", "fence": 1}) == {}
    assert evaluate(inherited, key=keys) == {}  # nothing held (no enclosing hold in this branch)
    assert evaluate(m.inherited_expression([]), key=keys) == {}
    acquire = m.acquire_keys_expression(inherited="$inherited")
    assert evaluate(acquire, key=keys, inherited={"acct#b": 7}) == ["acct#a", "acct#c"]
    assert evaluate(acquire, key=keys, inherited={}) == keys
    assert evaluate(acquire, key=["acct#a"], inherited={}) == ["acct#a"]  # an array, even of one
    # the hold's fences merge the inherited ones with those read; the release takes the acquired only
    result = {"Responses": [{"Item": {"pk": {"S": "acct#a"}, "fence": {"N": "2"}, "acquiredAt": {"N": "5"},
                                      "expiresAt": {"N": "9"}}}]}
    lock = evaluate(m.lock_variable_expression("lock"), lock={"redriveCount": 0}, states={
        "input": {"keys": ["acct#a", "acct#b"], "acquire": ["acct#a"], "inherited": {"acct#b": 7}, "owner": "me"},
        "result": result})
    assert lock["fences"] == {"acct#a": 2, "acct#b": 7} and lock["acquire"] == ["acct#a"]
    release = evaluate(p.unwrap_jsonata(m.release_arguments(table_name="T", lock_variable="lock")["TransactItems"]),
                       lock=lock)
    assert [r["Update"]["Key"]["pk"]["S"] for r in release] == ["acct#a"]


def test_an_unread_key_is_released_only_while_ours():
    items = evaluate(m.release_each_items_expression("lock"),
                     lock={"keys": ["acct#a"], "acquire": ["acct#a"], "owner": "me", "fences": {}})
    assert items == [{"key": "acct#a", "owner": "me", "fence": -1, "expiresAt": 0}]
    assert evaluate(m.lost_expression(), states={"input": items[0]}) == {"lost": True}


def test_re_entrancy_needs_every_key_held_by_the_enclosing_lock():
    holds = m.holds_keys_expression("v")
    assert evaluate(holds, v={"keys": ["a", "b", "c"]}, key=["a", "b"]) is True
    assert evaluate(holds, v={"keys": ["a", "c"]}, key=["a", "b"]) is False
    assert evaluate(holds, v={"key": "a"}, key=["a"]) is True
    assert evaluate(holds, key=["a"]) is False
    # a single-key section nested in a multi-key one
    assert evaluate(p.holds_key_expression("v"), v={"keys": ["a", "b"]}, key="b") is True


def test_the_janitor_finds_every_key_of_a_multi_key_acquire():
    import json

    arguments = m.acquire_arguments(table_name="T", lease_ms=1000, stale_owner_jsonata=f"{p.ENTRY}.owner")
    items = evaluate(p.unwrap_jsonata(arguments["TransactItems"]),
                     states={"input": {"keys": ["acct#a", "acct#b"], "acquire": ["acct#a", "acct#b"],
                                       "owner": "me", "grace": 7}})
    events = [{
        "type": "TaskScheduled", "timestamp": 10,
        "taskScheduledEventDetails": {"resourceType": "aws-sdk:dynamodb", "resource": "transactWriteItems",
                                      "parameters": json.dumps({"TransactItems": items})},
    }]
    tasks = p.dynamodb_tasks_scheduled(events, ended_at_ms=20)
    assert sorted(p.acquisitions_in_history(tasks, table_name="T")) == [("acct#a", "me"), ("acct#b", "me")]
    assert p.acquisitions_in_history(tasks, table_name="Other") == []
