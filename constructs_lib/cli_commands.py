"""The ``locked-workflow locks`` commands: each reads what it needs (:mod:`cli_items`) and
returns its exit code and its result (printed by :mod:`~locked_workflow.constructs_lib.cli`);
a release or a queue's clearing goes through the lock client's own writes.
"""

from __future__ import annotations

import argparse
from typing import Any, Mapping

from locked_workflow.constructs_lib.cli_items import (
    NAMESPACE_SCAN_ITEMS,
    SHOWN_WAITERS,
    Locks,
    describe,
    describe_rate,
    fair_row,
    fair_waiters,
)
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import rate_protocol as rate
from locked_workflow.state_machines import semaphore_protocol as sp
from locked_workflow.state_machines import shared_protocol as rw

#: Exit codes.
OK, FAILED, REFUSED = 0, 1, 2


class CliError(Exception):
    """A clear, expected failure: printed without a traceback, exit 1."""



def _stored(args: argparse.Namespace) -> str:
    problem = p.namespace_problem(args.namespace) or p.key_problem(args.key, args.namespace)
    if problem:
        raise CliError(f"the lock key {problem}" if not p.namespace_problem(args.namespace)
                       else f"the namespace {problem}")
    stored = p.namespaced(args.namespace, args.key)
    slot = getattr(args, "slot", None)
    if slot is None:
        return stored
    if not 0 <= slot < sp.MAX_LIMIT:
        raise CliError(f"--slot must be a semaphore slot from 0 to {sp.MAX_LIMIT - 1}, got: {slot}")
    return sp.slot_key(stored, slot)


def cmd_list(locks: Locks, args: argparse.Namespace, now_ms: int) -> tuple[int, Any]:
    if args.namespace is not None and p.namespace_problem(args.namespace):
        raise CliError(f"the namespace {p.namespace_problem(args.namespace)}")
    rows = [describe(item, now_ms) for item in locks.scan() if p.KEY_ATTRIBUTE in item and not fair_row(item)]
    if args.namespace is not None:
        rows = [r for r in rows if r["namespace"] == args.namespace]
    if args.held:
        rows = [r for r in rows if r["state"] not in ("free", "rate")]
    rows.sort(key=lambda r: (r["namespace"], r["key"], r["slot"] == "rate", r["slot"] if isinstance(r["slot"], int) else 0))
    return OK, rows


def _read(locks: Locks, args: argparse.Namespace) -> tuple[str, dict]:
    """The stored key and the lock item of ``args.key`` (a clear error when there is none:
    naming the namespaces that have the key, if any)."""
    stored = _stored(args)
    item = locks.get(stored)
    if not item:
        slot = f" slot {args.slot}" if args.slot is not None else ""
        hint = ""
        if args.slot is None and locks.get(sp.slot_key(stored, 0)):
            hint = ": it is a semaphore, give --slot N (`locks list` shows its slots)"
        else:
            namespaces, complete = locks.namespaces_of(args.key)
            others = [n for n in namespaces if n != args.namespace]
            if others:
                searched = "" if complete else f", among the first {NAMESPACE_SCAN_ITEMS} items"
                hint = (f"; the key is in namespace{'s' if len(others) > 1 else ''} "
                        f"{', '.join(map(repr, others))}{searched} (give --namespace)")
        raise CliError(
            f"no lock item for key {args.key!r}{slot} in namespace {args.namespace!r} (table {locks.table}){hint}"
        )
    return stored, item


def cmd_show(locks: Locks, args: argparse.Namespace, now_ms: int) -> tuple[int, Any]:
    _, item = _read(locks, args)
    shown = describe(item, now_ms)
    shown["executionStatus"] = locks.execution_status(shown["execution"])
    for reader in shown.get("readers", [])[:SHOWN_WAITERS]:
        reader["executionStatus"] = locks.execution_status(reader["execution"])
    if fair.TICKETS in item:  # a fair lock: its waiters' rows, in ticket order
        shown["waiters"] = fair_waiters(locks, item[p.KEY_ATTRIBUTE]["S"], item)
    else:
        shown["waiters"] = "not recorded: waiters of this lock kind poll"
    return OK, shown


