"""The lock item: its attributes, the stored key and its namespace, the owner of one acquisition.

Every participant - the Step Functions states, the janitor, the Python ``LockClient`` - reads and
writes the same lock items. Ownership is per *acquisition*, not per execution: Map iterations,
Parallel branches and nested sections of one execution, and the two runs of an asynchronous
Express execution that Step Functions may run twice, are all different holders. The owner of an
acquisition made by a state machine is ``<execution ARN>#<uuid>``: the uuid is drawn once when
the section is entered, so the acquire's own retries (a lost response, a poll) keep it, and the
execution ARN before the ``#`` lets the janitor and the liveness check find the execution.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


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

#: Field of the ``$lock`` record: ``$states.context.Execution.RedriveCount`` when the
#: acquisition was made (its *generation*). The work runs only while the execution's redrive
#: count still equals it: see :func:`resumed_guard_expression`.
GENERATION = "redriveCount"

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


#: A client's lease of the current acquisition (a map ``{owner: S, ms: N}``), written by the
#: client's acquire and refresh: how long a client waiter watches the lock unchanged before it
#: takes it over. A renewal restarts the lease, so ``expiresAt - acquiredAt`` would grow with
#: every one. It belongs to the acquisition whose owner it names: stale (ignored) once another
#: acquisition - a workflow's - took the lock.
CLIENT_LEASE = "clientLease"

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
