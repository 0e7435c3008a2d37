"""Fix ``patches/parsed_paths``: a JSONPath is parsed once per path text, and reads the same."""

from __future__ import annotations

import json
import uuid
from contextlib import contextmanager
from typing import Iterator
from unittest import mock

import boto3
import jsonpath_ng
import jsonpath_ng.ext
import pytest

from locked_workflow.testing import LocalCloud
from locked_workflow.testing.patches import execution_output, execution_snapshot, parsed_paths
from local_helpers import REGION, bare_moto, create_state_machine, wait_for_end

#: Three Pass states, each with a ResultPath and an InputPath/OutputPath.
PATHS = {
    "StartAt": "One",
    "States": {
        "One": {"Type": "Pass", "Result": 1, "ResultPath": "$.one", "Next": "Two"},
        "Two": {"Type": "Pass", "InputPath": "$", "Result": {"n": 2}, "ResultPath": "$.two", "Next": "Three"},
        "Three": {"Type": "Pass", "Parameters": {"sum.$": "States.MathAdd($.one, $.two.n)"},
                  "ResultPath": "$.three", "OutputPath": "$.three", "End": True},
    },
}


@contextmanager
def counting_parses() -> Iterator[list[tuple[str, str]]]:
    """Every (parser, JSONPath text) jsonpath_ng's two parsers, the plain and the extended, are given."""
    parsed: list[tuple[str, str]] = []
    plain, extended = jsonpath_ng.parser.JsonPathParser.parse, jsonpath_ng.ext.parser.ExtendedJsonPathParser.parse

    def counted(original):  # type: ignore[no-untyped-def]
        def parse(self, string, *args, **kwargs):  # type: ignore[no-untyped-def]
            parsed.append((type(self).__name__, string))
            return original(self, string, *args, **kwargs)
        return parse

    with mock.patch.object(jsonpath_ng.parser.JsonPathParser, "parse", counted(plain)), \
            mock.patch.object(jsonpath_ng.ext.parser.ExtendedJsonPathParser, "parse", counted(extended)):
        yield parsed


def run_three() -> list[object]:
    machine = create_state_machine(PATHS)
    sfn = boto3.client("stepfunctions", region_name=REGION)
    outputs = []
    for n in range(3):
        arn = sfn.start_execution(stateMachineArn=machine, name=str(uuid.uuid4()),
                                  input=json.dumps({"n": n}))["executionArn"]
        end = wait_for_end(arn)
        assert end["status"] == "SUCCEEDED", end
        outputs.append(json.loads(end["output"]))
    return outputs


def test_bare_moto_parses_every_path_at_every_use():
    with bare_moto(execution_snapshot.apply, execution_output.apply), counting_parses() as parsed:
        assert run_three() == [{"sum": 3}] * 3
    assert parsed.count(("JsonPathParser", "$.one")) == 3  # ResultPath: once per execution, anew each time
    assert parsed.count(("ExtendedJsonPathParser", "$.one")) == 3  # the MathAdd argument, the same


def test_runtime_parses_each_path_once():
    with LocalCloud(), counting_parses() as parsed:
        assert run_three() == [{"sum": 3}] * 3
    assert parsed.count(("JsonPathParser", "$.one")) <= 1  # once per process (a test before may have parsed it)
    assert len(parsed) == len(set(parsed))  # no (parser, path) parsed twice


def test_a_path_that_does_not_parse_raises_every_time_and_is_not_kept():
    cache = parsed_paths.ParsedPaths(jsonpath_ng.ext.parse)
    for _ in range(2):
        with pytest.raises(Exception):
            cache("$.[")
    assert cache.parses == 0
    first = cache("$.a.b")
    assert cache("$.a.b") is first and cache.parses == 1
    assert [m.value for m in first.find({"a": {"b": 7}})] == [7]
    assert first.find({"a": {"b": 8}})[0].value == 8  # the same tree reads other data alike


def test_the_cache_is_bounded():
    cache = parsed_paths.ParsedPaths(jsonpath_ng.parse, capacity=2)
    for path in ("$.a", "$.b", "$.c"):
        cache(path)
    assert cache.parses == 3 and len(cache) <= 2
