"""The rate limit: at most ``limit`` entries per key in any window of ``period``, top to bottom.

A rate limit admits runs instead of holding them: nothing is released, and a run that was
admitted never blocks another one but by the permit it spent. Its state is one item per key,
``~rate~<stored key>`` (never a mutex key: namespaces cannot contain ``~``; never a semaphore
slot, ``~<digits>~``), a *sliding log* kept as a ring of the last ``limit`` admission times:

- :data:`ADMISSIONS` - ``n``, how many entries were admitted so far (the fence: ``$lock.fence``
  is the admission's number, ``n`` after it, strictly increasing per key);
- ``permit<i>`` (:func:`permit_attribute`) - slot ``i = n mod limit`` holds the time of
  admission ``n - limit``, the permit admission ``n`` reuses;
- :data:`ADMITTED_AT` - the time of the latest admission.

1. Reserve (:data:`ADMIT`): one conditional UpdateItem per admitted entry. A run reads the
   item (strongly consistent GetItem), and admission ``n`` reserves the entry time
   ``T = max(now + lead, slot + period + margin, admittedAt)`` (:func:`reserved_ms`) - ``slot``:
   the stamp of admission ``n - limit`` in slot ``n mod limit``; ``lead``:
   :data:`ADMIT_LEAD_MS` - writing ``T`` into that slot and ``admittedAt`` and the count
   ``n + 1``, on the condition that the count is still ``n`` (so the slot is what the run
   read), the slot is at or before ``:cutoff = T - period - margin`` and ``admittedAt`` at or before
   ``T`` (both implied by the read; spelled out, so the write alone carries the rule). The run
   then waits until ``T`` (a Wait state, computed, rounded up to the second: a Wait's
   ``Seconds`` is an integer, https://docs.aws.amazon.com/step-functions/latest/dg/state-wait.html)
   and enters its work: no polling, and no herd - the waiters hold their places, each its
   own permit, in the order they were admitted.
2. On time (:func:`on_time_expression`, the guard after the Wait): a run enters its work only
   if it is at most :data:`ENTRY_MARGIN_MS` past ``T``; later (the Wait ended late: AWS does
   not bound how late a state transition may come, and a loaded scheduler is late by seconds)
   it gives its permit up unused and reserves again (point 1). A permit given up is under-use,
   never over-use - and costs the key a whole ``period + margin`` of that slot: in a burst, the
   last entry's group comes a cycle later (1 permit given up in 200 at 10 a minute: 9.23 a
   minute instead of 9.69).
   The lead is what keeps the common slow path from giving permits up: a permit free at the
   read (or freeing within the lead) is reserved ``lead`` after the ADMIT evaluates its values,
   not at that moment, so the ADMIT's round trip and the transitions into the Wait come out of
   the lead - the Wait absorbs them - and the margin is left for the Wait's rounding and the
   transition out of it. Reserved at ``now``, they came out of the margin: one ADMIT answered
   late by more than the margin's spare second cost a permit. A run late by more than ``lead +
   margin`` still gives its permit up (the guard decides, not the lead). What the lead costs:
   it moves only a reservation whose permit is free (or frees within the lead) - in a burst,
   whose runs reserve ahead of their permits, the first group's, and the rest keep their
   spacing after it (no rate lost); an idle key's run enters ``lead`` later than it could, and a
   run that comes after its permit freed stretches that slot's cycle by the lead (it stretched
   it by its own lateness already).
3. Why that is exact. The reserved times increase with ``n`` (the last clause) and
   ``T(n) >= T(n - limit) + period + ENTRY_MARGIN_MS`` (the slot clause). Any ``limit + 1``
   admissions have numbers ``m < ... < M`` with ``M - m >= limit``, so
   ``T(M) >= T(M - limit) + period + margin >= T(m) + period + margin``: no window of length
   ``period`` holds more than ``limit`` reserved times. Every entry ``E`` lies in
   ``[T, T + margin]`` (the Wait, the guard), so ``E(M) >= T(M) >= T(m) + period + margin >=
   E(m) + period``: no window of ``period`` holds more than ``limit`` *entries* either - up to
   the one transition from the guard's Choice into the work, the only step the guard cannot
   see. The proof bounds the reserved times from below only (the two clauses, which the write's
   condition carries) and each entry against its own reserved time (the guard, on the service
   clock after the Wait): a reservation later than the clauses ask - the lead's, or one made
   on a late clock - cannot break it, and neither can any lateness of the ADMIT, the Wait or a
   transition before the guard (``tests/protocol/rate_model.py`` checks it over late ADMITs,
   late Waits, given-up permits and refusals, with negative controls). (A generic cell rate
   algorithm with a burst of ``limit`` is not exact this way: it lets the next entry in one
   emission interval after a burst, ``limit + 1`` entries in a window.)
4. Refused (another run was admitted since the read): read again and reserve the next
   permit - at once when the permit read was free already, else after a random part
   (:func:`spread_seconds_expression`) of the way to it: runs refused together in a burst
   read again apart instead of refusing each other round after round, and each is back
   before the permit it read frees. A run is refused only once per admission made between its read and its write, so
   its rounds are bounded (:func:`worst_case_events`, checked at synth against the history
   budget). A reservation past the run's ``max_wait`` is not made: the run fails at once with
   ``Lock.Timeout``. A run stopped while it waits for its time has spent its permit: the
   limit is under-used, never exceeded.

A ``LockClient`` spends the same permits with the same write (``LockClient.admit``), on its
own clock made conservative with DynamoDB's ``Date`` bounds: it reserves from the earliest
time AWS's clock can show (the lead after it: :func:`reserved_ms`) and enters once that has
reached its time, and only while the latest time AWS's clock can show is on time
(:func:`on_time`; else it reserves again, as a workflow's run: see :func:`client_values`).
"""

