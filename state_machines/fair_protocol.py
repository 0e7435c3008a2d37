"""The fair lock: a ticket queue of one item per waiter and direct handoff, top to bottom.

A fair lock on the stored key ``K`` is the mutex lock item of :mod:`lock_protocol` - the same
owner, lease, stop grace and fence, taken and given back under the same ACQUIRE and RELEASE
conditions - with three small attributes more:

* ``tickets`` (N): the last ticket handed out (an atomic counter, seed 001);
* ``served`` (N): the ticket of the last grant; the head of the queue is ``served + 1``;
* ``handed`` (S): who handed the lock to a waiter that has not confirmed it (a failed
  wake-up is revoked by that granter only).

and one **queue row per waiter**: the item ``!<ticket>!K`` (:func:`row_key`; no lock key can
be spelled so: a lock key starts with a namespace, which never holds ``!``, and a semaphore's
slots are ``~<slot>~K``). A row holds its
waiter's ``owner``, how to wake it (``token``: a task token, or ``lease:<epoch ms>`` for a
polling waiter), the ``lease`` and ``grace`` (ms) it takes the lock with, and two marks:
``ready`` (the lock was freed for this ticket before its waiter parked, since that epoch ms)
and ``left`` (the waiter gave up). Nothing grows with the queue: every item is bounded, and
every state reads or returns one item.

Exclusion is still the mutex's: every grant is a conditional write of the one lock item, so
nothing about the queue can let two holders in. The queue decides *who* may be granted the
lock, and the rows *how to wake* it.

1. **Fast path.** ``FAST_ACQUIRE`` is ACQUIRE plus "nobody queues" (``served = tickets``):
   an uncontended run writes once, as with the polling lock.
2. **Ticket.** ``ENQUEUE`` takes the next ticket - unless the lock is free with nobody queued
   (then the fast path is tried again: without this, a ticket taken just after the release
   that emptied the queue would wait for a wake-up nobody sends).
3. **Park.** ``PARK`` writes the waiter's row with its task token (``.waitForTaskToken``),
   unless the row is marked ``ready`` or ``left``. Refused: the lock was freed for it
   (``ACQUIRE_HEAD``) or it was skipped (queue again).
4. **Release = handoff.** The holder of ticket ``c`` tries the common cases first:

   * ``TAKE_PARKED``: take row ``c + 1`` only if its waiter is parked on a task token (one
     conditional DeleteItem returning the row), then ``GRANT`` - the lock item names it the
     owner, ``served = c + 1``, in the same write that frees the lock from me - then
     ``SendTaskSuccess`` with the lock record, and the releaser decides nothing (three
     states). The woken waiter confirms the grant (``CLAIM``) before its protected work;
   * refused (no parked row): ``RELEASE_ALONE`` frees the lock in one write when nobody queues
     (``served = tickets``) - an uncontended run's whole release;
   * refused again (a ticket is out, or the lock is not mine): the full handoff, which takes
     row ``c + 1`` whatever it holds (``TAKE``: one DeleteItem returning it) and decides:

     - a parked waiter: ``GRANT`` and wake it, as above;
     - a polling waiter whose lease runs: ``GRANT`` (its next poll finds it holds the lock);
     - a waiter gone (``left``, or a polling lease ended): ``SKIP`` it (``served = c + 1``,
       the lock still mine) and take the next row;
     - no row yet (the waiter has a ticket but has not parked): ``RELEASE``; if a ticket is
       out (``tickets > c``), ``MARK`` row ``c + 1`` ready - unless its waiter parked
       meanwhile (the mark is refused: take the row again and grant it).

     A ``GRANT`` refused while the lock is still mine (``served`` moved past ``c``: a ticket
     passed by a runner of the handoff that found me stale) tells the waiter whose row I took
     to look, and goes on from the new ``served``.

   So a wake-up cannot be lost: the row is the rendezvous. A park before the take is found
   by the take; a park after it is refused by the mark (or finds the lock free for it).
5. **A failed wake-up** (the waiter's park ended: it was stopped, its branch was cancelled,
   or its park timed out just then - ``SendTaskSuccess`` answers ``TaskTimedOut`` or
   ``TaskDoesNotExist``; or any other error, a 5xx or a timeout included, whose call may
   have been applied: the waiter may be awake): an ended grantee's grant is revoked at once. A running one may have
   inspected the lock before the grant landed and parked again, with a new token in a new
   row: after :data:`REPARK_LOOK_S` the releaser takes row ``c + 1`` again and wakes that
   park; a grant confirmed by then (:func:`revocable` no longer holds) ends the release.
   Otherwise the grant stands for one *claim window* (the park timeout) - a live waiter
   whose park timed out finds itself the owner and confirms with ``CLAIM`` - and is then
   revoked (``REVOKE``: only a grant never confirmed, only that grant), and the handoff goes
   on with the next row. A woken waiter works only after its ``CLAIM``, and ``CLAIM`` and
   ``REVOKE`` are conditional writes of the one lock item: exactly one of them wins, so a
   wake-up delivered whose response was lost is never taken back from a waiter at work (a
   refused ``CLAIM``: the grant was revoked - the waiter looks again, and queues again).
6. **Fallback.** A parked waiter looks by itself after its park timeout (longer the further
   back it queued: :func:`park_timeout_expression`): granted -> ``CLAIM``; skipped -> queue
   again; the head of a free lock -> ``ACQUIRE_HEAD``; behind a free lock whose head does
   not move -> run the handoff for the head (a ticket whose row never came - a hole - is
   skipped once its ``ready`` mark is a park timeout old: a helper whose mark stands parks
   again until then); held by a hold that registered a
   presence token -> probe it (``lock_protocol``'s presence probe and ABANDONED: a hold
   cancelled with its branch leaves its execution RUNNING); held by another execution -> ask
   Step Functions. A crashed releaser, a lost ``SendTaskSuccess``, a dead head or a cancelled
   holder therefore cost a bounded delay.
7. **Polling participants** (EXPRESS, ``LockClient``) queue the same way with
   ``lease:<epoch ms>`` in their row's token (refreshed by each poll's ``PARK``) and poll
   ``ACQUIRE_HEAD`` / the lock item.

8. **Coalescing** (``queue=QueueLimit.keep_newest(n)``): ``ENQUEUE_NEWEST`` also moves ``cut``
   to my ticket - ``n`` in the ticket's own write; the ticket ``t - n`` is superseded by it iff
   still ahead of ``served`` in its answer, and ``GRANT`` refuses tickets ``<= cut``: granted
   or superseded, decided on the one lock item. The newer run takes that ticket's row and wakes
   a parked waiter with ``Lock.Superseded``; a coalescing park is a transaction with
   ``PARK_UNLESS_CUT``; a waiter that looks and finds ``cut >= ticket`` ends superseded; the
   handoff passes superseded tickets with ``JUMP``. ``keep_oldest(n)``: ``ENQUEUE_BOUNDED``
   after a read, else ``Lock.QueueFull`` (:mod:`tests.fair_coalesce_model` model-checks it).

The tickets' counters and ``ENQUEUE`` are spelled in :mod:`fair_tickets`, the queue limits' writes
and pieces (step 8) in :mod:`fair_coalesce`; this module names them all, as its own.

Every write here is spelled once; :mod:`tests.test_fair_model` model-checks the steps
(crashes, lost responses, failed wake-ups and park timeouts included) and checks the model's
reading of each write against DynamoDB itself.
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable, Mapping

from locked_workflow.state_machines.errors import WAKE_THROTTLED  # noqa: F401 - re-exported
# (the tickets first: ENQUEUE is named before the ENQUEUEs of the same condition built on it -
# tools/matrix/rows.py names a condition-only call by the first write with its condition)
from locked_workflow.state_machines.fair_tickets import (  # noqa: F401 - re-exported
    ENQUEUE,
    NOBODY_QUEUES,
    SERVED,
    START_COUNTERS,
    TICKETS,
)
from locked_workflow.state_machines.fair_coalesce import (  # noqa: F401 - re-exported
    CUT,
    CUT_BY,
    ENQUEUE_NEWEST,  # (before ENQUEUE_BOUNDED, as they are spelled)
    ENQUEUE_BOUNDED,
    JUMP,
    NOT_CUT,
    PARK_UNLESS_CUT,
    SUPERSEDED_CAUSE,
    cut_of,
    queue_full_cause,
    superseded_cause_expression,
    superseded_ticket_expression,
)
from locked_workflow.state_machines.lock_protocol import (
    ACQUIRE,
    ENTRY,
    EXPIRES_AT,
    FENCE,
    KEY_ATTRIBUTE,
    NOW_EXPRESSION,
    OWNER,
    OWNER_SEPARATOR,
    RELEASE,
    LockWrite,
    ScheduledTask,
    jsonata,
    lock_item_key,
)

#: Who handed the lock to its holder (the granter's owner), until the holder confirms it
#: (absent when the holder took it itself or confirmed).
HANDED = "handed"
#: Row attributes: how to wake the waiter, the lease and grace it takes the lock with, marks.
TOKEN, LEASE, GRACE_MS, READY, LEFT = "token", "lease", "grace", "ready", "left"

#: A polling waiter's token: ``lease:<epoch ms>``, the time until which it keeps polling.
CLIENT_LEASE_PREFIX = "lease:"
#: A polling waiter's place outlives its next poll by this much (then it counts as gone).
CLIENT_POLL_MARGIN_S = 5
#: Row keys: ``!<ticket>!<stored key>`` (a semaphore's slots: ``~<slot>~<stored key>``).
ROW_MARK = "!"
#: Bytes a row key adds to the stored key (``!`` + up to 16 digits + ``!``): fair keys are
#: validated with this much less room (DynamoDB's 2,048-byte limit holds for the rows).
ROW_KEY_RESERVE_BYTES = 18


def row_key(stored_key: str, ticket: int) -> str:
    """The key of the queue row of ``ticket`` of the lock ``stored_key``."""
    return f"{ROW_MARK}{int(ticket)}{ROW_MARK}{stored_key}"


def row_key_expression(key: str, ticket: str) -> str:
    """JSONata: :func:`row_key` of the stored key and ticket the expressions evaluate to."""
    return f"'{ROW_MARK}' & $string({ticket}) & '{ROW_MARK}' & ({key})"


def with_actions(write: str, *, set_: Iterable[str] = (), remove: Iterable[str] = ()) -> str:
    """``write`` (an update expression) with more SET actions and REMOVE actions."""
    clauses = dict(re.findall(r"(SET|ADD|REMOVE|DELETE) (.*?)(?= (?:SET|ADD|REMOVE|DELETE) |$)", write))
    for keyword, more in (("SET", list(set_)), ("REMOVE", list(remove))):
        if more:
            clauses[keyword] = ", ".join(([clauses[keyword]] if keyword in clauses else []) + more)
    return " ".join(f"{k} {clauses[k]}" for k in ("SET", "REMOVE", "ADD", "DELETE") if k in clauses)


#: FAST_ACQUIRE: the mutex's acquire when nobody queues (or a retry of mine whose response was
#: lost). Values as ACQUIRE, plus ``:zero``.
FAST_ACQUIRE = LockWrite(
    update=with_actions(ACQUIRE.update, set_=START_COUNTERS, remove=[f"#{HANDED}"]),
    condition=f"#{OWNER} = :me OR (({ACQUIRE.condition}) AND {NOBODY_QUEUES})",
)
#: Who may grant (or skip) ticket ``:ticket``: whoever may take the lock (ACQUIRE's
#: condition: its holder ``:me``, anyone when it is free or its lease is over, or a proven
#: stale holder's successor) while ``:prev`` (= ``:ticket`` - 1) is the last grant.
_MAY_PASS = f"({ACQUIRE.condition}) AND #{SERVED} = :prev"
#: GRANT: the lock to ``:next`` as ticket ``:ticket``, handed by ``:me`` (the head taking it
#: itself: ``:next`` = ``:me``). ``ALL_NEW``: the fence. Values as ACQUIRE's, plus ``:next``,
#: ``:prev``, ``:ticket``.
GRANT = LockWrite(
    update=(
        f"SET #{OWNER} = :next, #acquiredAt = :now, #{EXPIRES_AT} = :expiresAt, #grace = :grace, "
        f"#{SERVED} = :ticket, #{HANDED} = :me ADD #{FENCE} :one"
    ),
    condition=f"{_MAY_PASS} AND {NOT_CUT}",
)
#: RELEASE_ALONE: the release when nobody queues (RELEASE's condition, plus no ticket out
#: beyond the last grant): the whole release of an uncontended run. Refused: a ticket is out
#: (or the lock is not mine) - the handoff. Values as RELEASE.
RELEASE_ALONE = LockWrite(update=RELEASE.update, condition=f"({RELEASE.condition}) AND {NOBODY_QUEUES}")
#: SKIP: pass over ticket ``:ticket`` (its waiter is gone); the holder, if any, keeps the lock.
#: Idempotent: a retry whose first try applied (its response lost) finds ``:ticket`` passed and
#: is not refused, so the handoff goes on (refused, a holding releaser would end its release
#: still holding the lock, for the rest of its lease). Whoever may take the lock may find the
#: ticket passed by another runner of the handoff: going on is as safe (every grant is
#: conditioned on ``served``).
SKIP = LockWrite(update=f"SET #{SERVED} = :ticket",
                 condition=f"({ACQUIRE.condition}) AND (#{SERVED} = :prev OR #{SERVED} = :ticket)")
#: CLAIM: the waiter ``:me`` the lock was handed to confirms it, before its work (woken, or
#: finding itself the owner when it looks). A retry whose first try applied finds the same
#: condition true (idempotent); refused: the grant was revoked (or its lease ended).
CLAIM = LockWrite(update=f"REMOVE #{HANDED}", condition=f"#{OWNER} = :me AND #{SERVED} = :ticket")
#: REVOKE: take back a handoff whose wake-up failed and that was not confirmed within the
#: claim window - by its granter ``:me`` only, that grant only (owner and fence). Values
#: ``:next``, ``:me``, ``:fence``.
REVOKE = LockWrite(
    update=f"REMOVE #{OWNER}, #acquiredAt, #{EXPIRES_AT}, #grace, #{HANDED}",
    condition=f"#{OWNER} = :next AND #{HANDED} = :me AND #{FENCE} = :fence",
)
#: Who hands a free lock on for an ended waiter (the janitor; ``LockClient.leave_queue`` with
#: ``ended``): never an owner - nothing follows its separator, and every owner is
#: ``<execution or client>#<id>`` or an explicit owner without one - so ACQUIRE's condition
#: admits only a free lock, never one the ended waiter's redriven run holds.
JANITOR = f"janitor{OWNER_SEPARATOR}"
#: DROP_GRANT: the janitor takes back a grant to the ended waiter ``:me`` at its ticket
#: ``:ticket`` that nobody confirmed - ``handed`` names another (``CLAIM`` removes it; a head's
#: own grant names itself) - and frees the lock in the same write (REVOKE's). Its waiter never
#: worked under it: it works only after its ``CLAIM``. A redriven waiter that confirmed it
#: first keeps it (refused here); one that confirms after is refused (``CLAIM``: not mine) and
#: looks again. Never CLAIM for an ended waiter: a grant its redriven run confirmed and works
#: under would pass the same idempotent CLAIM. Values ``:me``, ``:ticket``.
DROP_GRANT = LockWrite(
    update=REVOKE.update,
    condition=f"({CLAIM.condition}) AND attribute_exists(#{HANDED}) AND #{HANDED} <> :me",
)

#: REVOKE's condition as a reading of the lock item: (attribute, type, which value it must
#: equal) - my grant (``me``) of fence ``fence`` to ``next``, still unconfirmed. Read by the
#: workflows (:func:`revocable_expression`) and the fair client (:func:`revocable`).
_REVOCABLE = ((OWNER, "S", "next"), (HANDED, "S", "me"), (FENCE, "N", "fence"))


def revocable_expression(item: str, *, nxt: str, me: str, fence: str) -> str:
    """JSONata: ``REVOKE``'s condition read on the lock ``item`` as a state reads it (DynamoDB
    JSON): my grant of fence ``fence`` to ``nxt`` is still unconfirmed. Once false it stays
    false (a ``CLAIM`` removes ``handed``; any later grant raises the fence), so a releaser that
    reads it false is done: its revoke could only be refused."""
    values = {"next": nxt, "me": me, "fence": fence}
    return "(" + " and ".join(
        (f"$number({item}.`{name}`.N) = ({values[v]})" if kind == "N" else f"{item}.`{name}`.S = ({values[v]})")
        for name, kind, v in _REVOCABLE) + ")"


def revocable(item: Mapping[str, Any] | None, *, nxt: str, me: str, fence: int) -> bool:
    """As :func:`revocable_expression`, over a lock item as boto3 returns it (or None)."""
    values = {"next": nxt, "me": me, "fence": int(fence)}
    item = item or {}
    for name, kind, v in _REVOCABLE:
        text = item.get(name, {}).get(kind)
        if text is None or (int(text) if kind == "N" else text) != values[v]:
            return False
    return True


#: PARK (a row): register how to wake me, unless the lock was freed for my ticket (``ready``)
#: or I was skipped (``left``). Values ``:me``, ``:token``, ``:lease``, ``:grace``.
PARK = LockWrite(
    update=f"SET #{OWNER} = :me, #{TOKEN} = :token, #{LEASE} = :lease, #{GRACE_MS} = :grace",
    condition=f"attribute_not_exists(#{READY}) AND attribute_not_exists(#{LEFT})",
)
#: MARK (a row): the lock is free for this ticket, since ``:since`` - unless its waiter
#: parked. Values ``:since``.
MARK = LockWrite(update=f"SET #{READY} = :since", condition=f"attribute_not_exists(#{TOKEN})")
#: UNMARK (a row; a DeleteItem): take away a mark that came too late - its ticket was served
#: meanwhile, so it is litter - never a row its waiter parked in (MARK's condition).
UNMARK = LockWrite(update="", condition=MARK.condition)
#: TAKE_PARKED (a row; a DeleteItem returning the row): take a row whose waiter is parked on a
#: task token - the release's first step, straight to GRANT. Refused (no row yet, a polling
#: waiter's lease, a mark, a waiter gone): nothing is deleted, and the release goes on with
#: RELEASE_ALONE, then the full handoff (TAKE of any row, then decide). Values ``:polling``
#: (:data:`CLIENT_LEASE_PREFIX`).
TAKE_PARKED = LockWrite(update="", condition=(
    f"attribute_exists(#{TOKEN}) AND NOT begins_with(#{TOKEN}, :polling) AND attribute_not_exists(#{LEFT})"))
#: LEAVE (a row): I give up my place (max_wait spent, or an error while queued) - a row that
#: may not exist yet: a waiter with a ticket whose park never applied leaves a hole, and its
#: mark ``left`` lets a handoff skip the ticket at once. Values ``:me``, ``:one``.
LEAVE = LockWrite(update=f"SET #{OWNER} = :me, #{LEFT} = :one REMOVE #{TOKEN}",
                  condition=f"attribute_not_exists(#{OWNER}) OR #{OWNER} = :me")
#: LEAVE_PRESENT (a row): LEAVE of a row its leaver read present (the janitor for an ended
#: execution's park, ``LockClient.leave_queue``). Never writes a row that is gone: refused, a
#: handoff took (deleted) it since the read - granted (its leaver looks at the lock item and
#: claims it) or passed. LEAVE there would put the row back for good, at a ticket the handoff
#: was deciding: nobody reads or deletes it again. Values as LEAVE.
LEAVE_PRESENT = LockWrite(update=LEAVE.update,
                          condition=f"attribute_exists(#{KEY_ATTRIBUTE}) AND ({LEAVE.condition})")

#: The writes of a fair lock, on the lock item and on rows (TAKE is a DeleteItem of a row,
#: returning it; the release is the mutex's RELEASE, returning ``ALL_NEW``).
LOCK_WRITES = {"FAST_ACQUIRE": FAST_ACQUIRE, "ENQUEUE": ENQUEUE, "GRANT": GRANT, "SKIP": SKIP, "CLAIM": CLAIM,
               "REVOKE": REVOKE, "DROP_GRANT": DROP_GRANT, "RELEASE": RELEASE, "RELEASE_ALONE": RELEASE_ALONE,
               "ENQUEUE_NEWEST": ENQUEUE_NEWEST, "ENQUEUE_BOUNDED": ENQUEUE_BOUNDED, "JUMP": JUMP}
ROW_WRITES = {"PARK": PARK, "MARK": MARK, "LEAVE": LEAVE, "LEAVE_PRESENT": LEAVE_PRESENT}
#: Conditions of the lock item checked in a transaction beside a row's write.
LOCK_CHECKS = {"PARK_UNLESS_CUT": PARK_UNLESS_CUT}
#: Conditional deletes of a row (DeleteItem, ``ALL_OLD``).
ROW_DELETES = {"TAKE_PARKED": TAKE_PARKED}

#: Errors of ``SendTaskSuccess`` that mean the park it targets has ended (the waiter is gone,
#: or looks by itself): the grant waits for a claim, then is revoked. Throttling
#: (``errors.WAKE_THROTTLED``) is retried.

#: A parked waiter's fallback: it looks again after at most this long (times its distance to
#: the head, up to :data:`MAX_PARK_S`). Default of the ``park_timeout`` prop.
DEFAULT_PARK_TIMEOUT_S = 30
#: A failed wake-up of a live grantee: look for its new park after this long (s), before the
#: claim window (its park timed out just as its row was taken; it parks again at once).
REPARK_LOOK_S = 2
#: The longest single park (s).
MAX_PARK_S = 3600


def attribute_names(write: LockWrite) -> dict[str, str]:
    """``#name`` -> attribute for ``write`` (row and lock attributes have their own names)."""
    found = re.findall(r"#(\w+)", f"{write.update} {write.condition}")
    return {f"#{n}": n for n in dict.fromkeys(found)}


