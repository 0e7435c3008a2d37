"""The Retry settings of the lock's DynamoDB and Step Functions calls, as typed values.

A :class:`RetryPolicy` is what a state's ``Retry`` field takes: the wait before the first retry,
its growth, the attempts and the cap of one wait (Step Functions' ``IntervalSeconds``,
``BackoffRate``, ``MaxAttempts``, ``MaxDelaySeconds``:
https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html#error-handling-retrying-after-an-error).
The constructs turn one into ``add_retry(...)`` arguments; the presence settle time
(``lock_writes.PRESENCE_SETTLE_MS``) is computed from two of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from locked_workflow.state_machines.errors import TRANSIENT_ERRORS


@dataclass(frozen=True)
class RetryPolicy:
    """A state's retry of some errors.

    :param interval_s: seconds before the first retry (whole, at least 1).
    :param backoff_rate: factor of each next wait (at least 1).
    :param max_attempts: retries after the first attempt (0 to 99999999).
    :param max_delay_s: the longest wait between two attempts, seconds. Default: ``None``, no cap.
    :param errors: the errors retried. Default: ``()``, named where the policy is used.
    """

    interval_s: int
    backoff_rate: float
    max_attempts: int
    max_delay_s: Optional[int] = None
    errors: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.interval_s, bool) or not isinstance(self.interval_s, int) or self.interval_s < 1:
            raise ValueError(f"`interval_s` must be a whole number of seconds, at least 1, got: {self.interval_s!r}")
        if isinstance(self.backoff_rate, bool) or not isinstance(self.backoff_rate, (int, float)) or self.backoff_rate < 1:
            raise ValueError(f"`backoff_rate` must be a number, at least 1, got: {self.backoff_rate!r}")
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or not 0 <= self.max_attempts <= 99_999_999:
            raise ValueError(f"`max_attempts` must be a whole number from 0 to 99999999, got: {self.max_attempts!r}")
        if self.max_delay_s is not None and (
            isinstance(self.max_delay_s, bool) or not isinstance(self.max_delay_s, int) or self.max_delay_s < self.interval_s
        ):
            raise ValueError(f"`max_delay_s` must be None or whole seconds, at least `interval_s`, got: {self.max_delay_s!r}")

    def __getitem__(self, name: str) -> Any:
        """The field ``name``: the spelling of the dicts these values replaced
        (``TRANSIENT_RETRY["interval_s"]``), still read by some constructs."""
        if name not in self.__dataclass_fields__:
            raise KeyError(name)
        return getattr(self, name)


#: Retry for transient DynamoDB errors on the lock's writes (all idempotent for one owner).
TRANSIENT_RETRY = RetryPolicy(interval_s=1, backoff_rate=2.0, max_attempts=6, max_delay_s=8, errors=TRANSIENT_ERRORS)
#: Retry of the presence registration and of the DEPART after it failed (short: they bound
#: ``lock_writes.PRESENCE_SETTLE_MS``).
PRESENCE_RETRY = RetryPolicy(interval_s=1, backoff_rate=2.0, max_attempts=2)
PRESENCE_UNSURE_RETRY = RetryPolicy(interval_s=1, backoff_rate=2.0, max_attempts=3)
#: Every error of the presence's dismissal but ``errors.DISMISS_OVER`` (throttling, a 5xx, a KMS
#: error) is tried again: the presence branch ends with it, and until it does the hold - and so
#: the lock - stays on, up to the presence task's timeout (the lease). At most 1 + 2 + 4 + 8 +
#: 16 + 32 s of backoff.
DISMISS_RETRY = RetryPolicy(interval_s=1, backoff_rate=2.0, max_attempts=6)
