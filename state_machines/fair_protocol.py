"""The fair lock: a FIFO queue on the lock item and event-driven handoff, top to bottom.

A fair lock on the stored key ``K`` is the mutex lock item of :mod:`lock_protocol` - the same
owner, lease, stop grace and fence, taken and given back by the same ACQUIRE and RELEASE
conditions - with two more attributes on the same item:

* ``queue`` (list of owners): the waiters, oldest first;
* ``tokens`` (map owner -> task token): how to wake a parked waiter.

Exclusion is still the mutex's: every acquisition is a conditional write of the one lock
item, so nothing about the queue can let two holders in. The queue only decides *who* may
take a free lock, and the tokens only decide *when* a waiter looks again.

1. **Fast path.** ``FAST_ACQUIRE`` is ACQUIRE plus "nobody queues": an uncontended run writes
   once, as with the polling lock. A run refused by it queues.
2. **Queue.** ``ENQUEUE`` appends the owner (once: a retried enqueue whose response was lost
   does not append twice).
3. **Park.** ``PARK`` registers the waiter's task token (``.waitForTaskToken``) under the
   condition that the lock is *not* grantable to it - its condition is the negation of
   ACQUIRE_HEAD's. The one item serializes PARK against every release:

   * a release before the park leaves the lock grantable to the head: its PARK is refused
     and it acquires at once (no wake needed);
   * a release after the park reads the head's token in the same write (``ALL_OLD``) and
     wakes it with ``SendTaskSuccess``.

   So a wake-up cannot be lost between "looked" and "slept": there is no such gap.
4. **Acquire.** ``ACQUIRE_HEAD`` is ACQUIRE plus "I am the head"; it dequeues the head and
   its token in the same write. Grants therefore follow queue order: no run overtakes one
   queued before it. A refused ACQUIRE_HEAD reads the item: a retry whose first try took the
   lock (its response lost) finds itself the owner and goes on; anyone else parks again.
   (ACQUIRE_HEAD cannot accept "already mine" itself: its dequeue would then remove the
   *next* head.)
5. **Release** is the mutex's RELEASE returning the item as it was: the head's token, if any,
   is woken. Becoming head by a dequeue (``REMOVE_AT``: a waiter leaving on ``Lock.Timeout``,
   or a dead head removed) wakes the new head the same way when the lock is free.
6. **Fallback.** A park times out after the park timeout and looks again (re-queues if it was
   dropped, checks the holder's and the head's liveness): a crashed releaser, a wake-up sent
   to a dead head, or a lost ``SendTaskSuccess`` costs at most one park timeout.

7. **Polling participants.** An EXPRESS execution or a ``LockClient`` cannot park: it queues
   the same way, keeps ``lease:<epoch ms>`` in its token slot (``CLIENT_POLL``, on every poll)
   and polls ACQUIRE_HEAD. Nobody wakes a lease; a head whose lease ended is dead and is
   dequeued by whoever waits behind it. The janitor dequeues an ended execution's entries.

Every write here is spelled once; :mod:`tests.test_fair_model` model-checks the steps
(crashes and lost responses included) and checks the model's reading of each write against
DynamoDB itself.
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable, Mapping

from state_machines.lock_protocol import (
    ACQUIRE,
    ENTRY,
    EXPIRES_AT,
    KEY_ATTRIBUTE,
    NOW_EXPRESSION,
    OWNER,
    RELEASE,
    LockWrite,
    ScheduledTask,
    jsonata,
    lease_end_expression,
    lock_item_key,
)

#: The queue of waiting owners, oldest first (L of S).
QUEUE = "queue"
#: Owner -> task token of its current park (M of S).
TOKENS = "tokens"
#: Placeholder of one owner as a key of ``tokens`` (its value: the owner).
WHO = "#who"

#: FAST_ACQUIRE: the mutex's acquire when nobody queues (or a retry of one that took the lock:
#: its response was lost). Values as ACQUIRE, plus ``:zero``.
FAST_ACQUIRE = LockWrite(
    update=ACQUIRE.update,
    condition=(
        f"#{OWNER} = :me "
        f"OR (({ACQUIRE.condition}) AND (attribute_not_exists(#{QUEUE}) OR size(#{QUEUE}) = :zero))"
    ),
)
#: ENQUEUE: append ``:me`` once; create the token map. Values ``:me``, ``:mine`` (L [:me]),
#: ``:empty`` (L []), ``:noTokens`` (M {}).
ENQUEUE = LockWrite(
    update=(
        f"SET #{QUEUE} = list_append(if_not_exists(#{QUEUE}, :empty), :mine), "
        f"#{TOKENS} = if_not_exists(#{TOKENS}, :noTokens)"
    ),
    condition=f"NOT contains(#{QUEUE}, :me)",
)
#: The condition under which the head ``:me`` may take the lock (ACQUIRE's, at the head).
_GRANTABLE = f"({ACQUIRE.condition}) AND #{QUEUE}[0] = :me"
#: ACQUIRE_HEAD: take the lock as the head of the queue and leave the queue. Values as
#: ACQUIRE; ``#who`` = ``:me``.
ACQUIRE_HEAD = LockWrite(
    update=f"{ACQUIRE.update} REMOVE #{QUEUE}[0], #{TOKENS}.{WHO}",
    condition=_GRANTABLE,
)
#: PARK: register my task token unless the lock is grantable to me now - exactly ACQUIRE_HEAD's
#: condition, negated. Values ``:me``, ``:stale``, ``:now``, ``:token``; ``#who`` = ``:me``.
PARK = LockWrite(
    update=f"SET #{TOKENS}.{WHO} = :token",
    condition=f"NOT ({_GRANTABLE})",
)
#: REMOVE_AT: take owner ``:who`` out of the queue at the index it was read at (the index is
#: spelled into the expression: ``[INDEX]``). Values ``:who``; ``#who`` = ``:who``.
INDEX = "[INDEX]"
REMOVE_AT = LockWrite(
    update=f"REMOVE #{QUEUE}{INDEX}, #{TOKENS}.{WHO}",
    condition=f"#{QUEUE}{INDEX} = :who",
)

#: A Python client or an EXPRESS execution cannot park: while it queues, its token slot holds
#: ``lease:<epoch ms>``, the
#: time until which it keeps polling (refreshed on every poll). Nobody wakes a lease; a head
#: whose lease ended is dead and may be dequeued, as a head whose execution ended.
CLIENT_LEASE_PREFIX = "lease:"
#: A polling waiter's place outlives its next poll by this much (then it counts as dead).
CLIENT_POLL_MARGIN_S = 5
#: CLIENT_POLL: refresh my lease while I am queued. Values ``:me``, ``:lease``; ``#who`` = ``:me``.
CLIENT_POLL = LockWrite(
    update=f"SET #{TOKENS}.{WHO} = :lease",
    condition=f"contains(#{QUEUE}, :me)",
)

#: The writes a fair lock adds (the release is the mutex's RELEASE, returning ALL_OLD).
WRITES = {"FAST_ACQUIRE": FAST_ACQUIRE, "ENQUEUE": ENQUEUE, "PARK": PARK, "ACQUIRE_HEAD": ACQUIRE_HEAD,
          "RELEASE": RELEASE, "REMOVE_AT": REMOVE_AT}  # (CLIENT_POLL: only a client's own slot)

#: A throttled wake-up (``SendTaskSuccess`` through the aws-sdk integration) is retried; any
#: other error means the waiter is gone or looks by itself.
WAKE_THROTTLED = "Sfn.ThrottlingException"

#: A parked waiter's fallback: it looks again after at most this long. Default of the
#: ``park_timeout`` prop.
DEFAULT_PARK_TIMEOUT_S = 30


def attribute_names(write: LockWrite, who_jsonata: str | None = None) -> dict[str, str]:
    """``#name`` -> attribute for ``write`` (``#who``: the owner ``who_jsonata`` evaluates to)."""
    names = {k: v for k, v in write.attribute_names().items() if k != WHO}
    if WHO in f"{write.update} {write.condition}":
        names[WHO] = jsonata(who_jsonata or f"{ENTRY}.owner")
    return names


