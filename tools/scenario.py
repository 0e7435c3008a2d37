"""Shared pieces of ``demo`` and ``bench``: reading execution histories, the invariants, the load.

Each piece lives in a module of its own; this one re-exports them, the name every caller uses:

* ``tools/scenario_history.py`` (pure) - :func:`critical_sections`, the protected work of one
  execution as the history saw it, and the lock held around it; :func:`transition_count`,
  :func:`dynamodb_calls` - what an execution costs;
* ``tools/scenario_invariants.py`` (pure) - :func:`find_overlaps`,
  :func:`fence_order_violations`, :func:`lost_updates`: the invariants of DESIGN.md section 4;
* ``tools/scenario_metrics.py`` (pure) - :func:`run_metrics`, :func:`summarize_load`,
  :func:`handoff_gaps_ms`: per-run and per-load numbers of the bench;
* ``tools/scenario_load.py`` - the load helpers that need a
  :class:`~locked_workflow.testing.LocalCloud`: synthesize and deploy the example app, fire
  customer-update events through EventBridge, watch them with a stderr progress bar.

The pure functions are tested on synthetic histories in ``tests/tools/test_demo_and_bench.py``.
"""

from __future__ import annotations

from tools.scenario_history import (
    RELEASE_SUFFIXES,
    CriticalSection,
    DynamoDBCalls,
    Transitions,
    critical_sections,
    dynamodb_calls,
    epoch_ms,
    transition_count,
)
from tools.scenario_invariants import by_key, fence_order_violations, find_overlaps, lost_updates
from tools.scenario_load import (
    EXAMPLE_PROTECTED_STATE,
    EXAMPLE_STACK_NAME,
    TERMINAL,
    ExampleApp,
    QuietCollector,
    customer_balances,
    customer_load,
    deploy_example,
    fire_customer_updates,
    stderr_progress,
    synth_example,
    wait_all,
)
from tools.scenario_metrics import (
    DOLLARS_PER_TRANSITION,
    Distribution,
    LoadSummary,
    RunMetrics,
    handoff_gaps_ms,
    run_metrics,
    summarize_load,
)

__all__ = [
    "DOLLARS_PER_TRANSITION", "EXAMPLE_PROTECTED_STATE", "EXAMPLE_STACK_NAME", "RELEASE_SUFFIXES", "TERMINAL",
    "CriticalSection", "Distribution", "DynamoDBCalls", "ExampleApp", "LoadSummary", "QuietCollector", "RunMetrics",
    "Transitions", "by_key", "critical_sections", "customer_balances", "customer_load", "deploy_example",
    "dynamodb_calls", "epoch_ms", "fence_order_violations", "find_overlaps", "fire_customer_updates",
    "handoff_gaps_ms", "lost_updates", "run_metrics", "stderr_progress", "summarize_load", "synth_example",
    "transition_count", "wait_all",
]
