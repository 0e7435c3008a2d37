"""Every error name of the lock, each spelled once.

Three groups, kept apart:

1. **The errors a locked section fails with** (``Lock.*``): what a user's Catch names. They are
   public, as :class:`LockErrors` (``from locked_workflow import LockErrors``), the way aws-cdk
   exports the service's own as ``sfn.Errors``.
2. **Internal signals** (``Lock.*`` too): raised and caught inside the lock's own states; a
   user never needs to Catch them (a section's ``States.ALL`` sees none of them leave it).
3. **The names AWS gives errors** that the lock's states Catch or Retry: DynamoDB's (their
   error codes, as botocore reports them, and as Step Functions names them: optimized
   integrations ``DynamoDB.<code>``, ``aws-sdk:dynamodb:*`` integrations ``DynamoDb.<code>``),
   Step Functions' own (``Sfn.*`` of ``aws-sdk:sfn:*`` calls, ``States.*``) and Lambda's
   (https://docs.aws.amazon.com/step-functions/latest/dg/supported-services-awssdk.html,
   "Error handling"; https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html).

No CDK import here: the protocol modules, the lock client and the janitor's bundle read it too.
"""

from __future__ import annotations

# --------------------------------------------------------------------------------------
# 1. The errors a locked section fails with (public: LockErrors)
# --------------------------------------------------------------------------------------

#: The lock key (or keys) is missing, not a string, empty or too long: raised by the section's
#: entry, before any DynamoDB call.
ERROR_INVALID_KEY = "Lock.InvalidKey"
#: The lock was still held when the caller's ``max_wait`` ran out.
ERROR_TIMEOUT = "Lock.Timeout"
#: The release found the lock taken over while the work ran (the lease ended, or a stale
#: holder's recovery took it): the work ran, but not alone.
ERROR_LOST = "Lock.Lost"
#: A reader refused because the key already has as many readers as the read/write lock allows
#: (``shared_protocol.MAX_READERS``): raised before any write, so the lock item never grows
#: past a size whose ``ALL_NEW`` answer Step Functions could not return.
ERROR_TOO_MANY_READERS = "Lock.TooManyReaders"
#: The presence branch could neither register its token nor rule one out: the hold ends
#: (its work is cancelled, and may still run: the acquisition is retired, not released).
ERROR_PRESENCE_UNKNOWN = "Lock.PresenceUnknown"
#: A lock on the record (``must_exist=True``) found no record with the key.
ERROR_RECORD_MISSING = "Lock.RecordMissing"
#: A lock on the record: the work's ``recordUpdate`` is malformed, or DynamoDB refused it.
ERROR_INVALID_UPDATE = "Lock.InvalidUpdate"
#: A lock on the record: the record is larger than the section reads into ``$lock.item``.
ERROR_RECORD_TOO_LARGE = "Lock.RecordTooLarge"
#: A fair waiter of a coalescing lock (``QueueLimit.keep_newest``) was superseded by a newer run
#: queued on its key before its turn came: it never entered its work. The cause names the
#: newer run's execution.
ERROR_SUPERSEDED = "Lock.Superseded"
#: A run of a fair lock with ``QueueLimit.keep_oldest(n)`` arrived when ``n`` runs already
#: queued on its key: refused before it queued (no ticket, no row).
ERROR_QUEUE_FULL = "Lock.QueueFull"
#: Prefix given to a ``States.*`` error of the protected work when the section re-raises it
#: (a Fail state may not use the reserved ``States.`` prefix): ``States.Timeout`` of the work
#: leaves the section as ``Lock.States.Timeout``; the cause is JSON ``{"Error", "Cause"}``
#: with the original pair.
RERAISED_STATES_PREFIX = "Lock."

# --------------------------------------------------------------------------------------
# 2. Internal signals (never leave the lock's states)
# --------------------------------------------------------------------------------------

#: The work branch's DEPART found the lock taken over (caught by the hold, which fails
#: ``Lock.Lost``).
SIGNAL_LOST_IN_HOLD = "Lock.LostInHold"
#: Raised (inside the acquire/release arguments) by a section nested in a section holding the
#: same key: re-entrant pass-through, no write.
SIGNAL_REENTERED = "Lock.Reentered"
#: Raised by a task of the protected work (inside its Arguments, before it runs) when the
#: execution was redriven after the section acquired: Step Functions resumes a redriven
#: Parallel's branch at its unsuccessful step, so a task of the work can resume without the
#: section's acquire running again. The section leaves with this error, and the section's
#: own Catch enters it again with a new acquisition.
SIGNAL_RESUMED = "Lock.Resumed"
#: The error a nudge (``SendTaskFailure``) ends a fair waiter's park with: look by yourself.
SIGNAL_LOOK = "Lock.Look"

