"""The stress campaign's tables: the records seeded at its start, and what they hold once settled.

:func:`left_held` reads the settled lock table (locks still held, queues still waiting, locks
the next arrival must get past) and :func:`next_arrivals` sends that arrival; the probe's and
the records' items are read for the judge.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines import record_protocol
from tools.stress_history import now_ms
from tools.stress_stack import COALESCE_NAMESPACE, RECORD_KEY, RECORD_SIZES_KB


def table_name(app: Any, prefix: str) -> str:
    return next(v for k, v in app.resources.items() if k.startswith(prefix))


def probe_items(cloud: Any, app: Any) -> dict[str, dict]:
    items = {}
    for page in cloud.dynamodb.get_paginator("scan").paginate(TableName=table_name(app, "Probes"), ConsistentRead=True):
        for item in page["Items"]:
            items[item["pk"]["S"]] = {
                k: (int(v["N"]) if "N" in v else [int(x["N"]) for x in v.get("L", [])]) for k, v in item.items() if k != "pk"
            }
    return items


def seed_records(cloud: Any, app: Any) -> None:
    """The "Record" shape's records, each with its padding (:data:`RECORD_SIZES_KB`)."""
    for key, kb in RECORD_SIZES_KB.items():
        cloud.dynamodb.put_item(TableName=table_name(app, "Records"), Item={
            RECORD_KEY: {"S": key}, "balance": {"N": "0"}, "padding": {"S": "p" * (kb * 1024 - 100)}})


def record_balances(cloud: Any, app: Any) -> tuple[dict[str, int], list[str]]:
    """The records' balances, and the records still locked (their lease running)."""
    item = record_protocol.record_item(RECORD_KEY)
    owner, expires = item.attribute(protocol.OWNER), item.attribute(protocol.EXPIRES_AT)
    balances, held = {}, []
    for key in RECORD_SIZES_KB:
        record = cloud.dynamodb.get_item(TableName=table_name(app, "Records"), Key={RECORD_KEY: {"S": key}},
                                         ConsistentRead=True).get("Item")
        if record is None:
            continue
        balances[key] = int(record["balance"]["N"])
        if owner in record and int(record[expires]["N"]) > now_ms():
            held.append(f"record {key} by {record[owner]['S']}")
    return balances, held


def left_held(cloud: Any, app: Any) -> tuple[list[str], dict[str, str]]:
    """What the settled table still holds: ``(held, to_pass)`` - locks held and queue rows still
    waiting (violations), and the locks the next arrival must get past (stored key -> the
    shape sent at it). Those are the free fair locks whose queue shows only holes (tickets
    whose waiter never parked: it was stopped between its ticket and its park, or its
    ticket's response was lost and it took another; fair_protocol, step 6), and the locks
    whose holder's execution ended without a status-change event the janitor watches (a
    section Step Functions cancelled in an execution that then SUCCEEDED): a waiter's
    liveness check frees those, so nobody does until a waiter comes. :func:`next_arrivals`
    checks both."""
    now = now_ms()
    held, queued, parked, to_pass = [], {}, set(), {}
    for page in cloud.dynamodb.get_paginator("scan").paginate(TableName=table_name(app, "LocksTable"), ConsistentRead=True):
        for item in page["Items"]:
            key = item["pk"]["S"]
            if key.startswith(fair.ROW_MARK):  # a fair queue row: every waiter's was taken
                if fair.TOKEN in item:
                    held.append(f"{key} queued: {item[protocol.OWNER]['S']}")
                    parked.add(key.partition(fair.ROW_MARK)[2].partition(fair.ROW_MARK)[2])
                continue
            if protocol.OWNER in item and int(item[protocol.EXPIRES_AT]["N"]) > now:
                execution = protocol.owner_execution(item[protocol.OWNER]["S"])
                if key.startswith("x#") and execution and cloud.status(execution) == "SUCCEEDED":
                    to_pass[key] = "Plain"
                else:
                    held.append(f"{key} by {item[protocol.OWNER]['S']}")
                continue
            served, tickets = fair.counters(item)
            if served != tickets:  # a fair lock's queue: every ticket was served or skipped
                queued[key] = f"{key} queued: tickets {served + 1}..{tickets}"
    held += [line for key, line in queued.items() if key in parked]
    to_pass.update({key: "Coalesce" if key.startswith(f"{COALESCE_NAMESPACE}#") else "Fair"
                    for key in queued if key not in parked})
    return held, to_pass


def rows_left(cloud: Any, app: Any, namespace: str) -> list[str]:
    """Every fair queue row still on a key of ``namespace`` (a mark, a row marked left, a park)."""
    left = []
    for page in cloud.dynamodb.get_paginator("scan").paginate(TableName=table_name(app, "LocksTable"), ConsistentRead=True):
        for item in page["Items"]:
            key = item["pk"]["S"]
            if key.startswith(fair.ROW_MARK) and key.partition(fair.ROW_MARK)[2].partition(fair.ROW_MARK)[2].startswith(
                    f"{namespace}#"):
                left.append(f"{key}: " + ", ".join(sorted(k for k in item if k != "pk")))
    return left


#: How long the next arrival at a queue of holes, or at a lock of an ended execution, may
#: take to enter (s): a few park timeouts (its own, then one to mark the hole and one to skip
#: it), or a liveness round, the stop grace and the presence settle time, on a loaded machine.
NEXT_ARRIVAL_S = 120


def next_arrivals(cloud: Any, app: Any, to_pass: dict[str, str]) -> tuple[list[str], list[tuple[str, float]]]:
    """Send one execution of the given shape at each lock of ``to_pass``: it must enter and
    leave the lock free and its queue empty. Returns ``(violations, [(stored key, seconds to
    succeed)])``."""
    violations, passed = [], []
    for stored_key, shape in to_pass.items():
        arn = f"arn:aws:states:{cloud.region}:{cloud.account_id}:stateMachine:{shape}"
        started = time.monotonic()
        key = stored_key.partition("#")[2]
        execution = cloud.start_execution(arn, {"key": key, "workMs": 50, "fail": False},
                                          name=f"NextArrival-{uuid.uuid4()}")
        try:
            result = cloud.wait_for(execution, timeout=NEXT_ARRIVAL_S)
        except TimeoutError:
            violations.append(f"{stored_key}: the next arrival did not get past it in {NEXT_ARRIVAL_S} s")
            continue
        item = cloud.dynamodb.get_item(TableName=table_name(app, "LocksTable"), Key=protocol.lock_item_key(stored_key),
                                       ConsistentRead=True).get("Item", {})
        served, tickets = fair.counters(item)
        held = protocol.OWNER in item and int(item[protocol.EXPIRES_AT]["N"]) > now_ms()
        if result.status != "SUCCEEDED" or served != tickets or held:
            violations.append(f"{stored_key}: the next arrival {result.status} {result.error}, then "
                              f"tickets {served + 1}..{tickets} queued, held: {held}")
        else:
            passed.append((stored_key, time.monotonic() - started))
    return violations, passed
