"""An executable model of the shared/exclusive lock (state_machines/shared_protocol.py) for
exhaustive exploration: the lock item (owner, shared hold, reader count and entries, fence,
ticket counters) and one row per ticket; readers and writers (and, optionally, a plain mutex
running lock_protocol's ACQUIRE/RELEASE and its sweep of a shared hold) taking the fast path, a ticket, a transactional
park, the handoff (read the next row; grant, wake, go on for readers; skip; stop), claims,
the last reader's handoff, reaping an expired reader entry, the park's fallback and the
handoff it runs for a head that does not move; crashes at every step, lost responses on
every write, wake-ups delivered with their answer lost (``lost_wakes``: the waker sees a
failure), failed wake-ups, park timeouts, the janitor marking a stopped waiter's row
``left`` (``janitor=False``: its events lost), and time passing (a dead holder's lease or
reader entry ending - the lease, or the janitor's or liveness check's retire - a hole's mark
ageing).

The writes read the items as the real expressions do; ``test_shared_model`` checks each
against DynamoDB itself. The exploration, the fault vocabulary, the lost-response rule (one
per participant; a lost response means the write was applied), the voiding of a re-parked
waiter's earlier tokens and the fair lock's row writes (MARK, LEAVE) and row reading come
from ``fair_model``.

Timing assumptions (as the fair model's): a live participant's lease never ends during its
run (leases end only for the dead); a live waiter claims a grant within its claim window, so
a claim-window lease ends only for a dead grantee; a hole's mark ages only while no live
waiter holds that ticket between its ticket and its park.

Variants (negative controls) break one rule each: ``read_ignores_queue`` (a fast reader does
not wait for a queued writer), ``write_ignores_readers`` (a writer counts a shared hold as
free), ``park_unchecked`` (the park does not check the lock item), ``no_cascade`` (a handoff
stops after the first reader it grants), ``leave_no_handoff`` (the last reader to leave runs
no handoff), ``release_then_stop`` (a writer that read an empty row releases and stops: the
first version of the protocol, whose lost wake-up the model found), ``revoke_failed_wake`` (a
waker that saw its wake-up fail takes the grant back: wrong when only the answer was lost - the
model's Step Functions fault), ``free_after_leave`` (the last
reader's leave keeps the shared hold and a FREE_SHARED of its own ends it: the first version,
whose shared hold with no reader - no entry, no lease - a reader stopped between the two left to
refuse a plain mutex forever), ``sweep_ignores_lease`` (the plain mutex's sweep of a shared hold
reaps a reader entry whose lease is not over).

:func:`explore_presence` (apart from the rest): one read/write hold's presence handshake
(``PRESENT_ROW`` / ``DEPART_ROW`` / dismissal) against a waiter's probe and its retire
transaction, with the variants ``settle_unchecked``, ``token_unchecked`` and
``departure_unchecked``.

``symmetry`` explores one of each pair of states that differ only by swapping two
participants of one kind; :func:`explore_held_as_bytes` holds states as bytes, for the runs
with every fault (``python tests/protocol/shared_model.py``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, fields, replace
from typing import Iterator, Optional

from fair_model import FAULT
from fair_model import Model as FairModel
from fair_model import State as FairState
from fair_model import Row, _n, acquire_ok, nobody_queues, release, row_state
from fair_model import leave as leave_row
from fair_model import mark as mark_row
from locked_workflow.state_machines.shared_protocol import READ, SHARED, WRITE

#: Kinds of participants: a reader, a writer (both of this protocol), a plain mutex.
KINDS = {"r": READ, "w": WRITE, "m": "mutex"}
#: Labels of steps that a batch admission must not need (besides faults).
NOT_FOR_BATCH = ("leaves the work", "park times out")


def hashed_once(cls):
    """A frozen dataclass whose hash is computed once per object: states share most of their
    parts, and the exploration hashes every state it meets."""
    computed = cls.__hash__

    def __hash__(self) -> int:
        try:
            return self.__dict__["_hash"]
        except KeyError:
            object.__setattr__(self, "_hash", computed(self))
            return self.__dict__["_hash"]

    cls.__hash__ = __hash__
    return cls


def renew(obj, **changes):
    """``dataclasses.replace`` for these frozen dataclasses, without its ``__init__`` round trip
    (the exploration's hottest call)."""
    if not changes.keys() <= obj.__dataclass_fields__.keys():
        raise TypeError(f"{type(obj).__name__} has no {set(changes) - set(obj.__dataclass_fields__)}")
    new = object.__new__(type(obj))
    values = new.__dict__
    values.update(obj.__dict__)
    values.pop("_hash", None)
    values.update(changes)
    return new


@hashed_once
@dataclass(frozen=True)
class Lock:
    owner: Optional[str] = None   # a writer, SHARED, or None
    expired: bool = False         # the writer's lease is over (a shared hold has none)
    fence: int = 0
    served: Optional[int] = None
    tickets: Optional[int] = None
    readers: Optional[int] = None  # the count attribute
    entries: tuple = ()           # sorted (reader, lease over)

    def entry(self, reader: str) -> Optional[bool]:
        """None: no entry; else whether its lease is over."""
        return dict(self.entries).get(reader)

    def with_entry(self, reader: str, over: Optional[bool]) -> "Lock":
        """The entry of ``reader`` set (``over``: its lease is over) or, with None, removed."""
        kept = tuple((r, o) for r, o in self.entries if r != reader)
        return replace(self, entries=tuple(sorted(kept + (((reader, over),) if over is not None else ()))))


@hashed_once
@dataclass(frozen=True)
class KindRow(Row):
    kind: Optional[str] = None


def dequeue_row(row: Optional[Row], me: str) -> tuple[bool, Optional[Row]]:
    """DEQUEUE (the janitor): LEAVE, only on a row that waiter parked on (never a new row)."""
    if row is None or row.owner != me:
        return False, row
    return leave_row(row, me)


def as_kind_row(row: Optional[Row]) -> KindRow:
    if isinstance(row, KindRow):
        return row
    return KindRow(**{f.name: getattr(row, f.name) for f in fields(Row)}) if row else KindRow()


# -- the writes: (condition holds, item after) ------------------------------------------------


def writer_free(lock: Lock, me: str, stale: str) -> bool:
    return acquire_ok(lock, me, stale) or lock.owner == SHARED


def all_free(lock: Lock, me: str, stale: str, variant: str = "") -> bool:
    shared_free = lock.readers == 0 or variant == "write_ignores_readers"
    return acquire_ok(lock, me, stale) or (lock.owner == SHARED and shared_free)


def free_for(kind: str, lock: Lock, me: str, stale: str, variant: str = "") -> bool:
    return writer_free(lock, me, stale) if kind == READ else all_free(lock, me, stale, variant)


def _share(lock: Lock, reader: str, **more) -> Lock:
    return replace(lock, owner=SHARED, expired=False, readers=_n(lock.readers) + 1, **more).with_entry(reader, False)


def _drop(lock: Lock, reader: str, *, last: bool = False, variant: str = "") -> Lock:
    """``reader``'s entry removed; ``last``: the last one, which ends the shared hold (but in
    ``free_after_leave``, the first protocol's: a FREE_SHARED of its own follows)."""
    dropped = replace(lock, readers=_n(lock.readers) - 1).with_entry(reader, None)
    return replace(dropped, owner=None) if last and variant != "free_after_leave" else dropped


def fast_read(lock: Lock, me: str, stale: str, variant: str = "") -> tuple[bool, Lock]:
    queue_ok = variant == "read_ignores_queue" or nobody_queues(lock)
    ok = lock.entry(me) is None and writer_free(lock, me, stale) and queue_ok
    return ok, (_share(lock, me) if ok else lock)


def fast_write(lock: Lock, me: str, stale: str, variant: str = "") -> tuple[bool, Lock]:
    ok = lock.owner == me or (all_free(lock, me, stale, variant) and nobody_queues(lock))
    return ok, (replace(lock, owner=me, expired=False, fence=lock.fence + 1) if ok else lock)


def enqueue(lock: Lock, kind: str, me: str, stale: str, variant: str = "") -> tuple[bool, Lock]:
    ok = not (free_for(kind, lock, me, stale, variant) and nobody_queues(lock))
    return ok, (replace(lock, tickets=_n(lock.tickets) + 1, served=_n(lock.served)) if ok else lock)


def grant_read(lock: Lock, me: str, stale: str, nxt: str, prev: int) -> tuple[bool, Lock]:
    ok = lock.entry(nxt) is None and lock.served is not None and lock.served == prev and writer_free(lock, me, stale)
    return ok, (_share(lock, nxt, served=prev + 1) if ok else lock)


def grant_write(lock: Lock, me: str, stale: str, nxt: str, prev: int, variant: str = "") -> tuple[bool, Lock]:
    ok = lock.served is not None and lock.served == prev and all_free(lock, me, stale, variant)
    return ok, (replace(lock, owner=nxt, expired=False, served=prev + 1, fence=lock.fence + 1) if ok else lock)


def skip(lock: Lock, me: str, stale: str, prev: int) -> tuple[bool, Lock]:
    ok = lock.served is not None and lock.served == prev and writer_free(lock, me, stale)
    return ok, (replace(lock, served=prev + 1) if ok else lock)


def claim_read(lock: Lock, me: str) -> tuple[bool, Lock]:
    ok = lock.entry(me) is not None
    return ok, (lock.with_entry(me, False) if ok else lock)


def claim_write(lock: Lock, me: str, ticket: int) -> tuple[bool, Lock]:
    ok = lock.owner == me and lock.served == ticket
    return ok, (replace(lock, expired=False) if ok else lock)


def leave_read(lock: Lock, me: str) -> tuple[bool, Lock]:
    ok = lock.entry(me) is not None and _n(lock.readers) > 1
    return ok, (_drop(lock, me) if ok else lock)


def leave_last(lock: Lock, me: str, variant: str = "") -> tuple[bool, Lock]:
    ok = lock.entry(me) is not None and lock.readers == 1
    return ok, (_drop(lock, me, last=True, variant=variant) if ok else lock)


def reap_read(lock: Lock, reader: str) -> tuple[bool, Lock]:
    ok = lock.entry(reader) is True and _n(lock.readers) > 1
    return ok, (_drop(lock, reader) if ok else lock)


def reap_last(lock: Lock, reader: str, variant: str = "") -> tuple[bool, Lock]:
    ok = lock.entry(reader) is True and lock.readers == 1
    return ok, (_drop(lock, reader, last=True, variant=variant) if ok else lock)


def free_shared(lock: Lock) -> tuple[bool, Lock]:
    ok = lock.owner == SHARED and lock.readers == 0
    return ok, (replace(lock, owner=None) if ok else lock)


def free_empty(lock: Lock) -> tuple[bool, Lock]:
    """FREE_EMPTY: a shared hold with no reader counted ends (its entries, if any, stay)."""
    ok = lock.owner == SHARED and _n(lock.readers) == 0
    return ok, (replace(lock, owner=None) if ok else lock)


def sweep_reap(lock: Lock, reader: str, variant: str = "") -> tuple[bool, Lock]:
    """The plain mutex's sweep of a shared hold reaps ``reader``'s entry: REAP_LAST if the
    lock counts one reader, else REAP_READ (``sweep_ignores_lease``: any entry, its lease over
    or not)."""
    if variant == "sweep_ignores_lease":
        ok = lock.entry(reader) is not None
        return ok, (_drop(lock, reader, last=_n(lock.readers) <= 1) if ok else lock)
    return reap_last(lock, reader, variant) if _n(lock.readers) <= 1 else reap_read(lock, reader)


def retire_reader(lock: Lock, reader: str, acquired_before_end: bool, grace_over: bool) -> tuple[bool, Lock]:
    ok = lock.entry(reader) is not None and acquired_before_end
    return ok, (lock.with_entry(reader, grace_over) if ok else lock)


def park_unless(lock: Lock, kind: str, me: str, stale: str, ticket: int, variant: str = "") -> bool:
    """The park's check of the lock item: not passed, and not admissible now."""
    if variant == "park_unchecked":
        return True
    served = lock.served
    return served is not None and served < ticket and not (served == ticket - 1 and free_for(kind, lock, me, stale))


def park(row: Optional[Row], me: str, token: tuple, kind: str) -> tuple[bool, KindRow]:
    row = as_kind_row(row)
    ok = not row.left
    return ok, (replace(row, owner=me, token=token, kind=kind, ready=None) if ok else row)


# -- the participants -------------------------------------------------------------------------

WAITING = ("enqueue", "park", "parked", "acq_head", "inspect", "claim", "reap")
HANDOFF = ("look", "taken", "recheck", "wake", "revoke")
#: The steps of a handoff and the release at its end (they read the handoff's fields).
LOOP = HANDOFF + ("mark", "release", "release_retry", "free", "m_release")


@hashed_once
@dataclass(frozen=True)
class Proc:
    pc: str = "fast"
    ticket: Optional[int] = None
    fence: int = 0
    lost: int = 0
    # the handoff: cursor (served), whether I (a writer) still hold the key, where I go after
    # it ("cs": a reader that admitted itself; "done"; "inspect": a helper), whether I saw no
    # reader left (FREE_SHARED when it stops), the row read and the grantee being woken
    c: int = 0
    holding: bool = False
    then: str = ""
    free_at_end: bool = False
    row: Optional[KindRow] = None
    nxt: Optional[str] = None


_FINISHED = {pc: Proc(pc=pc) for pc in ("done", "dead")}


@hashed_once
@dataclass(frozen=True)
class State(FairState):
    problem: str = ""      # a live participant's first release (or leave) is refused: it reports Lock.Lost
    last_fence: int = 0    # the fence of the last writer granted


@dataclass
class Model(FairModel):
    kinds: str = "rrw"
    batch: bool = False     # check that a queued reader never needs another to leave
    #: explore one of each pair of states that differ only by swapping the names of the two
    #: participants of one kind (every step and property treats them alike); traces may then
    #: swap the two names midway
    symmetry: bool = False
    #: the janitor marks a stopped waiter's row ``left`` (off: its events were lost)
    janitor: bool = True
    #: a wake-up (SendTaskSuccess) that was delivered but whose answer is lost: the waker sees a
    #: failure (one per participant, as a lost DynamoDB response; off: only real failures)
    lost_wakes: bool = True
    #: ``(name, proc) -> bool``: where a participant may crash (None: at every step)
    crash_when: Optional[object] = None
    #: a plain mutex sweeps a shared hold that refuses it (off: the mutex before its sweep)
    sweep: bool = True
    graph: dict = field(default_factory=dict)

    def names(self) -> tuple:
        """``r1``, ``r2``, ``w1``...: a participant's name says its kind."""
        if self.__dict__.get("_names", (None,))[0] != self.kinds:
            self._names = (self.kinds, tuple(f"{k}{self.kinds[:i + 1].count(k)}" for i, k in enumerate(self.kinds)))
        return self._names[1]

    @staticmethod
    def kind(name: str) -> str:
        return KINDS[name[0]]

    def initial(self) -> State:
        return State(Lock(), (), tuple(Proc(pc="acquire" if k == "m" else "fast") for k in self.kinds))

    def steps(self, s: State) -> Iterator[tuple[str, State]]:
        out = [(label, t) for label, t in super().steps(s) if not label.startswith("mark of")]
        if self.crash_when is not None:
            procs = dict(zip(self.names(), s.procs))
            out = [(label, t) for label, t in out if " crashes at " not in label
                   or self.crash_when(label.split()[0], procs[label.split()[0]])]
        dead = {n for n, p in zip(self.names(), s.procs) if p.pc == "dead"}
        for reader, over in s.lock.entries:
            if reader in dead and not over:
                out.append((f"lease of dead reader {reader} ends", replace(s, lock=s.lock.with_entry(reader, True))))
        for t, row in s.rows:
            if self.janitor and row.owner in dead and not row.left:  # the janitor: a stopped waiter's row
                out.append((f"janitor marks {row.owner}'s row {t} left", s.with_row(t, dequeue_row(row, row.owner)[1])))
            waiter = any(p.ticket == t and p.pc in WAITING for p in s.procs)
            if row.ready == "fresh" and not waiter:
                out.append((f"hole mark of {t} ages", s.with_row(t, replace(row, ready="old"))))
        out = [(label, self._canonical(t, s)) for label, t in out]
        if self.symmetry and not self.batch:
            out = [(label, self._one_of_pair(t)) for label, t in out]
        if self.batch:
            self.graph[s] = out
        return iter(out)

    @staticmethod
    def _canonical(s: State, before: State) -> State:
        """Forget what no later step reads: a finished or dead participant's fields, the
        handoff's fields outside a handoff, a waiter's fence (states that differ only there
        behave alike, and the exploration would count them twice). ``before``'s participants
        are so already."""
        procs = tuple(p if p is q else _FINISHED[p.pc] if p.pc in _FINISHED else
                      p if p.pc in LOOP + ("reap",) else
                      renew(p, c=0, holding=False, then="", free_at_end=False, row=None, nxt=None,
                            fence=p.fence if p.pc == "cs" else 0)
                      for p, q in zip(s.procs, before.procs))
        return s if procs == s.procs else renew(s, procs=procs)

    def _one_of_pair(self, s: State) -> State:
        names = self.names()
        twins = [n for n in names if any(o != n and o[0] == n[0] for o in names)]
        if len(twins) != 2:
            return s
        t = self._swap(s, dict(zip(twins, reversed(twins))))
        return s if hash(s) <= hash(t) else t

    def _swap(self, s: State, to: dict) -> State:
        """``s`` with the names in ``to`` renamed (the participants trade places)."""
        name = lambda n: to.get(n, n)  # noqa: E731

        def row(r):
            if r is None:
                return None
            return replace(r, owner=name(r.owner), token=r.token and (name(r.token[0]), r.token[1]))

        lock = replace(s.lock, owner=name(s.lock.owner), entries=tuple(sorted((name(r), o) for r, o in s.lock.entries)))
        order = [self.names().index(name(n)) for n in self.names()]
        procs = [None] * len(s.procs)
        for i, q in enumerate(s.procs):
            procs[order[i]] = q if q.pc in _FINISHED else replace(q, nxt=name(q.nxt), row=row(q.row))
        return replace(s, lock=lock, rows=tuple((t, row(r)) for t, r in s.rows), procs=tuple(procs))

    # -- helpers ----------------------------------------------------------------------------

    def granted(self, lock: Lock, name: str, ticket: Optional[int] = None) -> bool:
        """``name`` holds a grant (confirmed or not) on ``lock``."""
        if self.kind(name) == READ:
            return lock.entry(name) is not None
        return lock.owner == name and (ticket is None or lock.served == ticket)

    def _note_grant(self, s: State, name: str, ticket: Optional[int]) -> State:
        """A grant to ``name`` (of ``ticket``; None: a fast path) was written: it must pass no
        live queued waiter (with a ticket, not granted) that arrived before it."""
        passed = [f"{n} ({self.kind(n)})" for n, p in zip(self.names(), s.procs)
                  if n != name and self.kind(n) != "mutex" and p.pc in WAITING and p.ticket is not None
                  and (ticket is None or p.ticket < ticket) and not self.granted(s.lock, n, p.ticket)]
        if self.kind(name) == WRITE:
            problem = "" if s.lock.fence > s.last_fence else f"fence of {name} did not increase"
            s = replace(s, last_fence=s.lock.fence, problem=s.problem or problem)
        return replace(s, overtake=s.overtake or (f"{name} ({self.kind(name)}) overtook {passed}" if passed else ""))

    def _write(self, s, i, me, p, label, ok, after, on_ok, on_refused, on_lost=None, grant=None):
        """fair_model's write (ok / refused / response lost), plus: ``on_lost`` (what a lost
        response leads to, default: the same write again) and ``grant`` ((name, ticket) whose
        grant this write makes: noted whether or not its response arrives)."""
        if ok and grant is not None:
            after = self._note_grant(after, *grant)
        for step, t in super()._write(s, i, me, p, label, ok, after, on_ok, on_refused):
            yield step, (on_lost(t) if on_lost is not None and step.endswith("response lost") else t)

    def _set(self, s: State, i: int, p: Proc) -> State:
        return renew(s, procs=s.procs[:i] + (p,) + s.procs[i + 1:])

    @staticmethod
    def _lock_lost(s: State, me: str) -> State:
        """A live holder's first release (or leave) refused: it would fail with Lock.Lost."""
        return replace(s, problem=s.problem or f"{me}'s release is refused: Lock.Lost")

    def _enter(self, i: int, pc: str = "cs", **kw):
        """Admitted: to ``pc`` (the work, or a reader's handoff before it) with the key's fence."""
        return lambda t: self._set(t, i, renew(t.procs[i], pc=pc, fence=t.lock.fence, **kw))

    # -- the steps --------------------------------------------------------------------------

    def _step(self, s: State, i: int, me: str, p: Proc, stale: str):
        v, kind, lock = self.variant, self.kind(me), s.lock
        go = lambda pc, **kw: (lambda t: self._set(t, i, renew(t.procs[i], pc=pc, **kw)))  # noqa: E731
        w = lambda label, ok, after, on_ok, on_refused, **kw: self._write(  # noqa: E731
            s, i, me, p, label, ok, after if isinstance(after, State) else replace(s, lock=after), on_ok, on_refused,
            **kw)
        if p.pc in ("acquire", "m_release"):
            yield from self._mutex_step(s, i, me, p, stale, go, w)
        elif p.pc == "fast":
            if kind == READ:
                ok, after = fast_read(lock, me, stale, v)
                yield from w("fast read", ok, after, self._enter(i), go("enqueue"), on_lost=go("rejoin"),
                             grant=(me, None))
            else:
                ok, after = fast_write(lock, me, stale, v)
                yield from w("fast write", ok, after, self._enter(i, ticket=_n(lock.served)), go("enqueue"),
                             grant=(me, None) if lock.owner != me else None)
        elif p.pc == "rejoin":  # a fast read whose response was lost: is my entry there?
            ok, after = claim_read(lock, me)
            yield from w("rejoin", ok, after, self._enter(i), go("fast"))
        elif p.pc == "enqueue":
            ok, after = enqueue(lock, kind, me, stale, v)
            yield from w("enqueue", ok, after, go("park", ticket=after.tickets), go("fast"))
        elif p.pc == "park":
            t = self._void_tokens(s, me)  # my earlier parks' tokens are void now
            ok, row = park(t.row(p.ticket), me, (me, "current"), kind)
            ok = ok and park_unless(lock, kind, me, stale, p.ticket, v)
            yield from w("park", ok, t.with_row(p.ticket, row) if ok else s, go("parked"), go("acq_head"))
        elif p.pc == "parked":
            if self.fallback:
                yield f"{me} park times out", go("inspect")(s)
        elif p.pc == "acq_head":  # my park was refused: admit myself
            if kind == READ:
                ok, after = grant_read(lock, me, stale, me, p.ticket - 1)
                yield from w("admits itself", ok, after, self._enter(i, "look", c=p.ticket, then="cs", holding=False),
                             go("inspect"), on_lost=go("inspect"), grant=(me, p.ticket))
            else:
                ok, after = grant_write(lock, me, stale, me, p.ticket - 1, v)
                yield from w("admits itself", ok, after, self._enter(i), go("inspect"), on_lost=go("inspect"),
                             grant=(me, p.ticket))
        elif p.pc == "inspect":  # the fallback (and a refused admit's or claim's look)
            yield from self._inspect(s, me, p, kind, stale, go)
        elif p.pc == "claim":
            ok, after = claim_read(lock, me) if kind == READ else claim_write(lock, me, p.ticket)
            yield from w("claims", ok, after, self._enter(i), go("inspect"))
        elif p.pc == "reap":  # (REAP_LAST if the look saw the last reader: refused, the next look decides)
            ok, after = reap_last(lock, p.nxt, v) if _n(lock.readers) <= 1 else reap_read(lock, p.nxt)
            yield from w(f"reaps {p.nxt}", ok, after, go("inspect"), go("inspect"), on_lost=go("inspect"))
        elif p.pc == "cs":
            if kind == READ:
                yield f"{me} leaves the work", go("leave")(s)
            elif kind == "mutex":
                yield f"{me} leaves the work", go("m_release")(s)
            else:
                yield f"{me} leaves the work", go("look", c=p.ticket, holding=True, then="done")(s)
        elif p.pc == "leave":  # LEAVE_READ (others stay); refused: LEAVE_LAST
            ok, after = leave_read(lock, me)
            yield from w("leaves", ok, after, go("done"), go("leave_last"), on_lost=go("after_leave"))
        elif p.pc == "leave_last":  # the last one: the shared hold ends with my entry; the handoff
            ok, after = leave_last(lock, me, v)
            yield from w("leaves last", ok, after, self._handoff_after_leave(go, after), go("leave_look"),
                         on_lost=go("after_leave"))
        elif p.pc == "leave_look":  # both refused: the count moved, or my entry is gone (Lock.Lost)
            if lock.entry(me) is None:
                yield f"{me} finds its entry gone", go("done")(self._lock_lost(s, me))
            else:
                yield f"{me} reads the count", go("leave_last" if _n(lock.readers) <= 1 else "leave")(s)
        elif p.pc == "after_leave":  # my leave's response was lost: read the count
            yield f"{me} reads the count after its leave", self._handoff_after_leave(go, lock)(s)
        elif p.pc in HANDOFF + ("release", "release_retry", "mark", "free"):
            yield from self._handoff(s, i, me, p, stale, go, w)

    def _after_wake(self, go, end, p: Proc):
        """After a wake-up, delivered or not (the grant lapses unconfirmed after the claim window
        unless its waiter claims it): past a reader, on to the next row; else the end."""
        return go("look", c=p.c + 1) if p.row.kind == READ and self.variant != "no_cascade" else end

    def _handoff_after_leave(self, go, lock: Lock):
        """After a reader's leave: no reader left -> the handoff (then, in ``free_after_leave``,
        FREE_SHARED); else done."""
        if _n(lock.readers) == 0 and self.variant != "leave_no_handoff":
            return go("look", c=_n(lock.served), then="done", free_at_end=self.variant == "free_after_leave")
        return go("done")

    def _inspect(self, s: State, me: str, p: Proc, kind: str, stale: str, go):
        lock, served = s.lock, _n(s.lock.served)
        if self.granted(lock, me, p.ticket):
            yield f"{me} finds itself granted", go("claim")(s)
        elif served >= p.ticket:
            yield f"{me} was skipped: queues again", go("enqueue", ticket=None)(s)
        elif served == p.ticket - 1 and free_for(kind, lock, me, stale, self.variant):
            yield f"{me} is the head of a free key", go("acq_head")(s)
        elif any(over for _, over in lock.entries) and (kind == WRITE or served < p.ticket - 1):
            # an expired reader holds back the head (me, or a head that does not move)
            reader = next(r for r, over in lock.entries if over)
            yield f"{me} finds an expired reader", go("reap", nxt=reader)(s)
        elif served < p.ticket - 1 and writer_free(lock, me, stale):
            yield f"{me} runs the handoff for the head", go("look", c=served, then="inspect", holding=False)(s)
        else:
            yield f"{me} parks again", go("park")(s)

    def _end(self, p: Proc, go):
        """Where a handoff goes when it stops."""
        if p.holding:
            return go("release")
        return go("free") if p.free_at_end else go(p.then)

    def _handoff(self, s: State, i: int, me: str, p: Proc, stale: str, go, w):
        lock, names = s.lock, self.names()
        end = self._end(p, go)
        if p.pc == "look":
            row = s.row(p.c + 1)
            yield f"{me} reads row {p.c + 1}", go("taken", row=as_kind_row(row) if row else None)(s)
        elif p.pc == "taken":
            state, row = row_state(p.row), p.row
            if state == "wake" and row.owner == me:  # my own row: I am the head
                yield f"{me} reaches its own row", go("acq_head", holding=False)(s)
            elif state == "wake":
                nxt = row.owner
                if row.kind == READ:
                    ok, after = grant_read(lock, me, stale, nxt, p.c)
                else:
                    ok, after = grant_write(lock, me, stale, nxt, p.c, self.variant)
                granted = dict(nxt=nxt, holding=False, free_at_end=False)
                yield from w(f"grants {nxt}", ok, after, go("wake", **granted), end,
                             on_lost=go("recheck", **granted), grant=(nxt, p.c + 1))
            elif state == "skip":  # (and deletes the row it passed: a served ticket's row is never read)
                ok, after = skip(lock, me, stale, p.c)
                after = replace(s, lock=after).with_row(p.c + 1, None) if ok else s
                yield from w(f"skips {p.c + 1}", ok, after, go("look", c=p.c + 1), end, on_lost=go("look", c=p.c + 1))
            elif p.then == "inspect" and p.c + 1 <= _n(lock.tickets):  # a helper: a row that never came
                yield from self._handoff(s, i, me, replace(p, pc="mark"), stale, go, w)
            else:
                yield f"{me} finds nobody parked at {p.c + 1}", end(s)
        elif p.pc == "mark":
            since = p.row.ready if p.row is not None and p.row.ready else "fresh"
            ok, row = mark_row(s.row(p.c + 1), since)
            yield from w(f"marks {p.c + 1}", ok, s.with_row(p.c + 1, row) if ok else s, end, go("look"))
        elif p.pc == "recheck":  # my grant's response was lost: is it there?
            if self.granted(lock, p.nxt, p.c + 1) and lock.served == p.c + 1:
                yield f"{me} rechecks: granted", go("wake")(s)
            else:
                yield f"{me} rechecks: handled by another", end(s)
        elif p.pc == "wake":  # SendTaskSuccess
            j = names.index(p.nxt)
            q = s.procs[j]
            then = self._after_wake(go, end, p)
            # what the waker does when it sees a failure: go on (``revoke_failed_wake``: revoke)
            failed = go("revoke") if self.variant == "revoke_failed_wake" else then
            if q.pc == "parked" and p.row.token == (p.nxt, "current"):
                woken = self._set(s, j, replace(q, pc="claim"))
                yield f"{me} wakes {p.nxt}", then(woken)
                if self.lost_wakes and p.lost == 0:  # woken, but the answer is lost: a failure to the waker
                    yield f"{me} wakes {p.nxt}, response lost", failed(self._set(woken, i, replace(p, lost=1)))
            else:
                yield f"{me} wake of {p.nxt} fails", failed(s)
        elif p.pc == "revoke":  # (``revoke_failed_wake`` only) the grant taken back, later
            if p.row.kind == READ and lock.entry(p.nxt) is not None:
                lock = _drop(lock, p.nxt, last=_n(lock.readers) <= 1)
            elif p.row.kind != READ and lock.owner == p.nxt:
                lock = replace(lock, owner=None)
            yield f"{me} revokes the grant of {p.nxt}", self._after_wake(go, end, p)(replace(s, lock=lock))
        elif p.pc == "release":  # then read the row again: a park may have come since I read it
            ok, after = release(lock, me, p.fence)
            again = go("look", holding=False) if self.variant != "release_then_stop" else go("done", holding=False)
            yield from w("releases", ok, after if ok else self._lock_lost(s, me), again, go("done", holding=False),
                         on_lost=go("release_retry", holding=False))
        elif p.pc == "release_retry":  # refused or not, no Lock.Lost: my first attempt may have released
            ok, after = release(lock, me, p.fence)
            yield f"{me} retries its release {'ok' if ok else 'refused'}", go("look")(replace(s, lock=after))
        elif p.pc == "free":
            ok, after = free_shared(lock)
            yield from w("frees the shared hold", ok, after, go(p.then, free_at_end=False),
                         go(p.then, free_at_end=False))

    def _mutex_step(self, s: State, i: int, me: str, p: Proc, stale: str, go, w):
        """A plain mutex (lock_protocol's ACQUIRE, polling; RELEASE, no handoff). While a shared
        hold refuses it, its liveness rounds sweep the hold (``kinds.shared_hold.shared_hold_sweep``):
        reap a reader entry whose lease is over, or end a shared hold with no reader
        (FREE_EMPTY); without ``sweep``, none (a dead reader's key is then freed by this
        protocol's own participants only). (Its retire of an ended reader's entry only brings
        the entry's end closer: the dead reader's lease ending covers it.)"""
        lock = s.lock
        if p.pc == "acquire":
            ok = acquire_ok(lock, me, stale)
            after = replace(lock, owner=me, expired=False, fence=lock.fence + 1) if ok else lock
            yield from w("acquires (mutex)", ok, after, self._enter(i), go("acquire"))
            if lock.owner == SHARED and self.sweep:
                for reader, over in lock.entries:
                    if over or self.variant == "sweep_ignores_lease":
                        ok, after = sweep_reap(lock, reader, self.variant)
                        yield from w(f"sweeps: reaps {reader}", ok, after, go("acquire"), go("acquire"),
                                     on_lost=go("acquire"))
                if not lock.entries:
                    ok, after = free_empty(lock)
                    yield from w("sweeps: frees the shared hold with no reader", ok, after, go("acquire"),
                                 go("acquire"), on_lost=go("acquire"))
        elif p.pc == "m_release":
            ok, after = release(lock, me, p.fence)
            yield from w("releases (mutex)", ok, after if ok else self._lock_lost(s, me), go("done"), go("done"),
                         on_lost=go("done"))

    # -- properties ---------------------------------------------------------------------------

    def inside(self, s: State) -> list[str]:
        """Holders at work (or a reader that admitted itself, handing off before its work)."""
        return [n for n, p in zip(self.names(), s.procs)
                if p.pc == "cs" or (p.then == "cs" and p.pc in HANDOFF + ("mark",))]

    def check(self, s: State) -> list[str]:
        problems = []
        inside = self.inside(s)
        writers = [n for n in inside if self.kind(n) != READ]
        if writers and len(inside) > 1:
            problems.append(f"writer {writers[0]} inside with {[n for n in inside if n != writers[0]]}")
        if _n(s.lock.readers) != len(s.lock.entries):
            problems.append(f"readers = {s.lock.readers} but {len(s.lock.entries)} entries")
        if s.lock.entries and s.lock.owner != SHARED:
            problems.append(f"reader entries under owner {s.lock.owner}")
        if s.lock.owner == SHARED and not s.lock.entries:  # no entry, no lease: a mutex would wait forever
            problems.append("a shared hold with no reader")
        for n, p in zip(self.names(), s.procs):
            if n in inside and self.kind(n) == READ and p.fence != s.lock.fence:
                problems.append(f"reader {n} read fence {p.fence}, the last writer's is {s.lock.fence}")
            if n in inside and self.kind(n) != READ and (s.lock.owner != n or s.lock.fence != p.fence):
                problems.append(f"writer {n} at work without its exact hold")
            if n in inside and self.kind(n) == READ and s.lock.entry(n) is None:
                problems.append(f"reader {n} at work without its entry")
        if s.overtake and self.fifo:
            problems.append(s.overtake)
        if s.problem:
            problems.append(s.problem)
        return problems

    def explore(self, limit: int = 3_000_000) -> dict:
        """fair_model's exploration (safety and order on every state, then liveness); with
        ``batch``, also: from every state where a live reader waits at the head of a key no
        writer holds, it is admitted with nobody leaving the work, no fault and no park
        timeout (no reader waits for another reader)."""
        self.graph = {}
        result = super().explore(limit)
        if result["violation"] is None and self.batch:
            problem = self._batch_violation()
            if problem:
                self.violations.append(problem)
                result["violation"] = problem[0]
        self.graph = {}
        return result

    def _batch_violation(self):
        names = self.names()
        for j, r in enumerate(names):
            if self.kind(r) != READ:
                continue
            waiting = [s for s in self.graph if self._admissible_waiter(s, j, r)]
            if not waiting:
                continue
            done = {s for s in self.graph if self.granted(s.lock, r) or s.procs[j].pc in ("cs", "done")}
            reverse: dict = {}
            for s, out in self.graph.items():
                for label, t in out:
                    if not FAULT.search(label) and not any(x in label for x in NOT_FOR_BATCH):
                        reverse.setdefault(t, []).append(s)
            good, todo = set(done), deque(done)
            while todo:
                for s in reverse.get(todo.popleft(), ()):
                    if s not in good:
                        good.add(s)
                        todo.append(s)
            bad = {s for s in waiting if s not in good}
            if bad:
                return (f"a queued reader {r} waits for another reader", self._path_to(bad))
        return None

    def _path_to(self, targets: set) -> list[str]:
        """The labels of a shortest path from the initial state to one of ``targets``."""
        start = self.initial()
        parent = {start: None}
        todo = deque([start])
        while todo:
            s = todo.popleft()
            if s in targets:
                return self.trace(parent, s)
            for label, t in self.graph.get(s, ()):
                if t not in parent:
                    parent[t] = (s, label)
                    todo.append(t)
        return []

    def _admissible_waiter(self, s: State, j: int, r: str) -> bool:
        p = s.procs[j]
        return (p.pc in WAITING and p.ticket is not None and not self.granted(s.lock, r)
                and p.ticket == _n(s.lock.served) + 1 and s.lock.owner in (None, SHARED)
                and all(q.pc != "dead" for q in s.procs))


# -- the full exploration: millions of states, held as bytes -----------------------------------

_CLASSES = (State, Lock, Proc, KindRow, Row)


def _encode(x):
    """A state as nested tuples of plain values (``marshal`` writes them compactly)."""
    if type(x) in _CLASSES:
        return (_CLASSES.index(type(x)),) + tuple(_encode(getattr(x, f.name)) for f in fields(x))
    if isinstance(x, tuple):
        return (-1,) + tuple(_encode(v) for v in x)
    return x


def _decode(x):
    if not isinstance(x, tuple):
        return x
    values = tuple(_decode(v) for v in x[1:])
    return values if x[0] == -1 else _CLASSES[x[0]](*values)


def explore_held_as_bytes(model: Model, limit: int = 60_000_000, progress=None) -> dict:
    """What ``Model.explore`` proves (every state safe and in order; from every state a path
    with no fault finishes every live participant), for state spaces too big to hold as
    objects: each state is kept as its marshalled encoding, the graph as integer arrays."""
    import marshal
    from array import array

    first = marshal.dumps(_encode(model.initial()), 2)
    index, keys = {first: 0}, [first]
    parent, via, label_ids, labels = array("q", [-1]), array("l", [-1]), {}, []
    src, dst, finished = array("l"), array("l"), bytearray()
    transitions = 0

    def trace(i: int) -> list[str]:
        out = []
        while parent[i] >= 0:
            out.append(labels[via[i]])
            i = parent[i]
        return out[::-1]

    i = 0
    while i < len(keys):
        s = _decode(marshal.loads(keys[i]))
        for problem in model.check(s):
            model.violations.append((problem, trace(i)))
            return {"states": len(keys), "transitions": transitions, "violation": problem}
        finished.append(all(p.pc in ("done", "dead") for p in s.procs))
        for label, t in model.steps(s):
            transitions += 1
            k = marshal.dumps(_encode(t), 2)  # version 2: no back-references, one encoding per value
            j = index.get(k)
            if j is None:
                j = index[k] = len(keys)
                keys.append(k)
                parent.append(i)
                via.append(label_ids.setdefault(label, len(labels)))
                if len(labels) < len(label_ids):
                    labels.append(label)
                if len(keys) > limit:
                    raise RuntimeError("state space too large")
                if progress and len(keys) % 1_000_000 == 0:
                    progress(f"{len(keys):,} states, {i:,} explored")
            if not FAULT.search(label):
                src.append(i)
                dst.append(j)
        i += 1
    # liveness: walk the fault-free transitions backwards from the finished states
    n = len(keys)
    start = array("l", [0]) * (n + 1)
    for j in dst:
        start[j + 1] += 1
    for j in range(n):
        start[j + 1] += start[j]
    fill, back = array("l", start), array("l", [0]) * len(dst)
    for a, b in zip(src, dst):
        back[fill[b]] = a
        fill[b] += 1
    good = bytearray(finished)
    todo = deque(j for j in range(n) if good[j])
    while todo:
        b = todo.popleft()
        for a in back[start[b]:start[b + 1]]:
            if not good[a]:
                good[a] = 1
                todo.append(a)
    stuck = next((j for j in range(n) if not good[j]), None)
    if stuck is not None:
        problem = "stuck: a live participant can never finish (a lost wake-up)"
        model.violations.append((problem, trace(stuck)))
        return {"states": n, "transitions": transitions, "violation": problem}
    return {"states": n, "transitions": transitions, "violation": None}


def main(argv: list[str]) -> int:
    """The full exploration, too long for the suite: every participant mix given (default
    ``rrw wwr``), every fault. ``PYTHONPATH=. python tests/protocol/shared_model.py [rrw] [wwr] ...``"""
    import resource
    import time

    failed = 0
    for kinds in argv or ["rrw", "wwr"]:
        started = time.monotonic()
        model = Model(kinds=kinds, symmetry=True)
        result = explore_held_as_bytes(model, progress=lambda line: print(f"  {kinds}: {line}", flush=True))
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        print(f"{kinds}: {result['states']:,} states, {result['transitions']:,} transitions, "
              f"{time.monotonic() - started:.0f} s, {rss:,} MB: {result['violation'] or 'no violation'}", flush=True)
        for problem, trace in model.violations:
            print("  " + "\n  ".join(trace))
            failed = 1
    return failed


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))


