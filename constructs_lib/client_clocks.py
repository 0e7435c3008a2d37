"""The clocks of a :class:`~locked_workflow.constructs_lib.lock_client.LockClient` (see its module
notes on time): its own monotonic and wall clocks, AWS's clock as DynamoDB's ``Date`` headers bound
it (:class:`AwsClock`), a held lock watched for a clock-free takeover (:class:`Watch`,
:func:`takeover_window_ms`), and the heartbeat that renews a held lease (:class:`Heartbeat`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from datetime import timedelta, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Mapping, NamedTuple

from locked_workflow.constructs_lib.client_args import MAX_LEASE_MS
from locked_workflow.constructs_lib.client_lease import Holding, Lease, LockLost
from locked_workflow.state_machines.lock_item import ACQUIRED_AT, CLIENT_LEASE, EXPIRES_AT, OWNER

logger = logging.getLogger(__name__)

#: How many held locks a client remembers watching (for takeovers); the oldest goes first.
WATCHED_LOCKS = 1024


def monotonic_clock() -> float:
    """Seconds of a clock that never jumps and, where the system has one (Linux' boot time
    clock), also counts the time a suspended machine slept: a lease runs while its holder's
    machine sleeps."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


if not hasattr(time, "CLOCK_BOOTTIME"):  # pragma: no cover - not Linux
    monotonic_clock = time.monotonic  # noqa: F811


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class Watch(NamedTuple):
    """A held lock as a client first saw it: its version (owner, fence, ``expiresAt``), how long
    it must stay so before the client takes it over (s), since when (monotonic s), and whether
    its lease was stamped by the service clock (a workflow's: no client lease for its owner)."""

    version: tuple[str, str, str]
    window_s: float
    since: float
    service_stamped: bool


class AwsClock:
    """AWS's clock (epoch ms) as the ``Date`` header of DynamoDB's responses bounds it.

    ``Date`` is the second in which DynamoDB made a response: one received between monotonic
    times ``before`` and ``after`` puts AWS's time, at monotonic time ``t``, within
    ``[date - after + t, date + 1 s - before + t]``. The bounds of the last samples are
    intersected, each widened by :data:`DRIFT` of its age (a monotonic clock's rate error); a
    sample that contradicts them (a clock stepped) replaces them. Without a sample (a stand-in
    client, an endpoint that sends no ``Date``) nothing is known.
    """

    SAMPLES = 16
    DRIFT = 1e-4

    def __init__(self) -> None:
        self._samples: deque[tuple[float, float, float]] = deque(maxlen=self.SAMPLES)  # (at, lo, hi), s / ms
        self._mutex = threading.Lock()

    def sample(self, before: float, after: float, response: Any) -> None:
        try:
            made = parsedate_to_datetime(response["ResponseMetadata"]["HTTPHeaders"]["date"])
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            return
        if made.tzinfo is None:
            made = made.replace(tzinfo=timezone.utc)
        date_ms = made.timestamp() * 1000
        sample = (after, date_ms - after * 1000, date_ms + 1000 - before * 1000)
        with self._mutex:
            self._samples.append(sample)
            bounds = self._bounds(after)
            if bounds is None or bounds[0] > bounds[1]:
                logger.info("DynamoDB's Date header contradicts the earlier ones (a clock stepped?): "
                            "starting AWS's clock over")
                self._samples.clear()
                self._samples.append(sample)

    def bounds(self, now: float) -> tuple[float, float] | None:
        """(lowest, highest) epoch ms AWS's clock can show at monotonic ``now`` (s); None: unknown."""
        with self._mutex:
            return self._bounds(now)

    def _bounds(self, now: float) -> tuple[float, float] | None:
        if not self._samples:
            return None
        lo = max(low - self.DRIFT * abs(now - at) * 1000 for at, low, _ in self._samples)
        hi = min(high + self.DRIFT * abs(now - at) * 1000 for at, _, high in self._samples)
        return lo + now * 1000, hi + now * 1000


def takeover_window_ms(item: Mapping[str, Any]) -> tuple[int, bool]:
    """How long a client watches the held lock ``item`` unchanged before it takes it over, and
    whether the acquisition is a client's: its client lease (a client's acquisition), else
    ``expiresAt - acquiredAt`` (one writer's stamps: its clock's offset cancels out; at least
    what was left of the lease when it was written)."""
    owner = item[OWNER]["S"]
    lease = item.get(CLIENT_LEASE, {}).get("M", {})
    if lease.get("owner", {}).get("S") == owner and "N" in lease.get("ms", {}):
        return max(0, int(lease["ms"]["N"])), True
    if "N" not in item.get(ACQUIRED_AT, {}):
        return MAX_LEASE_MS, False
    return max(0, int(item[EXPIRES_AT]["N"]) - int(item[ACQUIRED_AT]["N"])), False


def takeover_note(takeover_in: float | None) -> str:
    if takeover_in is None:
        return ""
    return (f"; this client takes it over if it stays unchanged for {takeover_in:.3f} s more "
            "(its holder's lease, watched on this client's clock)")


class Heartbeat:
    """Renews a held lease in a background thread, half a lease after the start of the last
    renewal (seed 001's rule), with the lease it was taken or last renewed with, until stopped
    (by the release). A renewal that finds the lock taken records it (the holder's next
    :meth:`Lease.check`, refresh or release raises :class:`LockLost`) and ends the thread; any
    other error is logged and the renewal tried again an eighth of a lease later."""

    def __init__(self, client: Any, lease: Lease) -> None:
        """``client``: the LockClient that renews the lease (its ``refresh``; not imported here:
        it imports this module)."""
        self._client = client
        self._lease = lease
        self._stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"LockClient heartbeat {lease.table_key}",
                                       daemon=True)

    def start(self) -> None:
        holding = self._lease.holding
        assert holding is not None
        with holding.mutex:
            holding.heartbeat = self
        self.thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if threading.current_thread() is not self.thread:
            self.thread.join()

    def _run(self) -> None:
        holding, current = self._lease.holding, self._lease
        assert holding is not None
        delay = self._half_of_what_is_left(holding)
        while not self._stopping.wait(delay):
            lease_ms = holding.lease_ms
            try:
                current = self._client.refresh(current, lease=timedelta(milliseconds=lease_ms))
            except LockLost as lost:
                logger.warning("heartbeat of %s: %s", current.table_key, lost)
                return
            except Exception as error:  # noqa: BLE001 - a transient failure: try again soon
                logger.warning("heartbeat of %s: renewal failed, trying again: %r", current.table_key, error)
                delay = lease_ms / 8000
                continue
            delay = self._half_of_what_is_left(holding)

    @staticmethod
    def _half_of_what_is_left(holding: Holding) -> float:
        """Half of what is left of the lease (just renewed: half a lease), an eighth at least."""
        return max(holding.lease_ms / 8000, (holding.deadline - holding.monotonic()) / 2)
