"""JSONata of a waiter's loop: counting its rounds, its deadline and wait, and the liveness
check of the holder it keeps meeting (who holds, whether its branch is present, whether its
execution ended longer than its stop grace ago).
"""

from __future__ import annotations

from typing import Any, Mapping

from locked_workflow.state_machines.expressions import ENTRY, jsonata_string
from locked_workflow.state_machines.lock_item import (
    ACQUIRED_AT,
    ALIVE_STATUSES,
    GRACE,
    LOCK_TABLE_ITEM,
    NO_PRESENCE,
    OWNER,
    OWNER_SEPARATOR,
    PRESENCE,
    PRESENCE_CLOSED,
    PRESENCE_OF,
    LockItem,
)
from locked_workflow.state_machines.wait_policy import WaitPolicy


#: The section's variable for the holder a waiter found (``<lock variable>Holder``): another
#: participant's record, never this section's acquisition.
HOLDER_SUFFIX = "Holder"


def wait_bookkeeping_expression(wait_variable: str) -> str:
    """JSONata for the Catch of a held lock: count the round, remember when waiting began."""
    w = "$" + wait_variable
    return (
        f"( $w := $type({w}) = 'object' ? {w} "
        ": {'since': $toMillis($states.context.State.EnteredTime), 'rounds': 0}; "
        "{'since': $w.since, 'rounds': $w.rounds + 1} )"
    )


def waited_enough_expression(wait_variable: str, max_wait_ms: int) -> str:
    """JSONata (Choice condition): true once the caller's max wait is used up."""
    return f"$millis() - ${wait_variable}.since >= {int(max_wait_ms)}"


def wait_seconds_expression(policy: WaitPolicy, wait_variable: str, max_wait_ms: int) -> str:
    w = "$" + wait_variable
    return policy.seconds_expression(
        rounds=f"{w}.rounds", remaining_ms=f"{int(max_wait_ms)} - ($millis() - {w}.since)"
    )


def liveness_due_expression(wait_variable: str, every: int) -> str:
    """JSONata (Choice condition): time to ask whether the holder is still alive."""
    return f"${wait_variable}.rounds % {int(every)} = 0"


def liveness_check_number_expression(wait_variable: str, every: int) -> str:
    """JSONata: how many liveness checks this waiter has made, this one included (1, 2, 3 ...
    on the rounds where :func:`liveness_due_expression` holds). A lock kind with several
    items to inspect (keys, slots) inspects item ``number % count``, so every item is
    inspected within ``count`` checks - counting rounds instead would, with ``every`` = 2 and
    2 items, inspect only the first item for ever."""
    return f"$floor(${wait_variable}.rounds / {int(every)})"


def stale_owner_expression(wait_variable: str) -> str:
    """JSONata for ``:stale``: a holder proven ended (grace included) by the liveness check,
    else my own owner (which the condition accepts anyway)."""
    w = "$" + wait_variable
    return f"$type({w}.stale) = 'string' ? {w}.stale : {ENTRY}.owner"


def holder_projection(item: LockItem | None = None) -> tuple[list[str], dict[str, str]]:
    """What the liveness check reads of a lock item - its key, owner, stop grace and presence
    token (with the acquisitions they belong to), nothing else (a lock on a record must not read the record: a state's result is limited to
    256 KiB): (placeholders, ``ExpressionAttributeNames``)."""
    i = item or LOCK_TABLE_ITEM
    names = {"#lockKey": i.key_attribute, f"#{OWNER}": i.attribute(OWNER), f"#{GRACE}": i.attribute(GRACE)}
    names.update({f"#{n}": i.attribute(n) for n in (ACQUIRED_AT, PRESENCE, PRESENCE_OF, PRESENCE_CLOSED)})
    return list(names), names


