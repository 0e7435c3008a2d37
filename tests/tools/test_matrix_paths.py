"""The fault matrix's ``reach`` (``tools/matrix/paths.py``): the faults that take the Catch
edges on the way to a state, read from its definition."""

from __future__ import annotations

import pytest

from tools.matrix import paths

_DDB = "arn:aws:states:::dynamodb:updateItem"
_SFN = "arn:aws:states:::aws-sdk:sfn:sendTaskSuccess"
_RETRY = [{"ErrorEquals": ["DynamoDB.InternalServerError", "DynamoDB.ThrottlingException"], "MaxAttempts": 2}]


def _definition() -> dict:
    """Acquire --refused--> Park; Acquire -> Release.Grant --refused--> Release.Recheck;
    Release.Grant -> Release.Wake --any error--> Release.Describe (in a Parallel's branch);
    Release.Read --5xx--> Release.Again; the work (a Lambda) --any error--> Release.AfterError."""
    def task(resource: str, nxt: str | None = None, **extra) -> dict:
        return {"Type": "Task", "Resource": resource, **({"Next": nxt} if nxt else {"End": True}), **extra}

    ccf = ["DynamoDB.ConditionalCheckFailedException"]
    return {"StartAt": "Lock.Acquire", "States": {
        "Lock.Acquire": task(_DDB, "Work", Retry=_RETRY, Catch=[{"ErrorEquals": ccf, "Next": "Lock.Park"}]),
        "Lock.Park": task(_DDB),
        "Work": task("arn:aws:states:::lambda:invoke", "Lock.Release",
                     Catch=[{"ErrorEquals": ["States.ALL"], "Next": "Lock.Release.AfterError"}]),
        "Lock.Release.AfterError": task(_DDB),
        "Lock.Release": {"Type": "Parallel", "End": True, "Branches": [{"StartAt": "Lock.Release.Grant", "States": {
            "Lock.Release.Grant": task(_DDB, "Lock.Release.Wake", Retry=_RETRY,
                                       Catch=[{"ErrorEquals": ccf, "Next": "Lock.Release.Recheck"}]),
            "Lock.Release.Recheck": task(_DDB, "Lock.Release.Read"),
            "Lock.Release.Wake": task(_SFN, "Lock.Release.Read",
                                      Catch=[{"ErrorEquals": ["States.ALL"], "Next": "Lock.Release.Describe"}]),
            "Lock.Release.Describe": task("arn:aws:states:::aws-sdk:sfn:describeExecution"),
            "Lock.Release.Read": task(_DDB, Retry=_RETRY, Catch=[
                {"ErrorEquals": ["DynamoDB.InternalServerError"], "Next": "Lock.Release.Again"}]),
            "Lock.Release.Again": task(_DDB),
        }}]},
    }}


@pytest.mark.parametrize("state, faults", [
    ("Lock.Release.Grant", []),  # no Catch on the way
    ("Lock.Release.Describe", [("Lock.Release.Wake", "5xx", 1)]),  # a Step Functions call: no retry of a 5xx
    ("Lock.Release.Recheck", [("Lock.Release.Grant", "lost", 1)]),  # its retry refused: its first try applied
    ("Lock.Release.Again", [("Lock.Release.Read", "5xx", 3)]),  # it fails as often as its Retry tries it
    ("Lock.Park", []),  # the fast path refused by a holder: the situation's contention, no fault
    ("Lock.Release.AfterError", []),  # the work's failure: the situation's (work-fails)
])
def test_reach_takes_the_catch_edges_a_fault_can_take_on_the_way(state, faults):
    assert paths.preparatory_faults(_definition(), state) == faults


def test_negative_control_a_state_no_way_leads_to_is_refused():
    definition = _definition()
    definition["States"]["Lock.Orphan"] = {"Type": "Task", "Resource": _DDB, "End": True}
    with pytest.raises(ValueError, match="`target` must be a state reachable"):
        paths.catch_path(definition, "Lock.Orphan")
    assert paths.catch_path(definition, "Lock.Release.Describe") == [("Lock.Release.Wake", ("States.ALL",))]
