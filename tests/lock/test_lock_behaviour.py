"""The lock under real concurrency, on the local runtime, on both DynamoDB backends.

Correctness is judged by invariants over many concurrent executions - never by "SUCCEEDED":
no two critical sections of one key overlap, no update is lost, fences strictly increase in
critical-section order, keys never wait on each other - and each claim has a negative control.
"""

from __future__ import annotations

import time

import pytest

from behaviour_stack import SHORT_LEASE_S, SHORT_WAIT_S, TEST_WAIT_POLICY
from locked_workflow.state_machines import lock_protocol as p
from deployed import new_key, start, update, wait_until
from lock_invariants import (
    critical_sections,
    fence_order_violations,
    find_overlaps,
    held_interval,
    overlaps_across_keys,
    refused_acquires,
    state_entered,
)

# ---- mutual exclusion, no lost update, fences -----------------------------------------------


def test_twenty_concurrent_runs_on_one_key_are_serialized(deployed):
    key = new_key("serial")
    results = deployed.run("Main", [update(key) for _ in range(20)])
    assert [r.status for r in results] == ["SUCCEEDED"] * 20, [(r.error, r.cause) for r in results if r.status != "SUCCEEDED"]
    sections = critical_sections(results, "Apply update")
    assert len(sections) == 20
    assert find_overlaps(sections) == []
    assert deployed.customer(key)["updates"] == 20 and deployed.customer(key)["balance"] == 20
    assert fence_order_violations(sections) == []
    assert [s.fence for s in sorted(sections, key=lambda s: s.start_ms)] == list(range(1, 21))
    lock = deployed.lock_item("main", key)
    assert p.OWNER not in lock and lock[p.FENCE] == {"N": "20"}  # released; the fence stays


def test_negative_control_without_the_lock_updates_are_lost(deployed):
    key = new_key("unlocked")
    results = deployed.run("Unlocked", [update(key, work_ms=150) for _ in range(20)])
    # every run succeeds: concurrent invocations run in execution environments of their own,
    # each with its own Powertools metric set, as on AWS (testing/lambda_environments)
    assert [r.status for r in results] == ["SUCCEEDED"] * 20, [(r.error, r.cause) for r in results if r.status != "SUCCEEDED"]
    sections = critical_sections(results, "Apply update", key=key)
    assert find_overlaps(sections), "the overlap check must flag unserialized runs"
    assert deployed.customer(key)["balance"] < 20, "without the lock, concurrent read-modify-writes lose updates"


def test_keys_never_wait_on_each_other(deployed):
    keys = [new_key(f"k{i}") for i in range(3)]
    inputs = [update(k) for _ in range(10) for k in keys]
    results = deployed.run("Main", inputs)
    assert all(r.status == "SUCCEEDED" for r in results)
    by_key = {k: [r for r, i in zip(results, inputs) if i["customerId"] == k] for k in keys}
    for key, runs in by_key.items():
        assert find_overlaps(critical_sections(runs, "Apply update")) == []
        assert deployed.customer(key)["balance"] == 10
        held = [held_interval(r) for r in runs]
        for run in runs:  # every refused acquire happened while a run of the SAME key held it
            for sent, refused in refused_acquires(run):
                assert any(sent <= end and start <= refused for start, end in held), (key, sent, refused)
    # and different keys did hold their locks at the same time
    all_sections = [s for k in keys for s in critical_sections(by_key[k], "Apply update", key=k)]
    assert overlaps_across_keys(all_sections)


# ---- errors, timeouts, bad keys -------------------------------------------------------------


def test_failed_work_releases_and_fails_with_the_original_error_then_next_waiter_proceeds(deployed):
    key = new_key("fails")
    bad, good = deployed.run("Main", [update(key, delta="not-a-number", work_ms=500), update(key)], stagger_s=0.3)
    assert bad.status == "FAILED" and bad.error == "InvalidUpdateError", (bad.error, bad.cause)
    assert "balanceDelta" in (bad.cause or "")
    assert "Lock.ReleaseAfterError" in state_entered(bad)
    assert good.status == "SUCCEEDED" and deployed.customer(key)["balance"] == 1
    assert p.OWNER not in deployed.lock_item("main", key)


