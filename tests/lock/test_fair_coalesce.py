"""Coalescing on the fair lock (``Lock.fair(key, queue=QueueLimit...)``), on both DynamoDB
backends: a burst on one key collapses to the run at work plus the newest queued one
(``keep_newest``), or refuses newcomers to a full queue (``keep_oldest``). The plain fair lock
on the same burst is the negative control (it runs the work once per run)."""

from __future__ import annotations

import pytest

from test_fair_lock import client, fair, fair_synth, key  # noqa: F401 - the fair stack's fixtures
from tools.bench_fair import tickets_and_fences
from locked_workflow import LockErrors
from locked_workflow.state_machines import fair_protocol as fp
from locked_workflow.state_machines import lock_protocol as p

#: The burst: a holder at work, then this many more runs started together on its key.
BURST = 19


def burst(fair, machine: str, holder_machine: str, *, work_ms: int, settled, runs: int = BURST) -> tuple:
    """A holder holds ``k`` at its gate; ``runs`` runs are started together on ``k``; once
    ``settled(results so far)`` holds, the gate opens. Returns (key, holder's result, the
    burst's arns and results)."""
    k = key("burst")
    holder = fair.start(holder_machine, {"key": k, "workMs": 1, "hold": True})
    fair.until(lambda: p.OWNER in fair.lock(k))
    arns = [fair.start(machine, {"key": k, "workMs": work_ms}) for _ in range(runs)]
    fair.until(lambda: settled(k, arns), timeout=90)
    fair.open(k)
    results = fair.wait([holder] + arns)
    return k, results[0], arns, results[1:]


def ended(fair, arns) -> int:
    return sum(1 for a in arns if fair.cloud.status(a) != "RUNNING")


def _entered_work(result) -> bool:
    return any((e.get("stateEnteredEventDetails") or {}).get("name", "").endswith("Probe") for e in result.history)


def _superseded_by_newer_runs(arns, results, won, runs: int) -> list:
    """The run that won is the newest (the last of ``runs`` tickets); every other one ended
    ``Lock.Superseded``, its cause naming a newer run of the burst, and never entered its work.
    The superseded runs' results."""
    ticket_of = {a: tickets_and_fences(r.history)[0] for a, r in zip(arns, results)}
    newest = max(arns, key=lambda a: ticket_of[a])
    assert won.arn == newest and ticket_of[newest] == [runs]
    superseded = [(a, r) for a, r in zip(arns, results) if a != newest]
    for a, r in superseded:
        assert r.error == LockErrors.SUPERSEDED, (r.error, r.cause)
        by = next(b for b in arns if b in r.cause)
        assert ticket_of[by][0] > ticket_of[a][0], (r.cause, ticket_of[a])
        assert not _entered_work(r)
    return [r for _, r in superseded]


def test_keep_newest_runs_the_work_for_the_holder_and_the_newest_run_only(fair):
    # the gate opens once the burst has queued (BURST tickets out) and all but one ended
    k, holder, arns, results = burst(
        fair, "FairNewest", "FairNewest", work_ms=1000,
        settled=lambda k, arns: fp.counters(fair.lock(k))[1] == BURST and ended(fair, arns) == BURST - 1)
    assert holder.status == "SUCCEEDED", (holder.error, holder.cause)
    won = [r for r in results if r.status == "SUCCEEDED"]
    superseded = [r for r in results if r.status != "SUCCEEDED"]
    assert len(won) == 1 and len(superseded) == BURST - 1, [(r.status, r.error) for r in results]
    # the one that ran is the newest (the last ticket); every other one ended superseded, its
    # cause naming a newer run (an execution of the burst that took a later ticket)
    for r in _superseded_by_newer_runs(arns, results, won[0], BURST):
        assert not any(e["type"] == "TaskTimedOut" for e in r.history)  # woken, not its (2 min) park timeout
    probe = fair.probe(k)
    assert probe.get("violations", 0) == 0 and probe["seen"] == [1, 1] and probe["counter"] == 2
    assert probe["fences"] == sorted(probe["fences"]) and len(set(probe["fences"])) == 2
    assert fair.drained(k)


def test_negative_control_the_plain_fair_lock_runs_the_work_for_every_run(fair):
    runs = 5  # (enough to fail the burst's "the work ran twice")
    k, holder, _, results = burst(fair, "Fair", "FairHold", work_ms=1, runs=runs,
                                  settled=lambda k, arns: fp.counters(fair.lock(k))[1] == runs)
    assert [r.status for r in [holder] + results] == ["SUCCEEDED"] * (runs + 1)
    assert fair.probe(k)["counter"] == runs + 1