# -- presence: a read/write hold's row and a waiter's probe ------------------------------------
#
# One hold (acquisition A) and one waiter probing it, every interleaving. The hold: a presence
# branch registering its token on the row (attempts 1 and 2: each applied or not, its response
# lost or not - a failed attempt closes its token; then DEPART_ROW if both failed; a refused one
# ends the branch) beside a work branch (the work, DEPART_ROW, read the row back, dismiss the token
# it found); a failed work cancels the presence branch; the user's Parallel may cancel both at any
# step; after the hold: the row's delete, the entry's release. The waiter, round after round:
# read the row (a token of A not departed), SendTaskHeartbeat (open: alive; closed: gone ->
# DescribeExecution: running), the retire transaction (GONE_ROW + RETIRE_GONE_*). Settling (the
# mutex's PRESENCE_SETTLE_MS, abstract): a failed attempt's token is young while its branch still
# has a write to make (the retry, or DEPART_ROW).


@dataclass(frozen=True)
class PresenceState:
    row: Optional[tuple] = None       # (token attempt, closed) on the hold's row; None: no row
    open_tokens: frozenset = frozenset()
    pb: str = "reg1"                  # presence branch: reg1 | reg2 | unsure | parked1 | parked2 | done
    wb: str = "work"                  # work branch: work | depart | read | dismiss | done | failed
    found: Optional[int] = None       # the token the work branch read back
    cancelled: bool = False
    released: bool = False            # the entry is gone (the hold's release)
    departed: bool = False            # DEPART_ROW ran for A (the row may be gone since)
    probe: str = "idle"               # idle | read k | gone k
    retired: Optional[str] = None     # how the work branch stood when a retire was written


