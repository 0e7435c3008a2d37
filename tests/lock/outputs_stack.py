"""Every lock kind's section around a work whose output is known, plain and nested (re-entered
on its own key where the kind is re-entrant, on another key where it is not): the state after
the section must receive the work's output on every path (issue 25, N1)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from locked_workflow import Lock, LockedSection, LockTable, WaitPolicy
from locked_workflow.state_machines.lock_protocol import jsonata

FAST = WaitPolicy(first_interval=1, backoff_rate=1.5, max_interval=2, jitter=True, retries_per_round=2)

#: kind -> its Lock value for a JSONata key expression (the record lock takes its table).
KINDS = {
    "mutex": lambda stack, key: Lock.mutex(key),
    "fair": lambda stack, key: Lock.fair(key),
    "semaphore": lambda stack, key: Lock.semaphore(key, limit=2),
    "keys": lambda stack, key: Lock.keys(jsonata(f"[{key[3:-2]}, 'second']")),
    "record": lambda stack, key: Lock.on_record(stack.records, key, must_exist=False),
    "shared": lambda stack, key: Lock.shared(key),
    "exclusive": lambda stack, key: Lock.exclusive(key),
}
#: Kinds whose section nested on the key of its enclosing section passes through (re-entry);
#: the others are nested on another key (re-entry is refused at synth, or not offered).
REENTRANT = ("mutex", "fair", "semaphore", "keys")
#: The machines: one per kind with the presence branch (the default), and the mutex without it.
MACHINES = [(kind, True) for kind in KINDS] + [("mutex", False)]


def machine_name(kind: str, detect: bool) -> str:
    return f"{kind.title()}Outputs{'' if detect else 'Blind'}"


def expected_output(kind: str, document: dict) -> dict:
    """A machine's output: the nested sections' work output, which carries the plain one's."""
    work = {"worked": kind, "x": document["x"], "key": document["key"]}
    return {**work, "plain": work}


class OutputsStack(cdk.Stack):
    """Per machine: a plain section, then an outer section whose work is an inner section (on
    the same key where the kind is re-entrant); the state after each reads its input."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.locks = LockTable(self, "Locks", removal_policy=cdk.RemovalPolicy.DESTROY).table
        self.records = dynamodb.Table(
            self, "Records", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST, removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        for kind, detect in MACHINES:
            self._machine(kind, detect)

    def _section(self, name: str, kind: str, key: str, work: sfn.IChainable, variable: str, detect: bool):
        props = {} if kind == "record" else {"table": self.locks, "key_namespace": "out"}
        return LockedSection(
            self, f"{name}{variable.title()}", lock=KINDS[kind](self, key), protected=work,
            lease=cdk.Duration.minutes(10), wait_policy=FAST, max_wait=cdk.Duration.seconds(60),
            lock_variable=variable, detect_cancellation=detect, **props,
        )

    def _machine(self, kind: str, detect: bool) -> None:
        name, key = machine_name(kind, detect), "{% $states.input.key %}"
        work = f"{{'worked': '{kind}', 'x': $states.input.x, 'key': $states.input.key"
        plain = self._section(name, kind, key, sfn.Pass.jsonata(
            self, f"{name}PlainWork", outputs=jsonata(work + "}")), "plain", detect)
        after_plain = sfn.Pass.jsonata(self, f"{name}AfterPlain", outputs=jsonata(
            "{'key': $states.input.key, 'x': $states.input.x, 'plain': $states.input}"))
        inner_key = key if kind in REENTRANT else "{% $states.input.key & '-inner' %}"
        inner = self._section(name, kind, inner_key, sfn.Pass.jsonata(
            self, f"{name}InnerWork", outputs=jsonata(work + ", 'plain': $states.input.plain}")), "inner", detect)
        outer = self._section(name, kind, key, inner, "outer", detect)
        after = sfn.Pass.jsonata(self, f"{name}After", outputs=jsonata("$states.input"))
        sfn.StateMachine(
            self, name, state_machine_name=name,
            definition_body=sfn.DefinitionBody.from_chainable(plain.next(after_plain).next(outer).next(after)),
            query_language=sfn.QueryLanguage.JSONATA, timeout=cdk.Duration.minutes(3),
        )