def test_keep_oldest_refuses_newcomers_to_a_full_queue_and_keeps_the_queued_one(fair):
    k = key("oldest")
    holder = fair.start("FairOldest", {"key": k, "workMs": 1, "hold": True})
    fair.until(lambda: p.OWNER in fair.lock(k))
    first = fair.start("FairOldest", {"key": k, "workMs": 1})
    fair.until(lambda: len(fair.queue(k)) == 1)
    newcomers = [fair.start("FairOldest", {"key": k, "workMs": 1}) for _ in range(3)]
    refused = fair.wait(newcomers, timeout=60)
    assert [r.error for r in refused] == [LockErrors.QUEUE_FULL] * 3, [(r.error, r.cause) for r in refused]
    assert fair.queue(k) and fp.counters(fair.lock(k)) == (0, 1)  # the queued one keeps its place
    fair.open(k)
    assert [r.status for r in fair.wait([holder, first])] == ["SUCCEEDED"] * 2
    probe = fair.probe(k)
    assert probe["seen"] == [1, 1] and probe["counter"] == 2 and probe["fences"] == sorted(probe["fences"])
    assert fair.drained(k)


def test_a_fair_client_queued_on_a_coalescing_key_is_superseded_with_a_typed_error(fair):
    """A ``LockClient(fair=True)`` queues without superseding anyone (it does not know the
    key's queue limit), and is superseded like a workflow: the next run arriving behind it
    ends its wait with ``LockSuperseded`` (``Lock.Superseded``), its row gone."""
    import threading

    from locked_workflow.constructs_lib.lock_client import LockSuperseded

    k = key("client")
    holder = fair.start("FairNewest", {"key": k, "workMs": 1, "hold": True})
    fair.until(lambda: p.OWNER in fair.lock(k))
    raised = []

    def wait_as_client():
        try:
            client(fair).acquire(k, wait=60, lease=30, poll_interval=0.1)
        except LockSuperseded as error:
            raised.append(error)

    thread = threading.Thread(target=wait_as_client)
    thread.start()
    fair.until(lambda: fp.counters(fair.lock(k))[1] == 1)  # the client has its ticket
    newest = fair.start("FairNewest", {"key": k, "workMs": 1})
    thread.join(60)
    assert len(raised) == 1 and raised[0].error == LockErrors.SUPERSEDED and raised[0].key == k, raised
    assert newest in raised[0].holder  # the newer run, by its owner
    fair.open(k)
    assert [r.status for r in fair.wait([holder, newest])] == ["SUCCEEDED"] * 2
    assert fair.probe(k)["counter"] == 2 and fair.drained(k)


def test_a_fair_client_release_passes_superseded_tickets_and_wakes_the_newest(fair):
    """A client holds a coalescing key; a run queues and parks, a newer one supersedes it. The
    client's release passes the superseded ticket (JUMP) and hands the lock to the newest."""
    k = key("client-release")
    lease = client(fair).acquire(k, lease=60)
    first = fair.start("FairNewest", {"key": k, "workMs": 1})
    fair.until(lambda: len(fair.queue(k)) == 1)
    newest = fair.start("FairNewest", {"key": k, "workMs": 1})
    assert fair.wait([first], timeout=60)[0].error == LockErrors.SUPERSEDED
    fair.until(lambda: len(fair.queue(k)) == 1)  # the newest parked
    client(fair).release(lease)
    result = fair.wait([newest])[0]
    assert result.status == "SUCCEEDED" and result.output["probe"]["fence"] == lease.fence + 1
    assert fair.probe(k)["counter"] == 1 and fair.drained(k)


@pytest.mark.parametrize("waiters", [0, -1, 1.5, True, 1001, "1"])
def test_queue_limits_are_validated_at_synth(waiters):
    from locked_workflow import QueueLimit

    for make in (QueueLimit.keep_newest, QueueLimit.keep_oldest):
        with pytest.raises((TypeError, ValueError), match="`waiters` must be"):
            make(waiters)


# ---- EXPRESS: coalescing waiters poll as the head ----------------------------------------------

#: The EXPRESS burst: a holder at work, then this many EXPRESS runs started together.
EXPRESS_BURST = 4


