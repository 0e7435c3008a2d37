"""``make demo``: the example app under a burst of concurrent customer updates, offline.

::

    python -m tools.demo [--no-lock | --fair] [--runs N] [--customers K]
        [--per-customer M] [--work-ms MS] [--backend moto|dynamodb-local] [--out PATH]

Synthesizes the example app (``CustomerUpdatesStack``; ``--no-lock`` builds it without the
lock - the negative control; ``--fair`` with the fair lock: arrival order, wake-up handoffs), deploys it into a :class:`~locked_workflow.testing.LocalCloud`,
puts ``N`` ``CustomerUpdateRequested`` events for customer ``c-1`` plus ``M`` for each of
``K`` other customers on the app's bus in one burst (each adds 1 to the balance), shows a
progress bar while the executions run, then prints the invariants:

* overlapping critical sections per customer (the protected ``Apply update`` task's
  entered..exited interval in each execution's history);
* lost updates: runs per customer minus the balance the customers table ends with;
* fences in order: per customer, fences strictly increase in critical-section order;

and the costs (state transitions per run, retries, the lock's DynamoDB calls, makespan),
and writes a timeline PNG (one lane per customer, a bar per critical section labelled with
its fence). Exit code 1 only when an invariant fails *with* the lock; ``--no-lock`` is a
demonstration and exits 0 whatever it shows.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from tools import scenario
from tools.scenario import CriticalSection, RunMetrics
from locked_workflow.testing.lambda_runtime import restored_environ

DEFAULT_OUT = Path("out") / "demo-timeline.png"
#: The example Lambda logs every update (Powertools, JSON on stdout) and prints its metrics;
#: the demo turns both down unless asked (``--lambda-logs``), so the summary stays readable.
QUIET_LAMBDA_ENVIRONMENT = {"POWERTOOLS_LOG_LEVEL": "ERROR", "POWERTOOLS_METRICS_DISABLED": "true"}


@contextmanager
def quiet_lambdas(enabled: bool = True) -> Iterator[None]:
    """Defaults for the in-process Lambdas' environment (variables already set are kept)."""
    with restored_environ(QUIET_LAMBDA_ENVIRONMENT):
        if enabled:
            for key, value in QUIET_LAMBDA_ENVIRONMENT.items():
                os.environ.setdefault(key, value)
        yield


@dataclass
class DemoReport:
    lock_enabled: bool
    fair: bool
    backend: str
    runs: list[RunMetrics]
    sections: list[CriticalSection]
    expected: dict[str, int]
    balances: dict[str, int]
    overlaps: list[tuple[CriticalSection, CriticalSection]]
    fence_violations: list[tuple[CriticalSection, CriticalSection]]
    lost: dict[str, int]
    makespan_s: float
    timeline: Path | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def succeeded(self) -> int:
        return sum(r.status == "SUCCEEDED" for r in self.runs)

    @property
    def failed(self) -> int:
        return len(self.runs) - self.succeeded

    @property
    def lost_total(self) -> int:
        return sum(self.lost.values())

    @property
    def invariants_hold(self) -> bool:
        return (
            not self.overlaps
            and not self.fence_violations
            and self.lost_total == 0
            and self.failed == 0
        )


