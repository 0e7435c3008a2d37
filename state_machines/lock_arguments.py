"""The ASL arguments of the lock's DynamoDB tasks (JSONata query language), pure functions of
their inputs: acquire, the ``$lock`` record, release, retire, the presence writes, and the guard
that keeps a redriven execution's work from resuming without the lock.
"""

from __future__ import annotations

from typing import Any, Mapping

from locked_workflow.state_machines.errors import SIGNAL_RESUMED
from locked_workflow.state_machines.expressions import (
    ENTRY,
    NOW_EXPRESSION,
    REDRIVE_COUNT_EXPRESSION,
    jsonata,
    jsonata_string,
    lease_end_expression,
    raise_expression,
    reentered_or,
)
from locked_workflow.state_machines.lock_item import (
    ACQUIRED_AT,
    EXPIRES_AT,
    FENCE,
    GENERATION,
    LOCK_TABLE_ITEM,
    NO_PRESENCE,
    OWNER,
    PRESENCE,
    PRESENCE_OF,
    REQUESTED_AT,
    LockItem,
    lock_item_key,
)
from locked_workflow.state_machines.lock_writes import ABANDONED, ACQUIRE, DEPART, PRESENCE_SETTLE_MS, PRESENT, RELEASE, RETIRE, LockWrite


def update_item_arguments(key: str, write: LockWrite, values: Mapping[str, Any], item: LockItem | None = None) -> dict:
    """UpdateItem arguments (all but the table) in DynamoDB JSON; JSONata templates allowed."""
    missing = set(write.value_names()) - set(values)
    extra = set(values) - set(write.value_names())
    if missing or extra:  # a programming error in this module, caught by the unit tests
        raise AssertionError(f"values for {write}: missing {missing}, extra {extra}")
    return {
        "Key": lock_item_key(key, item),
        "UpdateExpression": write.update,
        "ConditionExpression": write.condition,
        "ExpressionAttributeNames": write.attribute_names(item),
        "ExpressionAttributeValues": dict(values),
    }


def acquire_arguments(
    *,
    lease_ms: int,
    grace_ms: int | None,
    stale_owner_jsonata: str | None = None,
    reentrant: bool = False,
    key_jsonata: str = f"{ENTRY}.key",
    owner_jsonata: str = f"{ENTRY}.owner",
    item: LockItem | None = None,
    write: LockWrite | None = None,
) -> dict:
    """The acquire UpdateItem (``ReturnValues: ALL_NEW`` gives the fence). ``item``/``write``:
    a lock kept elsewhere than the lock table (see record_protocol).

    Inside a section, key and owner come from the section's entry record; a re-entered
    section signals ``Lock.Reentered`` instead of writing.
    """
    key = key_jsonata
    if reentrant:
        key = reentered_or(key, reentered_expression=f"$exists({ENTRY}.reentered)")
    return {
        **update_item_arguments(
            jsonata(key),
            write or ACQUIRE,
            {
                ":me": {"S": jsonata(owner_jsonata)},
                ":stale": {"S": jsonata(stale_owner_jsonata or owner_jsonata)},
                ":now": {"N": jsonata(NOW_EXPRESSION)},
                ":expiresAt": {"N": jsonata(lease_end_expression(lease_ms))},
                # inside a section the grace comes with the entry record (see section_entry_expression)
                ":grace": {"N": jsonata(f"$string({ENTRY}.grace)") if grace_ms is None else str(int(grace_ms))},
                ":one": {"N": "1"},
            },
            item,
        ),
        "ReturnValues": "ALL_NEW",
    }


def lock_variable_expression(item: LockItem | None = None, of: str = "$states.result.Attributes") -> str:
    """JSONata over an acquire result (``of``: its item) : the ``$lock`` record the protected
    work reads (with the entry record's ``requestedAt``: the acquire's log line then shows the
    wait)."""
    a, i = of, item or LOCK_TABLE_ITEM
    return (
        "{"
        f"'key': {a}.`{i.key_attribute}`.S, "
        f"'owner': {i.path(a, OWNER)}.S, "
        f"'fence': $number({i.path(a, FENCE)}.N), "
        f"'acquiredAt': $number({i.path(a, ACQUIRED_AT)}.N), "
        f"'expiresAt': $number({i.path(a, EXPIRES_AT)}.N), "
        f"{jsonata_string(REQUESTED_AT)}: {ENTRY}.{REQUESTED_AT}, "
        f"{generation_field()}"
        "}"
    )


