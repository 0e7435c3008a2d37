"""What a locked section reads from, and writes into, its rendered protected work.

* the stop grace: how long a stopped holder's work may still run (:func:`derive_stop_grace`),
  and the warning for an explicit one shorter than a Lambda task's run (:func:`warn_if_grace_short`);
* the guard: every task of the work evaluates the section's guard before it calls its
  resource, so a redriven task cannot resume without the lock (:func:`guard_task`);
* walks of rendered states: tasks, branches, reachable states (:func:`work_tasks`,
  :func:`work_task_states`, :func:`task_states`, :func:`reachable_states`; the lock's own
  states are told by name, from the sections' records), and the state that carries the
  lock's Catch (:func:`catching`).
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Optional, Sequence

from aws_cdk import Annotations, Duration, Stack, aws_lambda as lambda_, aws_stepfunctions as sfn
from constructs import Construct

from locked_workflow.constructs_lib.lambda_limits import LAMBDA_INIT_LIMIT_S
from locked_workflow.constructs_lib.section_record import named_states
from locked_workflow.state_machines.lock_protocol import jsonata

#: Stop grace when the protected work has a task whose longest run the construct cannot see
#: (no ``TimeoutSeconds``, not a Lambda of this app): the longest a Lambda invocation can run.
DEFAULT_STOP_GRACE = Duration.minutes(15)
#: Added to the longest task timeout found: delivery and clock slack.
STOP_GRACE_MARGIN_S = 5
#: A Lambda function without a timeout of its own runs for at most 3 s.
LAMBDA_DEFAULT_TIMEOUT_S = 3


def derive_stop_grace(scope: Construct, tasks_found: Sequence[dict]) -> Duration:
    """How long a stopped holder's work may still run, plus a margin: for a Lambda task, its
    function's Init phase (:data:`LAMBDA_INIT_LIMIT_S`, a cold start) and its timeout (when the
    function is part of this app) - Step Functions does not stop an invocation when the task's
    own ``TimeoutSeconds`` ends, nor when the execution stops, but Lambda ends it at the
    function's timeout, which starts after the Init phase; for an activity, a callback or a ``.sync``
    job, its ``TimeoutSeconds`` (what the caller promises its worker stops by);
    :data:`DEFAULT_STOP_GRACE` when a task's longest run cannot be seen."""
    if not tasks_found:
        return Duration.seconds(STOP_GRACE_MARGIN_S)
    functions = _functions(scope)
    longest = 0
    for state in tasks_found:
        resource = str(state.get("Resource", ""))
        seconds = state.get("TimeoutSeconds")
        if _is_lambda_task(resource):
            found = _invoked_function(scope, state, functions)
            if found is None:
                return DEFAULT_STOP_GRACE
            longest = max(longest, _longest_lambda_run_s(found))
        elif isinstance(seconds, (int, float)):
            longest = max(longest, seconds)
        elif _request_response(resource):
            continue  # a DynamoDB or SDK call: over when the stop is (the margin covers it)
        else:  # an activity, a callback or a .sync job: nothing bounds it but TimeoutSeconds
            return DEFAULT_STOP_GRACE
    return Duration.seconds(longest + STOP_GRACE_MARGIN_S)


#: The warning's id for an explicit ``stop_grace`` shorter than a Lambda task's longest run
#: (``cdk synth`` shows it; ``--strict`` fails on it; ``Annotations.acknowledge_warning`` silences it).
SHORT_GRACE_WARNING_ID = "locked-workflow:stop-grace-shorter-than-work"


def longest_lambda_run(scope: Construct, tasks_found: Sequence[dict]) -> Optional[tuple]:
    """(seconds, function path) of the longest run of the work's Lambda tasks whose function is
    part of this app - Lambda's Init limit plus the function's timeout - or ``None`` when the
    work invokes no such function."""
    functions = _functions(scope)
    runs = [(_longest_lambda_run_s(fn), fn.node.path) for state in tasks_found
            if _is_lambda_task(str(state.get("Resource", "")))
            for fn in [_invoked_function(scope, state, functions)] if fn is not None]
    return max(runs, key=lambda run: run[0]) if runs else None