def run_demo(
    *,
    lock_enabled: bool = True,
    fair: bool = False,
    runs: int = 20,
    customers: int = 3,
    per_customer: int = 2,
    work_ms: int = 250,
    backend: str = "moto",
    out: Path | None = DEFAULT_OUT,
    timeout_s: float = 600,
    progress: bool = True,
    lambda_logs: bool = False,
) -> DemoReport:
    from locked_workflow.testing import LocalCloud

    timings: dict[str, float] = {}
    t0 = time.monotonic()
    synthesized = scenario.synth_example(lock_enabled=lock_enabled, fair=fair)
    timings["synth_s"] = time.monotonic() - t0
    load = scenario.customer_load(runs, customers, per_customer)
    expected: dict[str, int] = {}
    for customer in load:
        expected[customer] = expected.get(customer, 0) + 1

    with quiet_lambdas(not lambda_logs), LocalCloud(backend=backend) as cloud:
        t1 = time.monotonic()
        app = scenario.deploy_example(cloud, synthesized, lock_enabled=lock_enabled)
        timings["deploy_s"] = time.monotonic() - t1
        started = scenario.fire_customer_updates(cloud, app, load, work_ms=work_ms)
        arns = [arn for _, arn in started]
        statuses = scenario.wait_all(
            cloud,
            arns,
            timeout_s=timeout_s,
            progress=scenario.stderr_progress("runs") if progress else None,
        )
        still_running = [a for a, s in statuses.items() if s not in scenario.TERMINAL]
        if still_running:
            raise TimeoutError(f"{len(still_running)} executions still running after {timeout_s}s")
        metrics = [
            scenario.run_metrics(
                arn,
                cloud.history(arn),
                protected_state=scenario.EXAMPLE_PROTECTED_STATE,
                status=statuses[arn],
                key=customer,
            )
            for customer, arn in started
        ]
        balances = scenario.customer_balances(cloud, app.customers_table)
    timings["run_s"] = time.monotonic() - t1 - timings["deploy_s"]

    sections = [s for m in metrics for s in m.sections]
    report = DemoReport(
        lock_enabled=lock_enabled,
        fair=fair,
        backend=backend,
        runs=metrics,
        sections=sections,
        expected=expected,
        balances=balances,
        overlaps=scenario.find_overlaps(sections),
        fence_violations=scenario.fence_order_violations(sections),
        lost=scenario.lost_updates(expected, balances),
        makespan_s=(max(m.stop_ms for m in metrics) - min(m.start_ms for m in metrics)) / 1000,
        timings=timings,
    )
    if out is not None:
        report.timeline = write_timeline(report, Path(out))
    return report


# ----------------------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------------------


def summary_lines(report: DemoReport) -> list[str]:
    mode = ("WITH the fair lock" if report.fair else "WITH the lock") if report.lock_enabled \
        else "WITHOUT the lock (negative control)"
    lines = [f"Customer updates {mode} - backend {report.backend}"]
    lines.append(
        f"  runs                 {len(report.runs)}: {report.succeeded} succeeded, {report.failed} failed"
    )
    failed = [r for r in report.runs if r.status != "SUCCEEDED"]
    for run in failed[:5]:
        lines.append(f"    {run.status}: {run.execution.rsplit(':', 1)[-1]} ({run.failure})")

    groups = scenario.by_key(report.sections)
    overlaps_by_key: dict[str, int] = {}
    for first, _ in report.overlaps:
        overlaps_by_key[first.key] = overlaps_by_key.get(first.key, 0) + 1
    lines.append(f"  overlapping critical sections: {len(report.overlaps)} pair(s)")
    for key in groups:
        lines.append(
            f"    {key:<8} {len(groups[key]):>3} sections, {overlaps_by_key.get(key, 0)} overlapping pair(s)"
        )

    lines.append(f"  lost updates         {report.lost_total}")
    for key, lost in report.lost.items():
        lines.append(
            f"    {key:<8} expected balance {report.expected[key]:>3}, table has "
            f"{report.balances.get(key, 0):>3} -> lost {lost}"
        )

    if report.lock_enabled:
        verdict = "yes" if not report.fence_violations else f"NO ({len(report.fence_violations)} decrease(s))"
        lines.append(f"  fences in order      {verdict}")
        for key, group in groups.items():
            fences = [s.fence for s in group]
            lines.append(f"    {key:<8} {' '.join(str(f) for f in fences)}")
    else:
        lines.append("  fences in order      n/a (no lock, no fences)")

    entered = [r.transitions.entered for r in report.runs]
    retries = sum(r.transitions.retries for r in report.runs)
    billed = [r.transitions.billed for r in report.runs]
    lines.append(
        f"  state transitions    {sum(billed) / len(billed):.1f} per run "
        f"(min {min(billed)}, max {max(billed)}; {sum(entered)} states entered, {retries} retries)"
    )
    dynamodb = [r.dynamodb.total for r in report.runs]
    failed_writes = sum(r.dynamodb.failed for r in report.runs)
    lines.append(
        f"  lock DynamoDB calls  {sum(dynamodb) / len(dynamodb):.1f} per run "
        f"({sum(dynamodb)} in all, {failed_writes} failed conditional writes)"
    )
    waits = [r.wait_ms / 1000 for r in report.runs if r.wait_ms is not None]
    if waits:
        lines.append(
            f"  wait for the lock    mean {sum(waits) / len(waits):.1f} s, max {max(waits):.1f} s"
        )
    gaps = sorted(scenario.handoff_gaps_ms(report.sections)) if report.lock_enabled else []
    if gaps:
        lines.append(
            f"  handoff gap          median {gaps[len(gaps) // 2]} ms, max {gaps[-1]} ms "
            "(next acquire acknowledged - previous release sent, per customer)"
        )
    lines.append(f"  makespan             {report.makespan_s:.1f} s")
    if report.timeline:
        lines.append(f"  timeline             {report.timeline}")
    if report.lock_enabled:
        lines.append(
            "  RESULT: invariants hold" if report.invariants_hold else "  RESULT: INVARIANT VIOLATED"
        )
    else:
        shown = report.overlaps or report.lost_total
        lines.append(
            "  RESULT: without the lock, critical sections overlap and updates are lost"
            if shown
            else "  RESULT: no overlap this time (try more --runs or a larger --work-ms)"
        )
    return lines


