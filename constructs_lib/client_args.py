"""The arguments of a :class:`~locked_workflow.constructs_lib.lock_client.LockClient`, checked
before any DynamoDB call: each check returns the value (converted) or raises ``TypeError`` /
``ValueError`` as "`x` must ..., got: ..." (:class:`InvalidLockKey` for a key); the client's lease
and poll limits; an acquire's options (:class:`AcquireOptions`).
"""

from __future__ import annotations

import math
import numbers
import sys
from datetime import timedelta
from typing import Any, Mapping, NamedTuple

from locked_workflow.constructs_lib.client_lease import InvalidLockKey, Lease
from locked_workflow.state_machines.errors import ERROR_INVALID_KEY
from locked_workflow.state_machines.lock_item import OWNER_SEPARATOR, key_problem

#: Default lease: how long a holder that dies without releasing blocks the key.
DEFAULT_LEASE = timedelta(seconds=60)
#: The longest lease a client takes: a longer one is a mistake (milliseconds given as seconds),
#: and a dead holder's lock would stay taken for years.
MAX_LEASE = timedelta(days=365)
#: :data:`MAX_LEASE` in milliseconds.
MAX_LEASE_MS = int(MAX_LEASE.total_seconds() * 1000)
#: The longest wait between two polls (s): a poll interval longer than this is a mistake too.
MAX_POLL_INTERVAL_S = 3600.0


def validate_key(key: Any, namespace: str = "") -> str:
    """``key`` if it is a valid lock key, else :class:`InvalidLockKey` naming the problem.

    The same rules as the state machines' key validation.
    """
    problem = key_problem(key, namespace)
    if problem:
        raise InvalidLockKey(f"{ERROR_INVALID_KEY}: the lock key {problem}")
    return key


def checked_number(value: Any, name: str, what: str) -> float:
    """``value`` as a float if it is a real number (not a bool), else TypeError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"`{name}` must be {what}, got: {value!r}")
    try:
        return float(value)
    except OverflowError:  # an int beyond the float range: finite, and huge
        return sys.float_info.max if value > 0 else -sys.float_info.max


def checked_seconds(value: Any, name: str, *, forever: bool = False) -> float:
    """``value`` - a ``timedelta`` or a number of seconds - in seconds: TypeError for anything
    else (``None``, a bool, a string); ValueError for NaN, and for an infinity unless
    ``forever`` (then ``math.inf``)."""
    what = "a timedelta or a number of seconds" + (" (math.inf: no limit)" if forever else "")
    seconds = value.total_seconds() if isinstance(value, timedelta) else checked_number(value, name, what)
    if math.isnan(seconds) or (math.isinf(seconds) and not (forever and seconds > 0)):
        raise ValueError(f"`{name}` must be {'a finite number' if not forever else 'a number'} of seconds, got: {value!r}")
    return seconds


def checked_lease_ms(value: Any, name: str = "lease") -> int:
    seconds = checked_seconds(value, name)
    millis = round(seconds * 1000) if abs(seconds) < 1e15 else math.copysign(1e18, seconds)
    if not 1 <= millis <= MAX_LEASE_MS:
        raise ValueError(
            f"`{name}` must be from 1 ms to {MAX_LEASE.days} days (a timedelta or seconds), got: {value!r}"
        )
    return int(millis)


def checked_owner(owner: Any) -> str:
    """An owner given by the caller: a non-empty string without the separator (the client's own
    acquisitions are ``<client owner>#<uuid4>``: no owner given by hand can be one of them)."""
    message = f"`owner` must be a non-empty string without '{OWNER_SEPARATOR}', got: {owner!r}"
    if not isinstance(owner, str):
        raise TypeError(message)
    if not owner or OWNER_SEPARATOR in owner:
        raise ValueError(message)
    return owner


def checked_text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"`{name}` must be a non-empty string, got: {value!r}")
    if not value:
        raise ValueError(f"`{name}` must be a non-empty string, got: {value!r}")
    return value


def checked_count(value: Any, name: str, *, least: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"`{name}` must be an integer of at least {least}, got: {value!r}")
    if value < least:
        raise ValueError(f"`{name}` must be an integer of at least {least}, got: {value!r}")
    return int(value)


def checked_callable(value: Any, name: str, what: str) -> Any:
    if value is not None and not callable(value):
        raise TypeError(f"`{name}` must be {what} or None, got: {value!r}")
    return value


def checked_boto3_client(value: Any, name: str, service: str) -> Any:
    """A boto3 client given by the caller (not probed: a stand-in may record every use)."""
    if value is None:
        return None
    if isinstance(value, (str, bytes, numbers.Number, Mapping)) or type(value).__name__.startswith(f"{service}."):
        raise TypeError(
            f"`{name}` must be a boto3 {service} client (boto3.client({service!r})), not a resource "
            f"or a name, or None, got: {value!r}"
        )
    return value


class AcquireOptions(NamedTuple):
    """An acquire's options, checked."""

    lease_ms: int
    wait_s: float  # math.inf: no limit
    poll_interval: float
    max_poll_interval: float
    backoff_rate: float

    @classmethod
    def of(cls, lease: Any, wait: Any, poll_interval: Any, max_poll_interval: Any, backoff_rate: Any) -> "AcquireOptions":
        lease_ms = checked_lease_ms(lease)
        wait_s = checked_seconds(wait, "wait", forever=True)
        if wait_s < 0:
            raise ValueError(f"`wait` must be 0 or more seconds (math.inf: no limit), got: {wait!r}")
        first = checked_seconds(poll_interval, "poll_interval")
        if not 0 < first <= MAX_POLL_INTERVAL_S:
            raise ValueError(
                f"`poll_interval` must be more than 0 and at most {MAX_POLL_INTERVAL_S:g} seconds, got: {poll_interval!r}"
            )
        cap = checked_seconds(max_poll_interval, "max_poll_interval")
        if not first <= cap <= MAX_POLL_INTERVAL_S:
            raise ValueError(
                f"`max_poll_interval` must be from `poll_interval` ({first:g}) to {MAX_POLL_INTERVAL_S:g} "
                f"seconds, got: {max_poll_interval!r}"
            )
        rate = checked_number(backoff_rate, "backoff_rate", "a number of at least 1")
        if not 1 <= rate < math.inf:
            raise ValueError(f"`backoff_rate` must be a finite number of at least 1, got: {backoff_rate!r}")
        return cls(lease_ms, wait_s, first, cap, rate)


def checked_stored_key(lease: Lease) -> str:
    """The stored key a lease was acquired on (checked before any DynamoDB call)."""
    if not isinstance(lease, Lease):
        raise TypeError(f"`lease` must be a Lease (from acquire(), hold() or refresh()), got: {lease!r}")
    if not isinstance(lease.table_key, str) or not lease.table_key:
        raise InvalidLockKey(f"{ERROR_INVALID_KEY}: the lease has no stored key: {lease!r}")
    return lease.table_key
