"""The history budget of a section's wait: the longest wait a kind may take by default, and the
refusal of a ``max_wait`` whose wait could record more history events than the budget allows.

A Standard execution stops at 25,000 history events
(https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html); at synth the
section computes the worst case events of its wait for the configured ``max_wait`` - the wait
loop's polls and liveness checks, a parked waiter's park rounds, or the kind's own wait - and
refuses a configuration that could outgrow its ``history_event_budget``, saying what to change.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from aws_cdk import Duration

from locked_workflow.constructs_lib import prop_types
from locked_workflow.constructs_lib.lock import Lock
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines.lock_protocol import WaitPolicy

#: Default longest time a run waits for a held lock (or half the timeout, if shorter).
DEFAULT_MAX_WAIT = Duration.minutes(15)


def budgeted_max_wait(
    lock: Lock,
    kind: Any,
    max_wait: Optional[Duration],
    *,
    wait_policy: WaitPolicy,
    liveness_check_every: int,
    history_event_budget: Optional[int],
) -> Tuple[Duration, int]:
    """``(max_wait, its ms)`` of a section locking ``lock`` (``kind``: its builder): left unset
    (``None`` for a parking kind; :data:`DEFAULT_MAX_WAIT` for a kind that waits its own way),
    the longest wait the history budget allows; given, refused (``ValueError``) when negative or
    when its wait could record more than ``history_event_budget`` events (``None``: unchecked)."""
    parks = kind.parks_on_token
    if max_wait is None and parks:  # wait as long as the history allows
        max_wait = Duration.seconds(kind.longest_park_wait_s(history_event_budget))
    # a kind that waits its own way (Lock.rate; with at_once, after the wait loop for a slot)
    waits_own_way = kind.worst_case_events(0) is not None

    def needed_events(max_wait_s: float) -> int:
        if parks:
            return kind.worst_case_park_events(max_wait_s)
        loop = protocol.worst_case_wait_events(wait_policy, max_wait_s, liveness_check_every)
        own = kind.worst_case_events(max_wait_s)
        if own is None:
            return loop
        return own + (0 if kind.builds_own_wait_path else loop)

    if max_wait is DEFAULT_MAX_WAIT and waits_own_way and history_event_budget is not None:
        # left unset: at most the default, the longest the history budget allows
        longest_s = protocol.longest_wait_s(needed_events, history_event_budget, int(max_wait.to_seconds()))
        if longest_s is not None:
            max_wait = Duration.seconds(longest_s)
    max_wait_ms = prop_types.concrete_ms("max_wait", max_wait)
    if max_wait_ms < 0:
        raise ValueError(f"`max_wait` must not be negative, got: {max_wait_ms / 1000} s")
    if history_event_budget is not None:
        needed = needed_events(max_wait_ms / 1000)
        if waits_own_way and needed > history_event_budget:
            raise ValueError(
                f"`max_wait` must keep the wait under {history_event_budget} history events (of the "
                f"{protocol.HISTORY_EVENT_LIMIT} a Standard execution may record), got: {max_wait_ms / 1000} s, "
                f"which can take {needed} events with Lock.{lock.kind}(limit={kind.rate_limit}); lower "
                "max_wait (a run waits at most one refusal per entry admitted meanwhile)"
            )
        if needed > history_event_budget and parks:
            raise ValueError(
                f"`max_wait` must keep the queue's wait under {history_event_budget} history events "
                f"(of the {protocol.HISTORY_EVENT_LIMIT} a Standard execution may record), got: "
                f"{max_wait_ms / 1000} s, which can take {needed} events with park_timeout="
                f"{kind.park_timeout_s} s; raise park_timeout or lower max_wait"
            )
        if needed > history_event_budget:
            raise ValueError(
                f"`max_wait` must keep the wait loop under {history_event_budget} history events "
                f"(of the {protocol.HISTORY_EVENT_LIMIT} a Standard execution may record), got: "
                f"{max_wait_ms / 1000} s, which can take {needed} events with "
                f"wait_policy.max_interval={wait_policy.max_interval} s and "
                f"liveness_check_every={liveness_check_every}; raise wait_policy.max_interval "
                "(or first_interval) or lower max_wait"
            )
    return max_wait, max_wait_ms
