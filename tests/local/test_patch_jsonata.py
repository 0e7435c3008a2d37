"""Fix ``patches/jsonata_evaluator``: JSONata state machines evaluate, safely and catchably."""

from __future__ import annotations

import hashlib
import time
import uuid

import boto3
import jsonata
import pytest
from moto.stepfunctions.parser.asl.jsonata import jsonata as moto_jsonata

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.patches import jsonata_evaluator
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end

ADD_ONE = {
    "QueryLanguage": "JSONata",
    "StartAt": "Add",
    "States": {"Add": {"Type": "Pass", "Output": "{% {'n': $states.input.n + 1} %}", "End": True}},
}

#: A string variable full of JSON-significant characters, read back by a later state.
TRICKY = 'say "hi" \\ to {"json"}\nand newlines'
ROUND_TRIP = {
    "QueryLanguage": "JSONata",
    "StartAt": "Keep",
    "States": {
        "Keep": {"Type": "Pass", "Assign": {"text": "{% $states.input.text %}"}, "Next": "Read"},
        "Read": {"Type": "Pass", "Output": "{% {'text': $text, 'length': $length($text)} %}", "End": True},
    },
}

#: $error() in an argument: States.QueryEvaluationError, catchable, the message in the Cause.
VALIDATE = {
    "QueryLanguage": "JSONata",
    "StartAt": "Check",
    "States": {
        "Check": {
            "Type": "Pass",
            "Output": "{% $states.input.key ? $states.input.key : $error('Lock.InvalidKey: the lock key is missing') %}",
            "End": True,
        }
    },
}
VALIDATE_CAUGHT = {
    "QueryLanguage": "JSONata",
    "StartAt": "Check",
    "States": {
        "Check": {
            "Type": "Parallel",
            "Branches": [VALIDATE],
            "Catch": [
                {
                    "ErrorEquals": ["States.QueryEvaluationError"],
                    "Output": "{% {'caught': $states.errorOutput.Error, 'cause': $states.errorOutput.Cause} %}",
                    "Next": "Handled",
                }
            ],
            "End": True,
        },
        "Handled": {"Type": "Pass", "End": True},
    },
}


def test_bare_moto_has_no_jsonata_evaluator():
    with bare_moto():
        machine = create_state_machine(ADD_ONE)
        sfn = boto3.client("stepfunctions", region_name=REGION)
        arn = sfn.start_execution(stateMachineArn=machine, name="only", input='{"n": 1}')["executionArn"]
        result = wait_for_end(arn)
    assert result["status"] == "FAILED"
    assert "NoneType" in result["cause"]


def test_bare_moto_encodes_string_variables_unescaped():
    declarations = moto_jsonata.encode_jsonata_variable_declarations({"$text": TRICKY})
    with pytest.raises(Exception):
        assert jsonata.Jsonata(f"({declarations}$text)").evaluate(None) == TRICKY


def test_fixed_encoding_round_trips_any_string():
    declarations = jsonata_evaluator.encode_variable_declarations({"$text": TRICKY, "$n": [1, {"a": None}]})
    assert jsonata.Jsonata(f"({declarations}{{'t': $text, 'n': $n}})").evaluate(None) == {
        "t": TRICKY,
        "n": [1, {"a": None}],
    }


def test_runtime_evaluates_jsonata():
    with LocalCloud() as cloud:
        result = cloud.wait_for(cloud.start_execution(create_state_machine(ADD_ONE), {"n": 41}))
    assert result.status == "SUCCEEDED", result.cause
    assert result.output == {"n": 42}


def test_runtime_round_trips_string_variables():
    with LocalCloud() as cloud:
        result = cloud.wait_for(cloud.start_execution(create_state_machine(ROUND_TRIP), {"text": TRICKY}))
    assert result.status == "SUCCEEDED", result.cause
    assert result.output == {"text": TRICKY, "length": len(TRICKY)}


def test_runtime_raises_query_evaluation_errors():
    with LocalCloud() as cloud:
        failed = cloud.wait_for(cloud.start_execution(create_state_machine(VALIDATE, "plain"), {}))
        caught = cloud.wait_for(cloud.start_execution(create_state_machine(VALIDATE_CAUGHT, "caught"), {}))
        passed = cloud.wait_for(cloud.start_execution(create_state_machine(VALIDATE, "ok"), {"key": "k"}))
    assert failed.status == "FAILED"
    assert failed.error == "States.QueryEvaluationError"
    assert "Lock.InvalidKey: the lock key is missing" in failed.cause
    assert caught.status == "SUCCEEDED", caught.cause
    assert caught.output["caught"] == "States.QueryEvaluationError"
    assert "Lock.InvalidKey: the lock key is missing" in caught.output["cause"]
    assert passed.output == "k"


