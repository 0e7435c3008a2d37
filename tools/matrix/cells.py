"""One cell of the fault matrix: two or three participants on the cell's own key(s), the
fault placed at the cell's row, the lock's invariants checked.

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

Invariants, every cell (each a list of violations, empty when it holds):

- ``alone``: the probe never finds more holders inside than the kind admits (readers and
  writers apart), at entry; a rate limit's admissions (their stamps, from the histories) never
  crowd a window of its period;
- ``lost update``: the probe's counter equals its accepted writes; a record's balance counts
  every run that succeeded (and at most those stopped besides);
- ``fences``: a key's fences at entry strictly increase (a section re-entering its own hold
  sees the same fence); no reader sees a write during its read or one newer than its fence
  (``overtakenReads``; a fence ahead of the last write is a writer that never wrote);
- ``outcome``: every participant ends as its kind documents (SUCCEEDED; its work's error;
  ``Lock.RecordTooLarge`` refused; ABORTED / TIMED_OUT when stopped / timed out and not
  redriven; a client's lock timeout; a client crashed by the fault; a 5xx that a ``reach``
  fault kept up past its call's Retry, the run failing with it as a section does with any
  error) - a raw injected error reaching a client (but the transient ones an application
  retries) or ending an execution is a violation;
- ``blocked``: after a participant ended abnormally (stopped, timed out, crashed), every
  other one still waiting enters or ends within its documented bound: the stop grace plus
  one liveness round (a polling waiter) or one park timeout (fair, read/write), or a
  client's lease, plus one hold (:data:`HOLD_MS`: a redriven holder holds again first) and
  :data:`SLACK_S` for a loaded machine, plus the holds of those that entered before it meanwhile
  (it queued behind them), plus the Retry's waits of a ``reach`` fault that outlasted them (a
  waiter's own call failing meanwhile), measured from the last abnormal end, before it entered,
  of a participant that held or took the lock (:func:`blocked`: a grantee stopped right after
  its claim restarts the bound); and every participant ends within :data:`HARD_CAP_S`;
- ``left``: once settled (every grace passed), no lock of the cell is held and no queue row
  still parks anyone (with ``no-janitor``: but an ended holder's lock, which waits for its lease,
  and an ended waiter's row, which the next handoff passes); rows besides the lock items: at
  most :data:`ROWS_PER_PARTICIPANT` per participant;
- ``unlisted``: every call of a client or the janitor on the cell's keys has a row.
"""

from __future__ import annotations

import json
import random
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from locked_workflow.constructs_lib.lock_client import LockClient, LockError, LockLost, LockTimeout
from locked_workflow.state_machines import errors
from locked_workflow.state_machines import fair_protocol as fair
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines.retry_policy import TRANSIENT_RETRY
from locked_workflow.testing.faults import Fault, FaultRegistry, calling_state
from tools.matrix import paths
from tools.matrix import rows as matrix_rows
from tools.matrix.rows import Row
from tools.matrix.stack import (PARK_TIMEOUT_S, RATE_AT_ONCE, RATE_LIMIT, RATE_PERIOD_S, RECORD_KEY, SECTIONS,
                                SEMAPHORE_LIMIT, STOP_GRACE_S)
from tools.rate_checks import admission_stamps, crowded_windows
from tools.matrix.table import CLIENT_KINDS, COLUMN, SITUATIONS, Column, situation
from tools.stress import LIVENESS_ROUND_S, TRANSIENT_ERRORS

#: The stop grace of every workflow here.
GRACE_S = STOP_GRACE_S
#: A client's lease (s): a crashed client's lock is free after it; and how long it waits.
#: (longer than the probe's timeout with room for a loaded machine: a client does not check its
#: lease while its probe runs, so a shorter one let a waiter in beside it - seen at 12 s, and
#: at 20 s once under a load average of 20, its probe's invocation taking over 20 s)
CLIENT_LEASE_S, CLIENT_WAIT_S = 30, 90
#: A client's documented outcome when its hold outlasted its lease (a loaded machine): the lock
#: was taken after the lease, and the release says so.
LEASE_RAN_OUT = "LockLost (its lease ran out)"
#: Added to every bound for a loaded machine (threads sharing one GIL on two cores).
SLACK_S = 20
#: Rows a participant may leave behind besides the lock items (a queue hole, a presence row).
ROWS_PER_PARTICIPANT = 2
#: The longest a cell's participant may run before the cell gives up on it (s).
HARD_CAP_S = 240
#: Work of a participant (ms): contending, and holding while the situation acts.
WORK_MS, HOLD_MS = (300, 700), 2500
#: Contending: the first participant's work (ms), the others arriving behind it within
#: :data:`CONTEND_ARRIVAL_S` (they wait, queue, park: their waits' and handoffs' states run).
CONTEND_HOLD_MS, CONTEND_ARRIVAL_S = 1500, 0.6
#: Errors an application retries when a client raises them (injected: botocore's retries are past).
APP_RETRIED = set(TRANSIENT_ERRORS) | {"ServiceUnavailable"}

