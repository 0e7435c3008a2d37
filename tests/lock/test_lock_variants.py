"""The lock variants under load, on both DynamoDB backends: a semaphore admits at most its
limit and reaches it; a multi-key lock excludes every holder of any of its keys (other
transfers and single-key holders alike), with fences in order and no lost update. Each
invariant has its negative control."""

from __future__ import annotations

import time
import uuid

import pytest

from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import semaphore_protocol as sp
from deployed import StackRun, deployed_stack, wait_until
from safety_stack import PROBE_GRACE_S, PROBE_TIMEOUT_S, fail_sibling
from variants_stack import LIMIT, VariantsStack


class Variants(StackRun):
    def probe(self, key: str) -> dict:
        item = self.get("Probes", {"pk": {"S": key}})
        out = {k: int(v["N"]) for k, v in item.items() if "N" in v}
        out.update({k: [int(x["N"]) for x in v["L"]] for k, v in item.items() if "L" in v})
        return out

    def lock(self, stored_key: str) -> dict:
        return self.get("LocksTable", {"pk": {"S": stored_key}})


variants = deployed_stack(VariantsStack, "Variants", Variants)


def key(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:8]}"


def over_limit(seen: list[int], limit: int) -> int:
    """Entries that found more than ``limit`` holders inside (the semaphore's invariant)."""
    return sum(1 for inside in seen if inside > limit)


def fences_in_order(fences: list[int]) -> bool:
    return all(a < b for a, b in zip(fences, fences[1:]))


# ---- semaphore ------------------------------------------------------------------------


def test_semaphore_admits_at_most_its_limit_and_reaches_it(variants):
    k = key("sem")
    arns = [variants.start("Semaphore", {"key": k, "workMs": 1500}) for _ in range(8)]
    results = variants.wait(arns)
    assert [r.status for r in results] == ["SUCCEEDED"] * 8, [(r.error, r.cause) for r in results]
    probe = variants.probe(k)
    assert probe["entries"] == 8 and probe["inside"] == 0
    assert over_limit(probe["seen"], LIMIT) == 0 and probe.get("violations", 0) == 0
    assert max(probe["seen"]) == LIMIT  # N reached: the slots are used in parallel
    # negative control: the same record breaks a semaphore of one fewer holder
    assert over_limit(probe["seen"], LIMIT - 1) > 0
    # every slot was released, each with its own fence
    slots = [variants.lock(sp.slot_key(p.namespaced("sem", k), s)) for s in range(LIMIT)]
    assert all(p.OWNER not in item for item in slots)
    assert sum(int(item[p.FENCE]["N"]) for item in slots if item) == 8


def test_a_slot_acquire_whose_response_was_lost_leaves_no_slot_held(variants):
    """Issues 25/29 (fault matrix ``rate-slots:Lock.Acquire`` x ``lost``, the semaphore's
    acquire): a slot's acquire applied and its response was lost. The retry must try *that*
    slot again (its condition accepts ``owner = :me``), not sweep on to the next one and take
    it too: the run would release only one of the two, and the other would stay held for its
    lease - a slot of the key's ``limit`` gone. Alone on its key, the run finds every slot free,
    so a retry that moves on takes a second slot. Then ``LIMIT`` runs must all be inside at once
    (the capacity is whole), never more."""
    from locked_workflow.state_machines.lock_writes import ACQUIRE
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    k = key("semlost")
    slots = [sp.slot_key(p.namespaced("sem", k), s) for s in range(LIMIT)]

    def slot_acquire(params: dict) -> bool:
        return params.get("Key", {}).get("pk", {}).get("S", "") in slots \
            and ACQUIRE.condition in params.get("ConditionExpression", "")

    lost = Fault("UpdateItem", "InternalServerError", after_call=True, when=slot_acquire)
    with dynamodb_faults(lost) as log:
        (alone,) = variants.wait([variants.start("Semaphore", {"key": k, "workMs": 1})])
    assert log.injected == 1
    assert (alone.status, alone.error) == ("SUCCEEDED", None), alone.cause
    assert [s for s in slots if p.OWNER in variants.lock(s)] == []  # every slot free
    entered = [e["stateEnteredEventDetails"]["name"] for e in alone.history if e["type"] == "TaskStateEntered"]
    assert entered.count("Lock.AcquireAgain") == 1  # the lost attempt's slot, tried again
    # the key's whole capacity is there: LIMIT runs inside together, never more
    results = variants.wait([variants.start("Semaphore", {"key": k, "workMs": 3000}) for _ in range(LIMIT)])
    assert [r.status for r in results] == ["SUCCEEDED"] * LIMIT, [(r.error, r.cause) for r in results]
    probe = variants.probe(k)
    assert max(probe["seen"]) == LIMIT and over_limit(probe["seen"], LIMIT) == 0, probe
    assert [s for s in slots if p.OWNER in variants.lock(s)] == []