def overlap_spans(
    overlaps: Sequence[tuple[CriticalSection, CriticalSection]],
) -> dict[str, list[tuple[int, int]]]:
    """Per key, the merged time ranges (epoch ms) in which two of its sections overlapped."""
    spans: dict[str, list[tuple[int, int]]] = {}
    for first, second in overlaps:
        spans.setdefault(first.key, []).append((second.start_ms, min(first.end_ms, second.end_ms)))
    merged: dict[str, list[tuple[int, int]]] = {}
    for key, ranges in spans.items():
        out: list[tuple[int, int]] = []
        for start, end in sorted(ranges):
            if out and start <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], end))
            else:
                out.append((start, end))
        merged[key] = out
    return merged


def write_timeline(report: DemoReport, path: Path) -> Path:
    """One lane per customer, a bar per critical section, labelled with its fence."""
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError(
            "the demo's timeline needs matplotlib, an optional dependency: pip install 'locked-workflow[demo]'",
            name=error.name,
        ) from error

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    groups = scenario.by_key(report.sections)
    t0 = min(r.start_ms for r in report.runs)
    # Overlapping sections of one lane go to sub-rows, so overlaps are visible as stacks.
    layout: list[tuple[str, int, CriticalSection]] = []
    rows_of: dict[str, int] = {}
    for key, group in groups.items():
        row_ends: list[int] = []
        for section in group:
            row = next((i for i, end in enumerate(row_ends) if end <= section.start_ms), None)
            if row is None:
                row_ends.append(section.end_ms)
                row = len(row_ends) - 1
            else:
                row_ends[row] = section.end_ms
            layout.append((key, row, section))
        rows_of[key] = max(1, len(row_ends))

    lane_base: dict[str, float] = {}
    y = 0.0
    for key in reversed(list(groups)):
        lane_base[key] = y
        y += rows_of[key] + 0.6
    height = max(3.0, 0.35 * y + 1.5)
    fig, ax = plt.subplots(figsize=(12, height))
    work_color = "#2b7bba" if report.lock_enabled else "#d95f02"
    for key, row, section in layout:
        rows = rows_of[key]
        bar_h = 0.8
        y0 = lane_base[key] + (rows - 1 - row)
        if section.acquire_acked_ms is not None and section.release_sent_ms is not None:
            ax.barh(
                y0 + bar_h / 2,
                (section.release_sent_ms - section.acquire_acked_ms) / 1000,
                left=(section.acquire_acked_ms - t0) / 1000,
                height=bar_h,
                color="#c6dbef",
                edgecolor="none",
            )
        ax.barh(
            y0 + bar_h / 2,
            max(section.duration_ms, 1) / 1000,
            left=(section.start_ms - t0) / 1000,
            height=bar_h * 0.6,
            color=work_color,
            edgecolor="black",
            linewidth=0.4,
        )
        label = str(section.fence) if section.fence is not None else ""
        if label:
            ax.text(
                (section.start_ms - t0 + section.duration_ms / 2) / 1000,
                y0 + bar_h + 0.05,
                label,
                ha="center",
                va="bottom",
                fontsize=7,
            )
    for key, spans in overlap_spans(report.overlaps).items():
        for start, end in spans:  # shaded behind the lane, merged: one shade however many pairs
            ax.barh(lane_base[key] + rows_of[key] / 2 - 0.05, (end - start) / 1000,
                    left=(start - t0) / 1000, height=rows_of[key] + 0.3,
                    color="#fbb4b4", edgecolor="none", zorder=0)
    ax.set_yticks([lane_base[k] + rows_of[k] / 2 for k in groups])
    ax.set_yticklabels(list(groups))
    ax.set_xlabel("seconds since the first execution started")
    ax.set_ylim(-0.3, y)
    ax.set_xlim(left=0)
    lock = ("the fair lock" if report.fair else "the lock") if report.lock_enabled else "the lock"
    gaps = sorted(scenario.handoff_gaps_ms(report.sections)) if report.lock_enabled else []
    title = (
        f"Critical sections per customer {'with' if report.lock_enabled else 'WITHOUT'} {lock}: "
        f"{len(report.overlaps)} overlapping pair(s), {report.lost_total} lost update(s)"
        + (f"; handoff gap median {gaps[len(gaps) // 2]} ms" if gaps else "")
    )
    ax.set_title(title, fontsize=10)
    handles = [Patch(color=work_color, label="protected work (Apply update)")]
    if report.lock_enabled:
        handles.append(Patch(color="#c6dbef", label="lock held (acquire acknowledged .. release sent); number = fence"))
    if report.overlaps:
        handles.append(Patch(color="#fbb4b4", label="critical sections overlap"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout(rect=(0, 0.35 / height, 1, 1))  # room for the legend below the axis label
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tools.demo",
        description="Run a burst of concurrent customer updates through the example app, offline.",
    )
    parser.add_argument("--no-lock", action="store_true", help="the same load on the unlocked stack")
    parser.add_argument("--fair", action="store_true", help="the fair lock (arrival order, wake-up handoff)")
    parser.add_argument("--runs", type=int, default=20, help="events for customer c-1 (default 20)")
    parser.add_argument("--customers", type=int, default=3, help="other customers (default 3)")
    parser.add_argument("--per-customer", type=int, default=2, help="events per other customer (default 2)")
    parser.add_argument("--work-ms", type=int, default=250, help="time between read and write in the Lambda (default 250)")
    parser.add_argument("--backend", choices=("moto", "dynamodb-local"), default="moto")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"timeline PNG (default {DEFAULT_OUT})")
    parser.add_argument("--lambda-logs", action="store_true", help="show the Lambda's own logs and metrics")
    parser.add_argument("--timeout", type=float, default=600, help="give up after this many seconds")
    args = parser.parse_args(argv)
    if args.fair and args.no_lock:
        parser.error("--fair and --no-lock exclude each other")
    if args.runs < 1 or args.customers < 0 or args.per_customer < 0 or args.work_ms < 0:
        parser.error("--runs must be >= 1; --customers, --per-customer, --work-ms >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    report = run_demo(
        lock_enabled=not args.no_lock,
        fair=args.fair,
        runs=args.runs,
        customers=args.customers,
        per_customer=args.per_customer,
        work_ms=args.work_ms,
        backend=args.backend,
        out=args.out,
        timeout_s=args.timeout,
        lambda_logs=args.lambda_logs,
    )
    print("\n".join(summary_lines(report)))
    if report.lock_enabled and not report.invariants_hold:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
