"""JSONata pieces evaluated by the Step Functions service: the section's entry (key validation,
the new owner, re-entrancy), the clock, the lease, raising an error. Time always comes from
``$millis()`` - the Step Functions service clock - never from a client.
"""

from __future__ import annotations

import json
import re
from typing import Mapping, Sequence

from locked_workflow.state_machines.errors import ERROR_INVALID_KEY, SIGNAL_REENTERED
from locked_workflow.state_machines.lock_item import MAX_KEY_BYTES, NAMESPACE_SEPARATOR, OWNER_SEPARATOR, REQUESTED_AT, too_long


def jsonata(expression: str) -> str:
    """Wrap a JSONata expression as a Step Functions field value."""
    return "{% " + expression + " %}"


def unwrap_jsonata(template: str, prop: str = "key") -> str:
    """The expression inside ``{% ... %}``; raises ValueError for anything else."""
    match = re.fullmatch(r"\s*\{%(.*)%\}\s*", template if isinstance(template, str) else "", flags=re.DOTALL)
    if not match or not match.group(1).strip():
        example = "[$states.input.from, $states.input.to]" if prop == "keys" else "$states.input.detail.customerId"
        raise ValueError(
            f"`{prop}` must be a JSONata template such as "
            f"'{{% {example} %}}', got: {template!r}"
        )
    return match.group(1).strip()


def jsonata_string(value: str) -> str:
    return json.dumps(value)  # JSONata string literals take JSON's escapes


def utf8_bytes(expression: str) -> str:
    """JSONata: UTF-8 bytes of a string. ``$encodeUrlComponent`` writes each byte it escapes
    as ``%XX`` and leaves the others (one byte each): bytes = length - 2 x (number of %)."""
    return (
        f"( $e := $encodeUrlComponent({expression}); "
        "2 * $length($replace($e, '%', '')) - $length($e) )"
    )


def key_problem_expression(key: str, namespace: str, reserve_bytes: int = 0, namespaced: bool = True) -> str:
    """JSONata: what is wrong with the key ``key`` evaluates to ('' if nothing)."""
    prefix = namespace + NAMESPACE_SEPARATOR if namespaced else ""
    size = utf8_bytes(f"{jsonata_string(prefix)} & {key}")
    return (
        f"($not($exists({key})) ? 'is missing' "
        f": $type({key}) != 'string' ? 'must be a string, got: ' & $type({key}) "
        f": $length({key}) = 0 ? 'must not be empty, got an empty string' "
        f": ( $size := {size}; $size > {MAX_KEY_BYTES - reserve_bytes} "
        f"? {jsonata_string(too_long(reserve_bytes, namespaced))} & $string($size) & ' bytes' : '' ))"
    )


def key_expression(user_expression: str, namespace: str, reserve_bytes: int = 0, namespaced: bool = True) -> str:
    """The stored key, or ``$error`` naming what is wrong with the caller's key.

    Runs in the section's entry, so a bad key fails before any DynamoDB call.
    ``reserve_bytes``: bytes a lock kind adds to the stored key (a semaphore's slot mark);
    ``namespaced=False``: the key is stored as is (a lock on the record with that key).
    """
    prefix = namespace + NAMESPACE_SEPARATOR if namespaced else ""
    invalid = raise_expression(ERROR_INVALID_KEY, "'the lock key ' & $problem")
    return (
        "( $lockKey := (" + user_expression + "); "
        f"$problem := {key_problem_expression('$lockKey', namespace, reserve_bytes, namespaced)}; "
        f"$problem = '' ? {jsonata_string(prefix)} & $lockKey "
        f": {invalid} )"
    )


def raise_expression(error_name: str, message_expression: str = "''") -> str:
    """JSONata ``$error`` whose message starts with ``error_name``, spelled so that the name
    never appears *contiguously* in the expression's own text: Step Functions quotes the
    failing expression in the cause, and a Choice reading the cause must find the name only
    when this error was raised."""
    head, _, tail = error_name.partition(".")
    return f"$error('{head}' & '.{tail}: ' & {message_expression})"


REDRIVE_COUNT_EXPRESSION = (
    "($exists($states.context.Execution.RedriveCount) ? $states.context.Execution.RedriveCount : 0)"
)


def lease_end_expression(lease_ms: int) -> str:
    """Epoch ms at which a lease taken now ends, as a DynamoDB number string."""
    return f"$string($millis() + {int(lease_ms)})"