def held_ms_expression(lock_variable: str, when: str | None = None) -> str:
    """JSONata, in the Assign of a release that succeeded: how long the lock was held (ms),
    from ``$<lock_variable>.acquiredAt`` to now, both on the Step Functions service clock (the
    acquire stamped ``acquiredAt`` with ``$millis()`` too). Monitoring reads it from the
    release's exit line (``<lock_variable>Held``): every kind's release assigns it. ``when``:
    JSONata, true when this write ends the hold (a handoff's grant ends it only while its
    runner still holds); else null."""
    held = f"${lock_variable}.{ACQUIRED_AT}"
    measured = f"$exists({held}) ? $millis() - {held} : null"
    return measured if when is None else f"({when}) ? ({measured}) : null"


def generation_field() -> str:
    """JSONata (an object's field, in the Assign of a state whose success *is* the
    acquisition): the redrive count the acquisition was made in."""
    return f"{jsonata_string(GENERATION)}: {REDRIVE_COUNT_EXPRESSION}"


def resumed_guard_expression(lock_variable: str) -> str:
    """JSONata evaluated before each task of the protected work runs: nothing while the
    acquisition ``$<lock_variable>`` was made in the execution's current redrive generation,
    else the ``Lock.Resumed`` error (the task does not run).

    Why: ``RedriveExecution`` reruns only a Parallel's failed or aborted branches, each from
    its unsuccessful step; states that succeeded - the acquire - are not rerun
    (https://docs.aws.amazon.com/step-functions/latest/dg/redrive-executions.html, "Redrive
    behavior of individual states"). A holder stopped inside its work and redriven would
    resume that task without the lock, which the janitor may meanwhile have handed to another
    run. Whether a redriven Parallel evaluates its ``Arguments`` (the section's entry)
    again is undocumented, and whether variables keep their values across a redrive is not
    spelled out either: the guard needs neither. It compares the acquisition's generation
    with ``$states.context.Execution.RedriveCount``, which only a redrive changes, and fails
    when the record is missing."""
    lock = "$" + lock_variable
    return (
        f"(($exists({lock}.{GENERATION}) and {lock}.{GENERATION} = {REDRIVE_COUNT_EXPRESSION}) ? null : "
        + raise_expression(SIGNAL_RESUMED, "'the execution was redriven after the section acquired its lock; "
                                           "the work does not resume without acquiring again'")
        + ")"
    )


def reentered_lock_expression(entry: str = ENTRY) -> str:
    """JSONata (a re-entered section): the enclosing hold of the entry record ``entry``,
    marked as re-entered."""
    return f"$merge([{entry}.reentered, {{'reentered': true}}])"


def release_arguments(
    *, lock_variable: str, reentrant: bool = False, lock_jsonata: str | None = None, item: LockItem | None = None,
) -> dict:
    """The release UpdateItem for the lock held in ``$<lock_variable>`` (or the lock record
    ``lock_jsonata`` evaluates to: one key of a multi-key hold); ``ReturnValues: UPDATED_OLD``."""
    lock = lock_jsonata or "$" + lock_variable
    key = f"{lock}.key"
    if reentrant:
        key = reentered_or(key, reentered_expression=f"{lock}.reentered = true")
    return {
        **update_item_arguments(
            jsonata(key),
            RELEASE,
            {
                ":me": {"S": jsonata(f"{lock}.owner")},
                ":fence": {"N": jsonata(f"$string({lock}.fence)")},
            },
            item,
        ),
        # the attributes it removed, as they were: the release's log line shows the hold,
        # its time minus the old acquiredAt (and, lacking the fence, is told from an acquire's)
        "ReturnValues": "UPDATED_OLD",
    }