#: Per row kind and situation: the participants (workflow state machine names, or client
#: roles ``client-mutex``, ``client-fair``, ``client-rw-read``, ``client-rw-write``).
PARTICIPANTS: dict[str, list[str]] = {
    "mutex": ["Mutex", "Mutex", "client-mutex"],
    "nested": ["Nested", "Mutex", "client-mutex"],
    "fair": ["Fair", "Fair", "client-fair"],
    "coalesce": ["FairNewest", "FairNewest", "FairNewest"],
    "semaphore": ["Semaphore"] * (SEMAPHORE_LIMIT + 1),
    "multikey": ["Transfer", "Transfer", "Transfer"],
    "shared": ["Reader", "Writer", "RwMutex"],
    "exclusive": ["Writer", "Writer", "client-rw-read"],  # (a second writer: the waiting states are the kind's)
    "record": ["Record", "Record", "Record"],
    "rate": ["Rate", "Rate", "Rate"],
    "rate-slots": ["RateSlots"] * (RATE_AT_ONCE + 1),
    "client-mutex": ["client-mutex", "Mutex", "client-mutex"],
    "client-fair": ["client-fair", "Fair", "client-fair"],
    "client-rw": ["client-rw-read", "Writer", "client-rw-write"],
}
#: The participants of a situation that needs other ones than its kind's.
SITUATION_PARTICIPANTS: dict[tuple[str, str], list[str]] = {
    ("fair", "client-waiter"): ["Fair", "client-fair", "Fair"],
    ("shared", "client-waiter"): ["Reader", "client-rw-write", "Reader"],
    ("exclusive", "client-waiter"): ["Writer", "client-rw-read", "Writer"],
    ("client-fair", "client-waker"): ["client-fair", "Fair", "Fair"],
    ("client-rw", "client-waker"): ["client-rw-write", "Reader", "Writer"],
    ("client-mutex", "client-waker"): ["client-mutex", "Mutex", "client-mutex"],
}
#: The janitor's calls, each on the kind whose ended holder it recovers.
JANITOR_SCENES: dict[str, tuple[list[str], str]] = {
    "shared_protocol.RETIRE_GONE_READER": (["Reader", "Writer", "Reader"], "dead-holder"),
    "shared_protocol.FORGET_ROW": (["Reader", "Writer", "Reader"], "dead-holder"),
    "shared_protocol.DEQUEUE": (["Reader", "Writer", "Reader"], "dead-waiter"),
    "fair_protocol.LEAVE": (["Fair", "Fair", "Fair"], "dead-waiter"),
    "fair_protocol.GRANT": (["Fair", "Fair", "Fair"], "dead-waiter"),
    "fair_protocol.CLAIM": (["Fair", "Fair", "Fair"], "dead-waiter"),
    "DeleteItem": (["Fair", "Fair", "Fair"], "dead-waiter"),
    "SendTaskSuccess": (["Fair", "Fair", "Fair"], "dead-waiter"),
    "fair_protocol.SKIP": (["Fair", "Fair", "Fair"], "dead-waiter"),
    "fair_protocol.REVOKE": (["Fair", "Fair", "Fair"], "dead-waiter"),
    "fair_protocol.MARK": (["Fair", "Fair", "Fair"], "dead-waiter"),
    "lock_protocol.RELEASE": (["Fair", "Fair", "Fair"], "dead-waiter"),
    # the janitor's hand-on on a coalescing key (a parked waiter stopped, superseded tickets)
    "fair_protocol.JUMP": (["FairNewest", "FairNewest", "FairNewest"], "dead-waiter"),
    "SendTaskFailure": (["FairNewest", "FairNewest", "FairNewest"], "dead-waiter"),
    "DescribeExecution": (["FairNewest", "FairNewest", "FairNewest"], "dead-waiter"),
}
#: Namespaces of the participants' locks.
NAMESPACE = {"Mutex": "m", "Nested": "m", "client-mutex": "m", "Reader": "rw", "Writer": "rw", "RwMutex": "rw",
             "client-rw-read": "rw", "client-rw-write": "rw", "Fair": "f", "client-fair": "f", "FairNewest": "fn",
             "Semaphore": "sem", "Transfer": "acct", "Record": "", "RateSlots": "rs", "RateSlotsBrief": "rs"}
NAMESPACE.update({f"{name}Section": NAMESPACE[name] for name in SECTIONS})
#: Roles whose waiters park (a park timeout bounds a handoff) rather than poll.
PARKING = {"Fair", "FairNewest", "Reader", "Writer", "FairSection", "ReaderSection", "WriterSection", "client-fair", "client-rw-read",
           "client-rw-write"}
