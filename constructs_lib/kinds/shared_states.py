"""The state-building helpers of the read/write kinds (``Lock.shared`` / ``Lock.exclusive``):
one :class:`SharedStates` per call of the kind's builder, holding the section and the
kind's settings, so that the kind's acquire (:mod:`~locked_workflow.constructs_lib.kinds.shared`),
its waiters' liveness check (:mod:`~locked_workflow.constructs_lib.kinds.shared_liveness`) and
its handoff (:mod:`~locked_workflow.constructs_lib.kinds.shared_handoff`) spell every write the
same way.
"""

from __future__ import annotations

from typing import Optional

from aws_cdk import aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks

from locked_workflow.constructs_lib.dynamodb_tasks import attribute_value, retry_transient, update_item_task
from locked_workflow.constructs_lib.kinds.base import SectionContext
from locked_workflow.constructs_lib.kinds.items import item_number
from locked_workflow.constructs_lib.kinds.shared_hold import entry_of
from locked_workflow.constructs_lib.kinds.ticket_queue import choice, queue_vars, row_key, when
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines import shared_protocol as shared
from locked_workflow.state_machines.lock_protocol import ENTRY, jsonata

READ, WRITE = shared.READ, shared.WRITE


def presence_row_key(section: SectionContext) -> str:
    """JSONata: the key of the hold's presence row (``shared_protocol.PRESENT_ROW``)."""
    return shared.presence_row_key_expression(f"${section.variables['lock']}.owner")


class SharedStates:
    """The states of one read/write section's kind, built alike: ``mode`` (READ or WRITE),
    ``park_timeout_s``, and ``lease_ms`` (the acquire's only)."""

    def __init__(self, section: SectionContext, *, mode: str, park_timeout_s: int,
                 lease_ms: Optional[int] = None) -> None:
        self.section = section
        self.mode = mode
        self.park_timeout_s = park_timeout_s
        self.lease_ms = lease_ms

    def vars(self) -> dict:
        return queue_vars(self.section)

    @property
    def claim_window_ms(self) -> int:
        """How long a handoff's grant lasts unconfirmed (a woken waiter claims within it)."""
        return max(self.park_timeout_s, 10) * 1000

    def lock_values(self, *, me: str, stale: Optional[str] = None) -> dict:
        """Values of the free conditions (WRITER_FREE / ALL_FREE): ``me`` is ACQUIRE's ``:me``."""
        return {":me": {"S": jsonata(me)}, ":stale": {"S": jsonata(stale or me)},
                ":now": {"N": jsonata(protocol.NOW_EXPRESSION)}, ":shared": {"S": shared.SHARED},
                **shared.MAX_READERS_VALUES}

    @staticmethod
    def pick(write: protocol.LockWrite, values: dict) -> dict:
        names = set(write.value_names())
        return {k: v for k, v in values.items() if k in names}

    def args(self, key: str, write: protocol.LockWrite, values: dict, *, reader: Optional[str] = None,
             return_values: str = "NONE") -> dict:
        args = shared.arguments(jsonata(key), write, self.pick(write, values), reader=reader and "",
                                return_values=return_values)
        if reader:  # the entry's attribute, evaluated at run time from the reader's owner
            args["ExpressionAttributeNames"][shared.READER_PLACEHOLDER] = jsonata(
                shared.reader_attribute_expression(reader))
        return args

    @staticmethod
    def row_key(key: str, ticket: str) -> dict:
        return row_key(key, ticket)

    def lock_key(self, key: str) -> dict:
        return {protocol.KEY_ATTRIBUTE: attribute_value({"S": jsonata(key)})}

    def forget(self, suffix: str, then: sfn.State) -> sfn.State:
        """After the hold (both of its branches are over): its presence row goes, then ``then``
        (best effort: a row left behind is read only while its acquisition's hold is on the lock
        item, and its token, departed, is never probed)."""
        s = self.section
        if not s.detect_cancellation:
            return then
        forget = tasks.DynamoDeleteItem.jsonata(
            s, s.state_name(suffix), table=s.table, outputs=jsonata("$states.input"),
            key={protocol.KEY_ATTRIBUTE: attribute_value({"S": jsonata(presence_row_key(s))})})
        retry_transient(forget)
        forget.add_catch(then, errors=["States.ALL"], outputs=jsonata("$states.input"))
        return forget.next(then)

    def record(self, item: str, *, ticket: str) -> str:
        """JSONata: the ``$lock`` record read from the lock item ``item`` after my acquisition."""
        if self.mode == READ:
            entry = entry_of(item, f"{ENTRY}.owner")
            acquired, expires = f"$number({entry}.`{protocol.ACQUIRED_AT}`.N)", f"$number({entry}.`{protocol.EXPIRES_AT}`.N)"
        else:
            acquired, expires = item_number(item, protocol.ACQUIRED_AT), item_number(item, protocol.EXPIRES_AT)
        return (
            f"{{'key': {ENTRY}.key, 'owner': {ENTRY}.owner, 'mode': '{self.mode}', "
            f"'fence': {item_number(item, protocol.FENCE)}, 'acquiredAt': {acquired}, 'expiresAt': {expires}, "
            f"'ticket': {ticket}, '{protocol.REQUESTED_AT}': {ENTRY}.{protocol.REQUESTED_AT}, "
            f"{protocol.generation_field()}}}"
        )

    def own_entry(self) -> dict:
        return shared.entry_value(expires_at=jsonata(protocol.lease_end_expression(self.lease_ms)),
                                  acquired_at=jsonata(protocol.NOW_EXPRESSION), grace=jsonata(f"$string({ENTRY}.grace)"))

    def update(self, suffix: str, key: str, write: protocol.LockWrite, values: dict, *, reader: Optional[str] = None,
               return_values: str = "NONE", assign: Optional[dict] = None, outputs: Optional[str] = None,
               retry: bool = True) -> sfn.TaskStateBase:
        s = self.section
        task = update_item_task(s, s.state_name(suffix), s.table,
                                self.args(key, write, values, reader=reader, return_values=return_values),
                                assign=assign, outputs=jsonata(outputs) if outputs else None)
        if retry:
            retry_transient(task)
        return task

    def get(self, suffix: str, key: dict, assign: dict) -> tasks.DynamoGetItem:
        s = self.section
        get = tasks.DynamoGetItem.jsonata(s, s.state_name(suffix), table=s.table, key=key, consistent_read=True,
                                          assign=assign, outputs=jsonata("$states.input"))
        retry_transient(get)
        return get

    def choice(self, suffix: str) -> sfn.Choice:
        return choice(self.section, suffix)

    when = staticmethod(when)
