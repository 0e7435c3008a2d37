"""The DynamoDB writes on a lock item (acquire, release, refresh, retire, presence), each an
update/condition pair spelled once, shared by the state machines, the client and the janitor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from locked_workflow.state_machines.lock_item import (
    ACQUIRED_AT,
    CLIENT_LEASE,
    EXPIRES_AT,
    FENCE,
    GRACE,
    LOCK_TABLE_ITEM,
    OWNER,
    PRESENCE,
    PRESENCE_AT,
    PRESENCE_CLOSED,
    PRESENCE_OF,
    LockItem,
)


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
#: (``tests/constructs/test_validation.py::test_the_presence_settle_outlasts_every_write_a_failed_registration_still_makes``
#: keeps the two in step). Shorter would let a waiter retire a live holder whose registration
#: was merely slow: that is two holders, so the settle errs long (it only delays the recovery of
#: a cancelled holder).
PRESENCE_SETTLE_MS = 20_000
#: What one DynamoDB call of a Step Functions task is allowed to take, scheduling included, in
#: :data:`PRESENCE_SETTLE_MS` (AWS documents no bound; a call is milliseconds when healthy).
PRESENCE_CALL_ALLOWANCE_MS = 1_500
