"""How a waiter polls a held lock (:class:`WaitPolicy`), and the history budget of its wait loop.

A Standard execution stops at 25,000 history events
(https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html): at synth, the
section computes the worst case events of its wait loop for the configured ``max_wait`` and
policy and refuses a configuration that could hit the cap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional


@dataclass(frozen=True)
class WaitPolicy:
    """How a waiter polls a held lock (all times in seconds).

    A waiter polls in rounds. Within a round the acquire state itself retries the refused
    write ``retries_per_round`` times (a Retry on the condition failure: one state transition
    per poll, waits of ``first_interval * backoff_rate**k`` capped at ``max_interval`` and,
    with jitter, drawn from [0, that] so waiters never move in lock-step and the first poll
    after a release comes soon). Between rounds the ``Held?`` choice checks the caller's
    deadline (and now and then whether the holder still runs) and a Wait state pauses for the
    round's nominal wait - with jitter drawn from [half of it, all of it], whole seconds, at
    least 1 - which bounds the loop's worst-case history.
    """

    first_interval: int = 2
    backoff_rate: float = 1.5
    max_interval: int = 5
    jitter: bool = True
    retries_per_round: int = 8

    def __post_init__(self) -> None:
        """Refuse a policy the wait loop cannot run (``ValueError``: "`x` must ..., got: ...")."""
        if isinstance(self.first_interval, bool) or not isinstance(self.first_interval, int) or self.first_interval < 1:
            raise ValueError(f"`first_interval` must be a whole number of seconds >= 1, got: {self.first_interval!r}")
        if (
            isinstance(self.max_interval, bool) or not isinstance(self.max_interval, int)
            or self.max_interval < self.first_interval
        ):
            raise ValueError(
                "`max_interval` must be a whole number of seconds >= first_interval "
                f"({self.first_interval}), got: {self.max_interval!r}"
            )
        if (
            isinstance(self.retries_per_round, bool) or not isinstance(self.retries_per_round, int)
            or not 0 <= self.retries_per_round <= 20
        ):
            raise ValueError(f"`retries_per_round` must be a whole number from 0 to 20, got: {self.retries_per_round!r}")
        if (
            isinstance(self.backoff_rate, bool) or not isinstance(self.backoff_rate, (int, float))
            or not 1.0 <= self.backoff_rate <= 10.0
        ):
            raise ValueError(f"`backoff_rate` must be between 1.0 and 10.0, got: {self.backoff_rate!r}")
        if not isinstance(self.jitter, bool):
            raise ValueError(f"`jitter` must be True or False, got: {self.jitter!r}")

    def retries_for(self, max_wait_s: float) -> int:
        """Retries per round for ``max_wait_s``: a round's nominal length stays within half of it."""
        retries, total = 0, 0.0
        while retries < self.retries_per_round:
            total += self.nominal_wait(retries + 1)
            if total > max_wait_s / 2:
                break
            retries += 1
        return retries

    def round_polling_s(self, max_wait_s: float) -> float:
        """Longest time the retries of one round can take (their nominal waits, summed)."""
        return sum(self.nominal_wait(k + 1) for k in range(self.retries_for(max_wait_s)))

    @property
    def growth_steps(self) -> int:
        """Backoff steps after which the wait is at its cap (bounds the exponent: no overflow)."""
        if self.backoff_rate <= 1 or self.max_interval <= self.first_interval:
            return 0
        return math.ceil(math.log(self.max_interval / self.first_interval, self.backoff_rate))

    def nominal_wait(self, poll: int) -> float:
        steps = min(poll - 1, self.growth_steps)
        return min(self.max_interval, self.first_interval * self.backoff_rate**steps)

    def shortest_wait(self, poll: int) -> int:
        """The smallest whole-second wait the expression can produce for ``poll``."""
        nominal = self.nominal_wait(poll)
        return max(1, math.floor(nominal / 2) if self.jitter else round(nominal))

    def seconds_expression(self, rounds: str, remaining_ms: str) -> str:
        """JSONata: seconds to wait before the next acquire attempt.

        ``rounds`` evaluates to the number of rounds so far (>= 1) and
        ``remaining_ms`` to the time left until the caller's deadline.
        """
        nominal = (
            f"$min([{self.max_interval}, "
            f"{self.first_interval} * $power({self.backoff_rate}, "
            f"$min([{rounds} - 1, {self.growth_steps}]))])"
        )
        drawn = "($n / 2 + $random() * $n / 2)" if self.jitter else "$n"
        return (
            f"( $n := {nominal}; "
            f"$max([1, $min([$round({drawn}), $ceil(({remaining_ms}) / 1000)])]) )"
        )