from __future__ import annotations

from locked_workflow.state_machines.expressions import ENTRY, jsonata_string
from locked_workflow.state_machines.lock_item import REQUESTED_AT, GENERATION
from locked_workflow.state_machines.lock_writes import LockWrite
from locked_workflow.state_machines.expressions import REDRIVE_COUNT_EXPRESSION

#: Marks a rate item's key: ``~rate~<stored key>``.
RATE_MARK = "~rate~"
#: Entries admitted so far (N): the next admission's number is this + 1.
ADMISSIONS = "admissions"
#: Epoch ms of the latest admission (N).
ADMITTED_AT = "admittedAt"
#: Prefix of the ring's slots (``permit0`` ... ``permit<limit-1>``).
PERMIT_PREFIX = "permit"
#: Largest ``limit``: the item holds one slot per permit (about 20 bytes each; a read of the
#: item must stay small - a state's result is limited to 256 KiB - and a write costs the
#: whole item's size, 1 WCU per KB).
MAX_LIMIT = 1000
#: What a permit's reuse adds to ``period`` (ms), and how late after its reserved time a run
#: may enter its work (the guard, :func:`on_time_expression`): a run waits for its time in whole
#: seconds (a Wait's ``Seconds``), so it ends its Wait up to a second after it; the other second
#: is for a late transition. Later than that it reserves again. It costs ``2 s / period`` of the
#: rate: 3.3 % at a minute.
ENTRY_MARGIN_MS = 2000
#: How far after its ADMIT evaluates a run reserves a permit that is free (ms; module note 2):
#: the ADMIT's round trip and the transitions into the Wait come out of it - the Wait absorbs
#: them - instead of out of :data:`ENTRY_MARGIN_MS`. On AWS they take tens of milliseconds; a
#: busy runtime took 2.3 s once (``docs/benchmarks.md``), past the margin's spare second.
ADMIT_LEAD_MS = 1000


def spacing_ms(period_ms: int) -> int:
    """How far apart admission ``n`` and admission ``n - limit`` are reserved, at least."""
    return int(period_ms) + ENTRY_MARGIN_MS


#: Shortest and longest ``period`` (whole seconds: a Wait waits whole seconds).
MIN_PERIOD_S = 1
MAX_PERIOD_S = 86_400

