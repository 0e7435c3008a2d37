"""What the ``locked-workflow locks`` commands read: lock items (and a fair lock's queue rows)
of a lock table, as the CLI shows them - the holder, its lease and execution, a shared hold's
readers, a semaphore's slots, a rate limit's admissions, a fair lock's waiters.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Mapping

from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import rate_protocol as rate
from locked_workflow.state_machines import semaphore_protocol as sp
from locked_workflow.state_machines import shared_protocol as rw

#: A missing key's namespaces are searched among this many lock items at most (a Scan).
NAMESPACE_SCAN_ITEMS = 10_000


def parse_stored_key(stored: str) -> dict[str, Any]:
    """``<namespace>#<key>``, a semaphore slot ``~<slot>~<namespace>#<key>``, or a rate
    limit's item ``~rate~<namespace>#<key>`` (slot ``"rate"``)."""
    slot = None
    if stored.startswith(rate.RATE_MARK):
        namespace, _, key = stored[len(rate.RATE_MARK):].partition(p.NAMESPACE_SEPARATOR)
        return {"namespace": namespace, "key": key, "slot": "rate"}
    if stored.startswith(sp.SLOT_MARK):
        _, number, stored = stored.split(sp.SLOT_MARK, 2)
        slot = int(number)
    namespace, _, key = stored.partition(p.NAMESPACE_SEPARATOR)
    return {"namespace": namespace, "key": key, "slot": slot}


def iso(ms: int | None) -> str | None:
    """``ms`` (epoch milliseconds) as an ISO 8601 UTC time (None: None)."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")


def describe_rate(item: Mapping[str, Any], now_ms: int, *, period_ms: int = 60_000,
                  limit: int | None = None) -> dict[str, Any]:
    """A rate limit's item (``Lock.rate``) as the CLI shows it: its admissions, the stamps of
    the last ones (one per permit, newest first), how many fall in the last ``period_ms``, and
    - given the key's ``limit`` - when the next permit frees (``rate_protocol.permit_at_ms``)."""
    stamps = sorted((int(v["N"]) for name, v in item.items() if name.startswith(rate.PERMIT_PREFIX)), reverse=True)
    shown = {
        **parse_stored_key(item[p.KEY_ATTRIBUTE]["S"]),
        "storedKey": item[p.KEY_ATTRIBUTE]["S"],
        "state": "rate",
        "admissions": int(item[rate.ADMISSIONS]["N"]) if rate.ADMISSIONS in item else 0,
        "lastAdmissions": [iso(ms) for ms in stamps],
        "inLastPeriod": sum(1 for ms in stamps if ms > now_ms - period_ms),
    }
    if limit is not None:
        _, permit_at, _ = rate.permit_at_ms(dict(item), limit=limit, period_ms=period_ms)
        shown["nextPermit"] = "now" if permit_at <= now_ms else iso(permit_at)
    return shown


def describe(item: Mapping[str, Any], now_ms: int) -> dict[str, Any]:
    """A lock item as the CLI shows it."""
    if item[p.KEY_ATTRIBUTE]["S"].startswith(rate.RATE_MARK):
        return describe_rate(item, now_ms)
    number = lambda name: int(item[name]["N"]) if name in item else None  # noqa: E731
    owner = item.get(p.OWNER, {}).get("S")
    expires = number(p.EXPIRES_AT)
    state = "free" if owner is None else ("expired" if expires is not None and expires < now_ms else "held")
    readers = [{"owner": reader, "execution": p.owner_execution(reader),
                "acquiredAt": iso(int(entry[p.ACQUIRED_AT]["N"])), "expiresAt": iso(int(entry[p.EXPIRES_AT]["N"])),
                "state": "expired" if int(entry[p.EXPIRES_AT]["N"]) < now_ms else "held"}
               for reader, entry in sorted(rw.readers_of(item).items())]
    if owner == rw.SHARED:  # a read/write lock's shared hold: its readers hold it, each with its own lease
        state = "free" if not readers else "held" if any(r["state"] == "held" for r in readers) else "expired"
        owner = None
    extra = {"mode": "shared", "readers": readers} if item.get(p.OWNER, {}).get("S") == rw.SHARED else {}
    return {
        **parse_stored_key(item[p.KEY_ATTRIBUTE]["S"]),
        "storedKey": item[p.KEY_ATTRIBUTE]["S"],
        "state": state,
        "owner": owner,
        "execution": p.owner_execution(owner),
        "acquiredAt": iso(number(p.ACQUIRED_AT)),
        "expiresAt": iso(expires),
        "fence": number(p.FENCE),
        "graceMs": number(p.GRACE),
        **extra,
    }


