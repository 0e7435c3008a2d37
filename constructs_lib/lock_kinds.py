"""The lock kinds a :class:`~constructs_lib.locked_workflow.LockedSection` can take, each wiring
its own protocol module into the section's states:

- :class:`Mutex` (``lock_key``): one holder per key - :mod:`state_machines.lock_protocol`;
- :class:`Semaphore` (``lock_key`` + ``limit=N``): N holders per key -
  :mod:`state_machines.semaphore_protocol`;
- :class:`MultiKey` (``lock_keys``): every key of a list, all or nothing -
  :mod:`state_machines.multikey_protocol`.

The section builds what all kinds share (entry, wait loop, liveness check, error path); a kind
supplies the key, the acquire, the release and what a nested section compares.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from aws_cdk import Duration, aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks

from constructs_lib.dynamodb_tasks import retry_transient, update_item_task
from state_machines import lock_protocol as protocol
from state_machines import multikey_protocol as multikey
from state_machines import semaphore_protocol as semaphore
from state_machines.lock_protocol import ENTRY, jsonata

if TYPE_CHECKING:  # pragma: no cover
    from constructs_lib.locked_workflow import LockedSection


class Mutex:
    """One holder per key."""

    name = "mutex"
    key_field = "key"
    #: The acquire's error when the lock is held (a poll).
    refused = protocol.CONDITION_FAILED

    def __init__(self, user_key: str) -> None:
        self.user_key = user_key

    def key_expression(self, namespace: str) -> str:
        return protocol.key_expression(self.user_key, namespace)

    def holds_same_lock(self, variable: str) -> str:
        return protocol.holds_key_expression(variable)

    def entry_fields(self) -> Mapping[str, str]:
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
            section._name("Acquire"),
            section.table,
            protocol.acquire_arguments(
                lease_ms=lease_ms,
                grace_ms=None,
                stale_owner_jsonata=protocol.stale_owner_expression(v["wait"]),
                reentrant=True,
                key_jsonata=self.attempt_key(section),
            ),
            assign={v["lock"]: jsonata(protocol.lock_variable_expression()), v["wait"]: jsonata("null")},
            outputs=jsonata(f"{ENTRY}.input"),
        )
        retry_transient(acquire)
        acquire.add_catch(
            section.protected,
            errors=[protocol.QUERY_EVALUATION_ERROR],
            assign={v["lock"]: jsonata(protocol.reentered_lock_expression())},
            outputs=jsonata(f"{ENTRY}.input"),
        )
        return acquire, acquire, acquire

    def build_release(self, section: "LockedSection", lost: sfn.State, left: sfn.State) -> sfn.State:
        return section.build_mutex_release(lost, left)

    def build_release_after_error(self, section: "LockedSection", rethrow: sfn.State) -> sfn.State:
        return section.build_mutex_release_after_error(rethrow)


class Semaphore(Mutex):
    """``limit`` holders per key: a mutex on one of ``limit`` slots (see semaphore_protocol)."""

    name = "semaphore"

    def __init__(self, user_key: str, limit: int) -> None:
        super().__init__(user_key)
        self.limit = limit

    def key_expression(self, namespace: str) -> str:
        return protocol.key_expression(self.user_key, namespace, semaphore.reserve_bytes(self.limit))

    def holds_same_lock(self, variable: str) -> str:
        return semaphore.holds_slot_expression(variable)

    def entry_fields(self) -> Mapping[str, str]:
        return {"slot": semaphore.first_slot_expression(self.limit)}

    def attempt_key(self, section: "LockedSection") -> str:
        attempts = section.wait_policy.retries_for(section._max_wait_ms / 1000) + 1
        return semaphore.attempt_key_expression(
            limit=self.limit, wait_variable=section.variables["wait"], attempts_per_round=attempts
        )

    def inspect_key(self, section: "LockedSection") -> str:
        return semaphore.inspect_key_expression(limit=self.limit, wait_variable=section.variables["wait"])


class MultiKey(Mutex):
    """Every key of a list, all or nothing, in one transaction (see multikey_protocol)."""

    name = "multi-key"
    key_field = "keys"
    refused = multikey.TRANSACTION_CANCELED

    def key_expression(self, namespace: str) -> str:
        return multikey.keys_expression(self.user_key, namespace)

    def holds_same_lock(self, variable: str) -> str:
        return multikey.holds_keys_expression(variable)

    def inspect_key(self, section: "LockedSection") -> str:
        return multikey.inspect_key_expression(section.variables["wait"])

    def build_acquire(self, section: "LockedSection", lease_ms: int):
        """Reentered? -> (pass through | Acquire (transaction) -> ReadFences)."""
        v = section.variables
        table_name = section.table.table_name
        acquire = sdk_task(
            section, section._name("Acquire"), "dynamodb:transactWriteItems",
            multikey.acquire_arguments(
                table_name=table_name, lease_ms=lease_ms,
                stale_owner_jsonata=protocol.stale_owner_expression(v["wait"]),
            ),
            assign={v["lock"]: jsonata(multikey.unread_lock_expression()), v["wait"]: jsonata("null")},
            output=jsonata("$states.input"),
        )
        retry_transient_sdk(acquire)
        read = sdk_task(
            section, section._name("ReadFences"), "dynamodb:transactGetItems",
            multikey.read_fences_arguments(table_name=table_name),
            assign={v["lock"]: jsonata(multikey.lock_variable_expression())},
            output=jsonata(f"{ENTRY}.input"),
        )
        retry_transient_sdk(read)
        section.after_acquire_failure(read)  # holding every key: release them, then fail
        acquire.next(read)
        entry = sfn.Choice.jsonata(section, "Reentered", state_name=section._name("Reentered?"))
        entry.when(
            sfn.Condition.jsonata(jsonata(f"$exists({ENTRY}.reentered)")),
            sfn.Pass.jsonata(
                section, "PassThrough", state_name=section._name("PassThrough"),
                assign={v["lock"]: jsonata(protocol.reentered_lock_expression())},
                outputs=jsonata(f"{ENTRY}.input"),
            ).next(section.protected),
        ).otherwise(acquire)
        return entry, acquire, read

    def _release_each(self, section: "LockedSection", suffix: str, *, count_lost: bool) -> sfn.Map:
        """A Map releasing every key on its own (the mutex's RELEASE), never stopping at one."""
        one = update_item_task(
            section, section._name(f"{suffix}Key"), section.table,
            protocol.release_arguments(lock_variable="", lock_jsonata="$states.input"),
            outputs=jsonata("{'lost': false}"),
        )
        retry_transient(one)
        one.add_catch(
            sfn.Succeed(section, f"{suffix}KeyRefused", state_name=section._name(f"{suffix}KeyRefused")),
            errors=[protocol.CONDITION_FAILED] if count_lost else ["States.ALL"],
            outputs=jsonata(multikey.lost_expression() if count_lost else "{'lost': false}"),
        )
        lost = section.variables["lock"] + "Lost"
        return sfn.Map.jsonata(
            section, suffix, state_name=section._name(suffix),
            items=sfn.ProvideItems.jsonata(jsonata(multikey.release_each_items_expression(section.variables["lock"]))),
            max_concurrency=10,
            assign={lost: jsonata(multikey.any_lost_expression())} if count_lost else None,
            outputs=jsonata("$states.input"),
        ).item_processor(one)

    def build_release(self, section: "LockedSection", lost: sfn.State, left: sfn.State) -> sfn.State:
        """Release every key in one transaction; if refused or unknown, key by key."""
        v = section.variables
        release = sdk_task(
            section, section._name("Release"), "dynamodb:transactWriteItems",
            multikey.release_arguments(table_name=section.table.table_name, lock_variable=v["lock"], reentrant=True),
            output=jsonata("$states.input"),
        )
        release.add_catch(left, errors=[protocol.QUERY_EVALUATION_ERROR], outputs=jsonata("$states.input"))
        each = self._release_each(section, "ReleaseEach", count_lost=True)
        any_lost = sfn.Choice.jsonata(section, "AnyLost", state_name=section._name("AnyLost?"))
        any_lost.when(sfn.Condition.jsonata(jsonata(f"${v['lock']}Lost")), lost)
        any_lost.otherwise(sfn.Succeed(section, "Released", state_name=section._name("Released")))
        release.add_catch(
            each.next(any_lost), errors=[multikey.TRANSACTION_CANCELED, *multikey.TRANSIENT_ERRORS],
            outputs=jsonata("$states.input"),
        )
        return release

    def build_release_after_error(self, section: "LockedSection", rethrow: sfn.State) -> sfn.State:
        v = section.variables
        release = sdk_task(
            section, section._name("ReleaseAfterError"), "dynamodb:transactWriteItems",
            multikey.release_arguments(table_name=section.table.table_name, lock_variable=v["lock"], reentrant=True),
            output=jsonata("$states.input"),
        )
        release.add_catch(rethrow, errors=[protocol.QUERY_EVALUATION_ERROR], outputs=jsonata("$states.input"))
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
    r = protocol.TRANSIENT_RETRY
    state.add_retry(
        errors=list(multikey.TRANSIENT_ERRORS),
        interval=Duration.seconds(r["interval_s"]),
        backoff_rate=r["backoff_rate"],
        max_attempts=r["max_attempts"],
        max_delay=Duration.seconds(r["max_delay_s"]),
        jitter_strategy=sfn.JitterType.FULL,
    )