def arguments(key: str, write: LockWrite, values: Mapping[str, Any], *, return_values: str = "NONE") -> dict:
    """UpdateItem arguments (all but the table) for ``write`` on the item ``key`` (JSONata
    templates allowed)."""
    missing = set(write.value_names()) - set(values)
    extra = set(values) - set(write.value_names())
    if missing or extra:  # a programming error in this module, caught by the unit tests
        raise AssertionError(f"values for {write}: missing {missing}, extra {extra}")
    return {
        "Key": lock_item_key(key),
        "UpdateExpression": write.update,
        **({"ConditionExpression": write.condition} if write.condition else {}),
        "ExpressionAttributeNames": attribute_names(write),
        "ExpressionAttributeValues": dict(values),
        "ReturnValues": return_values,
    }


def delete_arguments(key: str, write: LockWrite, values: Mapping[str, Any]) -> dict:
    """DeleteItem arguments (all but the table) for ``write`` (a condition only: one of
    :data:`ROW_DELETES`) on the item ``key``, returning the deleted item."""
    if write.update or set(values) != set(write.value_names()):  # a programming error in this module
        raise AssertionError(f"a conditional delete with its values: {write}, {values}")
    return {
        "Key": lock_item_key(key),
        "ConditionExpression": write.condition,
        "ExpressionAttributeNames": attribute_names(write),
        "ExpressionAttributeValues": dict(values),
        "ReturnValues": "ALL_OLD",
    }


