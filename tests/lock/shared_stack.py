"""Read/write-lock workflows around the probe Lambda (``role``: it counts the readers and the
writers inside at entry, and readers check the fence they read), with gated holders the test
releases when it says, and the same work with no lock as the negative control."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks
from constructs import Construct

from locked_workflow import Lock, LockedWorkflow
from safety_stack import FAST, PROBE_GRACE_S, probe_resources, token_gate
from locked_workflow.state_machines.lock_protocol import jsonata

#: A parked waiter looks by itself after this long (the dead-participant cases wait it out).
PARK_TIMEOUT_S = 5
#: A short lease: a stopped reader's entry (no janitor retires it) is reaped after this long.
SHORT_LEASE = cdk.Duration.seconds(12)


class SharedStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.locks, self.probe_fn = probe_resources(self)
        self.gates = self.node.find_child("Probes")
        key = jsonata("$states.input.key")
        park = cdk.Duration.seconds(PARK_TIMEOUT_S)
        common = dict(table=self.locks, key_namespace="rw", max_wait=cdk.Duration.seconds(150),
                      timeout=cdk.Duration.minutes(4), logging=False, tracing=False)
        machines = []
        for name, lock, role in (("Reader", Lock.shared(key, park_timeout=park), "read"),
                                 ("Writer", Lock.exclusive(key, park_timeout=park), "write")):
            machines.append(LockedWorkflow(self, name, lock=lock, protected=self.probe(f"{name}Probe", role), **common))
            # the same, holding until the test opens its gate: the hold ends when the test says (its
            # grace: the probe Lambda's Init + timeout + 5 s; the gate is a callback, over at the stop)
            held = self.gate(f"{name}Gate").next(self.probe(f"{name}HoldProbe", role))
            holder = LockedWorkflow(self, f"{name}Hold", lock=lock, protected=held,
                                    **{**common, "stop_grace": cdk.Duration.seconds(PROBE_GRACE_S)})
            self.gates.grant_write_data(holder.state_machine)
            machines.append(holder)
        # a reader that gives up after 3 s (Lock.Timeout; its row is marked left and skipped)
        machines.append(LockedWorkflow(self, "ReaderImpatient", lock=Lock.shared(key, park_timeout=park),
                                       protected=self.probe("ImpatientProbe", "read"),
                                       **{**common, "max_wait": cdk.Duration.seconds(3)}))
        # the same, a writer (a claim on leave of either kind)
        machines.append(LockedWorkflow(self, "WriterImpatient", lock=Lock.exclusive(key, park_timeout=park),
                                       protected=self.probe("ImpatientWriterProbe", "write"),
                                       **{**common, "max_wait": cdk.Duration.seconds(3)}))
        # a writer whose fallback asks nobody whether a holder still runs (liveness_check_every=0):
        # the negative control of the liveness check
        machines.append(LockedWorkflow(self, "WriterBlind", lock=Lock.exclusive(key, park_timeout=park),
                                       protected=self.probe("BlindProbe", "write"), liveness_check_every=0, **common))
        # a plain mutex on the same keys: a writer to the readers
        machines.append(LockedWorkflow(self, "Mutex", lock=Lock.mutex(key), protected=self.probe("MutexProbe", "write"),
                                       wait_policy=FAST, **common))
        # a gated reader with a short lease and no janitor: stopped, only its lease frees the key
        orphan = LockedWorkflow(self, "ReaderOrphan", lock=Lock.shared(key, park_timeout=park), janitor=False,
                                protected=self.gate("OrphanGate").next(self.probe("OrphanProbe", "read")),
                                lease=SHORT_LEASE, **common)
        self.gates.grant_write_data(orphan.state_machine)
        machines.append(orphan)
        # a reader or writer section in one branch of a Parallel whose other branch fails when the
        # test says; the user catches the failure and the execution goes on RUNNING: the section's
        # branch is cancelled (no Catch, no status event). A 10-minute lease: with its presence
        # the hold ends a stop grace after a waiter's probe finds it gone; without
        # (detect_cancellation=False, the negative control), only at the lease
        from locked_workflow import LockedSection

        extra = []
        for name, factory, role, detect in (("CancelledReader", Lock.shared, "read", True),
                                            ("CancelledWriter", Lock.exclusive, "write", True),
                                            ("CancelledReaderBlind", Lock.shared, "read", False),
                                            ("CancelledWriterBlind", Lock.exclusive, "write", False)):
            section = LockedSection(self, name, lock=factory(key, park_timeout=park), table=self.locks,
                                    key_namespace="rw", lease=cdk.Duration.minutes(10),
                                    max_wait=cdk.Duration.seconds(150), detect_cancellation=detect,
                                    stop_grace=cdk.Duration.seconds(PROBE_GRACE_S),
                                    protected=self.gate(f"{name}Gate").next(self.probe(f"{name}Probe", role)))
            both = sfn.Parallel.jsonata(self, f"{name}AndSibling").branch(section).branch(
                self.gate(f"{name}SiblingGate"))
            both.add_catch(sfn.Wait.jsonata(self, f"{name}StillRunning",
                                            time=sfn.WaitTime.duration(cdk.Duration.seconds(200))),
                           errors=["States.ALL"])
            cancelled = sfn.StateMachine(self, f"{name}StateMachine",
                                         definition_body=sfn.DefinitionBody.from_chainable(both),
                                         query_language=sfn.QueryLanguage.JSONATA, timeout=cdk.Duration.minutes(4))
            self.gates.grant_write_data(cancelled)
            extra.append(cancelled)
        # a Map of writer sections / of reader sections on one key in one execution (each item:
        # {key, gate}): iterations are separate holders - writers one at a time, readers together
        for name, map_lock, role in (("MapWriters", Lock.exclusive(key, park_timeout=park), "write"),
                                     ("MapReaders", Lock.shared(key, park_timeout=park), "read")):
            iteration = LockedSection(self, f"{name}Section", lock=map_lock, table=self.locks, key_namespace="rw",
                                      lease=cdk.Duration.minutes(10), max_wait=cdk.Duration.seconds(150),
                                      stop_grace=cdk.Duration.seconds(PROBE_GRACE_S),
                                      protected=self.gate(f"{name}Gate").next(self.probe(f"{name}Probe", role)))
            each = sfn.Map.jsonata(self, f"{name}Map", items=sfn.ProvideItems.jsonata("{% $states.input.items %}"))
            each.item_processor(iteration)
            mapped = sfn.StateMachine(self, f"{name}StateMachine", definition_body=sfn.DefinitionBody.from_chainable(each),
                                      query_language=sfn.QueryLanguage.JSONATA, timeout=cdk.Duration.minutes(4))
            self.gates.grant_write_data(mapped)
            iteration.recover_stale_holders(mapped)  # a stopped run: its holds retired, their presence rows deleted
        # the negative control: the same readers and writers with no lock
        for name, role in (("UnlockedReader", "read"), ("UnlockedWriter", "write")):
            sfn.StateMachine(self, name, state_machine_name=name,
                             definition_body=sfn.DefinitionBody.from_chainable(self.probe(f"{name}Probe", role, fence=False)),
                             query_language=sfn.QueryLanguage.JSONATA, timeout=cdk.Duration.minutes(3))
        names = [m.state_machine_name for m in machines] + [m.state_machine_name for m in extra]
        for m in machines:
            m.section.grant_liveness_check(m.state_machine, *names)

    def gate(self, construct_id: str) -> sfn.CustomState:
        """Park until the test completes (or fails) the task token stored under
        ``gate#<key>#<gate>`` (``*SiblingGate``: ``gate#<key>#sibling``)."""
        return token_gate(self, construct_id, table=self.gates, timeout_s=200, pk=(
            "'gate#' & $states.input.key & '#' & "
            + ("'sibling'" if construct_id.endswith("SiblingGate") else "$states.input.gate")))

    def probe(self, construct_id: str, role: str, fence: bool = True) -> tasks.LambdaInvoke:
        return tasks.LambdaInvoke.jsonata(
            self, construct_id, lambda_function=self.probe_fn,
            payload=sfn.TaskInput.from_object({
                "key": jsonata("$states.input.key"), "fence": jsonata("$lock.fence" if fence else "null"),
                "role": role, "workMs": jsonata("$states.input.workMs"),
            }),
            outputs=jsonata("$merge([$states.input, {'probe': $states.result.Payload}])"),
            retry_on_service_exceptions=False,
        )