_STOPPED = "Matrix.Stop"
#: Situations whose first participant holds long (:data:`HOLD_MS`) while the others act.
HOLDING = ("dead-holder", "dead-waiter", "client-waiter", "redrive", "client-waker", "behind-dead-holder")
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
#: The work's function timeout, as the runtime reports it or as the probe names it.
WORK_TIMEOUTS = (errors.LAMBDA_TIMED_OUT, "TimedOut")

#: The rows of the clients' and the janitor's calls.
_LISTED = {(row.kind, row.state) for row in matrix_rows.CLIENT_CALLS + matrix_rows.JANITOR_CALLS}


#: The longest a gated call waits for its gate (s): past it, the call goes on (the cell may
#: then not reach its row: a witness run says so).
GATE_S = 60


def _index_of(execution_arn: str) -> int:
    """A participant's index, from its execution's name ``<cell>-<index>-<uuid>``."""
    return int(execution_arn.rpartition(":")[2].split("-")[-2])


@dataclass
class Gate:
    """``gate:[<i>/]<state>[*][>]@[<j>/]<other>[~[<k>/]<arming>]``: the first call of ``<state>``
    by participant ``<i>`` (default: by any of the cell's executions; ``*``: every call, until the
    gate opens; ``>``: once it applied, its response held - a slow response) waits until a call of ``<other>`` by participant ``<j>`` (default: by another
    execution) has returned; with ``~``, both only once a call of ``<arming>`` (by ``<k>``)
    started. Two participants' calls in the order a rare path needs (a waiter that parks
    only once the releaser marked its row, a releaser that reads the lock only once that waiter
    took it), as a slow scheduler may order them (AWS bounds no state's start), at most
    :data:`GATE_S`, and no longer than the participant it waits for runs (stopped, ended:
    :meth:`Cell._ended`)."""

    state: str
    after: str
    index: int | None = None
    after_index: int | None = None
    every: bool = False
    after_call: bool = False
    arming: str = ""
    arming_index: int | None = None
    held_arn: str = ""
    used: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    guard: threading.Lock = field(default_factory=threading.Lock)

    @staticmethod
    def _who(text: str) -> tuple[int | None, str]:
        index, _, state = text.rpartition("/")
        return (int(index) if index else None), state

    @classmethod
    def parse(cls, text: str) -> "Gate":
        where, _, rest = text.partition("@")
        after, _, arming = rest.partition("~")
        index, state = cls._who(where)
        after_index, after = cls._who(after)
        arming_index, arming = cls._who(arming) if arming else (None, "")
        if not state or not after:
            raise ValueError(f"`gate` must be [<i>/]<state>[*][>]@[<j>/]<other>[~[<k>/]<arming>], got: {text}")
        return cls(state.rstrip("*>"), after, index, after_index, state.rstrip(">").endswith("*"), state.endswith(">"),
                   arming, arming_index)

    def arm(self, state: str, index: int) -> None:
        """A call of ``state`` by participant ``index`` started: arm the gate if it waits for it."""
        if self.arming and state == self.arming and self.arming_index in (None, index):
            self.arming = ""

    def takes(self, state: str, index: int) -> bool:
        """Whether this call (``state`` by participant ``index``) is held."""
        with self.guard:
            if self.done.is_set() or self.arming or (self.used and not self.every) or state != self.state \
                    or (self.index is not None and index != self.index):
                return False
            self.used = True
            return True

    def opens(self, state: str, index: int, arn: str) -> bool:
        """Whether the call of ``state`` by participant ``index`` (execution ``arn``) that just
        returned opens the gate."""
        return not self.arming and state == self.after and (index == self.after_index if self.after_index is not None
                                        else arn != self.held_arn)


@dataclass
class Participant:
    role: str
    document: dict
    arn: str = ""
    status: str = ""  # SUCCEEDED, FAILED, ABORTED, TIMED_OUT; a client: SUCCEEDED, FAILED, CRASHED
    error: str | None = None
    cause: str | None = None
    started_ms: int = 0
    ended_ms: int = 0
    entered_ms: list[int] = field(default_factory=list)
    admitted_ms: list[int] = field(default_factory=list)  # a rate limit's admissions (stamps)
    stopped: bool = False  # by the situation or the fault (since its last redrive)
    timed_out: bool = False
    redrive: bool = False
    redriven: bool = False
    redriven_ms: int = 0
    crashed: bool = False
    #: it owned a lock of the cell when it was stopped, timed out or crashed: it held or took the
    #: lock (a grant, a claim) - maybe before entering its work - so the others queued behind it
    held_at_end: bool = False
    owner: str = ""  # a client's owner (a workflow's is its execution's name)
    thread: str = ""  # a client's thread's name
    trail: list[str] = field(default_factory=list)

    @property
    def is_client(self) -> bool:
        return self.role.startswith("client-")

    @property
    def abnormal(self) -> bool:
        """Ended while it may have held its lock: stopped, timed out, crashed (or stopped, then redriven)."""
        return self.status in ("ABORTED", "TIMED_OUT", "CRASHED") or self.redriven


