"""The lock protocol, top to bottom.

Every participant - the Step Functions states built below, the janitor, the Python
``LockClient`` - reads and writes the same lock items with the same expressions, all of
which are spelled exactly once in this module:

1. the lock item (attribute names) and the error names callers can Catch;
2. the DynamoDB writes (acquire, release) as update/condition expression pairs;
3. the JSONata pieces evaluated by the service (key validation, clock, lease, wait time);
4. the ASL states, as pure functions of their inputs, that a construct wires together:
   acquire -> (held: wait loop) -> protected work -> release, and release-then-rethrow on
   every error of the protected work.

Time always comes from ``$millis()`` - the Step Functions service clock - never from a client.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

# --------------------------------------------------------------------------------------
# 1. The lock item and the errors
# --------------------------------------------------------------------------------------

#: Partition key (string) of the lock table: the namespaced lock key, e.g. ``customer#123``.
KEY_ATTRIBUTE = "pk"
#: Holder id: the execution ARN, or a Python client's id. Absent while the lock is free.
OWNER = "owner"
#: Epoch ms of the acquisition (service clock).
ACQUIRED_AT = "acquiredAt"
#: Epoch ms at which the lease ends; past it, any acquirer may take the lock over.
EXPIRES_AT = "expiresAt"
#: Fencing token: incremented by every acquisition of the key, never reset (the item is
#: never deleted, and no TTL is set on it, so the token cannot restart).
FENCE = "fence"
#: Sparse global secondary index on ``owner``: finds every lock an execution still holds.
OWNER_INDEX = "byOwner"

#: Longest accepted lock key, in characters (DynamoDB allows 2048 bytes; 4 bytes a char max).
MAX_KEY_LENGTH = 500
#: Separator between the key namespace and the caller's key.
NAMESPACE_SEPARATOR = "#"

ERROR_INVALID_KEY = "Lock.InvalidKey"
ERROR_TIMEOUT = "Lock.Timeout"
ERROR_LOST = "Lock.Lost"

#: Raised by DynamoDB when the condition of a write is false (lock held / not ours).
#: Optimized integrations (``arn:aws:states:::dynamodb:*``) spell the service "DynamoDB".
CONDITION_FAILED = "DynamoDB.ConditionalCheckFailedException"
#: Errors worth retrying with backoff: the write did not happen, or may be retried safely
#: because both writes below are idempotent for the same owner.
TRANSIENT_ERRORS = (
    "DynamoDB.ProvisionedThroughputExceededException",
    "DynamoDB.ThrottlingException",
    "DynamoDB.RequestLimitExceeded",
    "DynamoDB.InternalServerErrorException",
    "DynamoDB.InternalServerError",
    "DynamoDB.ServiceUnavailableException",
    "DynamoDB.TransactionConflictException",
)
#: Raised by Step Functions when a JSONata expression fails (here: key validation).
QUERY_EVALUATION_ERROR = "States.QueryEvaluationError"

# --------------------------------------------------------------------------------------
# 2. The writes
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LockWrite:
    """One conditional UpdateItem on a lock item.

    Placeholders: ``#name`` for attribute names (all lock attributes go through names),
    ``:value`` for values. :meth:`attribute_names` and :meth:`value_names` derive exactly
    the placeholders used, because DynamoDB rejects unused ones.
    """

    update: str
    condition: str

    def attribute_names(self) -> dict[str, str]:
        found = re.findall(r"#(\w+)", f"{self.update} {self.condition}")
        return {f"#{name}": name for name in dict.fromkeys(found)}

    def value_names(self) -> tuple[str, ...]:
        found = re.findall(r":(\w+)", f"{self.update} {self.condition}")
        return tuple(f":{name}" for name in dict.fromkeys(found))


#: Acquire: take the lock when it is free, already mine (a retried acquire whose first
#: try succeeded must not deadlock itself), held by ``:stale`` (a holder proven dead by the
#: liveness check; ``:stale`` = ``:me`` when no holder is known dead), or when the lease has
#: expired. Every acquisition bumps the fence.
#: Values: ``:me`` (S), ``:stale`` (S), ``:now`` (N, epoch ms), ``:expiresAt`` (N), ``:one`` (N 1).
ACQUIRE = LockWrite(
    update=(
        f"SET #{OWNER} = :me, #{ACQUIRED_AT} = :now, #{EXPIRES_AT} = :expiresAt "
        f"ADD #{FENCE} :one"
    ),
    condition=(
        f"attribute_not_exists(#{OWNER}) OR #{OWNER} IN (:me, :stale) "
        f"OR #{EXPIRES_AT} < :now"
    ),
)

#: Release: free the lock, keep the item and its fence. Allowed when I hold it, or when
#: nobody holds it and the fence is still the one I got (my earlier release succeeded but
#: its response was lost: no acquisition happened since). Anything else means the lock was
#: taken over while I worked: never remove another holder's lock.
#: Values: ``:me`` (S), ``:fence`` (N).
RELEASE = LockWrite(
    update=f"REMOVE #{OWNER}, #{ACQUIRED_AT}, #{EXPIRES_AT}",
    condition=(
        f"#{OWNER} = :me OR (attribute_not_exists(#{OWNER}) AND #{FENCE} = :fence)"
    ),
)


#: Refresh: extend a lease while still its owner (Python clients; a workflow's lease covers
#: its whole run). Values: ``:me`` (S), ``:expiresAt`` (N).
REFRESH = LockWrite(
    update=f"SET #{EXPIRES_AT} = :expiresAt",
    condition=f"#{OWNER} = :me",
)


#: Key condition of the owner index: every lock ``:owner`` holds (janitor).
LOCKS_OF_OWNER = f"#{OWNER} = :owner"
#: A fence no acquisition ever had: a release with it matches only ``#owner = :me``
#: (the janitor releases on behalf of an ended execution, not as a retried release).
NO_FENCE = "-1"


def lock_item_key(table_key: str) -> dict[str, dict[str, str]]:
    """The DynamoDB ``Key`` of a lock item (``table_key`` may be a JSONata template)."""
    return {KEY_ATTRIBUTE: {"S": table_key}}


def namespaced(namespace: str, key: str) -> str:
    """The stored key for ``key`` in ``namespace`` (Python callers; JSONata: key_expression)."""
    return f"{namespace}{NAMESPACE_SEPARATOR}{key}" if namespace else key


# --------------------------------------------------------------------------------------
# 3. JSONata pieces (evaluated by the Step Functions service)
# --------------------------------------------------------------------------------------


def jsonata(expression: str) -> str:
    """Wrap a JSONata expression as a Step Functions field value."""
    return "{% " + expression + " %}"


def unwrap_jsonata(template: str) -> str:
    """The expression inside ``{% ... %}``; raises ValueError for anything else."""
    match = re.fullmatch(r"\s*\{%(.*)%\}\s*", template, flags=re.DOTALL)
    if not match or not match.group(1).strip():
        raise ValueError(
            "`lock_key` must be a JSONata template such as "
            f"'{{% $states.input.detail.customerId %}}', got: {template!r}"
        )
    return match.group(1).strip()


def key_expression(user_expression: str, namespace: str) -> str:
    """The namespaced lock key, or ``$error`` naming what is wrong with the caller's key.

    Runs inside the acquire state's arguments, so a bad key fails before any DynamoDB call.
    """
    prefix = namespace + NAMESPACE_SEPARATOR if namespace else ""
    return (
        "( $lockKey := (" + user_expression + "); "
        "$problem := $not($exists($lockKey)) ? 'is missing' "
        ": $type($lockKey) != 'string' ? 'must be a string, got: ' & $type($lockKey) "
        ": $length($lockKey) = 0 ? 'must not be empty, got an empty string' "
        f": $length($lockKey) > {MAX_KEY_LENGTH} "
        f"? 'must be at most {MAX_KEY_LENGTH} characters, got: ' "
        "& $string($length($lockKey)) & ' characters' : ''; "
        f"$problem = '' ? {_jsonata_string(prefix)} & $lockKey "
        f": $error('{ERROR_INVALID_KEY}: the lock key ' & $problem) )"
    )


def key_problem(key: Any) -> str:
    """What is wrong with a Python caller's key ("" if nothing): the rules of key_expression."""
    if key is None:
        return "is missing"
    if not isinstance(key, str):
        return f"must be a string, got: {type(key).__name__}"
    if not key:
        return "must not be empty, got an empty string"
    if len(key) > MAX_KEY_LENGTH:
        return f"must be at most {MAX_KEY_LENGTH} characters, got: {len(key)} characters"
    return ""


