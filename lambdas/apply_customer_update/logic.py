"""Apply one customer update: a fenced read-modify-write on the customers table.

This is the *protected work* of the locked workflow that serializes customer updates.
It is deliberately a read-then-write (GetItem, compute, PutItem) rather than an atomic
``ADD``: two runs that overlap both read the same balance and the second write silently
loses the first one's update. The lock is what makes that impossible - and the no-lock
negative control of the demo relies on it happening without the lock.

Fencing (Kleppmann): every acquisition of the lock bumps the lock's fencing token, and
the state machine passes it in as ``fence``. Each record stores the fence of the last
write (``lastFence``) and every fenced write is conditioned on ``lastFence < :fence``, so
a zombie holder - one whose lease ran out and whose lock was taken over while it worked -
is refused with :class:`StaleFenceError` instead of overwriting the newer holder's data.

A fence alone does not protect a read-modify-write, though: a zombie (older fence) that
writes *between* the newer holder's read and its write would pass its own check and then
be overwritten by the newer holder's stale read. So a fenced write is also conditioned on
the record being unchanged since it was read (the ``updates`` counter is the version);
if it changed, the update is recomputed from a fresh read (the fence check runs again).
With a healthy lock that never happens, and the write succeeds at the first attempt.

Events without a fence (``"fence": null`` or absent) are written unconditionally
(*lockless* mode): that is the negative control, which must be able to lose updates.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from aws_lambda_powertools import Logger, Tracer
from botocore.exceptions import ClientError

#: Powertools service name of this function (logs, traces, metrics dimension).
SERVICE = "apply-customer-update"

tracer = Tracer(service=SERVICE)
logger = Logger(service=SERVICE, child=True)

# Attributes of a customer record.
CUSTOMER_ID = "customerId"  # partition key (S)
BALANCE = "balance"  # N
UPDATES = "updates"  # N: number of updates applied; also the record's version
LAST_FENCE = "lastFence"  # N: fence of the last fenced write
EMAIL = "email"  # S, optional

#: Longest simulated work an event may ask for (the Lambda's own timeout is the real bound).
MAX_WORK_MS = 900_000
#: Attempts of the read-modify-write when the record changed between read and write.
MAX_ATTEMPTS = 5


class InvalidUpdateError(ValueError):
    """The event is not a valid customer update (the state machine can Catch it by name)."""


class StaleFenceError(Exception):
    """The write was refused: the record was already written with this fence or a newer one.

    The caller's lock was taken over while it worked (its lease ran out); a newer holder has
    written since. Nothing was written.
    """


class ConcurrentUpdateError(Exception):
    """The record kept changing between read and write; nothing was written.

    Only happens when several holders write the same record at once, i.e. the lock is not
    doing its job (e.g. many zombies), after :data:`MAX_ATTEMPTS` attempts.
    """


# --------------------------------------------------------------------------------------
# The event, parsed at the edge
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CustomerUpdate:
    """``{"customerId": str, "fence": int | null, "update": {"balanceDelta"?: int,
    "email"?: str}, "workMs"?: int}``."""

    customer_id: str
    fence: int | None
    balance_delta: int = 0
    email: str | None = None
    work_ms: int = 0

    @property
    def fenced(self) -> bool:
        return self.fence is not None

    @classmethod
    def from_event(cls, event: Any) -> CustomerUpdate:
        if not isinstance(event, Mapping):
            raise InvalidUpdateError(f"the event must be an object, got: {type(event).__name__}")
        unknown = set(event) - {"customerId", "fence", "update", "workMs"}
        if unknown:
            raise InvalidUpdateError(f"unknown event fields: {sorted(unknown)}")

        customer_id = event.get("customerId")
        if not isinstance(customer_id, str) or not customer_id:
            raise InvalidUpdateError(
                f"customerId must be a non-empty string, got: {customer_id!r}"
            )

        fence = event.get("fence")
        if fence is not None:
            fence = _integer("fence", fence)
            if fence < 1:
                raise InvalidUpdateError(f"fence must be at least 1, got: {fence}")

        update = event.get("update")
        if not isinstance(update, Mapping):
            raise InvalidUpdateError(f"update must be an object, got: {update!r}")
        unknown = set(update) - {"balanceDelta", "email"}
        if unknown:
            raise InvalidUpdateError(f"unknown update fields: {sorted(unknown)}")
        if not update:
            raise InvalidUpdateError("update must set balanceDelta and/or email, got: {}")

        balance_delta = _integer("update.balanceDelta", update.get("balanceDelta", 0))
        email = update.get("email")
        if email is not None and (not isinstance(email, str) or "@" not in email):
            raise InvalidUpdateError(f"update.email must be an e-mail address, got: {email!r}")

        work_ms = _integer("workMs", event.get("workMs") or 0)
        if not 0 <= work_ms <= MAX_WORK_MS:
            raise InvalidUpdateError(f"workMs must be within 0..{MAX_WORK_MS}, got: {work_ms}")

        return cls(
            customer_id=customer_id,
            fence=fence,
            balance_delta=balance_delta,
            email=email,
            work_ms=work_ms,
        )


def _integer(name: str, value: Any) -> int:
    # JSON numbers from JSONata may arrive as 3.0; booleans are ints in Python: refuse them.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidUpdateError(f"{name} must be an integer, got: {value!r}")
    if isinstance(value, float):
        if not value.is_integer():
            raise InvalidUpdateError(f"{name} must be an integer, got: {value!r}")
        value = int(value)
    return value


# --------------------------------------------------------------------------------------
# The record
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CustomerRecord:
    customer_id: str
    balance: int = 0
    updates: int = 0
    last_fence: int | None = None
    email: str | None = None

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> CustomerRecord:
        def number(name: str) -> int | None:
            return int(item[name]["N"]) if name in item else None

        return cls(
            customer_id=item[CUSTOMER_ID]["S"],
            balance=number(BALANCE) or 0,
            updates=number(UPDATES) or 0,
            last_fence=number(LAST_FENCE),
            email=item[EMAIL]["S"] if EMAIL in item else None,
        )

    def to_item(self) -> dict[str, Any]:
        item: dict[str, Any] = {
            CUSTOMER_ID: {"S": self.customer_id},
            BALANCE: {"N": str(self.balance)},
            UPDATES: {"N": str(self.updates)},
        }
        if self.last_fence is not None:
            item[LAST_FENCE] = {"N": str(self.last_fence)}
        if self.email is not None:
            item[EMAIL] = {"S": self.email}
        return item

    def applied(self, update: CustomerUpdate) -> CustomerRecord:
        """The record after ``update`` (a lockless update keeps the last fence)."""
        return CustomerRecord(
            customer_id=self.customer_id,
            balance=self.balance + update.balance_delta,
            updates=self.updates + 1,
            last_fence=update.fence if update.fenced else self.last_fence,
            email=update.email if update.email is not None else self.email,
        )

    def summary(self) -> dict[str, Any]:
        return {
            "customerId": self.customer_id,
            "balance": self.balance,
            "updates": self.updates,
            "lastFence": self.last_fence,
        }


# --------------------------------------------------------------------------------------
# The read-modify-write
# --------------------------------------------------------------------------------------


@tracer.capture_method
def apply_update(
    update: CustomerUpdate,
    *,
    table_name: str,
    dynamodb: Any,
    sleep: Callable[[float], None] = time.sleep,
) -> CustomerRecord:
    """Read the record, apply ``update``, write it back fenced; return the new record.

    Raises :class:`StaleFenceError` when the record already carries ``update.fence`` or a
    newer fence (nothing is written), :class:`ConcurrentUpdateError` when the record kept
    changing under a fenced write.
    """
    for attempt in range(1, MAX_ATTEMPTS + 1):
        item = dynamodb.get_item(
            TableName=table_name,
            Key={CUSTOMER_ID: {"S": update.customer_id}},
            ConsistentRead=True,
        ).get("Item")
        current = CustomerRecord.from_item(item) if item else None
        if update.fenced:
            _check_fence(update, current)
        new = (current or CustomerRecord(update.customer_id)).applied(update)

        if update.work_ms:  # simulated work: widens the window between read and write
            sleep(update.work_ms / 1000)

        put = {"TableName": table_name, "Item": new.to_item()}
        if update.fenced:
            put.update(_fenced_condition(update.fence, item))
        else:
            logger.warning(
                "Lockless write: no fence, the write is unconditional",
                extra={"customerId": update.customer_id},
            )
        try:
            dynamodb.put_item(**put)
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            # A newer fence (checked again on the next read) or a concurrent write.
            logger.info(
                "Record changed between read and write; re-reading",
                extra={"customerId": update.customer_id, "attempt": attempt},
            )
            continue
        logger.info("Customer updated", extra=new.summary())
        return new

    raise ConcurrentUpdateError(
        f"customer {update.customer_id!r} changed between read and write "
        f"{MAX_ATTEMPTS} times in a row; nothing was written"
    )


def _check_fence(update: CustomerUpdate, current: CustomerRecord | None) -> None:
    if current is not None and current.last_fence is not None and current.last_fence >= update.fence:
        raise StaleFenceError(
            f"fence {update.fence} is not newer than lastFence {current.last_fence} of "
            f"customer {update.customer_id!r}: the lock was taken over and a newer holder "
            "has written; nothing was written"
        )


def _fenced_condition(fence: int, item: Mapping[str, Any] | None) -> dict[str, Any]:
    """PutItem condition: my fence is newer than the record's, and nobody wrote since my read.

    ``item`` is the record as read (``None``: there was none).
    """
    if item is None:
        # No record yet: it must still not exist (a new record has no fence to beat).
        return {
            "ConditionExpression": "attribute_not_exists(#customerId)",
            "ExpressionAttributeNames": {"#customerId": CUSTOMER_ID},
        }
    values: dict[str, Any] = {":fence": {"N": str(fence)}}
    if UPDATES in item:
        unchanged = "#updates = :readUpdates"
        values[":readUpdates"] = item[UPDATES]
    else:  # a seeded record that was never updated
        unchanged = "attribute_not_exists(#updates)"
    return {
        # A record never written with a fence (lockless, or seeded) has no lastFence.
        "ConditionExpression": (
            f"{unchanged} AND (attribute_not_exists(#lastFence) OR #lastFence < :fence)"
        ),
        "ExpressionAttributeNames": {"#updates": UPDATES, "#lastFence": LAST_FENCE},
        "ExpressionAttributeValues": values,
    }
