"""``locked-workflow locks list|show|release|clear-head``: who holds a lock, since when, and freeing it.

Works against AWS (boto3's credentials and region; ``--table`` or ``--stack``) and any
endpoint (``--endpoint-url``: DynamoDB Local, LocalStack - region us-east-1 unless one is
configured or given, and dummy credentials when none are configured). ``--json`` prints machine-readable
output. A forced release is conditioned on the exact holder and fence it read - never on a
guess: if the lock changed in between, nothing is released. A semaphore's holders are its
slots (``list`` shows them): ``show``/``release`` one with ``--slot N``.

Every failure is one line on stderr (exit 1), never a traceback: unreachable endpoints,
timeouts, throttling, refused calls and bad arguments alike (argparse's usage errors: exit 2).

    locked-workflow --table Locks locks list --namespace customer --held
    locked-workflow --stack CustomerUpdates locks show 42 --namespace customer
    locked-workflow --table Locks locks release 42 --namespace customer --force
    locked-workflow --table Locks locks clear-head 42 --namespace customer   # a fair lock's dead head
    locked-workflow --table Locks locks release api --namespace sem --slot 2 --force
    locked-workflow --table Locks locks release 42 --namespace customer --reader 'arn:...#uuid' --force

A read/write lock's shared hold shows ``mode: shared`` and its readers, each with its own lease
and execution; ``release --reader OWNER`` removes one reader's hold (the last one out hands the
key to the next waiters).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from datetime import datetime, timezone
from typing import Any, Mapping, NoReturn, Sequence

from locked_workflow.constructs_lib.key_schema import LOCK_TABLE_KEY, KeySchema
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import rate_protocol as rate
from locked_workflow.state_machines import semaphore_protocol as sp
from locked_workflow.state_machines import shared_protocol as rw

#: Exit codes.
OK, FAILED, REFUSED = 0, 1, 2


class CliError(Exception):
    """A clear, expected failure: printed without a traceback, exit 1."""


#: Credentials used with ``--endpoint-url`` when none are configured (DynamoDB Local and
#: LocalStack accept them - DynamoDB Local wants letters and digits only, and keeps one database
#: per access key unless started with -sharedDb; real AWS refuses them, so they are never used
#: without an endpoint). The same as the offline runtime's (locked_workflow.testing).
DUMMY_CREDENTIALS = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}
#: Region with ``--endpoint-url`` when none is configured or given.
ENDPOINT_DEFAULT_REGION = "us-east-1"
#: A missing key's namespaces are searched among this many lock items at most (a Scan).
NAMESPACE_SCAN_ITEMS = 10_000
#: Fail fast on an unreachable endpoint: botocore's default is 60 s per try, with retries.
CLIENT_CONFIG = {"connect_timeout": 5, "read_timeout": 20, "retries": {"max_attempts": 3, "mode": "standard"}}


# ---- reading lock items ---------------------------------------------------------------


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


def _iso(ms: int | None) -> str | None:
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
        "lastAdmissions": [_iso(ms) for ms in stamps],
        "inLastPeriod": sum(1 for ms in stamps if ms > now_ms - period_ms),
    }
    if limit is not None:
        _, permit_at, _ = rate.permit_at_ms(dict(item), limit=limit, period_ms=period_ms)
        shown["nextPermit"] = "now" if permit_at <= now_ms else _iso(permit_at)
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
                "acquiredAt": _iso(int(entry[p.ACQUIRED_AT]["N"])), "expiresAt": _iso(int(entry[p.EXPIRES_AT]["N"])),
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
        "acquiredAt": _iso(number(p.ACQUIRED_AT)),
        "expiresAt": _iso(expires),
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
                if p.KEY_ATTRIBUTE in item and not _fair_row(item):
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


# ---- commands -------------------------------------------------------------------------


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
    rows = [describe(item, now_ms) for item in locks.scan() if p.KEY_ATTRIBUTE in item and not _fair_row(item)]
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
    read_write = _read_write(locks, stored, item)
    client = LockClient(locks.table, namespace=args.namespace, dynamodb=locks.dynamodb,
                        stepfunctions=locks.stepfunctions, fair=fair.TICKETS in item and not read_write,
                        read_write=read_write)
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
                        stepfunctions=locks.stepfunctions, read_write=True)
    try:
        client.release(lease)
    except LockLost:
        raise CliError(f"the shared hold of {args.reader!r} ended since it was read: nothing released") from None
    return OK, {**reader, "released": True, "warning": warning,
                "message": f"removed the shared hold of {args.reader!r}"}


# ---- the fair lock's queue (rows of their own) --------------------------------------

#: ``locks show`` lists at most this many waiters of a fair lock (and counts the rest).
SHOWN_WAITERS = 100


def _fair_row(item: Mapping[str, Any]) -> bool:
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
                        stepfunctions=locks.stepfunctions, fair=True)
    if head["owner"] is not None:
        client.leave_queue(fair.row_key(stored, head["ticket"]), head["owner"])
    else:  # a hole (a ticket whose waiter never parked): mark it, then skip it now
        client.handoff(stored, me="operator", served=head["ticket"] - 1, fence=None, hole_s=0)
    return OK, {**shown, "cleared": True, "message": f"cleared ticket {head['ticket']} ({head['owner']}) "
                                                     "from the queue; a free lock went to the next waiter"}


# ---- plumbing -------------------------------------------------------------------------


def lock_tables(template: Mapping[str, Any], physical: Mapping[str, str]) -> list[str]:
    """The lock tables of a stack, by what they are: the tables of its ``LockTable`` constructs
    (their :data:`~lock_protocol.LOCK_TABLE_METADATA`, whatever their ids), else its tables
    keyed by the string partition key ``pk`` alone (a table passed to the constructs).
    ``physical``: logical id -> physical id of the stack's resources."""
    tables = {logical: resource for logical, resource in (template.get("Resources") or {}).items()
              if isinstance(resource, Mapping) and resource.get("Type") == "AWS::DynamoDB::Table"}
    marked = [logical for logical, r in tables.items() if p.LOCK_TABLE_METADATA in (r.get("Metadata") or {})]
    chosen = marked or [logical for logical, r in tables.items() if _keyed_as_lock_table(r.get("Properties") or {})]
    return [physical[logical] for logical in chosen if physical.get(logical)]  # (deployed ones)


