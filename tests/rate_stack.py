"""Workflows of the rate limit (``Lock.rate``), shared by its tests: the limited workflow, one
with a short ``max_wait``, the same work with the ADMIT condition weakened (the slot clause
dropped: the negative control of the window check) and one without the guard after the Wait
(a late run enters anyway: the negative control of the guard)."""

from __future__ import annotations

from unittest import mock

import aws_cdk as cdk
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from locked_workflow import Lock, LockedWorkflow, LockTable
from locked_workflow.state_machines import rate_protocol
from locked_workflow.state_machines.lock_protocol import jsonata
from locked_workflow.state_machines.lock_writes import LockWrite

#: Entries admitted per key and window.
LIMIT = 3
#: The window (s).
PERIOD_S = 6
#: The work state whose entry times the tests read from the histories.
WORK = "Work"

#: ADMIT with its count and slot clauses made tautologies (DynamoDB refuses unused
#: placeholders): runs that read the same count are all admitted - the negative control.
WEAKENED = LockWrite(
    update=rate_protocol.ADMIT.update,
    condition=(
        f"(attribute_not_exists(#{rate_protocol.ADMISSIONS}) OR #{rate_protocol.ADMISSIONS} >= :n "
        f"OR #{rate_protocol.ADMISSIONS} < :n) "
        "AND (attribute_not_exists(#slot) OR #slot <= :cutoff OR #slot > :cutoff) "
        f"AND (attribute_not_exists(#{rate_protocol.ADMITTED_AT}) OR #{rate_protocol.ADMITTED_AT} <= :now)"
    ),
)


class RateStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        locks = LockTable(self, "Locks", removal_policy=cdk.RemovalPolicy.DESTROY).table
        key = jsonata("$states.input.key")
        common = dict(table=locks, key_namespace="r", timeout=cdk.Duration.minutes(3), logging=False,
                      tracing=False, janitor=False)

        def work(name: str) -> sfn.Pass:
            return sfn.Pass.jsonata(self, f"{name}Work", state_name=WORK, outputs=jsonata(
                "{'fence': $lock.fence, 'admittedAt': $lock.acquiredAt, 'requestedAt': $lock.requestedAt}"))

        limit = Lock.rate(key, limit=LIMIT, period=cdk.Duration.seconds(PERIOD_S))
        LockedWorkflow(self, "Rate", lock=limit, protected=work("Rate"), max_wait=cdk.Duration.seconds(120),
                       state_machine_name="Rate", **common)
        LockedWorkflow(self, "Impatient", lock=limit, protected=work("Impatient"),
                       max_wait=cdk.Duration.seconds(2), state_machine_name="RateImpatient", **common)
        # (two weakened admissions in one ms write the same slot value, which UPDATED_NEW may
        # leave out: no `$lock.acquiredAt` for the guard after the Wait, so it is left out too)
        with mock.patch.object(rate_protocol, "ADMIT", WEAKENED), \
                mock.patch.object(rate_protocol, "on_time_expression", lambda lock_variable: "true"):
            LockedWorkflow(self, "Weakened", lock=limit, protected=work("Weakened"), key_namespace="weak",
                           max_wait=cdk.Duration.seconds(120), state_machine_name="RateWeakened",
                           **{k: v for k, v in common.items() if k != "key_namespace"})
        with mock.patch.object(rate_protocol, "on_time_expression", lambda lock_variable: "true"):
            LockedWorkflow(self, "Unguarded", lock=limit, protected=work("Unguarded"),
                           max_wait=cdk.Duration.seconds(120), state_machine_name="RateUnguarded", **common)
