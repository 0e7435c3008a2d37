"""The mutex kind (``Lock.mutex``): one holder per key -
:mod:`locked_workflow.state_machines.lock_protocol` wired into a section's states::

    Acquire --ok--> work --> Release --refused--> ReleaseResumed? --> Released | Lost
       |--Lock.Reentered (query error)--> Reentered? --> PassThrough --> work
       (held: the section's Wait-state poll; every error: ReleaseAfterError)

The base of the kinds that keep the mutex's lock item (semaphore, multi-key, record, fair,
read/write): its release, retire and presence are theirs unless they override them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from aws_cdk import aws_stepfunctions as sfn

from locked_workflow.constructs_lib.client_kind import ClientKind
from locked_workflow.constructs_lib.dynamodb_tasks import retry_transient, update_item_task
from locked_workflow.constructs_lib.kinds import shared_hold
from locked_workflow.constructs_lib.kinds.base import AcquireStates, KindBuilder, SectionContext
from locked_workflow.constructs_lib.kinds.value import LockValue, unwrapped_key
from locked_workflow.constructs_lib.section_record import Role
from locked_workflow.state_machines import errors
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines.lock_protocol import jsonata


class MutexKind(KindBuilder):
    """One holder per key."""

    name = "mutex"
    #: Its key may be a read/write lock's (``Lock.shared`` readers own it as a *shared hold*,
    #: which ACQUIRE never takes over): its liveness check reads the whole lock item and frees
    #: a shared hold whose readers are gone (:meth:`shared_hold_branches`).
    meets_shared_holds = True

    def key_expression(self, namespace: str) -> str:
        return protocol.key_expression(self.user_key, namespace)

    def holds_same_lock(self, variable: str) -> str:
        return protocol.holds_key_expression(variable)

    def build_acquire(self, section: SectionContext, lease_ms: int):
        """(the branch's first state, the acquire attempt - retried and caught as a poll -, the
        last state before the work). A re-entered section's acquire signals and is caught
        straight into the work."""
        acquire = self.acquire_task(section, "Acquire", lease_ms, key_jsonata=self.attempt_key(section))
        retry_transient(acquire)
        self.catch_reentered(section, acquire)
        return AcquireStates(first=acquire, attempt=acquire, acquired=acquire)

    def acquire_task(self, section: SectionContext, suffix: str, lease_ms: int, *, key_jsonata: str,
                     reentrant: bool = True) -> sfn.TaskStateBase:
        """The mutex's ACQUIRE on the item ``key_jsonata`` names, as the state ``<section>.<suffix>``
        (recorded as an acquisition; no Retry or Catch yet). ``reentrant``: a re-entered
        section's attempt signals ``Lock.Reentered`` instead of writing."""
        v = section.variables
        acquire = update_item_task(
            section,
            section.state_name(suffix),
            section.table,
            protocol.acquire_arguments(
                lease_ms=lease_ms,
                grace_ms=None,
                stale_owner_jsonata=protocol.stale_owner_expression(v["wait"]),
                reentrant=reentrant,
                key_jsonata=key_jsonata,
            ),
            assign={v["lock"]: jsonata(protocol.lock_variable_expression()), v["wait"]: jsonata("null")},
            outputs=jsonata(self.acquire_outputs),
        )
        section.record(acquire, Role.ACQUISITION, v["lock"])
        return acquire

    @staticmethod
    def catch_reentered(section: SectionContext, acquire: sfn.TaskStateBase) -> None:
        """The acquire's query error is the re-entrancy signal (straight into the work under
        the enclosing hold) - or a fault: never run the work on a fault."""
        v = section.variables
        reentered = sfn.Choice.jsonata(section, "Reentered", state_name=section.state_name("Reentered?"))
        reentered.when(
            sfn.Condition.jsonata(jsonata(protocol.entry_error_is(errors.SIGNAL_REENTERED))),
            sfn.Pass.jsonata(
                section, "PassThrough", state_name=section.state_name("PassThrough"),
                assign={v["lock"]: jsonata(protocol.reentered_lock_expression("$states.input.entry"))},
                outputs=jsonata("$states.input.entry.input"),
            ).next(section.protected),
        ).otherwise(section.rethrow)
        acquire.add_catch(
            reentered,
            errors=[errors.QUERY_EVALUATION_ERROR],
            outputs=jsonata("$merge([$states.errorOutput, {'entry': $states.input}])"),
        )

    def build_release(self, section: SectionContext, lost: sfn.State, left: sfn.State) -> sfn.State:
        return self.build_mutex_release(section, lost, left)

    def build_mutex_release(
        self,
        section: SectionContext,
        lost: sfn.State,
        left: sfn.State,
        *,
        release_task: Optional[Callable[[str, bool, dict], sfn.TaskStateBase]] = None,
        query_error_outputs: str = "$states.input",
    ) -> sfn.State:
        """The mutex's release. A failed condition means the lock is not mine - unless a retried
        release follows one whose response was lost, or a redrive resumed a release whose first
        run applied before the stop (then it was released before anyone could take it over: see
        ``lock_protocol.released_before_takeover_expression``).

        ``release_task(state_name, first, assign)``: the release write (default: the mutex's
        RELEASE), with ``assign`` (``held_assign``); a query error of the first one goes to
        ``left`` with ``query_error_outputs``."""
        v = section.variables

        def mutex_release(state_name: str, first: bool, assign: dict) -> sfn.TaskStateBase:
            return update_item_task(
                section, state_name, section.table,
                protocol.release_arguments(lock_variable=v["lock"], reentrant=first, item=self.item),
                assign=assign,
            )

        release_task = release_task or mutex_release
        name = section.state_name("Release")
        release = release_task(name, True, section.held_assign(name))
        release.add_catch(left, errors=[protocol.QUERY_EVALUATION_ERROR], outputs=jsonata(query_error_outputs))
        name = section.state_name("ReleaseAgain")
        again = release_task(name, False, section.held_assign(name))
        retry_transient(again)
        release.add_catch(again, errors=list(protocol.TRANSIENT_ERRORS), outputs=jsonata("$states.input"))
        released = sfn.Succeed(section, "Released", state_name=section.state_name("Released"))

        def released_if(construct_id: str, expression: str) -> sfn.Choice:
            """A refused release: ``released`` when ``expression`` holds, else ``lost``."""
            return sfn.Choice.jsonata(section, construct_id, state_name=section.state_name(f"{construct_id}?")).when(
                sfn.Condition.jsonata(jsonata(expression)), released).otherwise(lost)

        released_before = released_if("ReleasedBefore", protocol.released_before_takeover_expression(v["lock"], v["done"]))
        again.add_catch(released_before, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
        # a first release refused: the lock was taken over (Lock.Lost) - unless a redrive resumed
        # this release, whose first run may have applied before the execution stopped
        resumed = released_if("ReleaseResumed", protocol.resumed_release_applied_expression(v["lock"], v["done"]))
        release.add_catch(resumed, errors=[protocol.CONDITION_FAILED], outputs=jsonata("$states.input"))
        return release

    def build_release_after_error(self, section: SectionContext, rethrow: sfn.State) -> sfn.State:
        name = section.state_name("ReleaseAfterError")
        release_after_error = update_item_task(
            section,
            name,
            section.table,
            protocol.release_arguments(lock_variable=section.variables["lock"], reentrant=True, item=self.item),
            assign=section.held_assign(name),
        )
        retry_transient(release_after_error)
        release_after_error.add_catch(
            rethrow,
            errors=[protocol.CONDITION_FAILED, protocol.QUERY_EVALUATION_ERROR],
            outputs=jsonata("$states.input"),
        )
        return release_after_error.next(rethrow)

    def build_retire(self, section: SectionContext, then: sfn.State) -> sfn.State:
        """After a task refused to resume (a redrive): the holder retires its own acquisition
        (``lock_protocol.retire_arguments``), then ``then``. A re-entered hold is the
        enclosing section's to retire: nothing is written."""
        retire = update_item_task(
            section, section.state_name("Retire"), section.table,
            protocol.retire_arguments(lock_variable=section.variables["lock"], reentrant=True, item=self.item),
            outputs=jsonata("$states.input"),
        )
        retry_transient(retire)
        retire.add_catch(then, errors=[errors.CONDITION_FAILED, errors.QUERY_EVALUATION_ERROR],
                         outputs=jsonata("$states.input"))
        return retire.next(then)

    def shared_hold_expression(self, section: SectionContext, item: str) -> str:
        """JSONata over the lock item a liveness check read: what it needs of a shared hold
        there (null if none owns it; see ``shared_hold.shared_hold_expression``)."""
        turn = protocol.liveness_check_number_expression(section.variables["wait"], section.liveness_check_every)
        return shared_hold.shared_hold_expression(item, turn)

    def shared_hold_branches(self, section: SectionContext, *, holder_variable: str,
                             then: sfn.State) -> list:
        """The liveness check's branches for a key a shared hold owns (``shared_hold.shared_hold_sweep``)."""
        return shared_hold.shared_hold_sweep(section, holder_variable=holder_variable, then=then)


@dataclass(frozen=True, init=False)
class MutexLock(LockValue):
    """``Lock.mutex(key)``: one holder per key."""

    key: str
    kind = "mutex"
    factory = "mutex(key)"
    client_kind = ClientKind.MUTEX

    @classmethod
    def of(cls, key: str) -> "MutexLock":
        """``Lock.mutex``'s value (``key``: a JSONata template)."""
        return cls(unwrapped_key(key))

    def builder(self) -> KindBuilder:
        return MutexKind(self.key)