def _express_burst(fair, machine: str, holder_machine: str, settled) -> tuple:
    return burst(fair, machine, holder_machine, work_ms=300, runs=EXPRESS_BURST, settled=settled)




def test_express_keep_newest_runs_the_work_for_the_holder_and_the_newest_run_only(fair):
    """An EXPRESS state machine cannot park on a task token (``LockedWorkflow`` builds its fair
    lock with ``polling``): its queued runs poll as the head, keeping a lease on their row. A
    newer run supersedes one as it supersedes a parked one (``ENQUEUE_NEWEST`` moves ``cut``),
    deletes its row and wakes nothing (a lease, no token); the superseded poller's next try as
    the head is refused (``GRANT`` refuses tickets ``<= cut``), and its look ends it
    ``Lock.Superseded`` before its work. The holder is a STANDARD run at its gate (same key,
    same queue limit)."""
    k, holder, arns, results = _express_burst(
        fair, "FairNewestExpress", "FairNewest",
        settled=lambda k, arns: fp.counters(fair.lock(k))[1] == EXPRESS_BURST
        and ended(fair, arns) == EXPRESS_BURST - 1)
    assert holder.status == "SUCCEEDED", (holder.error, holder.cause)
    won = [r for r in results if r.status == "SUCCEEDED"]
    assert len(won) == 1, [(r.status, r.error, r.cause) for r in results]
    _superseded_by_newer_runs(arns, results, won[0], EXPRESS_BURST)
    # polled, never parked on a token
    assert not any(e["type"] == "TaskSubmitted" for r in results for e in r.history)
    probe = fair.probe(k)
    assert probe.get("violations", 0) == 0 and probe["seen"] == [1, 1] and probe["counter"] == 2
    assert probe["fences"] == sorted(probe["fences"]) and len(set(probe["fences"])) == 2
    assert fair.drained(k)  # no queue row left (a superseded poller's row is deleted)


def test_negative_control_the_plain_fair_lock_on_express_runs_the_work_for_every_run(fair):
    k, holder, _, results = _express_burst(
        fair, "FairExpress", "FairHold", settled=lambda k, arns: fp.counters(fair.lock(k))[1] == EXPRESS_BURST)
    assert [r.status for r in [holder] + results] == ["SUCCEEDED"] * (EXPRESS_BURST + 1)
    assert fair.probe(k)["counter"] == EXPRESS_BURST + 1


def test_a_coalescing_section_derives_its_stop_grace_from_its_work_not_from_its_park():
    """The stop grace (how long a stopped holder's work may still run) is derived from the
    protected work's tasks, the lock's own states left out (by name: the section's record); a
    task on a task token counts as a callback with no bound: 15 minutes. A coalescing park is
    a transaction (the row's PARK beside a check of the item's cut) on a task token: not known
    as a lock state, it made every coalescing section's grace 15 minutes - a coalescing holder
    stopped at work kept its key for 15 minutes instead of its work's timeout + 5 s
    (``make stress`` found the key held after everything ended). Every fair kind's parks are
    lock states."""
    import aws_cdk as cdk
    from aws_cdk import aws_stepfunctions as sfn

    from locked_workflow import Lock, LockedWorkflow, QueueLimit
    from locked_workflow.constructs_lib.monitoring_states import synthesized_definition
    from locked_workflow.constructs_lib.section_record import named_states
    from locked_workflow.state_machines.lock_protocol import jsonata

    app = cdk.App()
    stack = cdk.Stack(app, "Graces")
    key = jsonata("$states.input.key")
    kinds = {"Plain": Lock.fair(key), "Newest": Lock.fair(key, queue=QueueLimit.keep_newest(1)),
             "Oldest": Lock.fair(key, queue=QueueLimit.keep_oldest(2))}
    workflows = {name: LockedWorkflow(stack, name, lock=lock, protected=sfn.Pass(stack, f"{name}Work"),
                                      state_machine_name=name) for name, lock in kinds.items()}
    for name, workflow in workflows.items():
        lock_states = synthesized_definition(workflow.state_machine)["States"]["Lock"]
        parks = [n for n, s in named_states(lock_states["Branches"][0]["States"])
                 if s.get("Type") == "Task" and s["Resource"].endswith(".waitForTaskToken")]
        recorded = workflow.section.state_record.names()
        assert parks and set(parks) <= recorded, (name, sorted(set(parks) - recorded))
