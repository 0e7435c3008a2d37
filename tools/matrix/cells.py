"""One cell of the fault matrix: two to five participants on the cell's own key(s), the
fault placed at the cell's row, the lock's invariants checked (:mod:`tools.matrix.judge`).

A cell's participants mix what can share its key (:data:`PARTICIPANTS`): mutex workflows
and a mutex client; a reader, a writer and a mutex on a read/write key (and a read/write
client); fair workflows and a fair client; more semaphore holders than slots; transfers on
overlapping pairs of keys; runs on one record. Its situation (:mod:`tools.matrix.table`)
brings them into the row's state; the fault (:mod:`locked_workflow.testing.faults`) hits the
first call of that state made by one of the cell's executions - :func:`faults.calling_state`
names the state and the execution - or, for a client's or the janitor's row, the first such
call of the cell's client or of the janitor on the cell's keys. "Then" (stop, time out,
stop then redrive) acts on the execution that made the call; a client "stopped" right after
its call crashes there (it never calls again, its lock is left to its lease).

The participants and their timings: :mod:`tools.matrix.roles`; how they run:
:mod:`tools.matrix.running`; the order of two calls placed by ``gate:``: :mod:`tools.matrix.gate`.
"""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any

from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.testing.faults import Fault, FaultRegistry, calling_state
from tools.matrix import paths
from tools.matrix import rows as matrix_rows
from tools.matrix.gate import GATE_S, Gate, index_of
from tools.matrix.judge import Judging
from tools.matrix.roles import (CONTEND_ARRIVAL_S, CONTEND_HOLD_MS, HARD_CAP_S, HOLD_MS, HOLDING, JANITOR_SCENES,
                                CLIENT_WAIT_S, LONG_HOLD_MS, PARTICIPANTS, SITUATION_PARTICIPANTS, WORK_MS, CellResult,
                                Participant, now_ms)
from tools.matrix.rows import Row
from tools.matrix.running import STOPPED, Running
from tools.matrix.stack import RECORD_KEY
from tools.matrix.table import CLIENT_KINDS, COLUMN, SITUATIONS, Column, situation

#: (machine, state) -> its row, read from the deployed definition (a preparatory fault's call).
_STATE_ROWS: dict[tuple[str, str], Row] = {}
_STATE_ROWS_GUARD = threading.Lock()


def _state_row(cloud: Any, machine_arn: str, machine: str, state: str) -> Row:
    with _STATE_ROWS_GUARD:
        if (machine, state) not in _STATE_ROWS:
            definition = json.loads(cloud.stepfunctions.describe_state_machine(stateMachineArn=machine_arn)["definition"])
            for found in matrix_rows.task_rows(machine, definition):
                _STATE_ROWS[(machine, found.state)] = found
        if (machine, state) not in _STATE_ROWS:
            raise ValueError(f"`state` must be a Task of {machine} that calls DynamoDB or Step Functions, got: {state}")
        return _STATE_ROWS[(machine, state)]

#: The rows of the clients' and the janitor's calls.
_LISTED = {(row.kind, row.state) for row in matrix_rows.CLIENT_CALLS + matrix_rows.JANITOR_CALLS}


def time_out(cloud: Any, execution_arn: str) -> None:
    """End a running local execution TIMED_OUT now, as its ``TimeoutSeconds`` would: what the
    interpreter does at the deadline (``Environment.set_timed_out``), then the end recorded at
    once (as the runtime's ``patches/execution_end`` does for a stop; the state in flight runs
    on, its events dropped)."""
    worker = cloud.moto_execution(execution_arn).exec_worker
    worker.env.set_timed_out()
    worker._execution_communication.terminated()