# --------------------------------------------------------------------------------------
# 3. The names AWS gives errors
# --------------------------------------------------------------------------------------

#: How Step Functions names a DynamoDB error: optimized integrations
#: (``arn:aws:states:::dynamodb:*``) and ``aws-sdk:dynamodb:*`` integrations spell the service
#: differently.
OPTIMIZED_DYNAMODB = "DynamoDB."
SDK_DYNAMODB = "DynamoDb."

#: DynamoDB's error codes (botocore: ``error.response["Error"]["Code"]``).
#: The condition of a write is false (lock held / not ours).
CONDITIONAL_CHECK_FAILED_CODE = "ConditionalCheckFailedException"
#: A transaction was refused (a condition failed, or another transaction touched an item).
TRANSACTION_CANCELED_CODE = "TransactionCanceledException"
#: DynamoDB's refusal of a write on an item that an ongoing transaction touches (a read/write
#: waiter's park checks the lock item in one; a multi-key hold writes several): nothing was
#: written; try again. botocore retries it in neither retry mode, so a Python client must
#: ("Transaction conflict handling in DynamoDB", developer guide, transaction-apis.html).
TRANSACTION_CONFLICT = "TransactionConflictException"
#: Codes of a write that did not happen and may be tried again.
_TRANSIENT_CODES = (
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "InternalServerErrorException",
    "InternalServerError",
    "ServiceUnavailableException",
    TRANSACTION_CONFLICT,
)

#: Raised by DynamoDB when the condition of a write is false, as an optimized integration names it.
CONDITION_FAILED = OPTIMIZED_DYNAMODB + CONDITIONAL_CHECK_FAILED_CODE
#: The same, as an ``aws-sdk:dynamodb`` integration names it.
SDK_CONDITION_FAILED = SDK_DYNAMODB + CONDITIONAL_CHECK_FAILED_CODE
#: A refused transaction (``aws-sdk:dynamodb:transactWriteItems``).
TRANSACTION_CANCELED = SDK_DYNAMODB + TRANSACTION_CANCELED_CODE
#: Errors worth retrying with backoff (optimized integration names): the write did not
#: happen, or may be retried safely because the lock's writes are idempotent for one owner.
TRANSIENT_ERRORS = tuple(OPTIMIZED_DYNAMODB + code for code in _TRANSIENT_CODES)
#: The same, as the ``aws-sdk:dynamodb`` integration names them.
SDK_TRANSIENT_ERRORS = tuple(SDK_DYNAMODB + code for code in _TRANSIENT_CODES)
#: How the optimized integration may name DynamoDB's refusal of a write's arguments: the
#: exception's own name, or the SDK's generic one with ``Error Code: ValidationException`` in
#: the cause.
REFUSED_WRITE_ERRORS = (OPTIMIZED_DYNAMODB + "ValidationException", OPTIMIZED_DYNAMODB + "AmazonDynamoDBException")

#: Raised by Step Functions when a JSONata expression fails (key validation, the signals).
QUERY_EVALUATION_ERROR = "States.QueryEvaluationError"
#: Errors of the protected work after which the work behind the failed task may still run:
#: a task's ``TimeoutSeconds`` or heartbeat ran out (Step Functions stops waiting, not the
#: Lambda invocation, activity or callback worker), or a Lambda invocation hit its function's
#: timeout (Lambda ends it; a runtime that cannot kill a handler - the local one - lets it run
#: on: safe under both). After them the acquisition is retired - held for its stop grace from
#: now - instead of released (https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html).
MAY_STILL_RUN_ERRORS = ("States.Timeout", "States.HeartbeatTimeout", "Sandbox.Timedout")
#: A task's ``TimeoutSeconds`` ran out (a parked waiter's park timeout: it looks by itself).
STATES_TIMEOUT = MAY_STILL_RUN_ERRORS[0]
#: A task's ``HeartbeatSeconds`` ran out.
STATES_HEARTBEAT_TIMEOUT = MAY_STILL_RUN_ERRORS[1]
#: A Lambda invocation hit its function's timeout.
LAMBDA_TIMED_OUT = MAY_STILL_RUN_ERRORS[2]