def warn_if_grace_short(scope: Construct, *, grace_s: float, tasks_found: Sequence[dict]) -> bool:
    """Add a warning to ``scope`` when an explicit ``stop_grace`` of ``grace_s`` is shorter than
    the longest run of a Lambda task of the work (:func:`longest_lambda_run`): a holder stopped
    as its task invoked the function may run it after the grace, beside the next holder
    (Step Functions does not stop the invocation; Lambda ends it at the function's timeout,
    which starts after the Init phase:
    https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html). Allowed, as
    a lease shorter than the run is (it trades that overlap for a faster recovery); said at
    synth. Returns whether it warned."""
    longest = longest_lambda_run(scope, tasks_found)
    if longest is None or grace_s >= longest[0]:
        return False
    run_s, function = longest
    Annotations.of(scope).add_warning_v2(
        SHORT_GRACE_WARNING_ID,
        f"`stop_grace` ({grace_s:g} s) is shorter than the longest run of the Lambda function "
        f"{function!r} ({run_s:g} s: Lambda's {LAMBDA_INIT_LIMIT_S} s Init limit + its timeout). What it "
        f"costs: a holder stopped just as its task invoked the function may still run it after the "
        f"grace, so the next holder enters beside it; only fenced writes (`$lock.fence`) reject its "
        f"late writes. Set `stop_grace` to at least {run_s:g} s (or leave it out: derived as that + "
        f"{STOP_GRACE_MARGIN_S} s), or keep it short on purpose and fence every write.",
    )
    return True


def _functions(scope: Construct) -> list:
    return [fn for fn in Stack.of(scope).node.find_all() if isinstance(fn, lambda_.Function)]


def _is_lambda_task(resource: str) -> bool:
    return ":::lambda:invoke" in resource and _request_response(resource)


def _invoked_function(scope: Construct, state: dict, functions: list) -> Optional[lambda_.Function]:
    """The one function of this app a Lambda task invokes, else ``None``."""
    text = json.dumps(Stack.of(scope).resolve(state))
    found = [fn for fn in functions
             if json.dumps(Stack.of(scope).resolve(fn.function_arn)) in text
             or json.dumps(Stack.of(scope).resolve(fn.function_name)) in text]
    return found[0] if len(found) == 1 else None


def _longest_lambda_run_s(function: lambda_.Function) -> float:
    timeout = function.timeout
    return LAMBDA_INIT_LIMIT_S + (timeout.to_seconds() if timeout else LAMBDA_DEFAULT_TIMEOUT_S)


def _request_response(resource: str) -> bool:
    return ":::" in resource and not resource.endswith((".sync", ".sync:2", ".waitForTaskToken"))


def branches(state: Mapping[str, Any]) -> list:
    """The branches of a rendered Parallel, or the item processor of a Map, else none."""
    if state.get("Type") == "Parallel":
        return list(state.get("Branches", []))
    if state.get("Type") == "Map":
        processor = state.get("ItemProcessor") or state.get("Iterator")
        return [processor] if processor else []
    return []

def work_task_states(rendered_section: Mapping[str, Any], lock_states: set) -> list:
    """The task states of a rendered section's branch whose names are not in ``lock_states``
    (the lock's own, by the sections' records), in Parallel branches and Map item processors
    at any depth: the work whose longest run the stop grace covers."""
    return [
        state
        for branch in rendered_section.get("Branches", [])
        for name, state in named_states(branch.get("States", {}))
        if state.get("Type") == "Task" and "Resource" in state and name not in lock_states
    ]


def work_tasks(rendered_section: dict, lock_states: set):
    """(name, task state) of every task of a rendered section's branch that is not a lock
    state, in Parallel branches and inline Map item processors at any depth. A distributed
    Map's items run as child executions, which cannot read the lock's variables: not entered
    (their tasks are guarded by fencing only, as the README says)."""
    def walk(states: Mapping[str, Any]):
        for name, state in states.items():
            if state.get("Type") == "Task" and name not in lock_states:
                yield name, state
            for branch in branches(state):
                if (branch.get("ProcessorConfig") or {}).get("Mode") != "DISTRIBUTED":
                    yield from walk(branch.get("States", {}))

    for branch in rendered_section.get("Branches", []):
        yield from walk(branch.get("States", {}))


#: Fields of a JSONPath state: the guard is a JSONata expression.
_JSONPATH_FIELDS = ("Parameters", "InputPath", "OutputPath", "ResultPath", "ResultSelector")
#: A task's default ``TimeoutSeconds`` (Amazon States Language: 99999999).
_DEFAULT_TASK_TIMEOUT_S = 99999999


def is_jsonpath(state: Mapping[str, Any]) -> bool:
    """A rendered state that uses JSONPath: it says so, or has a JSONPath-only field."""
    return state.get("QueryLanguage") == "JSONPath" or any(f in state for f in _JSONPATH_FIELDS)


