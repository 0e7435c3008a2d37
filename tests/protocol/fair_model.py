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

The writes (``fair_model_writes``) read the items as the real expressions do; ``test_fair_model``
checks each against DynamoDB itself on many item states, so the model cannot drift from the
protocol. The participants' state and steps: ``fair_model_steps``; here the model - its faults
(crashes, the janitor, redrives) and time passing, the properties and the exploration.

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

``janitor_look``: a crashed waiter's janitor (``lambdas/lock_janitor/logic.py``:
``leave_queue_of_ended``), whose steps may land anywhere after the crash - between a release's
grant to it and its revoke too: it marks the waiter's row left, then looks at the lock: granted
to the waiter (its ticket) and not confirmed (``handed`` another's), it takes the grant back
(DROP_GRANT: the lock freed; the releaser's REVOKE is then refused) and hands the free lock on
(the handoff for the head); confirmed, it leaves it (since issue 25 it never claims for an ended
waiter: a redriven run of it may have confirmed the grant and work under it - redriven waiters
are not modelled, ``tests/lock/test_fair_redrive.py`` reproduces that); a free lock whose head
does not move - or free at the waiter's own ticket, after its own drop - it hands on. With the
janitor, the lease of a waiter granted after its crash never ends in the model (it is the whole
lease, minutes: a liveness defect): a grant left held that way once everyone is done or crashed
and the janitor is done is a violation (the next arrival would wait that lease).
``janitor_crashes``: the janitor's invocation may also fail between any two of its writes (at
every step of its hand-on, its lost responses included), this many times; Lambda retries a
failed asynchronous invocation (twice), and the retry starts over - LEAVE_PRESENT (its row is
gone by then: refused, nothing written), then the look, which finds the lock free at the
waiter's ticket (its own drop) and hands it on again, or finds it handed on already. Variants
``janitor_drops_claim`` and ``janitor_retry_trusts_handed`` keep the janitor that claimed the
grant for its waiter (before issue 25): the first drops the claimed grant; the second (a
negative control) tells a grant made after the end by its unconfirmed ``handed`` rather than by
its time - its retry finds the grant its own first try confirmed and keeps it (held for the
lease).
``releaser_janitor`` (with ``max_crashes=2``): a crashed releaser's janitor too - at any time
after its crash, before, between or after the grantee's janitor's steps - finishes the handoff
its crash cut short (``LockClient.finish_handoff``): a grant it made that nobody confirmed, to a
grantee that crashed too, is revoked and handed on. Without it, the grantee's janitor looking
after the release took its row and before the grant finds nothing, and the grant stays for its
lease once both are done (issue 25, the fault matrix's ``left``): the check then waits for every
crashed participant's janitors.
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
from typing import Iterator

from fair_model_steps import RELEASE_STEPS, WAITING, ParticipantSteps, Proc, State
from fair_model_writes import Lock, claim, drop_grant, leave_present, or_zero, revoke

#: Step labels of faults (never a way out of a stuck state).
FAULT = re.compile(r"crashes|lost")
NAMES = ("a", "b", "c")


@dataclass
class Model(ParticipantSteps):
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
    #: (with ``janitor_look``) a crashed releaser's janitor finishes its handoff (see the
    #: module's docstring)
    releaser_janitor: bool = False
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
            if p.pc == "dead" and self.releaser_janitor and not p.jrel:
                yield from self._releaser_janitor(s, i, me, p)
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
        if lock.owner == me and lock.served == p.ticket and self.variant not in (
                "janitor_drops_claim", "janitor_retry_trusts_handed"):
            # DROP_GRANT: an unconfirmed grant is taken back (the lock freed), then the free lock
            # handed on; a confirmed one is never claimed (a redriven run may work under it)
            ok, after = drop_grant(lock, me, p.ticket)
            if ok:
                yield f"janitor drops {me}'s unconfirmed grant", self._set(replace(s, lock=after), i, replace(
                    p, pc="take", c=p.ticket, holding=False, granted=True, row=None, jan="done"))
            else:
                yield f"janitor finds {me}'s grant confirmed", self._set(s, i, replace(p, jan="done"))
        elif lock.owner == me and lock.served == p.ticket:  # (the variants: the janitor that claimed)
            ok, after = claim(lock, me, p.ticket)
            t = replace(s, lock=after)
            trusts_handed = self.variant == "janitor_retry_trusts_handed" and lock.handed is None
            if p.granted_dead and self.variant != "janitor_drops_claim" and not trusts_handed:  # hand_on: as my release
                yield f"janitor claims {me}'s grant and hands it on", self._set(t, i, replace(
                    p, pc="take_parked", c=p.ticket, holding=True, fence=after.fence, granted=True, jan="done"))
            else:
                yield f"janitor claims {me}'s grant", self._set(t, i, replace(p, jan="done"))
        elif (lock.owner is None or lock.expired) and or_zero(lock.served) <= p.ticket:  # (=: a retry after its drop)
            yield f"janitor hands {me}'s free lock to the head", self._set(s, i, replace(
                p, pc="take", c=or_zero(lock.served), holding=False, granted=True, row=None, jan="done"))
        else:
            yield f"janitor finds {me} not granted", self._set(s, i, replace(p, jan="done"))

    def _releaser_janitor(self, s: State, i: int, me: str, p: Proc):
        """The janitor's last step for the crashed ``me`` (``LockClient.finish_handoff``): a
        grant ``me`` made that nobody confirmed (``handed`` = ``me``) to a grantee that crashed
        too is revoked (REVOKE, on the lock as read: its read, the grantee's status - final
        once crashed - and its conditional write are one step here, as REVOKE's condition is
        the read's) and, a ticket being out, the lock handed on: ``me`` runs the handoff for
        the head, as the janitor's hand-on does. Else nothing."""
        names, lock = self.names(), s.lock
        if lock.handed == me and lock.owner in names and s.procs[names.index(lock.owner)].pc == "dead":
            ok, after = revoke(lock, lock.owner, lock.fence, me)
            assert ok  # (its condition is what was just read)
            t = replace(s, lock=after)
            if or_zero(after.tickets) > or_zero(after.served):
                yield f"janitor revokes {me}'s grant to {lock.owner} and hands on", self._set(t, i, replace(
                    p, pc="take", c=or_zero(after.served), holding=False, granted=True, row=None, jan="done",
                    jrel=True))
            else:
                yield f"janitor revokes {me}'s grant to {lock.owner}", self._set(t, i, replace(p, jrel=True))
        else:
            yield f"janitor finds no grant of {me} to finish", self._set(s, i, replace(p, jrel=True))

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
            if owner.granted_dead and owner.jan == "done" and all(p.pc in ("done", "dead") for p in s.procs) and (
                    not self.releaser_janitor or all(p.jrel for p in s.procs if p.pc == "dead")):
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
