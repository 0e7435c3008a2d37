"""Several keys at once, top to bottom.

A multi-key lock takes the mutex of every key (the same lock items, stored keys and writes as
:mod:`lock_protocol`, so single-key holders of any of the keys exclude it and are excluded by
it) all or nothing:

1. Entry: the keys (a JSONata array) are validated one by one with the mutex's rules,
   de-duplicated and sorted; at most :data:`MAX_KEYS` (a transaction's limit), at least one.
   A bad array fails with ``Lock.InvalidKey`` before any DynamoDB call. Nested in sections
   of the same table that hold some of the keys, it passes through those (``inherited``,
   with their fences) and takes only the others (``acquire``); all of them: it re-enters.
2. Acquire: one ``TransactWriteItems`` of the mutex's ACQUIRE on every key, with one owner.
   Either every lock is taken or none is: a holder never holds some keys while waiting for
   others, so there is no deadlock by construction. A refusal (``TransactionCanceled``: some
   key is held, or a concurrent transaction touched one) is a poll, like the mutex's.
3. Fences: ``TransactWriteItems`` returns no attributes, so a consistent ``TransactGetItems``
   reads them back (every item is then ours: nobody else can change it). ``$lock.fences``
   maps each stored key to its fence.
4. Release: one ``TransactWriteItems`` of the mutex's RELEASE on every key. When it is refused
   (some key was taken over) or its outcome is unknown, every key is released on its own,
   with the mutex's rule for a refused release (released before the lease ended: a lost
   response; after: ``Lock.Lost``), so the keys still ours are always freed.
5. Recovery: the janitor finds the ACQUIRE of every key in the transaction's parameters; the
   liveness check inspects one key per check, in turn.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines.errors import ERROR_INVALID_KEY
# re-exported for older readers (errors.SDK_TRANSIENT_ERRORS and errors.TRANSACTION_CANCELED are the names)
from locked_workflow.state_machines.errors import SDK_TRANSIENT_ERRORS as TRANSIENT_ERRORS  # noqa: F401
from locked_workflow.state_machines.errors import TRANSACTION_CANCELED  # noqa: F401
from locked_workflow.state_machines.expressions import jsonata_string, utf8_bytes

#: DynamoDB's limit on the actions of one transaction.
MAX_KEYS = 100
#: Most UTF-8 bytes of all stored keys together: the keys travel in the entry record, the
#: ``$lock`` variable (twice: ``keys`` and ``fences``) and the fences read, each a piece of
#: state data Step Functions limits to 256 KiB - so a hold's own records stay far below it.
MAX_TOTAL_KEY_BYTES = 16 * 1024


def keys_expression(user_expression: str, namespace: str) -> str:
    """The stored keys (distinct, sorted), or ``$error`` naming what is wrong."""
    prefix = jsonata_string(namespace + p.NAMESPACE_SEPARATOR)
    invalid = p.raise_expression(ERROR_INVALID_KEY, "'the lock keys ' & $problem")
    item_problem = p.key_problem_expression("$k", namespace)
    return (
        "( $lockKeys := (" + user_expression + "); "
        "$problem := $not($exists($lockKeys)) ? 'are missing' "
        ": $type($lockKeys) != 'array' ? 'must be an array of strings, got: ' & $type($lockKeys) "
        ": $count($lockKeys) = 0 ? 'must not be empty, got an empty array' "
        f": $count($distinct($lockKeys)) > {MAX_KEYS} ? "
        f"'must be at most {MAX_KEYS} distinct keys, got: ' & $string($count($distinct($lockKeys))) "
        ": ( $items := $filter($map($lockKeys, function($k, $i) { "
        f"( $q := {item_problem}; $q = '' ? '' : 'item ' & $string($i) & ' ' & $q ) "
        "}), function($m) { $m != '' }); $exists($items) ? $join($items, '; ') : '' ); "
        f"$total := $sum($map($distinct($lockKeys), function($k) {{ {utf8_bytes(prefix + ' & $k')} }})); "
        f"$problem := ($problem = '' and $total > {MAX_TOTAL_KEY_BYTES}) ? "
        f"'must be at most {MAX_TOTAL_KEY_BYTES} bytes of UTF-8 in all, with their namespace prefixes, got: ' "
        "& $string($total) & ' bytes' : $problem; "
        f"$problem = '' ? $append([], $sort($distinct($map($lockKeys, function($k) {{ {prefix} & $k }})))) "
        f": {invalid} )"
    )


def holds_keys_expression(variable: str, keys: str = "$key") -> str:
    """JSONata: the lock record ``$<variable>`` of an enclosing section holds every one of
    ``keys`` (a multi-key section nested in it passes through)."""
    v = "$" + variable
    held = f"$append($exists({v}.keys) ? {v}.keys : [], $exists({v}.key) ? [{v}.key] : [])"
    return (
        f"($exists({v}) and ( $held := {held}; "
        f"$count($filter({keys}, function($k) {{ $not($k in $held) }})) = 0 ))"
    )


#: Entry record fields of a multi-key section nested in sections of the same table that hold
#: some of its keys: ``inherited`` maps each such key to the enclosing hold's fence, and
#: ``acquire`` lists the keys this section takes itself (all of them when nothing encloses).
INHERITED = "inherited"
ACQUIRE_KEYS = "acquire"


def inherited_expression(enclosing_lock_variables: Sequence[str], keys: str = "$key") -> str:
    """JSONata (the section's entry): ``{stored key: fence}`` of the ``keys`` already held by the
    enclosing holds ``$<variable>`` - single-key or multi-key - of this execution's branch.
    A nested multi-key section passes through those keys and takes only the others; waiting
    for a key its own enclosing hold holds would wait for itself until ``Lock.Timeout``."""
    parts = []
    for variable in enclosing_lock_variables:
        v = "$" + variable
        one = f"($exists({v}.key) and {v}.key in {keys} ? [{{{v}.key: {v}.fence}}] : [])"
        many = (
            f"($exists({v}.keys) ? $map($filter({v}.keys, function($k) {{ $k in {keys} }}), "
            f"function($k) {{ {{$k: $lookup({v}.fences, $k)}} }}) : [])"
        )
        parts.append(f"($exists({v}) ? $append({one}, {many}) : [])")
    if not parts:
        return "{}"
    return f"$merge($append([], [{', '.join(parts)}]))"


def acquire_keys_expression(keys: str = "$key", inherited: str = "$inherited") -> str:
    """JSONata (the section's entry): the keys to take - every key not inherited."""
    return f"$append([], $filter({keys}, function($k) {{ $not($exists($lookup({inherited}, $k))) }}))"


def _update(table_name: str, key: str, write: p.LockWrite, values: dict) -> str:
    """JSONata object: one ``Update`` action of a transaction (``key``, ``values``: JSONata)."""
    entries = ", ".join(f"{jsonata_string(k)}: {v}" for k, v in values.items())
    return (
        "{'Update': {"
        f"'TableName': {jsonata_string(table_name)}, "
        f"'Key': {{{jsonata_string(p.KEY_ATTRIBUTE)}: {{'S': {key}}}}}, "
        f"'UpdateExpression': {jsonata_string(write.update)}, "
        f"'ConditionExpression': {jsonata_string(write.condition)}, "
        f"'ExpressionAttributeNames': {json.dumps(write.attribute_names())}, "
        f"'ExpressionAttributeValues': {{{entries}}}"
        "}}"
    )


def acquire_arguments(*, table_name: str, lease_ms: int, stale_owner_jsonata: str) -> dict:
    """The acquire transaction: the mutex's ACQUIRE on every key the entry record takes."""
    values = {
        ":me": f"{{'S': {p.ENTRY}.owner}}",
        ":stale": f"{{'S': {stale_owner_jsonata}}}",
        ":now": f"{{'N': $now}}",
        ":expiresAt": f"{{'N': $expiresAt}}",
        ":grace": f"{{'N': $string({p.ENTRY}.grace)}}",
        ":one": "{'N': '1'}",
    }
    _check_values(p.ACQUIRE, values)
    update = _update(table_name, "$k", p.ACQUIRE, values)
    return {
        "TransactItems": p.jsonata(
            f"( $now := {p.NOW_EXPRESSION}; $expiresAt := {p.lease_end_expression(lease_ms)}; "
            f"$append([], $map({p.ENTRY}.{ACQUIRE_KEYS}, function($k) {{ {update} }})) )"
        )
    }


def read_fences_arguments(*, table_name: str) -> dict:
    """Read the acquired items back (consistently, in one transaction): their fences."""
    names = {f"#{a}": a for a in (p.KEY_ATTRIBUTE, p.FENCE, p.ACQUIRED_AT, p.EXPIRES_AT)}
    get = (  # the attributes the hold's record reads, nothing else (a bounded result)
        "{'Get': {"
        f"'TableName': {jsonata_string(table_name)}, "
        f"'Key': {{{jsonata_string(p.KEY_ATTRIBUTE)}: {{'S': $k}}}}, "
        f"'ProjectionExpression': {jsonata_string(', '.join(names))}, "
        f"'ExpressionAttributeNames': {json.dumps(names)}"
        "}}"
    )
    return {"TransactItems": p.jsonata(f"$append([], $map({p.ENTRY}.{ACQUIRE_KEYS}, function($k) {{ {get} }}))")}


def lost_expression() -> str:
    """JSONata (a per-key release found the key not ours): lost unless the lease had not
    ended - then no one could have taken it over, and an earlier try of ours released it."""
    return "{'lost': $millis() >= $states.input.expiresAt}"


def any_lost_expression() -> str:
    """JSONata (over the per-key releases' results): some key was taken over."""
    return "$count($states.result[lost = true]) > 0"


def lock_variable_expression(lock_variable: str) -> str:
    """JSONata over the fences read: the ``$lock`` record of a multi-key hold. Its generation
    is the unread hold's (``$<lock_variable>``, assigned by the acquire transaction): the read
    is not the acquisition, so a read resumed by a redrive must not make the hold current.
    ``requestedAt`` (the section's entry), as a single key's record has: its WaitTime."""
    items = "$states.result.Responses.Item"
    return (
        "{"
        f"'keys': {p.ENTRY}.keys, "
        f"'{ACQUIRE_KEYS}': {p.ENTRY}.{ACQUIRE_KEYS}, "
        f"'owner': {p.ENTRY}.owner, "
        f"'fences': $merge($append([{p.ENTRY}.{INHERITED}], $map({items}, function($i) {{ {{$i.{p.KEY_ATTRIBUTE}.S: $number($i.{p.FENCE}.N)}} }}))), "
        f"'acquiredAt': $number(({items})[0].{p.ACQUIRED_AT}.N), "
        f"'expiresAt': $number(({items})[0].{p.EXPIRES_AT}.N), "
        f"'{p.REQUESTED_AT}': {p.ENTRY}.{p.REQUESTED_AT}, "
        f"'{p.GENERATION}': ${lock_variable}.{p.GENERATION}"
        "}"
    )


def unread_lock_expression() -> str:
    """JSONata (the acquire's Assign): the hold before its fences are read - enough to
    release it (a fence of -1 never matches: an unread key is released only while ours)."""
    return (
        f"{{'keys': {p.ENTRY}.keys, '{ACQUIRE_KEYS}': {p.ENTRY}.{ACQUIRE_KEYS}, 'owner': {p.ENTRY}.owner, "
        f"'fences': {{}}, {p.generation_field()}}}"
    )


def _fence_of(lock: str, key: str) -> str:
    return f"$string($exists($lookup({lock}.fences, {key})) ? $lookup({lock}.fences, {key}) : -1)"


def release_arguments(*, table_name: str, lock_variable: str, reentrant: bool = False) -> dict:
    """The release transaction: the mutex's RELEASE on every key held in ``$<lock_variable>``
    (a re-entered hold signals ``Lock.Reentered`` instead: the enclosing section releases)."""
    lock = "$" + lock_variable
    values = {":me": f"{{'S': {lock}.owner}}", ":fence": f"{{'N': {_fence_of(lock, '$k')}}}"}
    _check_values(p.RELEASE, values)
    update = _update(table_name, "$k", p.RELEASE, values)
    items = f"$append([], $map({lock}.{ACQUIRE_KEYS}, function($k) {{ {update} }}))"
    if reentrant:
        items = p.reentered_or(items, reentered_expression=f"{lock}.reentered = true")
    return {"TransactItems": p.jsonata(items)}


def present_arguments(*, table_name: str, lock_variable: str) -> dict:
    """The presence transaction (``transactWriteItems.waitForTaskToken``): the mutex's PRESENT
    on every key the hold took, one token for all; a re-entered hold (or one that took no key
    of its own) signals ``Lock.Reentered`` instead."""
    lock = "$" + lock_variable
    values = {
        name: "{" + ", ".join(f"{jsonata_string(t)}: {p.unwrap_jsonata(v)}" for t, v in value.items()) + "}"
        for name, value in p.present_values(lock_variable).items()
    }
    _check_values(p.PRESENT, values)
    update = _update(table_name, "$k", p.PRESENT, values)
    items = f"$append([], $map({lock}.{ACQUIRE_KEYS}, function($k) {{ {update} }}))"
    items = p.reentered_or(
        items, reentered_expression=f"{lock}.reentered = true or $count({lock}.{ACQUIRE_KEYS}) = 0"
    )
    return {"TransactItems": p.jsonata(items)}


def first_key_expression(lock_variable: str) -> str:
    """JSONata: the first key a multi-key hold took (where it marks its departure)."""
    return f"${lock_variable}.{ACQUIRE_KEYS}[0]"


def release_each_items_expression(lock_variable: str) -> str:
    """JSONata (the per-key release Map's items): one lock record per key, released with the
    mutex's RELEASE (``lock_protocol.release_arguments(lock_jsonata='$states.input')``)."""
    lock = "$" + lock_variable
    return (
        f"$append([], $map({lock}.{ACQUIRE_KEYS}, function($k) {{ {{'key': $k, 'owner': {lock}.owner, "
        f"'fence': $number({_fence_of(lock, '$k')}), "
        f"'expiresAt': $exists({lock}.expiresAt) ? {lock}.expiresAt : 0}} }}))"
    )


def inspect_key_expression(wait_variable: str, every: int) -> str:
    """JSONata (the liveness check's read): the key whose holder this check inspects - the
    next key on every check (``every``: rounds between checks), so each key is inspected
    within as many checks as there are keys."""
    keys = f"{p.ENTRY}.{ACQUIRE_KEYS}"
    return f"{keys}[{p.liveness_check_number_expression(wait_variable, every)} % $count({keys})]"


def _check_values(write: p.LockWrite, values: dict[str, Any]) -> None:
    missing = set(write.value_names()) ^ set(values)
    if missing:  # a programming error in this module, caught by the unit tests
        raise AssertionError(f"values for {write}: mismatch {missing}")
