"""The state builders of the lock kinds a :class:`~locked_workflow.constructs_lib.lock.Lock`
value names, each wiring its own protocol module into a section's states (a section makes
one builder per section from its ``lock``):

- :class:`Mutex` (``Lock.mutex``): one holder per key - :mod:`locked_workflow.state_machines.lock_protocol`;
- :class:`Semaphore` (``Lock.semaphore``): N holders per key -
  :mod:`locked_workflow.state_machines.semaphore_protocol`;
- :class:`MultiKey` (``Lock.keys``): every key of a list, all or nothing -
  :mod:`locked_workflow.state_machines.multikey_protocol`;
- :class:`RecordLock` (``Lock.on_record``): the lock on the protected record itself -
  :mod:`locked_workflow.state_machines.record_protocol`;
- :class:`~locked_workflow.constructs_lib.fair_mutex.FairMutex` (``Lock.fair``): a mutex with a FIFO queue
  and wake-up handoff - :mod:`locked_workflow.state_machines.fair_protocol`.

The section builds what all kinds share (entry, wait loop, liveness check, error path); a kind
supplies the key, the acquire, the release and what a nested section compares.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Protocol, Sequence

from aws_cdk import Duration, Stack, aws_dynamodb as dynamodb, aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks

from locked_workflow.constructs_lib.custom_state import JsonataCustomState
from locked_workflow.constructs_lib.dynamodb_tasks import attribute_value, retry_transient, update_item_task
from locked_workflow.state_machines import errors
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines import multikey_protocol as multikey
from locked_workflow.state_machines import record_protocol as record
from locked_workflow.state_machines import semaphore_protocol as semaphore
from locked_workflow.state_machines.lock_protocol import ENTRY, jsonata
from locked_workflow.state_machines.retry_policy import TRANSIENT_RETRY



class LockedSection(Protocol):
    """What a kind's builder uses of the section it builds states for (a
    :class:`~locked_workflow.constructs_lib.locked_section.LockedSection`): the kinds depend on
    this contract, not on the section's module."""

    table: dynamodb.ITable
    variables: Mapping[str, str]
    protected: sfn.State
    rethrow: sfn.State
    wait_policy: protocol.WaitPolicy
    liveness_check_every: int
    max_wait_ms: int
    release_after_error: sfn.State

    def state_name(self, suffix: str) -> str: ...

    def held_assign(self, when: Optional[str] = ...) -> dict: ...

    def after_acquire_failure(self, state: sfn.TaskStateBase) -> None: ...

    def build_mutex_release(self, lost: sfn.State, left: sfn.State, *, release_task: Any = ...,
                            query_error_outputs: str = ...,
                            after_release: Optional[sfn.IChainable] = ...) -> sfn.State: ...

    def build_mutex_release_after_error(self, rethrow: sfn.State) -> sfn.State: ...