def _keyed_as_lock_table(properties: Mapping[str, Any]) -> bool:
    """The table's key is the string partition key ``pk`` alone (as a LockTable's)."""
    return KeySchema.parse(properties.get("KeySchema"), properties.get("AttributeDefinitions")) == LOCK_TABLE_KEY


def _table_name(args: argparse.Namespace, session: Any) -> str:
    if args.table:
        return args.table
    if not args.stack:
        raise CliError("the lock table is unknown: give --table NAME or --stack STACK")
    cloudformation = _client(session, "cloudformation", args)
    try:
        if args.output is not None:
            outputs = cloudformation.describe_stacks(StackName=args.stack)["Stacks"][0].get("Outputs", [])
            for output in outputs:
                if output["OutputKey"] == args.output:
                    return output["OutputValue"]
            raise CliError(f"stack {args.stack!r} has no output {args.output!r} (its outputs: "
                           f"{', '.join(o['OutputKey'] for o in outputs) or 'none'})")
        template = cloudformation.get_template(StackName=args.stack)["TemplateBody"]
        physical, token = {}, None
        while True:
            page = cloudformation.list_stack_resources(StackName=args.stack, **({"NextToken": token} if token else {}))
            physical.update({r["LogicalResourceId"]: r.get("PhysicalResourceId") for r in page["StackResourceSummaries"]})
            token = page.get("NextToken")
            if not token:
                break
    except CliError:
        raise
    except Exception as error:
        raise CliError(f"cannot read stack {args.stack!r}: {_one_line(error)}") from None
    if isinstance(template, str):  # botocore decodes a JSON template; a YAML one stays text
        try:
            template = json.loads(template)
        except ValueError:
            raise CliError(f"stack {args.stack!r} has a template that is not JSON: give --table") from None
    tables = lock_tables(template, physical)
    if not tables:
        raise CliError(f"stack {args.stack!r} has no lock table (a LockTable's, or one keyed by the string "
                       f"partition key {p.KEY_ATTRIBUTE} alone): give --table")
    if len(tables) > 1:
        raise CliError(f"stack {args.stack!r} has {len(tables)} lock tables ({', '.join(sorted(tables))}): give --table")
    return tables[0]


def _endpoint(args: argparse.Namespace, service: str) -> dict:
    kwargs: dict[str, Any] = {}
    if args.region:
        kwargs["region_name"] = args.region
    if args.endpoint_url and service == "dynamodb":
        kwargs["endpoint_url"] = args.endpoint_url
    return kwargs