#: Events a Standard execution may record before Step Functions stops it.
HISTORY_EVENT_LIMIT = 25_000
#: Share of that limit one waiter's loop may use; the rest is left to the protected work.
WAIT_LOOP_EVENT_BUDGET = 20_000
#: History events of one round besides its attempts: acquire entered/exited, the Held?
#: choice entered/exited, the wait entered/exited.
EVENTS_PER_ROUND = 6
#: History events of one acquire attempt: scheduled, started, failed.
EVENTS_PER_ATTEMPT = 3
#: History events a liveness check adds to its round, at most: the inspect read (entered,
#: scheduled, started, succeeded, exited), the holder choice (entered, exited), a call (5: the
#: describe, or the presence probe), a choice (2) and a write (5: a presence probe's ABANDONED,
#: or on a key a read/write lock's readers own, ``kinds.shared_hold.shared_hold_sweep``'s describe of a
#: reader, its choice and its retire).
EVENTS_PER_LIVENESS_CHECK = 19


def worst_case_rounds(policy: WaitPolicy, max_wait_s: float) -> int:
    """Most rounds a waiter can make before ``max_wait_s`` runs out.

    Jittered retries may take next to no time, so only each round's Wait (at its shortest)
    is counted as time passing. Every round - the liveness check's included - passes
    through the Wait.
    """
    if max_wait_s <= 0:
        return 0
    elapsed, rounds = 0.0, 0
    while elapsed < max_wait_s:
        rounds += 1
        elapsed += policy.shortest_wait(rounds)
    return rounds + 1  # the round run at the deadline


def worst_case_wait_events(policy: WaitPolicy, max_wait_s: float, liveness_check_every: int = 0) -> int:
    """History events of the wait loop in the worst case, liveness checks included."""
    attempts = policy.retries_for(max_wait_s) + 1
    rounds = worst_case_rounds(policy, max_wait_s)
    checks = rounds // liveness_check_every if liveness_check_every else 0
    return rounds * (EVENTS_PER_ROUND + EVENTS_PER_ATTEMPT * attempts) + checks * EVENTS_PER_LIVENESS_CHECK


def longest_wait_s(events_of: Callable[[float], int], budget: int, up_to_s: int) -> Optional[int]:
    """The longest whole-second ``max_wait``, at most ``up_to_s``, whose worst-case history
    events (``events_of(max_wait_s)``: the same function the budget check uses, never
    decreasing as the wait grows) fit ``budget``; ``None`` if not even 0 s fits."""
    if events_of(0) > budget:
        return None
    low, high = 0, int(up_to_s)  # events_of(low) fits; find the last second that does
    while low < high:
        middle = (low + high + 1) // 2
        if events_of(middle) <= budget:
            low = middle
        else:
            high = middle - 1
    return low


def timeout_bound_s(policy: WaitPolicy, max_wait_s: float) -> float:
    """Latest a waiter fails with ``Lock.Timeout``, request latencies aside: the deadline is
    checked between rounds, so the round that began just before it runs to its end."""
    return max_wait_s + policy.round_polling_s(max_wait_s)