class Mutex:
    """One holder per key."""

    name = "mutex"
    key_field = "key"
    #: Where the lock attributes live.
    item = protocol.LOCK_TABLE_ITEM
    #: The acquire's error when the lock is held (a poll).
    refused = errors.CONDITION_FAILED
    #: The hold registers a presence token on its one lock item (``detect_cancellation``).
    presence = True
    #: ... on a row of its own instead (the janitor deletes an ended execution's rows).
    presence_rows = False
    #: Its key may be a read/write lock's (``Lock.shared`` readers own it as a *shared hold*,
    #: which ACQUIRE never takes over): its liveness check reads the whole lock item and frees
    #: a shared hold whose readers are gone (:meth:`shared_hold_branches`).
    meets_shared_holds = True
    #: Its acquisitions are held until released (a rate limit's admissions are not: no janitor,
    #: no liveness check).
    holds = True
    #: Its waiters park on a task token (woken by ``SendTaskSuccess``) instead of polling the
    #: lock item in Wait states.
    parks_on_token = False
    #: The form an EXPRESS machine runs of a parking kind: its waiters poll, and its hold keeps
    #: no presence branch.
    polling = False
    #: It builds its waiters' path itself (its queue, its park or its computed Wait), instead
    #: of the section's Wait-state poll.
    builds_own_wait_path = False
    #: The acquire's output: the work's input (a kind with states between them may keep the
    #: entry record, ``$states.input``, and give the work its input itself).
    acquire_outputs = f"{ENTRY}.input"

    def __init__(self, user_key: str) -> None:
        self.user_key = user_key

    def key_expression(self, namespace: str) -> str:
        return protocol.key_expression(self.user_key, namespace)

    def holds_same_lock(self, variable: str) -> str:
        return protocol.holds_key_expression(variable)

    def entry_fields(self, enclosing_lock_variables: Sequence[str] = ()) -> Mapping[str, str]:
        """Fields the kind adds to the entry record (``$key``: the stored key or keys;
        ``enclosing_lock_variables``: the lock variables of enclosing sections on this table)."""
        return {}

    def attempt_key(self, section: "LockedSection") -> str:
        return f"{ENTRY}.key"

    def inspect_key(self, section: "LockedSection") -> str:
        return f"{ENTRY}.key"

    def build_acquire(self, section: "LockedSection", lease_ms: int):
        """(the branch's first state, the acquire attempt - retried and caught as a poll -, the
        last state before the work). A re-entered section's acquire signals and is caught
        straight into the work."""
        v = section.variables
        acquire = update_item_task(
            section,
            section.state_name("Acquire"),
            section.table,
            protocol.acquire_arguments(
                lease_ms=lease_ms,
                grace_ms=None,
                stale_owner_jsonata=protocol.stale_owner_expression(v["wait"]),
                reentrant=True,
                key_jsonata=self.attempt_key(section),
            ),
            assign={v["lock"]: jsonata(protocol.lock_variable_expression()), v["wait"]: jsonata("null")},
            outputs=jsonata(self.acquire_outputs),
        )
        retry_transient(acquire)
        self.catch_reentered(section, acquire)
        return acquire, acquire, acquire

    @staticmethod
    def catch_reentered(section: "LockedSection", acquire: sfn.TaskStateBase) -> None:
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

    def build_release(self, section: "LockedSection", lost: sfn.State, left: sfn.State) -> sfn.State:
        return section.build_mutex_release(lost, left)

    def shared_hold_expression(self, section: "LockedSection", item: str) -> str:
        """JSONata over the lock item a liveness check read: what it needs of a shared hold
        there (null if none owns it; see ``shared_kind.shared_hold_expression``)."""
        from locked_workflow.constructs_lib import shared_kind  # (it builds on this module)

        turn = protocol.liveness_check_number_expression(section.variables["wait"], section.liveness_check_every)
        return shared_kind.shared_hold_expression(item, turn)

    def shared_hold_branches(self, section: "LockedSection", *, holder_variable: str,
                             then: sfn.State) -> list:
        """The liveness check's branches for a key a shared hold owns (``shared_kind.shared_hold_sweep``)."""
        from locked_workflow.constructs_lib import shared_kind

        return shared_kind.shared_hold_sweep(section, holder_variable=holder_variable, then=then)

    def presence_task(self, section: "LockedSection") -> tuple[str, dict]:
        """The hold's presence registration: (aws-sdk DynamoDB action, its arguments)."""
        return "updateItem", {
            "TableName": section.table.table_name,
            **protocol.present_arguments(lock_variable=section.variables["lock"], item=self.item),
        }

    def presence_key(self, section: "LockedSection") -> str:
        """JSONata: the item where the hold marks its departure and reads its token back."""
        return f"${section.variables['lock']}.key"

    def depart_arguments(self, section: "LockedSection") -> dict:
        """The hold's departure (its work is over: no token may be registered any more) on
        :meth:`presence_key`'s item: the arguments of an UpdateItem (all but the table)."""
        return protocol.depart_arguments(lock_variable=section.variables["lock"], item=self.item,
                                         key_jsonata=self.presence_key(section))

    def build_release_after_error(self, section: "LockedSection", rethrow: sfn.State) -> sfn.State:
        return section.build_mutex_release_after_error(rethrow)

    def build_retire(self, section: "LockedSection", then: sfn.State) -> sfn.State:
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


