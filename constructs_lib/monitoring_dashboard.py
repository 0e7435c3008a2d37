"""The CloudWatch dashboard of :class:`~locked_workflow.constructs_lib.monitoring.LockMonitoring`:
every metric and alarm of one lock's workflow.
"""

from __future__ import annotations

from typing import Any, Optional

from aws_cdk import aws_cloudwatch as cloudwatch

from locked_workflow.state_machines import errors


def lock_dashboard(monitoring: Any, name: Optional[str]) -> cloudwatch.Dashboard:
    """The dashboard of ``monitoring`` (a LockMonitoring, its scope), named ``name`` (None:
    generated)."""
    def durations(title: str, metric: Any) -> cloudwatch.GraphWidget:
        return cloudwatch.GraphWidget(
            title=title, width=12, left_y_axis=cloudwatch.YAxisProps(label="ms", show_units=False, min=0),
            left=[metric(statistic=s, label=s) for s in ("p50", "p90", "Maximum")],
        )

    found = monitoring.lock_states
    board = cloudwatch.Dashboard(monitoring, "Dashboard", dashboard_name=name)
    board.add_widgets(
        cloudwatch.TextWidget(
            markdown=f"## Lock of {monitoring.state_machine_name}\nNamespace `{monitoring.namespace}`",
            width=24, height=2,
        )
    )
    board.add_widgets(
        durations("Wait for the lock (ms)", monitoring.metric_wait_time),
        durations("Lock held (ms)", monitoring.metric_hold_time),
    )
    board.add_widgets(
        cloudwatch.GraphWidget(
            title="Runs and lock failures", width=12,
            left=[monitoring.state_machine.metric_started(statistic="Sum", label="Started"),
                  monitoring.metric_timeouts(label=errors.ERROR_TIMEOUT), monitoring.metric_lost(label=errors.ERROR_LOST),
                  *([monitoring.metric_superseded(label=errors.ERROR_SUPERSEDED)] if found.superseded else []),
                  *([monitoring.metric_queue_full(label=errors.ERROR_QUEUE_FULL)] if found.queue_full else [])],
            right=[monitoring.metric_timeout_rate()],
        ),
        cloudwatch.GraphWidget(
            title="Recovery of dead holders", width=12,
            left=[monitoring.metric_liveness_checks(label="Liveness checks"),
                  monitoring.metric_liveness_takeovers(label="Liveness takeovers"),
                  monitoring.metric_janitor_retires(label="Janitor retires")],
            right=[monitoring.metric_janitor_failures(label="Janitor failures")] if monitoring.janitor is not None else [],
        ),
    )
    if monitoring.alarms:
        board.add_widgets(cloudwatch.AlarmStatusWidget(alarms=monitoring.alarms, width=24, title="Lock alarms"))
    return board

