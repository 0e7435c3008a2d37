"""The rate limit (``Lock.rate``): a burst of runs on both DynamoDB backends (its props at synth:
``test_rate_limit_props.py``) - no window of ``period`` holds more than ``limit`` admissions
(the stamps on the service clock, the guard's times and the work's entries in the histories),
the admitted rate reaches the limit, a refused run enters when its permit frees (a computed
wait, not a poll), keys are independent, a permit past ``max_wait`` fails at once with
``Lock.Timeout``, a run (or a client) late out of its wait reserves again. With ``at_once``, the
probe never sees more than ``at_once`` runs in the work. The negative controls: ADMIT's clauses
weakened, the guard left out, ``at_once`` left out - each breaks its check."""

from __future__ import annotations

import uuid

import pytest

from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import rate_protocol as rate
from deployed import StackRun, deployed_stack, synthesized
from rate_stack import AT_ONCE, LIMIT, PERIOD_S, PROBE_PREFIX, WORK, RateStack
from tools.rate_checks import admission_stamps, crowded_windows

PERIOD_MS = PERIOD_S * 1000
#: When a permit frees again: a period and the entry margin after its reserved time.
SPACING_MS = rate.spacing_ms(PERIOD_MS)
#: A refused run's entry after its permit freed: the Wait rounds up to the second, plus the
#: admit's latency on a loaded machine (a fixed poll of the mutex's policy would be up to 5 s).
LATE_S = 2.5
#: How late after the guard's check the work's entry may come: the one transition from the
#: guard's Choice into the work, which the guard cannot see (a loaded machine stalled it 1.7 s
#: once). The entries' windows are checked that much shorter; the guard's own times exactly.
TRANSITION_MS = 2000
#: How late the late-run tests make a Wait end: past the entry margin, so that the late run
#: would enter among the runs that reuse the first permits.
LATE_TURN_S = 7.5
#: How late the late client wakes up: past the entry margin and the transition's allowance.
LATE_CLIENT_S = 5


# ---- runs -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def rate_synth():
    return synthesized(RateStack, "RateLimits", asset_metadata=False)


class Limits(StackRun):
    def start(self, machine: str, key: str) -> str:  # type: ignore[override] - a run's input is its key
        return super().start(machine, {"key": key})

    def wait(self, arns, timeout: float = 150):
        return self.cloud.wait_all(list(arns), timeout)

    def item(self, stored_key: str, *, of=rate.rate_key) -> dict:
        return self.get("LocksTable", {"pk": {"S": of(stored_key)}})

    def start_with(self, machine: str, payload: dict) -> str:
        return super().start(machine, payload)


limits = deployed_stack(RateStack, "RateLimits", Limits, asset_metadata=False)


def key(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:8]}"


def guard_entered_ms(result) -> float:
    """When the execution last entered the guard after the Wait (``Lock.OnTime?``, history,
    service clock): its check came after, so the guard's rule bounds this time exactly."""
    return [e["timestamp"].timestamp() * 1000 for e in result.history if e["type"].endswith("StateEntered")
            and e["stateEnteredEventDetails"]["name"] == "Lock.OnTime?"][-1]


def keeps_the_limit(results) -> None:
    """The run's reservations (every admission, histories), the guard's times (exact: each
    within the entry margin of its reserved time) and the work's entries (up to the one
    transition after the guard) never more than LIMIT in a window."""
    reserved = [s for r in results for s in admission_stamps(r.history)]
    assert crowded_windows(reserved, limit=LIMIT, period_ms=PERIOD_MS) == []
    guarded = [guard_entered_ms(r) for r in results]
    slack = [g - r.output["admittedAt"] for g, r in zip(guarded, results)]
    assert min(slack) >= 0 and max(slack) <= rate.ENTRY_MARGIN_MS, slack
    assert crowded_windows(guarded, limit=LIMIT, period_ms=PERIOD_MS) == []
    entered = [work_entered_ms(r) for r in results]
    assert min(e - g for e, g in zip(entered, guarded)) >= 0
    assert crowded_windows(entered, limit=LIMIT, period_ms=PERIOD_MS - TRANSITION_MS) == []


def work_entered_ms(result) -> float:
    """When the execution entered the work (history, service clock)."""
    (entered,) = [e["timestamp"].timestamp() * 1000 for e in result.history
                  if e["type"].endswith("StateEntered") and e["stateEnteredEventDetails"]["name"] == WORK]
    return entered


