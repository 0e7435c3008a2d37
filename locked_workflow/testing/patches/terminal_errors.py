"""``States.DataLimitExceeded`` and ``States.Runtime`` end the execution: no Catch or Retry matches them.

Gap (moto 5.2.1): ``States.ALL`` matches every error, so a Catch or Retry on it handles a
payload over the size quota and a runtime error, and the execution goes on.

The service: "The ``States.ALL`` error type must appear alone in a Catcher and can't catch
the ``States.DataLimitExceeded`` terminal error or Runtime error types";
``States.DataLimitExceeded`` is "A terminal error that can't be caught by the
``States.ALL`` error type"; "A ``States.Runtime`` error isn't retriable, and will always
cause the execution to fail. A retry or catch on ``States.ALL`` won't catch
``States.Runtime`` errors."
(https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html).

Whether a Catch or Retry that *names* ``States.DataLimitExceeded`` handles it, the page
does not say. The runtime takes the stricter reading of "terminal": nothing handles it - no
Catch, no Retry, whatever its ``ErrorEquals`` - so a design that relies on catching it
fails here rather than on AWS. (Observed executions on AWS have been caught by both; a
workflow correct under this reading is correct under either.) ``States.Runtime`` "will
always cause the execution to fail": nothing handles it either.

Fix: an ``ErrorEquals`` never matches those two errors - in a Retrier or a Catcher, on a
Task, Parallel or Map. A branch or iteration failing with one fails its Parallel or Map
with the same error (``patches/nested_states_errors``), which its own Catch does not
handle either: the execution fails with that error.

Proof: ``tests/local/test_patch_terminal_errors.py``.
"""

from __future__ import annotations

from contextlib import ExitStack

from moto.stepfunctions.parser.asl.component.common.error_name.error_equals_decl import ErrorEqualsDecl
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import StatesErrorName
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import StatesErrorNameType

from locked_workflow.testing.seams import wrap

#: Errors that always end the execution.
TERMINAL = (
    StatesErrorName(typ=StatesErrorNameType.StatesStatesDataLimitExceeded),
    StatesErrorName(typ=StatesErrorNameType.StatesRuntime),
)


def apply(stack: ExitStack) -> None:
    def uncatchable(original):  # type: ignore[no-untyped-def]
        def _eval_body(self, env):  # type: ignore[no-untyped-def]
            error_name = env.stack[-1]
            original(self, env)
            if error_name in TERMINAL:
                env.stack[-1] = False

        return _eval_body

    wrap(stack, ErrorEqualsDecl, "_eval_body", uncatchable, by=__name__)
