"""Fixes for gaps of bare moto 5.2.1, one module per gap.

Each module's docstring names the gap and the test in ``tests/local/`` that shows the
failure on bare moto and its absence with the fix; when moto fixes a gap upstream, that
test's negative half fails and tells us to drop the module. Every module has an
``apply(stack, ...)`` that enters ``unittest.mock.patch`` contexts on ``stack``, so
closing the stack restores bare moto.

=========================  ==========================================================
module                     gap
=========================  ==========================================================
serial_dynamodb            concurrent conditional writes can all win
dynamodb_validation        item size counted twice on update; partial UpdateItems; invalid numbers and sets stored
consumed_capacity          ReturnConsumedCapacity answered with constants, whatever the items' sizes
transaction_conflicts      no TransactionConflictException, no TransactionConflict cancellation (a mode, off by default)
execution_snapshot         a second execution of a state machine cannot start
execution_output           DescribeExecution returns a string output unencoded
state_machine_type         CreateStateMachine ignores type=EXPRESS
unique_execution_names     unnamed executions all get ``...:execution:<sm>:None``
jsonata_evaluator          no JSONata evaluator; unescaped string variables; errors
service_shapes             task parameters/results not mapped to the API's shapes
nested_states_errors       Parallel/Map turn a branch's States.* error into States.Runtime
task_argument_errors       a task's Arguments error becomes e.g. DynamoDB.AmazonDynamoDBException
parallel_argument_errors   a Parallel's Arguments error escapes the state's Catch
lambda_in_process          Lambda needs Docker
eventbridge_targets        rules cannot target state machines; Input/InputPath ignored
execution_status_events    no ``Step Functions Execution Status Change`` events
execution_end              StopExecution/timeout leave the execution RUNNING until its state ends
redrive                    no RedriveExecution, no ``$states.context.Execution.RedriveCount``
execution_logs             LoggingConfiguration ignored: no execution log lines in CloudWatch Logs
field_names                a JSONata error's cause names an internal class, not the state's field
heartbeat_timeout          a heartbeat timeout fails with States.Timeout, not States.HeartbeatTimeout
task_failure_cause         SendTaskFailure drops its cause
task_tokens                task tokens are 36-character uuids, not AWS-sized (~700 characters)
data_limit                 no size quota on a state's input, a task's input or Assign
terminal_errors            States.ALL catches States.DataLimitExceeded and States.Runtime
history_limit              no 25,000-event history limit
cancelled_branches         a failed branch's siblings run on: tokens open, no ...Aborted events
late_callbacks             SendTaskSuccess to a task that timed out succeeds, and its TaskSucceeded lands late
parsed_definitions         every execution parses its definition again (~0.4 s of the interpreter for a fair lock)
task_clients               every task creates a new boto3 client
error_codes                the interpreter's API errors answer with an empty code (``InvalidDefinition`` is ``""``)
=========================  ==========================================================
"""

from __future__ import annotations

from contextlib import ExitStack

from locked_workflow.testing.events import EventRouter
from locked_workflow.testing.lambda_runtime import FunctionRegistry
from locked_workflow.testing.patches import (
    cancelled_branches,
    consumed_capacity,
    data_limit,
    dynamodb_validation,
    error_codes,
    eventbridge_targets,
    execution_end,
    execution_logs,
    execution_output,
    execution_snapshot,
    execution_status_events,
    field_names,
    heartbeat_timeout,
    history_limit,
    jsonata_evaluator,
    late_callbacks,
    lambda_in_process,
    nested_states_errors,
    parallel_argument_errors,
    parsed_definitions,
    redrive,
    serial_dynamodb,
    service_shapes,
    state_machine_type,
    task_argument_errors,
    task_clients,
    task_failure_cause,
    task_tokens,
    terminal_errors,
    transaction_conflicts,
    unique_execution_names,
)

__all__ = ["apply_all"]


def apply_all(
    stack: ExitStack,
    *,
    functions: FunctionRegistry,
    router: EventRouter,
    task_token_length: int = task_tokens.DEFAULT_LENGTH,
    history_event_limit: int = history_limit.DEFAULT_LIMIT,
) -> None:
    """Apply every fix; ``stack.close()`` reverts them (in reverse order)."""
    serial_dynamodb.apply(stack)
    consumed_capacity.apply(stack)  # before dynamodb_validation: measures only requests it let through
    dynamodb_validation.apply(stack)
    transaction_conflicts.apply(stack)  # dormant until transaction_conflicts(...) turns it on
    execution_snapshot.apply(stack)
    execution_output.apply(stack)
    state_machine_type.apply(stack)
    unique_execution_names.apply(stack)
    jsonata_evaluator.apply(stack)
    service_shapes.apply(stack)
    nested_states_errors.apply(stack)
    task_argument_errors.apply(stack)
    field_names.apply(stack)
    parallel_argument_errors.apply(stack)
    lambda_in_process.apply(stack, functions)
    eventbridge_targets.apply(stack, router)
    execution_status_events.apply(stack, router)
    stack.callback(router.close)  # held-back late copies die with the cloud, before moto
    execution_end.apply(stack)  # after execution_status_events: wraps its terminated()
    redrive.apply(stack)
    execution_logs.apply(stack)
    heartbeat_timeout.apply(stack)
    task_failure_cause.apply(stack)
    late_callbacks.apply(stack)
    task_tokens.apply(stack, task_token_length)
    data_limit.apply(stack)
    terminal_errors.apply(stack)  # after heartbeat_timeout: wraps its ErrorEquals matching
    history_limit.apply(stack, history_event_limit)  # after execution_end and redrive: wraps theirs
    parsed_definitions.apply(stack)
    error_codes.apply(stack)
    task_clients.apply(stack)
    cancelled_branches.apply(stack)  # last: its add_event filter, state eval and Map body wrap the others'
