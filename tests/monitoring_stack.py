"""Two monitored locked workflows sharing one lock table (one synth per test session).

* ``Instant`` gives up at once (``max_wait`` 0: ``Lock.Timeout``) and holds a 1-second lease,
  so a run whose work outlasts it can be taken over (``Lock.Lost``); monitored with defaults.
* ``Patient`` waits, checks the holder's liveness every round and has no stop grace, so it
  takes over from a stopped holder within a round; monitored without alarms or dashboard.

The protected work is a Wait of ``$states.input.seconds`` seconds.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from constructs_lib import LockedWorkflow, LockTable, WaitPolicy
from constructs_lib.monitoring import LockMonitoring
from state_machines.lock_protocol import jsonata

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
            lock_key=jsonata("$states.input.id"),
            key_namespace=name.lower(),
            protected=work,
            table=self.locks.table,
            stop_grace=cdk.Duration.seconds(0),
            timeout=cdk.Duration.minutes(5),
            **props,
        )
