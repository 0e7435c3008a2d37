"""The variables a section keeps, all named after its ``lock_variable``: the name's check, and
each variable's name by its role.

The protected work reads the lock as ``$<lock_variable>``; the section's own states keep the
others (its wait, the holder it met, its redrives, ...). Step Functions variable names follow
JSONata's (https://docs.aws.amazon.com/step-functions/latest/dg/workflow-variables.html).
"""

from __future__ import annotations

import re
from typing import Dict

from locked_workflow.state_machines import lock_protocol as protocol

#: A variable name the section accepts as ``lock_variable`` (its derived names stay valid).
VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,50}")


def section_variables(lock_variable: str) -> Dict[str, str]:
    """Role -> name of every variable of a section whose lock is ``$<lock_variable>``; a
    ``lock_variable`` that is no such name is refused (``ValueError``)."""
    if not VARIABLE_NAME.fullmatch(lock_variable or "") or lock_variable == "states":
        raise ValueError(
            "`lock_variable` must be a JSONata variable name of at most 51 characters (a "
            f"letter or _, then letters, digits or _, not 'states'), got: {lock_variable!r}"
        )
    return {
        "lock": lock_variable,
        "wait": f"{lock_variable}Wait",
        "holder": f"{lock_variable}{protocol.HOLDER_SUFFIX}",
        "redrives": f"{lock_variable}Redrives",
        "lost": f"{lock_variable}Lost",
        "presence": f"{lock_variable}Presence",
        "held": f"{lock_variable}Held",
        "done": f"{lock_variable}Done",
        "slot": f"{lock_variable}Slot",
    }
