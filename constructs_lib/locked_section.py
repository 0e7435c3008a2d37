"""LockedSection: a fragment that runs any chainable under a lock, and the states it builds.

The states come from the protocol modules (:mod:`locked_workflow.state_machines.lock_protocol`
and one module per kind); the section validates its props and wires those states around the
caller's work with the kind's builder (:mod:`~locked_workflow.constructs_lib.kinds`, through the
contract of :mod:`~locked_workflow.constructs_lib.kinds.base`). What every kind shares is built
beside it: the wait path (:mod:`~locked_workflow.constructs_lib.section_wait`) and its history
budget (:mod:`~locked_workflow.constructs_lib.section_budget`), the section's variables
(:mod:`~locked_workflow.constructs_lib.section_variables`), the hold
(:mod:`~locked_workflow.constructs_lib.section_hold`), the checks at render
(:mod:`~locked_workflow.constructs_lib.section_render`) and of the rendered work
(:mod:`~locked_workflow.constructs_lib.section_work`).
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Union

from aws_cdk import Duration, Stack, aws_dynamodb as dynamodb, aws_iam as iam
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from locked_workflow.constructs_lib.janitor import LockJanitor, executions_of
from locked_workflow.constructs_lib.kinds.base import AcquireStates
from locked_workflow.constructs_lib.lock import A_LOCK, Lock
from locked_workflow.constructs_lib.section_budget import DEFAULT_MAX_WAIT, budgeted_max_wait
from locked_workflow.constructs_lib.section_hold import build_hold
from locked_workflow.constructs_lib.section_record import Role, StateRecord
from locked_workflow.constructs_lib.section_render import NotInExpress, SectionState
from locked_workflow.constructs_lib.section_variables import section_variables
from locked_workflow.constructs_lib.section_wait import build_wait_path, probe_presence
from locked_workflow.constructs_lib.section_work import (
    JSONATA_WORK_RULE,
    catching,
    derive_stop_grace,
    jsonpath_states,
    warn_if_grace_short,
    work_task_states,
)
from locked_workflow.constructs_lib.lock_table import LockTable, check_lock_table
from locked_workflow.constructs_lib import lease_check, prop_types
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines.lock_protocol import WaitPolicy, jsonata

#: Default: a waiter asks whether the holder still runs on every this-many-th round of polls.
DEFAULT_LIVENESS_CHECK_EVERY = 2


class LockedSection(sfn.StateMachineFragment):
    """A fragment that runs ``protected`` while holding an exclusive lock on a DynamoDB item.

    One Parallel state (named after the construct id) whose single branch is::

        Acquire --held--> Held? --waited max_wait--> Timeout (fails Lock.Timeout)
           ^                 |--every n-th round--> Inspect -> HolderIsExecution? -> DescribeHolder --.
           |                 \\--> Wait <---------------------------------------------------------'
           |--ok--> protected work --> Release --condition failed--> Lost (fails Lock.Lost)
                        \\--any error--> ReleaseAfterError --> Rethrow (the error, States.* renamed)

    The Parallel's entry draws the acquisition's owner (``<execution ARN>#<uuid>``) and
    validates the key (``Lock.InvalidKey`` before any DynamoDB call). Ownership is per
    acquisition: Map iterations, Parallel branches and repeated runs of one execution are
    separate holders and serialize like separate executions.

    The protected work reads the lock as ``$lock`` (or ``$<lock_variable>``): ``key``,
    ``owner``, ``fence``, ``acquiredAt``, ``expiresAt`` (epoch ms). The variable lives inside
    the section: states after it cannot read it. The work's input is the section's input; the
    section's output is the work's output.

    Nesting: a section inside another section's protected work, on the same table and the same
    key at run time, passes through (re-entrant): it writes nothing, its work runs under the
    enclosing hold and reads the same ``fence``, and leaving it does not free the enclosing
    lock. A different key is an ordinary nested lock. Nested sections need different
    ``lock_variable`` names (refused at synth otherwise).

    Redrive: a redriven execution that re-enters the section (stopped or failed inside it)
    acquires again, with a new owner, before any of its protected work runs again; the work
    runs from its start.

    :param lock: what to lock, and how - a lock kind as a value: ``Lock.mutex(key)``,
        ``Lock.fair(key, park_timeout=...)``, ``Lock.semaphore(key, limit=...)``,
        ``Lock.shared(key)`` / ``Lock.exclusive(key)`` (a read/write lock),
        ``Lock.keys(keys)`` or ``Lock.on_record(table, key, ...)`` (see
        :class:`~locked_workflow.constructs_lib.lock.Lock`).
    :param protected: the work to run under the lock (any ``IChainable``). A single task
        state with no Catch of its own gets the lock's Catch directly; anything else is
        wrapped in a one-branch Parallel (one more state transition).
    :param table: the lock table (partition key ``pk``, string; a ``LockTable`` or its
        ``table``); left unset with ``Lock.on_record``, whose lock lives on the record table.
    :param lease: how long an acquisition stays valid if never released. Set it longer than
        the longest time the section can run; a shorter lease trades safety (another run
        may take over a live holder, whose late writes only its fence can reject) for
        faster recovery from crashed holders.
    :param key_namespace: prefix of the stored key, ``<namespace>#<key>`` (also for ``""``:
        ``#<key>``); share it with any ``LockClient`` taking part in the same lock.
        Default: ``""``.
    :param max_wait: longest time to wait for a held lock before failing with
        ``Lock.Timeout``; ``Duration.seconds(0)`` fails at once. The timeout comes after
        ``max_wait`` and before ``max_wait`` + one round of polls (at most half of
        ``max_wait`` more), request latencies aside. Default: 15 minutes; with ``Lock.rate``,
        whose waits could outgrow ``history_event_budget`` in 15 minutes at a high ``limit``,
        the longest whole-second wait up to 15 minutes that fits it (the same worst case the
        check refuses by: at 100 per minute 599 s; at 10 per minute with ``at_once=2`` 808 s).
        A ``max_wait`` given past the budget is refused.
    :param wait_policy: how to poll a held lock. Default: ``WaitPolicy()`` - first wait 2 s,
        backoff 1.5, at most 5 s between attempts, jitter on, 8 retries per round.
    :param stop_grace: how long the lock of a holder whose execution ended without releasing
        it (stopped, timed out, failed past every Catch) stays held after that end: Step
        Functions does not stop a running Lambda invocation, activity or callback worker.
        The janitor's and the liveness check's retires never keep it past its lease.
        Default: the longest run a task of the protected work may have (a Lambda task: Lambda's
        10 s Init limit - a cold start, outside the function's timeout - plus its function's
        timeout, whatever its ``TimeoutSeconds``; other tasks: their ``TimeoutSeconds``) plus
        5 s; 15 minutes if some task's longest run cannot be seen. An explicit grace shorter than
        a Lambda task's longest run (Init limit + timeout, for a function of this app) is a
        synth warning saying what it costs (``locked-workflow:stop-grace-shorter-than-work``):
        the next holder can enter beside the stopped holder's invocation.
    :param lock_variable: name of the variable holding the lock (the section also uses
        ``<name>Wait``, ``<name>Holder``, ``<name>Redrives``, ``<name>Lost``, ``<name>Presence``,
        ``<name>Held`` and ``<name>Done``). Default: ``"lock"``.
    :param liveness_check_every: on every this-many-th round of polls a waiter asks Step
        Functions whether the holder's execution still runs, and takes the lock over from one
        that ended longer than its stop grace ago; ``0`` leaves the states out. The check
        needs ``states:DescribeExecution`` on the holders' executions: see
        :meth:`recover_stale_holders`. Default: ``2``.
    :param history_event_budget: refuse a ``max_wait``/``wait_policy`` whose wait loop could
        record more history events than this (a Standard execution stops at 25,000); ``None``
        skips the check (Express). Default: 20,000.
    :param detect_cancellation: the holder keeps a presence branch beside its work - a
        callback task whose token it registers on the lock item (per hold: two more writes,
        one read and up to five more state transitions) - so that a waiter's liveness check learns at once
        when Step Functions cancelled the holding branch while the execution runs on (a sibling
        branch or iteration failed and the user caught the Parallel's or Map's failure: no
        Catch runs and no event is sent). The waiter's ``SendTaskHeartbeat`` on the token then
        fails with ``TaskTimedOut`` and the lock is held for the stop grace from that moment,
        not for the rest of the lease. Needs a STANDARD state machine (EXPRESS cannot park on a
        task token: set ``False`` there; refused at synth otherwise). A multi-key hold writes
        its token on every key it took, in one transaction; a read/write hold (``Lock.shared`` /
        ``Lock.exclusive``) on a presence row of its own, which its release deletes (one more
        write). Default: ``True``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        lock: Lock,
        protected: sfn.IChainable,
        table: Optional[Union[dynamodb.ITable, "LockTable"]] = None,
        lease: Duration,
        key_namespace: str = "",
        max_wait: Duration = DEFAULT_MAX_WAIT,
        wait_policy: Optional[WaitPolicy] = None,
        stop_grace: Optional[Duration] = None,
        lock_variable: str = "lock",
        liveness_check_every: int = DEFAULT_LIVENESS_CHECK_EVERY,
        history_event_budget: Optional[int] = protocol.WAIT_LOOP_EVENT_BUDGET,
        detect_cancellation: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        prop_types.instance("lock", lock, Lock, A_LOCK, required=True)
        protected = prop_types.chainable("protected", protected)
        jsonpath_tasks = jsonpath_states(protected, tasks_only=True)
        if jsonpath_tasks:
            raise ValueError(
                f"`protected` must use JSONata in its task states ({JSONATA_WORK_RULE}), got: JSONPath "
                f"task{'s' if len(jsonpath_tasks) > 1 else ''} {', '.join(map(repr, jsonpath_tasks))}"
            )
        table = prop_types.table("table", table)
        prop_types.instance("wait_policy", wait_policy, WaitPolicy, "a WaitPolicy")
        wait_policy = wait_policy or WaitPolicy()
        if not isinstance(detect_cancellation, bool):
            raise ValueError(f"`detect_cancellation` must be True or False, got: {detect_cancellation!r}")
        if not isinstance(liveness_check_every, int) or liveness_check_every < 0:
            raise ValueError(
                "`liveness_check_every` must be a whole number of rounds >= 0 (0 turns the check "
                f"off), got: {liveness_check_every!r}"
            )
        self.lock = lock
        self.kind = lock.builder()
        # waiters park on a task token (a fair lock but its EXPRESS form; the read/write lock)
        parks = self.kind.parks_on_token
        if parks and self.kind.parked_waiters_check_liveness and liveness_check_every == 0:
            raise ValueError(
                f"`liveness_check_every` must be at least 1 with Lock.{lock.kind} (a parked waiter's "
                "fallback asks whether the holder and the head of the queue still run), got: 0"
            )
        if self.kind.lives_on_records:
            if table is not None:
                raise ValueError(
                    "`table` must be left unset with Lock.on_record (the lock lives on the record "
                    f"table the lock names), got: {table!r}"
                )
            if key_namespace:
                raise ValueError(
                    "`key_namespace` must be empty with Lock.on_record (the key is the record's own), "
                    f"got: {key_namespace!r}"
                )
            table = lock.record_table
        elif table is None:
            raise ValueError(f"`table` must be given (the lock table) with Lock.{lock.factory}, got: None")
        else:
            check_lock_table("table", table)
        problem = protocol.namespace_problem(key_namespace)
        if problem:
            raise ValueError(f"`key_namespace` {problem}")
        variables = section_variables(lock_variable)
        lease_ms = prop_types.concrete_ms("lease", lease)
        if lease_ms < 1000:
            raise ValueError(f"`lease` must be at least 1 second, got: {lease_ms / 1000} s")
        max_wait, max_wait_ms = budgeted_max_wait(
            lock, self.kind, max_wait, wait_policy=wait_policy, liveness_check_every=liveness_check_every,
            history_event_budget=history_event_budget,
        )
        self.table = table
        self.lock_variable = lock_variable
        self.key_namespace = key_namespace
        self.max_wait = max_wait
        self.wait_policy = wait_policy
        self.lease = lease
        self.liveness_check_every = liveness_check_every
        self.variables = variables
        #: JSONata: the stored key (or keys), from the kind.
        self.stored_key_expression = self.kind.key_expression(key_namespace)
        self.max_wait_ms = max_wait_ms
        self._construct_id = construct_id
        #: The section's states by name and role, kept while they are built (see :meth:`record`):
        #: the checks at render read it, never the rendered JSON.
        self.state_record = StateRecord()
        self._liveness_grants: list = []
        self._janitor: Optional[LockJanitor] = None

        # (a fair lock's EXPRESS waiters poll: no task tokens there)
        self.detect_cancellation = detect_cancellation and self.kind.presence and not self.kind.polling
        self._lease_ms = lease_ms
        self._lost: Optional[sfn.State] = None
        self.protected = (
            build_hold(self, protected, lease_ms=lease_ms, lost_state=self._lost_state) if self.detect_cancellation
            else catching(self, protected, self.state_name("Protected"))
        )
        self._stop_grace = stop_grace
        if stop_grace is not None and prop_types.concrete_ms("stop_grace", stop_grace) < 0:
            raise ValueError(f"`stop_grace` must not be negative, got: {stop_grace.to_seconds()} s")

        self._pending_after_acquire: list = []
        self.rethrow = sfn.Fail.jsonata(
            self,
            "Rethrow",
            state_name=self.state_name("Rethrow"),
            error=jsonata(protocol.rethrow_error_expression()),
            cause=jsonata(protocol.rethrow_cause_expression()),
        )
        acquire_states = AcquireStates(*self.kind.build_acquire(self, lease_ms))
        self._start, self.acquire = acquire_states.first, acquire_states.attempt
        if not self.kind.builds_own_wait_path:
            build_wait_path(self, self.acquire, also=acquire_states.retried)
        self._build_error_path()
        self.release = self._build_release()
        acquire_states.acquired.next(self.protected).next(self.release)
        self.section_state = self._build_entry()
        #: Its waiters park on a task token (STANDARD state machines only).
        self.parks = parks
        if self.detect_cancellation or parks:
            self.node.add_validation(NotInExpress(self))

    # -- wiring -------------------------------------------------------------------------

    def state_name(self, suffix: str) -> str:
        """The name of one of this section's lock states (recorded: the work's tasks are
        guarded, the lock's own states are not)."""
        name = f"{self._construct_id}.{suffix}"
        self.state_record.add(name, Role.LOCK)
        return name

    def record(self, state: Union[sfn.State, str], role: Role, variable: Optional[str] = None) -> None:
        """Record the role of one of this section's states (``state``: it, or its name), and
        the variable concerned: see :class:`~locked_workflow.constructs_lib.section_record.Role`."""
        self.state_record.add(state if isinstance(state, str) else state.state_id, role, variable)

    def probe_presence(self, describe: sfn.State, *, then: sfn.State) -> sfn.State:
        """``SendTaskHeartbeat`` on the presence token of the holder in ``$<lock_variable>Holder``
        (see :func:`~locked_workflow.constructs_lib.section_wait.probe_presence`)."""
        return probe_presence(self, describe, then=then)

    def _lost_state(self) -> sfn.State:
        """``Lock.Lost``: the lock was taken over before it was released."""
        if self._lost is None:
            lock = "$" + self.variables["lock"]
            self._lost = sfn.Fail.jsonata(
                self,
                "Lost",
                state_name=self.state_name("Lost"),
                error=protocol.ERROR_LOST,
                cause=jsonata(self.kind.lost_cause(lock)),
            )
            self.record(self._lost, Role.LOST)
        return self._lost

    def _build_release(self) -> sfn.State:
        """Release on success (the kind's writes), ``Lock.Lost`` when the lock was taken over."""
        left = sfn.Succeed(self, "LeftReentered", state_name=self.state_name("LeftReentered"))
        return self.kind.build_release(self, self._lost_state(), left)

    def _build_error_path(self) -> None:
        """Every error of the work: release, then fail with it (States.* renamed)."""
        rethrow = self.rethrow
        self.release_after_error = self.kind.build_release_after_error(self, rethrow)
        # work that may still be in flight - a task timed out (Step Functions does not stop
        # the invocation or worker behind it), or a task refused to resume after a redrive
        # (the run before the stop may still be going): the acquisition is retired, held for
        # its stop grace from now, not released
        in_flight = sfn.Choice.jsonata(self, "InFlight", state_name=self.state_name("MayStillRun?"))
        in_flight.when(sfn.Condition.jsonata(jsonata(protocol.may_still_run_expression())),
                       self.kind.build_retire(self, rethrow))
        in_flight.otherwise(self.release_after_error)
        still_run = [*protocol.MAY_STILL_RUN_ERRORS] + ([protocol.ERROR_PRESENCE_UNKNOWN] if self.detect_cancellation else [])
        self.protected.add_catch(in_flight, errors=[protocol.QUERY_EVALUATION_ERROR, *still_run])
        self.protected.add_catch(self.release_after_error, errors=["States.ALL"])
        for state in self._pending_after_acquire:
            state.add_catch(self.release_after_error, errors=["States.ALL"])

    def after_acquire_failure(self, state: sfn.TaskStateBase) -> None:
        """``state`` runs while the lock is held (before the work): its errors release it too."""
        self._pending_after_acquire.append(state)

    def held_assign(self, state_name: str, when: Optional[str] = None) -> dict:
        """The Assign of a release, the state named ``state_name`` (recorded as a release): how
        long the lock was held (``<lock_variable>Held``, ms), which monitoring reads from the
        release's exit line (``when``: JSONata, true when the write ends the hold; see
        ``lock_protocol.held_ms_expression``)."""
        self.state_record.add(state_name, Role.RELEASE, self.variables["held"])
        return {self.variables["held"]: jsonata(protocol.held_ms_expression(self.variables["lock"], when))}

    def _build_entry(self) -> sfn.Parallel:
        """The section's Parallel: entry record, bad keys, and the way back in for a section
        whose work refused to resume after a redrive."""
        v = self.variables
        section = SectionState(
            self,
            "Section",
            section=self,
            state_name=self._construct_id,
            query_language=sfn.QueryLanguage.JSONATA,
            comment=f"Exclusive lock ({self.node.path})",
            outputs=jsonata("$states.result[0]"),
        ).branch(self._start)
        self.record(section, Role.SECTION)
        entry_failed = sfn.Choice.jsonata(self, "EntryFailed", state_name=self.state_name("EntryFailed?"))
        entry_failed.when(
            sfn.Condition.jsonata(jsonata(protocol.entry_error_is(protocol.ERROR_INVALID_KEY))),
            sfn.Fail.jsonata(
                self, "InvalidKey", state_name=self.state_name("InvalidKey"),
                error=protocol.ERROR_INVALID_KEY,
                cause=jsonata(protocol.message_of_expression(protocol.ERROR_INVALID_KEY)),
            ),
        )
        entry_failed.otherwise(
            sfn.Fail.jsonata(
                self, "Failed", state_name=self.state_name("Failed"),
                error=jsonata(protocol.rethrow_error_expression()),
                cause=jsonata(protocol.rethrow_cause_expression()),
            )
        )
        entry_failed.when(  # a task of the work refused to resume after a redrive
            sfn.Condition.jsonata(jsonata(protocol.resumed_again_expression(v["redrives"]))),
            section,
            assign={v["redrives"]: jsonata(protocol.redrives_after_restart_expression())},
            outputs=jsonata("$states.input.sectionInput"),
        )
        section.add_catch(
            entry_failed,
            errors=[protocol.QUERY_EVALUATION_ERROR, protocol.SIGNAL_RESUMED],
            outputs=jsonata("$merge([$states.errorOutput, {'sectionInput': $states.input}])"),
        )
        return section

    def stop_grace_ms(self, rendered_section: Any = None, lock_states: Optional[set] = None) -> int:
        """The stop grace in ms: ``stop_grace`` if given (warned at synth when shorter than a
        Lambda task's longest run), else derived from the protected work as rendered (branches
        of Parallel and Map states are only complete then): its tasks but the lock's own
        states, named in ``lock_states`` (default: this section's record; at render, with the
        sections nested in it)."""
        names = self.state_record.names() if lock_states is None else lock_states
        work = work_task_states(rendered_section, names) if rendered_section is not None else []
        if self._stop_grace is not None:
            grace_ms = prop_types.concrete_ms("stop_grace", self._stop_grace)
            warn_if_grace_short(self, grace_s=grace_ms / 1000, tasks_found=work)
            return grace_ms
        if rendered_section is None:
            raise ValueError("`stop_grace` is derived when the state machine is rendered")
        return int(derive_stop_grace(self, work).to_milliseconds())

    # -- recovery -----------------------------------------------------------------------

    def grant_liveness_check(self, state_machine: sfn.IStateMachine, *holders: str) -> None:
        """Let ``state_machine`` (which runs this section) describe the executions of the
        state machines named ``holders`` - the only IAM the liveness check needs. A separate
        policy, so a state machine may name itself without a dependency cycle."""
        if not self.liveness_check_every or not holders or state_machine.role is None or not self.kind.holds:
            return  # (a rate limit holds nothing: its waiters never ask about a holder)
        stack = Stack.of(self)
        iam.Policy(
            self,
            f"LivenessCheck{len(self._liveness_grants)}",
            roles=[state_machine.role],
            statements=[
                iam.PolicyStatement(actions=["states:DescribeExecution"], resources=executions_of(stack, holders))
            ],
        )
        self._liveness_grants.append(holders)

    def recover_stale_holders(
        self,
        state_machine: sfn.StateMachine,
        *,
        shares_lock_with: Sequence[sfn.IStateMachine] = (),
        logging: bool = True,
    ) -> LockJanitor:
        """Recover the locks of executions of ``state_machine`` that end without releasing:
        create a :class:`LockJanitor` for it and grant the liveness check. One line::

            section.recover_stale_holders(state_machine)

        :param shares_lock_with: other state machines whose executions may hold this lock
            (the liveness check may describe them). Default: none.

        A ``lease`` shorter than the longest run of ``state_machine`` (its timeout; without
        one, a year for STANDARD) gets a synth warning saying what it costs.
        """
        run_s, run = lease_check.machine_max_run(state_machine)
        lease_check.warn_if_shorter(self, lease_s=self._lease_ms / 1000, run_s=run_s, run=run)
        names = [state_machine.state_machine_name] + [m.state_machine_name for m in shares_lock_with]
        self.grant_liveness_check(state_machine, *names)
        self._janitor = LockJanitor(
            self, "Janitor", table=self.table, watched=[state_machine], logging=logging, lock=self.lock,
            detect_cancellation=self.detect_cancellation,
        )
        return self._janitor

    @property
    def janitor(self) -> Optional[LockJanitor]:
        """The janitor :meth:`recover_stale_holders` created (``None`` before, or without it):
        ``LockMonitoring(state_machine=..., sections=[...])`` reads it."""
        return self._janitor

    @property
    def start_state(self) -> sfn.State:
        return self.section_state

    @property
    def end_states(self) -> List[sfn.INextable]:
        return [self.section_state]