"""The fault matrix's participants: which roles a cell of each row kind runs (workflow state
machines, or the :class:`LockClient` modes), their namespaces, the timings every cell uses, and
what one participant's run and one cell's result record (:class:`Participant`,
:class:`CellResult`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from locked_workflow.state_machines import errors
from tools.matrix.rows import Row
from tools.matrix.stack import PROBE_TIMEOUT_S, RATE_AT_ONCE, SECTIONS, SEMAPHORE_LIMIT, STOP_GRACE_S
from tools.matrix.table import Column
from tools.stress import TRANSIENT_ERRORS

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
#: A long hold (``holds-long:``, ms): within the probe's function timeout (a work past it is
#: retired by its section); two such holds one after the other outlast the liveness check's
#: period of a polling waiter (``tools.stress.LIVENESS_ROUND_S``), so one behind them checks.
LONG_HOLD_MS = (PROBE_TIMEOUT_S - 2) * 1000
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
    "fair_protocol.LEAVE_PRESENT": (["Fair", "Fair", "Fair"], "dead-waiter"),
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
#: Readers of a read/write key, and the plain mutexes that may wait on it: a mutex's liveness
#: round retires an ended reader's entry and reaps it at a later round, never in one
#: (docs/shared-lock.md, "A plain mutex on a read/write key": up to two rounds).
READERS = {"Reader", "ReaderSection", "client-rw-read"}
PLAIN_MUTEXES = {"RwMutex", "Mutex", "Nested", "client-mutex"}
#: Situations whose first participant holds long (:data:`HOLD_MS`) while the others act.
HOLDING = ("dead-holder", "dead-waiter", "client-waiter", "redrive", "client-waker", "behind-dead-holder")
#: The work's function timeout, as the runtime reports it or as the probe names it.
WORK_TIMEOUTS = (errors.LAMBDA_TIMED_OUT, "TimedOut")


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



def now_ms() -> int:
    return int(time.time() * 1000)