def _settled(s: PresenceState) -> bool:
    return s.cancelled or s.pb not in ("reg2", "unsure")


def presence_steps(s: PresenceState, variant: str = "") -> Iterator[tuple[str, PresenceState]]:
    live = not s.cancelled and s.wb != "failed"
    # the presence branch
    if live and s.pb in ("reg1", "reg2"):
        k = int(s.pb[-1])
        nxt = "reg2" if k == 1 else "unsure"
        closed = s.row is not None and s.row[1]
        if closed:  # refused: the work departed first
            yield "present refused", replace(s, pb="done")
        else:
            row = (k, False)
            yield f"present {k}", replace(s, row=row, open_tokens=s.open_tokens | {k}, pb=f"parked{k}")
            yield f"present {k} applied, response lost", replace(s, row=row, pb=nxt)
            yield f"present {k} failed", replace(s, pb=nxt)
    if live and s.pb == "unsure":
        yield "unsure departs", replace(s, row=(s.row[0] if s.row else 0, True), departed=True, pb="done")
        yield "unsure fails: the hold fails", replace(s, pb="done", wb="failed", open_tokens=frozenset())
    # the work branch
    if live and s.wb == "work":
        yield "work done", replace(s, wb="depart")
        yield "work fails: the presence branch is cancelled", replace(s, wb="failed", pb="done", open_tokens=frozenset())
    if live and s.wb == "depart":
        yield "depart", replace(s, row=(s.row[0] if s.row else 0, True), departed=True, wb="read")
    if live and s.wb == "read":
        yield "read back", replace(s, found=s.row[0] if s.row and s.row[0] else None, wb="dismiss")
    if live and s.wb == "dismiss":
        k = s.found
        pb = "done" if k is not None and s.pb == f"parked{k}" else s.pb
        yield "dismiss", replace(s, open_tokens=s.open_tokens - {k}, pb=pb, wb="done")
    if not s.cancelled and not s.released and (s.wb == "failed" or (s.wb == "done" and s.pb == "done")):
        yield "release (the row, then the entry)", replace(s, row=None, released=True)
    # the user's Parallel cancels the holding branch (no Catch runs)
    if live and not s.released:
        yield "cancelled", replace(s, cancelled=True, open_tokens=frozenset())
    # the waiter's probe
    if s.probe == "idle" and not s.released:
        token = s.row[0] if s.row and s.row[0] and not s.row[1] else None
        if token:
            yield f"probe reads {token}", replace(s, probe=f"read {token}")
    if s.probe.startswith("read"):
        k = int(s.probe.split()[1])
        if k in s.open_tokens:
            yield "heartbeat accepted", replace(s, probe="idle")
        else:
            yield "heartbeat: TaskTimedOut", replace(s, probe=f"gone {k}")
    if s.probe.startswith("gone"):
        k = int(s.probe.split()[1])
        ok = (s.row is not None and (s.row[0] == k or variant == "token_unchecked")
              and (not s.row[1] or variant == "departure_unchecked")
              and (_settled(s) or variant == "settle_unchecked") and not s.released)
        if ok:
            yield "retire", replace(s, probe="idle", row=None, retired=s.wb if not s.cancelled else "cancelled")
        else:
            yield "retire refused", replace(s, probe="idle")


def explore_presence(variant: str = "") -> dict:
    """Every reachable state; the retires written (how the work branch stood), and the states
    from which a cancelled hold with a registered token is never retired."""
    start = PresenceState()
    seen, queue, edges = {start}, deque([start]), {}
    while queue:
        s = queue.popleft()
        edges[s] = [t for _, t in presence_steps(s, variant)]
        for t in edges[s]:
            if t not in seen:
                seen.add(t)
                queue.append(t)
    retires = {s.retired for s in seen if s.retired is not None}
    # liveness: a cancelled hold whose row holds its open-when-cancelled token is retired on some path
    done = {s for s in seen if s.retired is not None}
    changed = True
    while changed:
        changed = False
        for s in seen:
            if s not in done and any(t in done for t in edges[s]):
                done.add(s)
                changed = True
    stuck = [s for s in seen if s.cancelled and s.row and not s.row[1] and s.retired is None and s not in done]
    return {"states": len(seen), "retires": retires, "stuck": stuck}
