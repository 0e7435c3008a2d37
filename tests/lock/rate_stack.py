"""Workflows of the rate limit (``Lock.rate``), shared by its tests: the limited workflow, one
with a short ``max_wait``, the same work with the ADMIT condition weakened (the slot clause
dropped: the negative control of the window check) and one without the guard after the Wait
(a late run enters anyway: the negative control of the guard). ``RateAtOnce`` (also at most
``AT_ONCE`` at a time), its impatient twin and ``RateProbe`` (no concurrency limit: the negative
control) run a probe: the work counts the runs inside at its entry on an atomic counter, lasts
``PROBE_WORK_S``, and fails when the input says ``fail``."""

from __future__ import annotations

from unittest import mock

import aws_cdk as cdk
from aws_cdk import aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks
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
#: Runs in the work at a time of the rate limit with a concurrency limit (``RateAtOnce``).
AT_ONCE = 2
#: How long the probe's work lasts (s): long enough for runs admitted together to overlap.
PROBE_WORK_S = 3
#: The probe's item in the lock table: ``probe#<key>`` (``inside``: the runs in the work).
PROBE_PREFIX = "probe#"

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
                mock.patch.object(rate_protocol, "on_time_expression", lambda *args: "true"):
            LockedWorkflow(self, "Weakened", lock=limit, protected=work("Weakened"), key_namespace="weak",
                           max_wait=cdk.Duration.seconds(120), state_machine_name="RateWeakened",
                           **{k: v for k, v in common.items() if k != "key_namespace"})
        with mock.patch.object(rate_protocol, "on_time_expression", lambda *args: "true"):
            LockedWorkflow(self, "Unguarded", lock=limit, protected=work("Unguarded"),
                           max_wait=cdk.Duration.seconds(120), state_machine_name="RateUnguarded", **common)

        def probe(name: str) -> sfn.IChainable:
            item = {"pk": tasks.DynamoAttributeValue.from_string(jsonata(f"'{PROBE_PREFIX}' & $states.input.key"))}
            enter = tasks.DynamoUpdateItem.jsonata(
                self, f"{name}Enter", state_name=WORK, table=locks, key=item,
                update_expression="ADD inside :one",
                expression_attribute_values={":one": tasks.DynamoAttributeValue.from_number(1)},
                return_values=tasks.DynamoReturnValues.UPDATED_NEW,
                outputs=jsonata("{'key': $states.input.key, 'fail': $states.input.fail, "
                                "'insideAtEntry': $number($states.result.Attributes.inside.N)}"))
            leave = tasks.DynamoUpdateItem.jsonata(
                self, f"{name}Leave", state_name="Leave", table=locks, key=item,
                update_expression="ADD inside :minus",
                expression_attribute_values={":minus": tasks.DynamoAttributeValue.from_number(-1)},
                outputs=jsonata("{'insideAtEntry': $states.input.insideAtEntry, 'fence': $lock.fence, "
                                "'admission': $lock.admission, 'admittedAt': $exists($lock.admittedAt) ? "
                                "$lock.admittedAt : $lock.acquiredAt}"))
            busy = sfn.Wait(self, f"{name}Busy", state_name="Busy",
                            time=sfn.WaitTime.duration(cdk.Duration.seconds(PROBE_WORK_S)))
            boom = sfn.Fail.jsonata(self, f"{name}Boom", state_name="Boom", error="Work.Failed", cause="asked to")
            fails = sfn.Choice.jsonata(self, f"{name}Fails", state_name="Fails?")
            fails.when(sfn.Condition.jsonata(jsonata("$states.input.fail = true")), boom)
            fails.otherwise(busy.next(leave))
            return sfn.Chain.start(enter).next(fails)

        at_once = Lock.rate(key, limit=LIMIT, period=cdk.Duration.seconds(PERIOD_S), at_once=AT_ONCE)
        LockedWorkflow(self, "AtOnce", lock=at_once, protected=probe("AtOnce"), max_wait=cdk.Duration.seconds(120),
                       state_machine_name="RateAtOnce", **common)
        LockedWorkflow(self, "AtOnceImpatient", lock=at_once, protected=probe("AtOnceImpatient"),
                       max_wait=cdk.Duration.seconds(2), state_machine_name="RateAtOnceImpatient", **common)
        LockedWorkflow(self, "Probe", lock=limit, protected=probe("Probe"), max_wait=cdk.Duration.seconds(120),
                       state_machine_name="RateProbe", **common)