def _session(args: argparse.Namespace) -> tuple[Any, bool]:
    """boto3's session - for an endpoint, with region us-east-1 when none is configured, and
    dummy credentials when none are - and whether the credentials are dummy."""
    import boto3

    session = boto3.Session()
    if not args.endpoint_url:
        return session, False
    region = args.region or session.region_name or ENDPOINT_DEFAULT_REGION
    if session.get_credentials() is not None:
        return boto3.Session(region_name=region), False
    return boto3.Session(region_name=region, **DUMMY_CREDENTIALS), True


def _client(session: Any, service: str, args: argparse.Namespace) -> Any:
    from botocore.config import Config

    return session.client(service, config=Config(**CLIENT_CONFIG), **_endpoint(args, service))


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


class _Parser(argparse.ArgumentParser):
    """argparse, with its usage errors on one line (and exit 2, as argparse)."""

    def error(self, message: str) -> "NoReturn":  # type: ignore[override]
        print(f"error: {_one_line(message)} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(REFUSED)


#: The ``--help`` description (plain text: the module's docstring is reStructuredText).
DESCRIPTION = __doc__.splitlines()[0].replace("``", "")


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


def parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--table", help="the lock table's name")
    common.add_argument("--stack", help="read the lock table from this CloudFormation stack")
    common.add_argument("--output", help="the stack output holding the table name (default: the stack's lock "
                                          "table, found in its template)")
    common.add_argument("--region", help="AWS region (default: boto3's)")
    common.add_argument("--endpoint-url", help="DynamoDB endpoint (DynamoDB Local, say)")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    root = _Parser(prog="locked-workflow", description=DESCRIPTION)
    groups = root.add_subparsers(dest="group", required=True, parser_class=_Parser)
    locks = groups.add_parser("locks", help="inspect and free locks").add_subparsers(
        dest="command", required=True, parser_class=_Parser)
    listing = locks.add_parser("list", parents=[common], help="every lock item")
    listing.add_argument("--namespace", default=None)
    listing.add_argument("--held", action="store_true", help="only held (or expired, unreleased) locks")
    show = locks.add_parser("show", parents=[common], help="one lock: holder, its execution, fence")
    show.add_argument("key")
    show.add_argument("--namespace", default="")
    show.add_argument("--slot", type=int, help="a semaphore's slot (as `list` shows it)")
    release = locks.add_parser("release", parents=[common], help="free a lock, conditioned on its holder")
    release.add_argument("key")
    release.add_argument("--namespace", default="")
    release.add_argument("--slot", type=int, help="a semaphore's slot (as `list` shows it)")
    release.add_argument("--force", action="store_true", help="really release (without it: say what would happen)")
    release.add_argument("--owner", help="release only if this is the holder")
    release.add_argument("--fence", type=int, help="release only if this is the fence")
    release.add_argument("--reader", help="a read/write lock's shared hold: remove this reader's hold")
    limited = locks.add_parser("rate", parents=[common], help="a rate limit (Lock.rate): admissions, next permit")
    limited.add_argument("key")
    limited.add_argument("--namespace", default="")
    limited.add_argument("--period", type=int, default=60, help="the limit's period in seconds (default: 60)")
    limited.add_argument("--limit", type=int, help="the limit's limit: shows when the next permit frees")
    clear = locks.add_parser("clear-head", parents=[common], help="a fair lock: clear a dead head from its queue")
    clear.add_argument("key")
    clear.add_argument("--namespace", default="")
    clear.add_argument("--force", action="store_true", help="clear it even while its execution may still run")
    return root


def _print(result: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, indent=2))
        return
    if isinstance(result, list):
        if not result:
            print("no lock items")
        for r in result:
            if r["state"] == "rate":  # (a rate limit's item: no holder)
                print(f"{r['namespace']}#{r['key']} rate limit: {r['admissions']} admissions, "
                      f"{r['inLastPeriod']} in the last 60 s")
                continue
            slot = f" slot {r['slot']}" if r["slot"] is not None else ""
            print(f"{r['namespace']}#{r['key']}{slot}: {r['state']}, fence {r['fence']}"
                  + (f", held by {r['owner']} since {r['acquiredAt']}, expires {r['expiresAt']}" if r["owner"] else "")
                  + (f", shared by {len(r['readers'])} reader(s)" if r.get("mode") == "shared" else ""))
        return
    for name in ("warning", "message"):
        if result.get(name):
            print(result[name])
    for name, value in result.items():
        if name == "waiters" and isinstance(value, list):
            print(f"  waiters: {len(value)}" + ("" if value else " (none)"))
            for n, w in enumerate(value, 1):
                print(f"    {n}. {w['owner']} ({w['waits']})")  # (a fair lock's waiters, head first)
        elif name == "readers" and isinstance(value, list):
            print(f"  readers: {len(value)}")
            for r in value:  # (a read/write lock's shared hold: each reader's own lease)
                status = f", execution {r['executionStatus']}" if r.get("executionStatus") else ""
                print(f"    {r['owner']} ({r['state']}, since {r['acquiredAt']}, expires {r['expiresAt']}{status})")
        elif name not in ("warning", "message") and value is not None:
            print(f"  {name}: {value}")