#: TAKE_PARKED's values.
TAKE_PARKED_VALUES = {":polling": {"S": CLIENT_LEASE_PREFIX}}


# -- JSONata pieces (the service evaluates these) ---------------------------------------------


def park_timeout_expression(*, park_timeout_s: int, distance: str, wait_variable: str, max_wait_ms: int | None) -> str:
    """JSONata (the park's TimeoutSeconds): the park timeout times the waiter's distance to the
    head (a waiter far back is woken by handoffs long before it could look usefully; the head
    and the one behind it look after one park timeout), at most :data:`MAX_PARK_S`, cut to
    what is left of max_wait (at least 1 s)."""
    base = f"$min([{MAX_PARK_S}, {int(park_timeout_s)} * $max([1, {distance} - 1])])"
    if max_wait_ms is None:
        return f"$max([1, {base}])"
    left = f"{int(max_wait_ms)} - ($millis() - ${wait_variable}.since)"
    return f"$max([1, $min([{base}, $ceil(({left}) / 1000)])])"


def lease_token_expression(poll_s: float) -> str:
    """JSONata: a polling waiter's token, its place living until its next poll + margin."""
    return f"'{CLIENT_LEASE_PREFIX}' & $string($millis() + {int((poll_s + CLIENT_POLL_MARGIN_S) * 1000)})"