def test_a_stopped_semaphore_holder_frees_its_slot_after_its_grace(variants):
    k = key("semstop")
    holders = [variants.start("SemaphoreHold", {"key": k, "holdS": 40, "workMs": 1}) for _ in range(LIMIT)]
    slots = [sp.slot_key(p.namespaced("sem", k), s) for s in range(LIMIT)]
    deadline = time.time() + 30
    while sum(p.OWNER in variants.lock(s) for s in slots) < LIMIT and time.time() < deadline:
        time.sleep(0.2)
    assert all(p.OWNER in variants.lock(s) for s in slots)  # full
    variants.cloud.stepfunctions.stop_execution(executionArn=holders[0])
    stopped_at = time.time()
    result = variants.wait([variants.start("Semaphore", {"key": k, "workMs": 100})], timeout=120)[0]
    entered_after = time.time() - stopped_at
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    # the stopped holder's slot, after its stop grace (5 s: nothing in flight) - not at the
    # end of the others' 40 s hold
    assert 4 <= entered_after < 30, entered_after
    # the two live holders still hold their slots; the waiter released the one it took over
    assert sum(p.OWNER in variants.lock(s) for s in slots) == LIMIT - 1
    for arn in holders[1:]:
        variants.cloud.stepfunctions.stop_execution(executionArn=arn)


def test_the_janitor_retires_a_stopped_semaphore_holders_slot_with_no_waiter_left(variants):
    """Issue 25 (a matrix trial: a semaphore section's stopped holder kept its slot for 581 s
    of its lease once its waiters had left). With nobody waiting - so no waiter's liveness
    check - only the janitor can end the stopped holder's slot: its lease must end at the stop
    plus its stop grace, whichever slot the holder took. (A workflow's holder here; the section
    of the trial: ``tests/tools/test_fault_matrix.py``.)"""
    k = key("semjanitor")
    slots = [sp.slot_key(p.namespaced("sem", k), s) for s in range(LIMIT)]
    holders = [variants.start("SemaphoreHold", {"key": k, "holdS": 60, "workMs": 1}) for _ in range(LIMIT)]
    wait_until(lambda: sum(p.OWNER in variants.lock(s) for s in slots) == LIMIT, timeout=60)
    stopped = holders[0]
    variants.cloud.stepfunctions.stop_execution(executionArn=stopped)
    stop_ms = int(time.time() * 1000)

    def held_by_stopped() -> dict:
        return next(item for s in slots if stopped in (item := variants.lock(s)).get(p.OWNER, {}).get("S", ""))

    grace_ms = int(held_by_stopped()[p.GRACE]["N"])  # the derived stop grace (PROBE_GRACE_S)
    wait_until(lambda: int(held_by_stopped()[p.EXPIRES_AT]["N"]) <= stop_ms + grace_ms + 2_000, timeout=30)
    live = next(item for s in slots if holders[1] in (item := variants.lock(s)).get(p.OWNER, {}).get("S", ""))
    assert int(live[p.EXPIRES_AT]["N"]) > stop_ms + 60_000  # the live holder's slot is untouched
    for arn in holders[1:]:
        variants.cloud.stepfunctions.stop_execution(executionArn=arn)


