"""Fix ``patches/parsed_definitions``: a definition is parsed once, and the executions that share
its program keep their state apart."""

from __future__ import annotations

import json
import pickle
import threading
import uuid
from contextlib import ExitStack, contextmanager
from typing import Iterator
from unittest import mock

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.stepfunctions.parser.asl.component import eval_component
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser, ASLParserException

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.patches import execution_snapshot, parsed_definitions
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end

PASS = {"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}

#: Every item of a Map fails its task twice over (no such table), retried, then caught: each
#: item's attempts are counted in its execution's heap under the retrier's key.
RETRIED = {
    "QueryLanguage": "JSONata",
    "StartAt": "Items",
    "States": {
        "Items": {
            "Type": "Map",
            "Items": "{% $states.input.items %}",
            "ItemProcessor": {
                "ProcessorConfig": {"Mode": "INLINE"},
                "StartAt": "Read",
                "States": {
                    "Read": {
                        "Type": "Task",
                        "Resource": "arn:aws:states:::dynamodb:getItem",
                        "Arguments": {"TableName": "missing", "Key": {"pk": {"S": "{% $string($states.input) %}"}}},
                        "Retry": [{"ErrorEquals": ["States.ALL"], "MaxAttempts": 2, "IntervalSeconds": 1,
                                   "BackoffRate": 1}],
                        "Catch": [{"ErrorEquals": ["States.ALL"], "Output": "{% $states.input %}", "Next": "Caught"}],
                        "End": True,
                    },
                    "Caught": {"Type": "Pass", "End": True},
                },
            },
            "End": True,
        }
    },
}


@contextmanager
def counting_parses() -> Iterator[list[str]]:
    parsed: list[str] = []
    original = AmazonStateLanguageParser.parse

    runtime_parse = parsed_definitions.parse

    def parse(definition: str):  # type: ignore[no-untyped-def]
        parsed.append(definition)
        return original(definition)

    def runtime(definition: str):  # type: ignore[no-untyped-def]
        parsed.append(definition)
        return runtime_parse(definition)

    with mock.patch.object(AmazonStateLanguageParser, "parse", staticmethod(parse)), \
            mock.patch.object(parsed_definitions, "parse", runtime):
        yield parsed


def start(machine: str, payload: dict | None = None) -> str:
    sfn = boto3.client("stepfunctions", region_name=REGION)
    return sfn.start_execution(stateMachineArn=machine, name=str(uuid.uuid4()), input=json.dumps(payload or {}))[
        "executionArn"
    ]


def test_bare_moto_parses_the_definition_again_for_every_execution():
    with bare_moto(execution_snapshot.apply):  # prerequisite: a second start at all
        machine = create_state_machine(PASS)
        with counting_parses() as parsed:
            for _ in range(3):
                assert wait_for_end(start(machine))["status"] == "SUCCEEDED"
    assert len(parsed) == 3


def test_runtime_parses_each_definition_once_per_process():
    """Created and started in one cloud, then in another (the other backend's deployment of the
    same stack): each definition is parsed once, for its validation, and never again."""
    tag = str(uuid.uuid4())  # definitions no earlier test of this process has parsed
    ours = {**PASS, "Comment": tag}
    other = {"Comment": tag, "StartAt": "Other", "States": {"Other": {"Type": "Pass", "End": True}}}
    statuses = []
    with counting_parses() as parsed:
        for _ in range(2):
            with LocalCloud():
                machines = [create_state_machine(ours), create_state_machine(other, name="other")]
                arns = [start(machine) for machine in machines for _ in range(4)]
                statuses += [wait_for_end(arn)["status"] for arn in arns]
    assert statuses == ["SUCCEEDED"] * 16
    assert sorted(parsed) == sorted([json.dumps(ours), json.dumps(other)])


def test_an_invalid_definition_is_refused_at_creation_and_not_kept():
    broken = {"Comment": str(uuid.uuid4()), "StartAt": "Done", "States": {"Done": {"Type": "Bogus", "End": True}}}
    with LocalCloud(), counting_parses() as parsed:
        for _ in range(2):
            with pytest.raises(ClientError) as refused:
                create_state_machine(broken)
            assert refused.value.response["Error"]["Code"] == "InvalidDefinition"
    assert len(parsed) == 2  # a syntax error is parsed again each time, never served from the cache


def test_executions_sharing_a_program_keep_their_own_retry_counts_and_data():
    """Four executions of one program at once, five Map items each: every item retried
    exactly twice (three attempts) and every execution's output its own input."""
    with LocalCloud() as cloud:
        machine = create_state_machine(RETRIED)
        inputs = [{"items": [f"{run}-{i}" for i in range(5)]} for run in range(4)]
        arns = [start(machine, payload) for payload in inputs]
        ends = [wait_for_end(arn, timeout=120) for arn in arns]
        attempts = [sum(e["type"] == "TaskScheduled" for e in cloud.history(arn)) for arn in arns]
    assert [end["status"] for end in ends] == ["SUCCEEDED"] * 4
    assert [json.loads(end["output"]) for end in ends] == [payload["items"] for payload in inputs]
    assert attempts == [15] * 4


def _keys_drawn_by_two_threads_at_once(component: eval_component.EvalComponent) -> set[str]:
    """Two threads read the component's heap key; a key drawn waits until both are drawing."""
    both_inside = threading.Barrier(2, timeout=30)

    def drawn() -> str:
        both_inside.wait()
        return str(uuid.uuid4())

    keys: list[str] = []
    with mock.patch.object(eval_component, "long_uid", drawn):
        threads = [threading.Thread(target=lambda: keys.append(component.heap_key)) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert len(keys) == 2
    return set(keys)


def test_bare_moto_lets_two_threads_draw_two_heap_keys_for_one_component():
    program, _ = AmazonStateLanguageParser.parse(json.dumps(PASS))
    assert len(_keys_drawn_by_two_threads_at_once(program)) == 2


def test_runtime_gives_a_component_one_heap_key_in_every_thread():
    with ExitStack() as stack:
        parsed_definitions.apply(stack)
        program, _ = AmazonStateLanguageParser.parse(json.dumps(PASS))
        keys = _keys_drawn_by_two_threads_at_once(program)  # the runtime draws none: no barrier met
        assert len(keys) == 1
        assert not any("heap_key" in name for name in vars(program))  # nothing written



def _large(tag: str) -> dict:
    """A definition at least ``MIN_KEPT_CHARS`` long (a Pass state's comment pads it)."""
    return {**PASS, "Comment": tag + " " * parsed_definitions.MIN_KEPT_CHARS}


def test_a_cache_kept_in_a_folder_gives_another_process_the_program_without_a_parse(tmp_path):
    """Two caches on one folder stand for two processes: the second reads the first's program
    (no parse) and runs it; a different definition is parsed; a small one is never written."""
    tag = str(uuid.uuid4())
    first, second = parsed_definitions.ProgramCache(), parsed_definitions.ProgramCache()
    first.keep_in(tmp_path)
    second.keep_in(tmp_path)
    large = json.dumps(_large(tag))
    first.program(large)
    assert (first.parses, len(list(tmp_path.glob("*.pickle")))) == (1, 1)
    with counting_parses() as parsed:
        program = second.program(large)
        second.program(json.dumps(_large(tag + "-other")))
        second.program(json.dumps({**PASS, "Comment": tag}))
    assert second.parses == 2 and len(parsed) == 2 and large not in parsed
    assert len(list(tmp_path.glob("*.pickle"))) == 2  # the small definition stays in memory
    assert type(program).__name__ == "Program"
    with ExitStack() as stack:  # the program read back runs: executions of it succeed
        parsed_definitions.apply(stack, second)
        with LocalCloud():
            machine = create_state_machine(_large(tag))
            assert [wait_for_end(start(machine))["status"] for _ in range(2)] == ["SUCCEEDED"] * 2


def test_negative_control_a_cache_without_a_folder_parses_in_each_process(tmp_path):
    large = json.dumps(_large(str(uuid.uuid4())))
    first, second = parsed_definitions.ProgramCache(), parsed_definitions.ProgramCache()
    first.program(large)
    second.program(large)
    assert (first.parses, second.parses) == (1, 1) and not list(tmp_path.iterdir())


#: JSONata and JSONPath states of every type, nested in a Parallel's branches and a Map's
#: processor, with Retry, Catch, Assign, Choice rules and intrinsic functions.
EVERY_SHAPE = {
    "Comment": "every shape",
    "StartAt": "Branches",
    "TimeoutSeconds": 60,
    "States": {
        "Branches": {
            "Type": "Parallel",
            "QueryLanguage": "JSONata",
            "Arguments": {"x": "{% $states.input.x %}"},
            "Branches": [
                {"StartAt": "Inner", "States": {"Inner": {
                    "Type": "Parallel", "End": True,
                    "Branches": [{"StartAt": "Deep", "States": {"Deep": {"Type": "Pass", "Output": {"n": 1}, "End": True}}}]}}},
                {"StartAt": "Each", "States": {"Each": {
                    "Type": "Map", "Items": "{% [1, 2, 3] %}", "MaxConcurrency": 2,
                    "ItemProcessor": {"ProcessorConfig": {"Mode": "INLINE"}, "StartAt": "Item",
                                      "States": {"Item": {"Type": "Pass", "Output": "{% $states.input * 2 %}", "End": True}}},
                    "End": True}}},
            ],
            "Assign": {"seen": "{% $states.result %}", "count": 3},
            "Retry": [{"ErrorEquals": ["States.TaskFailed"], "MaxAttempts": 2, "IntervalSeconds": 1, "BackoffRate": 2.0,
                       "JitterStrategy": "FULL"}],
            "Catch": [{"ErrorEquals": ["States.ALL"], "Output": "{% $states.errorOutput %}", "Next": "Failed"}],
            "Next": "Decide",
        },
        "Decide": {"Type": "Choice", "QueryLanguage": "JSONata", "Choices": [
            {"Condition": "{% $count > 2 %}", "Next": "Write"}], "Default": "Failed"},
        "Write": {
            "Type": "Task", "QueryLanguage": "JSONata", "Resource": "arn:aws:states:::dynamodb:updateItem",
            "Arguments": {"TableName": "t", "Key": {"pk": {"S": "{% $string($count) %}"}},
                          "UpdateExpression": "SET #a = :a", "ExpressionAttributeNames": {"#a": "a"},
                          "ExpressionAttributeValues": {":a": {"N": "1"}}},
            "TimeoutSeconds": 10,
            "Next": "Old",
        },
        "Old": {"Type": "Pass", "Parameters": {"id.$": "States.UUID()", "a.$": "$.a"},
                "ResultPath": "$.old", "Next": "Later"},
        "Later": {"Type": "Wait", "Seconds": 1, "Next": "Done"},
        "Done": {"Type": "Succeed"},
        "Failed": {"Type": "Fail", "QueryLanguage": "JSONata", "Error": "Some.Error", "Cause": "{% 'because' %}"},
    },
}

#: A Parallel branch without ``States``: moto refuses it when building the program (the error
#: names the branch's whole text), after a parse without syntax error.
BRANCH_WITHOUT_STATES = {"StartAt": "P", "States": {"P": {"Type": "Parallel", "End": True, "Branches": [
    {"StartAt": "X"}]}}}


def _same_as_moto(definition: str) -> tuple[bool, bool]:
    """(the same parse tree, the same program) from the runtime's parse as from moto's."""
    moto_program, moto_tree = AmazonStateLanguageParser.parse(definition)
    tree = parsed_definitions.parse_tree(definition)
    program = parsed_definitions.preprocess(tree)
    return (moto_tree.toStringTree(recog=moto_tree.parser) == tree.toStringTree(recog=tree.parser),
            pickle.dumps(moto_program) == pickle.dumps(program))


@pytest.mark.parametrize("definition", [PASS, RETRIED, EVERY_SHAPE], ids=["pass", "retried", "every-shape"])
def test_the_runtimes_parse_builds_the_tree_and_program_moto_builds(definition):
    """SLL first, and no program text rendered for an error not raised: the same tree and the
    same program (pickled: every component, field and value). ``tools/parse_check.py`` runs
    the same comparison on every definition the test stacks render."""
    assert _same_as_moto(json.dumps(definition)) == (True, True)


def test_negative_control_the_comparison_sees_one_changed_value():
    changed = json.loads(json.dumps(EVERY_SHAPE))
    changed["States"]["Branches"]["Assign"]["count"] = 4
    moto_program, _ = AmazonStateLanguageParser.parse(json.dumps(changed))
    program = parsed_definitions.parse(json.dumps(EVERY_SHAPE))
    assert pickle.dumps(moto_program) != pickle.dumps(program)


@pytest.mark.parametrize("definition,error", [
    ('{"StartAt": "A", "States": {"A": {"Type": "Pass", "End": true,}}}', ASLParserException),  # SLL bails, LL reports
    (json.dumps(BRANCH_WITHOUT_STATES), ValueError),  # raised while building the program
], ids=["syntax-error", "branch-without-states"])
def test_a_refused_definition_is_refused_with_motos_own_error(definition, error):
    with pytest.raises(error) as moto_refused:
        AmazonStateLanguageParser.parse(definition)
    with pytest.raises(error) as refused:
        parsed_definitions.parse(definition)
    assert str(refused.value) == str(moto_refused.value) != ""
    if error is ValueError:  # moto's message names the branch by its text
        assert '"StartAt":"X"' in str(refused.value)
