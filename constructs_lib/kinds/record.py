"""The record kind (``Lock.on_record``): the lock kept on the record it protects -
:mod:`locked_workflow.state_machines.record_protocol` wired into a section's states::

    Acquire (the lock's attributes) --> ReadRecord --> work --> Release (with the work's recordUpdate)
       ReadRecord refused (missing, too large) --> FreeRefused --> Refused? --> Lock.RecordMissing | ...
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from aws_cdk import Stack, aws_dynamodb as dynamodb, aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks

from locked_workflow.constructs_lib import prop_types
from locked_workflow.constructs_lib.custom_state import JsonataCustomState
from locked_workflow.constructs_lib.dynamodb_tasks import attribute_value, retry_transient, update_item_task
from locked_workflow.constructs_lib.kinds.base import AcquireStates, KindBuilder, SectionContext
from locked_workflow.constructs_lib.section_record import Role
from locked_workflow.constructs_lib.kinds.mutex import MutexKind
from locked_workflow.constructs_lib.kinds.value import LockValue, unwrapped_key
from locked_workflow.constructs_lib.lock_table import LockTable, key_schema
from locked_workflow.state_machines import errors
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines import record_protocol as record
from locked_workflow.state_machines.lock_protocol import ENTRY, jsonata


class RecordKind(MutexKind):
    """The lock kept on the record it protects (see record_protocol)."""

    name = "record"
    #: Its item is the user's record (a read/write lock never owns it), and its liveness
    #: check must not read the record whole (a state's result is limited to 256 KiB).
    meets_shared_holds = False
    lives_on_records = True

    def __init__(self, user_key: str, *, key_attribute: str, must_exist: bool) -> None:
        super().__init__(user_key)
        self.item = record.record_item(key_attribute)
        self.must_exist = must_exist

    def key_expression(self, namespace: str) -> str:
        return protocol.key_expression(self.user_key, namespace="", namespaced=False)

    def holds_same_lock(self, variable: str) -> str:
        return "false"  # not re-entrant: the inner section's record update would be lost

    def build_acquire(self, section: SectionContext, lease_ms: int):
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
        section.record(acquire, Role.ACQUISITION, v["lock"])
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
        return AcquireStates(first=acquire, attempt=acquire, acquired=read)

    def build_release(self, section: SectionContext, lost: sfn.State, left: sfn.State) -> sfn.State:
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
        return self.build_mutex_release(
            section,
            lost, section.release_after_error, release_task=release_with_update,
            query_error_outputs=(
                f"{{'Error': '{error}', 'Cause': "
                f"{protocol.message_of_expression(error).replace('$states.input.Cause', '$states.errorOutput.Cause')}}}"
            ),
        )


@dataclass(frozen=True, init=False)
class RecordLock(LockValue):
    """``Lock.on_record(table, key)``: the lock kept on the record it protects."""

    key: str
    table: dynamodb.ITable
    key_attribute: str
    must_exist: bool
    kind = "record"
    factory = "on_record(table, key)"

    @classmethod
    def of(cls, table: Union[dynamodb.ITable, LockTable], key: str, *, key_attribute: Optional[str],
           must_exist: bool) -> "RecordLock":
        """``Lock.on_record``'s value (its props as the factory documents them)."""
        table = prop_types.table("table", table, required=True)
        if not isinstance(must_exist, bool):
            raise TypeError(f"`must_exist` must be True or False, got: {must_exist!r}")
        return cls(unwrapped_key(key), table, _record_key_attribute(table, key_attribute), must_exist)

    @property
    def record_table(self) -> Optional[dynamodb.ITable]:
        return self.table

    def builder(self) -> KindBuilder:
        return RecordKind(self.key, key_attribute=self.key_attribute, must_exist=self.must_exist)


def _record_key_attribute(table: dynamodb.ITable, given: Optional[str]) -> str:
    """The record table's partition key: read from its schema when the app defines it (a
    ``Table`` or a ``TableV2``), else ``given``. It must be a string and the only key (no sort
    key)."""
    schema = key_schema(table)
    if schema is None:
        if not given:
            raise ValueError(
                "`key_attribute` must name the record table's partition key when its schema "
                "cannot be read (an imported table), got: None"
            )
        return given
    partition = schema.partition
    if partition.type != "S":
        raise ValueError(f"`table` must have a string partition key (the lock key), got: {schema.shown()}")
    if schema.sort is not None:
        raise ValueError(
            f"`table` must have no sort key (one record per lock key), got: sort key {schema.sort.name}"
        )
    if given is not None and given != partition.name:
        raise ValueError(
            f"`key_attribute` must be the table's partition key {partition.name!r}, got: {given!r}"
        )
    return partition.name