def cmd_release(locks: Locks, args: argparse.Namespace, now_ms: int) -> tuple[int, Any]:
    from locked_workflow.constructs_lib.client_lease import lease_from_item
    from locked_workflow.constructs_lib.lock_client import LockClient, LockLost

    stored, item = _read(locks, args)
    shown = describe(item, now_ms)
    if shown.get("mode") == "shared" or args.reader is not None:
        return _release_reader(locks, args, stored, item, shown)
    if shown["owner"] is None:
        return OK, {**shown, "released": False, "message": "the lock is free: nothing to release"}
    if args.owner is not None and args.owner != shown["owner"]:
        raise CliError(f"the lock is held by {shown['owner']!r}, not by --owner {args.owner!r}: nothing released")
    if args.fence is not None and args.fence != shown["fence"]:
        raise CliError(f"the lock's fence is {shown['fence']}, not --fence {args.fence}: nothing released")
    shown["executionStatus"] = locks.execution_status(shown["execution"])
    alive = shown["executionStatus"] in p.ALIVE_STATUSES or (
        shown["execution"] is None and shown["state"] == "held")
    warning = ("WARNING: the holder may still be running; releasing lets a second holder in while it "
               "runs (its late writes are stopped only by fencing)") if alive else None
    if not args.force:
        return REFUSED, {**shown, "released": False, "warning": warning,
                         "message": f"would release the lock held by {shown['owner']!r} (fence "
                                    f"{shown['fence']}); add --force to release it"}
    # (a fair or read/write lock: the release hands the lock to the next waiters and wakes them)
    kind = (LockClient.READ_WRITE if _read_write(locks, stored, item)
            else LockClient.FAIR if fair.TICKETS in item else LockClient.MUTEX)
    client = LockClient(locks.table, namespace=args.namespace, dynamodb=locks.dynamodb,
                        stepfunctions=locks.stepfunctions, kind=kind)
    try:
        client.release(lease_from_item(args.key, item))
    except LockLost:
        now = describe(locks.get(stored) or item, now_ms)
        raise CliError(
            f"the lock changed since it was read (holder now {now['owner']!r}, fence {now['fence']}): "
            "nothing released"
        ) from None
    return OK, {**shown, "released": True, "warning": warning,
                "message": f"released the lock held by {shown['owner']!r} (fence {shown['fence']})"}


def _read_write(locks: Locks, stored: str, item: Mapping[str, Any]) -> bool:
    """Whether ``item`` is a read/write lock's: it counts readers, or its head's row says what its
    waiter wants (a fair lock's rows do not)."""
    if rw.READERS in item:
        return True
    head = next(iter(fair.queued_tickets(item)), None)
    return head is not None and rw.KIND in locks.get(fair.row_key(stored, head))