class Semaphore(Mutex):
    """``limit`` holders per key: a mutex on one of ``limit`` slots (see semaphore_protocol)."""

    name = "semaphore"
    #: Its items are slots (``<key>#<slot>``): never a read/write lock's item.
    meets_shared_holds = False

    def __init__(self, user_key: str, limit: int) -> None:
        super().__init__(user_key)
        self.limit = limit

    def key_expression(self, namespace: str) -> str:
        return protocol.key_expression(self.user_key, namespace, semaphore.reserve_bytes(self.limit))

    def holds_same_lock(self, variable: str) -> str:
        return semaphore.holds_slot_expression(variable)

    def entry_fields(self, enclosing_lock_variables: Sequence[str] = ()) -> Mapping[str, str]:
        return {"slot": semaphore.first_slot_expression(self.limit)}

    def attempt_key(self, section: "LockedSection") -> str:
        attempts = section.wait_policy.retries_for(section.max_wait_ms / 1000) + 1
        return semaphore.attempt_key_expression(
            limit=self.limit, wait_variable=section.variables["wait"], attempts_per_round=attempts
        )

    def inspect_key(self, section: "LockedSection") -> str:
        return semaphore.inspect_key_expression(
            limit=self.limit, wait_variable=section.variables["wait"], every=section.liveness_check_every
        )


