"""The fair lock's coalescing (``QueueLimit.keep_newest(1)``) added to the fair model
(:mod:`fair_model`): a newcomer's ENQUEUE_NEWEST moves ``cut`` to its ticket - 1 in the same
write and so supersedes the ticket before it (if not granted yet); it takes that ticket's row
and wakes a parked waiter with ``Lock.Superseded`` (a step of its own: delivered, delivered
with its response lost, or failed); a coalescing park is a transaction with the lock item's
``cut < ticket``; GRANT refuses a ticket <= cut; the handoff passes superseded tickets with
JUMP (before a skip or a mark, after a release whose answer shows a cut ahead, and after a
refused grant of a superseded ticket, whose waiter it wakes with ``Lock.Superseded``); a
waiter that looks finds ``cut >= ticket`` and ends superseded; a newcomer that found the lock
free looks instead of parking. Crashes and lost responses are the base model's.

Properties, beside the base model's (never two holders; every live participant finishes):
a superseded ticket is never granted and a participant never both works and ends
superseded (``both``). Ticket order is not checked (superseding passes queued waiters by
design). Variants (negative controls): ``grant_ignores_cut`` (GRANT without the cut
condition: a superseded waiter can be granted - both), ``park_ignores_cut`` (a plain park
after the cut: nobody wakes it, stuck without the park timeout).
"""

from __future__ import annotations

from dataclasses import replace

from fair_model import Model
from fair_model_steps import State
from fair_model_writes import acquire_ok, nobody_queues, or_zero, park, release, row_state


def enqueue_newest(lock, me: str, stale: str):
    """ENQUEUE_NEWEST with n = 1: (ok, lock after, my ticket, the ticket it superseded or None)."""
    if acquire_ok(lock, me, stale) and nobody_queues(lock):
        return False, lock, None, None
    ticket = or_zero(lock.tickets) + 1
    after = replace(lock, tickets=ticket, served=or_zero(lock.served), cut=or_zero(lock.tickets))
    return True, after, ticket, (ticket - 1 if ticket - 1 > after.served else None)


def enqueue_bounded(lock, me: str, stale: str, served: int, bound: int):
    """ENQUEUE_BOUNDED (``keep_oldest``): ENQUEUE while ``served`` is as read and ``tickets < bound``."""
    ok = (not (acquire_ok(lock, me, stale) and nobody_queues(lock)) and lock.served is not None
          and lock.served == served and lock.tickets is not None and lock.tickets < bound)
    return ok, (replace(lock, tickets=lock.tickets + 1) if ok else lock)


def jump(lock, me: str, stale: str, prev: int):
    """JUMP: (ok, lock after)."""
    ok = acquire_ok(lock, me, stale) and lock.served is not None and prev <= lock.served <= lock.cut and lock.cut > prev
    return ok, (replace(lock, served=lock.cut) if ok else lock)


