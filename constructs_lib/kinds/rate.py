"""The rate limit kind (``Lock.rate``): at most ``limit`` entries per key in any window of
``period`` - :mod:`locked_workflow.state_machines.rate_protocol`. Its states::

    Read (GetItem) -> InTime? --> Admit (ADMIT: reserves the entry time) --> Turn (Wait until
                          |                          then) --> OnTime? --> the work --> Released
                          \\--the time to reserve is past max_wait--> Timeout (Lock.Timeout)
    Admit refused (another entry was admitted since the read) --> Spread (Wait: 0 s when the
                          permit it read was free, else a random part of the way to it) --> Read
    OnTime? late (more than ENTRY_MARGIN_MS past the reserved time) --> Read (its permit unused)

Nothing is held, so nothing is released: the work's end (success or error) writes nothing,
and no stale holder can block a key (no janitor, liveness check or lease is involved).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from aws_cdk import Duration, aws_stepfunctions as sfn, aws_stepfunctions_tasks as tasks

from locked_workflow.constructs_lib import prop_types

from locked_workflow.constructs_lib.custom_state import JsonataCustomState
from locked_workflow.constructs_lib.dynamodb_tasks import attribute_value, retry_transient, update_item_task
from locked_workflow.constructs_lib.section_record import Role
from locked_workflow.constructs_lib.kinds.base import KindBuilder, SectionContext
from locked_workflow.constructs_lib.kinds.mutex import MutexKind
from locked_workflow.constructs_lib.kinds.semaphore import SemaphoreKind
from locked_workflow.constructs_lib.kinds.value import LockValue, unwrapped_key
from locked_workflow.state_machines import errors
from locked_workflow.state_machines import lock_protocol as protocol
from locked_workflow.state_machines import rate_protocol as rate
from locked_workflow.state_machines import semaphore_protocol as semaphore
from locked_workflow.state_machines.lock_protocol import ENTRY, jsonata


class _Admit(tasks.DynamoUpdateItem):
    """ADMIT as an optimized UpdateItem whose ``ExpressionAttributeValues`` is one JSONata
    expression (``:now`` and ``:cutoff`` from one ``$millis()``): CDK builds the task and its
    IAM, this only renders the values as one field."""

    def __init__(self, *args: Any, values_expression: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._values_expression = values_expression

    def to_state_json(self, *args: Any) -> Any:
        rendered = dict(super().to_state_json(*args))
        arguments = dict(rendered["Arguments"])
        arguments["ExpressionAttributeValues"] = jsonata(self._values_expression)
        rendered["Arguments"] = arguments
        return rendered


def _timeout_cause(section: SectionContext, limit: int, period_ms: int) -> str:
    return (f"the key's next permit comes after max_wait ({section.max_wait_ms} ms): more than {limit} "
            f"entries per {period_ms} ms were asked for")


def build_rate_steps(section: SectionContext, *, limit: int, period_ms: int, timeout: sfn.State,
                     lock_assign: str, field: str = "acquiredAt") -> tuple[sfn.State, sfn.State, sfn.Choice]:
    """``Read -> InTime? -> Admit -> Turn -> OnTime?`` (see the module's notes), entered with the
    section's entry record: (Read, Admit, OnTime?, whose default rule is the way into the work,
    with the section's input). ``lock_assign``: what ADMIT assigns the lock variable, whose
    ``field`` is the reserved time; ``timeout``: where a permit past ``max_wait`` goes."""
    v = section.variables
    key = {protocol.KEY_ATTRIBUTE: attribute_value({"S": jsonata(rate.rate_key_expression())})}
    read = tasks.DynamoGetItem.jsonata(
        section, section.state_name("Read"), table=section.table, key=key, consistent_read=True,
        assign={v["wait"]: jsonata(rate.seen_expression(wait_variable=v["wait"], limit=limit, period_ms=period_ms))},
        outputs=jsonata("$states.input"),
    )
    retry_transient(read)
    names = rate.attribute_names(jsonata(rate.admit_slot_expression(wait_variable=v["wait"], limit=limit)))
    admit = _Admit(
        section, section.state_name("Admit"),
        query_language=sfn.QueryLanguage.JSONATA,
        table=section.table, key=key,
        update_expression=rate.ADMIT.update, condition_expression=rate.ADMIT.condition,
        expression_attribute_names=names,
        # rendered as one expression (see _Admit); CDK wants a value per name here
        expression_attribute_values={name: attribute_value({"N": "0"}) for name in rate.ADMIT.value_names()},
        return_values=tasks.DynamoReturnValues.UPDATED_NEW,
        values_expression=rate.admit_values_expression(wait_variable=v["wait"], period_ms=period_ms),
        assign={v["lock"]: jsonata(lock_assign), v["wait"]: jsonata("null")},
        outputs=jsonata("$states.input"),  # the entry record: a late run reads again from it
    )
    retry_transient(admit)
    # refused: read again - apart from the runs refused with it when its permit is some way off
    spread = JsonataCustomState(section, section.state_name("Spread"), state_json={
        "Type": "Wait", "QueryLanguage": "JSONata",
        "Seconds": jsonata(rate.spread_seconds_expression(v["wait"])),
    })
    admit.add_catch(spread, errors=[errors.CONDITION_FAILED], outputs=jsonata("$states.input"))
    spread.next(read)
    turn = JsonataCustomState(section, section.state_name("Turn"), state_json={
        "Type": "Wait", "QueryLanguage": "JSONata",
        "Seconds": jsonata(rate.turn_seconds_expression(v["lock"], field)),
    })
    in_time = sfn.Choice.jsonata(section, "InTime", state_name=section.state_name("InTime?"))
    in_time.when(sfn.Condition.jsonata(jsonata(rate.past_max_wait_expression(v["wait"], section.max_wait_ms))),
                 timeout)
    in_time.otherwise(admit)
    # on time: the work gets the section's input (the Output of the Choice's default rule,
    # https://docs.aws.amazon.com/step-functions/latest/dg/state-choice.html)
    on_time = sfn.Choice.jsonata(section, "OnTime", state_name=section.state_name("OnTime?"),
                                 outputs=jsonata(f"{ENTRY}.input"))
    # late: the permit is given up unused and the run reserves again (the wait variable starts
    # over from the section's entry: max_wait still counts from there)
    on_time.when(sfn.Condition.jsonata(jsonata(f"$not({rate.on_time_expression(v['lock'], field)})")), read)
    read.next(in_time)
    admit.next(turn)
    turn.next(on_time)
    return read, admit, on_time


class _Otherwise:
    """The guard's Choice as the state the section chains its work to (``.next(work)``: the
    Choice's ``otherwise``)."""

    def __init__(self, choice: sfn.Choice) -> None:
        self.choice = choice

    def next(self, state: sfn.IChainable) -> sfn.Chain:
        self.choice.otherwise(state)
        return sfn.Chain.start(state)


class RateLimit(MutexKind):
    """At most ``limit`` entries per key in any window of ``period_ms`` (see rate_protocol)."""

    name = "rate"
    builds_own_wait_path = True
    #: Nothing is held: no presence to register, no read/write lock's item.
    presence = False
    meets_shared_holds = False
    holds = False

    def __init__(self, user_key: str, *, limit: int, period_ms: int) -> None:
        super().__init__(user_key)
        self.limit = self.rate_limit = limit
        self.period_ms = period_ms

    def key_expression(self, namespace: str) -> str:
        return protocol.key_expression(self.user_key, namespace, rate.reserve_bytes())

    def holds_same_lock(self, variable: str) -> str:
        return "false"  # every entry spends a permit, nested or not

    def entry_fields(self, enclosing_lock_variables: Sequence[str] = ()) -> Mapping[str, str]:
        return {}

    def worst_case_events(self, max_wait_s: float) -> int:
        """History events a run's wait may record (the section checks them against its budget)."""
        return rate.worst_case_events(limit=self.limit, period_s=self.period_ms / 1000, max_wait_s=max_wait_s)

    def build_acquire(self, section: SectionContext, lease_ms: int):
        v = section.variables
        timeout = sfn.Fail.jsonata(
            section, "Timeout", state_name=section.state_name("Timeout"), error=protocol.ERROR_TIMEOUT,
            cause=_timeout_cause(section, self.limit, self.period_ms),
        )
        section.record(timeout, Role.TIMEOUT)
        read, admit, on_time = build_rate_steps(
            section, limit=self.limit, period_ms=self.period_ms, timeout=timeout,
            lock_assign=rate.lock_variable_expression(wait_variable=v["wait"], limit=self.limit))
        section.record(admit, Role.ACQUISITION, v["lock"])  # (with a slot: the slot's acquire is)
        return read, admit, _Otherwise(on_time)

    def build_release(self, section: SectionContext, lost: sfn.State, left: sfn.State) -> sfn.State:
        return sfn.Succeed(section, "Released", state_name=section.state_name("Released"))

    def build_release_after_error(self, section: SectionContext, rethrow: sfn.State) -> sfn.State:
        return rethrow

    def build_retire(self, section: SectionContext, then: sfn.State) -> sfn.State:
        return then



class RateAtOnce(SemaphoreKind):
    """A rate limit with a concurrency limit: at most ``at_once`` holders per key at a time
    (a semaphore's slots, held from before the permit until after the work) and at most
    ``limit`` entries per key in any window of ``period_ms`` (the rate item of
    :class:`RateLimit`, shared with it). Its states::

        Acquire (a slot, the semaphore's wait path and AcquireAgain) --> Read -> InTime? -> Admit -> Turn -> OnTime?
            --> the work --> Release (the slot; every Catch path: ReleaseAfterError)
        InTime? past max_wait --> RateTimeoutRelease (the slot) --> RateTimeout (Lock.Timeout)

    The slot is taken first and the permit's wait is spent holding it: the run then enters
    within the entry margin of its reserved time (the guard), so its entry keeps both limits.
    The other order - a permit, then a wait for a slot of unbounded length - would enter late
    and bunch the entries (or, with the guard, give permits up). ``$lock`` is the slot's record
    (``fence``: per slot) plus ``admission`` (the admission's number, strictly increasing per
    key) and ``admittedAt`` (its reserved time).
    """

    name = "rate"

    def __init__(self, user_key: str, *, limit: int, period_ms: int, at_once: int) -> None:
        super().__init__(user_key, at_once)
        self.rate_limit = limit
        self.period_ms = period_ms
        # the acquire keeps the entry record: the rate's states read from it
        self.acquire_outputs = "$states.input"

    def key_expression(self, namespace: str) -> str:
        return protocol.key_expression(
            self.user_key, namespace, max(rate.reserve_bytes(), semaphore.reserve_bytes(self.limit)))

    def worst_case_events(self, max_wait_s: float) -> int:
        """The rate's rounds (the section adds the slot's wait loop)."""
        return rate.worst_case_events(limit=self.rate_limit, period_s=self.period_ms / 1000, max_wait_s=max_wait_s)

    def build_acquire(self, section: SectionContext, lease_ms: int):
        v = section.variables
        slot = super().build_acquire(section, lease_ms)
        timeout = sfn.Fail.jsonata(
            section, "RateTimeout", state_name=section.state_name("RateTimeout"), error=protocol.ERROR_TIMEOUT,
            cause=_timeout_cause(section, self.rate_limit, self.period_ms),
        )
        section.record(timeout, Role.TIMEOUT)
        # the slot is released before the run fails (its release, as after an error of the work)
        name = section.state_name("RateTimeoutRelease")
        release = update_item_task(
            section, name, section.table,
            protocol.release_arguments(lock_variable=v["lock"], reentrant=True, item=self.item),
            assign=section.held_assign(name),
        )
        retry_transient(release)
        release.add_catch(timeout, errors=[errors.CONDITION_FAILED, errors.QUERY_EVALUATION_ERROR],
                          outputs=jsonata("$states.input"))
        release.next(timeout)
        read, admit, on_time = build_rate_steps(
            section, limit=self.rate_limit, period_ms=self.period_ms, timeout=release, field=rate.ADMITTED_AT,
            lock_assign=rate.admission_merge_expression(lock_variable=v["lock"], wait_variable=v["wait"],
                                                        limit=self.rate_limit))
        for state in (read, admit):  # their errors release the slot, as the work's do
            section.after_acquire_failure(state)
        slot.acquired.next(read)
        return slot._replace(acquired=_Otherwise(on_time))


@dataclass(frozen=True, init=False)
class RateLock(LockValue):
    """``Lock.rate(key, limit=...)``: at most ``limit`` entries per key in any window of
    ``period_ms`` (and, with ``at_once``, that many in the work at a time)."""

    key: str
    limit: int
    period_ms: int
    at_once: Optional[int]
    kind = "rate"
    factory = "rate(key, limit=...)"

    @classmethod
    def of(cls, key: str, *, limit: int, period: Duration, at_once: Optional[int]) -> "RateLock":
        """``Lock.rate``'s value (its props as the factory documents them)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= rate.MAX_LIMIT:
            raise ValueError(f"`limit` must be a whole number from 1 to {rate.MAX_LIMIT}, got: {limit!r}")
        period_ms = prop_types.concrete_ms("period", period)
        low, high = rate.MIN_PERIOD_S, rate.MAX_PERIOD_S
        if period_ms % 1000 or not low * 1000 <= period_ms <= high * 1000:
            raise ValueError(f"`period` must be whole seconds from {low} s to 1 day, got: {period_ms / 1000} s")
        if at_once is not None and (isinstance(at_once, bool) or not isinstance(at_once, int)
                                    or not 1 <= at_once <= semaphore.MAX_LIMIT):
            raise ValueError(
                f"`at_once` must be a whole number from 1 to {semaphore.MAX_LIMIT} (or None: no "
                f"concurrency limit), got: {at_once!r}")
        return cls(unwrapped_key(key), limit, period_ms, at_once)

    def builder(self) -> KindBuilder:
        if self.at_once is not None:
            return RateAtOnce(self.key, limit=self.limit, period_ms=self.period_ms, at_once=self.at_once)
        return RateLimit(self.key, limit=self.limit, period_ms=self.period_ms)