class MultiKey(Mutex):
    """Every key of a list, all or nothing, in one transaction (see multikey_protocol)."""

    name = "multi-key"
    key_field = "keys"
    refused = errors.TRANSACTION_CANCELED

    def key_expression(self, namespace: str) -> str:
        return multikey.keys_expression(self.user_key, namespace)

    def holds_same_lock(self, variable: str) -> str:
        return multikey.holds_keys_expression(variable)

    def entry_fields(self, enclosing_lock_variables: Sequence[str] = ()) -> Mapping[str, str]:
        inherited = multikey.inherited_expression(enclosing_lock_variables)
        return {
            multikey.INHERITED: inherited,
            multikey.ACQUIRE_KEYS: multikey.acquire_keys_expression(inherited=f"({inherited})"),
        }

    def inspect_key(self, section: "LockedSection") -> str:
        return multikey.inspect_key_expression(section.variables["wait"], section.liveness_check_every)

    def build_acquire(self, section: "LockedSection", lease_ms: int):
        """Reentered? -> (pass through | Acquire (transaction) -> ReadFences)."""
        v = section.variables
        table_name = section.table.table_name
        acquire = sdk_task(
            section, section.state_name("Acquire"), "dynamodb:transactWriteItems",
            multikey.acquire_arguments(
                table_name=table_name, lease_ms=lease_ms,
                stale_owner_jsonata=protocol.stale_owner_expression(v["wait"]),
            ),
            assign={v["lock"]: jsonata(multikey.unread_lock_expression()), v["wait"]: jsonata("null")},
            output=jsonata("$states.input"),
        )
        retry_transient_sdk(acquire)
        read = sdk_task(
            section, section.state_name("ReadFences"), "dynamodb:transactGetItems",
            multikey.read_fences_arguments(table_name=table_name),
            assign={v["lock"]: jsonata(multikey.lock_variable_expression(v["lock"]))},
            output=jsonata(f"{ENTRY}.input"),
        )
        retry_transient_sdk(read)
        section.after_acquire_failure(read)  # holding every key: release them, then fail
        acquire.next(read)
        entry = sfn.Choice.jsonata(section, "Reentered", state_name=section.state_name("Reentered?"))
        entry.when(
            sfn.Condition.jsonata(jsonata(f"$exists({ENTRY}.reentered)")),
            sfn.Pass.jsonata(
                section, "PassThrough", state_name=section.state_name("PassThrough"),
                assign={v["lock"]: jsonata(protocol.reentered_lock_expression())},
                outputs=jsonata(f"{ENTRY}.input"),
            ).next(section.protected),
        ).otherwise(acquire)
        return entry, acquire, read

    def _release_each(self, section: "LockedSection", suffix: str, *, count_lost: bool) -> sfn.Map:
        """A Map releasing every key on its own (the mutex's RELEASE), never stopping at one."""
        one = update_item_task(
            section, section.state_name(f"{suffix}Key"), section.table,
            protocol.release_arguments(lock_variable="", lock_jsonata="$states.input"),
            outputs=jsonata("{'lost': false}"),
        )
        retry_transient(one)
        one.add_catch(
            sfn.Succeed(section, f"{suffix}KeyRefused", state_name=section.state_name(f"{suffix}KeyRefused")),
            errors=[errors.CONDITION_FAILED] if count_lost else ["States.ALL"],
            outputs=jsonata(multikey.lost_expression() if count_lost else "{'lost': false}"),
        )
        lost = section.variables["lock"] + "Lost"
        return sfn.Map.jsonata(
            section, suffix, state_name=section.state_name(suffix),
            items=sfn.ProvideItems.jsonata(jsonata(multikey.release_each_items_expression(section.variables["lock"]))),
            max_concurrency=10,
            assign={lost: jsonata(multikey.any_lost_expression())} if count_lost else None,
            outputs=jsonata("$states.input"),
        ).item_processor(one)

    def build_release(self, section: "LockedSection", lost: sfn.State, left: sfn.State) -> sfn.State:
        """Release every key in one transaction; if refused or unknown, key by key."""
        v = section.variables
        release = sdk_task(
            section, section.state_name("Release"), "dynamodb:transactWriteItems",
            multikey.release_arguments(table_name=section.table.table_name, lock_variable=v["lock"], reentrant=True),
            assign=section.held_assign(), output=jsonata("$states.input"),
        )
        release.add_catch(left, errors=[errors.QUERY_EVALUATION_ERROR], outputs=jsonata("$states.input"))
        each = self._release_each(section, "ReleaseEach", count_lost=True)
        any_lost = sfn.Choice.jsonata(section, "AnyLost", state_name=section.state_name("AnyLost?"))
        any_lost.when(sfn.Condition.jsonata(jsonata(f"${v['lock']}Lost")), lost)
        any_lost.otherwise(sfn.Succeed(section, "Released", state_name=section.state_name("Released")))
        release.add_catch(
            each.next(any_lost), errors=[errors.TRANSACTION_CANCELED, *errors.SDK_TRANSIENT_ERRORS],
            outputs=jsonata("$states.input"),
        )
        return release

    def presence_task(self, section: "LockedSection") -> tuple[str, dict]:
        """One token on every key the hold took, in one transaction."""
        return "transactWriteItems", multikey.present_arguments(
            table_name=section.table.table_name, lock_variable=section.variables["lock"])

    def presence_key(self, section: "LockedSection") -> str:
        return multikey.first_key_expression(section.variables["lock"])

    def build_retire(self, section: "LockedSection", then: sfn.State) -> sfn.State:
        """Retire every key this hold took (each with the mutex's RETIRE), then ``then``."""
        one = update_item_task(
            section, section.state_name("RetireKey"), section.table,
            protocol.retire_arguments(lock_variable="", lock_jsonata="$states.input"),
            outputs=jsonata("{}"),
        )
        retry_transient(one)
        one.add_catch(sfn.Succeed(section, "RetireKeyRefused", state_name=section.state_name("RetireKeyRefused")),
                      errors=["States.ALL"])
        each = sfn.Map.jsonata(
            section, "Retire", state_name=section.state_name("Retire"),
            items=sfn.ProvideItems.jsonata(jsonata(
                f"$exists(${section.variables['lock']}.reentered) ? [] : "
                + multikey.release_each_items_expression(section.variables["lock"])
            )),
            max_concurrency=10, outputs=jsonata("$states.input"),
        ).item_processor(one)
        each.add_catch(then, errors=["States.ALL"], outputs=jsonata("$states.input"))
        return each.next(then)

    def build_release_after_error(self, section: "LockedSection", rethrow: sfn.State) -> sfn.State:
        v = section.variables
        release = sdk_task(
            section, section.state_name("ReleaseAfterError"), "dynamodb:transactWriteItems",
            multikey.release_arguments(table_name=section.table.table_name, lock_variable=v["lock"], reentrant=True),
            assign=section.held_assign(), output=jsonata("$states.input"),
        )
        release.add_catch(rethrow, errors=[errors.QUERY_EVALUATION_ERROR], outputs=jsonata("$states.input"))
        each = self._release_each(section, "ReleaseEachAfterError", count_lost=False)
        release.add_catch(
            each.next(rethrow),
            errors=["States.ALL"],
            outputs=jsonata("$states.input"),
        )
        release.next(rethrow)
        return release