def lease_end_expression(lease_ms: int) -> str:
    """Epoch ms at which a lease taken now ends, as a DynamoDB number string."""
    return f"$string($millis() + {int(lease_ms)})"


NOW_EXPRESSION = "$string($millis())"


@dataclass(frozen=True)
class WaitPolicy:
    """How a waiter polls a held lock (all times in seconds).

    A waiter polls in rounds. Within a round the acquire state itself retries the refused
    write ``retries_per_round`` times (a Retry on the condition failure: one state transition
    per poll, waits of ``first_interval * backoff_rate**k`` capped at ``max_interval`` and,
    with jitter, drawn from [0, that] so waiters never move in lock-step and the first poll
    after a release comes soon). Between rounds the ``Held?`` choice checks the caller's
    deadline (and now and then whether the holder still runs) and a Wait state pauses for the
    round's nominal wait - with jitter drawn from [half of it, all of it], whole seconds, at
    least 1 - which bounds the loop's worst-case history.
    """

    first_interval: int = 2
    backoff_rate: float = 1.5
    max_interval: int = 5
    jitter: bool = True
    retries_per_round: int = 8

    def retries_for(self, max_wait_s: float) -> int:
        """Retries per round for ``max_wait_s``: a round's nominal length stays within half of it."""
        retries, total = 0, 0.0
        while retries < self.retries_per_round:
            total += self.nominal_wait(retries + 1)
            if total > max_wait_s / 2:
                break
            retries += 1
        return retries

    @property
    def growth_steps(self) -> int:
        """Backoff steps after which the wait is at its cap (bounds the exponent: no overflow)."""
        if self.backoff_rate <= 1 or self.max_interval <= self.first_interval:
            return 0
        return math.ceil(math.log(self.max_interval / self.first_interval, self.backoff_rate))

    def nominal_wait(self, poll: int) -> float:
        steps = min(poll - 1, self.growth_steps)
        return min(self.max_interval, self.first_interval * self.backoff_rate**steps)

    def shortest_wait(self, poll: int) -> int:
        """The smallest whole-second wait the expression can produce for ``poll``."""
        nominal = self.nominal_wait(poll)
        return max(1, math.floor(nominal / 2) if self.jitter else round(nominal))

    def seconds_expression(self, rounds: str, remaining_ms: str) -> str:
        """JSONata: seconds to wait before the next acquire attempt.

        ``rounds`` evaluates to the number of rounds so far (>= 1) and
        ``remaining_ms`` to the time left until the caller's deadline.
        """
        nominal = (
            f"$min([{self.max_interval}, "
            f"{self.first_interval} * $power({self.backoff_rate}, "
            f"$min([{rounds} - 1, {self.growth_steps}]))])"
        )
        drawn = "($n / 2 + $random() * $n / 2)" if self.jitter else "$n"
        return (
            f"( $n := {nominal}; "
            f"$max([1, $min([$round({drawn}), $ceil(({remaining_ms}) / 1000)])]) )"
        )


