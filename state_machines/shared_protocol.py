"""The shared (read) and exclusive (write) lock on one key, top to bottom.

Semantics (Curator's ``InterProcessReadWriteLock``, fair): any number of *readers* hold the key
together while no *writer* holds it; a writer holds it alone; arrivals are served in ticket
order, so a writer that queued before a reader goes first (writers never starve behind a
stream of readers), and releasing a writer admits every reader queued behind it, up to the
next writer, at once (no reader waits for another reader to leave).

The items are the fair lock's (:mod:`fair_protocol`): the mutex lock item of
:mod:`lock_protocol` with the ticket counters ``tickets``/``served``, and one queue row per
waiter, ``!<ticket>!K``. A shared hold adds to the lock item:

* ``owner`` = :data:`SHARED` (the *shared hold*: readers hold; no acquisition's owner is ever
  spelled so - they all contain ``#``), with no ``expiresAt``, ``acquiredAt`` or ``grace``;
* ``readers`` (N): how many reader entries there are;
* one **reader entry** per reader, the attribute ``r:<owner>`` (:func:`reader_attribute`):
  a map ``{expiresAt, acquiredAt, grace}`` - the reader's own lease and stop grace.

A queue row says what its waiter wants: ``kind`` = ``read`` or ``write`` (absent: write).

Why the reader leases are entries on the lock item and not items of their own: a reader must
enter with **one** conditional write, and that write must both be refused by a writer (which
only the lock item can do atomically: the table has no sort key, so nothing else can count a
key's readers) and record a lease that expires on its own, reader by reader. A reader item
beside a count cannot be written in the same UpdateItem, and a count alone cannot tell which
reader died. So the entry is the reader's hold, and only *holders* have one: waiters live in their rows,
as in the fair lock, so nothing grows with the queue. What does grow is the lock item, with the
number of concurrent readers, and with it every lock-item write's units and every answer that
returns the whole item (``ALL_NEW``, a GetItem): at most :data:`MAX_READERS` readers hold a key
at once (derivation there); a reader past it is refused with ``Lock.TooManyReaders`` before it
writes. The count makes every entry write idempotent-checkable: an entry is added
only where none exists (``attribute_not_exists``) and removed only where one does, in the
same write that moves ``readers``, so ``readers`` = the number of entries, always.

The existing **mutex** on the same key is a writer: its ACQUIRE is refused by a shared hold
(``owner`` is :data:`SHARED`: not absent, never ``:me`` or ``:stale``, and with no
``expiresAt`` the lease clause ``expiresAt < :now`` is false), and the liveness check, the
janitor's RETIRE and ABANDONED never match it (it is not an execution, and they are
conditioned on an exact owner). A mutex that finds the key free of readers and writers takes
it at once, as a polling run does on a fair lock (it may barge ahead of the queue, and its
release hands nothing off: the queue's fallback covers that). Its ACQUIRE never takes a
shared hold over, so a mutex *waiter's liveness check* frees a shared hold whose readers are
gone (``shared_kind.shared_hold_sweep``): it reads the whole lock item, reaps an expired entry
(REAP_READ / REAP_LAST), describes a reader's execution in turn and retires an ended one
(RETIRE_READER), and frees a shared hold with no reader (FREE_EMPTY); then its next acquire
takes the key; a plain ``LockClient`` refused by a shared hold reaps an expired entry or
frees an empty hold the same way (``shared_client.ReadWriteParticipant.sweep_shared_hold``).
Neither probes a reader's presence row (a cancelled reader branch: its lease, or this module's
waiters): a key with shared holders should still give its writers this module's exclusive kind.

1. **Fast paths** (nobody queues: ``served = tickets``).
   ``FAST_READ``: the key is free of writers and has room (:data:`MAX_READERS`) -> add my
   entry, ``readers + 1``, ``owner`` = :data:`SHARED`. One write. (No room: ``ENQUEUE_READ``
   is refused too; the reader reads ``readers`` and fails ``Lock.TooManyReaders``, unwritten.) ``FAST_WRITE``: the key is free of readers and writers (the
   mutex's ACQUIRE condition, or a shared hold with no reader left) -> the mutex's acquire.
2. **Ticket.** ``ENQUEUE_READ`` / ``ENQUEUE_WRITE``: the fair lock's ticket, refused when my
   fast path would take the key now (try it again).
3. **Park** (a transaction, :func:`park_transaction`: ``PARK`` on my row with a
   ``ConditionCheck`` of the lock item, ``PARK_UNLESS[kind]``): register my task token and kind *unless my
   ticket may be admitted now* (``served = ticket - 1`` and the key is free for my kind) or was
   passed (``served >= ticket``). Refused: admit myself (``GRANT_*`` with ``:next`` = me) or
   look (``served >= ticket``: queue again). This is the rendezvous that makes a lost wake-up
   impossible: every write that can make my ticket admissible is followed by its writer
   reading my row (the handoff, 4.), so a park committed before that write is found, and one
   after it sees the write and is refused.
4. **Handoff** - run by whoever made the head admissible: a writer leaving (the holder of
   ``c = served``), the last reader leaving or reaped (``readers`` reached 0), and a reader
   admitted from the queue (readers behind it may follow). Read row ``c + 1``
   (a strongly consistent GetItem) and:

   * a parked **reader**: ``GRANT_READ`` (its entry with a *claim-window lease*,
     ``served = c + 1``; a writer runner is freed in the same write), wake it, and go on with
     ``c + 1`` - so a writer's release admits the readers behind it, one write each, until a
     writer or the end: none waits for another reader to leave;
   * a parked **writer**: ``GRANT_WRITE`` (owner, claim-window lease, fence + 1,
     ``served = c + 1``) if the key is free of readers, wake it, stop; refused (readers hold):
     stop - the last reader to leave runs the handoff again;
   * a waiter gone (``left``, or a hole mark a park timeout old): ``SKIP`` it, delete its row
     (nothing else would: a served ticket's row is never read, and its park is refused), go on;
   * nobody parked (a ticket whose waiter has not parked yet): stop - its park (3.) will be
     refused and it admits itself. A writer that still holds the key first RELEASEs it (the
     mutex's write) and **reads the row again**: that waiter may have parked between the
     read and the release, while the key was still held - the release is the write that
     makes it admissible, so the read must follow it (the model found this lost wake-up).
     (The last reader's leave ended the shared hold already: a mutex may enter.)

   A woken waiter confirms before its work (``CLAIM_READ`` / ``CLAIM_WRITE``: its own full
   lease, in place of the claim-window lease). So a grant whose wake-up failed (a stopped
   waiter, a cancelled branch, a park that timed out just then) is never worked under, and
   expires by itself after the claim window unless its waiter finds it at its fallback and
   claims it: no revoke is needed, and no woken waiter can be revoked by mistake.
5. **Leaving.** A writer runs the handoff from its ticket (its first grant or RELEASE frees the
   key). A reader: ``LEAVE_READ`` (entry removed, ``readers - 1``) while other readers hold,
   ``LEAVE_LAST`` as the last one (entry *and* ``owner`` removed, ``readers`` 0: the shared hold
   ends in the same write, so a reader stopped right after it never leaves a shared hold with
   no reader - no entry, no lease, no execution - that would refuse a plain mutex forever);
   refused, the other one (the refusal says which, or a read does); the last one then runs
   the handoff (``ALL_NEW``: from ``served``).
6. **Recovery, per holder.** A writer: the mutex's lease, RETIRE (janitor), liveness check and
   presence, unchanged. A reader: its entry's lease - ``REAP_READ`` (``REAP_LAST`` for the
   last one, which ends the shared hold as ``LEAVE_LAST`` does) removes an entry whose
   ``expiresAt`` is past (then, at 0 readers, the handoff, as 5.); the liveness check's
   ``RETIRE_READER`` shortens it to the end of its execution plus its stop grace, for that
   acquisition only (``acquiredAt <= :endedAt``: a redriven reader that re-entered is not
   touched); the janitor reads the entry and writes the same end with ``RETIRE_GONE_READER``
   (that exact acquisition, only if sooner). Any waiter may reap an expired entry at its
   fallback (REAP_READ checks the expiry): the writer at the head it holds back, or a waiter
   behind a head that does not move (the head may be dead too). A parked waiter's fallback
   also checks liveness (every ``liveness_check_every``-th round, one DescribeExecution at
   most: the writer holder, else one reader entry in turn) and retires an ended holder
   (RETIRE / RETIRE_READER from its execution's end). A waiter stopped while parked: the
   janitor marks its row left (``DEQUEUE``), and the handoff skips it. A hold's presence row
   (4b.) left by an ended execution: the janitor deletes it after the retire
   (``FORGET_ROW``), unless registered after the end.
7. **Fallback** (the fair lock's): a parked waiter looks by itself after its park timeout:
   granted -> claim; passed -> queue again; the head -> admit itself if it may (a reader at the
   head of a key with no room - readers admitted meanwhile - gives up its place, LEAVE, and
   fails ``Lock.TooManyReaders``: its GRANT_READ would be refused at every look); an expired
   reader entry holding back the head -> reap it; the head (not admissible) -> park again;
   behind a head that does not move on a key free of writers -> run the handoff for the head
   (a row that never came - a hole - is marked, ``MARK``, and skipped once the mark is a park
   timeout old).
8. **Lost responses** (the write was applied, its answer lost; a retry must not count twice):
   FAST_READ and a self-admitting GRANT_READ -> ``CLAIM_READ`` (is my entry there?), else the
   fast path again; a runner's GRANT -> read the lock item (granted: wake it); LEAVE_* and
   REAP_* -> read ``readers`` (0: the handoff); ENQUEUE -> the ticket is a hole, take
   another; FAST_WRITE, CLAIM_*, SKIP, MARK, the park: the same write again (idempotent, or
   refused harmlessly); a writer's RELEASE -> retry, never ``Lock.Lost`` on a retry.

**Fences.** A writer's fence strictly increases (``ADD fence 1`` on every writer grant, as the
mutex's). Readers never change it: a reader's lock record carries the fence of the last
writer - the version it reads. A reader never holds a *write* fence: a fenced write on a key
with shared holders is conditioned on the writer's exact hold - ``owner = :me AND fence =
:fence`` on the lock item (:data:`FENCED_WRITE_CHECK`, a ``ConditionCheck`` beside the
record's own ``lastFence < :fence``) - and a reader is never the ``owner``.

Every write is spelled once, here. ``tests/test_shared_model.py`` model-checks the steps
(every interleaving of 3 participants, crashes, lost responses, failed wake-ups, park
timeouts, expiring leases) and checks the model's reading of each write against DynamoDB.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines.fair_protocol import (
    _NOBODY_QUEUES,
    LEFT,
    READY,
    SERVED,
    _update,
    row_key,
)
from locked_workflow.state_machines.lock_protocol import (
    ACQUIRE,
    ACQUIRED_AT,
    EXPIRES_AT,
    FENCE,
    GRACE,
    OWNER,
    PRESENCE,
    PRESENCE_AT,
    PRESENCE_CLOSED,
    PRESENCE_OF,
    RELEASE,
    RETIRE_BY,
    LockWrite,
    ScheduledTask,
    owner_execution,
)

# --------------------------------------------------------------------------------------
# 1. Attributes
# --------------------------------------------------------------------------------------

#: ``owner`` of a shared hold: readers hold the key. Never an acquisition's owner (those are
#: ``<execution ARN or client id>#<uuid>``), never an execution (no liveness check, no janitor).
SHARED = "shared"
#: The number of reader entries on the lock item.
READERS = "readers"
#: A reader entry's attribute: this prefix + the reader's owner. Protocol attribute names are
#: plain words, so no entry can collide with them.
READER_PREFIX = "r:"
#: Row attribute: what the waiter wants (absent: a writer).
KIND = "kind"
READ, WRITE = "read", "write"
#: The placeholder of the reader entry a write touches (its name is the reader's attribute).
READER_PLACEHOLDER = "#reader"

#: The most readers that hold one key at once: the entry writes (``FAST_READ``,
#: ``GRANT_READ``) are refused at this count, and ``ENQUEUE_READ`` too, so a reader that
#: arrives at it takes no ticket and is refused (``Lock.TooManyReaders``,
#: :data:`~locked_workflow.state_machines.errors.ERROR_TOO_MANY_READERS`) before any write.
#:
#: Derivation. Every state that returns the lock item whole - a reader's ``FAST_READ`` and
#: ``CLAIM_READ``, every ``ENQUEUE_*`` (``ALL_NEW``), a waiter's look (GetItem) - fails with
#: ``States.DataLimitExceeded``, which no Catch handles, once the item's JSON passes 262,144
#: bytes, *after* its write landed ("Maximum input or output size for a task, state, or
#: execution: 262,144 bytes of data as a UTF-8 encoded string",
#: https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html); DynamoDB's item
#: limit is 400 KB (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html).
#: A reader entry with the longest owner AWS allows - an execution ARN in the longest partition
#: with an 80-character state machine name and execution name (220 bytes), ``#`` and a uuid:
#: 257 bytes - is 362 bytes of the answer's JSON (measured by ``tests/test_shared_lock.py``)
#: and ~310 bytes of item (DynamoDB's sizing rules). 200 entries: ~73 KB of JSON (28 % of the
#: task limit) and ~62 KB of item (16 % of DynamoDB's): headroom for the key (up to 2 KB), the
#: counters and a writer's attributes, and for a factor of three in the size of an entry.
#: The price at the cap: a lock-item write costs ~62 write units.
MAX_READERS = 200
#: The value of ``:maxReaders`` (every write whose condition counts the readers against the cap).
MAX_READERS_VALUES = {":maxReaders": {"N": str(MAX_READERS)}}


def reader_attribute(owner: str) -> str:
    """The lock item attribute holding the entry of the reader ``owner``."""
    return f"{READER_PREFIX}{owner}"


def reader_attribute_expression(owner: str) -> str:
    """JSONata: :func:`reader_attribute` of the owner the expression evaluates to."""
    return f"'{READER_PREFIX}' & ({owner})"


def entry_value(*, expires_at: Any, acquired_at: Any, grace: Any) -> dict:
    """The DynamoDB value of a reader entry (``:entry``; JSONata templates allowed)."""
    return {"M": {EXPIRES_AT: {"N": expires_at}, ACQUIRED_AT: {"N": acquired_at}, GRACE: {"N": grace}}}


# --------------------------------------------------------------------------------------
# 2. Conditions
# --------------------------------------------------------------------------------------

#: No writer holds: the mutex may acquire (free, mine, a proven-stale holder's, a lease over),
#: or readers hold. Values ``:me``, ``:stale``, ``:now``, ``:shared``.
_WRITER_FREE = f"({ACQUIRE.condition}) OR #{OWNER} = :shared"
#: Nobody holds: the mutex may acquire, or a shared hold has no reader left (no write leaves one
#: since the last reader's leave ends the hold: an item an earlier release left so). Values as
#: above plus ``:zero``.
_ALL_FREE = f"({ACQUIRE.condition}) OR (#{OWNER} = :shared AND #{READERS} = :zero)"
_FREE = {READ: _WRITER_FREE, WRITE: _ALL_FREE}
#: Room for one more reader entry (:data:`MAX_READERS`). Values ``:maxReaders``.
_ROOM = f"(attribute_not_exists(#{READERS}) OR #{READERS} < :maxReaders)"

#: The shared hold, as a write sets it (a writer whose lease was over is replaced whole).
_SHARE = [f"#{OWNER} = :shared", f"{READER_PLACEHOLDER} = :entry"]
_UNWRITER = [f"#{ACQUIRED_AT}", f"#{EXPIRES_AT}", f"#{GRACE}"]

# --------------------------------------------------------------------------------------
# 3. The writes on the lock item
# --------------------------------------------------------------------------------------

#: FAST_READ: enter as a reader - free of writers, nobody queues, room for my entry. Values
#: ``:me``, ``:stale``, ``:now``, ``:shared``, ``:entry``, ``:one``, ``:maxReaders``.
FAST_READ = LockWrite(
    update=f"SET {', '.join(_SHARE)} REMOVE {', '.join(_UNWRITER)} ADD #{READERS} :one",
    condition=f"attribute_not_exists({READER_PLACEHOLDER}) AND ({_WRITER_FREE}) AND {_NOBODY_QUEUES} AND {_ROOM}",
)
#: FAST_WRITE: the mutex's acquire - free of readers and writers and nobody queues (or mine:
#: a retry whose response was lost). Values as ACQUIRE's plus ``:shared``, ``:zero``.
FAST_WRITE = LockWrite(
    update=ACQUIRE.update,
    condition=f"#{OWNER} = :me OR (({_ALL_FREE}) AND {_NOBODY_QUEUES})",
)
#: ENQUEUE_*: the fair lock's ticket (``ALL_NEW``: ``tickets`` is mine), refused when my fast
#: path would enter now - and a reader's when the key has :data:`MAX_READERS` readers (so
#: both of a reader's first writes are refused at the cap: it reads ``readers`` and fails
#: ``Lock.TooManyReaders``). Values: those of the fast path's condition plus ``:zero``, ``:one``.
ENQUEUE_READ = LockWrite(update=fair.ENQUEUE.update,
                         condition=f"NOT (({_WRITER_FREE}) AND {_NOBODY_QUEUES}) AND {_ROOM}")
ENQUEUE_WRITE = LockWrite(update=fair.ENQUEUE.update, condition=f"NOT (({_ALL_FREE}) AND {_NOBODY_QUEUES})")

#: GRANT_READ: admit the reader ``#reader`` as ticket ``:ticket`` (``:prev`` = ``:ticket`` - 1),
#: by whoever may pass the head - its holder ``:me`` (a writer, freed by this write), anyone
#: while no writer holds - or the reader itself (``:me``, the head). ``:entry``: a claim-window
#: lease for a reader woken by a handoff, its own lease when it admits itself. Refused at
#: :data:`MAX_READERS` readers (the handoff stops; the reader, the head, is refused
#: ``Lock.TooManyReaders`` at its next look).
GRANT_READ = LockWrite(
    update=f"SET {', '.join(_SHARE)}, #{SERVED} = :ticket REMOVE {', '.join(_UNWRITER)} ADD #{READERS} :one",
    condition=f"attribute_not_exists({READER_PLACEHOLDER}) AND #{SERVED} = :prev AND ({_WRITER_FREE}) AND {_ROOM}",
)
#: GRANT_WRITE: the key to the writer ``:next`` as ticket ``:ticket`` (the head itself:
#: ``:next`` = ``:me``), free of readers and writers (or mine: a writer handing over). ``:expiresAt``:
#: a claim-window lease for a woken writer, its own lease for the head itself. ``ALL_NEW``: the
#: fence.
GRANT_WRITE = LockWrite(
    update=(
        f"SET #{OWNER} = :next, #{ACQUIRED_AT} = :now, #{EXPIRES_AT} = :expiresAt, #{GRACE} = :grace, "
        f"#{SERVED} = :ticket ADD #{FENCE} :one"
    ),
    condition=f"#{SERVED} = :prev AND ({_ALL_FREE})",
)
#: SKIP: pass over ticket ``:ticket`` (its waiter is gone) - its holder (a writer) or anyone
#: while no writer holds.
SKIP = LockWrite(update=f"SET #{SERVED} = :ticket", condition=f"#{SERVED} = :prev AND ({_WRITER_FREE})")
#: CLAIM_READ: my entry exists (granted, or mine from an earlier attempt whose response was
#: lost, or a redriven reader's) -> my own lease on it. Also a reader's REFRESH.
CLAIM_READ = LockWrite(update=f"SET {READER_PLACEHOLDER} = :entry", condition=f"attribute_exists({READER_PLACEHOLDER})")
#: CLAIM_WRITE: the writer ``:me`` granted ticket ``:ticket`` takes its own lease.
CLAIM_WRITE = LockWrite(update=f"SET #{EXPIRES_AT} = :expiresAt",
                        condition=f"#{OWNER} = :me AND #{SERVED} = :ticket")

_DROP_ENTRY = f"REMOVE {READER_PLACEHOLDER} ADD #{READERS} :minusOne"
#: The last entry's removal ends the shared hold too: no write ever leaves a shared hold with no
#: reader (a plain mutex cannot see a reader count, and nothing would end it).
_DROP_LAST = f"REMOVE {READER_PLACEHOLDER}, #{OWNER} ADD #{READERS} :minusOne"
_OTHERS, _LAST = f"#{READERS} > :one", f"#{READERS} = :one"
#: LEAVE_READ: my entry goes, other readers stay. LEAVE_LAST: my entry goes and with it the
#: shared hold (``ALL_NEW``: I run the handoff from ``served``). Values ``:one``, ``:minusOne``.
#: Refused: the other one holds (the item says which), or my entry is gone - reaped
#: (``Lock.Lost``), or by my own earlier attempt if this is a retry.
LEAVE_READ = LockWrite(update=_DROP_ENTRY, condition=f"attribute_exists({READER_PLACEHOLDER}) AND {_OTHERS}")
LEAVE_LAST = LockWrite(update=_DROP_LAST, condition=f"attribute_exists({READER_PLACEHOLDER}) AND {_LAST}")
#: REAP_READ / REAP_LAST: a reader entry whose lease is over goes (as LEAVE_READ / LEAVE_LAST).
_OVER = f"{READER_PLACEHOLDER}.#{EXPIRES_AT} < :now"
REAP_READ = LockWrite(update=_DROP_ENTRY, condition=f"{_OVER} AND {_OTHERS}")
REAP_LAST = LockWrite(update=_DROP_LAST, condition=f"{_OVER} AND {_LAST}")


#: FREE_EMPTY: a shared hold with no reader entry left ends (``owner`` removed). No write of
#: this module leaves one (the last entry's removal ends the hold in the same write), but an
#: item the first protocol's two-write leave (``LEAVE_READ`` then ``FREE_SHARED``) left so
#: would refuse a plain mutex for ever: a plain mutex waiter's liveness check frees it (this
#: module's writers count it free: ``_ALL_FREE``). Values ``:shared``, ``:zero``.
FREE_EMPTY = LockWrite(
    update=f"REMOVE #{OWNER}",
    condition=f"#{OWNER} = :shared AND (attribute_not_exists(#{READERS}) OR #{READERS} = :zero)",
)


def leave_write(readers: int, *, reap: bool = False) -> LockWrite:
    """The write that removes one entry of a lock item counting ``readers`` (a reader's own
    leave, or ``reap``: an expired one's removal): the last one's ends the shared hold."""
    if reap:
        return REAP_LAST if readers <= 1 else REAP_READ
    return LEAVE_LAST if readers <= 1 else LEAVE_READ

#: A reader's leave whose write was refused this many times in a row, each time after a read of
#: the count (another reader entered or left between my read and my write: LEAVE_READ and
#: LEAVE_LAST condition on the count), stops trying: it RETIREs its entry at now (the entry ends
#: its stop grace from now, and is reaped then as a stopped reader's: REAP_READ / REAP_LAST) and
#: the release ends as if done. Without the cap, readers whose count moves between every read
#: and write of mine would keep the loop going (a livelock) to the history limit. A round costs
#: about 12 history events (a refused write, the read, the choice): 240 at the cap.
MAX_LEAVE_ROUNDS = 20
#: RETIRE_READER: the reader's execution ended at ``:endedAt``: its entry now lasts its stop
#: grace from then (janitor, liveness check) - that acquisition only.
RETIRE_READER = LockWrite(
    update=f"SET {READER_PLACEHOLDER}.#{EXPIRES_AT} = :endedAt + {READER_PLACEHOLDER}.#{GRACE}",
    condition=f"{READER_PLACEHOLDER}.#{ACQUIRED_AT} <= :endedAt",
)
#: A writer's release is the mutex's RELEASE. A retry whose first attempt was applied may be
#: refused (readers or a writer entered since): as for the mutex and the fair lock, only a
#: refused *first* attempt is ``Lock.Lost``.
RELEASE_WRITE = RELEASE

#: A fenced write by a writer (a ``ConditionCheck`` on the lock item beside the record's own
#: ``lastFence < :fence``): I hold it, with that fence. No reader is ever the owner.
FENCED_WRITE_CHECK = LockWrite(update="", condition=f"#{OWNER} = :me AND #{FENCE} = :fence")

# --------------------------------------------------------------------------------------
# 4. The writes on rows
# --------------------------------------------------------------------------------------

#: PARK (a row, in a transaction with :data:`PARK_UNLESS`): my token and kind, unless I left.
#: A hole mark of a helper is cleared (I am no hole). Values ``:me``, ``:token``, ``:lease``,
#: ``:grace``, ``:kind``.
PARK = LockWrite(update=_update(fair.PARK.update, set_=[f"#{KIND} = :kind"], remove=[f"#{READY}"]),
                 condition=f"attribute_not_exists(#{LEFT})")
#: The park's ConditionCheck on the lock item, by kind: ticket ``:ticket`` was not passed, and
#: may not be admitted now. Values: the kind's free condition's, ``:ticket``, ``:prev``.
PARK_UNLESS = {kind: LockWrite(update="", condition=f"#{SERVED} < :ticket AND NOT (#{SERVED} = :prev AND ({free}))")
               for kind, free in _FREE.items()}
#: MARK (a helper, at a ticket whose row never came) and LEAVE (a waiter giving up) are the
#: fair lock's.
MARK, LEAVE = fair.MARK, fair.LEAVE
#: DEQUEUE (the janitor, for a stopped waiter; the parks it finds: ``fair_protocol.
#: enqueues_in_history``): LEAVE, but only on the row that waiter parked on - never a row a
#: claim or a requeue deleted since (an item nobody would ever read or delete). Values ``:me``,
#: ``:one``.
DEQUEUE = LockWrite(update=LEAVE.update, condition=f"#{OWNER} = :me")

# --------------------------------------------------------------------------------------
# 4b. Presence (a cancelled holder's branch): one row per hold
# --------------------------------------------------------------------------------------

#: A hold's presence row: this prefix + its owner (``<execution ARN>#<uuid>``: one section
#: entry, so one key and one hold at a time - a redrive's new acquisition of the same owner
#: is told from the old by ``acquiredAt``). The ``!`` keeps it out of the stored keys (those
#: start with a namespace, which has no ``!``) and out of ``locks list``, like a queue row;
#: its length does not depend on the lock key (an owner is at most ~250 bytes).
#:
#: Why a row and not the lock item (the mutex's PRESENT): a task token is ~700+ bytes with
#: AWS-sized tokens - one per reader on the one lock item would add ~1 KB per concurrent
#: reader to every write's units and reach the 400 KB item limit at a few hundred readers.
#: A writer uses a row too: one mechanism for both, and a writer's token never stays on the
#: lock item under the shared hold that follows it.
PRESENCE_ROW_MARK = "!presence!"


def presence_row_key(owner: str) -> str:
    """The presence row of the hold ``owner``."""
    return f"{PRESENCE_ROW_MARK}{owner}"


def presence_row_key_expression(owner: str) -> str:
    """JSONata: :func:`presence_row_key` of the owner the expression evaluates to."""
    return f"'{PRESENCE_ROW_MARK}' & ({owner})"


#: The acquisition ``:acquiredAt`` has not departed (its row's mark is older, or absent).
_NOT_DEPARTED = f"(attribute_not_exists(#{PRESENCE_CLOSED}) OR #{PRESENCE_CLOSED} < :acquiredAt)"
#: PRESENT_ROW: the hold's presence branch registers its callback task's token (a
#: ``.waitForTaskToken`` UpdateItem that parks until the work is over: the mutex's PRESENT on
#: a row of its own), never after this acquisition departed (:data:`DEPART_ROW`). It may
#: overwrite an earlier token of the same acquisition (a retried registration: that token is
#: closed) or of an earlier acquisition of the owner (a redrive). Values ``:token``,
#: ``:acquiredAt``, ``:now``.
PRESENT_ROW = LockWrite(
    update=f"SET #{PRESENCE} = :token, #{PRESENCE_OF} = :acquiredAt, #{PRESENCE_AT} = :now",
    condition=_NOT_DEPARTED,
)
#: DEPART_ROW: the work is over (or the registration could not be ruled in): no token may be
#: registered for this acquisition any more; the one registered before, if any, is read after
#: it and its branch dismissed (the mutex's DEPART, on the row: the two writes are on one item,
#: so whichever comes first the other sees it). Never moves the mark back. Values
#: ``:acquiredAt``.
DEPART_ROW = LockWrite(
    update=f"SET #{PRESENCE_CLOSED} = :acquiredAt",
    condition=f"attribute_not_exists(#{PRESENCE_CLOSED}) OR #{PRESENCE_CLOSED} <= :acquiredAt",
)
#: GONE_ROW (a conditional Delete, in :func:`gone_transaction`): the probe found the token of
#: acquisition ``:acquiredAt`` closed (``SendTaskHeartbeat``: ``TaskTimedOut``), it is still
#: the row's token, that acquisition never departed, and the token is older than the mutex's
#: ``PRESENCE_SETTLE_MS`` (a younger closed token may be a failed registration attempt, whose
#: retry or DEPART_ROW follows within that time): its branch ended without releasing. Values
#: ``:token``, ``:acquiredAt``, ``:settledBefore``.
GONE_ROW = LockWrite(
    update="",
    condition=(
        f"#{PRESENCE} = :token AND #{PRESENCE_OF} = :acquiredAt AND #{PRESENCE_AT} <= :settledBefore "
        f"AND {_NOT_DEPARTED}"
    ),
)
#: RETIRE_GONE_READER / RETIRE_GONE_WRITER (beside GONE_ROW, in one transaction): that exact
#: acquisition's lease now ends at ``:until`` (the probe's now + its stop grace: work the
#: branch started may still run), only if that is sooner - a retire never lengthens a lease,
#: and a second probe of the same token is refused (the row is gone anyway). The janitor
#: retires with the same writes (``:until``: the execution's end + the grace it read). Values
#: ``:acquiredAt``, ``:until`` (and the writer's ``:owner``).
RETIRE_GONE_READER = LockWrite(
    update=f"SET {READER_PLACEHOLDER}.#{EXPIRES_AT} = :until",
    condition=f"{READER_PLACEHOLDER}.#{ACQUIRED_AT} = :acquiredAt AND {READER_PLACEHOLDER}.#{EXPIRES_AT} > :until",
)
RETIRE_GONE_WRITER = RETIRE_BY  # (the mutex's write; the janitor's for a writer too)
#: FORGET_ROW (a conditional Delete: the janitor's): the presence row an execution that ended
#: without releasing left behind (its hold never reached the delete after the hold), unless a
#: token was registered on it after the end ``:endedAt`` (a redriven hold's). Only after the
#: janitor retired the execution's holds: a row only ever lets a probe *shorten* a lease, so
#: deleting it never admits anyone; a registration still in flight at the end that lands after
#: the delete leaves a row whose token is closed (a probe's GONE_ROW removes it). Values
#: ``:endedAt``.
FORGET_ROW = LockWrite(
    update="",
    condition=f"attribute_not_exists(#{PRESENCE_AT}) OR #{PRESENCE_AT} <= :endedAt",
)
PRESENCE_WRITES = {"PRESENT_ROW": PRESENT_ROW, "DEPART_ROW": DEPART_ROW, "GONE_ROW": GONE_ROW,
                   "RETIRE_GONE_READER": RETIRE_GONE_READER, "RETIRE_GONE_WRITER": RETIRE_GONE_WRITER,
                   "FORGET_ROW": FORGET_ROW}


def gone_transaction(table: str, key: str, row: str, *, reader: str | None, row_values: Mapping[str, Any],
                     lock_values: Mapping[str, Any]) -> list[dict]:
    """TransactItems of a probe's retire of a hold whose presence token is closed, all or
    nothing: the presence row ``row``'s conditional Delete (:data:`GONE_ROW`) and the lock item
    ``key``'s retire of that acquisition - :data:`RETIRE_GONE_READER` on the entry of
    ``reader``, else :data:`RETIRE_GONE_WRITER` (JSONata templates allowed in all)."""
    delete = fair.delete_arguments(row, GONE_ROW, row_values)
    del delete["ReturnValues"]
    update = arguments(key, RETIRE_GONE_READER if reader is not None else RETIRE_GONE_WRITER, lock_values,
                       reader=reader)
    del update["ReturnValues"]
    return [{"Delete": {"TableName": table, **delete}}, {"Update": {"TableName": table, **update}}]


LOCK_WRITES = {
    "FAST_READ": FAST_READ, "FAST_WRITE": FAST_WRITE, "ENQUEUE_READ": ENQUEUE_READ, "ENQUEUE_WRITE": ENQUEUE_WRITE,
    "GRANT_READ": GRANT_READ, "GRANT_WRITE": GRANT_WRITE, "SKIP": SKIP, "CLAIM_READ": CLAIM_READ,
    "CLAIM_WRITE": CLAIM_WRITE, "LEAVE_READ": LEAVE_READ, "LEAVE_LAST": LEAVE_LAST, "REAP_READ": REAP_READ,
    "REAP_LAST": REAP_LAST,
    "RETIRE_READER": RETIRE_READER, "RELEASE_WRITE": RELEASE_WRITE,
}
ROW_WRITES = {"PARK": PARK, "MARK": MARK, "LEAVE": LEAVE, "DEQUEUE": DEQUEUE}


# --------------------------------------------------------------------------------------
# 5. Requests (all but the table name) and readings in Python
# --------------------------------------------------------------------------------------


def arguments(key: str, write: LockWrite, values: Mapping[str, Any], *, reader: str | None = None,
              return_values: str = "NONE") -> dict:
    """UpdateItem arguments for ``write`` on the item ``key``; ``reader``: the owner whose entry
    ``#reader`` names (JSONata templates allowed in all)."""
    args = fair.arguments(key, write, values, return_values=return_values)
    names = args["ExpressionAttributeNames"]
    if READER_PLACEHOLDER in names:
        if reader is None:
            raise AssertionError(f"{write} touches a reader entry: say whose")
        names[READER_PLACEHOLDER] = reader_attribute(reader)
    if not write.update:  # a ConditionCheck
        del args["UpdateExpression"], args["ReturnValues"]
    return args


def park_transaction(table: str, key: str, ticket: int, kind: str, row_values: Mapping[str, Any],
                     lock_values: Mapping[str, Any]) -> list[dict]:
    """TransactItems of a park: the row ``!<ticket>!key`` and the lock item's check."""
    check = arguments(key, PARK_UNLESS[kind], lock_values)
    update = arguments(row_key(key, ticket), PARK, {**row_values, ":kind": {"S": kind}})
    del update["ReturnValues"]
    return [{"ConditionCheck": {"TableName": table, **check}}, {"Update": {"TableName": table, **update}}]


def readers_of(item: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The reader entries of a lock item as boto3 returns it: owner -> ``{expiresAt, ...}``."""
    return {name[len(READER_PREFIX):]: value["M"] for name, value in item.items() if name.startswith(READER_PREFIX)}


def too_many_readers(item: Mapping[str, Any]) -> bool:
    """A lock item (as boto3 returns it) with no room for another reader (:data:`MAX_READERS`)."""
    return int(item.get(READERS, {}).get("N", "0")) >= MAX_READERS


def expired_readers(item: Mapping[str, Any], *, now: int) -> list[str]:
    """The readers whose entry's lease is over (REAP_READ / REAP_LAST may remove them)."""
    return [owner for owner, entry in readers_of(item).items() if int(entry[EXPIRES_AT]["N"]) < now]


def workflow_holds(item: Mapping[str, Any], *, me: str, now: int) -> list[tuple[str, bool, Mapping[str, Any]]]:
    """The holds of executions a waiter ``me`` finds on a lock item (as boto3 returns it) and may
    check the liveness of - the Python reading of ``shared_kind``'s suspect (the waiters'
    fallback): the writer holder, an execution's acquisition not mine; else the reader entries
    of executions whose lease runs at ``now`` (sorted by owner: checked in turn). Each: (owner,
    a reader's entry?, the hold - its entry, or the lock item - with ``expiresAt``,
    ``acquiredAt``, ``grace``)."""
    owner = item.get(OWNER, {}).get("S", "")
    if owner and owner not in (SHARED, me) and owner_execution(owner) is not None:
        return [(owner, False, item)] if ACQUIRED_AT in item and EXPIRES_AT in item else []
    return [(reader, True, entry) for reader, entry in sorted(readers_of(item).items())
            if owner_execution(reader) is not None and int(entry[EXPIRES_AT]["N"]) >= now]


def row_kind(row: Mapping[str, Any] | None) -> str:
    """What a row's waiter wants (a row without a kind is a writer's)."""
    return ((row or {}).get(KIND) or {}).get("S", WRITE)



def presence_rows_in_history(tasks: Iterable[ScheduledTask], *, table_name: str) -> list[str]:
    """The presence rows (their keys) an execution wrote on ``table_name``: its holds'
    registrations (PRESENT_ROW, a ``.waitForTaskToken`` UpdateItem) and departures
    (DEPART_ROW, which writes the row too when no registration did). The janitor deletes them
    (:data:`FORGET_ROW`) once it has retired the execution's holds."""
    conditions = (PRESENT_ROW.condition, DEPART_ROW.condition)
    found: dict[str, None] = {}
    for task in tasks:
        p = task.parameters
        if task.resource.split(".")[0] != "updateItem" or p.get("TableName") != table_name:
            continue
        (key,) = p["Key"].values()
        if p.get("ConditionExpression") in conditions and key["S"].startswith(PRESENCE_ROW_MARK):
            found[key["S"]] = None
    return list(found)


def holds_in_history(tasks: Iterable[ScheduledTask], *, table_name: str) -> list[tuple[str, str, str]]:
    """``(stored key, owner, READ or WRITE)`` of every hold an execution *attempted for itself*
    on ``table_name`` that the mutex's ``acquisitions_in_history`` does not find: a reader's
    entry (``FAST_READ``, a ``GRANT_READ`` admitting itself, ``CLAIM_READ``) and a woken
    writer's ``CLAIM_WRITE``. The janitor retires them (``RETIRE_READER`` / the mutex's
    RETIRE) when the execution ended without leaving. A ``GRANT_READ`` this execution ran for
    *another* reader (a handoff) is not its hold and is not listed."""
    found: dict[tuple[str, str, str], None] = {}
    for task in tasks:
        p = task.parameters
        if task.resource != "updateItem" or p.get("TableName") != table_name:
            continue
        condition, values = p.get("ConditionExpression"), p.get("ExpressionAttributeValues") or {}
        (key,) = p["Key"].values()
        if condition in (FAST_READ.condition, GRANT_READ.condition, CLAIM_READ.condition):
            owner = str((p.get("ExpressionAttributeNames") or {}).get(READER_PLACEHOLDER, ""))[len(READER_PREFIX):]
            if owner and (condition != GRANT_READ.condition or values.get(":me", {}).get("S") == owner):
                found[(key["S"], owner, READ)] = None
        elif condition == CLAIM_WRITE.condition:
            found[(key["S"], values[":me"]["S"], WRITE)] = None
    return list(found)