def _arguments(key: str, write: LockWrite, values: Mapping[str, Any], *, who: str | None = None,
               update: str | None = None, condition: str | None = None, return_values: str = "NONE") -> dict:
    missing = set(write.value_names()) - set(values)
    extra = set(values) - set(write.value_names())
    if missing or extra:  # a programming error in this module, caught by the unit tests
        raise AssertionError(f"values for {write}: missing {missing}, extra {extra}")
    return {
        "Key": lock_item_key(key),
        "UpdateExpression": update or write.update,
        "ConditionExpression": condition or write.condition,
        "ExpressionAttributeNames": attribute_names(write, who),
        "ExpressionAttributeValues": dict(values),
        "ReturnValues": return_values,
    }


def _acquire_values(lease_ms: int, stale_owner_jsonata: str) -> dict:
    return {
        ":me": {"S": jsonata(f"{ENTRY}.owner")},
        ":stale": {"S": jsonata(stale_owner_jsonata)},
        ":now": {"N": jsonata(NOW_EXPRESSION)},
        ":expiresAt": {"N": jsonata(lease_end_expression(lease_ms))},
        ":grace": {"N": jsonata(f"$string({ENTRY}.grace)")},
        ":one": {"N": "1"},
    }


def fast_acquire_arguments(*, key_jsonata: str, lease_ms: int, stale_owner_jsonata: str) -> dict:
    return _arguments(jsonata(key_jsonata), FAST_ACQUIRE,
                      {**_acquire_values(lease_ms, stale_owner_jsonata), ":zero": {"N": "0"}},
                      return_values="ALL_NEW")