NOW_EXPRESSION = "$string($millis())"
#: The owner of a new acquisition (drawn once, when the section is entered).
NEW_OWNER_EXPRESSION = f"$states.context.Execution.Id & '{OWNER_SEPARATOR}' & $uuid()"


def holds_key_expression(variable: str, key: str = "$key") -> str:
    """JSONata: the lock record ``$<variable>`` of an enclosing section holds the mutex on
    ``key`` (a stored key): a single-key lock on it, or a multi-key lock including it."""
    v = "$" + variable
    return f"($exists({v}) and ({v}.key = {key} or {key} in {v}.keys))"


def section_entry_expression(
    *,
    key_expression_: str,
    enclosing_lock_variables: Sequence[str] = (),
    grace_ms: int = 0,
    key_field: str = "key",
    holds_same_lock=holds_key_expression,
    extra_fields: Mapping[str, str] | None = None,
) -> str:
    """JSONata for the Arguments of the section's Parallel: what its branch starts from.

    1. No redrive gate. ``RedriveExecution`` reruns only the unsuccessful step of a failed
       branch, never states that succeeded
       (https://docs.aws.amazon.com/step-functions/latest/dg/redrive-executions.html), and the
       entry must not undo that when a redriven Parallel evaluates its Arguments again
       (undocumented): a gate here that sent every redriven section to acquire again would run
       again work that had succeeded - a lock on a record would write its update twice. A
       resumed step is safe without it: the work's tasks refuse to resume
       (:func:`resumed_guard_expression`, then the section acquires again), and the lock's own
       states are owner-conditioned writes (a resumed release:
       :func:`released_before_takeover_expression`).
    2. The stored key (``Lock.InvalidKey`` for a bad one, before any DynamoDB call), as
       ``$key`` under ``key_field`` (a multi-key lock: the stored keys, under ``keys``).
    3. The new acquisition's owner.
    4. Re-entrancy: when an enclosing section (nearest first) already holds this lock
       (``holds_same_lock(variable)``, a JSONata condition over ``$key``), its ``$lock``
       record - the nested section then passes through without a write.
    5. The stop grace of the section's work (ms), known only once the work is rendered.
       And ``requestedAt`` (:data:`REQUESTED_AT`): now, the start of this acquisition's wait.
    6. ``extra_fields`` of the lock kind (name: JSONata), e.g. a semaphore's first slot.

    The branch gets ``{input, <key_field>, owner, grace[, reentered], ...}``; the work gets
    ``input`` back.
    """
    reentered = "{}"
    for variable in reversed(list(enclosing_lock_variables)):
        reentered = f"({holds_same_lock(variable)} ? {{'reentered': ${variable}}} : {reentered})"
    extra = "".join(f", {jsonata_string(k)}: {v}" for k, v in (extra_fields or {}).items())
    return (
        f"( $key := {key_expression_}; "
        f"$merge([{{'input': $states.input, {jsonata_string(key_field)}: $key, "
        f"'owner': {NEW_OWNER_EXPRESSION}, 'grace': {int(grace_ms)}, "
        f"{jsonata_string(REQUESTED_AT)}: $millis(){extra}}}, {reentered}]) )"
    )


def reentered_or(value_expression: str, *, reentered_expression: str) -> str:
    """JSONata: ``value_expression``, or the re-entrancy signal when ``reentered_expression``
    is true (a nested section holding its enclosing section's lock writes nothing)."""
    return (
        f"{reentered_expression} ? {raise_expression(SIGNAL_REENTERED)} : {value_expression}"
    )


def message_of_expression(error_name: str) -> str:
    """JSONata (after the section's entry failed): the ``error_name: ...`` message raised by
    :func:`raise_expression`, without the text Step Functions wraps around it."""
    marker = jsonata_string(error_name + ": ")
    c = "$states.input.Cause"
    return f"$contains({c}, {marker}) ? {marker} & $substringAfter({c}, {marker}) : {c}"


def redrives_after_restart_expression() -> str:
    """JSONata (the Choice that sends a section whose work refused to resume back to its entry):
    the redrive count the section has started over for."""
    return REDRIVE_COUNT_EXPRESSION


def entry_error_is(signal_or_error: str) -> str:
    """JSONata (Choice after the section's entry failed): the cause names ``signal_or_error``."""
    return f"$contains($states.input.Cause, {jsonata_string(signal_or_error)})"


#: Inside the section's branch, ``$states.input`` of the lock states is the entry record.
ENTRY = "$states.input"
