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
gone (``kinds.shared_hold.shared_hold_sweep``): it reads the whole lock item, reaps an expired entry
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

Every write is spelled once, in this module's parts (below). ``tests/protocol/test_shared_model.py``
model-checks the steps (every interleaving of 3 participants, crashes, lost responses, failed
wake-ups, park timeouts, expiring leases); ``test_shared_model_writes.py`` checks the model's
reading of each write against DynamoDB.

This module is the protocol's front: every name above imports from here. Its parts live beside
it, one concern each: :mod:`shared_hold` (the attributes, the conditions, the writes that end a
hold, the requests and readings of the readers), :mod:`shared_queue` (the fast paths, the
tickets, grants and claims, the park and the janitor's dequeue) and :mod:`shared_presence` (a
hold's presence row).
"""

from __future__ import annotations

from locked_workflow.state_machines.shared_hold import (  # noqa: F401 - re-exported
    SHARED,
    READERS,
    READER_PREFIX,
    KIND,
    READ,
    WRITE,
    READER_PLACEHOLDER,
    MAX_READERS,
    MAX_READERS_VALUES,
    reader_attribute,
    reader_attribute_expression,
    entry_value,
    LEAVE_READ,
    LEAVE_LAST,
    REAP_READ,
    REAP_LAST,
    FREE_EMPTY,
    leave_write,
    MAX_LEAVE_ROUNDS,
    RETIRE_READER,
    RELEASE_WRITE,
    FENCED_WRITE_CHECK,
    arguments,
    readers_of,
    too_many_readers,
    expired_readers,
    workflow_holds,
)
from locked_workflow.state_machines.shared_queue import (  # noqa: F401 - re-exported
    FAST_READ,
    FAST_WRITE,
    ENQUEUE_READ,
    ENQUEUE_WRITE,
    GRANT_READ,
    GRANT_WRITE,
    SKIP,
    CLAIM_READ,
    CLAIM_WRITE,
    PARK,
    PARK_UNLESS,
    MARK,
    LEAVE,
    DEQUEUE,
    park_transaction,
    row_kind,
    holds_in_history,
)
from locked_workflow.state_machines.shared_presence import (  # noqa: F401 - re-exported
    PRESENCE_ROW_MARK,
    presence_row_key,
    presence_row_key_expression,
    PRESENT_ROW,
    DEPART_ROW,
    GONE_ROW,
    RETIRE_GONE_READER,
    RETIRE_GONE_WRITER,
    FORGET_ROW,
    PRESENCE_WRITES,
    gone_transaction,
    presence_rows_in_history,
)

LOCK_WRITES = {
    "FAST_READ": FAST_READ, "FAST_WRITE": FAST_WRITE, "ENQUEUE_READ": ENQUEUE_READ, "ENQUEUE_WRITE": ENQUEUE_WRITE,
    "GRANT_READ": GRANT_READ, "GRANT_WRITE": GRANT_WRITE, "SKIP": SKIP, "CLAIM_READ": CLAIM_READ,
    "CLAIM_WRITE": CLAIM_WRITE, "LEAVE_READ": LEAVE_READ, "LEAVE_LAST": LEAVE_LAST, "REAP_READ": REAP_READ,
    "REAP_LAST": REAP_LAST,
    "RETIRE_READER": RETIRE_READER, "RELEASE_WRITE": RELEASE_WRITE,
}
ROW_WRITES = {"PARK": PARK, "MARK": MARK, "LEAVE": LEAVE, "DEQUEUE": DEQUEUE}
