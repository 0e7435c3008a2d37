"""How many runs may queue per key on a fair lock, and what happens to one more: a value
(``Lock.fair(key, queue=QueueLimit.keep_newest(1))``), the way the CDK spells choices.

* :meth:`QueueLimit.keep_newest` - coalescing: a burst of events for one key collapses to the
  run at work plus the newest ``waiters`` queued. A newcomer that finds ``waiters`` queued
  supersedes the oldest of them, whose run ends with ``Lock.Superseded`` (its cause names the
  newer run) without entering its work; a parked one is woken at once. The holder at work is
  never disturbed.
* :meth:`QueueLimit.keep_oldest` - a bounded queue: a newcomer that finds ``waiters`` queued is
  refused with ``Lock.QueueFull``, before it queues.

The protocol: :mod:`locked_workflow.state_machines.fair_protocol` (``ENQUEUE_NEWEST``, ``JUMP``,
``SUPERSEDE``; ``ENQUEUE_BOUNDED``).
"""

from __future__ import annotations

from dataclasses import dataclass

#: The most waiters a queue limit may keep (a larger bound is no longer a burst's coalescing).
MAX_WAITERS = 1000


@dataclass(frozen=True)
class QueueLimit:
    """The bound on a fair lock's queue per key, and its policy: made by :meth:`keep_newest`
    or :meth:`keep_oldest`."""

    #: ``"keep_newest"`` or ``"keep_oldest"``.
    policy: str
    #: Runs that may queue per key (the holder at work not counted).
    waiters: int

    @staticmethod
    def keep_newest(waiters: int = 1) -> "QueueLimit":
        """Keep the newest ``waiters`` queued runs per key: one more arriving supersedes the
        oldest queued one (``Lock.Superseded``; a parked one is woken at once, never its work).

        :param waiters: queued runs kept per key, 1 to 1,000 (the holder at work not counted).
            Default: 1 (a burst runs the work twice: the run at work, then the newest).
        """
        return QueueLimit("keep_newest", _waiters(waiters))

    @staticmethod
    def keep_oldest(waiters: int) -> "QueueLimit":
        """Keep the oldest ``waiters`` queued runs per key: one more arriving is refused with
        ``Lock.QueueFull`` before it queues. Runs that gave up their place (``max_wait``) count
        until the queue passes them.

        :param waiters: queued runs per key at most, 1 to 1,000 (the holder at work not counted).
        """
        return QueueLimit("keep_oldest", _waiters(waiters))

    @property
    def supersedes(self) -> bool:
        return self.policy == "keep_newest"


def _waiters(waiters: int) -> int:
    if isinstance(waiters, bool) or not isinstance(waiters, int) or not 1 <= waiters <= MAX_WAITERS:
        raise ValueError(f"`waiters` must be a whole number from 1 to {MAX_WAITERS}, got: {waiters!r}")
    return waiters