def test_semaphore_slots_held_by_cancelled_branches_free_after_their_grace(variants):
    """Every slot held by a Map iteration that Step Functions cancelled (a sibling branch
    failed, the user caught it, the execution runs on): a waiter probes the slots' presence
    tokens, finds them closed and takes a slot after its stop grace - not after the lease."""
    if variants.cloud.backend != "moto":
        pytest.skip("the cancellation is Step Functions behaviour (the mutex's case runs on both backends)")
    k = key("semcancel")
    slots = [sp.slot_key(p.namespaced("sem", k), s) for s in range(LIMIT)]
    holder = variants.cloud.start_execution(variants.app.state_machine_arn("SemaphoreCancelled"),
                                            {"key": k, "siblingGate": k})
    # all slots held before the sibling fails (a cancelled iteration could not take one later)
    wait_until(lambda: sum(p.OWNER in variants.lock(s) for s in slots) == LIMIT, timeout=60)
    fail_sibling(variants.cloud, variants.app, k)
    result = variants.wait([variants.start("Semaphore", {"key": k, "workMs": 100})], timeout=150)[0]
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert variants.cloud.stepfunctions.describe_execution(executionArn=holder)["status"] == "RUNNING"
    names = [e["stateEnteredEventDetails"]["name"] for e in result.history if e["type"] == "TaskStateEntered"]
    assert "Lock.Abandoned" in names  # found by the probe, not by the lease
    assert variants.probe(k)["entries"] == 1
    variants.cloud.stepfunctions.stop_execution(executionArn=holder)


# ---- multi-key ------------------------------------------------------------------------


def test_transfers_and_single_key_holders_exclude_each_other(variants):
    accounts = [key("acct") for _ in range(3)]
    a, b, c = accounts
    pairs = [(a, b), (b, c), (c, a), (b, a), (a, c), (c, b)]
    arns = [variants.start("Transfer", {"from": x, "to": y, "workMs": 400}) for x, y in pairs]
    arns += [variants.start("Single", {"key": x, "workMs": 200}) for x in accounts]
    results = variants.wait(arns)
    assert [r.status for r in results] == ["SUCCEEDED"] * len(arns), [(r.error, r.cause) for r in results]
    for account in accounts:
        probe = variants.probe(account)
        assert probe.get("violations", 0) == 0 and max(probe["seen"]) == 1, probe
        assert probe["entries"] == 5  # 4 transfers touch each account, + 1 single holder
        assert probe["counter"] == probe["accepted"] == 5  # no lost update
        assert fences_in_order(probe["fences"]) and len(probe["fences"]) == 5
        assert p.OWNER not in variants.lock(p.namespaced("acct", account))


def test_a_transfer_nested_in_a_hold_of_one_of_its_accounts_takes_only_the_other(variants):
    """Issue 15.5: a multi-key section nested in a single-key section on one of its keys waited
    for itself until Lock.Timeout. It passes through the key held (with that hold's fence) and
    takes the other; both are free when the workflow ends, and concurrent transfers and
    single-key holders of the same accounts still exclude it."""
    a, b = key("acct"), key("acct")
    arns = [variants.start("NestedTransfer", {"from": a, "to": b, "workMs": 300}) for _ in range(2)]
    arns += [variants.start("Transfer", {"from": b, "to": a, "workMs": 300}),
             variants.start("Single", {"key": b, "workMs": 200})]
    results = variants.wait(arns)
    assert [r.status for r in results] == ["SUCCEEDED"] * 4, [(r.error, r.cause) for r in results]
    for account in (a, b):
        probe = variants.probe(account)
        assert probe.get("violations", 0) == 0 and max(probe["seen"]) == 1, probe
        assert probe["counter"] == probe["accepted"] == probe["entries"]
        assert fences_in_order(probe["fences"])
        assert p.OWNER not in variants.lock(p.namespaced("acct", account))
    assert variants.probe(a)["entries"] == 3 and variants.probe(b)["entries"] == 4
    # each nested transfer ran under the enclosing hold's fence of `a`: `a` was acquired 3 times
    # in all (2 single-key holds + 1 transfer), never by the nested sections themselves
    assert variants.probe(a)["fences"] == [1, 2, 3]
    assert variants.lock(p.namespaced("acct", a))[p.FENCE] == {"N": "3"}


