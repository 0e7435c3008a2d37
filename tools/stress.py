"""``make stress``: a randomized fault campaign against the lock, judged by invariants.

::

    python -m tools.stress --runs 500 --keys 5 --seed 1 --backend moto
    python -m tools.stress --redrive-readings strict   # one reading only
    python -m tools.stress --negative-control      # must FAIL: unlocked runs mixed in

One stack (:func:`build_stack`) holds every shape a user may build on one key, all on one lock
table and one key namespace (``x``), so they contend with each other: a plain ``LockedWorkflow``;
a Map whose iterations lock the same key; a Parallel whose branches do; a section nested in a
section on the same key; a workflow whose state machine times out while holding; a workflow
with a lease shorter than its work (its own keys: overlap is allowed there, by design); the fair
lock (``Lock.fair``); the coalescing fair lock (``Lock.fair(key, queue=QueueLimit.keep_newest(1))``,
the "Coalesce" shape, on keys of its own in namespace ``n``: every participant of a key must use
the same queue limit) whose work is the probe; a rate limit (``Lock.rate``, the "Rate" shape:
:data:`RATE_LIMIT` entries per :data:`RATE_PERIOD_S` on keys of its own in namespace ``r``; runs
admitted together work side by side, so the probe's exclusion checks do not apply there); a
workflow holding its key whose work is a Map of sections, or a Parallel
of two sections, each on a child key of namespace ``c`` (``C0``, ``C1`` ...: concurrent children
of one hold, on other keys - they contend with each other and with other holds' children);
a section beside a sibling branch that fails (the user catches it: Step Functions cancels the
section, which runs no Catch); the lock on the record itself (``Lock.on_record``) on records
seeded just under and over the size it reads into the workflow (:data:`RECORD_SIZES_KB`: the
run over the limit must fail ``Lock.RecordTooLarge`` and free the record at once), whose work
increments the record's balance through the release.
Python holders take part through :class:`LockClient`: a thread holding a key (sometimes
re-entering its own hold), and an asyncio event loop whose tasks each hold a key (tasks beside
a block are other holders: a task refused with ``LockHeldInThisThread`` retries after an
``await``). The protected work is the probe Lambda (``lambdas/probe``); the clients invoke it
in-process with their lease's fence.

Each run draws: a shape, a key, a work time (sometimes past the probe's function timeout: the
task fails with ``Sandbox.Timedout`` while the handler runs on), a failure of the work, a
padding field of 50-150 KB in its input (shapes whose output stays under 256 KiB), a stop -
after a random delay, once inside its work (a share of the padded runs: the janitor must read a
large history), as soon as the run waits for its key (before it acquires), or after a long wait
(many acquire attempts in its history) - and a redrive of a failed, stopped or
timed-out run. The lock's own writes get faults (throttles; lost responses of acquires,
releases, the fair lock's enqueues and acquires as head; lost wake-ups), and the janitor's
status-change events are delivered at least once: every one twice, and one more copy held back
and delivered at random moments and once at the end (after redrives too).

Redrive readings: RedriveExecution resumes mid-branch, as AWS documents; whether a redriven
Parallel's ``Arguments`` (a Map's ``Items``) are evaluated again is undocumented, so the
campaign runs under both readings (``--redrive-readings both``, the default): the first half
of the plan with ``redrive_reevaluates_arguments=False``, the second with ``True``.

Invariants (every one must hold; ``--negative-control`` must break the first):

1. the probe never finds another holder inside (``insideAtEntry`` is always 1), per key,
   child keys included;
2. no lost update: the probe's read-modify-write counter equals its accepted writes; a record's
   balance counts every run on it that succeeded (and at most those stopped besides), and a
   record over the limit is never updated;
3. fences at entry never go down, per key;
4. every run ends SUCCEEDED or with its documented outcome (the work's error or its function
   timeout, ``Lock.Timeout``, ABORTED when stopped, TIMED_OUT for the timing-out shape,
   ``Lock.Lost`` only for the short lease, ``Lock.Superseded`` only for "Coalesce");
5. once the janitor has settled and the graces passed, no lock is left held and no queue
   holds anyone; a free fair lock whose queue shows only holes (tickets whose waiter was
   stopped before it parked, or took another after a lost response) admits one more fair
   execution within :data:`NEXT_ARRIVAL_S`, which leaves the queue empty;
6. a client's re-entered hold yields the enclosing lease (same fence) and leaving it releases
   nothing;
7. handoff after an ended holder: when a run's execution ended (stopped, timed out, or after
   its section was cancelled) while
   it held a key and another participant was waiting for that key, the next entry into the
   key came within ``grace + round + HANDOFF_SLACK_S`` of the end - ``grace`` the stop grace
   stored with the acquisition (the probe's 3 s timeout + 5 s), ``round`` one liveness round of
   a polling waiter (:data:`LIVENESS_ROUND_S`) or one park timeout for a fair one
   (:data:`FAIR_PARK_TIMEOUT_S`), and :data:`HANDOFF_SLACK_S` for a loaded machine (for a
   cancelled section, plus the presence settle time, ``lock_protocol.PRESENCE_SETTLE_MS``). "Held" is
   read on the lock item right after the end (its owner names the execution); "waiting" is
   read from the waiter's own history (an acquire attempt on the key since its last entry,
   no entry until past the bound, still running) or, for a client, from its own clock;
8. coalescing ("Coalesce"): a run that ended ``Lock.Superseded`` never entered its work (no
   probe in its history since its last redrive: a run stopped at work and redriven is refused
   its resumed work, queues again and may then be superseded), and once settled (the next arrival sent at a
   queue of holes, as for the fair lock) no queue row is left on its keys;
9. rate limit ("Rate"): per key, no window of :data:`RATE_PERIOD_S` holds more than
   :data:`RATE_LIMIT` of the admissions' reserved times (``tools/rate_checks.py``, read from
   every Rate run's history, redriven and stopped ones included: a stopped run spends its
   permit).

The "Cancelled" shape runs a section beside a branch that fails 0-3 s after the start, the
failure caught: Step Functions cancels the section wherever it is (waiting, working, releasing;
no Catch runs) and the execution succeeds. Its lock, if still held when the execution ended,
is judged by invariant 7 like a stopped holder's (the cancel came before that end).

Faults reach the new shapes as they reach the others: their runs are stopped (after a delay,
once inside, as soon as they wait, after a long wait) and redriven, the coalescing enqueue's
response is lost (``ENQUEUE_NEWEST``, as the fair ``ENQUEUE``'s), its grants' and wake-ups'
as the fair lock's; a rate admission's response is lost (``rate_protocol.ADMIT``: its retry finds
the count moved and spends another permit, which the limit allows) or throttled.

Not yet covered: records near the payload limit.

The campaign lives in its own modules, one concept each: ``tools/stress_stack.py`` (the stack
and its shapes' parameters), ``tools/stress_plan.py`` (the runs drawn), ``tools/stress_faults.py``
(the faults injected), ``tools/stress_history.py`` (reading a run's history),
``tools/stress_campaign.py`` (running the plan), ``tools/stress_settle.py`` (the settled tables)
and ``tools/stress_judge.py`` (the invariants and the summary). This module is the command line
and re-exports the names the tests and ``tools/matrix`` use.
"""

