"""An executable model of the rate limit (``state_machines/rate_protocol.py``) for randomized
exploration: one rate item (DynamoDB JSON, as the table holds it), and runs - workflows'
(``$millis()``: the service clock) and clients' (DynamoDB's ``Date`` bounds: they reserve from
the earliest time AWS's clock can show and check the latest) - each wanting one entry, through
the protocol's steps: a consistent read, the ADMIT's values evaluated (later: the decision's
transitions), the ADMIT applied at DynamoDB (later again: other runs' ADMITs land in between
and refuse it), its response (late), the Wait until the reserved time (rounded up to the second,
then overslept), the guard, the transition into it (late) - a late run gives its permit up and
reads again; a refused run waits its spread, then reads again.

The model computes with the protocol's own Python rules (``permit_at_ms``, ``reserved_ms``,
``free_ms``, ``client_values``, ``on_time``); its ADMIT reads the item as DynamoDB reads the real
``rate_protocol.ADMIT`` (``test_rate_model`` checks it against DynamoDB on many item states, and
the JSONata of the state machine against the Python rules). Every delay is drawn from a heavy
tail, seconds past the margin and the lead included: the window invariant - no window of
``period`` holds more than ``limit`` entries - must hold under any of them.

Variants (negative controls) break one rule each: ``no_slot_clause`` (a permit's reuse is not
bounded by its slot: the reservation and the write ignore the slot), ``no_margin`` (a permit is
reused a ``period`` after its reserved time, without the entry margin), ``no_guard`` (a late run
enters anyway), ``no_lead`` (the protocol before the lead: safe, and gives more permits up).
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field
from typing import Optional

from locked_workflow.state_machines import rate_protocol as rate

VARIANTS = ("no_slot_clause", "no_margin", "no_guard", "no_lead")


def admit(item: dict, *, slot: str, values: dict, variant: str = "") -> Optional[dict]:
    """``rate_protocol.ADMIT`` on ``item`` (DynamoDB JSON; ``{}``: none): the item after it, or
    None when its condition fails."""
    n, cutoff, now = (int(values[k]["N"]) for k in (":n", ":cutoff", ":now"))
    count = item.get(rate.ADMISSIONS)
    if count is not None and int(count["N"]) != n:
        return None
    if variant != "no_slot_clause" and slot in item and int(item[slot]["N"]) > cutoff:
        return None
    if rate.ADMITTED_AT in item and int(item[rate.ADMITTED_AT]["N"]) > now:
        return None
    return {**item, slot: values[":now"], rate.ADMITTED_AT: values[":now"], rate.ADMISSIONS: values[":next"]}


@dataclass
class Timing:
    """The delays a run's steps take (ms), drawn per step: mostly short, sometimes seconds."""

    rng: random.Random
    #: how often a step is slow, and how slow it may be (ms)
    slow_odds: float = 0.15
    slow_max_ms: int = 6000
    #: the steps that may be slow (all: ``None``) - ``decide`` (read to the ADMIT's values),
    #: ``apply`` (to DynamoDB), ``response`` (the ADMIT's answer and the transition into the
    #: Wait), ``overslept`` (the Wait), ``transition`` (into the guard), ``retry``
    slow_steps: Optional[frozenset] = None

    def step(self, kind: str, usual_ms: int = 60) -> int:
        if (self.slow_steps is None or kind in self.slow_steps) and self.rng.random() < self.slow_odds:
            return self.rng.randint(0, self.slow_max_ms)
        return self.rng.randint(0, usual_ms)


@dataclass
class Outcome:
    entries: list[int] = field(default_factory=list)
    reservations: list[int] = field(default_factory=list)
    given_up: int = 0
    refused: int = 0