def test_unlocked_transfers_are_caught_by_the_same_invariants(variants):
    a, b = key("acct"), key("acct")
    arns = [variants.start("Unlocked", {"from": a, "to": b, "workMs": 600}) for _ in range(4)]
    results = variants.wait(arns)
    assert all(r.status == "SUCCEEDED" for r in results)
    probe = variants.probe(a)
    assert probe.get("violations", 0) > 0 and max(probe["seen"]) > 1
    assert probe["counter"] < 4  # lost updates


def test_a_transfer_waits_for_a_single_key_holder_and_takes_both_at_once(variants):
    a, b = key("acct"), key("acct")
    single = variants.start("SingleHold", {"key": b, "holdS": 15, "workMs": 1})
    wait_until(lambda: p.OWNER in variants.lock(p.namespaced("acct", b)))  # b held (conditions, not sleeps:
    transfer = variants.start("Transfer", {"from": a, "to": b, "workMs": 100})  # a loaded CI is slow)
    wait_until(lambda: any(  # the transfer was refused at least once: it waits for b
        e.get("stateEnteredEventDetails", {}).get("name") == "Lock.Held?"
        for e in variants.cloud.stepfunctions.get_execution_history(executionArn=transfer, maxResults=1000)["events"]))
    # while it waits for b, the transfer holds nothing: a is free for others
    assert p.OWNER in variants.lock(p.namespaced("acct", b))
    assert p.OWNER not in variants.lock(p.namespaced("acct", a))
    other = variants.start("Single", {"key": a, "workMs": 100})
    results = variants.wait([single, transfer, other])
    assert [r.status for r in results] == ["SUCCEEDED"] * 3, [(r.error, r.cause) for r in results]
    assert variants.probe(a)["fences"] == [1, 2]  # the single holder of a went first
    assert variants.probe(b)["fences"] == [1, 2]


def test_a_stopped_transfer_is_retired_on_every_key(variants):
    a, b = key("acct"), key("acct")
    # its Lambda (timeout PROBE_TIMEOUT_S) runs on after the stop: the stop grace is PROBE_GRACE_S
    holder = variants.start("Transfer", {"from": a, "to": b, "workMs": 3_500})
    deadline = time.time() + 30
    while variants.probe(a).get("entries", 0) < 1 and time.time() < deadline:
        time.sleep(0.2)
    variants.cloud.stepfunctions.stop_execution(executionArn=holder)
    stopped_at = time.time()
    waiters = [variants.start("Single", {"key": x, "workMs": 100}) for x in (a, b)]
    results = variants.wait(waiters, timeout=120)
    assert [r.status for r in results] == ["SUCCEEDED"] * 2, [(r.error, r.cause) for r in results]
    assert time.time() - stopped_at >= PROBE_GRACE_S - 1
    for x in (a, b):
        assert variants.probe(x).get("violations", 0) == 0


def test_a_transfer_cancelled_by_a_sibling_frees_both_accounts_after_its_grace(variants):
    """A multi-key hold writes one presence token on every key it took: a waiter inspecting
    either key finds it closed once Step Functions cancelled the branch, and takes both keys
    after the stop grace - not after the 8-minute lease."""
    if variants.cloud.backend != "moto":
        pytest.skip("the cancellation is Step Functions behaviour (the mutex's case runs on both backends)")
    a, b = key("from"), key("to")
    stored = [p.namespaced("acct", a), p.namespaced("acct", b)]
    holder = variants.cloud.start_execution(variants.app.state_machine_arn("TransferCancelled"),
                                            {"from": a, "to": b, "siblingGate": a})
    # both keys held, each with the hold's token, before the sibling fails
    wait_until(lambda: all(p.PRESENCE in variants.lock(s) for s in stored), timeout=60)
    fail_sibling(variants.cloud, variants.app, a)
    assert variants.lock(stored[0])[p.PRESENCE] == variants.lock(stored[1])[p.PRESENCE]
    # the grace of a work that is a Wait: the margin only (the presence task is the lock's own)
    assert variants.lock(stored[0])[p.GRACE] == {"N": "5000"}
    result = variants.wait([variants.start("Transfer", {"from": a, "to": b, "workMs": 100})], timeout=150)[0]
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert variants.cloud.stepfunctions.describe_execution(executionArn=holder)["status"] == "RUNNING"
    names = [e["stateEnteredEventDetails"]["name"] for e in result.history if e["type"] == "TaskStateEntered"]
    assert names.count("Lock.Abandoned") >= 2  # each key found by the probe, not by the lease
    variants.cloud.stepfunctions.stop_execution(executionArn=holder)