def row_state_expression(row: str, *, hole_ms: int) -> str:
    """JSONata over a taken row (TAKE's ``Attributes``, maybe absent): what to do with it -
    ``'wake'`` (a parked waiter), ``'grant'`` (a polling waiter whose lease runs), ``'skip'``
    (gone: left, a lease ended, or a ``ready`` mark older than ``hole_ms``: a ticket whose
    waiter never parked), ``'mark'`` (nobody parked yet; the mark, if any, is kept)."""
    t = f"{row}.`{TOKEN}`.S"
    lease = f"$substring({t}, 0, {len(CLIENT_LEASE_PREFIX)}) = '{CLIENT_LEASE_PREFIX}'"
    lease_ended = f"$number($substringAfter({t}, '{CLIENT_LEASE_PREFIX}')) < $millis()"
    old_mark = f"($exists({row}.`{READY}`.N) and $number({row}.`{READY}`.N) + {int(hole_ms)} < $millis())"
    return (
        f"$exists({row}.`{LEFT}`) ? 'skip' : $exists({t}) ? ({lease} ? ({lease_ended} ? 'skip' : 'grant') : 'wake') "
        f": {old_mark} ? 'skip' : 'mark'"
    )


# -- the same readings in Python (clients, janitor, CLI) --------------------------------------