@dataclass
class CellResult:
    row: Row
    column: Column
    cell_id: str
    situation: str
    participants: list[Participant]
    injected: int
    seconds: float
    violations: dict[str, list[str]]
    unlisted: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        if any(self.violations.values()):
            return "VIOLATED" if self.injected else "VIOLATED*"
        return "ok" if self.injected else "not reached"

    def describe(self) -> str:
        lines = [f"{self.row.name} x {self.column.name} [{self.cell_id}, {self.situation}]: {self.verdict} "
                 f"({self.seconds:.0f} s, injected {self.injected})"]
        for name, found in self.violations.items():
            lines += [f"  {name}: {line}" for line in found[:3]]
        if any(self.violations.values()):
            for p in self.participants:
                lines.append(f"    {p.role} {p.arn.rpartition(':')[2] or ''}: {p.status} {p.error or ''} "
                             f"{(p.cause or '')[:160]} stopped={p.stopped} redriven={p.redriven} "
                             f"trail: {' | '.join(p.trail[-8:])}")
        return "\n".join(lines)


def time_out(cloud: Any, execution_arn: str) -> None:
    """End a running local execution TIMED_OUT now, as its ``TimeoutSeconds`` would: what the
    interpreter does at the deadline (``Environment.set_timed_out``), then the end recorded at
    once (as the runtime's ``patches/execution_end`` does for a stop; the state in flight runs
    on, its events dropped)."""
    worker = cloud.moto_execution(execution_arn).exec_worker
    worker.env.set_timed_out()
    worker._execution_communication.terminated()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _machine_of(arn: str) -> str:
    return arn.split(":execution:", 1)[1].split(":", 1)[0] if ":execution:" in arn else ""


