"""A lease shorter than the run: a synth warning that says what it costs.

A lease shorter than the longest time a holder may run is allowed (it trades safety for faster
recovery from crashed holders), but the construct knows both numbers, so it says so at synth
with a CDK warning annotation (``cdk synth`` prints it; ``--strict`` fails on it).

How long a run may last: the state machine's ``TimeoutSeconds``; without one, a STANDARD
execution may run for up to a year and an EXPRESS one for 5 minutes
(https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html, "Maximum execution
time").
"""

from __future__ import annotations

import json
from typing import Any, Optional

from aws_cdk import Annotations, Stack, aws_stepfunctions as sfn
from constructs import Construct

#: The warning's id (``cdk synth`` shows it; ``Annotations.acknowledge_warning`` silences it).
WARNING_ID = "locked-workflow:lease-shorter-than-run"
#: The longest execution of a STANDARD state machine without a timeout, and of an EXPRESS one.
STANDARD_MAX_RUN_S = 365 * 24 * 3600
EXPRESS_MAX_RUN_S = 5 * 60


def machine_max_run(machine: sfn.IStateMachine) -> tuple[Optional[float], str]:
    """How long an execution of ``machine`` may run (s), and what says so (for messages): its
    ``TimeoutSeconds``, else the service's maximum for its type; ``None`` when it cannot be
    read (an imported machine, a definition that is not JSON until deployed)."""
    resource = machine.node.default_child
    if not isinstance(resource, sfn.CfnStateMachine):
        return None, ""
    stack = Stack.of(machine)
    definition = stack.resolve(resource.definition_string)
    if isinstance(definition, dict) and "Fn::Join" in definition:
        separator, parts = definition["Fn::Join"]
        definition = separator.join(part if isinstance(part, str) else "0" for part in parts)
    try:
        parsed: Any = json.loads(definition) if isinstance(definition, str) else None
    except ValueError:
        return None, ""
    if not isinstance(parsed, dict):
        return None, ""
    timeout = parsed.get("TimeoutSeconds")
    if isinstance(timeout, (int, float)):
        return float(timeout), f"the timeout of {machine.node.path!r}"
    if stack.resolve(resource.state_machine_type) == "EXPRESS":
        return float(EXPRESS_MAX_RUN_S), f"the longest run of the EXPRESS machine {machine.node.path!r}"
    return float(STANDARD_MAX_RUN_S), f"the longest run of {machine.node.path!r} (no timeout: a STANDARD execution may run a year)"


def _shown(seconds: float) -> str:
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)} {unit}"
    return f"{seconds:g} s"


def warn_if_shorter(scope: Construct, *, lease_s: float, run_s: Optional[float], run: str) -> bool:
    """Add the warning to ``scope`` when ``lease_s`` < ``run_s`` (``run``: what bounds the run,
    for the message). Returns whether it warned."""
    if run_s is None or lease_s >= run_s:
        return False
    Annotations.of(scope).add_warning_v2(
        WARNING_ID,
        f"`lease` ({_shown(lease_s)}) is shorter than {run} ({_shown(run_s)}). What it costs: a run "
        f"still holding the lock when its lease ends can be overtaken - another run acquires the "
        f"lock while the first still works, both are inside at once, and the first fails "
        f"Lock.Lost at its release (its work done, unprotected); only fenced writes (`$lock.fence`) "
        f"reject its late writes. Set `lease` to at least {_shown(run_s)} (the default of "
        f"LockedWorkflow: timeout + 5 min), or keep it short on purpose (faster recovery from "
        f"crashed holders) and fence every write.",
    )
    return True