class CoalescingModel(Model):
    """``lossy``: the writes (label words) whose response may be lost (None: every write, as the
    base model; a few keep 3 participants' space to seconds)."""

    def __init__(self, *, lossy: tuple | None = None, **kwargs) -> None:
        kwargs.setdefault("fifo", False)
        super().__init__(**kwargs)
        self.lossy = lossy

    def _write(self, s, i, me, p, label, ok, after, on_ok, on_refused):
        if self.lossy is None or any(word in label for word in self.lossy):
            yield from super()._write(s, i, me, p, label, ok, after, on_ok, on_refused)
        else:
            yield f"{me} {label} {'ok' if ok else 'refused'}", (on_ok if ok else on_refused)(after)

    def check(self, s: State) -> list[str]:
        problems = super().check(s)
        if s.both:
            problems.append(s.both)
        for name, p in zip(self.names(), s.procs):
            if p.superseded and p.granted:
                problems.append(f"{name} both worked and ended superseded")
        return problems

    def _grant_to(self, s: State, j: int, name: str, fast: bool = False) -> State:
        if not fast and s.lock.served in s.superseded:
            s = replace(s, both=s.both or f"{name} granted its superseded ticket {s.lock.served}")
        return super()._grant_to(s, j, name, fast)

    def _after_enqueue(self, p) -> str:
        return "inspect" if p.sfree else "park"

    def _step(self, s: State, i: int, me: str, p, stale: str):
        v, names, lock = self.variant, self.names(), s.lock
        go = lambda pc, **kw: (lambda t: self._set(t, i, replace(t.procs[i], pc=pc, **kw)))  # noqa: E731
        if p.pc == "enqueue":
            ok, after, ticket, sup = enqueue_newest(lock, me, stale)
            if not ok:
                yield f"{me} enqueue refused", go("fast")(s)
                return
            t = replace(s, lock=after, superseded=s.superseded | ({sup} if sup else set()))
            sfree = after.owner is None or after.expired
            nxt = "sup_take" if sup else ("inspect" if sfree else "park")
            yield f"{me} enqueue ok", go(nxt, ticket=ticket, sup=sup, sfree=sfree)(t)
            if self.lost_responses and p.lost == 0 and (self.lossy is None or "enqueue" in self.lossy):
                # (the retry takes another ticket)
                yield f"{me} enqueue response lost", go("enqueue", lost=1)(t)
        elif p.pc == "sup_take":  # take the superseded ticket's row (a DeleteItem returning it)
            row = s.row(p.sup)
            nxt = "sup_wake" if row is not None and row.token is not None else self._after_enqueue(p)
            yield f"{me} takes superseded row {p.sup}", go(nxt, row=row)(s.with_row(p.sup, None))
        elif p.pc == "sup_wake":  # SendTaskFailure(Lock.Superseded) to the token the row held
            yield from self._wake_superseded(s, i, me, p, self._after_enqueue(p))
        elif p.pc == "park":  # a transaction: the row's PARK and the lock item's cut < ticket
            t = self._void_tokens(s, me)
            ok, row = park(t.row(p.ticket), me, (me, "current"), v)
            ok = ok and (v == "park_ignores_cut" or lock.cut < p.ticket)
            yield from self._write(s, i, me, p, "park", ok, t.with_row(p.ticket, row) if ok else t,
                                   go("parked"), go("acq_head"))
        elif p.pc == "inspect" and not (lock.owner == me and lock.served == p.ticket) and lock.cut >= p.ticket:
            yield f"{me} finds itself superseded", go("done", superseded=True)(s.with_row(p.ticket, None))
        elif p.pc == "take":
            t = self._set(s, i, replace(p, jumped=False))
            yield from super()._step(t, i, me, t.procs[i], stale)
        elif p.pc == "taken" and row_state(p.row) in ("skip", "mark") and not (
                row_state(p.row) == "wake" or p.jumped):
            ok, after = jump(lock, me, stale, p.c)
            yield from self._write(s, i, me, p, "jump", ok, replace(s, lock=after),
                                   go("take", c=after.served), go("taken", jumped=True))
        elif p.pc == "taken" and row_state(p.row) == "mark" and p.holding:  # (jump refused) release
            ok, after = release(lock, me, p.fence)
            yield from self._write(s, i, me, p, "release", ok, replace(s, lock=after),
                                   self._after_release(after, i, p), go("after_loop"))
        elif p.pc == "release_retry":
            ok, after = release(lock, me, p.fence)
            yield from self._write(s, i, me, p, "release again", ok, replace(s, lock=after),
                                   self._after_release(after, i, p), go("after_loop", holding=False))
        elif p.pc == "jump":  # (the lock is free: after my release) pass the superseded tickets
            ok, after = jump(lock, me, stale, p.c)
            yield from self._write(s, i, me, p, "jump", ok, replace(s, lock=after),
                                   go("take", c=after.served), go("after_loop"))
        elif p.pc == "recheck" and not (lock.owner == p.nxt and lock.served == p.c + 1 and lock.handed == me) \
                and lock.cut >= p.c + 1:
            yield f"{me} rechecks: {p.nxt} superseded", go("sup_nudge")(s)
        elif p.pc == "sup_nudge":
            yield from self._wake_superseded(s, i, me, p, "jump")
        else:
            yield from super()._step(s, i, me, p, stale)

    def _after_release(self, after, i: int, p):
        """After my release (its answer): superseded tickets ahead - pass them (JUMP); else a
        ticket out - mark it; else done."""
        go = lambda pc, **kw: (lambda t: self._set(t, i, replace(t.procs[i], pc=pc, **kw)))  # noqa: E731
        if after.cut > p.c:
            return go("jump", holding=False)
        if or_zero(after.tickets) > p.c:
            return go("mark", holding=False, row=None)
        return go("after_loop", holding=False)

    def _wake_superseded(self, s: State, i: int, me: str, p, then: str):
        """SendTaskFailure(Lock.Superseded) to ``p.row``'s token: the waiter parked there ends
        superseded (its response may be lost: the sender goes on either way); a park that has
        ended is not woken (its waiter looks by itself)."""
        go = lambda pc, **kw: (lambda t: self._set(t, i, replace(t.procs[i], pc=pc, **kw)))  # noqa: E731
        owner = p.row.token[0]
        j = self.names().index(owner)
        q = s.procs[j]
        if q.pc == "parked" and p.row.token == (owner, "current"):
            woken = self._set(s, j, replace(q, pc="done", superseded=True, awaits_mark=False))
            yield f"{me} wakes {owner} superseded", go(then)(woken)
            if self.lost_wakes and p.lost == 0:
                yield f"{me} wakes {owner} superseded: response lost", go(then, lost=1)(woken)
        else:
            yield f"{me} wake of {owner} superseded fails", go(then)(s)
