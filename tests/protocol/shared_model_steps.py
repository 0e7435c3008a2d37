"""The read/write model's participants (:mod:`shared_model`): their state (``Proc``), the
model's state (``State``, the fair model's with a reported ``Lock.Lost`` and the last writer's
fence) and each participant's steps (:class:`ReadWriteSteps`, a base of ``shared_model.Model``,
whose fields and helpers it uses): the fast read or write, the ticket, the transactional park,
the fallback's look, the claims, a reader's leave (the last one's handoff), reaping an expired
reader entry, the handoff (read the next row; grant, wake, go on for readers; skip; mark;
stop; release) and the plain mutex (ACQUIRE, its sweep of a shared hold, RELEASE)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from fair_model_steps import State as FairState
from fair_model_writes import acquire_ok, or_zero, release, row_state
from fair_model_writes import mark as mark_row
from locked_workflow.state_machines.shared_protocol import READ, SHARED, WRITE
from shared_model_writes import (KindRow, Lock, as_kind_row, claim_read, claim_write, drop_reader, enqueue,
                                 fast_read, fast_write, free_empty, free_for, free_shared, grant_read, grant_write,
                                 hashed_once, leave_last, leave_read, park, park_unless, reap_last, reap_read,
                                 renew, skip, sweep_reap, writer_free)

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



@hashed_once
@dataclass(frozen=True)
class State(FairState):
    problem: str = ""      # a live participant's first release (or leave) is refused: it reports Lock.Lost
    last_fence: int = 0    # the fence of the last writer granted


class ReadWriteSteps:
    """The participants' steps of ``shared_model.Model`` (its fields: ``variant``, ``fallback``,
    ``lost_wakes``, ``sweep``...; its ``kind``, ``granted``, ``_set`` and ``_write``)."""

    @staticmethod
    def _lock_lost(s: State, me: str) -> State:
        """A live holder's first release (or leave) refused: it would fail with Lock.Lost."""
        return replace(s, problem=s.problem or f"{me}'s release is refused: Lock.Lost")

    def _enter(self, i: int, pc: str = "cs", **kw):
        """Admitted: to ``pc`` (the work, or a reader's handoff before it) with the key's fence."""
        return lambda t: self._set(t, i, renew(t.procs[i], pc=pc, fence=t.lock.fence, **kw))

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
                yield from w("fast write", ok, after, self._enter(i, ticket=or_zero(lock.served)), go("enqueue"),
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
            ok, after = reap_last(lock, p.nxt, v) if or_zero(lock.readers) <= 1 else reap_read(lock, p.nxt)
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
                yield f"{me} reads the count", go("leave_last" if or_zero(lock.readers) <= 1 else "leave")(s)
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
        if or_zero(lock.readers) == 0 and self.variant != "leave_no_handoff":
            return go("look", c=or_zero(lock.served), then="done", free_at_end=self.variant == "free_after_leave")
        return go("done")

    def _inspect(self, s: State, me: str, p: Proc, kind: str, stale: str, go):
        lock, served = s.lock, or_zero(s.lock.served)
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
            elif p.then == "inspect" and p.c + 1 <= or_zero(lock.tickets):  # a helper: a row that never came
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
                lock = drop_reader(lock, p.nxt, last=or_zero(lock.readers) <= 1)
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