class Locks:
    def __init__(self, dynamodb: Any, stepfunctions: Any, table: str) -> None:
        self.dynamodb, self.stepfunctions, self.table = dynamodb, stepfunctions, table

    def scan(self) -> list[dict]:
        items, start = [], None
        while True:
            page = self.dynamodb.scan(
                TableName=self.table, ConsistentRead=True, **({"ExclusiveStartKey": start} if start else {})
            )
            items.extend(page.get("Items", []))
            start = page.get("LastEvaluatedKey")
            if not start:
                return items

    def namespaces_of(self, key: str) -> tuple[list[str], bool]:
        """The namespaces holding a lock item of ``key`` (semaphore slots too), sorted, from a
        Scan bounded to :data:`NAMESPACE_SCAN_ITEMS` items read; and whether it read them all."""
        found, start, read = set(), None, 0
        while read < NAMESPACE_SCAN_ITEMS:
            page = self.dynamodb.scan(
                TableName=self.table, Limit=min(1000, NAMESPACE_SCAN_ITEMS - read),
                **p.key_in_namespaces_scan(key), **({"ExclusiveStartKey": start} if start else {}),
            )
            read += page.get("ScannedCount", 0)
            for item in page.get("Items", []):
                if p.KEY_ATTRIBUTE in item and not fair_row(item):
                    parsed = parse_stored_key(item[p.KEY_ATTRIBUTE]["S"])
                    if parsed["key"] == key:
                        found.add(parsed["namespace"])
            start = page.get("LastEvaluatedKey")
            if not start:
                return sorted(found), True
        return sorted(found), False

    def get(self, stored_key: str) -> dict:
        return self.dynamodb.get_item(
            TableName=self.table, Key=p.lock_item_key(stored_key), ConsistentRead=True
        ).get("Item", {})

    def execution_status(self, execution_arn: str | None) -> str | None:
        if execution_arn is None:
            return None
        if self.stepfunctions is None:  # an endpoint with dummy credentials: AWS would refuse them
            return "unknown"
        try:
            return self.stepfunctions.describe_execution(executionArn=execution_arn)["status"]
        except Exception:  # no permission, gone, another account: say so, never guess
            return "unknown"


#: ``locks show`` lists at most this many waiters of a fair lock (and counts the rest).
SHOWN_WAITERS = 100


def fair_row(item: Mapping[str, Any]) -> bool:
    """A fair lock's queue row (not a lock item)."""
    return item.get(p.KEY_ATTRIBUTE, {}).get("S", "").startswith(fair.ROW_MARK)


def fair_waiters(locks: Locks, stored: str, item: Mapping[str, Any]) -> list[dict]:
    """The waiters of the fair lock ``item``, head first: each queued ticket's row - parked,
    polling, left, ready (freed for a waiter that has not parked yet) or a hole (no row); on a
    coalescing key (``QueueLimit.keep_newest``), a ticket at or below the item's cut is
    superseded (a newer run took its place; the handoff passes it)."""
    waiters = []
    tickets = fair.queued_tickets(item)
    cut = fair.cut_of(item)
    for ticket in list(tickets)[:SHOWN_WAITERS]:
        row = locks.get(fair.row_key(stored, ticket))
        owner = row.get(p.OWNER, {}).get("S")
        token = row.get(fair.TOKEN, {}).get("S", "")
        waits = ("superseded" if ticket <= cut else "left" if fair.LEFT in row
                 else "polling" if token.startswith(fair.CLIENT_LEASE_PREFIX)
                 else "parked" if token else "ready" if fair.READY in row else "not parked yet")
        waiters.append({"ticket": ticket, "owner": owner, "execution": p.owner_execution(owner), "waits": waits})
    if len(tickets) > SHOWN_WAITERS:
        waiters.append({"ticket": None, "owner": f"... {len(tickets) - SHOWN_WAITERS} more", "execution": None,
                        "waits": "queued"})
    return waiters