class Cell:
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
        #: preparatory faults, each ``(machine or "", state, column name)``: ``after-lost:<state>``
        #: (its response lost first: its retry is the row) and ``pre:[<machine>/]<state>=<column>``
        self.prepared: list[tuple[str, str, str]] = []
        #: ``gate:[<index>/]<state>@<other state>``: the order of two participants' calls, placed
        #: rather than timed (:class:`Gate`)
        self.gates: list[Gate] = []
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
            elif part.startswith("pre:"):
                where, _, column = part[4:].partition("=")
                machine, _, state = where.rpartition("/")
                self.prepared.append((machine, state, column))
        #: ``reach``: the faults that take the Catch edges on the way to the row's state
        #: (:func:`tools.matrix.paths.preparatory_faults`), added to :attr:`prepared` at :meth:`run`
        self.reach = "reach" in parts
        self.outlasting: list[Fault] = []
        #: ``no-janitor``: the janitor cannot read an ended execution's history (it fails, as
        #: when its retries ran out): the waiters' own liveness checks take over
        self.no_janitor = "no-janitor" in parts
        self.base = next((part for part in parts if not part.startswith(("after-lost:", "pre:", "with:", "as:",
                                                                          "stop-others-at:", "gate:"))
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
        work = 2 * HOLD_MS if self.queued and index == 0 else HOLD_MS if hold else \
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
                        p.held_at_end = cell._owns(p)
                return
            p = next((p for p in cell.participants if p.arn == state.execution_arn), None)
            if p is None:
                return
            cell._ended(p)
            p.held_at_end = cell._owns(p)
            if column.then == "time out":
                p.timed_out = True
                time_out(cell.cloud, state.execution_arn)
            else:
                p.stopped, p.redrive = True, column.then == "stop, redrive"
                cell.cloud.stop_execution(state.execution_arn, error=_STOPPED, cause="stopped by the fault matrix")

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
                f":execution:{machine}:{cell.id}-" in state.execution_arn

        return Fault(row.operation, column.error_for(row), after_call=column.after_call, service=row.service,
                     when=when, then=then, times=times)

    def _stop_others(self) -> None:
        """Stop every other running execution of the cell (``stop-others-at:<state>``): e.g. a
        grantee stopped while its releaser's wake-up fails, so the janitor meets its grant."""
        state = calling_state()
        for p in self.participants:
            if not p.is_client and p.arn and (state is None or p.arn != state.execution_arn):
                self._stop(p)

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
        gates = [(self._gate_hold, self._gate_open)] if self.gates else []
        for hold, open_ in gates:
            self.registry.observers.append(hold)
            self.registry.completions.append(open_)
        threads = []
        try:
            first, others = self.participants[0], self.participants[1:]
            threads.append(self._start(first))
            if self.base in HOLDING or self.waiter_dies:
                self._wait_inside(first)
            if self.waiter_dies:
                waiter = others[0]
                threads.append(self._start(waiter))
                self._wait_parked(waiter)
                self._stop(waiter)
                others = others[1:]
            for p in others:
                threads.append(self._start(p))
                time.sleep(self.rng.uniform(0.0, CONTEND_ARRIVAL_S / max(1, len(others))))
            if self.base in ("dead-holder", "redrive"):
                time.sleep(0.8)
                self._stop(first, redrive=self.base == "redrive")
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
        self._settle()
        self.registry.observers.remove(self._observe)
        violations = self._judge()
        return CellResult(self.row, self.column, self.id, self.situation, self.participants, fault.injected,
                          time.monotonic() - started, violations, self.unlisted)

    def _gate_hold(self, service: str, operation: str, params: dict) -> None:
        """Hold a gated call (in its execution's thread) until its gate opens (:class:`Gate`)."""
        state = calling_state()
        if state is None or f":{self.id}-" not in state.execution_arn:
            return
        index = _index_of(state.execution_arn)
        for gate in self.gates:
            gate.arm(state.state_name, index)
        for gate in self.gates:
            if not gate.after_call and gate.takes(state.state_name, index):
                gate.held_arn = state.execution_arn
                gate.done.wait(GATE_S)

    def _ended(self, p: Participant) -> None:
        """``p`` ended or was stopped: the gates waiting for a call of it open (it makes none now)."""
        index = self.participants.index(p)
        for gate in self.gates:
            if gate.after_index in (None, index):
                gate.done.set()

    def _owns(self, p: Participant) -> bool:
        """Whether ``p`` owns a lock item of the cell now (read just before it is stopped, or
        right after the call its fault hit: it took the lock, a grant or a claim, even if it
        never entered its work). Read from a thread of its own: a call made in a state's thread
        would meet that state's faults and gates."""
        mark = p.owner if p.is_client else p.arn.rpartition(":")[2]
        found: list[bool] = []

        def read() -> None:
            found.append(bool(mark) and any(protocol.FENCE in item and mark in item.get(protocol.OWNER, {}).get("S", "")
                                            for item in self._items()))

        reader = threading.Thread(target=read, name=f"judge:{self.id}", daemon=True)
        reader.start()
        reader.join(30)
        return bool(found and found[0])

    def _gate_open(self, service: str, operation: str, params: dict) -> None:
        """Open the gates waiting for the call that just ended."""
        state = calling_state()
        if state is None or f":{self.id}-" not in state.execution_arn:
            return
        index = _index_of(state.execution_arn)
        for gate in self.gates:
            if gate.opens(state.state_name, index, state.execution_arn):
                gate.done.set()
        for gate in self.gates:
            if gate.after_call and gate.takes(state.state_name, index):
                gate.held_arn = state.execution_arn
                gate.done.wait(GATE_S)

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

    def _start(self, p: Participant) -> threading.Thread:
        target = self._client if p.is_client else self._execution
        p.thread = f"matrix:{self.id}:{p.role}:{self.participants.index(p)}"
        thread = threading.Thread(target=self._guarded, args=(target, p), name=p.thread, daemon=True)
        p.started_ms = _now_ms()
        thread.start()
        return thread

    def _guarded(self, target: Any, p: Participant) -> None:
        try:
            target(p)
        except Exception as error:  # noqa: BLE001 - judged as the participant's outcome
            where = traceback.extract_tb(error.__traceback__)[-1]
            p.status, p.error = "FAILED", f"matrix error {type(error).__name__}"
            p.cause = f"{str(error)[:300]} (at {where.filename.rpartition('/')[2]}:{where.lineno} {where.name})"
        p.ended_ms = p.ended_ms or _now_ms()

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
            p.redriven, p.redriven_ms, p.stopped, p.timed_out = True, _now_ms(), False, False
            time.sleep(0.5)  # (the status reads RUNNING again at once; its end comes later)
            result = cloud.wait_for(p.arn, timeout=HARD_CAP_S)
        self._ended(p)
        history = result.history
        p.status, p.error, p.cause = result.status, result.error, result.cause or p.cause
        p.entered_ms = [int(e["timestamp"].timestamp() * 1000) for e in history
                        if (e["type"] == "TaskScheduled" and e["taskScheduledEventDetails"].get("resourceType") == "lambda")
                        or (e["type"] == "WaitStateEntered" and e["stateEnteredEventDetails"]["name"].endswith("Hold"))]
        p.admitted_ms = admission_stamps(history) if p.role.startswith("Rate") else []
        ends = [e for e in history if e["type"] in ("ExecutionSucceeded", "ExecutionFailed", "ExecutionAborted",
                                                     "ExecutionTimedOut")]
        p.ended_ms = int(ends[-1]["timestamp"].timestamp() * 1000) if ends else _now_ms()
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
        deadline = time.monotonic() + CLIENT_WAIT_S
        lease = None
        lambda_client = self.cloud.client("lambda")
        released_error: ClientError | None = None
        work_error: str | None = None
        while True:
            try:
                if lease is None:
                    lease = client.acquire(self.key, owner=owner, lease=CLIENT_LEASE_S, shared=shared,
                                           wait=max(0.0, deadline - time.monotonic()), max_poll_interval=1.0)
                    p.entered_ms.append(_now_ms())
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
                if taken_ms is not None and _now_ms() - taken_ms > CLIENT_LEASE_S * 1000:
                    p.status, p.error, p.cause = "FAILED", LEASE_RAN_OUT, str(lost)[:300]
                    return
                raise
            except LockTimeout:
                p.status, p.error = "FAILED", errors.ERROR_TIMEOUT
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
                time.sleep(0.2)

    def _wait_probe_left(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            item = self.cloud.dynamodb.get_item(TableName=self.tables["probes"], Key={"pk": {"S": self.key}},
                                                ConsistentRead=True).get("Item", {})
            if int(item.get("inside", {}).get("N", "0")) <= 0:
                return
            time.sleep(0.1)

    def _wait_inside(self, p: Participant, timeout_s: float = 60) -> None:
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

    def _wait_parked(self, p: Participant, timeout_s: float = 30) -> None:
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
                            p.arn + protocol.OWNER_SEPARATOR) for item in self._items()):
                    return
                if any(e["type"] == "TaskScheduled" and e["taskScheduledEventDetails"].get("resourceType") == "lambda"
                       for e in self.cloud.history(p.arn)):
                    return
            time.sleep(0.2)

    def _stop(self, p: Participant, *, redrive: bool = False) -> None:
        deadline = time.monotonic() + 30
        while not p.arn and time.monotonic() < deadline:
            time.sleep(0.05)
        if p.is_client or not p.arn or self.cloud.status(p.arn) != "RUNNING":
            return
        p.stopped, p.redrive = True, p.redrive or redrive
        self._ended(p)
        p.held_at_end = self._owns(p)
        self.cloud.stop_execution(p.arn, error=_STOPPED, cause="stopped by the fault matrix's situation")

    # -- after ----------------------------------------------------------------------------------

    def _settle(self) -> None:
        """Wait until the cell's locks are left as they must be (nothing held, nothing parked:
        :meth:`_left` finds nothing), or at most until every grace has passed (a stopped
        holder's lock is retired to its end + grace; a crashed client's is free at its lease's
        end) - then :meth:`_judge` reads what is left. Nothing the participants did can hold a
        lock again once they all ended, so an early clean look is the settled state."""
        # (a work past its function timeout: the section retires its hold to the end + grace)
        ends = [p.ended_ms for p in self.participants if p.abnormal or p.stopped or p.timed_out
                or p.error in WORK_TIMEOUTS]
        crashed = any(p.status == "CRASHED" for p in self.participants)
        if not ends:
            return
        until = max(ends) + (max(GRACE_S, CLIENT_LEASE_S if crashed else 0) + 2) * 1000
        while _now_ms() < until and self._left():
            time.sleep(min(1.0, max(0.0, (until - _now_ms()) / 1000)))

    def _items(self) -> list[dict]:
        items = []
        for page in self.cloud.dynamodb.get_paginator("scan").paginate(TableName=self.tables["locks"], ConsistentRead=True):
            items += [item for item in page["Items"] if self.id in json.dumps(item)]
        return items

    def _judge(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {name: [] for name in ("alone", "lost update", "fences", "outcome", "blocked",
                                                             "left", "unlisted")}
        limit = {"semaphore": SEMAPHORE_LIMIT, "rate": 3, "rate-slots": RATE_AT_ONCE}.get(self.row.kind, 1)
        if self.row.kind in ("rate", "rate-slots"):
            stamps = [ms for p in self.participants for ms in p.admitted_ms]
            for a, b in crowded_windows(stamps, limit=RATE_LIMIT, period_ms=RATE_PERIOD_S * 1000):
                found["alone"].append(f"{RATE_LIMIT + 1} admissions within {b - a} ms (period {RATE_PERIOD_S} s)")
        for key in self.probe_keys:
            item = self.cloud.dynamodb.get_item(TableName=self.tables["probes"], Key={"pk": {"S": key}},
                                                ConsistentRead=True).get("Item", {})
            number = lambda name: int(item.get(name, {}).get("N", "0"))  # noqa: E731
            seen = [int(v["N"]) for v in item.get("seen", {}).get("L", [])]
            if number("violations") or (limit > 1 and any(s > limit for s in seen)):
                found["alone"].append(f"{key}: {number('violations')} entries found another holder inside (seen {seen})")
            if limit == 1 and number("counter") != number("accepted"):  # (a semaphore's holders share it)
                found["lost update"].append(f"{key}: counter {number('counter')} != accepted {number('accepted')}")
            fences = [int(v["N"]) for v in item.get("fences", {}).get("L", [])]
            nested = self.row.kind == "nested" or any(p.role == "Nested" for p in self.participants)
            if any(b < a or (b == a and not nested) for a, b in zip(fences, fences[1:])):
                found["fences"].append(f"{key}: {fences}")
            # (not staleReads: a reader's fence ahead of the last write is a writer that acquired
            # and never wrote - stopped before its write, its work timed out, its grant expired
            # unclaimed - which moves the fence without a write)
            if number("overtakenReads"):
                found["fences"].append(f"{key}: {number('overtakenReads')} reads that saw a write during the read "
                                       "or one newer than the reader's fence")
        if any(p.role == "Record" for p in self.participants):
            record = self.cloud.dynamodb.get_item(TableName=self.tables["records"], Key={RECORD_KEY: {"S": self.key}},
                                                  ConsistentRead=True).get("Item", {})
            balance = int(record.get("balance", {}).get("N", "0"))
            done = sum(p.status == "SUCCEEDED" for p in self.participants)
            maybe = sum(p.status != "SUCCEEDED" for p in self.participants)
            if not done <= balance <= done + maybe:
                found["lost update"].append(f"record {self.key}: balance {balance}, {done} runs succeeded, {maybe} others")
        for p in self.participants:
            if not self._documented(p):
                found["outcome"].append(f"{p.role} {p.arn.rpartition(':')[2]}: {p.status} {p.error} {(p.cause or '')[:200]}")
        found["blocked"] = self._blocked()
        found["left"] = self._left()
        found["unlisted"] = sorted(set(self.unlisted))
        return found

    def _documented(self, p: Participant) -> bool:
        # the work's own errors: the one it was asked for, its function timeout (a loaded machine)
        asked = ((p.document.get("fail") or p.document.get("innerFail")) and p.error == "RuntimeError") \
            or p.error in WORK_TIMEOUTS
        if p.is_client:
            return p.status == "SUCCEEDED" or asked or p.status == "CRASHED" and p.crashed or \
                p.error in (errors.ERROR_TIMEOUT, LEASE_RAN_OUT)
        if p.status == "SUCCEEDED" or asked or p.error == errors.ERROR_TIMEOUT:
            return True
        if p.error and any(code in p.error for code in paths.FIVE_XX) and \
                any(f.injected >= f.times for f in self.outlasting):
            return True  # a 5xx past its call's retries (a preparatory fault of reach) ends the run with it
        if p.error == errors.ERROR_RECORD_TOO_LARGE:
            return self.situation == "refused"
        if p.error == errors.ERROR_SUPERSEDED:  # (coalescing: a newer run queued behind it)
            return p.role == "FairNewest"
        if p.status == "ABORTED":
            return p.stopped
        if p.status == "TIMED_OUT":
            return p.timed_out
        return False

    def _blocked(self) -> list[str]:
        return blocked(self.participants, outlasted_ms=self._outlasted_ms())

    def _outlasted_ms(self) -> int:
        """How long a ``reach`` fault that outlasts its call's Retry held its caller up (ms): the
        Retry's waits, each at most its cap (``TRANSIENT_RETRY``: 1, 2, 4, 8, 8, 8 s)."""
        if not any(f.injected for f in self.outlasting):
            return 0
        policy, waits, wait = TRANSIENT_RETRY, 0.0, float(TRANSIENT_RETRY.interval_s)
        for _ in range(policy.max_attempts):
            waits += min(wait, policy.max_delay_s or wait)
            wait *= policy.backoff_rate
        return int(waits * 1000)

    def _left(self) -> list[str]:
        now, found, rows = _now_ms(), [], 0
        items = self._items()

        def ended_abnormally(owner: str) -> bool:
            return any(p.abnormal and p.arn and p.arn.rpartition(":")[2] in owner for p in self.participants)

        for item in items:
            key = item["pk"]["S"]
            if protocol.OWNER in item and protocol.EXPIRES_AT in item and int(item[protocol.EXPIRES_AT]["N"]) > now:
                if self.no_janitor and ended_abnormally(item[protocol.OWNER]["S"]):
                    continue  # with no janitor and no waiter left, an ended holder's lock waits for its lease
                found.append(f"{key} held by {item[protocol.OWNER]['S'][-60:]} for "
                             f"{(int(item[protocol.EXPIRES_AT]['N']) - now) / 1000:.0f} s more")
            elif fair.TOKEN in item and "#" in key and not item[fair.TOKEN].get("S", "").startswith(
                    fair.CLIENT_LEASE_PREFIX) and not (  # (a client's row: its lease ends it - a row left, counted below)
                    # (with no janitor to dequeue it, a stopped waiter's row parks on until the next
                    # handoff finds its execution ended and passes it: a row left, counted below)
                    self.no_janitor and ended_abnormally(item.get(protocol.OWNER, {}).get("S", ""))):
                found.append(f"{key} still parks {item.get(protocol.OWNER, {}).get('S', '?')[-60:]}")
            if protocol.FENCE not in item:
                rows += 1
        if rows > ROWS_PER_PARTICIPANT * len(self.participants):
            found.append(f"{rows} rows left besides the lock items (bound {ROWS_PER_PARTICIPANT} per participant)")
        return found


def _end_ms(p: Participant) -> int:
    """When ``p`` ended (a redriven one: its stop came just before its redrive)."""
    return p.redriven_ms or p.ended_ms


def _held(p: Participant) -> bool:
    """Whether ``p`` held or took the lock when it ended abnormally: it entered its work
    before, or owned a lock of the cell then (a grantee stopped right after its claim)."""
    return p.abnormal and (p.held_at_end or any(ms <= _end_ms(p) for ms in p.entered_ms))


def blocked(participants: list[Participant], *, outlasted_ms: int = 0) -> list[str]:
    """The ``blocked`` invariant over the participants' timelines (ms): every participant ends
    within :data:`HARD_CAP_S`; after one ended abnormally, each other one still waiting enters
    (or ends) within its bound: the stop grace (a crashed client: its lease) + one park timeout
    (a parking waiter) or liveness round + one hold + :data:`SLACK_S` + ``outlasted_ms`` (a
    ``reach`` fault's Retry waits), plus the holds of those that entered meanwhile. Each
    participant that held or took the lock and ended abnormally before the waiter entered
    restarts its bound (the lock waits for that one's grace now): the bound is measured from
    the last such end, as docs/safety.md states it - but not one that held beside the dead one
    (it entered before that one's end: a semaphore's other slot), whose later end says nothing
    of when the dead one's hold was retired."""
    found = []
    bound_end = max(p.started_ms for p in participants) + HARD_CAP_S * 1000
    for p in participants:
        if not p.status or p.ended_ms > bound_end:
            found.append(f"{p.role} {p.arn.rpartition(':')[2]} still running after {HARD_CAP_S} s")
    for dead in participants:
        if not dead.abnormal:
            continue
        end = _end_ms(dead)
        lease_s = CLIENT_LEASE_S if dead.status == "CRASHED" else GRACE_S
        for waiter in participants:
            if waiter is dead or waiter.started_ms > end or waiter.ended_ms <= end \
                    or waiter.status in ("ABORTED", "TIMED_OUT", "CRASHED"):
                continue  # it came later, was done by then, or ended abnormally itself
            later = [ms for ms in waiter.entered_ms if ms > end]
            if not later and any(ms <= end for ms in waiter.entered_ms):
                continue  # it was inside then: not waiting for the one that ended
            next_ms = later[0] if later else waiter.ended_ms
            if any(other is not dead and other is not waiter and _held(other) and end < _end_ms(other) < next_ms
                   and all(ms > end for ms in other.entered_ms) for other in participants):
                continue  # the lock passed to one that ended abnormally later: judged from that one's end
            round_s = PARK_TIMEOUT_S if waiter.role in PARKING else LIVENESS_ROUND_S
            bound_ms = int((lease_s + round_s + SLACK_S + HOLD_MS / 1000) * 1000) + outlasted_ms
            bound_ms += _held_between(participants, end, next_ms, dead, waiter)
            if next_ms - end > bound_ms:
                found.append(f"{waiter.role} {waiter.arn.rpartition(':')[2]} waited {(next_ms - end) / 1000:.0f} s "
                             f"after {dead.role} {dead.arn.rpartition(':')[2]} ended {dead.status} "
                             f"(bound {bound_ms / 1000:.0f} s)")
    return found


def _held_between(participants: list[Participant], start_ms: int, end_ms: int, *skip: Participant) -> int:
    """How long the participants but ``skip`` held the lock between ``start_ms`` and
    ``end_ms`` (ms): a waiter queued behind them waits for them too (one whose work timed
    out holds for the stop grace after its end)."""
    held = 0
    for other in participants:
        if any(other is s for s in skip):
            continue
        for ms in other.entered_ms:
            if start_ms < ms < end_ms:
                held += min(other.ended_ms or end_ms, end_ms) - ms
                if other.error in WORK_TIMEOUTS or other.abnormal:
                    held += GRACE_S * 1000
    return held