def holder_expression(item: LockItem | None = None) -> str:
    """JSONata over a GetItem of the lock item: its stored key, owner ("" when free) and
    stop grace."""
    r, i = "$states.result.Item", item or LOCK_TABLE_ITEM
    owner, grace = i.path(r, OWNER), i.path(r, GRACE)
    acquired, token = i.path(r, ACQUIRED_AT), i.path(r, PRESENCE)
    of, closed = i.path(r, PRESENCE_OF), i.path(r, PRESENCE_CLOSED)
    present = f"$exists({owner}.S) and $exists({acquired}.N) and " + probe_token_condition(
        token=token, of=of, closed=closed, acquired=f"$number({acquired}.N)")
    return (
        f"{{'key': {r}.`{i.key_attribute}`.S, "
        f"'owner': $exists({owner}.S) ? {owner}.S : '', "
        f"'grace': $exists({grace}.N) ? $number({grace}.N) : 0, "
        f"'presence': ({present}) ? {token}.S : null}}"
    )


def probe_token_condition(*, token: str, of: str, closed: str, acquired: str) -> str:
    """JSONata: whether the presence token at ``token`` (``of``: its acquisition, ``closed``:
    the departure mark; DynamoDB JSON paths, maybe absent) is the one to probe - registered for
    the acquisition ``acquired`` (a JSONata number), which has not departed. (A mark is never
    moved back: one at or after ``acquired`` means that acquisition departed.)"""
    return (
        f"$exists({token}.S) and $exists({of}.N) and $number({of}.N) = {acquired} "
        f"and $not($exists({closed}.N) and $number({closed}.N) >= {acquired}) "
        f"and {token}.S != {jsonata_string(NO_PRESENCE)}"
    )


def presence_to_probe(item: Mapping[str, Any]) -> str | None:
    """As :func:`holder_expression`'s ``presence`` (:func:`probe_token_condition`), over a lock
    item as boto3 returns it: the held acquisition's presence token to probe, else None (free,
    no token, another acquisition's, departed, or :data:`NO_PRESENCE`). The clients' reading."""
    owner, acquired = item.get(OWNER, {}).get("S"), item.get(ACQUIRED_AT, {}).get("N")
    if owner is None or acquired is None:
        return None
    return presence_token_of(item, int(acquired))


def presence_token_of(record: Mapping[str, Any], acquired: int) -> str | None:
    """:func:`probe_token_condition` over ``record`` as boto3 returns it - a lock item, or a
    read/write hold's presence row (``shared_protocol.PRESENT_ROW``) - for the acquisition made
    at ``acquired``: its token to probe, else None (no token, another acquisition's, departed,
    or :data:`NO_PRESENCE`)."""
    token, of = record.get(PRESENCE, {}).get("S"), record.get(PRESENCE_OF, {}).get("N")
    closed = record.get(PRESENCE_CLOSED, {}).get("N")
    if token is None or of is None or token == NO_PRESENCE:
        return None
    if int(of) != acquired or (closed is not None and int(closed) >= acquired):
        return None
    return token


def holder_present_expression(holder_variable: str) -> str:
    """JSONata (Choice condition): the holder registered a presence token to probe."""
    return f"$type(${holder_variable}.presence) = 'string'"


def holder_is_execution_expression(holder_variable: str) -> str:
    """JSONata (Choice condition): the holder is a Standard execution's acquisition."""
    return f"$contains(${holder_variable}.owner, ':execution:')"


def holder_execution_expression(holder_variable: str) -> str:
    """JSONata: the execution ARN of the holder (the owner up to its ``#``)."""
    return f"$substringBefore(${holder_variable}.owner, '{OWNER_SEPARATOR}')"


def after_liveness_check_expression(wait_variable: str, holder_variable: str) -> str:
    """JSONata over a DescribeExecution of the holder: mark it (and the item it holds: a
    semaphore or multi-key waiter inspects one of several) stale once it has ended *and* its
    stop grace has passed since it ended (work it started may run that long)."""
    w, h = "$" + wait_variable, "$" + holder_variable
    ended = "$states.result.StopDate"
    ended_ms = f"($type({ended}) = 'number' ? {ended} : $toMillis({ended}))"
    alive = " or ".join(f"$states.result.Status = '{s}'" for s in ALIVE_STATUSES)
    return (
        f"( $stale := ({alive} or $not($exists({ended}))) ? null "
        f": ($millis() > {ended_ms} + {h}.grace ? {h}.owner : null); "
        f"$merge([{w}, {{'stale': $stale, 'staleKey': $stale ? {h}.key : null}}]) )"
    )