def simulate(*, runs: int, limit: int, period_ms: int, seed: int, clients: float = 0.3,
             width_ms: int = 1000, arrival_ms: int = 20_000, variant: str = "",
             slow_odds: float = 0.15, slow_max_ms: int = 6000, slow_steps: Optional[frozenset] = None) -> Outcome:
    """``runs`` runs arriving within ``arrival_ms`` on one key (a share ``clients`` of them
    clients with clock bounds ``width_ms`` wide), each until it enters: its entries (the guard's
    time: the work's entry as far as the guard sees it), every reservation, the permits given
    up and the refusals."""
    rng = random.Random(seed)
    timing = Timing(rng, slow_odds, slow_max_ms, slow_steps)
    period_eff = period_ms if variant != "no_margin" else period_ms - rate.ENTRY_MARGIN_MS
    lead = 0 if variant == "no_lead" else rate.ADMIT_LEAD_MS
    item: dict = {}
    out = Outcome()
    queue: list = []
    order = 0

    def at(t: int, *step) -> None:
        nonlocal order
        order += 1
        heapq.heappush(queue, (t, order, step))

    is_client = [rng.random() < clients for _ in range(runs)]
    for run in range(runs):
        at(rng.randint(0, arrival_ms), "read", run)
    while queue:
        now, _, step = heapq.heappop(queue)
        kind, run = step[0], step[1]
        if kind == "read":
            n, permit_at, last = rate.permit_at_ms(item, limit=limit, period_ms=period_eff)
            if variant == "no_slot_clause":
                permit_at = 0
            at(now + timing.step("decide"), "values", run, n, permit_at, last)
        elif kind == "values":
            n, permit_at, last = step[2:]
            # what the run reads as "now": the service clock, or a client's earliest bound
            skew = rng.randint(0, width_ms) if is_client[run] else 0
            reserved = max(now - skew + lead, permit_at, last)
            assert lead != rate.ADMIT_LEAD_MS or reserved == rate.reserved_ms(
                now_ms=now - skew, permit_at=permit_at, last=last)
            values = rate.client_values(n=n, reserved_ms=reserved, period_ms=period_eff)
            at(now + timing.step("apply"), "apply", run, n, reserved, values, skew, permit_at, last)
        elif kind == "apply":
            n, reserved, values, skew, permit_at, last = step[2:]
            after = admit(item, slot=rate.permit_attribute(n, limit), values=values, variant=variant)
            if after is None:
                out.refused += 1
                # the spread (rate_protocol.spread_seconds_expression): up to half the way to
                # the permit read, at most SPREAD_MAX_S
                ahead = rate.free_ms(now_ms=now, permit_at=permit_at, last=last) - now
                spread_s = rng.randint(0, min(rate.SPREAD_MAX_S, ahead // 2000))
                at(now + spread_s * 1000 + timing.step("retry"), "read", run)
                continue
            item = after
            out.reservations.append(reserved)
            at(now + timing.step("response"), "wait", run, reserved, skew)  # the response, the transition
        elif kind == "wait":
            reserved, skew = step[2:]
            if is_client[run]:  # sleeps until its earliest bound reaches the reservation
                early = now - skew
                end = now + max(0, reserved - early)
            else:  # a Wait of whole seconds (rate_protocol.turn_seconds_expression)
                end = now + max(0, math.ceil((reserved - now) / 1000)) * 1000
            at(end + timing.step("overslept", 10) + timing.step("transition"), "guard", run, reserved, skew)  # overslept, transition
        elif kind == "guard":
            reserved, skew = step[2:]
            seen = now + (width_ms - skew if is_client[run] else 0)  # a client: its latest bound
            if variant == "no_guard" or rate.on_time(seen, reserved):
                assert now >= reserved, (now, reserved)  # never before its reserved time
                out.entries.append(now)
            else:
                out.given_up += 1
                at(now + timing.step("retry"), "read", run)
    return out


def crowded(times_ms: list[int], *, limit: int, period_ms: int) -> list[tuple[int, int]]:
    """Windows of ``period_ms`` (half-open) holding more than ``limit`` of the times: the pairs
    ``limit`` apart less than ``period_ms`` apart."""
    t = sorted(times_ms)
    return [(t[i], t[i + limit]) for i in range(len(t) - limit) if t[i + limit] - t[i] < period_ms]