def row_state(row: Mapping[str, Any] | None, *, now: int, hole_ms: int) -> str:
    """As :func:`row_state_expression`, over a row as boto3 returns it (or None)."""
    row = row or {}
    token = row.get(TOKEN, {}).get("S")
    if LEFT in row:
        return "skip"
    if token is not None:
        if token.startswith(CLIENT_LEASE_PREFIX):
            return "skip" if int(token[len(CLIENT_LEASE_PREFIX):]) < now else "grant"
        return "wake"
    if READY in row and int(row[READY]["N"]) + hole_ms < now:
        return "skip"
    return "mark"


def counters(item: Mapping[str, Any]) -> tuple[int, int]:
    """(served, tickets) of a lock item (0, 0 when no ticket was ever taken)."""
    return int(item.get(SERVED, {}).get("N", "0")), int(item.get(TICKETS, {}).get("N", "0"))


def queued_tickets(item: Mapping[str, Any]) -> range:
    """The tickets still queued on a lock item, head first (each may be a row, or a hole)."""
    served, tickets = counters(item)
    return range(served + 1, tickets + 1)


def enqueues_in_history(tasks: Iterable[ScheduledTask], *, table_name: str) -> list[tuple[str, str]]:
    """``(row key, owner)`` of every park the execution attempted on ``table_name`` (its row
    key names the ticket): the janitor marks those rows ``left``, since a stopped waiter never
    leaves by itself. Parks are aws-sdk tasks, whose parameters are the API's: the fair lock's
    PARK, an UpdateItem; the read/write lock's (``shared_protocol.park_transaction``), the
    row's ``Update`` in a TransactWriteItems beside a ConditionCheck of the lock item."""
    from locked_workflow.state_machines import shared_protocol  # (it builds on this module)

    parks = (PARK.condition, shared_protocol.PARK.condition)
    found: dict[tuple[str, str], None] = {}
    for task in tasks:
        if task.resource.split(".")[0] == "transactWriteItems":  # (``.waitForTaskToken``: a park)
            updates = [entry.get("Update") for entry in task.parameters.get("TransactItems", [])]
        else:
            updates = [task.parameters]
        for p in updates:
            if isinstance(p, Mapping) and p.get("ConditionExpression") in parks and p.get("TableName") == table_name:
                found[(p["Key"][KEY_ATTRIBUTE]["S"], p["ExpressionAttributeValues"][":me"]["S"])] = None
    return list(found)