class Cell(Judging, Running):
    """One (row, column) on its own keys, run by :meth:`run` on a deployed matrix stack."""

    def __init__(self, cloud: Any, app: Any, registry: FaultRegistry, row: Row, column: Column, cell_id: str, *,
                 seed: int, lock_off: bool = False, situation_override: str = "", witness: bool = False) -> None:
        self.cloud, self.app, self.registry = cloud, app, registry
        #: ``witness``: the row's call is only counted, not faulted (:meth:`run`): does the
        #: situation, fault-free but for its preparatory faults, make the row's call at all?
        self.witness = witness
        self.row, self.column, self.id = row, column, cell_id
        self.rng = random.Random(seed)
        self.lock_off = lock_off  # the negative control: every workflow participant runs unlocked
        self.situation = situation_override or situation(row) or "contend"
        roles = PARTICIPANTS[row.kind] if row.kind in PARTICIPANTS else None
        if row.kind == "janitor" and not situation_override and row.state not in SITUATIONS.get("janitor", {}):
            roles, self.situation = JANITOR_SCENES.get(row.state, (PARTICIPANTS["mutex"], "dead-holder"))
        parts = self.situation.split("+")
        self._machine = ""
        #: preparatory faults, each ``(machine or "", state, column name[, times])``: ``after-lost:<state>``
        #: (its response lost first: its retry is the row) and ``pre:[<machine>/]<state>=<column>``
        self.prepared: list[tuple] = []
        #: ``gate:[<index>/]<state>@<other state>``: the order of two participants' calls, placed
        #: rather than timed (:class:`Gate`)
        self.gates: list[Gate] = []
        #: when a gate held a call (start, end; ms): the harness's pause, not the lock's wait -
        #: the judge's ``blocked`` bound counts it (:func:`tools.matrix.judge.blocked`)
        self.gate_holds: list[tuple[int, int]] = []
        #: ``holds-long:<i>[,<j>...]``: these participants' works last :data:`LONG_HOLD_MS`, so
        #: those behind them wait for rounds (a semaphore's other slots held while one's holder
        #: is dead: the waiters' liveness check)
        self.long_holders: set[int] = set()
        #: ``faults-by:<i>``: the preparatory faults (``pre:``, ``after-lost:``, ``reach``) hit only
        #: participant ``i``'s calls (a park failing through its Retry: one waiter's, not spread)
        self.faults_by: int | None = None
        #: ``stop:<k>@<i>/<state>``: participant ``k`` stopped once the first call of ``<state>`` by
        #: participant ``i`` returned (before a gate holds its response): a holder alive when a
        #: waiter described it, ended when the next waiter does
        self.stops: list[tuple[int, int, str]] = []
        #: ``client-waits:<s>``: the client participants' ``wait`` (default :data:`CLIENT_WAIT_S`):
        #: shorter than a hold, a client gives up its queue place (``LockClient.leave_queue``)
        self.client_wait_s: float = CLIENT_WAIT_S
        for part in parts:
            if part.startswith("after-lost:"):
                self.prepared.append(("", part.partition(":")[2], "lost"))
            elif part.startswith("with:"):  # the participants, by role
                roles = part[5:].split(",")
            elif part.startswith("as:"):  # the row's state run by another machine of the same definition
                self._machine = part[3:]
            elif part.startswith("stop-others-at:"):  # the others stopped as <state>'s call fails
                self.prepared.append(("", part.partition(":")[2], "stop-others"))
            elif part.startswith("gate:"):  # a participant's call held until another's call is done
                self.gates.append(Gate.parse(part[5:]))
            elif part.startswith("holds-long:"):  # these participants hold the lock LONG_HOLD_MS
                self.long_holders = {int(i) for i in part.partition(":")[2].split(",")}
            elif part.startswith("stop:"):  # stop:<k>@<i>/<state>: k stopped once i's call of <state> returned
                who, _, where = part[5:].partition("@")
                on, _, name = where.partition("/")
                self.stops.append((int(who), int(on), name))
            elif part.startswith("client-waits:"):  # the clients give up after this many seconds
                self.client_wait_s = float(part.partition(":")[2])
            elif part.startswith("faults-by:"):  # the preparatory faults hit only this participant's calls
                self.faults_by = int(part.partition(":")[2])
            elif part.startswith("pre:"):  # pre:[<machine>/]<state>=<column>[*<times>]
                where, _, column = part[4:].partition("=")
                machine, _, state = where.rpartition("/")
                column, _, times = column.partition("*")
                self.prepared.append((machine, state, column, int(times or 1)))
        #: ``reach``: the faults that take the Catch edges on the way to the row's state
        #: (:func:`tools.matrix.paths.preparatory_faults`), added to :attr:`prepared` at :meth:`run`
        self.reach = "reach" in parts
        self.outlasting: list[Fault] = []
        #: ``no-janitor``: the janitor cannot read an ended execution's history (it fails, as
        #: when its retries ran out): the waiters' own liveness checks take over
        self.no_janitor = "no-janitor" in parts
        self.base = next((part for part in parts if not part.startswith(("after-lost:", "pre:", "with:", "as:",
                                                                          "stop-others-at:", "gate:", "holds-long:", "faults-by:", "stop:",
                                                                          "client-waits:"))
                          and part not in ("no-janitor", "reach", "waiter-dies", "queued")), "contend")
        #: ``queued``: the first participant holds twice as long (its work), so the others have
        #: queued and parked when its release runs (a handoff to a parked waiter, not a mark)
        self.queued = "queued" in parts
        #: ``waiter-dies``: as in ``dead-waiter``, the second participant is stopped once it parked
        #: (with a ``dead-holder``: a dead head of the queue behind a dead holder)
        self.waiter_dies = self.base == "dead-waiter" or "waiter-dies" in parts
        if not any(part.startswith("with:") for part in parts):
            roles = SITUATION_PARTICIPANTS.get((row.kind, self.base), roles)
        self.key = cell_id
        self.participants = [Participant(role, self._document(role, index)) for index, role in enumerate(roles)]
        self.unlisted: list[str] = []
        self.tables = {name: next(v for k, v in app.resources.items() if k.startswith(prefix))
                       for name, prefix in (("locks", "LocksTable"), ("probes", "Probes"), ("records", "Records"))}
        self.probe_function = app.function_name("Probe")

    # -- the scenario ---------------------------------------------------------------------------

    def _document(self, role: str, index: int) -> dict:
        hold = (self.base in HOLDING or self.waiter_dies) and index == 0
        work = LONG_HOLD_MS if index in self.long_holders else 2 * HOLD_MS if self.queued and index == 0 else \
            HOLD_MS if hold else \
            CONTEND_HOLD_MS if index == 0 else self.rng.randint(*WORK_MS)
        fail = self.base == "work-fails" and index == 0
        if role.startswith("Transfer"):  # overlapping pairs: (a, b), (b, c), (b, a)
            pair = [("a", "b"), ("b", "c"), ("b", "a")][index % 3]
            return {"from": self.key + pair[0], "to": self.key + pair[1], "workMs": work, "fail": fail}
        if role == "Record":
            return {"key": self.key, "waitS": 3 if hold else 1 if index == 0 else 0}
        if role == "Nested" and self.row.state.startswith("Inner."):  # the inner section on a key of its own
            # (a second Nested: an outer key of its own, so the two meet at the inner section)
            # (its work fails in the inner section: the outer one's work went well)
            return {"key": self.key + (f"o{index}" if index else ""), "innerKey": self.key + "i", "workMs": work,
                    "fail": False, "innerFail": fail}
        return {"key": self.key, "workMs": work, "fail": fail}

    @property
    def probe_keys(self) -> list[str]:
        if self.row.kind == "record" or all(p.role == "Record" for p in self.participants):
            return []
        if any(p.role.startswith("Transfer") for p in self.participants):
            return [self.key + suffix for suffix in "abc"]
        return list(dict.fromkeys([self.key] + [key for p in self.participants if "innerKey" in p.document
                                                for key in (p.document["key"], p.document["innerKey"])]))

    def _fault(self) -> Fault:
        row, column, cell = self.row, self.column, self

        def when(params: dict) -> bool:
            state = calling_state()
            if row.kind in CLIENT_KINDS:
                name = threading.current_thread().name
                return state is None and name.startswith(f"matrix:{cell.id}:{row.kind}") and \
                    matrix_rows.call_row(row.kind, row.operation, params) == row.state
            if row.kind == "janitor":
                name = threading.current_thread().name
                return state is None and name.startswith("lambda:") and "anitor" in name and \
                    cell.id in json.dumps(params) and matrix_rows.call_row(row.kind, row.operation, params) == row.state
            return state is not None and state.state_name == row.state and \
                f":execution:{cell.machine}:{cell.id}-" in state.execution_arn

        return Fault(row.operation, column.error_for(row), after_call=column.after_call, service=row.service,
                     when=when, then=self._then(column) if column.then else None)

    def _then(self, column: Column) -> Any:
        """What happens right after a call that ``column`` faults: the caller stopped, timed out
        or stopped for a redrive (a client: it crashes there)."""
        cell = self

        def then() -> None:
            state = calling_state()
            if state is None:  # a client crashes right after its call
                name = threading.current_thread().name
                for p in cell.participants:
                    if p.is_client and p.thread == name:
                        p.crashed = True
                        p.held_at_end = cell.owns(p)
                return
            p = next((p for p in cell.participants if p.arn == state.execution_arn), None)
            if p is None:
                return
            cell.ended(p)
            p.held_at_end = cell.owns(p)
            if column.then == "time out":
                p.timed_out = True
                time_out(cell.cloud, state.execution_arn)
            else:
                p.stopped, p.redrive = True, column.then == "stop, redrive"
                cell.cloud.stop_execution(state.execution_arn, error=STOPPED, cause="stopped by the fault matrix")

        return then

    def _reach(self) -> list[tuple[str, str, str, int]]:
        """The preparatory faults of ``reach``: each Catch edge a fault can take on the way to
        the row's state in its machine's deployed definition."""
        arn = f"arn:aws:states:{self.cloud.region}:{self.cloud.account_id}:stateMachine:{self.machine}"
        definition = json.loads(self.cloud.stepfunctions.describe_state_machine(stateMachineArn=arn)["definition"])
        return [(self.machine, task, column, times)
                for task, column, times in paths.preparatory_faults(definition, self.row.state)]

    def _prepared_fault(self, machine: str, state_name: str, column_name: str, times: int = 1) -> Fault:
        """A fault that brings the cell to its row: ``column_name``'s fault on the first call of
        ``state_name`` by an execution of ``machine`` (default: the row's) of this cell - a
        response lost first (the row is its retry), a wake-up that fails (the row is a later
        step of the handoff), a stop right after a call."""
        cell, machine = self, machine or self.machine
        arn = f"arn:aws:states:{self.cloud.region}:{self.cloud.account_id}:stateMachine:{machine}"
        row = _state_row(self.cloud, arn, machine, state_name)
        if column_name == "stop-others":  # the call fails before it applies, the others are stopped meanwhile
            column, then = COLUMN["5xx"], self._stop_others
        else:
            column = COLUMN[column_name]
            then = self._then(column) if column.then else None

        def when(params: dict) -> bool:
            state = calling_state()
            return state is not None and state.state_name == state_name and \
                f":execution:{machine}:{cell.id}-" in state.execution_arn and \
                cell.faults_by in (None, index_of(state.execution_arn))

        return Fault(row.operation, column.error_for(row), after_call=column.after_call, service=row.service,
                     when=when, then=then, times=times)

    def _stop_others(self) -> None:
        """Stop every other running execution of the cell (``stop-others-at:<state>``): e.g. a
        grantee stopped while its releaser's wake-up fails, so the janitor meets its grant."""
        state = calling_state()
        for p in self.participants:
            if not p.is_client and p.arn and (state is None or p.arn != state.execution_arn):
                self.stop(p)

    def _no_janitor(self) -> Fault:
        """The janitor's history reads of the cell's executions fail (``no-janitor``)."""
        cell = self

        def when(params: dict) -> bool:
            name = threading.current_thread().name
            return name.startswith("lambda:") and "anitor" in name and cell.id in params.get("executionArn", "")

        return Fault("GetExecutionHistory", "ServiceUnavailable", times=100, service="stepfunctions", when=when)

    @property
    def machine(self) -> str:
        from tools.matrix.stack import MACHINES

        return self._machine or MACHINES.get(self.row.kind, "")

    def run(self) -> CellResult:
        started = time.monotonic()
        if any(p.role == "Record" for p in self.participants):
            padding = 200 if self.base == "refused" else 1
            self.cloud.dynamodb.put_item(TableName=self.tables["records"], Item={
                RECORD_KEY: {"S": self.key}, "balance": {"N": "0"}, "padding": {"S": "p" * (padding * 1024 - 100)}})
        fault = self._fault() if self.witness else self.registry.add(self._fault())
        if self.witness:
            self.registry.observers.append(self._witness(fault))
        prepared = [self.registry.add(self._prepared_fault(*spec))
                    for spec in self.prepared + (self._reach() if self.reach else [])]
        #: preparatory faults that outlast their call's Retry (``reach``): the run fails with
        #: that error past its retries, as documented (after leaving its queue, or releasing)
        self.outlasting = [f for f in prepared if f.times > 1]
        if self.no_janitor:
            prepared.append(self.registry.add(self._no_janitor()))
        self.registry.observers.append(self._observe)
        gates = [(self._gate_hold, self._gate_open)] if self.gates or self.stops else []
        for hold, open_ in gates:
            self.registry.observers.append(hold)
            self.registry.completions.append(open_)
        threads = []
        try:
            first, others = self.participants[0], self.participants[1:]
            threads.append(self.start(first))
            if self.base in HOLDING or self.waiter_dies:
                self.wait_inside(first)
            if self.waiter_dies:
                waiter = others[0]
                threads.append(self.start(waiter))
                self.wait_parked(waiter)
                self.stop(waiter)
                others = others[1:]
            for p in others:
                threads.append(self.start(p))
                time.sleep(self.rng.uniform(0.0, CONTEND_ARRIVAL_S / max(1, len(others))))
            if self.base in ("dead-holder", "redrive"):
                time.sleep(0.8)
                self.stop(first, redrive=self.base == "redrive")
            for thread in threads:
                thread.join(HARD_CAP_S)
        finally:
            for hold, open_ in gates:
                self.registry.observers.remove(hold)
                self.registry.completions.remove(open_)
            for gate in self.gates:
                gate.done.set()
            self.registry.remove(fault)
            self.registry.observers[:] = [o for o in self.registry.observers if getattr(o, "witnessed", None) is not fault]
            for other in prepared:
                self.registry.remove(other)
        self.settle()
        self.registry.observers.remove(self._observe)
        violations = self.judge()
        return CellResult(self.row, self.column, self.id, self.situation, self.participants, fault.injected,
                          time.monotonic() - started, violations, self.unlisted)

    def _gate_hold(self, service: str, operation: str, params: dict) -> None:
        """Hold a gated call (in its execution's thread) until its gate opens (:class:`Gate`)."""
        state = calling_state()
        if state is None or f":{self.id}-" not in state.execution_arn:
            return
        index = index_of(state.execution_arn)
        for gate in self.gates:
            gate.arm(state.state_name, index)
        for gate in self.gates:
            if not gate.after_call and gate.takes(state.state_name, index):
                gate.held_arn = state.execution_arn
                self._wait_gate(gate)

    def _wait_gate(self, gate: Gate) -> None:
        """Hold the calling thread until ``gate`` opens (at most :data:`GATE_S`), noting how long."""
        began = now_ms()
        try:
            gate.done.wait(GATE_S)
        finally:
            self.gate_holds.append((began, now_ms()))

    def ended(self, p: Participant) -> None:
        """``p`` ended or was stopped: the gates waiting for a call of it open (it makes none now)."""
        index = self.participants.index(p)
        for gate in self.gates:
            if gate.after_index in (None, index):
                gate.done.set()

    def owns(self, p: Participant) -> bool:
        """Whether ``p`` owns a lock item of the cell now (read just before it is stopped, or
        right after the call its fault hit: it took the lock, a grant or a claim, even if it
        never entered its work). Read from a thread of its own: a call made in a state's thread
        would meet that state's faults and gates."""
        mark = p.owner if p.is_client else p.arn.rpartition(":")[2]
        found: list[bool] = []

        def read() -> None:
            found.append(bool(mark) and any(protocol.FENCE in item and mark in item.get(protocol.OWNER, {}).get("S", "")
                                            for item in self.items()))

        reader = threading.Thread(target=read, name=f"judge:{self.id}", daemon=True)
        reader.start()
        reader.join(30)
        return bool(found and found[0])

    def _gate_open(self, service: str, operation: str, params: dict) -> None:
        """Open the gates waiting for the call that just ended."""
        state = calling_state()
        if state is None or f":{self.id}-" not in state.execution_arn:
            return
        index = index_of(state.execution_arn)
        for stop in [stop for stop in self.stops if stop[1:] == (index, state.state_name)]:
            try:
                self.stops.remove(stop)
            except ValueError:
                continue  # (another call's thread took it)
            # (from a thread of its own: a call made in a state's thread meets its faults and gates)
            stopper = threading.Thread(target=self.stop, args=(self.participants[stop[0]],), name=f"judge:{self.id}",
                                       daemon=True)
            stopper.start()
            stopper.join(30)
        for gate in self.gates:
            if gate.opens(state.state_name, index, state.execution_arn):
                gate.done.set()
        for gate in self.gates:
            if gate.after_call and gate.takes(state.state_name, index):
                gate.held_arn = state.execution_arn
                self._wait_gate(gate)

    def _witness(self, fault: Fault) -> Any:
        """An observer counting (in ``fault.injected``) the calls ``fault`` would hit, letting them
        through: a witness run's ``ok`` says the row's call was made."""

        def observe(service: str, operation: str, params: dict) -> None:
            if (service, operation) == (fault.service, fault.operation) and fault.when(params):
                fault.injected += 1

        observe.witnessed = fault  # type: ignore[attr-defined]
        return observe

    def _observe(self, service: str, operation: str, params: dict) -> None:
        """Record the calls of the cell's clients and of the janitor on the cell's keys that
        have no row (``unlisted``)."""
        name = threading.current_thread().name
        if service not in ("dynamodb", "stepfunctions") or calling_state() is not None:
            return
        if name.startswith("lambda:") and "anitor" in name:
            kind = "janitor"
        else:
            kind = next((k for k in sorted(CLIENT_KINDS, key=len, reverse=True)
                         if name.startswith(f"matrix:{self.id}:{k}")), None)
        if kind is None or self.id not in json.dumps(params, default=str):
            return
        call = matrix_rows.call_row(kind, operation, params)
        if (kind, call) not in _LISTED:
            self.unlisted.append(f"{kind}: {operation} {call}")
