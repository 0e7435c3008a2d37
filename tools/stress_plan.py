"""The stress campaign's plan: the runs drawn from a seed, and the records of what each run did.

:func:`plan` draws each run's shape, key, work, padding, stop and redrive; :class:`Run`,
:class:`Hold`, :class:`Wait` and :class:`Report` carry what the campaign then observed, for
the judge (``tools/stress_judge.py``).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from tools.stress_stack import (
    CLIENT_SHAPES,
    FLOW_KEYS,
    PADDED_SHAPES,
    PADDING_BYTES,
    PROBE_TIMEOUT_S,
    RECORD_SIZES_KB,
    SHAPES,
    SHORT_LEASE_S,
)


@dataclass
class Hold:
    """A lock an ended execution still held at its end (read on the lock item right after)."""

    stored_key: str
    ended_ms: int
    grace_ms: int
    cancelled: bool = False  # held by a section Step Functions cancelled (the execution went on)


@dataclass
class Wait:
    """A time a participant waited for a stored key: from ``start_ms`` to ``end_ms`` (its entry,
    or the end of its wait), ``fair`` when it parked in a fair queue."""

    stored_key: str
    start_ms: int
    end_ms: int
    fair: bool = False


@dataclass
class Run:
    shape: str
    key: str
    document: dict
    stop: str | None = None  # "delay", "holding" (once inside), "waiting" (before it acquires), "long-wait"
    stop_after_s: float = 0.0
    redrive: bool = False
    reading: str = ""
    arn: str = ""
    status: str = ""
    error: str | None = None
    cause: str | None = None
    redriven: bool = False
    stopped: bool = False  # a stop landed while it ran
    stopped_waiting: bool = False  # ... before it had entered, after a refused acquire
    attempts_at_stop: int = 0
    holds: list[Hold] = field(default_factory=list)
    waits: list[Wait] = field(default_factory=list)
    events: list[tuple[int, str, str]] = field(default_factory=list)  # its timeline (diagnostics)
    task_errors: list[str | None] = field(default_factory=list)  # ClientAsync: each task's
    problems: list[str] = field(default_factory=list)  # a client's re-entrancy found broken
    trail: list[str] = field(default_factory=list)  # its last states entered (diagnostics)
    admissions: list[int] = field(default_factory=list)  # "Rate": the reserved times it was admitted at

    @property
    def padded(self) -> bool:
        return "padding" in self.document


@dataclass
class Report:
    runs: list[Run]
    probe: dict[str, dict]
    faults: Counter
    left_held: list[str]
    violations: dict[str, list[str]] = field(default_factory=dict)
    handoffs: list[tuple[str, int]] = field(default_factory=list)  # (stored key, ms to next entry)
    arrivals: list[tuple[str, float]] = field(default_factory=list)  # (a key of holes, s to pass it)
    records: dict[str, int] = field(default_factory=dict)  # the "Record" shape's: key -> balance
    coalesce_rows: list[str] = field(default_factory=list)  # queue rows left on the "Coalesce" keys

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())


def _work(rng: random.Random, shape: str) -> int:
    if shape == "Lease":
        return rng.choice([100, (SHORT_LEASE_S + 1) * 1000])
    if shape == "Timeout":  # the longest work outlasts the state machine after a wait
        return rng.choice([100, 200, PROBE_TIMEOUT_S * 1000 - 100])
    if rng.random() < 0.05:  # past the function's timeout: Sandbox.Timedout, the handler runs on
        return rng.randint(PROBE_TIMEOUT_S * 1000 + 300, PROBE_TIMEOUT_S * 1000 + 1500)
    return rng.randint(50, 400)


#: The key letter of the shapes whose keys are their own (the others': ``K``).
KEY_LETTER = {"Lease": "L", "Coalesce": "N", "Rate": "T"}


def plan(runs: int, keys: int, seed: int, negative_control: bool, shapes: dict[str, int] | None = None) -> list[Run]:
    """``runs`` runs drawn by ``seed`` from ``shapes`` (shape -> weight; default :data:`SHAPES`)."""
    rng = random.Random(seed)
    shapes = dict(shapes or SHAPES, **({"Unlocked": 25} if negative_control else {}))
    child_keys = max(2, keys - 2)
    planned = []
    for _ in range(runs):
        shape = rng.choices(list(shapes), weights=list(shapes.values()))[0]
        letter = KEY_LETTER.get(shape, "K")
        key = f"{letter}{rng.randrange(min(keys, FLOW_KEYS) if shape in ('Coalesce', 'Rate') else keys)}"
        if shape == "Record":  # each record in turn: near, over and under the limit
            key = sorted(RECORD_SIZES_KB)[sum(r.shape == "Record" for r in planned) % len(RECORD_SIZES_KB)]

        def item(key: str) -> dict:
            return {"key": key, "workMs": _work(rng, shape), "fail": rng.random() < 0.1}

        document = item(key)
        if shape == "Map":
            document = {"items": [item(key) for _ in range(rng.randint(2, 3))]}
        elif shape == "Children":
            document["fail"] = rng.random() < 0.05
            document["children"] = [item(f"C{rng.randrange(child_keys)}") for _ in range(rng.randint(2, 3))]
        elif shape == "ChildrenParallel":
            document["fail"] = rng.random() < 0.05
            document["left"], document["right"] = (item(f"C{rng.randrange(child_keys)}") for _ in range(2))
        elif shape == "Cancelled":  # the sibling fails while the section waits, works or releases
            document["failAfter"] = rng.randint(0, 3)
        elif shape == "Record":
            document = {"key": key, "waitS": rng.choice([0, 0, 1])}
        elif shape == "ClientAsync":  # several tasks of one event loop, on two keys (maybe one)
            pair = [key, f"K{rng.randrange(keys)}"]
            document = {"key": key, "tasks": [item(rng.choice(pair)) for _ in range(rng.randint(2, 4))]}
        run = Run(shape, key, document)
        if shape in PADDED_SHAPES and rng.random() < 0.08:
            run.document["padding"] = "p" * rng.randint(*PADDING_BYTES)
        if shape not in CLIENT_SHAPES and shape != "Unlocked":
            draw = rng.random()
            if shape == "Record" and draw >= 0.08:  # (no probe to stop it in: only after a delay)
                draw = 1.0
            if run.padded and draw < 0.4:  # a holder with a large input: the janitor reads its history
                run.stop = "holding"
            elif draw < (0.3 if run.padded else 0.08):
                run.stop, run.stop_after_s = "delay", rng.uniform(0.2, 2.0)
            elif draw < (0.3 if run.padded else 0.08) + 0.05:
                run.stop = "waiting"
            elif draw < (0.3 if run.padded else 0.08) + 0.08:
                run.stop = "long-wait"
            run.redrive = rng.random() < (0.8 if run.stop == "waiting" else 0.5)
        planned.append(run)
    return planned
