"""How a cell's participants run: a workflow execution started, waited for and redriven; a
:class:`LockClient` acquiring, working through the probe and releasing; the waits on a
participant's progress (inside its work, parked) and its stop."""

from __future__ import annotations

import json
import threading
import time
import traceback
import uuid
from typing import Any

from botocore.exceptions import ClientError

from locked_workflow.constructs_lib.lock_client import LockClient, LockError, LockHeld, LockLost, LockTimeout
from locked_workflow.state_machines import errors
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import lock_protocol as protocol
from tools.matrix.roles import (APP_RETRIED, CLIENT_LEASE_S, HARD_CAP_S, LEASE_RAN_OUT, NAMESPACE,
                                Participant, now_ms)
from tools.matrix.stack import PARK_TIMEOUT_S
from tools.rate_checks import admission_stamps

#: The error a situation's stop gives an execution.
STOPPED = "Matrix.Stop"


class Running:
    """The running half of :class:`tools.matrix.cells.Cell` (its ``participants``, ``cloud``,
    ``tables``, ``id``, ``key``; :meth:`ended` and :meth:`owns` are the cell's)."""

    def start(self, p: Participant) -> threading.Thread:
        target = self._client if p.is_client else self._execution
        p.thread = f"matrix:{self.id}:{p.role}:{self.participants.index(p)}"
        thread = threading.Thread(target=self._guarded, args=(target, p), name=p.thread, daemon=True)
        p.started_ms = now_ms()
        thread.start()
        return thread

    def _guarded(self, target: Any, p: Participant) -> None:
        try:
            target(p)
        except Exception as error:  # noqa: BLE001 - judged as the participant's outcome
            where = traceback.extract_tb(error.__traceback__)[-1]
            p.status, p.error = "FAILED", f"matrix error {type(error).__name__}"
            p.cause = f"{str(error)[:300]} (at {where.filename.rpartition('/')[2]}:{where.lineno} {where.name})"
        p.ended_ms = p.ended_ms or now_ms()

    def _machine_arn(self, role: str) -> str:
        name = "Unlocked" if self.lock_off and role not in ("Record", "Transfer", "TransferSection") else role
        return f"arn:aws:states:{self.cloud.region}:{self.cloud.account_id}:stateMachine:{name}"

    def _execution(self, p: Participant) -> None:
        cloud = self.cloud
        index = self.participants.index(p)
        p.arn = cloud.start_execution(self._machine_arn(p.role), p.document, name=f"{self.id}-{index}-{uuid.uuid4().hex[:8]}")
        result = cloud.wait_for(p.arn, timeout=HARD_CAP_S)
        while p.redrive and result.status in ("ABORTED", "FAILED", "TIMED_OUT"):
            p.redrive = False
            try:
                cloud.stepfunctions.redrive_execution(executionArn=p.arn)
            except ClientError as refused:
                p.cause = f"redrive refused: {refused.response['Error']['Code']}"
                break
            p.redriven, p.redriven_ms, p.stopped, p.timed_out = True, now_ms(), False, False
            time.sleep(0.5)  # (the status reads RUNNING again at once; its end comes later)
            result = cloud.wait_for(p.arn, timeout=HARD_CAP_S)
        self.ended(p)
        history = result.history
        p.status, p.error, p.cause = result.status, result.error, result.cause or p.cause
        p.entered_ms = [int(e["timestamp"].timestamp() * 1000) for e in history
                        if (e["type"] == "TaskScheduled" and e["taskScheduledEventDetails"].get("resourceType") == "lambda")
                        or (e["type"] == "WaitStateEntered" and e["stateEnteredEventDetails"]["name"].endswith("Hold"))]
        p.admitted_ms = admission_stamps(history) if p.role.startswith("Rate") else []
        ends = [e for e in history if e["type"] in ("ExecutionSucceeded", "ExecutionFailed", "ExecutionAborted",
                                                     "ExecutionTimedOut")]
        p.ended_ms = int(ends[-1]["timestamp"].timestamp() * 1000) if ends else now_ms()
        from tools.stress import trail

        p.trail = trail(history)

    def _client(self, p: Participant) -> None:
        mode = p.role.removeprefix("client-")
        client = LockClient(self.tables["locks"], namespace=NAMESPACE[p.role], dynamodb=self.cloud.dynamodb,
                            stepfunctions=self.cloud.stepfunctions, claim_window=PARK_TIMEOUT_S,
                            kind=(LockClient.FAIR if mode == "fair" else LockClient.READ_WRITE if mode.startswith("rw")
                                  else LockClient.MUTEX))
        owner = p.owner = f"matrix{uuid.uuid4().hex[:12]}"
        shared = mode == "rw-read"
        deadline = time.monotonic() + self.client_wait_s
        lease = None
        lambda_client = self.cloud.client("lambda")
        released_error: ClientError | None = None
        work_error: str | None = None
        retried = False  # the app retried the acquire after a transient error
        while True:
            try:
                if lease is None:
                    lease = client.acquire(self.key, owner=owner, lease=CLIENT_LEASE_S, shared=shared,
                                           wait=max(0.0, deadline - time.monotonic()), max_poll_interval=1.0)
                    p.entered_ms.append(now_ms())
                    payload = {"key": self.key, "workMs": p.document["workMs"], "fail": p.document["fail"],
                               "fence": lease.fence, "role": "read" if shared else "write"}
                    response = lambda_client.invoke(FunctionName=self.probe_function, Payload=json.dumps(payload).encode())
                    body = response["Payload"].read()
                    if response.get("FunctionError"):
                        work_error = json.loads(body).get("errorType", "Unknown")
                        if work_error == errors.LAMBDA_TIMED_OUT:  # its handler runs on: wait until it is out
                            self._wait_probe_left()
                client.release(lease)
                p.status, p.error = ("FAILED", work_error) if work_error else ("SUCCEEDED", None)
                return
            except LockLost as lost:
                if released_error is not None and released_error.response["Error"]["Code"] == "InternalServerError":
                    p.status, p.error = ("FAILED", work_error) if work_error else ("SUCCEEDED", None)
                    return
                # (counted from the write that took the lock: ``acquire`` may return seconds
                # later on a loaded machine, so its return is too late a start)
                taken_ms = lease.acquired_at if lease is not None else p.entered_ms[-1] if p.entered_ms else None
                if taken_ms is not None and now_ms() - taken_ms > CLIENT_LEASE_S * 1000:
                    p.status, p.error, p.cause = "FAILED", LEASE_RAN_OUT, str(lost)[:300]
                    return
                raise
            except LockHeld as held:
                # (LockTimeout; or the app's retry of an acquire whose wait was spent - its give-up
                # met a transient error - which ``acquire(wait=0)`` answers with LockHeld: timed out)
                if isinstance(held, LockTimeout) or (retried and type(held) is LockHeld and time.monotonic() >= deadline):
                    p.status, p.error = "FAILED", errors.ERROR_TIMEOUT
                else:
                    p.status, p.error, p.cause = "FAILED", type(held).__name__, str(held)[:300]
                return
            except LockError as error:
                p.status, p.error, p.cause = "FAILED", type(error).__name__, str(error)[:300]
                return
            except ClientError as error:
                if p.crashed:
                    p.status = "CRASHED"
                    return
                code = error.response["Error"]["Code"]
                if code not in APP_RETRIED or time.monotonic() > deadline + 60:
                    p.status, p.error, p.cause = "FAILED", f"raw {code}", str(error)[:300]
                    return
                if lease is not None:
                    released_error = error
                retried = True
                time.sleep(0.2)

    def _wait_probe_left(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            item = self.cloud.dynamodb.get_item(TableName=self.tables["probes"], Key={"pk": {"S": self.key}},
                                                ConsistentRead=True).get("Item", {})
            if int(item.get("inside", {}).get("N", "0")) <= 0:
                return
            time.sleep(0.1)

    def wait_inside(self, p: Participant, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if p.entered_ms or p.status:
                return
            if p.arn:
                status = self.cloud.status(p.arn)
                if status != "RUNNING":
                    return
                history = self.cloud.history(p.arn)
                if any((e["type"] == "TaskScheduled" and e["taskScheduledEventDetails"].get("resourceType") == "lambda")
                       or (e["type"] == "WaitStateEntered" and e["stateEnteredEventDetails"]["name"].endswith("Hold"))
                       for e in history):
                    return
            time.sleep(0.2)

    def wait_parked(self, p: Participant, timeout_s: float = 30) -> None:
        """Until the workflow ``p`` has parked (a queue row of the cell's keys holds its task
        token), has ended, or has entered its work (it never queued): a fixed 1.2 s let a
        loaded machine stop it before it parked, so the janitor had no park to recover and the
        cell's row was never called. A client: 1.2 s."""
        if p.is_client:
            time.sleep(1.2)
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if p.arn:
                if self.cloud.status(p.arn) != "RUNNING" or any(
                        fair.TOKEN in item and item.get(protocol.OWNER, {}).get("S", "").startswith(
                            p.arn + protocol.OWNER_SEPARATOR) for item in self.items()):
                    return
                if any(e["type"] == "TaskScheduled" and e["taskScheduledEventDetails"].get("resourceType") == "lambda"
                       for e in self.cloud.history(p.arn)):
                    return
            time.sleep(0.2)

    def stop(self, p: Participant, *, redrive: bool = False) -> None:
        deadline = time.monotonic() + 30
        while not p.arn and time.monotonic() < deadline:
            time.sleep(0.05)
        if p.is_client or not p.arn or self.cloud.status(p.arn) != "RUNNING":
            return
        p.stopped, p.redrive = True, p.redrive or redrive
        self.ended(p)
        p.held_at_end = self.owns(p)
        self.cloud.stop_execution(p.arn, error=STOPPED, cause="stopped by the fault matrix's situation")

