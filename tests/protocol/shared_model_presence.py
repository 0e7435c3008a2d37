"""A read/write hold's presence (:mod:`shared_model`, apart from the rest): its row and a
waiter's probe, every interleaving (``test_shared_model_presence``)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import Iterator, Optional

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
