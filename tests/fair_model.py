"""An executable model of the fair lock (state_machines/fair_protocol.py) for exhaustive
exploration: the lock item, the participants' steps, crashes at every step, lost responses
on every write, lost wake-ups, and the park's fallback timeout.

The writes below read the item as the real expressions do; ``test_fair_model`` checks each
against DynamoDB itself on many item states, so the model cannot drift from the protocol.

Variants (negative controls) break one rule each: ``unconditional_park`` (the park does not
check that the lock is still not grantable), ``no_head_check`` (a waiter acquires without
being the head), ``fast_ignores_owner`` (the fast path ignores the holder).
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Iterator, Optional

CURRENT, OLD = "current", "old"
#: Step labels of faults (never a way out of a stuck state).
FAULT = re.compile(r"crashes|lost")


@dataclass(frozen=True)
class Item:
    owner: Optional[str] = None
    expired: bool = False          # the holder's lease (or its retired stop grace) is over
    fence: int = 0
    queue: tuple = ()
    tokens: tuple = ()             # sorted (owner, CURRENT | OLD) pairs

    def token(self, who: str) -> Optional[str]:
        return dict(self.tokens).get(who)

    def with_token(self, who: str, token: Optional[str]) -> "Item":
        tokens = {k: v for k, v in self.tokens if k != who}
        if token is not None:
            tokens[who] = token
        return replace(self, tokens=tuple(sorted(tokens.items())))


# -- the writes: (condition holds, item after) ------------------------------------------------


def acquire_ok(item: Item, me: str, stale: str) -> bool:
    """ACQUIRE's condition: free, mine, the stale holder's, or the lease is over."""
    return item.owner is None or item.owner in (me, stale) or item.expired


def _take(item: Item, me: str) -> Item:
    return replace(item, owner=me, expired=False, fence=item.fence + 1)


def fast_acquire(item: Item, me: str, stale: str, variant: str = "") -> tuple[bool, Item]:
    free = True if variant == "fast_ignores_owner" else acquire_ok(item, me, stale)
    ok = item.owner == me or (free and not item.queue)
    return ok, (_take(item, me) if ok else item)


def enqueue(item: Item, me: str) -> tuple[bool, Item]:
    ok = me not in item.queue
    return ok, (replace(item, queue=item.queue + (me,)) if ok else item)


def grantable(item: Item, me: str, stale: str, variant: str = "") -> bool:
    head = item.queue[:1] == (me,) or (variant == "no_head_check" and me in item.queue)
    return acquire_ok(item, me, stale) and head


def park(item: Item, me: str, stale: str, variant: str = "") -> tuple[bool, Item]:
    ok = variant == "unconditional_park" or not grantable(item, me, stale, variant)
    return ok, (item.with_token(me, CURRENT) if ok else item)


def acquire_head(item: Item, me: str, stale: str, variant: str = "") -> tuple[bool, Item]:
    ok = grantable(item, me, stale, variant)
    if not ok:
        return False, item
    taken = _take(item, me)
    return True, replace(taken, queue=tuple(o for o in taken.queue if o != me)).with_token(me, None)


def release(item: Item, me: str, fence: int) -> tuple[bool, Item]:
    ok = item.owner == me or (item.owner is None and item.fence == fence)
    return ok, (replace(item, owner=None, expired=False) if ok else item)


def remove_at(item: Item, who: str, index: int) -> tuple[bool, Item]:
    ok = index < len(item.queue) and item.queue[index] == who
    if not ok:
        return False, item
    return True, replace(item, queue=item.queue[:index] + item.queue[index + 1:]).with_token(who, None)


def head_token(item: Item) -> Optional[str]:
    """Who a release wakes (from the item as it was): the head, if it parked."""
    return item.queue[0] if item.queue and item.token(item.queue[0]) == CURRENT else None


def wake_after_dequeue(item: Item) -> Optional[str]:
    """Who a dequeue wakes (from the item after it): the new head, when the lock is free."""
    return head_token(item) if (item.owner is None or item.expired) else None


# -- the participants -------------------------------------------------------------------------

# pcs: fast, enqueue, park, parked, acquire_head, cs, release, check, done, dead


@dataclass(frozen=True)
class Proc:
    pc: str = "fast"
    fence: int = 0
    lost: int = 0        # lost responses used (each write's response may be lost once)
    target: Optional[str] = None   # whom to wake next (pc "wake"), then go on to ``after``
    after: str = "done"


@dataclass(frozen=True)
class State:
    item: Item
    procs: tuple           # Proc per participant
    wakes: tuple = ()      # in-flight wake-ups: sorted participant names
    entered: tuple = ()    # the order participants entered the queue (for FIFO)
    granted: tuple = ()    # the order of grants
    faults: int = 0        # lost wake-ups injected so far


NAMES = ("a", "b", "c")


@dataclass
class Model:
    participants: int = 2
    variant: str = ""
    fallback: bool = True
    crashes: bool = True
    lost_responses: bool = True
    lost_wakes: int = 1          # how many wake-ups may be lost
    violations: list = field(default_factory=list)

    def names(self) -> tuple:
        return NAMES[: self.participants]

    def initial(self) -> State:
        return State(Item(), tuple(Proc() for _ in self.names()))

    # every next state (a label for tracing)
    def steps(self, s: State) -> Iterator[tuple[str, State]]:
        names = self.names()
        dead = {n for n, p in zip(names, s.procs) if p.pc == "dead"}
        for i, (me, p) in enumerate(zip(names, s.procs)):
            if p.pc in ("done", "dead"):
                continue
            if self.crashes and p.pc != "cs":  # (a crash in the work: see below)
                yield f"{me} crashes at {p.pc}", self._set(s, i, replace(p, pc="dead"))
            if self.crashes and p.pc == "cs":
                yield f"{me} crashes holding", self._set(s, i, replace(p, pc="dead"))
            # the stale holder a waiter may take over: a dead owner (its grace over)
            stale = s.item.owner if s.item.owner in dead else me
            yield from self._step(s, i, me, p, stale)
        for who in s.wakes:
            rest = tuple(w for w in s.wakes if w != who)
            j = names.index(who)
            q = s.procs[j]
            if q.pc == "parked":
                yield f"wake {who}", replace(self._set(s, j, replace(q, pc="acquire_head")), wakes=rest)
            else:
                yield f"wake {who} refused", replace(s, wakes=rest)
            if s.faults < self.lost_wakes:
                yield f"wake {who} lost", replace(s, wakes=rest, faults=s.faults + 1)
        # a dead holder's lease ends (janitor RETIRE past the grace, or the lease itself)
        if s.item.owner in dead and not s.item.expired:
            yield "lease of dead holder ends", replace(s, item=replace(s.item, expired=True))

    def _set(self, s: State, i: int, p: Proc) -> State:
        return replace(s, procs=s.procs[:i] + (p,) + s.procs[i + 1:])

    def _write(self, s, i, me, p, label, ok_item, on_ok, on_refused):
        """A write: applied (its outcome seen), or applied with its response lost (the same
        state is retried; the write took effect)."""
        ok, item = ok_item
        nxt = on_ok if ok else on_refused
        yield f"{me} {label} {'ok' if ok else 'refused'}", nxt(replace(s, item=item))
        if self.lost_responses and p.lost == 0 and ok:
            yield f"{me} {label} response lost", self._set(replace(s, item=item), i, replace(p, lost=1))

    def _step(self, s: State, i: int, me: str, p: Proc, stale: str):
        v, names = self.variant, self.names()
        go = lambda pc, **kw: (lambda t: self._set(t, i, replace(t.procs[i], pc=pc, **kw)))  # noqa: E731
        if p.pc == "fast":
            yield from self._write(s, i, me, p, "fast acquire", fast_acquire(s.item, me, stale, v),
                                   lambda t: self._grant(t, i, me), go("enqueue"))
        elif p.pc == "enqueue":
            yield from self._write(s, i, me, p, "enqueue", enqueue(s.item, me), go("park"), go("park"))
        elif p.pc == "park":
            yield from self._write(s, i, me, p, "park", park(s.item, me, stale, v), go("parked"), go("acquire_head"))
        elif p.pc == "parked":
            if self.fallback:  # the park times out: its token is void; look again
                t = replace(s, item=s.item.with_token(me, OLD) if s.item.token(me) else s.item,
                            wakes=tuple(w for w in s.wakes if w != me))
                yield f"{me} park times out", go("check")(t)
        elif p.pc == "check":  # fallback: a dead head of a free lock is dequeued (and the next woken)
            head = s.item.queue[0] if s.item.queue else None
            dead = head is not None and s.procs[names.index(head)].pc == "dead"
            if dead and acquire_ok(s.item, me, stale):
                ok, item = remove_at(s.item, head, 0)
                woken = wake_after_dequeue(item) if ok else None
                t = replace(s, item=item)
                yield f"{me} removes dead head {head}", (
                    go("wake", target=woken, after="enqueue")(t) if woken else go("enqueue")(t))
            else:
                yield f"{me} re-queues", go("enqueue")(s)
        elif p.pc == "acquire_head":
            yield from self._write(s, i, me, p, "acquire as head", acquire_head(s.item, me, stale, v),
                                   lambda t: self._grant(t, i, me), go("confirm"))
        elif p.pc == "confirm":  # refused: a retried acquire whose first try took the lock, or park again
            yield f"{me} reads the lock", self._grant(s, i, me) if s.item.owner == me else go("park")(s)
        elif p.pc == "wake":  # SendTaskSuccess (a separate step: a crash before it loses it)
            t = replace(s, wakes=tuple(sorted(set(s.wakes) | {p.target})))
            yield f"{me} wakes {p.target}", go(p.after, target=None)(t)
        elif p.pc == "cs":
            yield f"{me} leaves the work", go("release")(s)
        elif p.pc == "release":
            before = s.item

            def released(t):
                woken = head_token(before)
                return go("wake", target=woken, after="done")(t) if woken else go("done")(t)
            yield from self._write(s, i, me, p, "release", release(s.item, me, p.fence), released, go("done"))

    def _grant(self, t: State, i: int, me: str) -> State:
        p = t.procs[i]
        t = self._set(t, i, replace(p, pc="cs", fence=t.item.fence))
        return replace(t, granted=t.granted + (me,))

    # -- properties ---------------------------------------------------------------------------

    def check(self, s: State) -> list[str]:
        names = self.names()
        problems = []
        inside = [n for n, p in zip(names, s.procs) if p.pc == "cs"]
        if len(inside) > 1:
            problems.append(f"two holders: {inside}")
        # FIFO: a grant to a queued participant never passes one queued before it and still alive
        if s.granted:
            last = s.granted[-1]
            if last in s.entered:
                before = s.entered[: s.entered.index(last)]
                passed = [n for n in before if n not in s.granted and s.procs[names.index(n)].pc != "dead"]
                if passed:
                    problems.append(f"{last} overtook {passed}")
        return problems

    def explore(self, limit: int = 2_000_000) -> dict:
        """Every reachable state: safety and FIFO on each; then liveness - from every state,
        some path ends with every live participant done."""
        start = self.initial()
        seen = {start: None}
        edges: dict = {}
        todo = deque([start])
        while todo:
            s = todo.popleft()
            for problem in self.check(s):
                self.violations.append((problem, self.trace(seen, s)))
                return {"states": len(seen), "violation": problem}
            nxt = []  # (label, state)
            for label, t in self.steps(s):
                new = tuple(n for n in t.item.queue if n not in t.entered)
                if new:
                    t = replace(t, entered=t.entered + new)
                nxt.append((label, t))
                if t not in seen:
                    seen[t] = (s, label)
                    todo.append(t)
                    if len(seen) > limit:
                        raise RuntimeError("state space too large")
            edges[s] = nxt
        # liveness: states from which "all live participants done" is reachable by the
        # protocol's own steps (no crash, no fault: a crash cannot be the way out)
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
            return {"states": len(seen), "violation": problem}
        return {"states": len(seen), "violation": None}

    @staticmethod
    def trace(seen: dict, s: State) -> list[str]:
        out = []
        while seen[s] is not None:
            s, label = seen[s]
            out.append(label)
        return out[::-1]
