"""The bench's wait-policy sweep (``make bench ARGS=--sweep``): the contention case for each
candidate policy, and the one meeting the makespan target with the fewest transitions.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from tools.bench_load import contention, run_load
from tools.bench_stack import build_bench_stack, deploy_bench, policy_id, policy_text
from tools.scenario import DOLLARS_PER_TRANSITION
from locked_workflow.state_machines.lock_protocol import WaitPolicy

#: Candidate wait policies of ``--sweep`` (first, rate, max, jitter, retries per round).
SWEEP_POLICIES = (
    WaitPolicy(1, 1.5, 3, True, 4),
    WaitPolicy(1, 1.5, 4, True, 8),
    WaitPolicy(1, 2.0, 4, True, 8),
    WaitPolicy(2, 1.5, 5, True, 8),
    WaitPolicy(1, 2.0, 6, True, 8),
)
#: Sweep target: makespan within this factor of N x work.
SWEEP_MAKESPAN_TARGET = 1.3


@dataclass
class SweepEntry:
    policy: WaitPolicy
    makespan_ratio: float
    transitions_per_run: float
    dynamodb_per_run: float
    mean_wait_s: float
    max_wait_s: float
    mean_handoff_s: float
    overlaps: int
    repeats: int

    @property
    def meets_target(self) -> bool:
        return self.makespan_ratio <= SWEEP_MAKESPAN_TARGET


def choose_policy(entries: Sequence[SweepEntry]) -> SweepEntry | None:
    """The entry meeting the makespan target with the fewest transitions per run (None: none does)."""
    meeting = [e for e in entries if e.meets_target]
    return min(meeting, key=lambda e: (e.transitions_per_run, e.makespan_ratio)) if meeting else None


SWEEP_HEADERS = ("policy (first, rate, max)", "makespan ÷ N×work", "transitions/run", "$ per 1M runs",
                 "DynamoDB/run", "mean wait s", "max wait s", "mean handoff s", "meets ≤ 1.3")


def sweep_rows(entries: Sequence[SweepEntry]) -> list[list[str]]:
    return [
        [policy_text(e.policy), f"{e.makespan_ratio:.2f}", f"{e.transitions_per_run:.1f}",
         f"{e.transitions_per_run * DOLLARS_PER_TRANSITION * 1e6:,.0f}", f"{e.dynamodb_per_run:.1f}",
         f"{e.mean_wait_s:.1f}", f"{e.max_wait_s:.1f}", f"{e.mean_handoff_s:.2f}",
         "yes" if e.meets_target else "no"]
        for e in entries
    ]


def run_sweep(
    *,
    policies: Sequence[WaitPolicy] = SWEEP_POLICIES,
    runs: int = 10,
    work_s: float = 2.0,
    repeats: int = 1,
    backend: str = "moto",
    progress: bool = True,
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
) -> list[SweepEntry]:
    """The contention case for each policy, one policy at a time (``repeats`` loads each)."""
    from locked_workflow.testing import LocalCloud
    from locked_workflow.testing.synth import synth_app

    started = time.monotonic()
    synthesized = synth_app(
        lambda app: build_bench_stack(app, "LockBench", ours=WaitPolicy(), extra_policies=policies)
    )
    log(f"synthesized the sweep stack in {time.monotonic() - started:.1f} s")
    variants = [f"Sweep{policy_id(p)}" for p in policies]
    entries = []
    with LocalCloud(backend=backend) as cloud:
        app = deploy_bench(cloud, synthesized, variants)
        run_load(cloud, app.arn(variants[0]), ["warm-up"], work_s=0, label="warm-up", progress=False)
        for policy, variant in zip(policies, variants):
            load = contention(cloud, app.arn(variant), runs=runs, work_s=work_s, key="hot",
                              label=policy_text(policy), progress=progress, repeats=repeats)
            entries.append(
                SweepEntry(
                    policy=policy,
                    makespan_ratio=load.makespan_ratio,
                    transitions_per_run=load.transitions_per_run,
                    dynamodb_per_run=load.dynamodb_per_run,
                    mean_wait_s=load.mean_wait_s,
                    max_wait_s=load.max_wait_s,
                    mean_handoff_s=load.mean_handoff_s,
                    overlaps=load.overlaps,
                    repeats=repeats,
                )
            )
    return entries