def main(argv: Sequence[str] | None = None, *, clients: Mapping[str, Any] | None = None) -> int:
    """Run the CLI; ``clients`` (``dynamodb``, ``stepfunctions``, ``session``) for tests."""
    args = parser().parse_args(argv)
    region = args.region
    try:
        from botocore.exceptions import (
            BotoCoreError, ClientError, ConnectTimeoutError, EndpointConnectionError, NoCredentialsError,
            NoRegionError, ReadTimeoutError,
        )

        clients = dict(clients or {})
        table = args.table
        try:
            if "session" in clients:
                session, dummy = clients["session"], False
            else:
                session, dummy = _session(args)
            region = args.region or getattr(session, "region_name", None)
            table = _table_name(args, session)
            dynamodb = clients.get("dynamodb") or _client(session, "dynamodb", args)
            region = dynamodb.meta.region_name or region  # the region actually used
            stepfunctions = clients.get("stepfunctions") or (None if dummy else _client(session, "stepfunctions", args))
            command = {"list": cmd_list, "show": cmd_show, "release": cmd_release,
                       "clear-head": cmd_clear_head, "rate": cmd_rate}[args.command]
            code, result = command(Locks(dynamodb, stepfunctions, table), args, int(time.time() * 1000))
        except ClientError as error:
            code_name = error.response.get("Error", {}).get("Code")
            if code_name == "ResourceNotFoundException":
                raise CliError(f"no table {table!r} (region {region or 'unknown'})") from None
            if code_name in ("ThrottlingException", "ProvisionedThroughputExceededException",
                             "RequestLimitExceeded", "TooManyRequestsException"):
                raise CliError(
                    f"AWS is throttling the calls (region {region or 'unknown'}), even after retries: "
                    f"try again later ({code_name})"
                ) from None
            raise CliError(f"AWS refused (region {region or 'unknown'}): {_one_line(error)}") from None
        except NoCredentialsError:
            raise CliError("no AWS credentials: configure them (aws configure, AWS_PROFILE, ...)") from None
        except NoRegionError:
            raise CliError("no AWS region: pass --region or set AWS_REGION") from None
        except EndpointConnectionError as error:
            raise CliError(f"cannot connect to {_endpoint_of(error, args)} (region {region or 'unknown'}): "
                           "is it running, and is the URL right?") from None
        except (ConnectTimeoutError, ReadTimeoutError) as error:
            raise CliError(f"timed out talking to {_endpoint_of(error, args)} (region {region or 'unknown'}): "
                           f"{_one_line(error)}") from None
        except BotoCoreError as error:
            raise CliError(f"AWS client error (region {region or 'unknown'}): {_one_line(error)}") from None
    except CliError as error:
        print(f"error: {_one_line(error)}", file=sys.stderr)
        return FAILED
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return FAILED
    except Exception as error:  # a bug: still one line, with what to report
        print(f"error: unexpected {type(error).__name__}: {_one_line(error)} (please report it)", file=sys.stderr)
        return FAILED
    try:
        _print(result, args.json)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader left (`| head`): nothing more to say, and no traceback
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            pass  # not a real file (a test's capture): nothing will flush into the pipe
    return code


def _endpoint_of(error: Exception, args: argparse.Namespace) -> str:
    return args.endpoint_url or getattr(error, "kwargs", {}).get("endpoint_url") or "AWS"


if __name__ == "__main__":
    raise SystemExit(main())
