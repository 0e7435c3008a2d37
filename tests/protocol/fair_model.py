"""An executable model of the fair lock (state_machines/fair_protocol.py) for exhaustive
exploration: the lock item and one row per ticket, the participants' steps (fast acquire,
ticket, park, handoff, wake-up, the woken waiter's confirm, claim, revoke, the park's fallback
and the handoff it runs for a dead head - which parks again after a mark that stands; a
release tries TAKE_PARKED, then RELEASE_ALONE, then the full handoff, and goes on from the new
``served`` when a refused grant finds the lock still its own), crashes at every step - a stop
between any two calls of a participant, its release's included (a retake and the wake-up that follows it are two steps) -, lost responses
on every write and on every wake-up (``SendTaskSuccess`` applied: the waiter is woken, and the
releaser sees an error), failed wake-ups (then a short look for the grantee's new park and
whether its grant is still unconfirmed - confirmed, the releaser is done -, then the claim window, and after a failed wake-up of a new park a last short look), park timeouts,
and time passing (a hole's mark ageing, a claim window ending, a dead holder's lease ending).

The writes below read the items as the real expressions do; ``test_fair_model`` checks each
against DynamoDB itself on many item states, so the model cannot drift from the protocol.

Timing assumption (the one place time matters for FIFO): a live participant's few steps
(between reading the lock and parking, or between taking a row and waking its waiter) take
less than a claim window, and a waiter holding a ticket parks before its mark is a park
timeout old. So a claim window (or a last look) ends only while the grantee is dead, parked,
done or at work - a woken grantee confirms first - and nobody is mid-handoff with the
grantee's current token, and a mark ages only while its ticket's waiter
is not between its ticket and its park (nor between taking its own row, in a handoff run it
makes for a stuck head, and acting on it).

Variants (negative controls) break one rule each: ``park_ignores_ready`` (PARK does not
check the ready mark), ``no_mark`` (a release leaves no mark for an unparked ticket),
``enqueue_unconditional`` (a ticket is taken even when the lock is free with nobody queued),
``revoke_ignores_claim`` (REVOKE does not check that the grant is unconfirmed),
``fast_ignores_queue`` (the fast path ignores the queue), ``release_alone_ignores_queue``
(the release's one-write path frees the lock while a ticket is out, and marks nothing),
``work_before_confirm`` (a woken waiter goes straight to its work, unconfirmed: the protocol
before F1, whose releaser revoked a grant whose wake-up was delivered with its response lost),
``revoke_at_once`` (no last look between a failed wake-up of a new park and the revoke),
``janitor_drops_claim`` (the janitor drops the grant its look claims for a crashed waiter: the
defect the fault matrix found). Two variants keep the protocol before a liveness fix, for
exploration by hand: ``helper_looks_at_once`` (a helper whose mark stands looks again at once
instead of parking: a cost, no property breaks) and ``still_mine_ends`` (a release whose refused
grant finds the lock still its own ends there, the lock held until its lease). That grant
needs a ticket passed under a live holder (a helper that found it stale, then a redrive) and
a late park in that row: 2 participants with ``redrive`` never reach it (23,805 states with the
variant as without).

``janitor_look``: a crashed waiter's janitor (``lambdas/lock_janitor/logic.py``: ``leave_queue``,
then :func:`hand_on`), whose two steps may land anywhere after the crash - between a release's
grant to it and its revoke too: it marks the waiter's row left, then looks at the lock: granted
to the waiter (its ticket), it claims the grant (the releaser's REVOKE is then refused) and, if
the grant was made after the crash, hands it on as the waiter's release would (a grant made
before it keeps its retire: the lease end below); a free lock whose head does not move, it
hands on (the handoff for the head). With the janitor, the lease of a waiter granted after its
crash never ends in the model (it is the whole lease, minutes: a liveness defect): a grant left
held that way once everyone is done or crashed and the janitor is done is a violation (the next
arrival would wait that lease). ``janitor_crashes``: the janitor's invocation may also fail
between any two of its writes (at every step of its hand-on, its lost responses included),
this many times; Lambda retries a failed asynchronous invocation (twice), and the retry starts
over - LEAVE_PRESENT (its row is gone by then: refused, nothing written), then the look, which
finds the grant it claimed (CLAIM is idempotent) and hands it on again, or finds it handed on already. Variant
``janitor_retry_trusts_handed`` (a negative control): a janitor that tells a grant made after
the end by its unconfirmed ``handed`` rather than by its time - its retry finds the grant its
own first try confirmed and keeps it (held for the lease).
``slow_confirm`` drops the timing assumption for the confirm: exclusion must hold anyway.

``redrive``: a holder crashed (stopped) in its release may be redriven once and resume the step
it crashed at, with what it knew then. A stopped holder is taken over only once its stop grace
is over ("lease of dead holder ends"; before it, it is not yet proven stale). Then each
release's outcome is checked: a holder whose acquisition another participant took over never
ends released (only ``Lock.Lost``), and ``Lock.Lost`` only when it was taken over or its grace
was over (then the release cannot tell). The verdicts are the state machine's:
``ReleaseResumed?`` for a refused first release, ``ReleasedBefore?`` for a retried one (a lost
response), ``TakenOver?`` for a refused grant not its own or a refused skip. Variant
``taken_over_ends_released`` (a negative control): the protocol before, whose refused grant
ended the release as released - the model finds the redriven release that takes the row of a
head that has just taken the lock over (issue 25).
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Iterator, Optional

#: Step labels of faults (never a way out of a stuck state).
FAULT = re.compile(r"crashes|lost")
NAMES = ("a", "b", "c")


@dataclass(frozen=True)
class Lock:
    owner: Optional[str] = None
    expired: bool = False          # the holder's lease (or its retired stop grace) is over
    fence: int = 0
    served: Optional[int] = None   # None: the attribute is absent
    tickets: Optional[int] = None
    handed: Optional[str] = None   # who handed the lock over (unconfirmed), else None
    cut: int = 0                   # coalescing (fair_coalesce_model): tickets <= cut are superseded


@dataclass(frozen=True)
class Row:
    owner: Optional[str] = None
    token: Optional[tuple] = None  # (owner, park number) of a parked waiter
    ready: Optional[str] = None    # "fresh" | "old" (a hole's mark, ageing)
    left: bool = False


def _n(v: Optional[int]) -> int:
    return 0 if v is None else v


# -- the writes: (condition holds, item after) ------------------------------------------------


def acquire_ok(lock: Lock, me: str, stale: str) -> bool:
    return lock.owner is None or lock.owner in (me, stale) or lock.expired


def nobody_queues(lock: Lock) -> bool:
    return lock.tickets is None or lock.served == lock.tickets


def fast_acquire(lock: Lock, me: str, stale: str, variant: str = "") -> tuple[bool, Lock]:
    queue_ok = True if variant == "fast_ignores_queue" else nobody_queues(lock)
    ok = lock.owner == me or (acquire_ok(lock, me, stale) and queue_ok)
    if not ok:
        return False, lock
    return True, replace(lock, owner=me, expired=False, fence=lock.fence + 1, served=_n(lock.served),
                         tickets=_n(lock.tickets), handed=None)


def enqueue(lock: Lock, me: str, stale: str, variant: str = "") -> tuple[bool, Lock]:
    ok = variant == "enqueue_unconditional" or not (acquire_ok(lock, me, stale) and nobody_queues(lock))
    return ok, (replace(lock, tickets=_n(lock.tickets) + 1, served=_n(lock.served)) if ok else lock)


def may_pass(lock: Lock, me: str, stale: str, prev: int) -> bool:
    return acquire_ok(lock, me, stale) and lock.served is not None and lock.served == prev


def grant(lock: Lock, me: str, stale: str, nxt: str, prev: int, variant: str = "") -> tuple[bool, Lock]:
    ok = may_pass(lock, me, stale, prev) and (variant == "grant_ignores_cut" or lock.cut < prev + 1)
    return ok, (replace(lock, owner=nxt, expired=False, served=prev + 1, handed=me, fence=lock.fence + 1) if ok else lock)


def skip(lock: Lock, me: str, stale: str, prev: int) -> tuple[bool, Lock]:
    # (idempotent: a retry whose first try applied finds the ticket passed)
    ok = may_pass(lock, me, stale, prev) or (acquire_ok(lock, me, stale) and lock.served == prev + 1)
    return ok, (replace(lock, served=prev + 1) if ok else lock)


def claim(lock: Lock, me: str, ticket: int) -> tuple[bool, Lock]:
    ok = lock.owner == me and lock.served is not None and lock.served == ticket
    return ok, (replace(lock, handed=None) if ok else lock)


def revoke(lock: Lock, nxt: str, fence: int, me: str, variant: str = "") -> tuple[bool, Lock]:
    ok = lock.owner == nxt and lock.fence == fence and (variant == "revoke_ignores_claim" or lock.handed == me)
    return ok, (replace(lock, owner=None, expired=False, handed=None) if ok else lock)


def release(lock: Lock, me: str, fence: int) -> tuple[bool, Lock]:
    ok = lock.owner == me or (lock.owner is None and lock.fence == fence)
    return ok, (replace(lock, owner=None, expired=False) if ok else lock)


def release_alone(lock: Lock, me: str, fence: int, variant: str = "") -> tuple[bool, Lock]:
    ok, after = release(lock, me, fence)
    return (ok and (variant == "release_alone_ignores_queue" or nobody_queues(lock))), (
        after if ok and (variant == "release_alone_ignores_queue" or nobody_queues(lock)) else lock)


def take_parked(row: Optional[Row]) -> tuple[bool, Optional[Row]]:
    """TAKE_PARKED (a conditional delete): a row whose waiter is parked on a token goes."""
    ok = row is not None and row.token is not None and not row.left
    return ok, (None if ok else row)


def park(row: Optional[Row], me: str, token: tuple, variant: str = "") -> tuple[bool, Row]:
    row = row or Row()
    ok = not row.left and (variant == "park_ignores_ready" or row.ready is None)
    return ok, (replace(row, owner=me, token=token) if ok else row)


def mark(row: Optional[Row], since: str) -> tuple[bool, Optional[Row]]:
    ok = row is None or row.token is None
    return ok, (replace(row or Row(), ready=since) if ok else row)


def leave(row: Optional[Row], me: str) -> tuple[bool, Optional[Row]]:
    ok = row is None or row.owner in (None, me)
    return ok, (replace(row or Row(), owner=me, left=True, token=None) if ok else row)


def leave_present(row: Optional[Row], me: str) -> tuple[bool, Optional[Row]]:
    """LEAVE_PRESENT: LEAVE, refused when the row is gone (the janitor's write)."""
    return leave(row, me) if row is not None else (False, None)


def row_state(row: Optional[Row]) -> str:
    """As fair_protocol.row_state (no polling waiters here)."""
    if row is None:
        return "mark"
    if row.left:
        return "skip"
    if row.token is not None:
        return "wake"
    return "skip" if row.ready == "old" else "mark"


# -- the participants -------------------------------------------------------------------------

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


@dataclass
class Model:
    participants: int = 2
    variant: str = ""
    fallback: bool = True
    crashes: bool = True
    lost_responses: bool = True
    max_crashes: int = 1
    #: check ticket order (with crashes: a handoff runner that crashes after taking a row and
    #: before granting it loses that waiter's token - the waiter queues again at its next look)
    fifo: bool = True
    #: a failed wake-up first looks for the grantee's new park (before the claim window)
    early_look: bool = True
    #: a wake-up (``SendTaskSuccess``) applies and its response is lost: the waiter is woken,
    #: the releaser sees an error (one per participant, as a lost write response)
    lost_wakes: bool = True
    #: the claim window may end while a woken waiter has not confirmed yet (no timing
    #: assumption about the confirm: exclusion must hold anyway; a refused confirm queues
    #: again, so ticket order is not checked then)
    slow_confirm: bool = False
    #: record where crashes and lost responses were explored (``crashed_at``, ``lost_at``,
    #: ``visited``: step names, participant names left out)
    coverage: bool = False
    #: check liveness too (off: exclusion and order only, e.g. with no fallback)
    check_liveness: bool = True
    #: a crashed waiter's janitor (see the module's docstring)
    janitor_look: bool = False
    #: times the janitor's invocation may fail between two of its writes (then it is retried)
    janitor_crashes: int = 0
    #: a holder crashed in its release may be redriven: it resumes the step it crashed at (see
    #: the module's docstring)
    redrive: bool = False
    violations: list = field(default_factory=list)
    crashed_at: set = field(default_factory=set)
    lost_at: set = field(default_factory=set)
    visited: set = field(default_factory=set)
    #: (``coverage``) the steps of the janitor's hand-on visited, and those it crashed at
    janitor_visited: set = field(default_factory=set)
    janitor_crashed_at: set = field(default_factory=set)

    def names(self) -> tuple:
        return NAMES[: self.participants]

    def initial(self) -> State:
        return State(Lock(), (), tuple(Proc() for _ in self.names()))

    def steps(self, s: State) -> Iterator[tuple[str, State]]:
        names = self.names()
        dead = {n for n, p in zip(names, s.procs) if p.pc == "dead"}
        # a waiter the janitor handed on runs again, but crashed once (``janitor_look``: the
        # read/write model, a subclass, has participants without the janitor's fields)
        crashed = sum(1 for p in s.procs if p.pc == "dead" or (self.janitor_look and p.jan == "done")
                      or (self.redrive and p.redriven))
        for i, (me, p) in enumerate(zip(names, s.procs)):
            if p.pc == "dead" and self.janitor_look:
                yield from self._janitor(s, i, me, p)
            if p.pc == "dead" and self.redrive and p.granted and p.stopped_at in RELEASE_STEPS and not p.redriven:
                yield f"{me} is redriven at {p.stopped_at}", self._set(s, i, replace(p, pc=p.stopped_at, redriven=True))
            if p.pc in ("done", "dead"):
                continue
            if self.janitor_look and p.jan == "done" and p.jcrashes < self.janitor_crashes:
                # the janitor's invocation fails here (between two of its writes): retried from the start
                yield f"janitor crashes at {p.pc} handing on for {me}", self._set(s, i, replace(
                    p, pc="dead", jan="", jcrashes=p.jcrashes + 1, c=0, holding=False, row=None, nxt=None,
                    nfence=0, granted=False))
            if self.crashes and crashed < self.max_crashes and not (self.janitor_look and p.jan == "done"):
                yield f"{me} crashes at {p.pc}", self._set(s, i, replace(
                    p, pc="dead", **({"stopped_at": p.pc} if self.redrive else {})))
            # (``redrive``: a stopped holder is proven stale only once its stop grace is over)
            stale = s.lock.owner if s.lock.owner in dead and (
                not self.redrive or s.procs[names.index(s.lock.owner)].grace_over) else me
            for label, t in self._step(s, i, me, p, stale):
                yield label, self._note_takeover(s, t, me) if self.redrive else t
        # time passes
        if s.lock.owner in dead and not s.lock.expired and not (
                self.janitor_look and s.procs[names.index(s.lock.owner)].granted_dead):
            t = replace(s, lock=replace(s.lock, expired=True))
            if self.redrive:  # (the lease of a stopped holder ends: its stop grace, retired by the janitor)
                j = names.index(s.lock.owner)
                t = self._set(t, j, replace(t.procs[j], grace_over=True))
            yield "lease of dead holder ends", t
        for t, row in s.rows:
            # (a waiter that took its own row in a handoff run acts on it next: a step, not a
            # park timeout - the timing assumption)
            holder = next((p for p in s.procs if p.ticket == t and (
                p.pc in WAITING or (p.pc == "taken" and p.row is not None and p.row.owner == NAMES[s.procs.index(p)]))),
                None)
            if row.ready == "fresh" and holder is None:
                yield f"mark of {t} ages", s.with_row(t, replace(row, ready="old"))

    def _note_takeover(self, s: State, t: State, me: str) -> State:
        """``t`` with the holder of ``s`` marked taken over when ``me``'s write gave its lock to
        another (not its own grant: a stale or expired holder's, by a waiter or a helper)."""
        names, old, new = self.names(), s.lock.owner, t.lock.owner
        if old in names and old != me and new is not None and new != old:
            j = names.index(old)
            return self._set(t, j, replace(t.procs[j], taken_over=True))
        return t

    def _janitor(self, s: State, i: int, me: str, p: Proc):
        """The janitor's steps for the crashed ``me``: LEAVE_PRESENT on its row, then its look at the lock."""
        if p.ticket is None or p.jan == "done":
            return
        if p.jan == "":
            row = s.row(p.ticket)
            ok, after = leave_present(row, me)  # one write: a row a handoff took stays gone
            t = s.with_row(p.ticket, after) if ok else s
            yield f"janitor leaves {me}'s row", self._set(t, i, replace(p, jan="look"))
            return
        lock = s.lock
        if lock.owner == me and lock.served == p.ticket:
            ok, after = claim(lock, me, p.ticket)
            t = replace(s, lock=after)
            trusts_handed = self.variant == "janitor_retry_trusts_handed" and lock.handed is None
            if p.granted_dead and self.variant != "janitor_drops_claim" and not trusts_handed:  # hand_on: as my release
                yield f"janitor claims {me}'s grant and hands it on", self._set(t, i, replace(
                    p, pc="take_parked", c=p.ticket, holding=True, fence=after.fence, granted=True, jan="done"))
            else:
                yield f"janitor claims {me}'s grant", self._set(t, i, replace(p, jan="done"))
        elif (lock.owner is None or lock.expired) and _n(lock.served) < p.ticket:
            yield f"janitor hands {me}'s free lock to the head", self._set(s, i, replace(
                p, pc="take", c=_n(lock.served), holding=False, granted=True, row=None, jan="done"))
        else:
            yield f"janitor finds {me} not granted", self._set(s, i, replace(p, jan="done"))

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
            served = _n(lock.served)
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
                (lambda t: go("mark", holding=False, row=None)(t)) if _n(after.tickets) > p.c and v != "no_mark"
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
                queued = ((lambda t: go("mark", holding=False)(t)) if _n(after.tickets) > p.c and v != "no_mark"
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
            helper_parks = p.helping and _n(lock.served) <= p.c and v != "helper_looks_at_once"
            yield from self._write(s, i, me, p, f"mark {p.c + 1}", ok, s.with_row(p.c + 1, row),
                                   go("park", helping=False, awaits_mark=True) if helper_parks
                                   else go("after_loop", helping=False),
                                   go("take"))
        elif p.pc == "recheck":  # a refused grant: granted by my lost response?
            if lock.owner == p.nxt and lock.served == p.c + 1 and lock.handed == me:
                yield f"{me} rechecks: granted", go("wake", nfence=lock.fence)(s)
            elif p.holding and lock.owner == me and _n(lock.served) > p.c and v != "still_mine_ends":
                # still mine, the queue moved under me (a ticket passed by a runner of the
                # handoff that found me stale): nudge that waiter, then go on from the new
                # ``served`` (``StillMine?``, ``Resume``) - ended, the lock would stay mine
                yield f"{me} rechecks: still mine, served moved", go("nudge", resume=_n(lock.served))(s)
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

    # -- properties ---------------------------------------------------------------------------

    def check(self, s: State) -> list[str]:
        names = self.names()
        problems = []
        inside = [n for n, p in zip(names, s.procs) if p.pc == "cs"]
        if len(inside) > 1:
            problems.append(f"two holders: {inside}")
        for n, p in zip(names, s.procs) if self.redrive else ():  # a release's outcome tells a takeover
            if p.pc == "done" and p.taken_over and p.verdict != "lost":
                problems.append(f"{n} ended released though its acquisition was taken over")
            if p.pc == "done" and p.verdict == "lost" and not (p.taken_over or p.grace_over):
                problems.append(f"{n} ended lost though nobody could have taken its acquisition over")
        if s.overtake and self.fifo:
            problems.append(s.overtake)
        if self.janitor_look and s.lock.owner in names and not s.lock.expired:
            owner = s.procs[names.index(s.lock.owner)]
            if owner.granted_dead and owner.jan == "done" and all(p.pc in ("done", "dead") for p in s.procs):
                problems.append(f"key left held by {s.lock.owner}, granted after its crash, once the janitor was done")
        return problems

    def explore(self, limit: int = 3_000_000) -> dict:
        """Every reachable state: safety and FIFO on each; then liveness - from every state,
        some path without faults ends with every live participant done."""
        start = self.initial()
        seen = {start: None}
        edges: dict = {}
        todo = deque([start])
        transitions = 0
        while todo:
            s = todo.popleft()
            for problem in self.check(s):
                self.violations.append((problem, self.trace(seen, s)))
                return {"states": len(seen), "transitions": transitions, "violation": problem}
            nxt = []
            if self.coverage:
                self.visited.update(p.pc for p in s.procs)
                self.janitor_visited.update(p.pc for p in s.procs if self.janitor_look and p.jan == "done"
                                            and p.pc not in ("done", "dead"))
            for label, t in self.steps(s):
                transitions += 1
                nxt.append((label, t))
                if self.coverage and FAULT.search(label):
                    self._note_fault(label)
                if t not in seen:
                    seen[t] = (s, label)
                    todo.append(t)
                    if len(seen) > limit:
                        raise RuntimeError("state space too large")
            edges[s] = nxt
        if not self.check_liveness:
            return {"states": len(seen), "transitions": transitions, "violation": None}
        finished = {s for s in seen if all(p.pc in ("done", "dead") for p in s.procs)}
        reverse: dict = {}
        for s, ts in edges.items():
            for label, t in ts:
                if not FAULT.search(label):
                    reverse.setdefault(t, []).append(s)
        good, todo = set(finished), deque(finished)
        while todo:
            t = todo.popleft()
            for s in reverse.get(t, ()):
                if s not in good:
                    good.add(s)
                    todo.append(s)
        stuck = [s for s in seen if s not in good]
        if stuck:
            s = min(stuck, key=lambda x: len(self.trace(seen, x)))
            problem = "stuck: a live participant can never finish (a lost wake-up)"
            self.violations.append((problem, self.trace(seen, s)))
            return {"states": len(seen), "transitions": transitions, "violation": problem}
        return {"states": len(seen), "transitions": transitions, "violation": None}

    def _note_fault(self, label: str) -> None:
        crash = re.fullmatch(r"\w+ crashes at (\w+)", label)
        janitor = re.fullmatch(r"janitor crashes at (\w+) handing on for \w+", label)
        if janitor:
            self.janitor_crashed_at.add(janitor[1])
        elif crash:
            self.crashed_at.add(crash[1])
        else:
            self.lost_at.add(re.sub(r"\b(?:%s)\b" % "|".join(self.names()), "X", label))

    @staticmethod
    def trace(seen: dict, s: State) -> list[str]:
        out = []
        while seen[s] is not None:
            s, label = seen[s]
            out.append(label)
        return out[::-1]