#: Admit: admission ``:n`` (the count read) reserves the entry time ``:now`` in slot ``#slot``
#: (``permit<n mod limit>``), whose last reservation is at or before ``:cutoff`` (``:now -
#: period - ENTRY_MARGIN_MS``), never before the latest one. ``attribute_not_exists(#admissions)``: a key never
#: admitted (its item is never deleted, so a count once written stays).
#: Values: ``:now`` (the reserved time), ``:cutoff``, ``:n``, ``:next`` (N, ``:n + 1``).
ADMIT = LockWrite(
    update=f"SET #slot = :now, #{ADMITTED_AT} = :now, #{ADMISSIONS} = :next",
    condition=(
        f"(#{ADMISSIONS} = :n OR attribute_not_exists(#{ADMISSIONS})) "
        f"AND (attribute_not_exists(#slot) OR #slot <= :cutoff) "
        f"AND (attribute_not_exists(#{ADMITTED_AT}) OR #{ADMITTED_AT} <= :now)"
    ),
)

#: The fields of the wait variable (``$<lock>Wait``) between the read and the admit.
SEEN_N, PERMIT_AT, LAST, SINCE, ROUNDS = "n", "permitAt", "last", "since", "rounds"


def reserve_bytes() -> int:
    """Bytes the mark adds to a stored key: the key limit is that much shorter."""
    return len(RATE_MARK.encode())


def rate_key(stored_key: str) -> str:
    """The rate item of ``stored_key`` (Python; JSONata: :func:`rate_key_expression`)."""
    return RATE_MARK + stored_key


def rate_key_expression(stored_key: str = f"{ENTRY}.key") -> str:
    return f"{jsonata_string(RATE_MARK)} & {stored_key}"


def permit_attribute(n: int, limit: int) -> str:
    """The slot admission ``n`` (0-based: the count before it) uses."""
    return f"{PERMIT_PREFIX}{int(n) % int(limit)}"


def attribute_names(slot: str) -> dict[str, str]:
    """ADMIT's ``ExpressionAttributeNames``, ``#slot`` standing for ``slot`` (maybe JSONata)."""
    names = ADMIT.attribute_names()
    names["#slot"] = slot
    return names


# -- the state machine's JSONata --------------------------------------------------------------


def seen_expression(*, wait_variable: str, limit: int, period_ms: int, item: str = "$states.result.Item") -> str:
    """JSONata over a consistent GetItem of the rate item: the wait variable with the count
    read (``n``), the time its permit frees (``permitAt``: the slot's stamp + period; 0 for a
    slot never used), the latest stamp (``last``), its first read's time (``since``: the
    section's entry) and rounds counted."""
    w = "$" + wait_variable
    return (
        f"( $i := {item}; "
        f"$n := $exists($i.`{ADMISSIONS}`.N) ? $number($i.`{ADMISSIONS}`.N) : 0; "
        f"$slot := $exists($i) ? $lookup($i, '{PERMIT_PREFIX}' & $string($n % {int(limit)})) : null; "
        f"$free := $exists($slot.N) ? $number($slot.N) + {spacing_ms(period_ms)} : 0; "
        f"$last := $exists($i.`{ADMITTED_AT}`.N) ? $number($i.`{ADMITTED_AT}`.N) : 0; "
        f"$w := $type({w}) = 'object' ? {w} : {{'{SINCE}': {ENTRY}.{REQUESTED_AT}, '{ROUNDS}': 0}}; "
        f"$merge([$w, {{'{SEEN_N}': $n, '{PERMIT_AT}': $free, '{LAST}': $last, '{ROUNDS}': $w.{ROUNDS} + 1}}]) )"
    )


def free_time_expression(wait_variable: str, now: str = "$millis()") -> str:
    """JSONata: when the permit the run read is free to take - now, or later when it frees
    later, never before the latest reservation (the lead left out: what ``max_wait`` and the
    spread measure)."""
    w = "$" + wait_variable
    return f"$max([{now}, {w}.{PERMIT_AT}, {w}.{LAST}])"


def reserved_time_expression(wait_variable: str, now: str = "$millis()") -> str:
    """JSONata: the entry time the next admission reserves - :data:`ADMIT_LEAD_MS` after now,
    or later when the permit read frees later, never before the latest reservation (Python:
    :func:`reserved_ms`)."""
    return free_time_expression(wait_variable, f"{now} + {ADMIT_LEAD_MS}")


