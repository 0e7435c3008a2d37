"""The lock on the record itself, top to bottom.

The lock attributes live on the item being protected - a customer record, say - instead of on
a separate lock item, so the acquire returns the record (``ReturnValues: ALL_NEW``) and the
protected work needs no read of its own; and the work's changes to the record are written by
the release, in the same conditional ``UpdateItem`` that frees the lock.

1. The item: the record table's own partition key (a string) is the lock key, as is - no
   namespace. The lock attributes are the mutex's, prefixed with :data:`PREFIX`
   (``lw:owner``, ``lw:fence`` …): names the record's own attributes must not use. The writes
   are the mutex's ACQUIRE, RELEASE and RETIRE, with those names (``lock_protocol.LockItem``).
2. A missing record. With ``must_exist`` (the default) an acquire that finds no record - its
   result has no attribute besides the key and the lock's - frees the stub it wrote and fails
   with ``Lock.RecordMissing`` (the stub keeps only the key and ``lw:fence``, so fences never
   restart). Without it, the acquire creates the record.
3. Update and unlock in one write. The protected work may return ``recordUpdate``:
   ``{"set": {name: AttributeValue}, "remove": [name]}`` (DynamoDB JSON values). The release
   sets and removes those attributes in the RELEASE write itself: its condition - the lock is
   still mine - fences the write by construction, so a run that lost its lock cannot write.
   Only SET and REMOVE, both idempotent: the release may be retried after a lost response.
   A bad update (a lock attribute, the key, a value that is not an AttributeValue) fails the
   section with ``Lock.InvalidUpdate`` after releasing the lock without writing.
"""

from __future__ import annotations

import json

from state_machines import lock_protocol as p

#: Prefix of the lock attributes on a record.
PREFIX = "lw:"
ERROR_RECORD_MISSING = "Lock.RecordMissing"
ERROR_INVALID_UPDATE = "Lock.InvalidUpdate"
#: The field of the protected work's output holding the record update.
UPDATE_FIELD = "recordUpdate"
#: Most attributes one update may set and remove (each needs placeholders in one expression).
MAX_UPDATE_ATTRIBUTES = 100

if not p.RELEASE.update.startswith("REMOVE ") or " SET " in p.RELEASE.update:
    raise AssertionError("the release with an update appends to RELEASE's single REMOVE clause")


def record_item(key_attribute: str) -> p.LockItem:
    return p.LockItem(key_attribute=key_attribute, prefix=PREFIX)


def _lock_attribute(name: str) -> str:
    return f"$substring({name}, 0, {len(PREFIX)}) = {json.dumps(PREFIX)}"


def record_expression(attributes: str) -> str:
    """JSONata: the record without the lock's attributes (DynamoDB JSON)."""
    return f"$sift({attributes}, function($v, $k) {{ $not({_lock_attribute('$k')}) }})"


def lock_variable_expression(item: p.LockItem, *, must_exist: bool) -> str:
    """JSONata over the acquire's result: ``$lock`` with ``item`` (the record); with
    ``must_exist``, raises ``Lock.RecordMissing`` when the acquire found no record."""
    a = "$states.result.Attributes"
    lock = p.lock_variable_expression(item)
    with_item = f"$merge([{lock}, {{'item': {record_expression(a)}}}])"
    if not must_exist:
        return with_item
    missing = p.raise_expression(ERROR_RECORD_MISSING, f"'no record with ' & {json.dumps(item.key_attribute)} & ' = ' & {a}.`{item.key_attribute}`.S")
    return f"$count($keys({record_expression(a)})) <= 1 ? {missing} : {with_item}"


def missing_record_lock_expression() -> str:
    """JSONata (the acquire's Catch when the record is missing): what frees the stub - owner
    and key from the entry record; no fence (-1 never matches: only my own hold is freed)."""
    return f"{{'key': {p.ENTRY}.key, 'owner': {p.ENTRY}.owner, 'fence': -1}}"


def release_with_update_arguments(*, table_name: str, item: p.LockItem, lock_variable: str) -> dict:
    """The release as one UpdateItem that also applies the work's ``recordUpdate``."""
    lock = "$" + lock_variable
    names = json.dumps(p.RELEASE.attribute_names(item))
    key = json.dumps(item.key_attribute)
    invalid = p.raise_expression(ERROR_INVALID_UPDATE, "'the record update ' & $problem")
    checks = (
        f"$problem := $type($u) != 'object' ? 'must be an object with set and remove, got: ' & $type($u) "
        f": $type($set) != 'object' ? 'set must be an object, got: ' & $type($set) "
        f": $type($remove) != 'array' ? 'remove must be an array of names, got: ' & $type($remove) "
        f": $count($names) > {MAX_UPDATE_ATTRIBUTES} ? 'must name at most {MAX_UPDATE_ATTRIBUTES} attributes' "
        f": $count($filter($names, function($n) {{ $type($n) != 'string' or $n = '' or $n = {key} "
        f"or {_lock_attribute('$n')} }})) > 0 ? 'must not name the key, a lock attribute ({PREFIX}*) or a non-string' "
        f": $count($filter($keys($set), function($n) {{ $type($lookup($set, $n)) != 'object' }})) > 0 "
        f"? 'set values must be DynamoDB AttributeValues such as {{\"S\": \"x\"}}' : ''; "
    )
    return {
        "TableName": table_name,
        "Key": {item.key_attribute: {"S": p.jsonata(f"{lock}.key")}},
        "UpdateExpression": p.jsonata(
            "( $u := $exists($states.input.recordUpdate) ? $states.input.recordUpdate : {}; "
            "$set := $exists($u.set) ? $u.set : {}; $remove := $exists($u.remove) ? $u.remove : []; "
            "$names := $append($keys($set), $remove); "
            + checks
            + f"$problem != '' ? {invalid} : "
            "( $s := $map($keys($set), function($n, $i) { '#u' & $i & ' = :u' & $i }); "
            "$r := $map($remove, function($n, $i) { '#r' & $i }); "
            f"($count($s) > 0 ? 'SET ' & $join($s, ', ') & ' ' : '') & {json.dumps(p.RELEASE.update)} "
            "& ($count($r) > 0 ? ', ' & $join($r, ', ') : '') ) )"
        ),
        "ConditionExpression": p.RELEASE.condition,
        "ExpressionAttributeNames": p.jsonata(
            "( $u := $exists($states.input.recordUpdate) ? $states.input.recordUpdate : {}; "
            "$set := $exists($u.set) ? $u.set : {}; $remove := $exists($u.remove) ? $u.remove : []; "
            f"$merge($append([{names}], $append("
            "$map($keys($set), function($n, $i) { {'#u' & $i: $n} }), "
            "$map($remove, function($n, $i) { {'#r' & $i: $n} })))) )"
        ),
        "ExpressionAttributeValues": p.jsonata(
            "( $u := $exists($states.input.recordUpdate) ? $states.input.recordUpdate : {}; "
            "$set := $exists($u.set) ? $u.set : {}; "
            f"$merge($append([{{':me': {{'S': {lock}.owner}}, ':fence': {{'N': $string({lock}.fence)}}}}], "
            "$map($keys($set), function($n, $i) { {':u' & $i: $lookup($set, $n)} }))) )"
        ),
    }