#: IAM action each aws-sdk call of the lock needs on the lock table: a transaction is
#: authorized per action inside it.
_IAM_ACTIONS = {"transactWriteItems": "dynamodb:UpdateItem", "transactGetItems": "dynamodb:GetItem"}


class RecordLock(Mutex):
    """The lock kept on the record it protects (see record_protocol)."""

    name = "record"
    #: Its item is the user's record (a read/write lock never owns it), and its liveness
    #: check must not read the record whole (a state's result is limited to 256 KiB).
    meets_shared_holds = False

    def __init__(self, user_key: str, *, key_attribute: str, must_exist: bool) -> None:
        super().__init__(user_key)
        self.item = record.record_item(key_attribute)
        self.must_exist = must_exist

    def key_expression(self, namespace: str) -> str:
        return protocol.key_expression(self.user_key, namespace="", namespaced=False)

    def holds_same_lock(self, variable: str) -> str:
        return "false"  # not re-entrant: the inner section's record update would be lost

    def build_acquire(self, section: "LockedSection", lease_ms: int):
        """Acquire (the lock's attributes and the write units: bounded) -> ReadRecord (only a
        record of at most ``RECORD_SIZE_LIMIT_KB``) -> the work. No record (``must_exist``) or
        too large: free the lock just taken, then fail with the typed error."""
        v = section.variables
        arguments = protocol.acquire_arguments(
            lease_ms=lease_ms, grace_ms=None,
            stale_owner_jsonata=protocol.stale_owner_expression(v["wait"]),
            item=self.item,
        )
        arguments.update(ReturnValues="UPDATED_NEW", ReturnConsumedCapacity="INDEXES")
        acquire = update_item_task(
            section, section.state_name("Acquire"), section.table, arguments,
            assign={v["lock"]: jsonata(record.acquired_lock_expression(self.item)), v["wait"]: jsonata("null")},
            outputs=jsonata("$states.input"),
        )
        retry_transient(acquire)
        read = tasks.DynamoGetItem.jsonata(
            section, section.state_name("ReadRecord"), table=section.table,
            key={self.item.key_attribute: attribute_value({"S": jsonata(record.read_key_expression(v["lock"]))})},
            consistent_read=True,
            assign={v["lock"]: jsonata(record.lock_variable_expression(
                self.item, lock_variable=v["lock"], must_exist=self.must_exist))},
            outputs=jsonata(f"{ENTRY}.input"),
        )
        retry_transient(read)
        acquire.next(read)
        free = update_item_task(
            section, section.state_name("FreeRefused"), section.table,
            protocol.release_arguments(lock_variable="", lock_jsonata="$states.input.stub", item=self.item),
            outputs=jsonata("$states.input.error"),
        )
        retry_transient(free)
        why = sfn.Choice.jsonata(section, "Refused", state_name=section.state_name("Refused?"))
        for error in (errors.ERROR_RECORD_MISSING, errors.ERROR_RECORD_TOO_LARGE):
            why.when(
                sfn.Condition.jsonata(jsonata(protocol.entry_error_is(error))),
                sfn.Fail.jsonata(section, error.split(".")[-1], state_name=section.state_name(error.split(".")[-1]),
                                 error=error, cause=jsonata(protocol.message_of_expression(error))),
            )
        why.otherwise(section.rethrow)
        free.add_catch(why, errors=["States.ALL"], outputs=jsonata("$states.input.error"))
        free.next(why)
        read.add_catch(
            free, errors=[errors.QUERY_EVALUATION_ERROR],
            outputs=jsonata(f"{{'stub': {record.refused_lock_expression()}, 'error': $states.errorOutput}}"),
        )
        section.after_acquire_failure(read)  # any other error of the read: release, then fail
        return acquire, acquire, read

    def build_release(self, section: "LockedSection", lost: sfn.State, left: sfn.State) -> sfn.State:
        """The release writes the work's ``recordUpdate``; a bad one is released without it."""
        v = section.variables

        def release_with_update(state_name: str, first: bool, assign: dict) -> sfn.CustomState:
            state = JsonataCustomState(section, state_name, state_json={
                "Type": "Task",
                "QueryLanguage": "JSONata",
                "Resource": f"arn:{Stack.of(section).partition}:states:::dynamodb:updateItem",
                "Arguments": {
                    **record.release_with_update_arguments(
                        table_name=section.table.table_name, item=self.item, lock_variable=v["lock"],
                    ),
                    "ReturnValues": "NONE",  # bounded: the updated values could be the record's
                },
                "Assign": assign,
                "Output": jsonata("$states.input"),
            })
            # DynamoDB refused the write (nothing written): release without it, then fail
            return state.add_catch(
                section.release_after_error, errors=list(errors.REFUSED_WRITE_ERRORS),
                outputs=jsonata(record.refused_update_outputs_expression()),
            )

        error = errors.ERROR_INVALID_UPDATE
        return section.build_mutex_release(
            lost, section.release_after_error, release_task=release_with_update,
            query_error_outputs=(
                f"{{'Error': '{error}', 'Cause': "
                f"{protocol.message_of_expression(error).replace('$states.input.Cause', '$states.errorOutput.Cause')}}}"
            ),
        )


def sdk_task(
    section: "LockedSection", state_name: str, api: str, arguments: dict, *,
    assign: Mapping[str, str] | None = None, output: str | None = None,
) -> tasks.CallAwsService:
    """An aws-sdk DynamoDB call on the lock table (``api``: e.g. ``dynamodb:transactWriteItems``)."""
    service, action = api.split(":")
    return tasks.CallAwsService.jsonata(
        section, state_name, service=service, action=action, parameters=arguments,
        iam_action=_IAM_ACTIONS[action], iam_resources=[section.table.table_arn],
        assign=dict(assign) if assign else None, outputs=output,
    )


def retry_transient_sdk(state: sfn.TaskStateBase) -> None:
    """Retry the protocol's transient errors, as the aws-sdk integration names them."""
    r = TRANSIENT_RETRY
    state.add_retry(
        errors=list(errors.SDK_TRANSIENT_ERRORS),
        interval=Duration.seconds(r.interval_s),
        backoff_rate=r.backoff_rate,
        max_attempts=r.max_attempts,
        max_delay=Duration.seconds(r.max_delay_s),
        jitter_strategy=sfn.JitterType.FULL,
    )
