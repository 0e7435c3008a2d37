"""Fix ``patches/jsonata_evaluator``: JSONata state machines evaluate, safely and catchably."""

from __future__ import annotations

import hashlib
import time
import uuid

import boto3
import jsonata
import pytest
from moto.stepfunctions.parser.asl.jsonata import jsonata as moto_jsonata

from constructs_lib.local import LocalCloud
from constructs_lib.local.patches import jsonata_evaluator
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
