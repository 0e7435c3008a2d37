"""The fair lock's queue limits (:mod:`fair_protocol`, step 8; ``queue=QueueLimit.keep_newest(n)``
and ``keep_oldest(n)``): the lock item's ``cut`` and ``cutBy``, the writes that supersede queued
tickets or bound the queue (``ENQUEUE_NEWEST``, ``ENQUEUE_BOUNDED``), pass superseded tickets
(``JUMP``) and refuse a superseded park (``PARK_UNLESS_CUT``), and their JSONata pieces and causes
(``Lock.Superseded``, ``Lock.QueueFull``). :mod:`fair_protocol` names them all (its
``LOCK_WRITES``, ``LOCK_CHECKS``); ``tests/protocol/fair_coalesce_model.py`` model-checks them."""

from __future__ import annotations

from typing import Any, Mapping

from locked_workflow.state_machines.fair_tickets import ENQUEUE, SERVED, TICKETS
from locked_workflow.state_machines.lock_protocol import ACQUIRE, OWNER_SEPARATOR, LockWrite

#: Coalescing (``queue=QueueLimit.keep_newest(n)``, lock item): tickets up to ``cut`` not granted
#: by then are superseded - GRANT refuses them forever - and ``cutBy`` is the owner of the run
#: whose arrival moved ``cut`` last (a newer run than every superseded one).
CUT, CUT_BY = "cut", "cutBy"
#: Ticket ``:ticket`` is not superseded (a GRANT's, and a coalescing park's, condition).
NOT_CUT = f"(attribute_not_exists(#{CUT}) OR #{CUT} < :ticket)"

#: ENQUEUE_NEWEST (``keep_newest(n)``): ENQUEUE that also supersedes the oldest queued waiter
#: when ``n`` wait already - in the same write, so the count is exact under any concurrency:
#: ``cut`` = my ticket - ``n`` (``:kept`` = ``n`` - 1; ``cut`` only grows, as ``tickets`` does).
#: ``ALL_NEW``: my ticket ``t`` and ``served``; ticket ``t - n`` is superseded by me iff
#: ``t - n > served`` (:func:`superseded_ticket_expression`) - else it was granted (or passed)
#: before this write, and GRANT, conditioned on ``cut``, can never grant it after. Values as
#: ENQUEUE's, plus ``:kept``.
ENQUEUE_NEWEST = LockWrite(
    update=(f"{ENQUEUE.update}, #{CUT} = if_not_exists(#{TICKETS}, :zero) - :kept, #{CUT_BY} = :me"),
    condition=ENQUEUE.condition,
)
#: ENQUEUE_BOUNDED (``keep_oldest(n)``): ENQUEUE only while fewer than ``n`` wait, read as the
#: lock item was read (``:served``; ``:bound`` = that ``served`` + ``n``): refused, the lock
#: item is read again - ``n`` wait: ``Lock.QueueFull``, else it moved on: try again. Values as
#: ENQUEUE's, plus ``:served``, ``:bound``.
ENQUEUE_BOUNDED = LockWrite(
    update=ENQUEUE.update,
    condition=f"({ENQUEUE.condition}) AND #{SERVED} = :served AND #{TICKETS} < :bound",
)
#: JUMP: pass every superseded ticket at once (``served`` = ``cut``) - whoever may pass
#: ticket ``:prev`` + 1 (ACQUIRE's condition), when ``cut`` is beyond it. Never moves
#: ``served`` back (``served <= cut``); a retry whose first try applied finds
#: ``served = cut > :prev`` and applies again (idempotent). ``ALL_NEW``: the new ``served``.
#: Values as ACQUIRE's condition's, plus ``:prev``.
JUMP = LockWrite(
    update=f"SET #{SERVED} = #{CUT}",
    condition=f"({ACQUIRE.condition}) AND #{SERVED} >= :prev AND #{SERVED} <= #{CUT} AND #{CUT} > :prev",
)
#: PARK_UNLESS_CUT: the lock item's ConditionCheck beside a coalescing waiter's PARK, in one
#: transaction: my ticket ``:ticket`` is not superseded. The rendezvous of a supersede: a park
#: committed before ENQUEUE_NEWEST superseded its ticket is found by the newer run, which takes
#: the row (a DeleteItem returning it) and wakes its token with ``Lock.Superseded``
#: (``SendTaskFailure``); a park after it is refused, and its waiter looks (INSPECT finds
#: ``cut >= ticket``: superseded). Values ``:ticket``.
PARK_UNLESS_CUT = LockWrite(update="", condition=NOT_CUT)


def superseded_ticket_expression(ticket: str, served: str, waiters: int) -> str:
    """JSONata: the ticket ENQUEUE_NEWEST (my ``ticket``, ``served`` as it returned) superseded
    - ``ticket - waiters`` - or 0 when none (that ticket was granted or passed before)."""
    return f"(({ticket}) - {int(waiters)} > ({served}) ? ({ticket}) - {int(waiters)} : 0)"


#: The cause of ``Lock.Superseded``, before the newer run's execution ARN.
SUPERSEDED_CAUSE = "superseded by a newer run queued on the same key: "


def superseded_cause_expression(by_owner: str) -> str:
    """JSONata: the cause ``Lock.Superseded`` carries - the newer run's execution (its owner's
    execution ARN: :data:`lock_protocol.OWNER_SEPARATOR`)."""
    return f"'{SUPERSEDED_CAUSE}' & $substringBefore({by_owner}, '{OWNER_SEPARATOR}')"


def queue_full_cause(waiters: int) -> str:
    """The cause ``Lock.QueueFull`` carries."""
    return (f"{int(waiters)} run(s) already queue on this key (QueueLimit.keep_oldest({int(waiters)})): "
            "this run was refused without queuing")


def cut_of(item: Mapping[str, Any]) -> int:
    """The last superseded ticket of a coalescing lock item (``QueueLimit.keep_newest``); 0 on
    an item with no cut (every plain fair key)."""
    return int(item.get(CUT, {}).get("N", "0"))
