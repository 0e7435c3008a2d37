"""The lock on the record itself, top to bottom.

The lock attributes live on the item being protected - a customer record, say - instead of on
a separate lock item, so the section reads the record for the protected work (``$lock.item``),
and the work's changes to the record are written by the release, in the same conditional
``UpdateItem`` that frees the lock.

0. Bounded results. No lock state returns more than a bounded size, whatever the record's:
   Step Functions fails a state whose result is over 256 KiB with ``States.DataLimitExceeded``,
   which no Catch handles (it would end the execution holding the lock). The acquire returns
   only the lock's attributes (``UPDATED_NEW``) and the write units it consumed
   (``ReturnConsumedCapacity: INDEXES``: one unit per KB of the larger of the record before
   and after, https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html).
   The record is read (``GetItem``, consistent) only when it is at most
   :data:`RECORD_SIZE_LIMIT_KB`; a larger one - or an acquire whose result carries no units -
   is released at once and the section fails with ``Lock.RecordTooLarge``. The release returns
   nothing (``ReturnValues: NONE``).

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
4. A bad update fails the section with ``Lock.InvalidUpdate`` after releasing the lock without
   writing - at once, with the record unchanged and its fence as the acquire left it. Checked
   before the write (:func:`update_problem_expression`): the shape, the names (not the key, not
   a lock attribute, none twice: DynamoDB refuses a name both set and removed as overlapping
   paths), and every value against DynamoDB's AttributeValue rules - exactly one data type;
   ``N`` in DynamoDB's number syntax with at most 38 significant digits and a magnitude from
   1E-130 to 9.9999999999999999999999999999999999999E+125 (or zero); ``B`` base64; sets
   non-empty, their members of the set's type and unique (numbers by value: ``1`` = ``1.0``);
   ``NULL`` true; ``BOOL`` a boolean; ``M``/``L`` checked member by member, at most 32 levels
   deep. Sources: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_AttributeValue.html,
   https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.NamingRulesDataTypes.html
   (numbers, sets), https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html
   (nesting, item size). Stricter than DynamoDB Local only where no one should care: ASCII
   digits, exponents of at most 9 digits, base64 without whitespace.
   What is not checked - the 400 KB item size, which depends on the stored record - DynamoDB
   refuses with a ValidationException at the release; that, too, releases without the update
   and fails with ``Lock.InvalidUpdate`` (:func:`refused_update_outputs_expression`).
"""

from __future__ import annotations

import json

from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines.errors import (  # noqa: F401 - re-exported
    ERROR_INVALID_UPDATE,
    ERROR_RECORD_MISSING,
    ERROR_RECORD_TOO_LARGE,
    REFUSED_WRITE_ERRORS,
)

#: Prefix of the lock attributes on a record.
PREFIX = "lw:"
#: Largest record (KB, as DynamoDB counts write units) the section reads into ``$lock.item``:
#: the record travels in the execution's state, whose every input, output and variable is
#: limited to 256 KiB - half of it leaves room for the workflow's own data.
RECORD_SIZE_LIMIT_KB = 128
#: The field of the protected work's output holding the record update.
UPDATE_FIELD = "recordUpdate"
#: Most attributes one update may set and remove (each needs placeholders in one expression).
MAX_UPDATE_ATTRIBUTES = 100
#: DynamoDB's AttributeValue data types.
ATTRIBUTE_VALUE_TYPES = ("S", "N", "B", "BOOL", "NULL", "M", "L", "SS", "NS", "BS")
#: DynamoDB numbers: significant digits, and the decimal exponent of the first one.
NUMBER_MAX_DIGITS = 38
NUMBER_MAX_EXPONENT = 125
NUMBER_MIN_EXPONENT = -130
#: Nested attributes: levels below a top-level attribute, itself level 1.
MAX_NESTING_LEVELS = 32
#: DynamoDB's refusal of the release's write (``errors.REFUSED_WRITE_ERRORS``) with this in the
#: cause means a bad update; any other is re-raised as is.
_VALIDATION_CODE = "Error Code: ValidationException"
#: A number as DynamoDB reads one (checked to match the whole string: JavaScript's and
#: Python's ``$`` disagree on a trailing newline; neither pattern can match an empty string,
#: which JSONata refuses).
_NUMBER_PATTERN = "/^[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?/"
_BASE64_PATTERN = "/^[A-Za-z0-9+\\/]+={0,2}/"
#: A longer exponent (leading zeros aside) DynamoDB cannot read, even on a zero (DynamoDB
#: Local refuses ``0E-99999999999``; stricter than that from 10 digits on).
_MAX_EXPONENT_DIGITS = 9

