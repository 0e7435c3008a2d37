"""The lock protocol, top to bottom.

Every participant - the Step Functions states built below, the janitor, the Python
``LockClient`` - reads and writes the same lock items with the same expressions, all of
which are spelled exactly once in this module:

1. the lock item (attribute names), the stored key, the owner of one acquisition, and the
   error names callers can Catch;
2. the DynamoDB writes (acquire, release, refresh, retire) as update/condition pairs;
3. the JSONata pieces evaluated by the service (section entry, key validation, clock, lease,
   wait time, liveness, re-raising errors);
4. the ASL arguments, as pure functions of their inputs, that a construct wires together:
   enter the section -> acquire -> (held: wait loop) -> protected work -> release, and
   release-then-rethrow on every error of the protected work.

Time always comes from ``$millis()`` - the Step Functions service clock - never from a client.

Ownership is per *acquisition*, not per execution: Map iterations, Parallel branches and
nested sections of one execution, and the two runs of an asynchronous Express execution that
Step Functions may run twice, are all different holders. The owner of an acquisition made by
a state machine is ``<execution ARN>#<uuid>``: the uuid is drawn once when the section is
entered, so the acquire's own retries (a lost response, a poll) keep it, and the execution
ARN before the ``#`` lets the janitor and the liveness check find the execution.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

# --------------------------------------------------------------------------------------
# 1. The lock item, the stored key, the owner, the errors
# --------------------------------------------------------------------------------------

#: Partition key (string) of the lock table: the stored key ``<namespace>#<key>``.
KEY_ATTRIBUTE = "pk"
#: Holder of the current acquisition (see :func:`owner_execution`). Absent while free.
OWNER = "owner"
#: Epoch ms of the acquisition (service clock).
ACQUIRED_AT = "acquiredAt"
#: Epoch ms at which the lease ends; past it, any acquirer may take the lock over.
EXPIRES_AT = "expiresAt"
#: Fencing token: incremented by every acquisition of the key, never reset (the item is
#: never deleted, and no TTL is set on it, so the token cannot restart).
FENCE = "fence"
#: Stop grace of the acquisition (ms): after its execution ended without releasing, the lock
#: stays held this long, so work it started and Step Functions cannot stop (a Lambda
#: invocation, an activity or callback worker) is over before anyone else enters.
GRACE = "grace"
#: Epoch ms at which the acquisition was requested: when the section was entered (service
#: clock). Not stored on the lock item: it travels in the section's entry record and the
#: ``$lock`` record, so the acquire's log line (its assigned ``$lock``) carries the wait,
#: ``acquiredAt - requestedAt``, on one line.
REQUESTED_AT = "requestedAt"

#: Presence of a holder's branch (a callback task's token, see :data:`PRESENT`): Step Functions
#: can cancel the branch that holds a lock while its execution runs on - a sibling branch or
#: iteration failed and the user caught the Parallel's or Map's failure - without running any
#: Catch and without any event; the closed token is how a waiter learns it.
PRESENCE = "presence"
#: ``acquiredAt`` of the acquisition whose branch registered :data:`PRESENCE`.
PRESENCE_OF = "presenceOf"
#: Epoch ms at which :data:`PRESENCE` was written (service clock).
PRESENCE_AT = "presenceAt"
#: ``acquiredAt`` of the acquisition whose work is over (no token may be registered for it any
#: more, and a token registered for it is no longer probed).
PRESENCE_CLOSED = "presenceClosed"

#: Separator between the namespace and the caller's key. Namespaces cannot contain it, so
#: the stored key ``<namespace>#<key>`` is unambiguous (``#a#b`` is namespace "" + key
#: ``a#b``; ``a#b`` is namespace ``a`` + key ``b``).
NAMESPACE_SEPARATOR = "#"
#: Namespaces: at most 64 of these characters (never the separator).
NAMESPACE_PATTERN = re.compile(r"[A-Za-z0-9_.:/=+@-]{0,64}")
#: DynamoDB's limit on a partition key: 2048 bytes of UTF-8, for the *stored* key.
MAX_KEY_BYTES = 2048
#: Separator between the execution ARN (or a client's id) and the acquisition's uuid in an
#: owner. Execution and state machine names cannot contain ``#``.
OWNER_SEPARATOR = "#"

ERROR_INVALID_KEY = "Lock.InvalidKey"
ERROR_TIMEOUT = "Lock.Timeout"
ERROR_LOST = "Lock.Lost"
#: A reader refused because the key already has as many readers as the read/write lock allows
#: (``shared_protocol.MAX_READERS``): raised before any write, so the lock item never grows
#: past a size whose ``ALL_NEW`` answer Step Functions could not return.
ERROR_TOO_MANY_READERS = "Lock.TooManyReaders"
#: The work branch's DEPART found the lock taken over (caught by the hold, which fails
#: ``Lock.Lost``).
SIGNAL_LOST_IN_HOLD = "Lock.LostInHold"
#: The presence branch could neither register its token nor rule one out: the hold ends
#: (its work is cancelled, and may still run: the acquisition is retired, not released).
ERROR_PRESENCE_UNKNOWN = "Lock.PresenceUnknown"
#: Prefix given to a ``States.*`` error of the protected work when the section re-raises it
#: (a Fail state may not use the reserved ``States.`` prefix): ``States.Timeout`` of the work
#: leaves the section as ``Lock.States.Timeout``; the cause is JSON ``{"Error", "Cause"}``
#: with the original pair.
RERAISED_STATES_PREFIX = "Lock."
#: Raised (inside the acquire/release arguments) by a section nested in a section holding the
#: same key: re-entrant pass-through, no write.
SIGNAL_REENTERED = "Lock.Reentered"
#: Raised by a task of the protected work (inside its Arguments, before it runs) when the
#: execution was redriven after the section acquired: Step Functions resumes a redriven
#: Parallel's branch at its unsuccessful step, so a task of the work can resume without the
#: section's acquire running again. The section leaves with this error, and the section's
#: own Catch enters it again with a new acquisition.
SIGNAL_RESUMED = "Lock.Resumed"
#: Field of the ``$lock`` record: ``$states.context.Execution.RedriveCount`` when the
#: acquisition was made (its *generation*). The work runs only while the execution's redrive
#: count still equals it: see :func:`resumed_guard_expression`.
GENERATION = "redriveCount"

#: Raised by DynamoDB when the condition of a write is false (lock held / not ours).
#: Optimized integrations (``arn:aws:states:::dynamodb:*``) spell the service "DynamoDB".
CONDITION_FAILED = "DynamoDB.ConditionalCheckFailedException"
#: The same, as an ``aws-sdk:dynamodb`` integration names it.
SDK_CONDITION_FAILED = "DynamoDb.ConditionalCheckFailedException"
#: DynamoDB's refusal of a write on an item that an ongoing transaction touches (a read/write
#: waiter's park checks the lock item in one; a multi-key hold writes several): nothing was
#: written; try again. botocore retries it in neither retry mode, so a Python client must
#: ("Transaction conflict handling in DynamoDB", developer guide, transaction-apis.html).
TRANSACTION_CONFLICT = "TransactionConflictException"
#: Errors worth retrying with backoff: the write did not happen, or may be retried safely
#: because the writes below are idempotent for the same owner.
TRANSIENT_ERRORS = (
    "DynamoDB.ProvisionedThroughputExceededException",
    "DynamoDB.ThrottlingException",
    "DynamoDB.RequestLimitExceeded",
    "DynamoDB.InternalServerErrorException",
    "DynamoDB.InternalServerError",
    "DynamoDB.ServiceUnavailableException",
    f"DynamoDB.{TRANSACTION_CONFLICT}",
)
#: Raised by Step Functions when a JSONata expression fails (key validation, the signals).
QUERY_EVALUATION_ERROR = "States.QueryEvaluationError"
#: Execution statuses of a holder that may still run: not stale.
ALIVE_STATUSES = ("RUNNING", "PENDING_REDRIVE")


def namespaced(namespace: str, key: str) -> str:
    """The stored key for ``key`` in ``namespace`` (Python callers; JSONata: key_expression)."""
    return f"{namespace}{NAMESPACE_SEPARATOR}{key}"


def key_in_namespaces_scan(key: str) -> dict:
    """Scan arguments of the lock items whose stored key may be ``key`` in some namespace: those
    that contain ``#<key>`` (DynamoDB has no ``ends_with``; the caller keeps the items whose
    stored key parses to ``key``)."""
    return {
        "FilterExpression": "contains(#key, :suffix)",
        "ExpressionAttributeNames": {"#key": KEY_ATTRIBUTE},
        "ExpressionAttributeValues": {":suffix": {"S": f"{NAMESPACE_SEPARATOR}{key}"}},
    }


#: Metadata of a ``LockTable``'s ``AWS::DynamoDB::Table`` resource, by which the CLI's
#: ``--stack`` finds it in the stack's template (whatever its construct id).
LOCK_TABLE_METADATA = "locked-workflow:lock-table"


def namespace_problem(namespace: Any) -> str:
    """What is wrong with a namespace ("" if nothing): the same rule for constructs and clients."""
    if not isinstance(namespace, str) or not NAMESPACE_PATTERN.fullmatch(namespace):
        return (
            "must be at most 64 letters, digits or _.:/=+@- characters (never "
            f"'{NAMESPACE_SEPARATOR}'), got: {namespace!r}"
        )
    return ""


def key_problem(key: Any, namespace: str = "", reserve_bytes: int = 0) -> str:
    """What is wrong with a Python caller's key ("" if nothing): the rules of key_expression.
    ``reserve_bytes``: bytes a lock kind adds to the stored key (a semaphore's slot mark)."""
    if key is None:
        return "is missing"
    if not isinstance(key, str):
        return f"must be a string, got: {type(key).__name__}"
    if not key:
        return "must not be empty, got an empty string"
    try:
        size = len(namespaced(namespace, key).encode("utf-8"))
    except UnicodeEncodeError:
        return "must be valid Unicode text, got: a lone surrogate"
    if size > MAX_KEY_BYTES - reserve_bytes:
        return _too_long(size, reserve_bytes)
    return ""


#: What a key over the limit is told (the byte count and " bytes" follow), Python and JSONata.
def too_long(reserve_bytes: int = 0, namespaced: bool = True) -> str:
    """What a key over the limit is told (the byte count and " bytes" follow), Python and JSONata."""
    whole = " with its namespace prefix" if namespaced else ""
    return f"must be at most {MAX_KEY_BYTES - reserve_bytes} bytes of UTF-8{whole}, got: "



def _too_long(size: Any, reserve_bytes: int = 0) -> str:
    return f"{too_long(reserve_bytes)}{size} bytes"


def owner_execution(owner: str | None) -> str | None:
    """The execution ARN of an owner that is a state machine's acquisition, else None."""
    if not owner or ":execution:" not in owner:
        return None
    return owner.split(OWNER_SEPARATOR, 1)[0]


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

    def attribute_names(self, item: "LockItem | None" = None) -> dict[str, str]:
        """``#name`` -> the attribute it stands for on ``item`` (default: the lock table's)."""
        found = re.findall(r"#(\w+)", f"{self.update} {self.condition}")
        item = item or LOCK_TABLE_ITEM
        return {f"#{name}": item.attribute(name) for name in dict.fromkeys(found)}

    def value_names(self) -> tuple[str, ...]:
        found = re.findall(r":(\w+)", f"{self.update} {self.condition}")
        return tuple(f":{name}" for name in dict.fromkeys(found))


#: Acquire: take the lock when it is free, already mine (a retried acquire whose first try
#: succeeded must not deadlock itself: ``:me`` is the acquisition's owner, the same on every
#: retry), held by ``:stale`` (a holder the liveness check proved ended longer than its grace
#: ago; ``:stale`` = ``:me`` when none is known), or when the lease has ended. Every
#: acquisition bumps the fence and records its stop grace.
#: Values: ``:me`` (S), ``:stale`` (S), ``:now`` (N, epoch ms), ``:expiresAt`` (N),
#: ``:grace`` (N, ms), ``:one`` (N 1).
ACQUIRE = LockWrite(
    update=(
        f"SET #{OWNER} = :me, #{ACQUIRED_AT} = :now, #{EXPIRES_AT} = :expiresAt, "
        f"#{GRACE} = :grace ADD #{FENCE} :one"
    ),
    condition=(
        f"attribute_not_exists(#{OWNER}) OR #{OWNER} IN (:me, :stale) "
        f"OR #{EXPIRES_AT} < :now"
    ),
)

#: Release: free the lock, keep the item and its fence. Allowed when I hold it, or when
#: nobody holds it and the fence is still the one I got (my earlier release succeeded but
#: its response was lost: no acquisition happened since). Anything else means the lock is
#: not mine: never remove another holder's lock.
#: Values: ``:me`` (S), ``:fence`` (N).
RELEASE = LockWrite(
    update=f"REMOVE #{OWNER}, #{ACQUIRED_AT}, #{EXPIRES_AT}, #{GRACE}",
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


def _set_also(update: str, *actions: str) -> str:
    """``update`` (an update expression that starts with its SET clause) with more SET actions."""
    assert update.startswith("SET "), update
    head, separator, rest = update.partition(" ADD ")
    return f"{head}, {', '.join(actions)}{separator}{rest}"


#: The clients' writes. A ``LockClient`` has no access to the service clock, so it never
#: judges ``expiresAt`` against a clock of its own (a client whose clock ran ahead would take
#: live locks over): it takes a held lock over only after it watched the lock item stay
#: unchanged - same owner, fence and ``expiresAt`` - for that acquisition's lease, measured on
#: its own monotonic clock (as AWS's DynamoDB lock client does), and conditions the takeover on
#: exactly what it watched. The lease to watch is :data:`CLIENT_LEASE` when the acquisition is a
#: client's, else ``expiresAt - acquiredAt`` (both stamped by one writer, so its clock's offset
#: cancels out; never shorter than what is left of the lease).

#: A client's lease of the current acquisition (a map ``{owner: S, ms: N}``), written by the
#: client's acquire and refresh: how long a client waiter watches the lock unchanged before it
#: takes it over. A renewal restarts the lease, so ``expiresAt - acquiredAt`` would grow with
#: every one. It belongs to the acquisition whose owner it names: stale (ignored) once another
#: acquisition - a workflow's - took the lock.
CLIENT_LEASE = "clientLease"

#: Client acquire: the lock is free, or already mine (a retried acquire whose first try
#: succeeded). ACQUIRE's update, plus :data:`CLIENT_LEASE`.
#: Values: ACQUIRE's but ``:stale``, plus ``:clientLease`` (M ``{owner: :me, ms}``).
CLIENT_ACQUIRE = LockWrite(
    update=_set_also(ACQUIRE.update, f"#{CLIENT_LEASE} = :clientLease"),
    condition=f"attribute_not_exists(#{OWNER}) OR #{OWNER} = :me",
)

#: Client takeover: as CLIENT_ACQUIRE, or over exactly the acquisition the client watched
#: unchanged for its lease (a renewal moves ``expiresAt``; a new acquisition, the fence).
#: Values: CLIENT_ACQUIRE's, plus ``:seenOwner`` (S), ``:seenFence`` (N), ``:seenExpiresAt`` (N).
CLIENT_TAKEOVER = LockWrite(
    update=CLIENT_ACQUIRE.update,
    condition=(
        f"{CLIENT_ACQUIRE.condition} OR (#{OWNER} = :seenOwner AND #{FENCE} = :seenFence "
        f"AND #{EXPIRES_AT} = :seenExpiresAt)"
    ),
)

#: Client refresh: REFRESH, recording the renewed lease in :data:`CLIENT_LEASE`.
#: Values: ``:me`` (S), ``:expiresAt`` (N), ``:clientLease`` (M).
CLIENT_REFRESH = LockWrite(
    update=_set_also(REFRESH.update, f"#{CLIENT_LEASE} = :clientLease"),
    condition=REFRESH.condition,
)

#: Client release: RELEASE, dropping :data:`CLIENT_LEASE` too (a free lock keeps its key and
#: fence only). Values as RELEASE.
CLIENT_RELEASE = LockWrite(update=f"{RELEASE.update}, #{CLIENT_LEASE}", condition=RELEASE.condition)

#: Retire: the holder's execution ended at ``:endedAt`` without releasing (stopped, timed
#: out, failed past every Catch). Its lease now ends when its stop grace after that moment
#: is over - not at once, because work it started may still run - and then any waiter takes
#: the lock over through the acquire's ``expiresAt < :now``. Only that exact acquisition is
#: touched, and only if it was made at or before the end: a redriven execution acquires again
#: under the same owner (its acquire resumes), and a late copy of its first end's event
#: (EventBridge retries for up to 24 h) must not retire that live acquisition - every acquire
#: sets ``acquiredAt``, so a re-acquisition is told from the ended one by it.
#: Values: ``:owner`` (S), ``:endedAt`` (N, epoch ms).
RETIRE = LockWrite(
    update=f"SET #{EXPIRES_AT} = :endedAt + #{GRACE}",
    condition=f"#{OWNER} = :owner AND attribute_exists(#{GRACE}) AND #{ACQUIRED_AT} <= :endedAt",
)
#: Retire by: the lease of acquisition ``:acquiredAt`` of ``:owner`` now ends at ``:until``,
#: only if that is sooner - this retire never lengthens a lease (RETIRE may: an end within a
#: stop grace of the lease's own end). The writer computed ``:until`` from the item it read
#: (the janitor: the end + the grace it read; a presence probe: now + the grace); the exact
#: acquisition it read is the one shortened. Values ``:owner``, ``:acquiredAt``, ``:until``.
RETIRE_BY = LockWrite(
    update=f"SET #{EXPIRES_AT} = :until",
    condition=f"#{OWNER} = :owner AND #{ACQUIRED_AT} = :acquiredAt AND #{EXPIRES_AT} > :until",
)


#: Present: the holder's presence branch registers its callback task's token (a
#: ``.waitForTaskToken`` UpdateItem that parks until the work is over). Only for this exact
#: acquisition, and never after the work ended (:data:`DEPART`). It may overwrite a token of
#: the same acquisition: a retried registration whose first attempt was written and then
#: failed left a token that is closed already.
#: Values: ``:me`` (S), ``:acquiredAt`` (N), ``:token`` (S), ``:now`` (N, epoch ms).
PRESENT = LockWrite(
    update=f"SET #{PRESENCE} = :token, #{PRESENCE_OF} = :acquiredAt, #{PRESENCE_AT} = :now",
    condition=(
        f"#{OWNER} = :me AND #{ACQUIRED_AT} = :acquiredAt "
        f"AND (attribute_not_exists(#{PRESENCE_CLOSED}) OR #{PRESENCE_CLOSED} <> :acquiredAt)"
    ),
)

#: Depart: the work is over (or the presence could not be registered): no token may be
#: registered for this acquisition any more. The one registered before, if any, is read after
#: it (a strongly consistent GetItem: :func:`presence_projection`) and its branch ended. Not
#: returned by this write: whether ``UPDATED_NEW`` lists an attribute a ``SET`` left unchanged
#: is not documented (moto leaves it out), and a retry after a lost response changes nothing.
#: Values: ``:me`` (S), ``:acquiredAt`` (N).
DEPART = LockWrite(
    update=f"SET #{PRESENCE_CLOSED} = :acquiredAt",
    condition=f"#{OWNER} = :me AND #{ACQUIRED_AT} = :acquiredAt",
)

#: Abandoned: a waiter's probe found the holder's presence token closed (``SendTaskHeartbeat``
#: answered ``TaskTimedOut``), and the token is older than :data:`PRESENCE_SETTLE_MS`: its
#: branch ended - cancelled, stopped, timed out - without releasing. (A younger closed token
#: may be a registration attempt that wrote it, lost its response and failed: the presence
#: branch then writes again within the settle time - a new token, or DEPART.) RETIRE "ended now", for that token's acquisition only, and only while the lease
#: runs, and once (it closes the presence: a later probe would push the end on and on): the
#: lock stays held for the stop grace from now (a Lambda the branch invoked may still run),
#: then any waiter takes it over.
#: Values: ``:owner`` (S), ``:endedAt`` (N, epoch ms), ``:token`` (S), ``:settledBefore`` (N).
ABANDONED = LockWrite(
    update=f"{RETIRE.update}, #{PRESENCE_CLOSED} = #{ACQUIRED_AT}",
    condition=(
        f"{RETIRE.condition} AND #{PRESENCE} = :token AND #{PRESENCE_OF} = #{ACQUIRED_AT} "
        f"AND #{PRESENCE_AT} <= :settledBefore AND #{EXPIRES_AT} > :endedAt "
        f"AND (attribute_not_exists(#{PRESENCE_CLOSED}) OR #{PRESENCE_CLOSED} <> #{ACQUIRED_AT})"
    ),
)

#: How long a closed presence token must have been on the item before a waiter trusts it (ms).
#: A registration attempt whose write was applied but whose response was lost fails, and Step
#: Functions closes its token (whether a retry gets a new token is undocumented: assume it
#: does). The presence branch then writes again - a retry (:data:`PRESENCE_RETRY`: 1 + 2 s of
#: backoff at most) or, once those failed, DEPART (:data:`PRESENCE_UNSURE_RETRY`: 1 + 2 + 4 s
#: more), or fails its hold - within this time; only then does a closed token mean a branch that
#: ended. A cancelled holder is found this long after it registered at the earliest.
#: The number: in the worst case the first attempt's token closes, the registration's two
#: retries fail before they apply, then DEPART's first three attempts do, and its fourth applies:
#: 1 + 2 + 1 + 2 + 4 = 10 s of backoff and six calls, each allowed
#: :data:`PRESENCE_CALL_ALLOWANCE_MS`: 19 s, rounded up
#: (``tests/test_validation.py::test_the_presence_settle_outlasts_every_write_a_failed_registration_still_makes``
#: keeps the two in step). Shorter would let a waiter retire a live holder whose registration
#: was merely slow: that is two holders, so the settle errs long (it only delays the recovery of
#: a cancelled holder).
PRESENCE_SETTLE_MS = 20_000
#: The section's variable for the holder a waiter found (``<lock variable>Holder``): another
#: participant's record, never this section's acquisition.
HOLDER_SUFFIX = "Holder"
#: What one DynamoDB call of a Step Functions task is allowed to take, scheduling included, in
#: :data:`PRESENCE_SETTLE_MS` (AWS documents no bound; a call is milliseconds when healthy).
PRESENCE_CALL_ALLOWANCE_MS = 1_500
#: Retry of the presence registration and of the DEPART after it failed (short: they bound
#: :data:`PRESENCE_SETTLE_MS`).
PRESENCE_RETRY = {"interval_s": 1, "backoff_rate": 2.0, "max_attempts": 2}
PRESENCE_UNSURE_RETRY = {"interval_s": 1, "backoff_rate": 2.0, "max_attempts": 3}
#: ``SendTaskSuccess`` errors that mean the presence task it ends is over already (or was
#: never registered under that token): nothing to end
#: (https://docs.aws.amazon.com/step-functions/latest/apireference/API_SendTaskSuccess.html).
DISMISS_OVER = ("Sfn.TaskDoesNotExistException", "Sfn.TaskTimedOutException", "Sfn.InvalidTokenException")
#: Every other error of the dismissal (throttling, a 5xx, a KMS error) is tried again: the
#: presence branch ends with it, and until it does the hold - and so the lock - stays on, up
#: to the presence task's timeout (the lease). At most 1 + 2 + 4 + 8 + 16 + 32 s of backoff.
DISMISS_RETRY = {"interval_s": 1, "backoff_rate": 2.0, "max_attempts": 6}

#: What stands for "no token" (:func:`departed_token_expression`): not a task token.
NO_PRESENCE = "none"


@dataclass(frozen=True)
class LockItem:
    """Where the lock attributes live: the item's key attribute, and a prefix of the lock
    attributes' names (a lock kept on the user's own record, e.g. ``lw:owner``, must not
    collide with the record's attributes). The writes are the same; only names differ."""

    key_attribute: str = KEY_ATTRIBUTE
    prefix: str = ""

    def attribute(self, name: str) -> str:
        """The stored name of the protocol attribute ``name`` (``recordKey``: the key attribute)."""
        return self.key_attribute if name == RECORD_KEY else self.prefix + name

    def path(self, of: str, name: str) -> str:
        """JSONata path to attribute ``name`` of the DynamoDB item ``of`` (names quoted)."""
        return f"{of}.`{self.attribute(name)}`"


#: Placeholder of an item's own key attribute in a write (``#recordKey``).
RECORD_KEY = "recordKey"
#: The lock table's items: partition key ``pk``, attributes named as above.
LOCK_TABLE_ITEM = LockItem()


def lock_item_key(table_key: str, item: LockItem | None = None) -> dict[str, dict[str, str]]:
    """The DynamoDB ``Key`` of a lock item (``table_key`` may be a JSONata template)."""
    return {(item or LOCK_TABLE_ITEM).key_attribute: {"S": table_key}}


# --------------------------------------------------------------------------------------
# 3. JSONata pieces (evaluated by the Step Functions service)
# --------------------------------------------------------------------------------------


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


def _jsonata_string(value: str) -> str:
    return json.dumps(value)  # JSONata string literals take JSON's escapes


def _utf8_bytes(expression: str) -> str:
    """JSONata: UTF-8 bytes of a string. ``$encodeUrlComponent`` writes each byte it escapes
    as ``%XX`` and leaves the others (one byte each): bytes = length - 2 x (number of %)."""
    return (
        f"( $e := $encodeUrlComponent({expression}); "
        "2 * $length($replace($e, '%', '')) - $length($e) )"
    )


def key_problem_expression(key: str, namespace: str, reserve_bytes: int = 0, namespaced: bool = True) -> str:
    """JSONata: what is wrong with the key ``key`` evaluates to ('' if nothing)."""
    prefix = namespace + NAMESPACE_SEPARATOR if namespaced else ""
    size = _utf8_bytes(f"{_jsonata_string(prefix)} & {key}")
    return (
        f"($not($exists({key})) ? 'is missing' "
        f": $type({key}) != 'string' ? 'must be a string, got: ' & $type({key}) "
        f": $length({key}) = 0 ? 'must not be empty, got an empty string' "
        f": ( $size := {size}; $size > {MAX_KEY_BYTES - reserve_bytes} "
        f"? {_jsonata_string(too_long(reserve_bytes, namespaced))} & $string($size) & ' bytes' : '' ))"
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
        f"$problem = '' ? {_jsonata_string(prefix)} & $lockKey "
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
    extra = "".join(f", {_jsonata_string(k)}: {v}" for k, v in (extra_fields or {}).items())
    return (
        f"( $key := {key_expression_}; "
        f"$merge([{{'input': $states.input, {_jsonata_string(key_field)}: $key, "
        f"'owner': {NEW_OWNER_EXPRESSION}, 'grace': {int(grace_ms)}, "
        f"{_jsonata_string(REQUESTED_AT)}: $millis(){extra}}}, {reentered}]) )"
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
    marker = _jsonata_string(error_name + ": ")
    c = "$states.input.Cause"
    return f"$contains({c}, {marker}) ? {marker} & $substringAfter({c}, {marker}) : {c}"


def redrives_after_restart_expression() -> str:
    """JSONata (the Choice that sends a section whose work refused to resume back to its entry):
    the redrive count the section has started over for."""
    return REDRIVE_COUNT_EXPRESSION


def entry_error_is(signal_or_error: str) -> str:
    """JSONata (Choice after the section's entry failed): the cause names ``signal_or_error``."""
    return f"$contains($states.input.Cause, {_jsonata_string(signal_or_error)})"


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

    def round_polling_s(self, max_wait_s: float) -> float:
        """Longest time the retries of one round can take (their nominal waits, summed)."""
        return sum(self.nominal_wait(k + 1) for k in range(self.retries_for(max_wait_s)))

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
#: Share of that limit one waiter's loop may use; the rest is left to the protected work.
WAIT_LOOP_EVENT_BUDGET = 20_000
#: History events of one round besides its attempts: acquire entered/exited, the Held?
#: choice entered/exited, the wait entered/exited.
EVENTS_PER_ROUND = 6
#: History events of one acquire attempt: scheduled, started, failed.
EVENTS_PER_ATTEMPT = 3
#: History events a liveness check adds to its round, at most: the inspect read (entered,
#: scheduled, started, succeeded, exited), the holder choice (entered, exited), a call (5: the
#: describe, or the presence probe), a choice (2) and a write (5: a presence probe's ABANDONED,
#: or on a key a read/write lock's readers own, ``shared_kind.shared_hold_sweep``'s describe of a
#: reader, its choice and its retire).
EVENTS_PER_LIVENESS_CHECK = 19


def worst_case_rounds(policy: WaitPolicy, max_wait_s: float) -> int:
    """Most rounds a waiter can make before ``max_wait_s`` runs out.

    Jittered retries may take next to no time, so only each round's Wait (at its shortest)
    is counted as time passing. Every round - the liveness check's included - passes
    through the Wait.
    """
    if max_wait_s <= 0:
        return 0
    elapsed, rounds = 0.0, 0
    while elapsed < max_wait_s:
        rounds += 1
        elapsed += policy.shortest_wait(rounds)
    return rounds + 1  # the round run at the deadline


def worst_case_wait_events(policy: WaitPolicy, max_wait_s: float, liveness_check_every: int = 0) -> int:
    """History events of the wait loop in the worst case, liveness checks included."""
    attempts = policy.retries_for(max_wait_s) + 1
    rounds = worst_case_rounds(policy, max_wait_s)
    checks = rounds // liveness_check_every if liveness_check_every else 0
    return rounds * (EVENTS_PER_ROUND + EVENTS_PER_ATTEMPT * attempts) + checks * EVENTS_PER_LIVENESS_CHECK


def timeout_bound_s(policy: WaitPolicy, max_wait_s: float) -> float:
    """Latest a waiter fails with ``Lock.Timeout``, request latencies aside: the deadline is
    checked between rounds, so the round that began just before it runs to its end."""
    return max_wait_s + policy.round_polling_s(max_wait_s)


# --------------------------------------------------------------------------------------
# 4. ASL arguments (JSONata query language), pure functions of their inputs
# --------------------------------------------------------------------------------------

#: Inside the section's branch, ``$states.input`` of the lock states is the entry record.
ENTRY = "$states.input"


def _update_item(key: str, write: LockWrite, values: Mapping[str, Any], item: LockItem | None = None) -> dict:
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
        **_update_item(
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
        f"{_jsonata_string(REQUESTED_AT)}: {ENTRY}.{REQUESTED_AT}, "
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
    return f"{_jsonata_string(GENERATION)}: {REDRIVE_COUNT_EXPRESSION}"


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
        **_update_item(
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
    return _update_item(
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
    return _update_item(jsonata(key), PRESENT, present_values(lock_variable), item)


def depart_arguments(*, lock_variable: str, item: LockItem | None = None, key_jsonata: str | None = None) -> dict:
    """DEPART for the acquisition in ``$<lock_variable>`` on its item (``key_jsonata``: the
    first key a multi-key hold took; its presence transaction includes it); a re-entered hold
    raises ``Lock.Reentered`` instead (it registered nothing)."""
    lock = "$" + lock_variable
    key = reentered_or(key_jsonata or f"{lock}.key", reentered_expression=f"{lock}.reentered = true")
    return _update_item(
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
        f"? {token}.S : {_jsonata_string(NO_PRESENCE)}"
    )


def abandoned_arguments(*, holder_variable: str, item: LockItem | None = None) -> dict:
    """ABANDONED for the holder the liveness check read into ``$<holder_variable>`` (its key,
    owner and presence token), ended now."""
    h = "$" + holder_variable
    return _update_item(
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


#: The errors ``SendTaskHeartbeat`` answers for a task token whose task is over (aws-sdk
#: integration names): the branch that registered it has ended - completed, failed, cancelled
#: with its Parallel or Map, or with its execution
#: (https://docs.aws.amazon.com/step-functions/latest/apireference/API_SendTaskHeartbeat.html).
PRESENCE_GONE = "Sfn.TaskTimedOutException"


#: Errors of the protected work after which the work behind the failed task may still run:
#: a task's ``TimeoutSeconds`` or heartbeat ran out (Step Functions stops waiting, not the
#: Lambda invocation, activity or callback worker), or a Lambda invocation hit its function's
#: timeout (Lambda ends it; a runtime that cannot kill a handler - the local one - lets it run
#: on: safe under both). After them the acquisition is retired - held for its stop grace from
#: now - instead of released (https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html).
MAY_STILL_RUN_ERRORS = ("States.Timeout", "States.HeartbeatTimeout", "Sandbox.Timedout")


def may_still_run_expression() -> str:
    """JSONata (Choice after the work failed with one of :data:`MAY_STILL_RUN_ERRORS`, a hold's
    ``Lock.PresenceUnknown`` - its work was cancelled - or a query error): the work behind it
    may still run - retire, do not release."""
    errors = ", ".join(_jsonata_string(e) for e in (*MAY_STILL_RUN_ERRORS, ERROR_PRESENCE_UNKNOWN))
    return f"($states.input.Error in [{errors}]) or ({resumed_expression()})"


def resumed_expression() -> str:
    """JSONata (Choice after the work failed): a task refused to resume after a redrive
    (:func:`resumed_guard_expression` raised)."""
    return (
        "$states.input.Error = 'States.QueryEvaluationError' and $type($states.input.Cause) = 'string' "
        f"and $contains($states.input.Cause, {_jsonata_string(SIGNAL_RESUMED + ': ')})"
    )


def work_done_expression(grace_ms: int) -> str:
    """JSONata (the Assign of the protected work, when it succeeded): ``until``, now plus the
    section's stop grace, and ``generation``, the execution's redrive count now. If the
    execution stops from here on, nobody takes this acquisition over before ``until``: the
    janitor, the liveness check and the presence probe all free a stopped holder's lock only
    once its stop grace has passed since its end, which comes after this. (Work that ended
    after a redrive - resumed in a Wait or Pass state, which are not guarded - says nothing of
    when the stop was: its generation is not the acquisition's.)"""
    return f"{{'until': $millis() + {int(grace_ms)}, {_jsonata_string(GENERATION)}: {REDRIVE_COUNT_EXPRESSION}}}"


def redriven_since_acquired_expression(lock_variable: str) -> str:
    """JSONata: the execution was redriven after the acquisition in ``$<lock_variable>`` was
    made (its generation is not the execution's redrive count now), so a lock state resumed
    here may repeat a write that had applied before the stop."""
    lock = "$" + lock_variable
    return f"$not($exists({lock}.{GENERATION}) and {lock}.{GENERATION} = {REDRIVE_COUNT_EXPRESSION})"


def released_before_takeover_expression(lock_variable: str, done_variable: str) -> str:
    """JSONata (Choice after a release found the lock not mine - a retry after a lost response,
    or a release resumed by a redrive): true when nobody could have taken this acquisition over
    yet, so the earlier attempt is what freed it and only its response was lost.

    Without a redrive since the acquire, only the lease ends a live holder's acquisition
    (``$<lock_variable>.expiresAt``). After one, the execution was stopped (or failed) in between,
    and a stopped holder's lock is freed once its stop grace has passed since its end: before
    ``$<done_variable>.until`` (:func:`work_done_expression`, assigned when the work succeeded,
    in the acquisition's generation - before the stop; a release without it is not trusted). A redrive comes within 14 days of the end, usually much
    later than the grace: then the release cannot tell, and the section fails ``Lock.Lost``
    (https://docs.aws.amazon.com/step-functions/latest/dg/redrive-executions.html)."""
    lock, done = "$" + lock_variable, "$" + done_variable
    return (
        f"$millis() < {lock}.{EXPIRES_AT} and ($not({redriven_since_acquired_expression(lock_variable)}) "
        f"or ($exists({done}.until) and {done}.{GENERATION} = {lock}.{GENERATION} and $millis() < {done}.until))"
    )


def resumed_release_applied_expression(lock_variable: str, done_variable: str) -> str:
    """JSONata (Choice after a *first* release found the lock not mine): a redrive came since
    the acquire, so this release is a rerun of one that may have applied before the stop (AWS
    reruns the step the execution stopped in), and nobody could have taken the lock over yet
    (:func:`released_before_takeover_expression`): the earlier run released it. Otherwise the
    lock was taken over (``Lock.Lost``)."""
    return (
        f"{redriven_since_acquired_expression(lock_variable)} and "
        f"{released_before_takeover_expression(lock_variable, done_variable)}"
    )


def rethrow_error_expression() -> str:
    """JSONata: the error a section re-raises for an error of its work (``States.*`` renamed;
    a task of the work that refused to resume after a redrive: ``Lock.Resumed``)."""
    e = "$states.input.Error"
    return (
        f"({resumed_expression()}) ? {_jsonata_string(SIGNAL_RESUMED)} : "
        f"($substring({e}, 0, 7) = 'States.' ? '{RERAISED_STATES_PREFIX}' & {e} : {e})"
    )


def resumed_again_expression(redrives_variable: str) -> str:
    """JSONata (Choice after the section failed with ``Lock.Resumed``): the section has not yet
    started over in this redrive generation, so it enters again with a new acquisition;
    otherwise the resumed task belongs to an enclosing section, which starts over itself."""
    r = "$" + redrives_variable
    return (
        f"$states.input.Error = {_jsonata_string(SIGNAL_RESUMED)} and "
        f"{REDRIVE_COUNT_EXPRESSION} > ($exists({r}) ? {r} : 0)"
    )


def rethrow_cause_expression() -> str:
    """JSONata: the cause a section re-raises (for a renamed error: the original pair as JSON)."""
    e, c = "$states.input.Error", "$states.input.Cause"
    return f"$substring({e}, 0, 7) = 'States.' ? $string({{'Error': {e}, 'Cause': {c}}}) : {c}"


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
        f"and {token}.S != {_jsonata_string(NO_PRESENCE)}"
    )


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


class HistoryUnreadable(ValueError):
    """An execution's history does not show what a DynamoDB task wrote (its parameters are
    missing): the janitor cannot tell which locks the execution took."""


@dataclass(frozen=True)
class ScheduledTask:
    """A DynamoDB task an execution scheduled: its ``TaskScheduled`` history event's resource
    (``updateItem``, ``transactWriteItems`` ...) and parameters, as the state's Arguments
    evaluated to."""

    resource: str
    parameters: Mapping[str, Any]


def _epoch_ms(timestamp: Any) -> float:
    """A history event's timestamp (boto3: a datetime; epoch ms also accepted) in epoch ms."""
    return timestamp if isinstance(timestamp, (int, float)) else timestamp.timestamp() * 1000


def dynamodb_tasks_scheduled(events: Iterable[Mapping[str, Any]], *, ended_at_ms: int) -> list[ScheduledTask]:
    """The DynamoDB tasks an execution scheduled at or before ``ended_at_ms``, from its
    ``GetExecutionHistory`` events (boto3's shape, read with ``includeExecutionData``).

    ``events`` is consumed once, lazily: pass a generator over the pages and only these
    tasks' parameters - a few hundred bytes each - are kept, however large the execution's
    input or its history. Raises :class:`HistoryUnreadable` for a DynamoDB task whose
    parameters the history does not show.
    """
    found = []
    for event in events:
        details = event.get("taskScheduledEventDetails") or {}
        if (
            event.get("type") != "TaskScheduled"
            or "dynamodb" not in str(details.get("resourceType", ""))
            or _epoch_ms(event["timestamp"]) > ended_at_ms
        ):
            continue
        if not isinstance(details.get("parameters"), str):
            raise HistoryUnreadable(
                f"history event {event.get('id')} ({details.get('resource')}) shows no parameters: "
                "read the history with includeExecutionData"
            )
        found.append(ScheduledTask(str(details.get("resource")), json.loads(details["parameters"])))
    return found


def acquisitions_in_history(tasks: Iterable[ScheduledTask], *, table_name: str) -> list[tuple[str, str]]:
    """``(stored key, owner)`` of every acquisition the execution *attempted* on
    ``table_name`` among ``tasks`` (see :func:`dynamodb_tasks_scheduled`): each task whose
    parameters are this protocol's ACQUIRE - alone, after a record lock's "record exists"
    clause, or each update of a multi-key acquire's ``TransactWriteItems`` - once each, in
    history order.

    Attempts, not successes: an acquire whose response was lost when the execution was
    stopped succeeded without a ``TaskSucceeded``. Retiring an attempt that never held the
    lock is a no-op (RETIRE names its exact owner). The history is the execution's own
    record, read after it ended: unlike an index, it cannot lag.
    """
    found: dict[tuple[str, str], None] = {}
    for task in tasks:
        if task.resource == "updateItem":
            updates = [task.parameters]
        elif task.resource == "transactWriteItems":
            updates = [entry.get("Update") for entry in task.parameters.get("TransactItems", [])]
        else:
            continue
        for update in updates:
            if (
                isinstance(update, Mapping)
                and ACQUIRE.condition in str(update.get("ConditionExpression", ""))
                and update.get("TableName") == table_name
            ):
                (key,) = update["Key"].values()  # the lock's item: a partition key only
                found[(key["S"], update["ExpressionAttributeValues"][":me"]["S"])] = None
    return list(found)


#: Retry for transient DynamoDB errors on the lock's writes (all idempotent for one owner).
TRANSIENT_RETRY = {
    "errors": list(TRANSIENT_ERRORS),
    "interval_s": 1,
    "backoff_rate": 2.0,
    "max_attempts": 6,
    "max_delay_s": 8,
}