def enqueue_arguments() -> dict:
    me = {"S": jsonata(f"{ENTRY}.owner")}
    return _arguments(jsonata(f"{ENTRY}.key"), ENQUEUE,
                      {":me": me, ":mine": {"L": [me]}, ":empty": {"L": []}, ":noTokens": {"M": {}}})


def park_arguments(*, stale_owner_jsonata: str) -> dict:
    """PARK's UpdateItem for an ``aws-sdk:dynamodb:updateItem.waitForTaskToken`` task."""
    values = {k: v for k, v in _acquire_values(0, stale_owner_jsonata).items() if k in (":me", ":stale", ":now")}
    return _arguments(jsonata(f"{ENTRY}.key"), PARK, {**values, ":token": {"S": jsonata("$states.context.Task.Token")}})


def acquire_head_arguments(*, lease_ms: int, stale_owner_jsonata: str) -> dict:
    return _arguments(jsonata(f"{ENTRY}.key"), ACQUIRE_HEAD, _acquire_values(lease_ms, stale_owner_jsonata),
                      return_values="ALL_NEW")


def remove_at_arguments(*, key_jsonata: str, who_jsonata: str, index_jsonata: str) -> dict:
    """REMOVE_AT for owner ``who`` at index ``index`` (both JSONata); returns the item after."""
    at = f" & '[' & $string({index_jsonata}) & ']' & "

    def spell(text: str) -> str:  # the index spelled into the expression
        return jsonata(at.join(json.dumps(part) for part in text.split(INDEX)))

    return _arguments(jsonata(key_jsonata), REMOVE_AT, {":who": {"S": jsonata(who_jsonata)}}, who=who_jsonata,
                      update=spell(REMOVE_AT.update), condition=spell(REMOVE_AT.condition), return_values="ALL_NEW")


# -- JSONata over the lock item (the service evaluates these) ---------------------------------


def queue_expression(item: str) -> str:
    """JSONata: the owners queued on the DynamoDB item ``item`` as an array (maybe empty)."""
    return f"($q := {item}.`{QUEUE}`.L; $exists($q) ? [$q.S] : [])"


def head_token_expression(item: str) -> str:
    """JSONata over an item (a release's ALL_OLD, a dequeue's ALL_NEW): the head's task token,
    or null when nobody queues or the head has not parked (or is a polling client)."""
    return (
        f"( $head := {queue_expression(item)}[0]; "
        f"$t := $exists($head) ? $lookup({item}.`{TOKENS}`.M, $head) : null; "
        f"$exists($t.S) and $substring($t.S, 0, {len(CLIENT_LEASE_PREFIX)}) != '{CLIENT_LEASE_PREFIX}' ? $t.S : null )"
    )


def head_lease_ended_expression(item: str) -> str:
    """JSONata over a GetItem: the head is a client whose polling lease has ended (dead)."""
    return (
        f"( $head := {queue_expression(item)}[0]; "
        f"$t := $exists($head) ? $lookup({item}.`{TOKENS}`.M, $head).S : null; "
        f"$type($t) = 'string' and $substring($t, 0, {len(CLIENT_LEASE_PREFIX)}) = '{CLIENT_LEASE_PREFIX}' "
        f"and $number($substringAfter($t, '{CLIENT_LEASE_PREFIX}')) < $millis() )"
    )


def wake_after_dequeue_expression(item: str) -> str:
    """JSONata over a dequeue's ALL_NEW: the new head's token when the lock is free (nobody
    else will wake it), else null."""
    return f"$exists({item}.`{OWNER}`) and $number({item}.`{EXPIRES_AT}`.N) >= $millis() ? null : {head_token_expression(item)}"