#: Events a Standard execution may record before Step Functions stops it.
HISTORY_EVENT_LIMIT = 25_000
#: Share of that limit the wait loop may use; the rest is left to the protected work.
WAIT_LOOP_EVENT_BUDGET = 20_000
#: History events of one round besides its attempts: acquire entered/exited, the Held?
#: choice entered/exited, the wait entered/exited.
EVENTS_PER_ROUND = 6
#: History events of one acquire attempt: scheduled, started, failed.
EVENTS_PER_ATTEMPT = 3


def worst_case_rounds(policy: WaitPolicy, max_wait_s: float) -> int:
    """Most rounds a waiter can make before ``max_wait_s`` runs out.

    Jittered retries may take next to no time, so only each round's Wait (at its shortest)
    is counted as time passing.
    """
    if max_wait_s <= 0:
        return 0
    elapsed, rounds = 0.0, 0
    while elapsed < max_wait_s:
        rounds += 1
        elapsed += policy.shortest_wait(rounds)
    return rounds + 1  # the round run at the deadline


def worst_case_wait_events(policy: WaitPolicy, max_wait_s: float) -> int:
    attempts = policy.retries_for(max_wait_s) + 1
    return worst_case_rounds(policy, max_wait_s) * (EVENTS_PER_ROUND + EVENTS_PER_ATTEMPT * attempts)


def _jsonata_string(value: str) -> str:
    return json.dumps(value)  # JSONata string literals take JSON's escapes


