"""The semaphore: at most ``limit`` holders of one key at a time, top to bottom.

A semaphore of ``limit`` N on the stored key ``K`` is N mutex *slots*: the lock items
``~0~K`` … ``~<N-1>~K``. Each slot is an ordinary lock item of :mod:`lock_protocol` - the same
ACQUIRE, RELEASE, RETIRE writes, the same owner, lease, stop grace and fence - so every holder
has its own ownership and fence, and the janitor, the liveness check and the lease recover a
dead holder slot by slot with no code of their own.

1. Slot keys. Namespaces cannot contain ``~``, so a slot key can never be the stored key of a
   mutex (``<namespace>#<key>``): a semaphore and a mutex on the same key are separate locks.
   All participants of one key must use the same ``limit`` (the slots a larger limit adds
   would be free for it only).
2. Which slot an attempt tries. The section's entry draws a first slot at random; attempt
   ``a`` of the acquisition (every refused attempt: the acquire state's fast retries of its
   refusal, every round) tries slot ``(first + a) mod N``, so N consecutive attempts try every
   slot once - a free slot is found within one sweep - and concurrent waiters spread over the
   slots instead of all polling one. A slot the liveness check proved stale is tried next,
   with the takeover.
3. Only a refusal moves on to the next slot. An attempt that failed with a transient error
   (a 5xx, throttling) may have applied - its response lost - so its retry must write *the
   same slot*, where ACQUIRE's ``owner = :me`` accepts it; on another slot it would take a
   second one, and the run would release only that one. The acquire state therefore retries
   only its refusal (so its ``RetryCount`` counts refused attempts alone, whether Step
   Functions counts retries per retrier or per state:
   https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html); a
   transient error is caught into ``AcquireAgain``, which keeps the slot the caught attempt
   tried (:func:`attempt_key_expression`, evaluated in the Catch: the context object there is
   the caught attempt's) and retries that one write with the transient backoff. Refused
   there (the slot is another holder's: the first try had not applied), the run waits a
   round as after any refusal.
4. Which slot the liveness check inspects: ``(first + round) mod N``, one per check, in turn.
"""

from __future__ import annotations

from locked_workflow.state_machines.lock_protocol import ENTRY, MAX_KEY_BYTES, liveness_check_number_expression

#: Marks a slot key: ``~<slot>~<stored key>``. Never in a namespace, so never a mutex key.
SLOT_MARK = "~"
#: Largest ``limit``: a waiter sweeps the slots one attempt at a time, so a sweep of many
#: slots is slow; beyond this, throttle with a token bucket instead.
MAX_LIMIT = 32


def slot_key(stored_key: str, slot: int) -> str:
    """The lock item of ``slot`` (Python participants; JSONata: :func:`attempt_key_expression`)."""
    return f"{SLOT_MARK}{int(slot)}{SLOT_MARK}{stored_key}"


def reserve_bytes(limit: int) -> int:
    """Bytes the slot mark adds to a stored key: the key limit is that much shorter."""
    return len(slot_key("", limit - 1).encode())


def first_slot_expression(limit: int) -> str:
    """JSONata (the section's entry): the first slot this acquisition tries."""
    return f"$floor($random() * {int(limit)})"


def attempt_key_expression(*, limit: int, wait_variable: str, attempts_per_round: int) -> str:
    """JSONata (the acquire's key): the slot this attempt tries - the stale slot the liveness
    check found, else the next slot of the sweep. The attempt number counts the acquire
    state's own retries (``RetryCount``: of its refusal only, see the module's point 3) and the
    rounds before it. In the Catch of a transient error it names the slot the caught attempt
    wrote (``AcquireAgain`` retries that one)."""
    w = "$" + wait_variable
    rounds = f"($type({w}) = 'object' ? {w}.rounds : 0)"
    attempt = f"({rounds} * {int(attempts_per_round)} + $states.context.State.RetryCount)"
    sweep = (
        f"'{SLOT_MARK}' & $string(({ENTRY}.slot + {attempt}) % {int(limit)}) "
        f"& '{SLOT_MARK}' & {ENTRY}.key"
    )
    return f"($type({w}) = 'object' and $type({w}.staleKey) = 'string') ? {w}.staleKey : {sweep}"


def inspect_key_expression(*, limit: int, wait_variable: str, every: int) -> str:
    """JSONata (the liveness check's read): the slot whose holder this check inspects - the
    next slot on every check (``every``: rounds between checks), so each slot is inspected
    within ``limit`` checks."""
    check = liveness_check_number_expression(wait_variable, every)
    return (
        f"'{SLOT_MARK}' & $string(({ENTRY}.slot + {check}) % {int(limit)}) "
        f"& '{SLOT_MARK}' & {ENTRY}.key"
    )


def holds_slot_expression(variable: str, key: str = "$key") -> str:
    """JSONata: the lock record ``$<variable>`` of an enclosing section holds a slot of this
    semaphore (``key``: its stored key) - a nested section on it passes through."""
    v = "$" + variable
    mark = SLOT_MARK
    return (
        f"($exists({v}) and $type({v}.key) = 'string' and $substring({v}.key, 0, 1) = '{mark}' "
        f"and $substringAfter($substringAfter({v}.key, '{mark}'), '{mark}') = {key})"
    )


def key_limit_bytes(limit: int) -> int:
    return MAX_KEY_BYTES - reserve_bytes(limit)
