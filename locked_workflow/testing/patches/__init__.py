"""Fixes for gaps of bare moto 5.2.1, one module per gap.

Each module's docstring names the gap and the test in ``tests/local/`` that shows the
failure on bare moto and its absence with the fix; when moto fixes a gap upstream, that
test's negative half fails and tells us to drop the module. Every module has an
``apply(stack, ...)`` that patches moto through ``locked_workflow.testing.seams`` on ``stack``, so
closing the stack restores bare moto. No two modules patch the same attribute: where several
gaps wrap one moto method, ``seams.CHAINS`` declares the order of their contributions, so the
order of the calls below does not decide theirs.

The list of these modules - for each, what AWS does, its page and the proof test - is the
table "What the runtime models" of ``docs/runtime.md``, with the runtime's known gaps against
AWS; ``tests/local/test_runtime_docs.py`` checks it against the modules and their docstrings.
"""

from __future__ import annotations

from contextlib import ExitStack

from locked_workflow.testing.events import EventRouter
from locked_workflow.testing.lambda_runtime import FunctionRegistry
from locked_workflow.testing.patches import (
    async_invoke_retries,
    backend_lookup,
    branch_thread_names,
    cancelled_branches,
    consumed_capacity,
    data_limit,
    direct_dynamodb,
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
    parsed_paths,
    redrive,
    retried_callbacks,
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
    async_invoke_options: async_invoke_retries.AsyncInvokeOptions | None = None,
) -> None:
    """Apply every fix; ``stack.close()`` reverts them (in reverse order)."""
    backend_lookup.apply(stack)
    serial_dynamodb.apply(stack)
    consumed_capacity.apply(stack)
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
    async_invoke_retries.apply(stack, async_invoke_options or async_invoke_retries.AsyncInvokeOptions())
    eventbridge_targets.apply(stack, router)
    execution_status_events.apply(stack, router)
    stack.callback(router.close)  # held-back late copies die with the cloud, before moto
    execution_end.apply(stack)
    redrive.apply(stack)
    execution_logs.apply(stack)
    heartbeat_timeout.apply(stack)
    task_failure_cause.apply(stack)
    late_callbacks.apply(stack)
    retried_callbacks.apply(stack)
    task_tokens.apply(stack, task_token_length)
    data_limit.apply(stack)
    terminal_errors.apply(stack)
    history_limit.apply(stack, history_event_limit)
    parsed_definitions.apply(stack)
    parsed_paths.apply(stack)
    branch_thread_names.apply(stack)
    error_codes.apply(stack)
    direct_dynamodb.apply(stack, task_clients.apply(stack))
    cancelled_branches.apply(stack)