#: A refused run waits at most this long (s) before it reads again (see
#: :func:`spread_seconds_expression`).
SPREAD_MAX_S = 30


def spread_seconds_expression(wait_variable: str) -> str:
    """JSONata (a Wait's ``Seconds``, after a refused ADMIT): a random whole number of seconds
    up to half the time until the entry the run would have reserved (the next permit is no
    sooner: reservations only move later), at most :data:`SPREAD_MAX_S` - 0 when that permit
    was free already. Refused together, runs read again apart; none comes back after that
    permit frees."""
    ahead_s = f"({free_time_expression(wait_variable)} - $millis()) / 2000"
    return f"$floor($random() * $max([0, $min([{SPREAD_MAX_S}, {ahead_s}])]))"


def past_max_wait_expression(wait_variable: str, max_wait_ms: int) -> str:
    """JSONata (Choice condition): the permit frees after the run's ``max_wait`` ends (the lead is
    not a wait for a permit: a run may enter up to :data:`ADMIT_LEAD_MS` after ``max_wait``)."""
    return f"{free_time_expression(wait_variable)} > ${wait_variable}.{SINCE} + {int(max_wait_ms)}"


def turn_seconds_expression(lock_variable: str, field: str = "acquiredAt") -> str:
    """JSONata (a Wait's ``Seconds``, after the admission): until the reserved time
    (``$lock.<field>``: as :func:`on_time_expression`'s), rounded up to the second."""
    return f"$max([0, $ceil((${lock_variable}.{field} - $millis()) / 1000)])"


def on_time_expression(lock_variable: str, field: str = "acquiredAt") -> str:
    """JSONata (the Choice after the Wait): the run is at most :data:`ENTRY_MARGIN_MS` past its
    reserved time (``$lock.acquiredAt``; with a concurrency limit ``$lock.admittedAt``, see
    :func:`admission_merge_expression`) - it enters its work; else it reserves again."""
    return f"$millis() <= ${lock_variable}.{field} + {ENTRY_MARGIN_MS}"


def on_time(now_ms: int, reserved_ms: int) -> bool:
    """:func:`on_time_expression` for Python participants (``now_ms``: the latest time AWS's
    clock can show, so that the true time is on time too)."""
    return int(now_ms) <= int(reserved_ms) + ENTRY_MARGIN_MS


def admit_values_expression(*, wait_variable: str, period_ms: int) -> str:
    """JSONata (ADMIT's ``ExpressionAttributeValues``, one evaluation: ``:now``, the reserved
    time, and ``:cutoff`` from one ``$millis()``)."""
    w = "$" + wait_variable
    return (
        f"( $t := {reserved_time_expression(wait_variable)}; {{"
        f"':now': {{'N': $string($t)}}, ':cutoff': {{'N': $string($t - {spacing_ms(period_ms)})}}, "
        f"':n': {{'N': $string({w}.{SEEN_N})}}, ':next': {{'N': $string({w}.{SEEN_N} + 1)}}}} )"
    )


def admit_slot_expression(*, wait_variable: str, limit: int) -> str:
    """JSONata (``#slot``): the slot of the admission the run read."""
    return f"'{PERMIT_PREFIX}' & $string(${wait_variable}.{SEEN_N} % {int(limit)})"


def _admitted(*, wait_variable: str, limit: int, of: str) -> tuple[str, str]:
    """JSONata over ADMIT's ``UPDATED_NEW``: (the admission's number, its reserved time - read
    from its slot: the slot's value always changes, ``admittedAt`` may not, and an attribute
    whose value did not change may be left out of ``UPDATED_NEW``)."""
    slot = f"$lookup({of}, {admit_slot_expression(wait_variable=wait_variable, limit=limit)})"
    return f"$number({of}.`{ADMISSIONS}`.N)", f"$number({slot}.N)"