def test_a_transfer_that_waits_too_long_fails_with_lock_timeout_holding_nothing(variants):
    a, b = key("acct"), key("acct")
    # b stays held past the waiter's max_wait (3 s) plus a round of waiting (at most 2 s)
    single = variants.start("SingleHold", {"key": b, "holdS": 15, "workMs": 1})
    deadline = time.time() + 30
    while p.OWNER not in variants.lock(p.namespaced("acct", b)) and time.time() < deadline:
        time.sleep(0.1)
    impatient = variants.wait([variants.start("TransferImpatient", {"from": a, "to": b, "workMs": 1})])[0]
    assert (impatient.status, impatient.error) == ("FAILED", p.ERROR_TIMEOUT), impatient.cause
    assert variants.lock(p.namespaced("acct", a)) == {}  # never took a alone
    assert variants.wait([single])[0].status == "SUCCEEDED"
    assert variants.probe(b)["entries"] == 1 and variants.probe(a).get("entries", 0) == 0


def test_a_transfer_timed_out_while_holding_is_retired_on_both_keys(variants):
    if variants.cloud.backend != "moto":  # (the retire writes run on both in the stopped-transfer case)
        pytest.skip("the state machine's own timeout is Step Functions behaviour: one backend suffices")
    a, b = key("acct"), key("acct")
    timing_out = variants.start("TransferTimingOut", {"from": a, "to": b, "workMs": 1})
    result = variants.wait([timing_out], timeout=60)[0]
    assert result.status == "TIMED_OUT"
    ended = time.time()
    # both keys stay held for the stop grace (5 s: no task in the work), then the janitor's
    # retirement lets waiters in
    assert all(p.OWNER in variants.lock(p.namespaced("acct", x)) for x in (a, b))
    after = variants.wait([variants.start("Transfer", {"from": b, "to": a, "workMs": 10})], timeout=120)[0]
    assert after.status == "SUCCEEDED", (after.error, after.cause)
    assert time.time() - ended >= 3
    assert variants.probe(a)["fences"] == [2] and variants.probe(b)["fences"] == [2]


def test_a_failing_transfer_releases_every_key_and_fails_with_its_error(variants):
    a, b = key("acct"), key("acct")
    result = variants.wait([variants.start("Transfer", {"from": a, "to": b, "workMs": 10, "fail": True})])[0]
    assert (result.status, result.error) == ("FAILED", "RuntimeError"), (result.error, result.cause)
    for x in (a, b):
        item = variants.lock(p.namespaced("acct", x))
        assert p.OWNER not in item and item[p.FENCE] == {"N": "1"}


def test_bad_lock_keys_fail_before_any_write(variants):
    a = key("acct")
    cases = [
        ({"from": a, "to": 7}, "item 1 must be a string, got: number"),
        ({"from": a, "to": ""}, "item 1 must not be empty"),
        ({"from": None, "to": None}, "must be a string"),
    ]
    for document, message in cases:
        result = variants.wait([variants.start("Transfer", {**document, "workMs": 1})])[0]
        assert result.status == "FAILED" and result.error == p.ERROR_INVALID_KEY, (result.error, result.cause)
        assert message in result.cause
    assert variants.lock(p.namespaced("acct", a)) == {}