from __future__ import annotations

import argparse
import sys
import time

from tools.stress_campaign import run_campaign
from tools.stress_history import now_ms, timeline, trail, waits_of
from tools.stress_judge import handoff_bound_ms, judge, past_timeout, summary
from tools.stress_plan import Hold, Report, Run, Wait, plan
from tools.stress_settle import NEXT_ARRIVAL_S, left_held, next_arrivals, table_name
from tools.stress_stack import (
    CLIENT_SHAPES,
    FAIR_PARK_TIMEOUT_S,
    FAST,
    FLOW_KEYS,
    HANDOFF_SLACK_S,
    LIVENESS_ROUND_S,
    OVER_LIMIT_RECORDS,
    PADDED_SHAPES,
    PROBE_GRACE_S,
    RATE_LIMIT,
    RATE_PERIOD_S,
    READINGS,
    RECORD_SIZES_KB,
    SHAPES,
    TRANSIENT_ERRORS,
    build_stack,
)

__all__ = [
    "CLIENT_SHAPES", "FAIR_PARK_TIMEOUT_S", "FAST", "FLOW_KEYS", "HANDOFF_SLACK_S", "LIVENESS_ROUND_S",
    "NEXT_ARRIVAL_S", "OVER_LIMIT_RECORDS", "PADDED_SHAPES", "PROBE_GRACE_S", "RATE_LIMIT", "RATE_PERIOD_S",
    "READINGS", "RECORD_SIZES_KB", "SHAPES", "TRANSIENT_ERRORS", "Hold", "Report", "Run", "Wait",
    "build_stack", "handoff_bound_ms", "judge", "left_held", "main", "next_arrivals", "now_ms", "past_timeout",
    "plan", "run_campaign", "summary", "table_name", "timeline", "trail", "waits_of",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--keys", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--backend", choices=["moto", "dynamodb-local", "both"], default="both")
    parser.add_argument("--redrive-readings", choices=["both", *READINGS], default="both",
                        help="what a redriven Parallel's Arguments do (undocumented): both readings, half the runs each")
    parser.add_argument("--negative-control", action="store_true", help="mix unlocked runs in: must fail")
    args = parser.parse_args(argv)

    from locked_workflow.testing import LocalCloud
    from locked_workflow.testing.synth import synth_app

    synthesized = synth_app(lambda app: build_stack(app, "Stress"))
    backends = ["moto", "dynamodb-local"] if args.backend == "both" else [args.backend]
    readings = tuple(READINGS) if args.redrive_readings == "both" else (args.redrive_readings,)
    failed = False
    for backend in backends:
        with LocalCloud(backend) as cloud:
            app = cloud.deploy(synthesized.template, assets_dir=synthesized.assets_dir)
            started = time.time()
            report = run_campaign(cloud, app, plan(args.runs, args.keys, args.seed, args.negative_control),
                                  seed=args.seed, readings=readings, progress=True)
            print(f"\n## {backend}: {args.runs} runs over {args.keys} keys, seed {args.seed}, redrive readings "
                  f"{', '.join(readings)}, {time.time() - started:.0f} s\n")
            print(summary(report))
            failed |= not report.ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
