"""Helpers of the local-runtime tests (plain functions; fixtures live in conftest.py).

``bare_moto(*fixes)`` is moto as shipped (Step Functions interpreter on), optionally with
some of the runtime's fixes - the prerequisites a negative test needs to reach the gap it
demonstrates.
"""

from __future__ import annotations

import json
import time
from contextlib import ExitStack, contextmanager
from typing import Any, Callable, Iterator

import boto3
import pytest
from moto import __version__ as _moto_version

REGION = "us-east-1"
ROLE_ARN = "arn:aws:iam::123456789012:role/local-test"
TERMINAL = {"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"}


#: The installed moto, as a comparable tuple: ``(5, 2, 1)``.
MOTO = tuple(int(part) for part in _moto_version.split(".")[:3])


def gap_fixed_upstream(version: tuple[int, int, int], what: str) -> None:
    """Skip a bare-moto proof whose gap moto closed in ``version``: the runtime keeps its fix
    for the older moto it supports (``pyproject.toml``'s floor), and the module can go once the
    floor reaches ``version``."""
    if MOTO >= version:
        pytest.skip(f"moto {'.'.join(map(str, version))} fixed it upstream ({what}); the fix stays for older moto")


@contextmanager
def bare_moto(*fixes: Callable[[ExitStack], None]) -> Iterator[None]:
    """moto 5.2.1 with its Step Functions interpreter, plus only the given fixes."""
    from moto import mock_aws

    with ExitStack() as stack:
        stack.enter_context(mock_aws(config={"stepfunctions": {"execute_state_machine": True}}))
        for fix in fixes:
            fix(stack)
        yield


def create_state_machine(definition: dict[str, Any], name: str = "machine") -> str:
    sfn = boto3.client("stepfunctions", region_name=REGION)
    return sfn.create_state_machine(name=name, definition=json.dumps(definition), roleArn=ROLE_ARN)[
        "stateMachineArn"
    ]


def wait_for_end(execution_arn: str, timeout: float = 20.0) -> dict[str, Any]:
    """describe_execution once the execution has ended (boto3 against the active mock)."""
    sfn = boto3.client("stepfunctions", region_name=REGION)
    deadline = time.monotonic() + timeout
    while True:
        description = sfn.describe_execution(executionArn=execution_arn)
        if description["status"] in TERMINAL or time.monotonic() > deadline:
            return description
        time.sleep(0.05)


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns something truthy; returns it (or the last falsy value)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def lambda_folder(tmp_path, name: str, source: str):  # type: ignore[no-untyped-def]
    """A code folder holding ``index.py`` with ``source``."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "index.py").write_text(source)
    return folder