def test_runtime_has_step_functions_functions():
    machine = {
        "QueryLanguage": "JSONata",
        "StartAt": "Fns",
        "States": {
            "Fns": {
                "Type": "Pass",
                "Output": "{% {'uuid': $uuid(), 'hash': $hash('abc', 'SHA-256'), 'parts': $partition([1,2,3], 2), 'parsed': $parse('{\"a\": 1}'), 'now': $millis()} %}",
                "End": True,
            }
        },
    }
    with LocalCloud() as cloud:
        before = int(time.time() * 1000)
        result = cloud.wait_for(cloud.start_execution(create_state_machine(machine), {}))
        after = int(time.time() * 1000)
    assert result.status == "SUCCEEDED", result.cause
    assert uuid.UUID(result.output["uuid"]).version == 4
    assert result.output["hash"] == hashlib.sha256(b"abc").hexdigest()
    assert result.output["parts"] == [[1, 2], [3]]
    assert result.output["parsed"] == {"a": 1}
    assert before <= result.output["now"] <= after


#: A bare ``$`` (JSONata's context value) in every place a user writes one.
CONTEXT_VALUE = {
    "QueryLanguage": "JSONata",
    "StartAt": "Shapes",
    "States": {
        "Shapes": {
            "Type": "Pass",
            "Output": {
                "items": "{% $states.input.items %}",
                "mapped": "{% $states.input.items.{'id': $} %}",
                "filtered": "{% $states.input.items[$ > 2] %}",
                "doubled": "{% $states.input.items.($ * 2) %}",
                "lambda": "{% $map($states.input.items, function($v){$v + 1}) %}",
                "top level": "{% $count($) %}",
                "beside a string": "{% '$' & $string($count($states.input.items[$ % 2 = 0])) %}",
            },
            "Next": "Pick",
        },
        "Pick": {
            "Type": "Choice",
            "Choices": [{"Condition": "{% $count($states.input.items[$ > 3]) = 1 %}", "Next": "Each"}],
            "Default": "Wrong",
        },
        "Wrong": {"Type": "Fail", "Error": "Choice.Missed"},
        "Each": {
            "Type": "Map",
            "Items": "{% $states.input.items[$ >= 3] %}",
            "ItemProcessor": {"StartAt": "Scale", "States": {"Scale": {"Type": "Pass", "Output": "{% $states.input * 10 %}", "End": True}}},
            "Output": "{% $merge([$states.input, {'each': $states.result}]) %}",
            "End": True,
        },
    },
}
BARE_CONTEXT = {"QueryLanguage": "JSONata", "StartAt": "Bare", "States": {"Bare": {"Type": "Pass", "Output": "{% $ %}", "End": True}}}


def test_bare_moto_refuses_the_context_value():
    for expression in ("$states.input.items[$ > 2]", "$states.input.items.{'id': $}", "$count($)"):
        with pytest.raises(moto_jsonata.IllegalJSONataVariableReference):
            moto_jsonata.extract_jsonata_variable_references(expression)


def test_runtime_binds_the_context_value_as_jsonata_does():
    with LocalCloud() as cloud:
        shapes = cloud.wait_for(cloud.start_execution(create_state_machine(CONTEXT_VALUE, "shapes"), {"items": [1, 2, 3, 4]}))
        bare = cloud.wait_for(cloud.start_execution(create_state_machine(BARE_CONTEXT, "bare"), {"items": [1]}))
    assert shapes.status == "SUCCEEDED", shapes.cause
    assert shapes.output == {
        "items": [1, 2, 3, 4],
        "mapped": [{"id": 1}, {"id": 2}, {"id": 3}, {"id": 4}],
        "filtered": [3, 4],
        "doubled": [2, 4, 6, 8],
        "lambda": [2, 3, 4, 5],
        "top level": 0,  # no input document: the top-level $ is undefined
        "beside a string": "$2",
        "each": [30, 40],
    }
    assert (bare.status, bare.error) == ("FAILED", "States.QueryEvaluationError")
    assert "returned nothing" in bare.cause
