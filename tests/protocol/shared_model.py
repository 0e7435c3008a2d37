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

The writes read the items as the real expressions do; ``test_shared_model_writes`` checks each
against DynamoDB itself. The exploration, the fault vocabulary, the lost-response rule (one
per participant; a lost response means the write was applied), the voiding of a re-parked
waiter's earlier tokens and the fair lock's row writes (MARK, LEAVE) and row reading come
from ``fair_model`` (the writes: ``fair_model_writes``).

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

``shared_model_presence.explore_presence`` (apart from the rest): one read/write hold's presence
handshake (``PRESENT_ROW`` / ``DEPART_ROW`` / dismissal) against a waiter's probe and its retire
transaction, with the variants ``settle_unchecked``, ``token_unchecked`` and
``departure_unchecked``.

``symmetry`` explores one of each pair of states that differ only by swapping two
participants of one kind; :func:`explore_held_as_bytes` (``shared_model_bytes``) holds states as
bytes, for the runs with every fault (``python tests/protocol/shared_model.py``).

The parts: the items and writes (``shared_model_writes``), the participants' state and steps
(``shared_model_steps``), and here the model - its faults and time passing, the symmetry, the
properties and the exploration.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from typing import Iterator, Optional

from fair_model import FAULT
from fair_model import Model as FairModel
from fair_model_writes import or_zero
from locked_workflow.state_machines.shared_protocol import READ, SHARED, WRITE
from shared_model_bytes import explore_held_as_bytes
from shared_model_steps import HANDOFF, LOOP, WAITING, Proc, ReadWriteSteps, State
from shared_model_writes import Lock, dequeue_row, renew

#: Kinds of participants: a reader, a writer (both of this protocol), a plain mutex.
KINDS = {"r": READ, "w": WRITE, "m": "mutex"}
#: Labels of steps that a batch admission must not need (besides faults).
NOT_FOR_BATCH = ("leaves the work", "park times out")

#: A finished or dead participant, its fields forgotten (``Model._canonical``).
_FINISHED = {pc: Proc(pc=pc) for pc in ("done", "dead")}


@dataclass
class Model(ReadWriteSteps, FairModel):
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
        if or_zero(s.lock.readers) != len(s.lock.entries):
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
                and p.ticket == or_zero(s.lock.served) + 1 and s.lock.owner in (None, SHARED)
                and all(q.pc != "dead" for q in s.procs))


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