def lock_variable_expression(*, wait_variable: str, limit: int, of: str = "$states.result.Attributes") -> str:
    """JSONata over ADMIT's ``UPDATED_NEW``: the ``$lock`` record the work reads - ``key`` (the
    rate item's), ``owner``, ``fence`` (the admission's number), ``acquiredAt`` (its reserved
    entry time)."""
    number, reserved = _admitted(wait_variable=wait_variable, limit=limit, of=of)
    return (
        f"{{'key': {rate_key_expression()}, 'owner': {ENTRY}.owner, "
        f"'fence': {number}, 'acquiredAt': {reserved}, "
        f"{jsonata_string(REQUESTED_AT)}: {ENTRY}.{REQUESTED_AT}, "
        f"{jsonata_string(GENERATION)}: {REDRIVE_COUNT_EXPRESSION}}}"
    )


#: The fields an admission adds to the slot's ``$lock`` of a rate limit with a concurrency
#: limit (``Lock.rate(..., at_once=n)``): its number and its reserved time.
ADMISSION = "admission"


def admission_merge_expression(*, lock_variable: str, wait_variable: str, limit: int,
                               of: str = "$states.result.Attributes") -> str:
    """JSONata over ADMIT's ``UPDATED_NEW``, with a concurrency limit: the slot's ``$lock``
    (what its release needs: key, owner, fence ...) with :data:`ADMISSION` and
    :data:`ADMITTED_AT` added."""
    number, reserved = _admitted(wait_variable=wait_variable, limit=limit, of=of)
    return f"$merge([${lock_variable}, {{'{ADMISSION}': {number}, '{ADMITTED_AT}': {reserved}}}])"


#: History events of one round: a refused one - the refused ADMIT (entered, scheduled,
#: started, failed, exited), the spread's Wait (2), the read (5) and the decision (2) - or a
#: late one - the read (5), the decision (2), the ADMIT (5), the Wait (2) and the guard's
#: Choice (2).
EVENTS_PER_ROUND = 18


def worst_case_rounds(*, limit: int, period_s: float, max_wait_s: float) -> int:
    """Rounds of a run whose reservation is at most ``max_wait_s`` away: one per admission
    of the key within it - another's, admitted between its read and its write (each refuses it
    once at most), or its own that it gave up, late (each is an admission too) - at most
    ``limit`` per ``period_s`` of reservations ahead of it, plus its own."""
    return int(limit) * (int(max_wait_s // period_s) + 2) + 1


def worst_case_events(*, limit: int, period_s: float, max_wait_s: float) -> int:
    return EVENTS_PER_ROUND * worst_case_rounds(limit=limit, period_s=period_s, max_wait_s=max_wait_s)


# -- Python participants (the client, the CLI) ------------------------------------------------


def permit_at_ms(item: dict, *, limit: int, period_ms: int) -> tuple[int, int, int]:
    """``(n, permitAt, last)`` of a rate item in DynamoDB JSON (``{}``: never admitted) - the
    rule of :func:`seen_expression`, for Python participants."""
    n = int(item[ADMISSIONS]["N"]) if ADMISSIONS in item else 0
    slot = item.get(permit_attribute(n, limit))
    free = int(slot["N"]) + spacing_ms(period_ms) if slot else 0
    last = int(item[ADMITTED_AT]["N"]) if ADMITTED_AT in item else 0
    return n, free, last


def free_ms(*, now_ms: int, permit_at: int, last: int) -> int:
    """:func:`free_time_expression` for Python participants."""
    return max(int(now_ms), int(permit_at), int(last))


def reserved_ms(*, now_ms: int, permit_at: int, last: int) -> int:
    """:func:`reserved_time_expression` for Python participants (``now_ms``: the earliest time
    AWS's clock can show)."""
    return free_ms(now_ms=int(now_ms) + ADMIT_LEAD_MS, permit_at=permit_at, last=last)


def client_values(*, n: int, reserved_ms: int, period_ms: int) -> dict:
    """ADMIT's values for a Python participant, which reserves ``reserved_ms``
    (:func:`reserved_ms`: the lead after the earliest time AWS's clock can show, or later). It enters only
    once that earliest time has reached it, so its true entry is at or after its reservation,
    as a workflow's: the module's point 2 holds for every participant."""
    return {
        ":now": {"N": str(int(reserved_ms))},
        ":cutoff": {"N": str(int(reserved_ms) - spacing_ms(period_ms))},
        ":n": {"N": str(int(n))},
        ":next": {"N": str(int(n) + 1)},
    }
