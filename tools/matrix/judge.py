"""The fault matrix's judge: a cell's invariants, read once its participants ended.

Invariants, every cell (each a list of violations, empty when it holds):

- ``alone``: the probe never finds more holders inside than the kind admits (readers and
  writers apart), at entry; a rate limit's admissions (their stamps, from the histories) never
  crowd a window of its period;
- ``lost update``: the probe's counter equals its accepted writes; a record's balance counts
  every run that succeeded (and at most those stopped besides);
- ``fences``: a key's fences at entry strictly increase (a section re-entering its own hold
  sees the same fence); no reader sees a write during its read or one newer than its fence
  (``overtakenReads``; a fence ahead of the last write is a writer that never wrote);
- ``outcome``: every participant ends as its kind documents (SUCCEEDED; its work's error;
  ``Lock.RecordTooLarge`` refused; ABORTED / TIMED_OUT when stopped / timed out and not
  redriven; ``Lock.Lost`` of a release resumed by a redrive past the grace; a client's lock
  timeout; a client crashed by the fault; a 5xx that a ``reach`` fault kept up past its call's
  Retry, the run failing with it as a section does with any error) - a raw injected error
  reaching a client (but the transient ones an application retries) or ending an execution is
  a violation;
- ``blocked``: after a participant ended abnormally (stopped, timed out, crashed), every
  other one still waiting enters or ends within its documented bound: the stop grace plus
  one liveness round (a polling waiter) or one park timeout (fair, read/write), or a
  client's lease, plus one hold (:data:`HOLD_MS`: a redriven holder holds again first) and
  :data:`SLACK_S` for a loaded machine, plus the holds of those that entered before it meanwhile
  (it queued behind them), plus the Retry's waits of a ``reach`` fault that outlasted them (a
  waiter's own call failing meanwhile), measured from the last abnormal end, before it entered,
  of a participant that held or took the lock (:func:`blocked`: a grantee stopped right after
  its claim restarts the bound; a redriven one that held at its stop is judged from its redrive
  too, as it waits for its own stopped hold; a redriven holder's hold again counts as long as it
  lasted, with its grace when its work timed out; a section's hold, which a waiter's probe may
  retire for the grace from when its presence token is ``PRESENCE_SETTLE_MS`` old, from then;
  a plain mutex behind a dead reader has two liveness rounds); and every participant ends
  within :data:`HARD_CAP_S`;
- ``left``: once settled (every grace passed, a section's counted from its token's settling),
  no lock of the cell is held and no queue row still parks anyone (with ``no-janitor``: but an
  ended holder's lock, which waits for its lease, and an ended waiter's row, which the next
  handoff passes; and an ended waiter's row whose ticket was served already, which no handoff
  reads again) (:func:`left_behind`); rows besides the lock items: at most
  :data:`ROWS_PER_PARTICIPANT` per participant;
- ``unlisted``: every call of a client or the janitor on the cell's keys has a row.
"""

from __future__ import annotations

import json
import time

from locked_workflow.state_machines import errors
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines.lock_writes import PRESENCE_SETTLE_MS
from locked_workflow.state_machines.retry_policy import TRANSIENT_RETRY
from tools.matrix import paths
from tools.matrix.roles import (CLIENT_LEASE_S, GRACE_S, HARD_CAP_S, HOLD_MS, LEASE_RAN_OUT, NAMESPACE, PARKING,
                                PLAIN_MUTEXES, READERS, ROWS_PER_PARTICIPANT, SLACK_S, WORK_TIMEOUTS, Participant,
                                now_ms)
from tools.matrix.stack import PARK_TIMEOUT_S, RATE_AT_ONCE, RATE_LIMIT, RATE_PERIOD_S, RECORD_KEY, SEMAPHORE_LIMIT
from tools.rate_checks import crowded_windows
from tools.stress import LIVENESS_ROUND_S