def test_max_wait_zero_times_out_at_once_without_waiting(deployed):
    key = new_key("nowait")
    with deployed.client("nowait").hold(key, lease=60):  # a Python holder blocks the workflow
        started = time.time()
        (result,) = deployed.run("NoWait", [update(key)])
        elapsed = time.time() - started
    assert result.status == "FAILED" and result.error == p.ERROR_TIMEOUT
    assert "Lock.Wait" not in state_entered(result) and "Lock.Held?" not in state_entered(result)
    assert elapsed < 3
    assert "customerId" not in deployed.customer(key)


def test_max_wait_times_out_after_about_max_wait(deployed):
    key = new_key("shortwait")
    with deployed.client("shortwait").hold(key, lease=60):
        (result,) = deployed.run("ShortWait", [update(key)])
    assert result.status == "FAILED" and result.error == p.ERROR_TIMEOUT
    waited = (result.stop_date - result.start_date).total_seconds()
    # not before max_wait; at most one round of polls after it (README: the timeout bound), plus
    # latency: generous, a loaded machine runs late (the lower bound is the one that matters)
    bound = p.timeout_bound_s(TEST_WAIT_POLICY, SHORT_WAIT_S)
    assert SHORT_WAIT_S - 0.5 <= waited <= bound + 6, (waited, bound)
    assert state_entered(result).count("Lock.Wait") >= 1


@pytest.mark.parametrize(
    "customer_id, problem",
    [
        (None, "is missing"),
        ("", "must not be empty"),
        (42, "must be a string, got: number"),
        ({"id": "x"}, "must be a string, got: object"),
        ("x" * 2045, "must be at most 2048 bytes of UTF-8 with its namespace prefix, got: 2050 bytes"),
        ("\U0001F600" * 511, "got: 2049 bytes"),  # only 511 characters, but 2044 bytes
    ],
)
def test_bad_keys_fail_with_invalid_key_before_any_dynamodb_call(deployed, customer_id, problem):
    document = update("ignored")
    if customer_id is None:
        del document["customerId"]
    else:
        document["customerId"] = customer_id
    (result,) = deployed.run("Main", [document])
    assert result.status == "FAILED" and result.error == p.ERROR_INVALID_KEY
    assert problem in result.cause
    assert not [e for e in result.history if e["type"] == "TaskScheduled"], "no DynamoDB call may happen"


# ---- short lease: takeover, Lock.Lost, fenced write rejected --------------------------------


def test_short_lease_takeover_rejects_the_zombies_write_and_its_release_is_lost(deployed):
    key = new_key("lease")
    zombie_arn = start(deployed, "ShortLease", update(key, delta=100, work_ms=(SHORT_LEASE_S + 6) * 1000))
    # the successor starts once the zombie holds the lock (a loaded machine must not swap them)
    wait_until(lambda: zombie_arn in deployed.lock_item("shortlease", key).get(p.OWNER, {}).get("S", ""), timeout=60)
    successor_arn = start(deployed, "ShortLease", update(key, delta=1, work_ms=0))
    zombie, successor = (deployed.cloud.wait_for(a, timeout=180) for a in (zombie_arn, successor_arn))
    assert successor.status == "SUCCEEDED"
    assert zombie.status == "FAILED" and zombie.error == p.ERROR_LOST, (zombie.error, zombie.cause)
    assert "Write rejected" in state_entered(zombie)  # its fenced write was refused
    record = deployed.customer(key)
    assert record["balance"] == 1 and record["lastFence"] == 2
    # the successor took over the expired lease while the zombie still worked
    zombie_section, successor_section = (
        critical_sections([zombie], "Apply update")[0], critical_sections([successor], "Apply update")[0]
    )
    assert successor_section.start_ms < zombie_section.end_ms
    assert successor_section.fence > zombie_section.fence