if not p.RELEASE.update.startswith("REMOVE ") or " SET " in p.RELEASE.update:
    raise AssertionError("the release with an update appends to RELEASE's single REMOVE clause")


def record_item(key_attribute: str) -> p.LockItem:
    return p.LockItem(key_attribute=key_attribute, prefix=PREFIX)


def _lock_attribute(name: str) -> str:
    return f"$substring({name}, 0, {len(PREFIX)}) = {json.dumps(PREFIX)}"


def record_expression(attributes: str) -> str:
    """JSONata: the record without the lock's attributes (DynamoDB JSON)."""
    return f"$sift({attributes}, function($v, $k) {{ $not({_lock_attribute('$k')}) }})"


def write_units_expression(result: str = "$states.result") -> str:
    """JSONata: the write units an acquire consumed on the record's table (not its indexes),
    or -1 when the result carries none."""
    c = f"{result}.ConsumedCapacity"
    return (
        f"($exists({c}.Table.CapacityUnits) ? {c}.Table.CapacityUnits : "
        f"$exists({c}.CapacityUnits) ? {c}.CapacityUnits : -1)"
    )


def acquired_lock_expression(item: p.LockItem) -> str:
    """JSONata over the acquire's result (``UPDATED_NEW``: the lock's attributes only): ``$lock``
    without the record yet, with ``recordKb``, the record's size as the write units tell it.

    Key and owner are the ones this acquire wrote (its entry's, as ``acquire_arguments`` sends
    them), never read back: a retry after a lost response sets ``owner`` to the value it
    already has, and ``UPDATED_NEW`` returns only "the updated attributes"
    (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateItem.html#DDB-UpdateItem-request-ReturnValues):
    moto leaves out an attribute a ``SET`` left unchanged, DynamoDB Local returns it. What is
    read back changes on every attempt: the fence (``ADD``), ``acquiredAt`` and ``expiresAt``
    (``$millis()``, evaluated by each attempt's arguments; a retry waits at least a second)."""
    lock = p.lock_variable_expression(item)
    return (f"$merge([{lock}, {{'key': {p.ENTRY}.key, 'owner': {p.ENTRY}.owner, "
            f"'recordKb': {write_units_expression()}}}])")


def read_key_expression(lock_variable: str) -> str:
    """JSONata (the record read's key): the record's key - or ``Lock.RecordTooLarge`` when the
    record is over :data:`RECORD_SIZE_LIMIT_KB`, or its size is unknown."""
    lock = "$" + lock_variable
    too_large = p.raise_expression(
        ERROR_RECORD_TOO_LARGE,
        f"'the record ' & {lock}.key & ' is ' & ({lock}.recordKb < 0 ? 'of unknown size' : "
        f"$string({lock}.recordKb) & ' KB') & ', over the {RECORD_SIZE_LIMIT_KB} KB a lock on the record "
        "reads into the workflow (Step Functions limits state data to 256 KiB)'",
    )
    return f"({lock}.recordKb < 0 or {lock}.recordKb > {RECORD_SIZE_LIMIT_KB}) ? {too_large} : {lock}.key"