def test_a_burst_is_admitted_at_the_limit_and_never_above_it_in_any_window(limits):
    a, b = key("a"), key("b")
    runs = 9
    arns = {a: [], b: []}
    for _ in range(runs):  # interleaved: both keys' bursts start together
        for k in (a, b):
            arns[k].append(limits.start("Rate", k))
    results = {k: limits.wait(v) for k, v in arns.items()}
    for k, rs in results.items():
        assert [r.status for r in rs] == ["SUCCEEDED"] * runs, [(r.error, r.cause) for r in rs]
        outputs = sorted((r.output for r in rs), key=lambda o: o["fence"])
        stamps = [o["admittedAt"] for o in outputs]
        # the fences are the admissions' numbers, in the order of their stamps (a run that came
        # late out of its Wait gave its number up and took a later one: see the late-run test)
        fences = [o["fence"] for o in outputs]
        assert fences == sorted(set(fences)) and fences[0] >= 1
        assert stamps == sorted(stamps)
        # every admission, the given-up ones too (histories): the key's count
        reserved = sorted(s for r in rs for s in admission_stamps(r.history))
        assert int(limits.item(p.namespaced("r", k))[rate.ADMISSIONS]["N"]) == len(reserved) >= runs
        # exact, on the reserved times: no window of PERIOD holds more than LIMIT admissions ...
        assert crowded_windows(reserved, limit=LIMIT, period_ms=PERIOD_MS) == []
        # ... each run passed the guard within the entry margin of its reserved time and entered
        # its work after (history, service clock): the guard's times keep the limit exactly,
        # the work's entries up to the one transition after the guard
        keeps_the_limit(rs)
        # the rate reaches the limit: each waiting run's time is when its permit frees (the
        # admission LIMIT before it, one period and the margin on)
        late = [(reserved[i] - (reserved[i - LIMIT] + SPACING_MS)) / 1000 for i in range(LIMIT, len(reserved))]
        assert max(late) <= LATE_S, late
        assert reserved[-1] - reserved[0] <= (len(reserved) // LIMIT - 1) * SPACING_MS + len(late) * LATE_S * 1000
        # negative control of the window check: a window one ms longer than the spacing it found
        assert crowded_windows(reserved, limit=LIMIT,
                               period_ms=min(b - a for a, b in zip(reserved, reserved[LIMIT:])) + 1)
    # keys are independent: together their admissions crowd windows that each key alone keeps
    stamps = {k: [r.output["admittedAt"] for r in rs] for k, rs in results.items()}
    assert crowded_windows(stamps[a] + stamps[b], limit=LIMIT, period_ms=PERIOD_MS)

def test_negative_control_admits_without_its_clauses_crowd_a_window(limits):
    k = key("weak")
    rs = limits.wait([limits.start("Weakened", k) for _ in range(9)])
    assert [r.status for r in rs] == ["SUCCEEDED"] * 9, [(r.error, r.cause) for r in rs]
    # the work's entries (history) crowd a window: more than LIMIT of them within a PERIOD
    assert crowded_windows([work_entered_ms(r) for r in rs], limit=LIMIT, period_ms=PERIOD_MS)


def _late_burst(limits, machine: str) -> tuple[str, list]:
    """Two permits' worth of runs on one key, the first Wait to end made late by ``LATE_TURN_S``
    (a loaded scheduler): its run would enter well inside the next runs' window."""
    from locked_workflow.testing.faults import Delay, state_delays

    k = key(machine.lower())
    with state_delays(Delay("Lock.Turn", seconds=LATE_TURN_S)) as (delay,):
        rs = limits.wait([limits.start(machine, k) for _ in range(2 * LIMIT)])
    assert delay.injected == 1
    assert [r.status for r in rs] == ["SUCCEEDED"] * 2 * LIMIT, [(r.error, r.cause) for r in rs]
    return k, rs


def test_a_run_whose_wait_ends_late_reserves_again_so_the_entries_keep_the_limit(limits):
    k, rs = _late_burst(limits, "Rate")
    keeps_the_limit(rs)
    # the late run (at least) gave its first permit up: one admission more than runs
    admissions = [admission_stamps(r.history) for r in rs]
    assert max(len(a) for a in admissions) >= 2, admissions
    assert sum(len(a) for a in admissions) == int(limits.item(p.namespaced("r", k))[rate.ADMISSIONS]["N"])


def test_negative_control_without_the_guard_a_late_run_crowds_a_window(limits):
    _, rs = _late_burst(limits, "Unguarded")
    entered = [work_entered_ms(r) for r in rs]
    # the late run entered anyway, inside the window of the runs that reused the permits (the
    # check of the guarded test's entries)
    assert crowded_windows(entered, limit=LIMIT, period_ms=PERIOD_MS - TRANSITION_MS), entered
    # while the reserved times keep the limit: only the entries break it
    stamps = [r.output["admittedAt"] for r in rs]
    assert crowded_windows(stamps, limit=LIMIT, period_ms=PERIOD_MS) == []


def test_a_permit_past_max_wait_fails_at_once_with_lock_timeout(limits):
    k = key("impatient")
    first = limits.wait([limits.start("Rate", k) for _ in range(LIMIT)])
    assert [r.status for r in first] == ["SUCCEEDED"] * LIMIT
    (late,) = limits.wait([limits.start("Impatient", k)])
    assert (late.status, late.error) == ("FAILED", p.ERROR_TIMEOUT), late.cause
    entered = [e["stateEnteredEventDetails"]["name"] for e in late.history if e["type"].endswith("StateEntered")]
    assert WORK not in entered and "Lock.Turn" not in entered  # no wait it could not finish
    spent = (late.stop_date - late.start_date).total_seconds()
    assert spent < PERIOD_S / 2, spent
    # its permit was not spent: the key's count is still LIMIT
    assert int(limits.item(p.namespaced("r", k))[rate.ADMISSIONS]["N"]) == LIMIT


def _slots_free(limits, k: str) -> bool:
    return all("owner" not in limits.item(f"~{i}~" + p.namespaced("r", k), of=str) for i in range(AT_ONCE))


def test_a_rate_with_a_concurrency_limit_keeps_both_limits(limits):
    k = key("at-once")
    runs = 2 * LIMIT
    rs = limits.wait([limits.start("AtOnce", k) for _ in range(runs)])
    assert [r.status for r in rs] == ["SUCCEEDED"] * runs, [(r.error, r.cause) for r in rs]
    inside = [r.output["insideAtEntry"] for r in rs]
    # the probe: never more than AT_ONCE in the work at a time, and AT_ONCE reached
    assert max(inside) == AT_ONCE, inside
    # every reservation, the guard's times and the work's entries (history) keep the rate
    keeps_the_limit(rs)
    reserved = [s for r in rs for s in admission_stamps(r.history)]
    # the admissions are the key's, numbered per key (the fences are the slots')
    admissions = sorted(r.output["admission"] for r in rs)
    assert admissions == sorted(set(admissions))
    assert int(limits.item(p.namespaced("r", k))[rate.ADMISSIONS]["N"]) == len(reserved) >= runs
    assert _slots_free(limits, k)
    # the probe's counter is back to 0: every run left
    assert int(limits.item(PROBE_PREFIX + k, of=str)["inside"]["N"]) == 0


def test_an_at_once_slot_acquire_whose_response_was_lost_leaves_no_slot_held(limits):
    """Fault matrix ``rate-slots:Lock.Acquire`` x ``lost`` (moto, 2026-11-28): the slot's acquire
    applied and its response was lost; the Retry (same owner) tries the *next* slot, takes it
    too, and the run - SUCCEEDED - releases only that one: the first stays held for its lease
    (9 minutes here), one of the key's ``at_once`` slots gone. Every slot must be free after
    (failed before the fix on both backends; now ``AcquireAgain`` retries the same slot)."""
    from locked_workflow.testing.faults import Fault, dynamodb_faults
    from locked_workflow.state_machines.lock_writes import ACQUIRE

    k = key("lost-slot")

    def slot_acquire(params: dict) -> bool:
        stored = params.get("Key", {}).get("pk", {}).get("S", "")
        return stored.endswith(p.namespaced("r", k)) and stored.startswith("~") \
            and ACQUIRE.condition in params.get("ConditionExpression", "")

    lost = Fault("UpdateItem", "InternalServerError", after_call=True, when=slot_acquire)
    with dynamodb_faults(lost) as log:
        (r,) = limits.wait([limits.start("AtOnce", k)])
    assert log.injected == 1
    assert (r.status, r.error) == ("SUCCEEDED", None), (r.error, r.cause)
    assert _slots_free(limits, k), [limits.item(f"~{i}~" + p.namespaced("r", k), of=str) for i in range(AT_ONCE)]


def test_negative_control_without_a_concurrency_limit_the_probe_sees_more_inside(limits):
    k = key("no-at-once")
    rs = limits.wait([limits.start("Probe", k) for _ in range(LIMIT)])
    assert [r.status for r in rs] == ["SUCCEEDED"] * LIMIT, [(r.error, r.cause) for r in rs]
    assert max(r.output["insideAtEntry"] for r in rs) > AT_ONCE


def test_a_failed_work_and_a_permit_past_max_wait_release_their_slot(limits):
    k = key("at-once-paths")
    (failed,) = limits.wait([limits.start_with("AtOnce", {"key": k, "fail": True})])
    assert (failed.status, failed.error) == ("FAILED", "Work.Failed"), failed.cause
    assert _slots_free(limits, k)
    # the plain rate limit's runs spend the key's permits (one rate item for both)
    spent = limits.wait([limits.start("Rate", k) for _ in range(LIMIT - 1)])
    assert [r.status for r in spent] == ["SUCCEEDED"] * (LIMIT - 1)
    (late,) = limits.wait([limits.start("AtOnceImpatient", k)])
    assert (late.status, late.error) == ("FAILED", p.ERROR_TIMEOUT), late.cause
    entered = [e["stateEnteredEventDetails"]["name"] for e in late.history if e["type"].endswith("StateEntered")]
    assert "Lock.Acquire" in entered and "Lock.RateTimeoutRelease" in entered and WORK not in entered
    assert _slots_free(limits, k)
    assert int(limits.item(p.namespaced("r", k))[rate.ADMISSIONS]["N"]) == LIMIT


# ---- a LockClient spends the same permits -----------------------------------------------------


def _client(limits, **options):
    from locked_workflow.constructs_lib.lock_client import LockClient

    table = next(v for k, v in limits.app.resources.items() if k.startswith("LocksTable"))
    return LockClient(table, namespace="r", dynamodb=limits.cloud.dynamodb, **options)


def test_a_client_and_the_workflows_spend_the_same_permits(limits):
    from locked_workflow.constructs_lib.lock_client import LockTimeout

    k = key("client")
    client = _client(limits)
    admitted = [client.admit(k, limit=LIMIT, period=PERIOD_S) for _ in range(LIMIT)]
    assert [a.number for a in admitted] == [1, 2, 3]
    with pytest.raises(LockTimeout):  # the key's permits are spent: no wait allowed, nothing spent
        client.admit(k, limit=LIMIT, period=PERIOD_S, wait=0)
    (run,) = limits.wait([limits.start("Rate", k)])
    assert run.status == "SUCCEEDED", (run.error, run.cause)
    # the workflow waited for the client's first permit to free, and counted on from it
    assert run.output["fence"] == LIMIT + 1
    assert run.output["admittedAt"] >= admitted[0].admitted_at + SPACING_MS
    assert run.output["admittedAt"] - (admitted[0].admitted_at + SPACING_MS) <= LATE_S * 1000
    # and the client waits for the workflow's permit in turn, exactly (a computed sleep)
    slept = []
    waiting = _client(limits, sleep=lambda s: (slept.append(s), __import__("time").sleep(s)))
    later = [waiting.admit(k, limit=LIMIT, period=PERIOD_S, wait=PERIOD_S * 2) for _ in range(LIMIT)]
    assert [a.number for a in later] == [LIMIT + 2, LIMIT + 3, LIMIT + 4]
    # the last one reuses the workflow's permit: it slept until then, by DynamoDB's clock bounds
    assert len(slept) >= 1 and sum(slept) <= SPACING_MS / 1000 + 2, slept
    assert later[-1].admitted_at >= run.output["admittedAt"] + SPACING_MS
    stamps = [a.admitted_at for a in admitted + later] + [run.output["admittedAt"]]
    assert crowded_windows(stamps, limit=LIMIT, period_ms=PERIOD_MS) == []


def _late_client(limits) -> tuple:
    """A client that spends the key's permits, then waits for the next one and wakes up
    ``LATE_CLIENT_S`` late (a paused Lambda): its admission, and the latest time AWS's clock can
    show when it returned."""
    import time

    overslept = []

    def sleep(seconds: float) -> None:
        if seconds > 1 and not overslept:  # the wait for a permit, not a clock bound's
            overslept.append(seconds)
            seconds += LATE_CLIENT_S
        time.sleep(seconds)

    client, k = _client(limits, sleep=sleep), key("late-client")
    first = [client.admit(k, limit=LIMIT, period=PERIOD_S) for _ in range(LIMIT)]
    late = client.admit(k, limit=LIMIT, period=PERIOD_S, wait=PERIOD_S * 3)
    returned = client.latest_ms()
    assert overslept, "the client never waited for a permit"
    return k, first, late, returned


def test_a_client_that_wakes_up_late_gives_its_permit_up_and_reserves_again(limits):
    k, first, late, returned = _late_client(limits)
    # it returned on time for the permit it kept (the latest time AWS's clock can show) ...
    assert 0 <= returned - late.admitted_at <= rate.ENTRY_MARGIN_MS + TRANSITION_MS, returned - late.admitted_at
    # ... the next one: the permit it woke up late for was given up unused
    assert late.number == LIMIT + 2
    assert int(limits.item(p.namespaced("r", k))[rate.ADMISSIONS]["N"]) == LIMIT + 2
    assert late.admitted_at >= first[1].admitted_at + SPACING_MS


def test_negative_control_a_client_without_the_guard_returns_late(limits):
    from unittest import mock

    with mock.patch.object(rate, "on_time", lambda now_ms, reserved_ms: True):
        _, _, late, returned = _late_client(limits)
    assert late.number == LIMIT + 1
    assert returned - late.admitted_at > rate.ENTRY_MARGIN_MS + TRANSITION_MS


def test_a_client_whose_clock_runs_ahead_admits_by_dynamodbs_clock_not_its_own(limits):
    from locked_workflow.constructs_lib.lock_client import LockTimeout

    k = key("skew")
    runs = limits.wait([limits.start("Rate", k) for _ in range(LIMIT)])
    assert [r.status for r in runs] == ["SUCCEEDED"] * LIMIT
    ahead = _client(limits, clock=lambda: __import__("time").time() * 1000 + 10 * PERIOD_MS)
    # by its own clock every permit freed long ago; by DynamoDB's Date headers none has
    with pytest.raises(LockTimeout):
        ahead.admit(k, limit=LIMIT, period=PERIOD_S, wait=0)
    item = limits.item(p.namespaced("r", k))
    assert int(item[rate.ADMISSIONS]["N"]) == LIMIT


def test_the_cli_shows_a_keys_rate_state_and_lists_it_without_a_holder(limits, capsys):
    import json

    from locked_workflow.constructs_lib import cli, cli_items

    k = key("cli")
    client = _client(limits)
    admitted = [client.admit(k, limit=LIMIT, period=PERIOD_S) for _ in range(LIMIT)]
    table = next(v for name, v in limits.app.resources.items() if name.startswith("LocksTable"))
    clients = {"dynamodb": limits.cloud.dynamodb, "stepfunctions": limits.cloud.stepfunctions}
    argv = ["locks", "rate", k, "--namespace", "r", "--table", table, "--period", str(PERIOD_S), "--json"]
    assert cli.main([*argv, "--limit", str(LIMIT)], clients=clients) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["admissions"] == LIMIT and shown["inLastPeriod"] == LIMIT and len(shown["lastAdmissions"]) == LIMIT
    # the next permit: the first admission's, one period on (not "now": all are spent)
    assert shown["nextPermit"] == cli_items.iso(admitted[0].admitted_at + SPACING_MS)
    assert cli.main(["locks", "list", "--table", table, "--namespace", "r", "--json"], clients=clients) == 0
    rows = [r for r in json.loads(capsys.readouterr().out) if r["key"] == k]
    assert [(r["slot"], r["state"], r["admissions"]) for r in rows] == [("rate", "rate", LIMIT)]
    assert cli.main(["locks", "list", "--table", table, "--held", "--json"], clients=clients) == 0
    assert k not in capsys.readouterr().out  # nothing is held
    assert cli.main(["locks", "list", "--table", table], clients=clients) == 0
    assert f"r#{k} rate limit: {LIMIT} admissions" in capsys.readouterr().out