# --------------------------------------------------------------------------------------
# 4. ASL states (JSONata query language), pure functions of their inputs
# --------------------------------------------------------------------------------------

def _update_item(key: str, write: LockWrite, values: Mapping[str, Any]) -> dict:
    """UpdateItem arguments (all but the table) in DynamoDB JSON; JSONata templates allowed."""
    missing = set(write.value_names()) - set(values)
    extra = set(values) - set(write.value_names())
    if missing or extra:  # a programming error in this module, caught by the unit tests
        raise AssertionError(f"values for {write}: missing {missing}, extra {extra}")
    return {
        "Key": lock_item_key(key),
        "UpdateExpression": write.update,
        "ConditionExpression": write.condition,
        "ExpressionAttributeNames": write.attribute_names(),
        "ExpressionAttributeValues": dict(values),
    }


def acquire_arguments(
    *, key_jsonata: str, lease_ms: int, stale_owner_jsonata: str = "$states.context.Execution.Id"
) -> dict:
    """The acquire UpdateItem of an execution (``ReturnValues: ALL_NEW`` gives the fence)."""
    return {
        **_update_item(
            jsonata(key_jsonata),
            ACQUIRE,
            {
                ":me": {"S": jsonata("$states.context.Execution.Id")},
                ":stale": {"S": jsonata(stale_owner_jsonata)},
                ":now": {"N": jsonata(NOW_EXPRESSION)},
                ":expiresAt": {"N": jsonata(lease_end_expression(lease_ms))},
                ":one": {"N": "1"},
            },
        ),
        "ReturnValues": "ALL_NEW",
    }


def lock_variable_expression() -> str:
    """JSONata over an acquire result: the ``$lock`` record the protected work reads."""
    a = "$states.result.Attributes"
    return (
        "{"
        f"'key': {a}.{KEY_ATTRIBUTE}.S, "
        f"'owner': {a}.{OWNER}.S, "
        f"'fence': $number({a}.{FENCE}.N), "
        f"'acquiredAt': $number({a}.{ACQUIRED_AT}.N), "
        f"'expiresAt': $number({a}.{EXPIRES_AT}.N)"
        "}"
    )


def release_arguments(*, lock_variable: str) -> dict:
    """The release UpdateItem for the lock held in ``$<lock_variable>``."""
    lock = "$" + lock_variable
    return _update_item(
        jsonata(f"{lock}.key"),
        RELEASE,
        {
            ":me": {"S": jsonata(f"{lock}.owner")},
            ":fence": {"N": jsonata(f"$string({lock}.fence)")},
        },
    )


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


def stale_owner_expression(wait_variable: str) -> str:
    """JSONata for ``:stale``: a holder proven finished by the liveness check, else me."""
    w = "$" + wait_variable
    return f"$type({w}.stale) = 'string' ? {w}.stale : $states.context.Execution.Id"


def holder_expression() -> str:
    """JSONata over a GetItem of the lock item: its current owner, or "" when free."""
    return f"( $h := $states.result.Item.{OWNER}.S; $exists($h) ? $h : '' )"


def holder_is_execution_expression(holder_variable: str) -> str:
    """JSONata (Choice condition): the holder is a Step Functions execution (not a client)."""
    return f"$contains(${holder_variable}, ':states:') and $contains(${holder_variable}, ':execution:')"


def after_liveness_check_expression(wait_variable: str, holder_variable: str) -> str:
    """JSONata over a DescribeExecution of the holder: mark it stale unless still RUNNING."""
    w = "$" + wait_variable
    return (
        f"$merge([{w}, {{'stale': $states.result.Status = 'RUNNING' ? null : ${holder_variable}}}])"
    )


def janitor_release_arguments(*, key_jsonata: str, owner_jsonata: str) -> dict:
    """The release UpdateItem the janitor makes for a lock still held by an ended execution."""
    return _update_item(
        jsonata(key_jsonata),
        RELEASE,
        {":me": {"S": jsonata(owner_jsonata)}, ":fence": {"N": NO_FENCE}},
    )


#: Retry for transient DynamoDB errors on acquire and release (both writes are idempotent).
TRANSIENT_RETRY = {
    "errors": list(TRANSIENT_ERRORS),
    "interval_s": 1,
    "backoff_rate": 2.0,
    "max_attempts": 6,
    "max_delay_s": 8,
}