#: How to write the work (messages): the rule, its reason and the fix.
JSONATA_WORK_RULE = (
    "the lock guards each task against resuming without the lock after a redrive with a JSONata "
    "expression, which a JSONPath task cannot evaluate; build the tasks with the `.jsonata(...)` "
    "constructors (tasks.LambdaInvoke.jsonata(...), sfn.Pass.jsonata(...)) or "
    "query_language=sfn.QueryLanguage.JSONATA. The section itself may sit in a JSONPath state machine"
)


def jsonpath_states(work: sfn.IChainable, *, tasks_only: bool) -> list:
    """Names of the states of ``work`` reachable from its start that use JSONPath - its task
    states only with ``tasks_only``. The branches of its Parallel and Map states are rendered
    only with their state machine: :func:`guard_task` refuses a JSONPath task there, with the
    same message. A state that cannot be rendered yet is left to the synth."""
    found: list = []

    def walk(states: Mapping[str, Any]) -> None:
        for name, state in states.items():
            if (state.get("Type") == "Task" or not tasks_only) and is_jsonpath(state):
                found.append(name)
            for branch in branches(state):
                walk(branch.get("States", {}))

    for state in reachable_states(work):
        try:
            rendered = state.to_state_json()
        except Exception:  # noqa: BLE001 - e.g. a section nested in the work: checked when it renders
            continue
        walk({state.state_id: rendered})
    return found


def guard_task(name: str, state: dict, guard: str) -> None:
    """Evaluate ``guard`` (JSONata that raises or yields nothing) before the task ``state``
    runs: in the first JSONata template of its ``Arguments`` (or, for a literal value, one
    turned into a template), which Step Functions evaluates before it calls the resource.
    A task without Arguments gets the guard in a JSONata ``TimeoutSeconds`` (its value kept,
    or the default 99999999). A JSONPath task cannot be guarded: refused."""
    if is_jsonpath(state):
        raise ValueError(f"`protected` must use JSONata in its task states ({JSONATA_WORK_RULE}), got: JSONPath task {name!r}")
    if "Arguments" in state and _guard_first_value(state, "Arguments", guard):
        return
    if "Arguments" not in state and state.get("QueryLanguage") != "JSONata":
        raise ValueError(
            f"the protected work's task states must use JSONata (set `query_language` or use "
            f"the `.jsonata(...)` constructors), got: task {name!r} with no QueryLanguage"
        )
    timeout = state.get("TimeoutSeconds", _DEFAULT_TASK_TIMEOUT_S)
    state["TimeoutSeconds"] = _guarded(timeout, guard)


def _guard_first_value(container: Any, key: Any, guard: str) -> bool:
    """Guard the first value (a template or a literal) found depth first under
    ``container[key]``; False if there is none (empty objects and arrays only)."""
    value = container[key]
    if isinstance(value, (dict, list)):
        keys = list(value) if isinstance(value, dict) else range(len(value))
        return any(_guard_first_value(value, k, guard) for k in keys)  # stops at the first
    container[key] = _guarded(value, guard)
    return True


def _guarded(value: Any, guard: str) -> str:
    """A JSONata template that evaluates ``guard``, then yields ``value`` (a template's
    expression, or a JSON literal)."""
    if isinstance(value, str):
        found = _TEMPLATE.fullmatch(value)
        if found:
            return jsonata(f"( {guard}; {found.group(1)} )")
    return jsonata(f"( {guard}; {json.dumps(value)} )")


_TEMPLATE = re.compile(r"\{%(.*)%\}", re.DOTALL)


def task_states(rendered: Any):
    """Task states anywhere in a rendered state (Parallel branches, Map item processors)."""
    if isinstance(rendered, dict):
        if rendered.get("Type") == "Task" and "Resource" in rendered:
            yield rendered
        for value in rendered.values():
            yield from task_states(value)
    elif isinstance(rendered, list):
        for value in rendered:
            yield from task_states(value)

def reachable_states(work: sfn.IChainable) -> list:
    """The states of ``work`` reachable from its start, Catch targets included (not inside
    its Parallel branches or Map iterations)."""
    return list(sfn.State.find_reachable_states(work.start_state, include_error_handlers=True))


def catching(scope: Construct, work: sfn.IChainable, state_name: str) -> sfn.State:
    """A state that runs ``work`` and can carry the lock's Catch.

    A lone task state without a Catch or a successor of its own carries it directly (the
    cheapest form: no extra state); anything else runs in a one-branch Parallel, the only
    way to Catch every error of an arbitrary chain.
    """
    if isinstance(work, sfn.TaskStateBase):
        rendered = work.to_state_json()
        if not rendered.get("Catch") and "Next" not in rendered:
            return work
    return sfn.Parallel.jsonata(
        scope, "Protected", state_name=state_name, outputs=jsonata("$states.result[0]")
    ).branch(work)
