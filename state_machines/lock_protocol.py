"""The lock protocol, as one import: every name of the protocol modules it is made of.

Every participant - the Step Functions states, the janitor, the Python ``LockClient`` - reads
and writes the same lock items with the same expressions, each spelled once in one of these
modules (read them in this order, top to bottom):

1. :mod:`~locked_workflow.state_machines.errors` - the error names callers can Catch
   (``LockErrors``), the internal signals, and AWS's names of the errors the lock handles;
2. :mod:`~locked_workflow.state_machines.lock_item` - the lock item (attribute names), the
   stored key and its namespace, the owner of one acquisition;
3. :mod:`~locked_workflow.state_machines.lock_writes` - the DynamoDB writes (acquire, release,
   refresh, retire, presence) as update/condition pairs;
4. :mod:`~locked_workflow.state_machines.retry_policy` - the Retry settings of those writes;
5. :mod:`~locked_workflow.state_machines.expressions` - the JSONata pieces evaluated by the
   service (section entry, key validation, clock, lease, raising an error);
6. :mod:`~locked_workflow.state_machines.wait_policy` - how a waiter polls, and the history
   budget of its loop;
7. :mod:`~locked_workflow.state_machines.lock_arguments` - the ASL arguments of the lock's
   tasks, pure functions of their inputs: enter the section -> acquire -> (held: wait loop) ->
   protected work -> release, and release-then-rethrow on every error of the protected work;
8. :mod:`~locked_workflow.state_machines.outcome_expressions` - what a section does after its
   work failed, and what it re-raises;
9. :mod:`~locked_workflow.state_machines.wait_expressions` - the wait loop and the liveness
   check of a holder;
10. :mod:`~locked_workflow.state_machines.history` - the janitor's reading of an ended
    execution's history.

This module keeps the names callers import (``from ...lock_protocol import jsonata``,
``protocol.ACQUIRE``); new code may import from the module that defines a name.
"""

from __future__ import annotations

from locked_workflow.state_machines.errors import (  # noqa: F401
    CONDITION_FAILED,
    DISMISS_OVER,
    ERROR_INVALID_KEY,
    ERROR_LOST,
    ERROR_PRESENCE_UNKNOWN,
    ERROR_TIMEOUT,
    ERROR_TOO_MANY_READERS,
    MAY_STILL_RUN_ERRORS,
    PRESENCE_GONE,
    QUERY_EVALUATION_ERROR,
    RERAISED_STATES_PREFIX,
    SDK_CONDITION_FAILED,
    SIGNAL_LOST_IN_HOLD,
    SIGNAL_REENTERED,
    SIGNAL_RESUMED,
    TRANSACTION_CONFLICT,
    TRANSIENT_ERRORS,
)
from locked_workflow.state_machines.lock_item import (  # noqa: F401
    ACQUIRED_AT,
    ALIVE_STATUSES,
    CLIENT_LEASE,
    EXPIRES_AT,
    FENCE,
    GENERATION,
    GRACE,
    KEY_ATTRIBUTE,
    LOCK_TABLE_ITEM,
    LOCK_TABLE_METADATA,
    MAX_KEY_BYTES,
    NAMESPACE_PATTERN,
    NAMESPACE_SEPARATOR,
    NO_PRESENCE,
    OWNER,
    OWNER_SEPARATOR,
    PRESENCE,
    PRESENCE_AT,
    PRESENCE_CLOSED,
    PRESENCE_OF,
    RECORD_KEY,
    REQUESTED_AT,
    LockItem,
    key_in_namespaces_scan,
    key_problem,
    lock_item_key,
    namespace_problem,
    namespaced,
    owner_execution,
    too_long,
)
from locked_workflow.state_machines.lock_writes import (  # noqa: F401
    ABANDONED,
    ACQUIRE,
    CLIENT_ACQUIRE,
    CLIENT_REFRESH,
    CLIENT_RELEASE,
    CLIENT_TAKEOVER,
    DEPART,
    PRESENCE_CALL_ALLOWANCE_MS,
    PRESENCE_SETTLE_MS,
    PRESENT,
    REFRESH,
    RELEASE,
    RETIRE,
    RETIRE_BY,
    LockWrite,
)
from locked_workflow.state_machines.retry_policy import (  # noqa: F401
    DISMISS_RETRY,
    PRESENCE_RETRY,
    PRESENCE_UNSURE_RETRY,
    TRANSIENT_RETRY,
)
from locked_workflow.state_machines.expressions import (  # noqa: F401
    ENTRY,
    NEW_OWNER_EXPRESSION,
    NOW_EXPRESSION,
    REDRIVE_COUNT_EXPRESSION,
    entry_error_is,
    holds_key_expression,
    jsonata,
    jsonata_string,
    key_expression,
    key_problem_expression,
    lease_end_expression,
    message_of_expression,
    raise_expression,
    redrives_after_restart_expression,
    reentered_or,
    section_entry_expression,
    unwrap_jsonata,
    utf8_bytes,
)
from locked_workflow.state_machines.wait_policy import (  # noqa: F401
    EVENTS_PER_ATTEMPT,
    EVENTS_PER_LIVENESS_CHECK,
    EVENTS_PER_ROUND,
    HISTORY_EVENT_LIMIT,
    WAIT_LOOP_EVENT_BUDGET,
    WaitPolicy,
    longest_wait_s,
    timeout_bound_s,
    worst_case_rounds,
    worst_case_wait_events,
)
from locked_workflow.state_machines.lock_arguments import (  # noqa: F401
    abandoned_arguments,
    acquire_arguments,
    depart_arguments,
    departed_token_expression,
    generation_field,
    held_ms_expression,
    lock_variable_expression,
    presence_projection,
    present_arguments,
    present_values,
    reentered_lock_expression,
    release_arguments,
    resumed_guard_expression,
    retire_arguments,
    update_item_arguments,
)
from locked_workflow.state_machines.outcome_expressions import (  # noqa: F401
    may_still_run_expression,
    redriven_since_acquired_expression,
    released_before_takeover_expression,
    resumed_again_expression,
    resumed_expression,
    resumed_release_applied_expression,
    rethrow_cause_expression,
    rethrow_error_expression,
    work_done_expression,
)
from locked_workflow.state_machines.wait_expressions import (  # noqa: F401
    HOLDER_SUFFIX,
    after_liveness_check_expression,
    holder_execution_expression,
    holder_expression,
    holder_is_execution_expression,
    holder_present_expression,
    holder_projection,
    liveness_check_number_expression,
    liveness_due_expression,
    probe_token_condition,
    stale_owner_expression,
    wait_bookkeeping_expression,
    wait_seconds_expression,
    waited_enough_expression,
)
from locked_workflow.state_machines.history import (  # noqa: F401
    HistoryUnreadable,
    ScheduledTask,
    acquisitions_in_history,
    dynamodb_tasks_scheduled,
)

