"""Monitored locked workflows sharing one lock table (one synth per test session): two
mutexes (below) and, in :class:`KindsStack`, every other kind and a nested section.

* ``Instant`` gives up at once (``max_wait`` 0: ``Lock.Timeout``) and holds a 1-second lease,
  so a run whose work outlasts it can be taken over (``Lock.Lost``); monitored with defaults.
* ``Patient`` waits, checks the holder's liveness every round and has no stop grace, so it
  takes over from a stopped holder within a round; monitored without alarms or dashboard.

The protected work is a Wait of ``$states.input.seconds`` seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb, aws_stepfunctions as sfn
from aws_cdk.assertions import Template
from constructs import Construct

from locked_workflow import Lock, LockedSection, LockedWorkflow, LockTable, WaitPolicy
from locked_workflow.constructs_lib.monitoring import LockMonitoring
from locked_workflow.state_machines.lock_protocol import jsonata
from locked_workflow.testing.synth import Synthesized
from safety_stack import token_gate

#: One whole-second round per poll, a liveness check every round.
PATIENT_POLICY = WaitPolicy(first_interval=1, backoff_rate=1.0, max_interval=1, jitter=False, retries_per_round=0)
INSTANT_LEASE_S = 1


class MonitoringStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.locks = LockTable(self, "Locks", removal_policy=cdk.RemovalPolicy.DESTROY)
        self.instant = self.workflow(
            "Instant", max_wait=cdk.Duration.seconds(0), lease=cdk.Duration.seconds(INSTANT_LEASE_S)
        )
        self.patient = self.workflow(
            "Patient", max_wait=cdk.Duration.seconds(60), wait_policy=PATIENT_POLICY, liveness_check_every=1
        )
        self.instant_monitoring = LockMonitoring(self, "InstantMonitoring", workflow=self.instant)
        self.patient_monitoring = LockMonitoring(
            self, "PatientMonitoring", workflow=self.patient,
            alarm_lost=False, timeout_rate_threshold=None, dashboard=False,
        )

    def workflow(self, name: str, **props) -> LockedWorkflow:
        work = sfn.CustomState(
            self, f"{name}Work",
            state_json={"Type": "Wait", "QueryLanguage": "JSONata", "Seconds": "{% $states.input.seconds %}"},
        )
        return LockedWorkflow(
            self, name,
            lock=Lock.mutex(jsonata("$states.input.id")), key_namespace=name.lower(),
            protected=work,
            table=self.locks.table,
            stop_grace=cdk.Duration.seconds(0),
            timeout=cdk.Duration.minutes(5),
            **props,
        )


#: Workflows of every other lock kind, and a section nested in a mutex: each gives up at once
#: (``max_wait`` 0: ``Lock.Timeout``), and its work waits at a gate the test opens (a task
#: token kept in the ``Gates`` table under ``$states.input.run``), so a run holds its lock for
#: exactly as long as the test needs - never for a guessed number of seconds.
KINDS = ("Fair", "Semaphore", "Keys", "Record", "Nested", "Shared", "Exclusive")
SEMAPHORE_LIMIT = 2
#: The semaphore's sweep: the run that must give up takes this long.
SEMAPHORE_MAX_WAIT_S = 10
KEYS_LEASE_S = 1


class KindsStack(MonitoringStack):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.gates = dynamodb.Table(
            self, "Gates", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST, removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        self.records = dynamodb.Table(
            self, "Records", partition_key=dynamodb.Attribute(name="id", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST, removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        at_once = dict(max_wait=cdk.Duration.seconds(0), stop_grace=cdk.Duration.seconds(0),
                       timeout=cdk.Duration.minutes(5))
        key = jsonata("$states.input.id")
        self.kinds = {
            "Fair": LockedWorkflow(self, "Fair", lock=Lock.fair(key), key_namespace="fair", table=self.locks.table, protected=self.gate("Fair"), **at_once),
            # with max_wait 0 an acquisition tries one slot (drawn at random) and may give up with
            # the other free: the semaphore sweeps its slots for up to 10 s. The second holder
            # may find the first in its slot and must get to its next attempt (1 s later) within
            # that: a loaded CI machine once took longer than a 2 s budget allowed.
            "Semaphore": LockedWorkflow(self, "Semaphore", lock=Lock.semaphore(key, limit=SEMAPHORE_LIMIT), key_namespace="sem",
                                        table=self.locks.table,
                                        protected=self.gate("Semaphore"),
                                        **{**at_once, "max_wait": cdk.Duration.seconds(SEMAPHORE_MAX_WAIT_S),
                                           "wait_policy": PATIENT_POLICY}),
            # a key refused at the release counts as lost only once the lease has ended (before,
            # no one could have taken it): a 1-second lease, and a key held by a client for the
            # run that must give up
            "Keys": LockedWorkflow(self, "Keys", lock=Lock.keys(jsonata("[$states.input.id, $states.input.other]")), key_namespace="keys", table=self.locks.table, protected=self.gate("Keys"),
                                   **{**at_once, "lease": cdk.Duration.seconds(KEYS_LEASE_S)}),
            "Record": LockedWorkflow(self, "Record", lock=Lock.on_record(self.records, key, must_exist=False), protected=self.gate("Record"), **at_once),
            # the workflow's own section ("Lock") waits; the section nested in its work gives up
            "Nested": LockedWorkflow(
                self, "Nested", lock=Lock.mutex(jsonata("$states.input.outer")), key_namespace="outer",
                table=self.locks.table, stop_grace=cdk.Duration.seconds(0), timeout=cdk.Duration.minutes(5),
                protected=LockedSection(
                    self, "Inner", lock=Lock.mutex(key), key_namespace="inner", table=self.locks.table,
                    lock_variable="innerLock", max_wait=cdk.Duration.seconds(0), lease=cdk.Duration.minutes(6),
                    stop_grace=cdk.Duration.seconds(0), protected=self.gate("Nested"),
                ),
            ),
            # the read/write lock's reader and writer (the reader gives up at a key a client holds)
            "Shared": LockedWorkflow(self, "Shared", lock=Lock.shared(key), key_namespace="rw", table=self.locks.table,
                                     protected=self.gate("Shared"), **at_once),
            "Exclusive": LockedWorkflow(self, "Exclusive", lock=Lock.exclusive(key), key_namespace="rw",
                                        table=self.locks.table, protected=self.gate("Exclusive"), **at_once),
        }
        self.kind_monitoring = {name: LockMonitoring(self, f"{name}Monitoring", workflow=workflow, dashboard=False)
                                for name, workflow in self.kinds.items()}
        for workflow in self.kinds.values():
            self.gates.grant_write_data(workflow.state_machine)

    def gate(self, name: str) -> sfn.CustomState:
        return token_gate(self, f"{name}Gate", table=self.gates, pk="$states.input.run")


@dataclass
class Synth:
    """:class:`KindsStack` synthesized (the ``synth`` fixture of ``conftest.py``): the stack, its
    template, its cloud assembly, cdk-nag's messages, and each monitoring's patterns."""

    stack: KindsStack
    template: Template
    synthesized: Synthesized
    messages: list

    def pattern(self, monitoring: str, metric: str) -> str:
        return self.monitoring(monitoring).filter_patterns[metric].log_pattern_string

    def subscription(self, monitoring: str) -> str:
        return self.monitoring(monitoring).subscription_pattern.log_pattern_string

    def monitoring(self, name: str) -> LockMonitoring:
        """``instant_monitoring``, ``patient_monitoring``, or a kind's (``Fair``, ``Nested``...)."""
        return self.stack.kind_monitoring[name] if name in KINDS else getattr(self.stack, name)
