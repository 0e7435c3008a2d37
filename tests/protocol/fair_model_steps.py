"""The fair model's participants (:mod:`fair_model`): their state (``Proc``), the model's state
(``State``: the lock item, the rows, the participants, the grants) and each participant's
steps (:class:`ParticipantSteps`, a base of ``fair_model.Model``, whose fields it reads): the fast
acquire, the ticket, the park, the fallback's look, the confirm and claim, the release (its
common cases first) and the handoff loop (grant, skip, mark, wake, the early look, the claim
window, the last look, revoke)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from fair_model_writes import (Lock, Row, acquire_ok, claim, enqueue, fast_acquire, grant, mark, or_zero, park,
                               release, release_alone, revoke, row_state, skip, take_parked)

WAITING = ("enqueue", "park", "parked", "acq_head", "inspect", "claim", "confirm")
#: (``redrive``) the steps of a holder's release, where a redrive resumes it
RELEASE_STEPS = ("take_parked", "release_alone", "release_retry", "take", "taken", "recheck", "nudge", "mark",
                 "wake", "early", "early_wake", "early_check", "window", "window_wake", "last_look", "revoke")
HANDOFF = ("taken", "recheck", "wake", "mark", "nudge", "early_wake", "window_wake")


@dataclass(frozen=True)
class Proc:
    pc: str = "fast"
    ticket: Optional[int] = None
    fence: int = 0
    lost: int = 0        # lost responses used (one per participant)
    granted: bool = False
    # the handoff loop (release, or a helper's run for a dead head): current served, whether I
    # hold the lock while looping, the taken row, the grant being woken
    c: int = 0
    holding: bool = False
    row: Optional[Row] = None
    nxt: Optional[str] = None
    nfence: int = 0
    #: a refused grant of a release whose lock is still its own: the ``served`` to go on from
    resume: Optional[int] = None
    #: a waiter running the handoff for a head that does not move (the state machine's ``Help``:
    #: only its mark that stands goes back to park, ``after_mark``; a release's never does)
    helping: bool = False
    #: parked again after a mark that stands: its park ends at the park timeout, the moment the
    #: mark may be skipped - with ``fallback`` off too (this park *is* the wait for the mark to age)
    awaits_mark: bool = False
    #: (``janitor_look``) a grant was made to me after I crashed; the janitor's progress for me
    granted_dead: bool = False
    jan: str = ""
    #: (``releaser_janitor``) the janitor finished my handoff (or found none to finish)
    jrel: bool = False
    #: (coalescing) the ticket my enqueue superseded, the lock was free at my enqueue, my JUMP
    #: was refused at this row, I ended superseded
    sup: Optional[int] = None
    sfree: bool = False
    jumped: bool = False
    superseded: bool = False
    #: (``janitor_crashes``) the janitor's invocations for me that failed mid hand-on
    jcrashes: int = 0
    #: (``redrive``) where I crashed; I was redriven; my stop grace passed while I was stopped
    #: (a stopped holder can be taken over from then on); another participant took my
    #: acquisition over; how my release ended ("released" or "lost")
    stopped_at: str = ""
    redriven: bool = False
    grace_over: bool = False
    taken_over: bool = False
    verdict: str = ""


@dataclass(frozen=True)
class State:
    lock: Lock
    rows: tuple            # sorted (ticket, Row)
    procs: tuple
    grants: tuple = ()     # (name, ticket or None for a fast grant) in grant order
    overtake: str = ""     # a grant passed a live queued waiter
    superseded: frozenset = frozenset()  # (coalescing) tickets an enqueue superseded
    both: str = ""         # (coalescing) a superseded ticket was granted

    def row(self, t: int) -> Optional[Row]:
        return dict(self.rows).get(t)

    def with_row(self, t: int, row: Optional[Row]) -> "State":
        rows = dict(self.rows)
        if row is None:
            rows.pop(t, None)
        else:
            rows[t] = row
        return replace(self, rows=tuple(sorted(rows.items())))


class ParticipantSteps:
    """The participants' steps of ``fair_model.Model`` (its fields: ``variant``, ``fallback``,
    ``lost_responses``, ``janitor_look``, ``redrive``...; its ``names``)."""

    @staticmethod
    def _void_tokens(s: State, me: str) -> State:
        """Tokens of ``me``'s earlier parks (in rows and in taken rows) become ``old``."""
        void = lambda r: replace(r, token=(me, "old")) if r is not None and r.token == (me, "current") else r  # noqa: E731
        rows = tuple((t, void(r)) for t, r in s.rows)
        return replace(s, rows=rows, procs=tuple(replace(p, row=void(p.row)) for p in s.procs))

    def _window_may_end(self, s: State, i: int, p: Proc) -> bool:
        """A wait of the releaser ``p`` for its grantee ends (the timing assumption): only
        while the grantee is dead, parked, done or at work (``slow_confirm``: or woken and
        not confirmed yet) and nobody else is mid-handoff with its current token."""
        q = s.procs[self.names().index(p.nxt)]
        busy = any(o.pc in HANDOFF and o.row is not None and o.row.token == (p.nxt, "current")
                   for k, o in enumerate(s.procs) if k != i)
        ended = ("dead", "parked", "done", "cs", "window") + (("confirm",) if self.slow_confirm else ())
        return q.pc in ended and not busy

    def _woken(self, s: State, j: int, name: str) -> State:
        """``name``'s park ends with its grant: it confirms it next (``work_before_confirm``:
        it goes straight to its work, the protocol before F1)."""
        if self.variant == "work_before_confirm":
            return self._grant_to(s, j, name)
        return self._set(s, j, replace(s.procs[j], pc="confirm", awaits_mark=False))

    def _wake(self, s: State, i: int, me: str, p: Proc, row: Row, label: str, on_ok, on_failed, failed_label: str):
        """``SendTaskSuccess`` to the token of ``row``: delivered (the waiter is woken) and
        answered; delivered with its response lost (the releaser sees an error: on_failed); or
        failed (the park has ended)."""
        j = self.names().index(p.nxt)
        if s.procs[j].pc == "parked" and row.token == (p.nxt, "current"):
            woken = self._woken(s, j, p.nxt)
            yield label, on_ok(woken)
            if self.lost_wakes and p.lost == 0:
                yield f"{label}: response lost", self._set(woken, i, replace(on_failed(woken).procs[i], lost=1))
        else:
            yield failed_label, on_failed(s)

    def _set(self, s: State, i: int, p: Proc) -> State:
        return replace(s, procs=s.procs[:i] + (p,) + s.procs[i + 1:])

    def _write(self, s, i, me, p, label, ok, after: State, on_ok, on_refused):
        yield f"{me} {label} {'ok' if ok else 'refused'}", (on_ok if ok else on_refused)(after)
        if self.lost_responses and p.lost == 0 and ok:
            yield f"{me} {label} response lost", self._set(after, i, replace(after.procs[i], lost=1))

    def _grant_to(self, s: State, j: int, name: str, fast: bool = False) -> State:
        q = s.procs[j]
        ticket = None if fast else s.lock.served
        # a fast grant passes every ticket out; a grant of a ticket passes the smaller ones
        passed = [n for n, p in zip(self.names(), s.procs) if p.pc in WAITING and p.ticket is not None
                  and n != name and (ticket is None or p.ticket < ticket)]
        s = self._set(s, j, replace(q, pc="cs", fence=s.lock.fence, granted=True, ticket=s.lock.served))
        return replace(s, grants=s.grants + ((name, ticket),),
                       overtake=s.overtake or (f"{name} overtook {passed}" if passed else ""))

    def _step(self, s: State, i: int, me: str, p: Proc, stale: str):
        v, names = self.variant, self.names()
        go = lambda pc, **kw: (lambda t: self._set(t, i, replace(t.procs[i], pc=pc, **kw)))  # noqa: E731
        lock = s.lock
        if p.pc == "fast":
            ok, after = fast_acquire(lock, me, stale, v)
            yield from self._write(s, i, me, p, "fast acquire", ok, replace(s, lock=after),
                                   lambda t: self._grant_to(t, i, me, fast=lock.owner != me), go("enqueue"))
        elif p.pc == "enqueue":
            ok, after = enqueue(lock, me, stale, v)
            # a lost response: the ticket was taken (a hole), and the retry takes another
            yield f"{me} enqueue {'ok' if ok else 'refused'}", (
                go("park", ticket=after.tickets)(replace(s, lock=after)) if ok else go("fast")(s))
            if self.lost_responses and p.lost == 0 and ok:
                yield f"{me} enqueue response lost", go("enqueue", lost=1)(replace(s, lock=after))
        elif p.pc == "park":
            t = self._void_tokens(s, me)  # my earlier parks' tokens are void now
            ok, row = park(t.row(p.ticket), me, (me, "current"), v)
            yield from self._write(s, i, me, p, "park", ok, t.with_row(p.ticket, row), go("parked"), go("acq_head"))
        elif p.pc == "parked":
            if self.fallback or p.awaits_mark:
                yield f"{me} park times out", go("inspect", awaits_mark=False)(s)
        elif p.pc == "acq_head":
            ok, after = grant(lock, me, stale, me, p.ticket - 1, v)
            yield from self._write(s, i, me, p, "acquire as head", ok, replace(s, lock=after),
                                   lambda t: self._grant_to(t, i, me), go("inspect"))
        elif p.pc == "inspect":  # the fallback (and a refused acquire's confirm): read the lock
            served = or_zero(lock.served)
            if lock.owner == me and lock.served == p.ticket:
                yield f"{me} finds itself granted", go("claim")(s)
            elif served >= p.ticket:
                yield f"{me} was skipped: queues again", go("enqueue", ticket=None)(s.with_row(p.ticket, None))
            elif served == p.ticket - 1 and acquire_ok(lock, me, stale):
                yield f"{me} is the head of a free lock", go("acq_head")(s)
            elif acquire_ok(lock, me, stale):  # a free lock whose head does not move: hand it off
                yield f"{me} runs the handoff for the head", go("take", c=served, holding=False, helping=True)(s)
            else:
                yield f"{me} parks again", go("park")(s)
        elif p.pc == "claim":
            ok, after = claim(lock, me, p.ticket)
            yield from self._write(s, i, me, p, "claim", ok, replace(s, lock=after),
                                   lambda t: self._grant_to(t, i, me), go("inspect"))
        elif p.pc == "cs":
            yield f"{me} leaves the work", go("take_parked", c=p.ticket, holding=True, helping=False)(s)
        # -- the release: the common cases first ----------------------------------------------
        elif p.pc == "take_parked":  # take row c + 1 only if its waiter is parked: straight to the grant
            ok, row = take_parked(s.row(p.c + 1))
            if ok:
                yield f"{me} takes parked row {p.c + 1}", go("taken", row=s.row(p.c + 1))(s.with_row(p.c + 1, None))
            else:
                yield f"{me} finds no parked row {p.c + 1}", go("release_alone")(s)
        elif p.pc == "release_alone":  # nobody queues: the whole release; else the full handoff
            ok, after = release_alone(lock, me, p.fence, v)
            yield f"{me} release alone {'ok' if ok else 'refused'}", (
                go("after_loop", holding=False) if ok else go("take"))(replace(s, lock=after))
            if self.lost_responses and p.lost == 0:
                # a transient error (the write done and its response lost, or not done): the
                # state machine's retried RELEASE, not this write again
                if ok:
                    yield f"{me} release alone response lost", go("release_retry", lost=1)(replace(s, lock=after))
                yield f"{me} release alone lost before the write", go("release_retry", lost=1)(s)
        elif p.pc == "release_retry":  # a lost response of RELEASE_ALONE: the retried RELEASE, then the queue check
            ok, after = release(lock, me, p.fence)
            # refused: ``ReleasedBefore?`` - released unless it could have been taken over
            yield from self._write(
                s, i, me, p, "release again", ok, replace(s, lock=after),
                (lambda t: go("mark", holding=False, row=None)(t)) if or_zero(after.tickets) > p.c and v != "no_mark"
                else go("after_loop", holding=False),
                go("after_loop", holding=False, verdict=self._verdict(p.grace_over)))
        # -- the handoff loop ------------------------------------------------------------------
        elif p.pc == "take":
            row = s.row(p.c + 1)
            yield f"{me} takes row {p.c + 1}", go("taken", row=row)(s.with_row(p.c + 1, None))
        elif p.pc == "taken":
            state = row_state(p.row)
            if state == "wake" and p.row.owner == me:  # my own row (a helper reached itself)
                ok, after = grant(lock, me, stale, me, p.c, v)
                yield from self._write(s, i, me, p, "acquire as head", ok, replace(s, lock=after),
                                       lambda t: self._grant_to(t, i, me), go("after_loop"))
            elif state == "wake":
                ok, after = grant(lock, me, stale, p.row.owner, p.c, v)
                granted = replace(s, lock=after)
                if ok and self.janitor_look and s.procs[names.index(p.row.owner)].pc == "dead":
                    j = names.index(p.row.owner)  # a grant made after its waiter crashed
                    granted = self._set(granted, j, replace(s.procs[j], granted_dead=True))
                yield from self._write(
                    s, i, me, p, f"grant {p.row.owner}", ok, granted,
                    go("wake", nxt=p.row.owner, nfence=after.fence), go("recheck", nxt=p.row.owner))
            elif state == "skip":
                ok, after = skip(lock, me, stale, p.c)
                yield from self._write(s, i, me, p, f"skip {p.c + 1}", ok, replace(s, lock=after),
                                       go("take", c=p.c + 1), go("after_loop", verdict=self._taken_over_verdict(p)))
            elif p.holding:
                ok, after = release(lock, me, p.fence)
                # refused: ``ReleaseResumed?`` - released only after a redrive, before the grace's end
                queued = ((lambda t: go("mark", holding=False)(t)) if or_zero(after.tickets) > p.c and v != "no_mark"
                          else go("after_loop"))
                refused = go("after_loop", verdict=self._verdict(not (p.redriven and not p.grace_over)))
                if self.redrive:  # (a lost response: the retried RELEASE, which reads a refusal as ReleasedBefore?)
                    yield f"{me} release {'ok' if ok else 'refused'}", (queued if ok else refused)(replace(s, lock=after))
                    if self.lost_responses and p.lost == 0 and ok:
                        yield f"{me} release response lost", go("release_retry", lost=1)(replace(s, lock=after))
                else:
                    yield from self._write(s, i, me, p, "release", ok, replace(s, lock=after), queued, refused)
            else:  # (a helper: the lock is not mine) mark the row again, keeping the mark's age
                yield from self._step(s, i, me, replace(p, pc="mark"), stale)
        elif p.pc == "mark":
            since = p.row.ready if p.row is not None and p.row.ready else "fresh"
            ok, row = mark(s.row(p.c + 1), since)
            # a helper's mark that stands (the ticket not served meanwhile: ``Served``, ``Litter?``)
            # sends it back to its park (``after_mark``): the mark may be skipped only once it
            # is a park timeout old (the variant ``helper_looks_at_once``: it looks again at once)
            helper_parks = p.helping and or_zero(lock.served) <= p.c and v != "helper_looks_at_once"
            yield from self._write(s, i, me, p, f"mark {p.c + 1}", ok, s.with_row(p.c + 1, row),
                                   go("park", helping=False, awaits_mark=True) if helper_parks
                                   else go("after_loop", helping=False),
                                   go("take"))
        elif p.pc == "recheck":  # a refused grant: granted by my lost response?
            if lock.owner == p.nxt and lock.served == p.c + 1 and lock.handed == me:
                yield f"{me} rechecks: granted", go("wake", nfence=lock.fence)(s)
            elif p.holding and lock.owner == me and or_zero(lock.served) > p.c and v != "still_mine_ends":
                # still mine, the queue moved under me (a ticket passed by a runner of the
                # handoff that found me stale): nudge that waiter, then go on from the new
                # ``served`` (``StillMine?``, ``Resume``) - ended, the lock would stay mine
                yield f"{me} rechecks: still mine, served moved", go("nudge", resume=or_zero(lock.served))(s)
            else:
                # someone else handed it: the token I took is the waiter's only way to be told -
                # wake it to look by itself
                yield f"{me} rechecks: not mine to hand", go("nudge")(s)
        elif p.pc == "nudge":
            j = names.index(p.nxt)
            q = s.procs[j]
            woken = q.pc == "parked" and p.row.token == (p.nxt, "current")
            after = (go("take", c=p.resume, resume=None) if p.resume is not None
                     else go("after_loop", verdict=self._taken_over_verdict(p)))
            yield f"{me} nudges {p.nxt}", after(self._set(s, j, replace(q, pc="inspect", awaits_mark=False)) if woken else s)
        elif p.pc == "wake":
            failed = go("early" if self.early_look else "window")
            yield from self._wake(s, i, me, p, p.row, f"{me} wakes {p.nxt}", go("after_loop"), failed,
                                  f"{me} wake of {p.nxt} fails")
        elif p.pc == "confirm":  # woken: CLAIM the grant before the work; refused (revoked): look again
            ok, after = claim(lock, me, p.ticket)
            yield from self._write(s, i, me, p, "confirm", ok, replace(s, lock=after),
                                   lambda t: self._grant_to(t, i, me), go("inspect"))
        elif p.pc == "early":  # a short look for the grantee's new park (no revoke: any time is safe)
            # the retake deletes whatever row is there; the wake-up of what it found is a step of its own
            yield f"{me} retakes row {p.c + 1} early", go("early_wake", row=s.row(p.c + 1))(s.with_row(p.c + 1, None))
        elif p.pc == "early_wake":
            row = p.row
            if row is not None and row.owner == p.nxt and row.token is not None:
                yield from self._wake(s, i, me, p, row, f"{me} wakes {p.nxt}'s new park early", go("after_loop"),
                                      go("early_check"), f"{me} early wake of {p.nxt} fails")
            else:
                yield f"{me} finds no new park of {p.nxt} yet", go("early_check")(s)
        elif p.pc == "early_check":  # (Confirmed) a grant no longer revocable: done, no claim window
            if lock.owner == p.nxt and lock.handed == me and lock.fence == p.nfence:
                yield f"{me} finds its grant to {p.nxt} unconfirmed", go("window")(s)
            else:
                yield f"{me} finds its grant to {p.nxt} confirmed", go("after_loop")(s)
        elif p.pc == "window":  # the claim window ends (or the grantee is dead): retake row c + 1
            if self._window_may_end(s, i, p):
                yield f"{me} retakes row {p.c + 1}", go("window_wake", row=s.row(p.c + 1))(s.with_row(p.c + 1, None))
        elif p.pc == "window_wake":  # a re-park found: wake it (as Retake -> Reparked?: no look at the lock); else revoke
            row = p.row
            if row is not None and row.owner == p.nxt and row.token is not None:
                yield from self._wake(s, i, me, p, row, f"{me} wakes {p.nxt}'s new park", go("after_loop"),
                                      go("last_look"), f"{me} wake of {p.nxt}'s new park fails")
            else:
                yield f"{me} finds no new park of {p.nxt}", go("revoke")(s)
        elif p.pc == "last_look":  # a short wait: a grantee woken (or looking) confirms meanwhile
            if self.variant == "revoke_at_once" or self._window_may_end(s, i, p):
                yield f"{me}'s last look ends", go("revoke")(s)
        elif p.pc == "revoke":
            ok, after = revoke(lock, p.nxt, p.nfence, me, v)
            yield from self._write(s, i, me, p, f"revoke {p.nxt}", ok, replace(s, lock=after),
                                   go("take", c=p.c + 1, holding=False), go("after_loop"))
        elif p.pc == "after_loop":
            yield f"{me} ends its handoff", (go("done")(s) if p.granted else go("inspect")(s))

    def _verdict(self, lost: bool) -> str:
        """How a release ends (``redrive`` only: elsewhere no state carries it)."""
        return "lost" if self.redrive and lost else ""

    def _taken_over_verdict(self, p: Proc) -> str:
        """``Release.TakenOver?`` after a refused grant (not mine) or skip: a holding release is
        lost unless nobody could have taken it over yet (variant ``taken_over_ends_released``:
        the protocol before, which ended released)."""
        return self._verdict(p.holding and p.grace_over and self.variant != "taken_over_ends_released")