def my_index_expression(item: str, owner: str = f"{ENTRY}.owner") -> str:
    """JSONata over a GetItem: the index of ``owner`` in the queue, -1 when not queued."""
    return (
        f"( $q := {queue_expression(item)}; $me := {owner}; "
        "$at := $filter($map($q, function($o, $i) { $o = $me ? $i : -1 }), function($i) { $i >= 0 }); "
        "$exists($at) ? $at[0] : -1 )"
    )


def park_timeout_expression(*, park_timeout_s: int, wait_variable: str, max_wait_ms: int) -> str:
    """JSONata (the park's TimeoutSeconds): the park timeout, cut to what is left of max_wait
    (at least 1 s)."""
    w = "$" + wait_variable
    left = f"{int(max_wait_ms)} - ($millis() - {w}.since)"
    return f"$max([1, $min([{int(park_timeout_s)}, $ceil(({left}) / 1000)])])"


#: History events of one park round that times out (park, fallback reads and checks, a dead
#: head removed and the next woken, enqueue again), rounded up.
EVENTS_PER_PARK_ROUND = 45


def worst_case_park_events(park_timeout_s: float, max_wait_s: float) -> int:
    """History events a fair waiter's queue can record while it waits up to ``max_wait_s``."""
    return (math.ceil(max_wait_s / park_timeout_s) + 1) * EVENTS_PER_PARK_ROUND


def enqueues_in_history(tasks: Iterable[ScheduledTask], *, table_name: str) -> list[tuple[str, str]]:
    """``(stored key, owner)`` of every ENQUEUE the execution attempted on ``table_name``
    among ``tasks`` (see :func:`lock_protocol.dynamodb_tasks_scheduled`: those scheduled at or
    before its end), once each: the janitor dequeues them, since a stopped waiter never leaves
    the queue by itself.

    A queue entry records no time, so unlike RETIRE the dequeue cannot tell an entry made
    before the end from the same owner's entry after a redrive (a redriven waiter resumes with
    its owner). A late copy of the end's event can therefore take a redriven waiter out of
    the queue: it costs that waiter its place - it queues again at its next park timeout or
    poll - never exclusion, which the lock item's ACQUIRE conditions alone decide.
    """
    found: dict[tuple[str, str], None] = {}
    for task in tasks:
        p = task.parameters
        if task.resource == "updateItem" and p.get("ConditionExpression") == ENQUEUE.condition \
                and p.get("TableName") == table_name:
            found[(p["Key"][KEY_ATTRIBUTE]["S"], p["ExpressionAttributeValues"][":me"]["S"])] = None
    return list(found)


# -- the same readings in Python (clients) ----------------------------------------------------


def queue_of(item: Mapping[str, Any]) -> list:
    """The owners queued on a DynamoDB item (as :func:`queue_expression`)."""
    return [o["S"] for o in item.get(QUEUE, {}).get("L", [])]


def _slot_of_head(item: Mapping[str, Any]) -> str | None:
    queue = queue_of(item)
    return item.get(TOKENS, {}).get("M", {}).get(queue[0], {}).get("S") if queue else None


def head_token(item: Mapping[str, Any]) -> str | None:
    """The head's task token, if it parked (as :func:`head_token_expression`)."""
    slot = _slot_of_head(item)
    return None if slot is None or slot.startswith(CLIENT_LEASE_PREFIX) else slot


def head_lease_ended(item: Mapping[str, Any], *, now: int) -> bool:
    """The head is a client whose polling lease ended (as :func:`head_lease_ended_expression`)."""
    slot = _slot_of_head(item) or ""
    return slot.startswith(CLIENT_LEASE_PREFIX) and int(slot[len(CLIENT_LEASE_PREFIX):]) < now


def head_to_wake_after_dequeue(item: Mapping[str, Any], *, now: int) -> str | None:
    """The new head's token when the lock is free (as :func:`wake_after_dequeue_expression`)."""
    held = OWNER in item and int(item.get(EXPIRES_AT, {}).get("N", "0")) >= now
    return None if held else head_token(item)


def client_poll_arguments(*, poll_s: float) -> dict:
    """CLIENT_POLL for a polling execution (EXPRESS): my place lives until my next poll + margin."""
    lease = f"'{CLIENT_LEASE_PREFIX}' & $string($millis() + {int((poll_s + CLIENT_POLL_MARGIN_S) * 1000)})"
    return _arguments(jsonata(f"{ENTRY}.key"), CLIENT_POLL,
                      {":me": {"S": jsonata(f"{ENTRY}.owner")}, ":lease": {"S": jsonata(lease)}})