class Judging:
    """The judging half of :class:`tools.matrix.cells.Cell`: settle, then read each invariant
    (the cell's attributes: ``participants``, ``row``, ``cloud``, ``tables``, ``id``, ...)."""

    # -- after ----------------------------------------------------------------------------------

    def settle(self) -> None:
        """Wait until the cell's locks are left as they must be (nothing held, nothing parked:
        :meth:`_left` finds nothing), or at most until every grace has passed (a stopped
        holder's lock is retired to its end + grace; a crashed client's is free at its lease's
        end) - then :meth:`judge` reads what is left. Nothing the participants did can hold a
        lock again once they all ended, so an early clean look is the settled state."""
        until = settled_by_ms(self.participants)
        if until is None:
            return
        while now_ms() < until and self._left():
            time.sleep(min(1.0, max(0.0, (until - now_ms()) / 1000)))

    def items(self) -> list[dict]:
        items = []
        for page in self.cloud.dynamodb.get_paginator("scan").paginate(TableName=self.tables["locks"], ConsistentRead=True):
            items += [item for item in page["Items"] if self.id in json.dumps(item)]
        return items

    def judge(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {name: [] for name in ("alone", "lost update", "fences", "outcome", "blocked",
                                                             "left", "unlisted")}
        limit = {"semaphore": SEMAPHORE_LIMIT, "rate": 3, "rate-slots": RATE_AT_ONCE}.get(self.row.kind, 1)
        if self.row.kind in ("rate", "rate-slots"):
            stamps = [ms for p in self.participants for ms in p.admitted_ms]
            for a, b in crowded_windows(stamps, limit=RATE_LIMIT, period_ms=RATE_PERIOD_S * 1000):
                found["alone"].append(f"{RATE_LIMIT + 1} admissions within {b - a} ms (period {RATE_PERIOD_S} s)")
        for key in self.probe_keys:
            item = self.cloud.dynamodb.get_item(TableName=self.tables["probes"], Key={"pk": {"S": key}},
                                                ConsistentRead=True).get("Item", {})
            number = lambda name: int(item.get(name, {}).get("N", "0"))  # noqa: E731
            seen = [int(v["N"]) for v in item.get("seen", {}).get("L", [])]
            if number("violations") or (limit > 1 and any(s > limit for s in seen)):
                found["alone"].append(f"{key}: {number('violations')} entries found another holder inside (seen {seen})")
            if limit == 1 and number("counter") != number("accepted"):  # (a semaphore's holders share it)
                found["lost update"].append(f"{key}: counter {number('counter')} != accepted {number('accepted')}")
            fences = [int(v["N"]) for v in item.get("fences", {}).get("L", [])]
            nested = self.row.kind == "nested" or any(p.role == "Nested" for p in self.participants)
            if any(b < a or (b == a and not nested) for a, b in zip(fences, fences[1:])):
                found["fences"].append(f"{key}: {fences}")
            # (not staleReads: a reader's fence ahead of the last write is a writer that acquired
            # and never wrote - stopped before its write, its work timed out, its grant expired
            # unclaimed - which moves the fence without a write)
            if number("overtakenReads"):
                found["fences"].append(f"{key}: {number('overtakenReads')} reads that saw a write during the read "
                                       "or one newer than the reader's fence")
        if any(p.role == "Record" for p in self.participants):
            record = self.cloud.dynamodb.get_item(TableName=self.tables["records"], Key={RECORD_KEY: {"S": self.key}},
                                                  ConsistentRead=True).get("Item", {})
            balance = int(record.get("balance", {}).get("N", "0"))
            done = sum(p.status == "SUCCEEDED" for p in self.participants)
            maybe = sum(p.status != "SUCCEEDED" for p in self.participants)
            if not done <= balance <= done + maybe:
                found["lost update"].append(f"record {self.key}: balance {balance}, {done} runs succeeded, {maybe} others")
        for p in self.participants:
            if not self._documented(p):
                found["outcome"].append(f"{p.role} {p.arn.rpartition(':')[2]}: {p.status} {p.error} {(p.cause or '')[:200]}")
        found["blocked"] = self._blocked()
        found["left"] = self._left()
        found["unlisted"] = sorted(set(self.unlisted))
        return found

    def _documented(self, p: Participant) -> bool:
        # the work's own errors: the one it was asked for, its function timeout (a loaded machine)
        asked = ((p.document.get("fail") or p.document.get("innerFail")) and p.error == "RuntimeError") \
            or p.error in WORK_TIMEOUTS
        if p.is_client:
            return p.status == "SUCCEEDED" or asked or p.status == "CRASHED" and p.crashed or \
                p.error in (errors.ERROR_TIMEOUT, LEASE_RAN_OUT)
        if p.status == "SUCCEEDED" or asked or p.error == errors.ERROR_TIMEOUT:
            return True
        if p.error and any(code in p.error for code in paths.FIVE_XX) and \
                any(f.injected >= f.times for f in self.outlasting):
            return True  # a 5xx past its call's retries (a preparatory fault of reach) ends the run with it
        if p.error == errors.ERROR_LOST:
            return lost_after_redrive(p)
        if p.error == errors.ERROR_RECORD_TOO_LARGE:
            return self.situation == "refused"
        if p.error == errors.ERROR_SUPERSEDED:  # (coalescing: a newer run queued behind it)
            return p.role == "FairNewest"
        if p.status == "ABORTED":
            return p.stopped
        if p.status == "TIMED_OUT":
            return p.timed_out
        return False

    def _blocked(self) -> list[str]:
        return blocked(self.participants, outlasted_ms=self._outlasted_ms(), gate_holds=self.gate_holds)

    def _outlasted_ms(self) -> int:
        """How long a ``reach`` fault that outlasts its call's Retry held its caller up (ms): the
        Retry's waits, each at most its cap (``TRANSIENT_RETRY``: 1, 2, 4, 8, 8, 8 s)."""
        if not any(f.injected for f in self.outlasting):
            return 0
        policy, waits, wait = TRANSIENT_RETRY, 0.0, float(TRANSIENT_RETRY.interval_s)
        for _ in range(policy.max_attempts):
            waits += min(wait, policy.max_delay_s or wait)
            wait *= policy.backoff_rate
        return int(waits * 1000)

    def _left(self) -> list[str]:
        return left_behind(self.items(), self.participants, no_janitor=self.no_janitor, now_ms=now_ms())


def left_behind(items: list[dict], participants: list[Participant], *, no_janitor: bool, now_ms: int) -> list[str]:
    """The ``left`` invariant over the cell's items once its participants ended: no lock held,
    no queue row parking anyone, at most :data:`ROWS_PER_PARTICIPANT` rows per participant
    besides the lock items. An ended holder's lock with ``no_janitor`` waits for its lease; a
    row of a waiter that ended abnormally is a row left, not a park, with ``no_janitor`` (the
    next handoff passes it) or once its ticket was served (no handoff reads it again: the
    janitor's DEQUEUE, best effort, may come later)."""
    found, rows = [], 0

    def ended_abnormally(owner: str) -> bool:
        return any(p.abnormal and p.arn and p.arn.rpartition(":")[2] in owner for p in participants)

    # (a queue row ``!<ticket>!<lock key>`` whose ticket its lock item served: no handoff reads it again)
    served = {item["pk"]["S"]: int(item[fair.SERVED]["N"]) for item in items if fair.SERVED in item}

    def passed(key: str) -> bool:
        _, ticket, lock_key = key.split(fair.ROW_MARK, 2) if key.startswith(fair.ROW_MARK) else ("", "", "")
        return ticket.isdigit() and int(ticket) <= served.get(lock_key, 0)

    for item in items:
        key = item["pk"]["S"]
        if protocol.OWNER in item and protocol.EXPIRES_AT in item and int(item[protocol.EXPIRES_AT]["N"]) > now_ms:
            if no_janitor and ended_abnormally(item[protocol.OWNER]["S"]):
                continue  # with no janitor and no waiter left, an ended holder's lock waits for its lease
            found.append(f"{key} held by {item[protocol.OWNER]['S'][-60:]} for "
                         f"{(int(item[protocol.EXPIRES_AT]['N']) - now_ms) / 1000:.0f} s more")
        elif fair.TOKEN in item and "#" in key and not item[fair.TOKEN].get("S", "").startswith(
                fair.CLIENT_LEASE_PREFIX) and not (  # (a client's row: its lease ends it - a row left, counted below)
                # (with no janitor to dequeue it, a stopped waiter's row parks on until the next
                # handoff finds its execution ended and passes it: a row left, counted below;
                # and one the handoff passed already - granted, its wake-up failing - is never
                # read again, whether or not the janitor's DEQUEUE came yet: a row left too)
                (no_janitor or passed(key)) and ended_abnormally(item.get(protocol.OWNER, {}).get("S", ""))):
            found.append(f"{key} still parks {item.get(protocol.OWNER, {}).get('S', '?')[-60:]}")
        if protocol.FENCE not in item:
            rows += 1
    if rows > ROWS_PER_PARTICIPANT * len(participants):
        found.append(f"{rows} rows left besides the lock items (bound {ROWS_PER_PARTICIPANT} per participant)")
    return found


def lost_after_redrive(p: Participant) -> bool:
    """Whether ``p``'s ``Lock.Lost`` is documented: a release (or a section's departure)
    resumed by a redrive finds the lock not its own past its work's end plus the stop grace,
    when it cannot tell its own earlier release from a takeover (docs/safety.md, "Redrive":
    "Otherwise it fails Lock.Lost"); its hold was retired for the grace and may be taken."""
    before = [ms for ms in p.entered_ms if ms <= p.redriven_ms]
    return p.redriven and bool(before) and p.ended_ms >= before[-1] + GRACE_S * 1000


def settled_by_ms(participants: list[Participant]) -> int | None:
    """When every lock of the cell must be free again (ms; ``None``: nobody ended abnormally):
    the last abnormal end (a work past its function timeout too: its section retires its hold to
    the end + grace) + the grace (a crashed client's: its lease) + 2 s. A section's holder (its
    presence token) may instead be retired by a waiter's ABANDONED, which cannot know when the
    holder ended and gives it a grace from the waiter's look - made once the token is
    ``PRESENCE_SETTLE_MS`` old at the earliest, then once a liveness round - so that holder's
    lock may be held until its entry + the settle + one round + the grace."""
    ends = [p.ended_ms for p in participants if p.abnormal or p.stopped or p.timed_out or p.error in WORK_TIMEOUTS]
    ends += [_presence_settled_ms(p, p.ended_ms) + int(LIVENESS_ROUND_S * 1000) for p in participants
             if _presence_settled_ms(p, p.ended_ms) and (p.abnormal or p.stopped or p.timed_out)]
    crashed = any(p.status == "CRASHED" for p in participants)
    if not ends:
        return None
    return max(ends) + (max(GRACE_S, CLIENT_LEASE_S if crashed else 0) + 2) * 1000


def _end_ms(p: Participant) -> int:
    """When ``p`` ended (a redriven one: its stop came just before its redrive)."""
    return p.redriven_ms or p.ended_ms


def _held(p: Participant) -> bool:
    """Whether ``p`` held or took the lock when it ended abnormally: it entered its work
    before, or owned a lock of the cell then (a grantee stopped right after its claim)."""
    return p.abnormal and (p.held_at_end or any(ms <= _end_ms(p) for ms in p.entered_ms))


def blocked(participants: list[Participant], *, outlasted_ms: int = 0,
            gate_holds: list[tuple[int, int]] = ()) -> list[str]:
    """The ``blocked`` invariant over the participants' timelines (ms): every participant ends
    within :data:`HARD_CAP_S`; after one ended abnormally, each other one still waiting enters
    (or ends) within its bound: the stop grace (a crashed client: its lease) + one park timeout
    (a parking waiter) or liveness round + one hold + :data:`SLACK_S` + ``outlasted_ms`` (a
    ``reach`` fault's Retry waits), plus the holds of those that entered meanwhile. Each
    participant that held or took the lock and ended abnormally before the waiter entered
    restarts its bound (the lock waits for that one's grace now): the bound is measured from
    the last such end, as docs/safety.md states it - but not one that held beside the dead one
    (it entered before that one's end: a semaphore's other slot), whose later end says nothing
    of when the dead one's hold was retired. A redriven participant that held at its stop is
    a waiter for its own stopped hold after its redrive (its resumed work refused, the hold
    retired for the grace): judged from its redrive, and before it up to its stop. A redriven
    dead one's hold again counts as it lasted (:func:`_held_again`), a section's from its
    presence token's settling (:func:`_settled_ms`), and a plain mutex behind a dead reader
    has two liveness rounds (its sweep retires the entry, a later round reaps it). The time a
    ``gate:`` held a call (``gate_holds``: start, end in ms) within a waiter's wait counts too:
    the harness paused a participant there, as a scheduler may, and the lock cannot move on
    before that call is made (:func:`_gated_between`)."""
    found = []
    bound_end = max(p.started_ms for p in participants) + HARD_CAP_S * 1000
    for p in participants:
        if not p.status or p.ended_ms > bound_end:
            found.append(f"{p.role} {p.arn.rpartition(':')[2]} still running after {HARD_CAP_S} s")
    for dead in participants:
        if not dead.abnormal:
            continue
        end = _end_ms(dead)
        lease_s = CLIENT_LEASE_S if dead.status == "CRASHED" else GRACE_S
        for waiter in participants:
            # (a redriven participant that held when it was stopped waits, once redriven, for that
            # stopped hold as any waiter does: judged from its own redrive too)
            if (waiter is dead and not (dead.redriven and dead.held_at_end)) or waiter.started_ms > end \
                    or waiter.ended_ms <= end or waiter.status in ("ABORTED", "TIMED_OUT", "CRASHED"):
                continue  # it came later, was done by then, or ended abnormally itself
            later = [ms for ms in waiter.entered_ms if ms > end]
            if not later and any(ms <= end for ms in waiter.entered_ms):
                continue  # it was inside then: not waiting for the one that ended
            next_ms = later[0] if later else waiter.ended_ms
            if waiter is not dead and waiter.redriven and waiter.held_at_end and end < _end_ms(waiter) < next_ms:
                next_ms = _end_ms(waiter)  # it had taken the lock by its stop (its wait after: judged from there)
            if any(other is not dead and other is not waiter and _held(other) and end < _end_ms(other) < next_ms
                   and all(ms > end for ms in other.entered_ms) for other in participants):
                continue  # the lock passed to one that ended abnormally later: judged from that one's end
            round_s = PARK_TIMEOUT_S if waiter.role in PARKING else LIVENESS_ROUND_S
            if dead.role in READERS and waiter.role in PLAIN_MUTEXES:
                round_s *= 2  # a plain mutex's sweep retires a dead reader's entry, and reaps it a round later
            bound_ms = int((lease_s + round_s + SLACK_S + HOLD_MS / 1000) * 1000) + outlasted_ms
            # (a section's hold: a waiter's probe may retire it only once its presence token is
            # settled, for the grace from then - docs/safety.md: "until its token is 20 s old")
            bound_ms += max(0, _settled_ms(dead) - end)
            if dead.redriven and waiter is not dead:  # its hold again, as long as it lasted (HOLD_MS at least)
                bound_ms += max(0, _held_again(dead, end, next_ms) - HOLD_MS)
            bound_ms += _held_between(participants, end, next_ms, dead, waiter)
            bound_ms += _gated_between(gate_holds, end, next_ms)
            if next_ms - end > bound_ms:
                found.append(f"{waiter.role} {waiter.arn.rpartition(':')[2]} waited {(next_ms - end) / 1000:.0f} s "
                             f"after {dead.role} {dead.arn.rpartition(':')[2]} ended {dead.status} "
                             f"(bound {bound_ms / 1000:.0f} s)")
    return found


def _presence_settled_ms(p: Participant, by_ms: int) -> int:
    """When the presence token of ``p``'s last hold begun by ``by_ms`` became old enough
    (``PRESENCE_SETTLE_MS``) for a waiter's probe to retire that hold (ABANDONED: for the stop
    grace from the probe, which may push the end the janitor gave it further); 0 when ``p``
    registers no presence (a ``LockedWorkflow``, a client) or never held. The token is
    registered as the hold begins, beside its work (:attr:`Participant.entered_ms`)."""
    if not (p.role.endswith("Section") or p.role == "Nested"):
        return 0
    began = [ms for ms in p.entered_ms if ms <= by_ms]
    return began[-1] + PRESENCE_SETTLE_MS if began else 0


def _settled_ms(p: Participant) -> int:
    """:func:`_presence_settled_ms` of ``p``'s hold at its (abnormal) end, as a waiter's bound
    counts it. (A read/write section's waiters describe the execution first on
    ``TaskTimedOut``: an ended one is retired from its end, so theirs is the end: 0.)"""
    return 0 if NAMESPACE.get(p.role) == "rw" else _presence_settled_ms(p, _end_ms(p))


def _held_again(p: Participant, start_ms: int, end_ms: int) -> int:
    """How long the redriven ``p`` held the lock again between its redrive ``start_ms`` and
    ``end_ms`` (ms): a waiter waits for that hold, and for its stop grace when it ended
    abnormally once more (its work past its function timeout: the section retires its hold
    to the end + grace; stopped or timed out again)."""
    held = 0
    for ms in p.entered_ms:
        if start_ms < ms < end_ms:
            held += min(p.ended_ms or end_ms, end_ms) - ms
            if p.error in WORK_TIMEOUTS or p.status in ("ABORTED", "TIMED_OUT"):
                held += GRACE_S * 1000
    return held


def _gated_between(holds: list[tuple[int, int]], start_ms: int, end_ms: int) -> int:
    """How long at least one gate held a call between ``start_ms`` and ``end_ms`` (ms; holds
    that overlap count once)."""
    total, reached = 0, start_ms
    for began, ended in sorted(holds):
        began, ended = max(began, reached), min(ended, end_ms)
        if ended > began:
            total += ended - began
            reached = ended
    return total


def _held_between(participants: list[Participant], start_ms: int, end_ms: int, *skip: Participant) -> int:
    """How long the participants but ``skip`` held the lock between ``start_ms`` and
    ``end_ms`` (ms): a waiter queued behind them waits for them too (one whose work timed
    out holds for the stop grace after its end)."""
    held = 0
    for other in participants:
        if any(other is s for s in skip):
            continue
        for ms in other.entered_ms:
            if start_ms < ms < end_ms:
                held += min(other.ended_ms or end_ms, end_ms) - ms
                if other.error in WORK_TIMEOUTS or other.abnormal:
                    held += GRACE_S * 1000
    return held
