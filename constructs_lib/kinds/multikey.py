"""The multi-key kind (``Lock.keys``): every key of a list, all or nothing, in one transaction -
:mod:`locked_workflow.state_machines.multikey_protocol` wired into a section's states::

    Reentered? --> PassThrough --> work
       \\--> Acquire (transactWriteItems) --> ReadFences (transactGetItems) --> work
    Release (one transaction) --refused--> ReleaseEach (a Map: key by key) --> AnyLost?
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from aws_cdk import aws_stepfunctions as sfn

from locked_workflow.constructs_lib.dynamodb_tasks import retry_transient, retry_transient_sdk, sdk_task, update_item_task
from locked_workflow.constructs_lib.kinds.base import AcquireStates, KindBuilder, SectionContext, lost_cause_expression
from locked_workflow.constructs_lib.section_record import Role
from locked_workflow.constructs_lib.kinds.mutex import MutexKind
from locked_workflow.constructs_lib.kinds.value import LockValue, unwrapped_key
from locked_workflow.state_machines import errors
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines import multikey_protocol as multikey
from locked_workflow.state_machines.lock_protocol import ENTRY, jsonata


class MultiKeyKind(MutexKind):
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

    def inspect_key(self, section: SectionContext) -> str:
        return multikey.inspect_key_expression(section.variables["wait"], section.liveness_check_every)

    def build_acquire(self, section: SectionContext, lease_ms: int):
        """Reentered? -> (pass through | Acquire (transaction) -> ReadFences)."""
        v = section.variables
        table_name = section.table.table_name
        acquire = sdk_task(
            section, section.state_name("Acquire"), section.table, "dynamodb:transactWriteItems",
            multikey.acquire_arguments(
                table_name=table_name, lease_ms=lease_ms,
                stale_owner_jsonata=protocol.stale_owner_expression(v["wait"]),
            ),
            assign={v["lock"]: jsonata(multikey.unread_lock_expression()), v["wait"]: jsonata("null")},
            output=jsonata("$states.input"),
        )
        retry_transient_sdk(acquire)
        read = sdk_task(
            section, section.state_name("ReadFences"), section.table, "dynamodb:transactGetItems",
            multikey.read_fences_arguments(table_name=table_name),
            assign={v["lock"]: jsonata(multikey.lock_variable_expression(v["lock"]))},
            output=jsonata(f"{ENTRY}.input"),
        )
        section.record(read, Role.ACQUISITION, v["lock"])
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
        return AcquireStates(first=entry, attempt=acquire, acquired=read)

    def _release_each(self, section: SectionContext, suffix: str, *, count_lost: bool) -> sfn.Map:
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

    @staticmethod
    def _release_transaction(section: SectionContext, state: str) -> sfn.State:
        """RELEASE of every key in one transaction (a release, or the release after an error)."""
        name = section.state_name(state)
        return sdk_task(
            section, name, section.table, "dynamodb:transactWriteItems",
            multikey.release_arguments(table_name=section.table.table_name, lock_variable=section.variables["lock"],
                                       reentrant=True),
            assign=section.held_assign(name), output=jsonata("$states.input"),
        )

    def build_release(self, section: SectionContext, lost: sfn.State, left: sfn.State) -> sfn.State:
        """Release every key in one transaction; if refused or unknown, key by key."""
        v = section.variables
        release = self._release_transaction(section, "Release")
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

    def lost_cause(self, lock_variable: str) -> str:
        """Its keys and their fences (``keys``, ``fences``: stored key -> fence)."""
        return lost_cause_expression(f"$string({lock_variable}.keys)", f"$string({lock_variable}.fences)")

    def presence_task(self, section: SectionContext) -> tuple[str, dict]:
        """One token on every key the hold took, in one transaction."""
        return "transactWriteItems", multikey.present_arguments(
            table_name=section.table.table_name, lock_variable=section.variables["lock"])

    def presence_key(self, section: SectionContext) -> str:
        return multikey.first_key_expression(section.variables["lock"])

    def build_retire(self, section: SectionContext, then: sfn.State) -> sfn.State:
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

    def build_release_after_error(self, section: SectionContext, rethrow: sfn.State) -> sfn.State:
        release = self._release_transaction(section, "ReleaseAfterError")
        release.add_catch(rethrow, errors=[errors.QUERY_EVALUATION_ERROR], outputs=jsonata("$states.input"))
        each = self._release_each(section, "ReleaseEachAfterError", count_lost=False)
        release.add_catch(
            each.next(rethrow),
            errors=["States.ALL"],
            outputs=jsonata("$states.input"),
        )
        release.next(rethrow)
        return release


@dataclass(frozen=True, init=False)
class KeysLock(LockValue):
    """``Lock.keys(keys)``: every key of a list, all or nothing."""

    keys: str
    kind = "multi-key"
    factory = "keys(keys)"

    @classmethod
    def of(cls, keys: str) -> "KeysLock":
        """``Lock.keys``'s value (``keys``: a JSONata template)."""
        return cls(unwrapped_key(keys, "keys"))

    def builder(self) -> KindBuilder:
        return MultiKeyKind(self.keys)
