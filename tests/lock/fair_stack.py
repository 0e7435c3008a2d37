"""Fair-lock workflows around the probe Lambda (every grant's holder count, fence and the
order of grants), with a polling twin on the same table as the negative control of order."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks
from constructs import Construct

from locked_workflow import Lock, LockedWorkflow, QueueLimit
from locked_workflow.constructs_lib.section_work import SHORT_GRACE_WARNING_ID
from safety_stack import FAST, PROBE_GRACE_S, PROBE_TIMEOUT_S, probe_resources, token_gate
from locked_workflow.state_machines.lock_protocol import jsonata

#: A parked waiter looks by itself after this long (short: the dead-participant cases wait it out).
PARK_TIMEOUT_S = 3
#: ... and a park timeout longer than any test: a park then ends only by a wake-up.
PATIENT_PARK_TIMEOUT_S = 120
#: The stop grace of the fair section a test cancels (FairCancelled).
CANCELLED_STOP_GRACE_S = 5
#: The stop graces of FairWait (a redrive within it can tell its own earlier release from a
#: takeover) and FairWaitShortGrace (a stopped holder's lock is taken over after it).
LONG_STOP_GRACE_S, SHORT_STOP_GRACE_S = 90, 4


class FairStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.locks, self.probe_fn = probe_resources(self)
        key = jsonata("$states.input.key")
        common = dict(table=self.locks, lock=Lock.mutex(key), key_namespace="f",
                      max_wait=cdk.Duration.seconds(90), timeout=cdk.Duration.minutes(3), logging=False,
                      tracing=False)
        fair = dict(common, lock=Lock.fair(key, park_timeout=cdk.Duration.seconds(PARK_TIMEOUT_S)))
        machines = []
        # the fair lock around the probe
        machines.append(LockedWorkflow(self, "Fair", protected=self.probe("FairProbe"), **fair))
        # the same, holding the lock until the test opens its gate (Fair.open): the hold ends when
        # the test says, never because a loaded machine took longer to set the test up
        probes = self.node.find_child("Probes")
        gate = token_gate(self, "Gate", table=probes, pk="'gate#' & $states.input.key")
        holder = LockedWorkflow(self, "FairHold", protected=gate.next(self.probe("FairHoldProbe")),
                                **{**fair, "stop_grace": cdk.Duration.seconds(PROBE_GRACE_S)})
        probes.grant_write_data(holder.state_machine)
        machines.append(holder)
        # the same with a park timeout no test outlasts (a waiter that must still be parked when
        # its wake-up comes, on a loaded machine too)
        patient_gate = token_gate(self, "PatientGate", table=probes, pk="'gate#' & $states.input.key")
        patient_holder = LockedWorkflow(
            self, "FairPatientHold", protected=patient_gate.next(self.probe("FairPatientHoldProbe")),
            **{**fair, "stop_grace": cdk.Duration.seconds(PROBE_GRACE_S),
               "lock": Lock.fair(key, park_timeout=cdk.Duration.seconds(PATIENT_PARK_TIMEOUT_S))})
        probes.grant_write_data(patient_holder.state_machine)
        machines.append(patient_holder)
        # the same with a park timeout no test outlasts: every handoff it sees is a wake-up
        machines.append(LockedWorkflow(self, "FairPatient", protected=self.probe("PatientProbe"),
                                       **{**fair, "lock": Lock.fair(key, park_timeout=cdk.Duration.seconds(PATIENT_PARK_TIMEOUT_S))}))
        # coalescing (``queue=``): a run holds at the gate when its input says ``hold`` (the burst's
        # first holder, released by the test), else runs the probe
        for name, limit in (("FairNewest", QueueLimit.keep_newest(1)), ("FairOldest", QueueLimit.keep_oldest(1))):
            gate_then_probe = token_gate(self, f"{name}Gate", table=probes, pk="'gate#' & $states.input.key")
            gate_then_probe.next(self.probe(f"{name}HoldProbe"))
            work = sfn.Choice.jsonata(self, f"{name}Hold").when(
                sfn.Condition.jsonata(jsonata("$exists($states.input.hold)")), gate_then_probe,
            ).otherwise(self.probe(f"{name}Probe"))
            coalescing = LockedWorkflow(self, name, protected=work, **{
                **fair, "stop_grace": cdk.Duration.seconds(PROBE_GRACE_S),
                "lock": Lock.fair(key, park_timeout=cdk.Duration.seconds(PATIENT_PARK_TIMEOUT_S), queue=limit)})
            probes.grant_write_data(coalescing.state_machine)
            machines.append(coalescing)
        # coalescing on EXPRESS: its waiters poll as the head (no task token); the burst's holder
        # is a FairNewest run at its gate (same key, same queue limit)
        LockedWorkflow(self, "FairNewestExpress", protected=self.probe("NewestExpressProbe"), wait_policy=FAST,
                       state_machine_type=sfn.StateMachineType.EXPRESS,
                       **{**fair, "timeout": cdk.Duration.minutes(4),
                          "lock": Lock.fair(key, park_timeout=cdk.Duration.seconds(PATIENT_PARK_TIMEOUT_S),
                                            queue=QueueLimit.keep_newest(1))})
        # the same without a janitor: a stopped waiter is dequeued by the others' park fallback
        machines.append(LockedWorkflow(self, "FairNoJanitor", protected=self.probe("NoJanitorProbe"), janitor=False, **fair))
        # a waiter that gives up after 3 s
        machines.append(LockedWorkflow(self, "FairImpatient", protected=self.probe("ImpatientProbe"),
                                       **{**fair, "max_wait": cdk.Duration.seconds(3)}))
        # the fair lock around a Wait of ``waitS`` seconds (a Wait is not guarded: a redrive
        # resumes it): with a stop grace that outlasts a redrive test's stop, next holder and
        # redrive on a loaded machine (the resumed release can tell its own earlier write), and
        # with a short one (a stopped holder is taken over soon)
        for name, grace in (("FairWait", LONG_STOP_GRACE_S), ("FairWaitShortGrace", SHORT_STOP_GRACE_S)):
            wait_work = sfn.CustomState(self, f"{name}Work", state_json={
                "Type": "Wait", "QueryLanguage": "JSONata", "Seconds": jsonata("$states.input.waitS")})
            machines.append(LockedWorkflow(self, name, protected=wait_work,
                                           **{**fair, "stop_grace": cdk.Duration.seconds(grace)}))
        # EXPRESS: no task tokens, so its waiters poll as the head of the same queue
        LockedWorkflow(self, "FairExpress", protected=self.probe("ExpressProbe"), wait_policy=FAST,
                       state_machine_type=sfn.StateMachineType.EXPRESS,
                       **{**fair, "timeout": cdk.Duration.minutes(4)})
        # a fair section in one branch of a Parallel whose other branch fails (when the test
        # fails its gate); the user catches the Parallel's failure and the execution goes on
        # RUNNING (2 min): a waiter parked in the section, or a holder at work in it, is
        # cancelled, with no status event
        from locked_workflow import LockedSection

        # (a holder holds at a gate the test never opens: it is at work when its branch is cancelled)
        held = token_gate(self, "CancelledGate", table=probes, pk="'held#' & $states.input.key")
        section = LockedSection(
            self, "CancelledSection", lock=fair["lock"], key_namespace="f", table=self.locks,
            protected=held.next(self.probe("CancelledProbe")), lease=cdk.Duration.minutes(3), max_wait=cdk.Duration.seconds(90),
            stop_grace=cdk.Duration.seconds(CANCELLED_STOP_GRACE_S),
        )
        # shorter than the probe's Init + timeout: safe only because no test opens the gate, so
        # the cancelled holder's probe never runs (a short grace keeps the tests short)
        cdk.Annotations.of(section).acknowledge_warning(SHORT_GRACE_WARNING_ID, "the probe behind the gate never runs")
        # the sibling fails when the test says (it fails the task token this gate stores)
        sibling = token_gate(self, "SiblingGate", table=probes, pk="'sibling#' & $states.input.key")
        parallel = sfn.Parallel.jsonata(self, "SectionAndSibling")
        parallel.branch(section).branch(sibling)
        parallel.add_catch(sfn.Wait.jsonata(self, "StillRunning", time=sfn.WaitTime.duration(cdk.Duration.seconds(120))),
                           errors=["States.ALL"])
        cancelled = sfn.StateMachine(self, "FairCancelledStateMachine", definition_body=sfn.DefinitionBody.from_chainable(parallel),
                                     query_language=sfn.QueryLanguage.JSONATA, timeout=cdk.Duration.minutes(3))
        probes.grant_write_data(cancelled)
        # the polling lock on the same keys' items of another namespace (order: the negative control)
        machines.append(LockedWorkflow(self, "Polling", protected=self.probe("PollingProbe"), wait_policy=FAST,
                                       **{**common, "key_namespace": "p"}))
        # the negative control of exclusion: the same work with no lock
        sfn.StateMachine(self, "Unlocked", definition_body=sfn.DefinitionBody.from_chainable(self.probe("UnlockedProbe", fence=False)),
                         query_language=sfn.QueryLanguage.JSONATA, timeout=cdk.Duration.minutes(3))
        names = [m.state_machine_name for m in machines] + [cancelled.state_machine_name]
        for m in machines:
            m.section.grant_liveness_check(m.state_machine, *names)
        section.grant_liveness_check(cancelled, *names)

    def probe(self, construct_id: str, fence: bool = True) -> tasks.LambdaInvoke:
        return tasks.LambdaInvoke.jsonata(
            self, construct_id, lambda_function=self.probe_fn,
            payload=sfn.TaskInput.from_object({
                "key": jsonata("$states.input.key"), "fence": jsonata("$lock.fence" if fence else "null"),
                "workMs": jsonata("$states.input.workMs"),
                "fail": jsonata("$exists($states.input.fail) and $states.input.fail"),
            }),
            outputs=jsonata("$merge([$states.input, {'probe': $states.result.Payload}])"),
            retry_on_service_exceptions=False,
        )