def retire_arguments(
    *, lock_variable: str, reentrant: bool = False, lock_jsonata: str | None = None, item: LockItem | None = None,
) -> dict:
    """RETIRE, by the holder itself, of the acquisition in ``$<lock_variable>`` (or the lock
    record ``lock_jsonata``: one key of a multi-key hold), ended *now*: the lock stays held
    for the acquisition's stop grace from now, then any waiter takes it over.

    Used when a task of the protected work refused to resume after a redrive
    (``Lock.Resumed``): the execution was stopped (or failed) during its work, and that
    work - a Lambda invocation Step Functions does not stop - may still run. Releasing here
    would let the next holder, the redriven section itself included, in beside it; the end
    is at or before now, so now + grace is at least the janitor's stop + grace."""
    lock = lock_jsonata or "$" + lock_variable
    key = f"{lock}.key"
    if reentrant:
        key = reentered_or(key, reentered_expression=f"{lock}.reentered = true")
    return update_item_arguments(
        jsonata(key),
        RETIRE,
        {":owner": {"S": jsonata(f"{lock}.owner")}, ":endedAt": {"N": jsonata(NOW_EXPRESSION)}},
        item,
    )


def present_values(lock_variable: str) -> dict:
    """PRESENT's values (JSONata templates) for the acquisition in ``$<lock_variable>``."""
    lock = "$" + lock_variable
    return {
        ":me": {"S": jsonata(f"{lock}.owner")},
        ":acquiredAt": {"N": jsonata(f"$string({lock}.acquiredAt)")},
        ":token": {"S": jsonata("$states.context.Task.Token")},
        ":now": {"N": jsonata(NOW_EXPRESSION)},
    }


def present_arguments(*, lock_variable: str, item: LockItem | None = None) -> dict:
    """PRESENT for the acquisition in ``$<lock_variable>``: the arguments (all but the table)
    of an ``aws-sdk:dynamodb:updateItem.waitForTaskToken`` task. A re-entered hold registers
    nothing (its key raises ``Lock.Reentered``): its branch is the enclosing hold's, and a
    token closed by a nested part of that branch would let a waiter retire a live holder."""
    lock = "$" + lock_variable
    key = reentered_or(f"{lock}.key", reentered_expression=f"{lock}.reentered = true")
    return update_item_arguments(jsonata(key), PRESENT, present_values(lock_variable), item)


def depart_arguments(*, lock_variable: str, item: LockItem | None = None, key_jsonata: str | None = None) -> dict:
    """DEPART for the acquisition in ``$<lock_variable>`` on its item (``key_jsonata``: the
    first key a multi-key hold took; its presence transaction includes it); a re-entered hold
    raises ``Lock.Reentered`` instead (it registered nothing)."""
    lock = "$" + lock_variable
    key = reentered_or(key_jsonata or f"{lock}.key", reentered_expression=f"{lock}.reentered = true")
    return update_item_arguments(
        jsonata(key),
        DEPART,
        {":me": {"S": jsonata(f"{lock}.owner")}, ":acquiredAt": {"N": jsonata(f"$string({lock}.acquiredAt)")}},
        item,
    )


def presence_projection(item: LockItem | None = None) -> tuple[list[str], dict[str, str]]:
    """What the holder reads after DEPART: the token and the acquisition it belongs to
    (placeholders, ``ExpressionAttributeNames``)."""
    i = item or LOCK_TABLE_ITEM
    names = {f"#{n}": i.attribute(n) for n in (PRESENCE, PRESENCE_OF)}
    return list(names), names


def departed_token_expression(lock_variable: str, item: LockItem | None = None) -> str:
    """JSONata over the read after DEPART: the token this acquisition registered, else the
    :data:`NO_PRESENCE` marker (sending it fails, and the failure is caught: nothing to end)."""
    a, i, lock = "$states.result.Item", item or LOCK_TABLE_ITEM, "$" + lock_variable
    token, of = i.path(a, PRESENCE), i.path(a, PRESENCE_OF)
    return (
        f"($exists({token}.S) and $exists({of}.N) and $number({of}.N) = {lock}.acquiredAt) "
        f"? {token}.S : {jsonata_string(NO_PRESENCE)}"
    )


def abandoned_arguments(*, holder_variable: str, item: LockItem | None = None) -> dict:
    """ABANDONED for the holder the liveness check read into ``$<holder_variable>`` (its key,
    owner and presence token), ended now."""
    h = "$" + holder_variable
    return update_item_arguments(
        jsonata(f"{h}.key"),
        ABANDONED,
        {
            ":owner": {"S": jsonata(f"{h}.owner")},
            ":endedAt": {"N": jsonata(NOW_EXPRESSION)},
            ":token": {"S": jsonata(f"{h}.presence")},
            ":settledBefore": {"N": jsonata(f"$string($millis() - {PRESENCE_SETTLE_MS})")},
        },
        item,
    )
