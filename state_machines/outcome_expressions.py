"""JSONata of a section after its work: what to do with the lock when the work failed (release,
or retire when the work may still run), what to re-raise, and how a release that found the lock
not mine tells a lost response (or a redrive) from a takeover.
"""

from __future__ import annotations

from locked_workflow.state_machines.errors import ERROR_PRESENCE_UNKNOWN, MAY_STILL_RUN_ERRORS, RERAISED_STATES_PREFIX, SIGNAL_RESUMED
from locked_workflow.state_machines.expressions import REDRIVE_COUNT_EXPRESSION, jsonata_string
from locked_workflow.state_machines.lock_item import EXPIRES_AT, GENERATION


def may_still_run_expression() -> str:
    """JSONata (Choice after the work failed with one of :data:`MAY_STILL_RUN_ERRORS`, a hold's
    ``Lock.PresenceUnknown`` - its work was cancelled - or a query error): the work behind it
    may still run - retire, do not release."""
    errors = ", ".join(jsonata_string(e) for e in (*MAY_STILL_RUN_ERRORS, ERROR_PRESENCE_UNKNOWN))
    return f"($states.input.Error in [{errors}]) or ({resumed_expression()})"


def resumed_expression() -> str:
    """JSONata (Choice after the work failed): a task refused to resume after a redrive
    (:func:`resumed_guard_expression` raised)."""
    return (
        "$states.input.Error = 'States.QueryEvaluationError' and $type($states.input.Cause) = 'string' "
        f"and $contains($states.input.Cause, {jsonata_string(SIGNAL_RESUMED + ': ')})"
    )


def work_done_expression(grace_ms: int) -> str:
    """JSONata (the Assign of the protected work, when it succeeded): ``until``, now plus the
    section's stop grace, and ``generation``, the execution's redrive count now. If the
    execution stops from here on, nobody takes this acquisition over before ``until``: the
    janitor, the liveness check and the presence probe all free a stopped holder's lock only
    once its stop grace has passed since its end, which comes after this. (Work that ended
    after a redrive - resumed in a Wait or Pass state, which are not guarded - says nothing of
    when the stop was: its generation is not the acquisition's.)"""
    return f"{{'until': $millis() + {int(grace_ms)}, {jsonata_string(GENERATION)}: {REDRIVE_COUNT_EXPRESSION}}}"


def redriven_since_acquired_expression(lock_variable: str) -> str:
    """JSONata: the execution was redriven after the acquisition in ``$<lock_variable>`` was
    made (its generation is not the execution's redrive count now), so a lock state resumed
    here may repeat a write that had applied before the stop."""
    lock = "$" + lock_variable
    return f"$not($exists({lock}.{GENERATION}) and {lock}.{GENERATION} = {REDRIVE_COUNT_EXPRESSION})"


def released_before_takeover_expression(lock_variable: str, done_variable: str) -> str:
    """JSONata (Choice after a release found the lock not mine - a retry after a lost response,
    or a release resumed by a redrive): true when nobody could have taken this acquisition over
    yet, so the earlier attempt is what freed it and only its response was lost.

    Without a redrive since the acquire, only the lease ends a live holder's acquisition
    (``$<lock_variable>.expiresAt``). After one, the execution was stopped (or failed) in between,
    and a stopped holder's lock is freed once its stop grace has passed since its end: before
    ``$<done_variable>.until`` (:func:`work_done_expression`, assigned when the work succeeded,
    in the acquisition's generation - before the stop; a release without it is not trusted). A redrive comes within 14 days of the end, usually much
    later than the grace: then the release cannot tell, and the section fails ``Lock.Lost``
    (https://docs.aws.amazon.com/step-functions/latest/dg/redrive-executions.html)."""
    lock, done = "$" + lock_variable, "$" + done_variable
    return (
        f"$millis() < {lock}.{EXPIRES_AT} and ($not({redriven_since_acquired_expression(lock_variable)}) "
        f"or ($exists({done}.until) and {done}.{GENERATION} = {lock}.{GENERATION} and $millis() < {done}.until))"
    )


def resumed_release_applied_expression(lock_variable: str, done_variable: str) -> str:
    """JSONata (Choice after a *first* release found the lock not mine): a redrive came since
    the acquire, so this release is a rerun of one that may have applied before the stop (AWS
    reruns the step the execution stopped in), and nobody could have taken the lock over yet
    (:func:`released_before_takeover_expression`): the earlier run released it. Otherwise the
    lock was taken over (``Lock.Lost``)."""
    return (
        f"{redriven_since_acquired_expression(lock_variable)} and "
        f"{released_before_takeover_expression(lock_variable, done_variable)}"
    )


def rethrow_error_expression() -> str:
    """JSONata: the error a section re-raises for an error of its work (``States.*`` renamed;
    a task of the work that refused to resume after a redrive: ``Lock.Resumed``)."""
    e = "$states.input.Error"
    return (
        f"({resumed_expression()}) ? {jsonata_string(SIGNAL_RESUMED)} : "
        f"($substring({e}, 0, 7) = 'States.' ? '{RERAISED_STATES_PREFIX}' & {e} : {e})"
    )


def resumed_again_expression(redrives_variable: str) -> str:
    """JSONata (Choice after the section failed with ``Lock.Resumed``): the section has not yet
    started over in this redrive generation, so it enters again with a new acquisition;
    otherwise the resumed task belongs to an enclosing section, which starts over itself."""
    r = "$" + redrives_variable
    return (
        f"$states.input.Error = {jsonata_string(SIGNAL_RESUMED)} and "
        f"{REDRIVE_COUNT_EXPRESSION} > ($exists({r}) ? {r} : 0)"
    )


def rethrow_cause_expression() -> str:
    """JSONata: the cause a section re-raises (for a renamed error: the original pair as JSON)."""
    e, c = "$states.input.Error", "$states.input.Cause"
    return f"$substring({e}, 0, 7) = 'States.' ? $string({{'Error': {e}, 'Cause': {c}}}) : {c}"