#: ``aws-sdk:sfn:*`` errors. ``SendTaskHeartbeat`` answers this for a task token whose task is
#: over: the branch that registered it has ended - completed, failed, cancelled with its
#: Parallel or Map, or with its execution
#: (https://docs.aws.amazon.com/step-functions/latest/apireference/API_SendTaskHeartbeat.html).
TASK_TIMED_OUT = "Sfn.TaskTimedOutException"
#: The presence token a waiter probed is closed (:data:`TASK_TIMED_OUT`).
PRESENCE_GONE = TASK_TIMED_OUT
#: ``SendTaskSuccess`` errors that mean the presence task it ends is over already (or was
#: never registered under that token): nothing to end
#: (https://docs.aws.amazon.com/step-functions/latest/apireference/API_SendTaskSuccess.html).
DISMISS_OVER = ("Sfn.TaskDoesNotExistException", TASK_TIMED_OUT, "Sfn.InvalidTokenException")
#: ``SendTaskSuccess`` throttled: the wake-up is tried again.
WAKE_THROTTLED = "Sfn.ThrottlingException"


class LockErrors:
    """The errors a locked section (``LockedWorkflow``, ``LockedSection``) fails with, for a
    Catch around it - like aws-cdk's ``sfn.Errors``. A ``LockedSection`` in a Parallel::

        locked = sfn.Parallel(self, "Locked").branch(section)
        locked.add_catch(handle_busy, errors=[LockErrors.TIMEOUT])

    The section releases its lock before it fails (or, for an error of work that may still run,
    keeps it for its stop grace). The protected work's own errors leave the section unchanged,
    but for ``States.*`` ones: see :attr:`RERAISED_STATES_PREFIX`.
    """

    INVALID_KEY = ERROR_INVALID_KEY
    """The lock key (or keys) is missing, not a string, empty or too long (checked before any
    DynamoDB call)."""
    TIMEOUT = ERROR_TIMEOUT
    """The lock was still held when ``max_wait`` ran out."""
    LOST = ERROR_LOST
    """The lock was taken over while the work ran (its lease ended, or the holder was taken for
    dead): the work ran, but maybe not alone - only fenced writes (``$lock.fence``) are safe."""
    TOO_MANY_READERS = ERROR_TOO_MANY_READERS
    """A reader (``Lock.shared``) arrived when its key had as many readers as it may have."""
    PRESENCE_UNKNOWN = ERROR_PRESENCE_UNKNOWN
    """The section could not tell whether its work's branch was still present
    (``detect_cancellation``): the work was stopped, and the lock is kept for its stop grace."""
    RECORD_MISSING = ERROR_RECORD_MISSING
    """``Lock.on_record(..., must_exist=True)``: no record has the key."""
    INVALID_UPDATE = ERROR_INVALID_UPDATE
    """``Lock.on_record``: the work's ``recordUpdate`` is malformed, or DynamoDB refused it."""
    RECORD_TOO_LARGE = ERROR_RECORD_TOO_LARGE
    """``Lock.on_record``: the record is too large to read into ``$lock.item``."""
    SUPERSEDED = ERROR_SUPERSEDED
    """``Lock.fair(key, queue=QueueLimit.keep_newest(n))``: a newer run queued on the key before
    this one's turn came; it never entered its work. The cause names the newer run's execution."""
    QUEUE_FULL = ERROR_QUEUE_FULL
    """``Lock.fair(key, queue=QueueLimit.keep_oldest(n))``: ``n`` runs already queued on the key;
    this one was refused without queuing."""
    RERAISED_STATES_PREFIX = RERAISED_STATES_PREFIX
    """Prefix of a ``States.*`` error of the work re-raised by the section (a Fail state may not
    raise ``States.*``): ``States.Timeout`` leaves as ``Lock.States.Timeout``, its cause the
    JSON ``{"Error", "Cause"}`` of the original."""

    @classmethod
    def all(cls) -> tuple[str, ...]:
        """Every error name above (the prefix aside)."""
        return tuple(
            value for name, value in vars(cls).items()
            if name.isupper() and name != "RERAISED_STATES_PREFIX"
        )

    def __init__(self) -> None:
        raise TypeError("`LockErrors` holds names only: use its attributes, e.g. LockErrors.TIMEOUT")
