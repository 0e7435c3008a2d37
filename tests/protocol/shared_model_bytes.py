"""The read/write model's full exploration (:mod:`shared_model`): millions of states, each held
as its marshalled encoding and the graph as integer arrays (``python tests/protocol/shared_model.py``)."""

from __future__ import annotations

from collections import deque
from dataclasses import fields
from typing import TYPE_CHECKING

from fair_model import FAULT
from fair_model_writes import Row
from shared_model_steps import Proc, State
from shared_model_writes import KindRow, Lock

if TYPE_CHECKING:
    from shared_model import Model

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