def worst_case_park_events(park_timeout_s: float, max_wait_s: float | None) -> int:
    """History events a fair waiter's queue can record while it waits up to ``max_wait_s``
    (None: as long as the state machine runs - the caller bounds it by the machine's timeout)."""
    return (math.ceil((max_wait_s or 0) / park_timeout_s) + 1) * EVENTS_PER_PARK_ROUND


def unlimited_wait_s(park_timeout_s: int, history_event_budget: int | None) -> int:
    """``max_wait=None`` (a fair lock on a STANDARD machine): the longest wait whose park rounds
    fit the history budget (default 20,000 events: a round is at most
    :data:`EVENTS_PER_PARK_ROUND` events, and a round lasts at least one park timeout) - then
    ``Lock.Timeout``. With the defaults (30 s): (20,000 / 100 - 1) x 30 s = 1 h 39 min."""
    budget = history_event_budget if history_event_budget is not None else 20_000
    return max(1, (budget // EVENTS_PER_PARK_ROUND - 1) * int(park_timeout_s))


#: History events of one park round that times out, at most: the park, the fallback's read and
#: checks, and a handoff run for a head that does not move - the longest: its wake-up fails while
#: its execution runs (DescribeExecution, a short look for its new park, the claim window, a
#: last look, the revoke: 81 events measured, ``tests/lock/test_fair_lost_responses.py``), then a hole's mark
#: (about 12 more). A round that also passes rows of waiters gone (``left``) costs about 8
#: events more per row; the janitor's marks are passed by the releasers, a waiter's round only
#: when a releaser crashed. (It was 45 until a run of that longest round measured 81.)
EVENTS_PER_PARK_ROUND = 100