def lock_variable_expression(item: p.LockItem, *, lock_variable: str, must_exist: bool) -> str:
    """JSONata over the record read (``GetItem``): ``$lock`` with ``item`` (the record); with
    ``must_exist``, raises ``Lock.RecordMissing`` when there is no record (only the key and
    the lock's attributes: the stub the acquire wrote)."""
    a = "$states.result.Item"
    with_item = f"$merge([${lock_variable}, {{'item': {record_expression(a)}}}])"
    if not must_exist:
        return with_item
    missing = p.raise_expression(
        ERROR_RECORD_MISSING, f"'no record with ' & {json.dumps(item.key_attribute)} & ' = ' & ${lock_variable}.key"
    )
    return f"$count($keys({record_expression(a)})) <= 1 ? {missing} : {with_item}"


def refused_lock_expression() -> str:
    """JSONata (the record read's Catch: no record, or too large): what frees the lock - owner
    and key from the entry record; no fence (-1 never matches: only my own hold is freed)."""
    return f"{{'key': {p.ENTRY}.key, 'owner': {p.ENTRY}.owner, 'fence': -1}}"


def release_with_update_arguments(*, table_name: str, item: p.LockItem, lock_variable: str) -> dict:
    """The release as one UpdateItem that also applies the work's ``recordUpdate``."""
    lock = "$" + lock_variable
    names = json.dumps(p.RELEASE.attribute_names(item))
    invalid = p.raise_expression(ERROR_INVALID_UPDATE, "'the record update ' & $problem")
    return {
        "TableName": table_name,
        "Key": {item.key_attribute: {"S": p.jsonata(f"{lock}.key")}},
        "UpdateExpression": p.jsonata(
            "( $u := $exists($states.input.recordUpdate) ? $states.input.recordUpdate : {}; "
            "$set := $exists($u.set) ? $u.set : {}; $remove := $exists($u.remove) ? $u.remove : []; "
            "$names := $append($keys($set), $remove); "
            + update_problem_expression(key_attribute=item.key_attribute)
            + f"; $problem != '' ? {invalid} : "
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


def _whole_match_function() -> str:
    """JSONata ``function($s, $pattern)``: the pattern (anchored with ``^``) matches all of ``$s``."""
    return "function($s, $pattern) { $s = $match($s, $pattern)[0].match }"


def _at_function() -> str:
    """JSONata ``function($where, $problem)``: a member's problem with its place prefixed, so
    that a nested one reads ``tags.colors[2]: N "x" is not a number``."""
    return (
        "function($where, $problem) { $problem = '' ? '' : $where "
        "& ($substring($problem, 0, 1) in ['.', '['] ? $problem : ': ' & $problem) }"
    )


def _number_function() -> str:
    """JSONata ``function($n)`` over a DynamoDB number string: ``{'problem': ...}``, or
    ``{'key': ...}`` - the number's value in one spelling (sign, significant digits, exponent
    of the first digit; ``'0'`` for zero), which is how DynamoDB compares a number set's
    members."""
    return (
        "function($n) { $type($n) != 'string' ? {'problem': 'must be a string of a number, got: ' & $type($n)} "
        f": $not($lwWhole($n, {_NUMBER_PATTERN})) ? {{'problem': 'is not a number'}} "
        ": ( $parts := $split($uppercase($n), 'E'); $mantissa := $replace($parts[0], /^[+-]/, ''); "
        "$digits := $replace($mantissa, '.', ''); $trimmed := $replace($digits, /^0+/, ''); "
        "$significant := $replace($trimmed, /0+$/, ''); "
        "$e := $count($parts) > 1 ? $parts[1] : '0'; "
        "$eDigits := $replace($replace($e, /^[+-]/, ''), /^0+/, ''); "
        f"$length($eDigits) > {_MAX_EXPONENT_DIGITS} ? {{'problem': 'has an exponent of more than "
        f"{_MAX_EXPONENT_DIGITS} digits'}} "
        ": $significant = '' ? {'key': '0'} "
        f": $length($significant) > {NUMBER_MAX_DIGITS} "
        f"? {{'problem': 'has more than {NUMBER_MAX_DIGITS} significant digits'}} "
        ": ( $magnitude := $eDigits = '' ? 0 : $number($eDigits); "
        "$adjusted := ($substring($e, 0, 1) = '-' ? -$magnitude : $magnitude) "
        "+ $length($substringBefore($mantissa, '.')) - ($length($digits) - $length($trimmed)) - 1; "
        f"$adjusted > {NUMBER_MAX_EXPONENT} or $adjusted < {NUMBER_MIN_EXPONENT} "
        "? {'problem': 'is out of range (magnitude 1E-130 to 9.9999999999999999999999999999999999999E+125)'} "
        ": {'key': ($substring($n, 0, 1) = '-' ? '-' : '') & $significant & 'E' & $string($adjusted)} ) ) }"
    )


def _base64_function() -> str:
    """JSONata ``function($b)``: ``$b`` is a base64 string (empty: an empty binary)."""
    return (
        "function($b) { $type($b) = 'string' and ($b = '' or "
        f"($length($b) % 4 = 0 and $lwWhole($b, {_BASE64_PATTERN}))) }}"
    )


def _value_function() -> str:
    """JSONata ``function($v, $level)``: what is wrong with AttributeValue ``$v`` at nesting
    ``$level`` (a top-level attribute's value is level 1), or ``''``."""
    types = json.dumps(list(ATTRIBUTE_VALUE_TYPES))
    show = "'\"' & $substring($string($x), 0, 40) & '\"'"
    members = (  # one problem of the members of M or L, or ''
        "$reduce({items}, function($acc, $item, $i) {{ $acc != '' ? $acc : {check} }}, '')"
    )
    m_check = members.format(
        items="$keys($x)",
        check="$item = '' ? 'M has an empty attribute name' : "
        "$lwAt('.' & $item, $lwValue($lookup($x, $item), $level + 1))",
    )
    l_check = members.format(
        items="$x",
        check="$lwAt('[' & $string($i) & ']', $lwValue($item, $level + 1))",
    )
    n_members = (
        "$reduce($x, function($acc, $m) { $acc != '' ? $acc : "
        "( $p := $lwNum($m).problem; $exists($p) ? 'NS member ' & "
        + show.replace("$x", "$m")
        + " & ' ' & $p : '' ) }, '')"
    )
    sets = (
        "$type($x) != 'array' or $count($x) = 0 ? $t & ' must be a non-empty array (DynamoDB has no empty sets)' "
        ": $t = 'SS' ? ($count($filter($x, function($m) { $type($m) != 'string' })) > 0 ? 'SS must hold strings' "
        ": $count($distinct($x)) != $count($x) ? 'SS holds a value twice' : '') "
        f": $t = 'NS' ? ( $bad := {n_members}; $bad != '' ? $bad "
        ": $count($distinct($map($x, function($m) { $lwNum($m).key }))) != $count($x) "
        "? 'NS holds a number twice (DynamoDB compares numbers by value: 1 = 1.0)' : '' ) "
        ": ($count($filter($x, function($m) { $not($lwBase64($m)) })) > 0 ? 'BS must hold base64 strings' "
        ": $count($distinct($x)) != $count($x) ? 'BS holds a value twice' : '')"
    )
    return (
        "function($v, $level) { $type($v) != 'object' "
        "? 'must be an AttributeValue such as {\"S\": \"x\"}, got: ' & $type($v) "
        f": $level > {MAX_NESTING_LEVELS} ? 'nests deeper than {MAX_NESTING_LEVELS} levels' "
        ": ( $k := $keys($v); "
        f"$count($k) != 1 or $not($k in {types}) "
        "? 'must have exactly one data type (S, N, B, BOOL, NULL, M, L, SS, NS or BS), got: ' "
        "& ($count($k) = 0 ? 'none' : $join($k, ', ')) "
        ": ( $t := $k[0]; $x := $lookup($v, $t); "
        "$t = 'S' ? ($type($x) = 'string' ? '' : 'S must be a string') "
        f": $t = 'N' ? ( $p := $lwNum($x).problem; $exists($p) ? 'N ' & {show} & ' ' & $p : '' ) "
        ": $t = 'B' ? ($lwBase64($x) ? '' : 'B must be a base64 string') "
        ": $t = 'BOOL' ? ($type($x) = 'boolean' ? '' : 'BOOL must be true or false') "
        ": $t = 'NULL' ? ($x = true ? '' : 'NULL must be true') "
        f": $t = 'M' ? ($type($x) != 'object' ? 'M must be an object' : $count($keys($x)) = 0 ? '' : {m_check}) "
        f": $t = 'L' ? ($type($x) != 'array' ? 'L must be an array' : $count($x) = 0 ? '' : {l_check}) "
        f": {sets} ) ) }}"
    )


def update_problem_expression(*, key_attribute: str) -> str:
    """JSONata statements over ``$u`` (the update), ``$set``, ``$remove`` and ``$names``
    (set's then remove's names) that assign ``$problem``: what is wrong with the update, or
    ``''``. Everything DynamoDB would refuse in it that can be told without the stored record
    (see the module notes, 4)."""
    key = json.dumps(key_attribute)
    bad_name = (
        f"$type($n) != 'string' or $n = '' or $n = {key} or {_lock_attribute('$n')}"
    )
    twice = "$filter($distinct($names), function($n) { $count($filter($names, function($m) { $m = $n })) > 1 })"
    values = (
        "$count($keys($set)) = 0 ? '' : $reduce($keys($set), function($acc, $n) { $acc != '' ? $acc : "
        "$lwAt($n, $lwValue($lookup($set, $n), 1)) }, '')"
    )
    return (
        f"$lwWhole := {_whole_match_function()}; "
        f"$lwAt := {_at_function()}; "
        f"$lwNum := {_number_function()}; "
        f"$lwBase64 := {_base64_function()}; "
        f"$lwValue := {_value_function()}; "
        "$problem := $type($u) != 'object' ? 'must be an object with set and remove, got: ' & $type($u) "
        ": $type($set) != 'object' ? 'set must be an object, got: ' & $type($set) "
        ": $type($remove) != 'array' ? 'remove must be an array of names, got: ' & $type($remove) "
        f": $count($names) > {MAX_UPDATE_ATTRIBUTES} ? 'must name at most {MAX_UPDATE_ATTRIBUTES} attributes' "
        f": $count($filter($names, function($n) {{ {bad_name} }})) > 0 "
        f"? 'must not name the key, a lock attribute ({PREFIX}*) or a non-string' "
        f": $count({twice}) > 0 ? 'must not name an attribute twice (set and removed, or removed twice; "
        f"DynamoDB refuses overlapping paths): ' & $join({twice}, ', ') "
        f": ( $valueProblem := {values}; $valueProblem = '' ? '' "
        ": 'set values must be DynamoDB AttributeValues: ' & $valueProblem )"
    )


def refused_update_outputs_expression() -> str:
    """JSONata (the Catch of the release with the update, for :data:`REFUSED_WRITE_ERRORS`):
    the error to re-raise once the lock is released without the update. DynamoDB writes all
    of an UpdateItem or nothing, so the refused write left the record - and the lock - as they
    were: a validation error becomes ``Lock.InvalidUpdate`` (with DynamoDB's message), any
    other error stays itself."""
    e, c = "$states.errorOutput.Error", "$states.errorOutput.Cause"
    validation = f"({e} = {json.dumps(REFUSED_WRITE_ERRORS[0])} or $contains({c}, {json.dumps(_VALIDATION_CODE)}))"
    return (
        f"{validation} ? {{'Error': {json.dumps(ERROR_INVALID_UPDATE)}, "
        f"'Cause': {json.dumps(ERROR_INVALID_UPDATE + ': DynamoDB refused the record update: ')} & {c}}} "
        ": $states.errorOutput"
    )