def _release_reader(locks: Locks, args: argparse.Namespace, stored: str, item: Mapping[str, Any],
                    shown: dict) -> tuple[int, Any]:
    """Remove one reader's entry from a shared hold (``--reader OWNER``): conditioned on that
    entry only; the last reader out hands the key to the next waiters."""
    from locked_workflow.constructs_lib.lock_client import Lease, LockClient, LockLost

    readers = {r["owner"]: r for r in shown.get("readers", [])}
    if args.reader is None:
        raise CliError(f"the lock is held shared by {len(readers)} reader(s): give --reader OWNER "
                       "(`locks show` lists them)")
    if args.reader not in readers:
        raise CliError(f"{args.reader!r} holds no shared hold on this lock (readers: {sorted(readers)}): "
                       "nothing released")
    reader = {**readers[args.reader], "executionStatus": locks.execution_status(readers[args.reader]["execution"])}
    alive = reader["executionStatus"] in p.ALIVE_STATUSES or (reader["execution"] is None and reader["state"] == "held")
    warning = ("WARNING: the reader may still be running; releasing lets a writer in while it reads") if alive else None
    if not args.force:
        return REFUSED, {**reader, "released": False, "warning": warning,
                         "message": f"would remove the shared hold of {args.reader!r}; add --force to remove it"}
    entry = rw.readers_of(item)[args.reader]
    lease = Lease(key=args.key, table_key=stored, owner=args.reader, fence=int(item.get(p.FENCE, {}).get("N", "0")),
                  acquired_at=int(entry[p.ACQUIRED_AT]["N"]), expires_at=int(entry[p.EXPIRES_AT]["N"]), shared=True)
    client = LockClient(locks.table, namespace=args.namespace, dynamodb=locks.dynamodb,
                        stepfunctions=locks.stepfunctions, kind=LockClient.READ_WRITE)
    try:
        client.release(lease)
    except LockLost:
        raise CliError(f"the shared hold of {args.reader!r} ended since it was read: nothing released") from None
    return OK, {**reader, "released": True, "warning": warning,
                "message": f"removed the shared hold of {args.reader!r}"}



def cmd_clear_head(locks: Locks, args: argparse.Namespace, now_ms: int) -> tuple[int, Any]:
    """Clear a dead head from a fair queue: mark its row left (only that waiter's, only while it
    is the head) and, the lock being free, hand the lock to the next waiter. Refused while the
    head's execution may still run (unless ``--force``: it then queues again at its next look)."""
    from locked_workflow.constructs_lib.lock_client import LockClient

    stored, item = _read(locks, args)
    if fair.TICKETS not in item:
        raise CliError(f"{args.key!r} is not a fair lock: it has no queue")
    waiters = fair_waiters(locks, stored, item)
    if not waiters:
        return OK, {"cleared": False, "message": "nobody queues: nothing to clear"}
    head = waiters[0]
    status = locks.execution_status(head["execution"])
    shown = {**head, "executionStatus": status}
    if status in p.ALIVE_STATUSES and not args.force:
        return REFUSED, {**shown, "cleared": False,
                         "message": f"the head's execution is {status}: add --force to clear it anyway"}
    client = LockClient(locks.table, namespace=args.namespace, dynamodb=locks.dynamodb,
                        stepfunctions=locks.stepfunctions, kind=LockClient.FAIR)
    if head["owner"] is not None:
        client.leave_queue(fair.row_key(stored, head["ticket"]), head["owner"])
    else:  # a hole (a ticket whose waiter never parked): mark it, then skip it now
        client.handoff(stored, me="operator", served=head["ticket"] - 1, fence=None, hole_s=0)
    return OK, {**shown, "cleared": True, "message": f"cleared ticket {head['ticket']} ({head['owner']}) "
                                                     "from the queue; a free lock went to the next waiter"}



def cmd_rate(locks: Locks, args: argparse.Namespace, now_ms: int) -> tuple[int, Any]:
    """A rate limit's state on a key (``Lock.rate``): its admissions and its next permit."""
    problem = p.namespace_problem(args.namespace) or p.key_problem(args.key, args.namespace, rate.reserve_bytes())
    if problem:
        raise CliError(f"the lock key {problem}" if not p.namespace_problem(args.namespace)
                       else f"the namespace {problem}")
    if not rate.MIN_PERIOD_S <= args.period <= rate.MAX_PERIOD_S:
        raise CliError(f"--period must be whole seconds from 1 to {rate.MAX_PERIOD_S}, got: {args.period}")
    if args.limit is not None and not 1 <= args.limit <= rate.MAX_LIMIT:
        raise CliError(f"--limit must be from 1 to {rate.MAX_LIMIT}, got: {args.limit}")
    stored = rate.rate_key(p.namespaced(args.namespace, args.key))
    item = locks.get(stored) or {p.KEY_ATTRIBUTE: {"S": stored}}
    return OK, describe_rate(item, now_ms, period_ms=args.period * 1000, limit=args.limit)

