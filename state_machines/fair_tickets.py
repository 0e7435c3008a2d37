"""The fair lock's tickets (:mod:`fair_protocol`): the lock item's two counters - the last
ticket handed out (``tickets``) and the ticket of the last grant (``served``) -, the reading
"nobody queues" and ``ENQUEUE``, which takes the next ticket. The coalescing ENQUEUEs build on
it (:mod:`fair_coalesce`)."""

from __future__ import annotations

from locked_workflow.state_machines.lock_protocol import ACQUIRE, LockWrite

#: The last ticket handed out (lock item).
TICKETS = "tickets"
#: The ticket of the last grant (lock item); the head of the queue is ``served + 1``.
SERVED = "served"

#: Nobody queues: no ticket out beyond the last grant.
NOBODY_QUEUES = f"(attribute_not_exists(#{TICKETS}) OR #{SERVED} = #{TICKETS})"
#: The SET actions that start both counters at 0 where they are absent (a key's first ticket or
#: fast acquire).
START_COUNTERS = [f"#{SERVED} = if_not_exists(#{SERVED}, :zero)", f"#{TICKETS} = if_not_exists(#{TICKETS}, :zero)"]
#: ENQUEUE: take the next ticket (``ALL_NEW``: ``tickets`` is mine) - refused when the fast
#: path would take the lock now. Values ``:me``, ``:stale``, ``:now``, ``:zero``, ``:one``.
ENQUEUE = LockWrite(
    update=f"SET #{TICKETS} = if_not_exists(#{TICKETS}, :zero) + :one, {START_COUNTERS[0]}",
    condition=f"NOT (({ACQUIRE.condition}) AND {NOBODY_QUEUES})",
)
