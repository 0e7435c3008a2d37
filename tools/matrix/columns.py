"""The fault matrix's columns: the faults a call of a row's state can meet (:data:`COLUMNS`),
each the error it gets, whether it applied first, and what happens to its caller right after."""

from __future__ import annotations

from dataclasses import dataclass

from tools.matrix.rows import Row

#: Kinds whose items a DynamoDB transaction writes (a read/write lock's park and abandon, a
#: multi-key lock's acquire and release): a write there may meet ``TransactionConflictException``.
TRANSACTIONAL_KINDS = frozenset({"shared", "exclusive", "multikey", "client-rw", "janitor"})
#: Row kinds without an execution of their own.
CLIENT_KINDS = frozenset({"client-mutex", "client-fair", "client-rw"})


@dataclass(frozen=True)
class Column:
    """A fault: the error a call gets, whether it applied first, what happens right after it."""

    name: str
    error: str  # botocore's error code (a Step Functions call: :attr:`sfn_error`)
    after_call: bool = False
    then: str = ""  # "stop", "time out", "stop, redrive" - the caller's execution, right after the call
    reading: str = "strict"  # the redrive reading the cell runs under
    sfn_error: str = ""

    def error_for(self, row: Row) -> str:
        if row.operation == "TransactWriteItems" and self.error == "TransactionConflictException":
            return "TransactionCanceledException"  # a transaction is cancelled by a conflict
        return self.sfn_error if row.service == "stepfunctions" and self.sfn_error else self.error


COLUMNS: tuple[Column, ...] = (
    Column("5xx", "InternalServerError", sfn_error="ServiceUnavailable"),
    Column("throttle", "ThrottlingException"),
    Column("lost", "InternalServerError", after_call=True, sfn_error="ServiceUnavailable"),
    Column("stop-after", "InternalServerError", after_call=True, then="stop", sfn_error="ServiceUnavailable"),
    Column("timeout-after", "InternalServerError", after_call=True, then="time out", sfn_error="ServiceUnavailable"),
    Column("redrive", "InternalServerError", after_call=True, then="stop, redrive", sfn_error="ServiceUnavailable"),
    Column("redrive-reeval", "InternalServerError", after_call=True, then="stop, redrive", reading="reevaluate",
           sfn_error="ServiceUnavailable"),
    Column("conflict", "TransactionConflictException"),
)
COLUMN = {column.name: column for column in COLUMNS}
