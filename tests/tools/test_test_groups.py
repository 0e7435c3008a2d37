"""The suite's own layout: no deployed test file over 500 lines, the groups of files that share
one deployment per backend (``tests/file_groups.py``, ``tests/kept_deployment.py``),
and the order their items run in."""

from __future__ import annotations

import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

TESTS = Path(__file__).resolve().parents[1]


def test_no_deployed_test_file_is_over_500_lines():
    """Files of a few hundred lines, one concept each (issue 28): the long deployed files were
    split into groups instead."""
    long = {p.name: n for p in sorted((TESTS / "lock").glob("test_*.py"))
            if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}


def test_every_file_of_a_group_exists_in_one_group_and_longest_first_names_what_exists():
    from file_groups import GROUPS, LONGEST_FIRST

    files = [name for names in GROUPS.values() for name in names]
    assert len(files) == len(set(files)), files
    assert all(names[0] == group for group, names in GROUPS.items())  # a group is named as its first file
    existing = {p.name for p in TESTS.rglob("test_*.py")}
    assert set(files) <= existing, set(files) - existing
    assert set(LONGEST_FIRST) <= existing, set(LONGEST_FIRST) - existing
    assert not set(LONGEST_FIRST) & (set(files) - set(GROUPS)), "a group's later file is ranked by its group"


def test_a_kept_deployment_opens_once_per_key_and_closes_before_it_opens_another():
    from kept_deployment import KeptDeployment

    kept, events = KeptDeployment(), []

    def opener(name):
        def open(exit_stack):
            events.append(f"open {name}")
            exit_stack.callback(events.append, f"close {name}")
            return object()
        return open

    first = kept.get(("moto", "S"), opener("moto"))
    assert kept.get(("moto", "S"), opener("moto")) is first and kept.key == ("moto", "S")
    kept.get(("dynamodb-local", "S"), opener("dynamodb-local"))
    assert events == ["open moto", "close moto", "open dynamodb-local"] and kept.opened == 2
    kept.release()
    assert events[-1] == "close dynamodb-local" and kept.key is None
    kept.release()  # (nothing kept: nothing to close)

    def broken(exit_stack):
        exit_stack.callback(events.append, "close broken")
        raise RuntimeError("deploy failed")

    with pytest.raises(RuntimeError, match="deploy failed"):
        kept.get("broken", broken)
    assert events[-1] == "close broken" and kept.key is None and kept.opened == 2


def test_the_files_of_a_group_share_one_deployment_per_backend(monkeypatch):
    """Two files' fixtures asking for the same stack and handle get one deployment; the other
    backend's closes it first (one LocalCloud at a time in a process)."""
    import deployed
    from kept_deployment import KEPT

    events = []

    @contextmanager
    def deployment(backend, synthesized):
        events.append(f"deploy {synthesized.stack_name} on {backend}")
        yield f"cloud:{backend}", "app"
        events.append(f"close {backend}")

    monkeypatch.setattr(deployed, "_deployment", deployment)
    synthesized = SimpleNamespace(stack_name="Fair", assets_dir=Path("cdk.out"))

    def run(cloud, app):
        return SimpleNamespace(cloud=cloud, app=app)

    KEPT.release()
    try:
        first_file = deployed.shared_deployment("moto", synthesized, run)
        second_file = deployed.shared_deployment("moto", synthesized, run)
        assert second_file is first_file and events == ["deploy Fair on moto"]
        assert deployed.shared_deployment("dynamodb-local", synthesized, run).cloud == "cloud:dynamodb-local"
        assert events == ["deploy Fair on moto", "close moto", "deploy Fair on dynamodb-local"]
    finally:
        KEPT.release()
    assert events[-1] == "close dynamodb-local"


def test_a_groups_items_run_together_moto_first_then_dynamodb_local():
    """The record group's two files, collected: the items of no backend, then every moto item
    (each file in the group's order), then every DynamoDB Local one - one deployment per
    backend."""
    from file_groups import GROUPS

    names = GROUPS["test_lock_record.py"]
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         *(f"tests/lock/{n}" for n in reversed(names))],
        capture_output=True, text=True, cwd=TESTS.parent, timeout=600)
    ids = [line for line in out.stdout.splitlines() if "::" in line]
    assert ids, out.stdout + out.stderr

    def backend(node_id: str) -> int:
        return 2 if "dynamodb-local" in node_id else 1 if "moto" in node_id else 0

    assert [backend(i) for i in ids] == sorted(backend(i) for i in ids), ids
    for b in (1, 2):
        files = [i.split("::")[0].rsplit("/", 1)[-1] for i in ids if backend(i) == b]
        assert files == sorted(files, key=names.index), files


def test_loadgroup_hands_out_each_group_of_files_whole_and_a_file_of_no_group_alone():
    """``make test``'s ``--dist loadgroup`` schedules by :func:`file_groups.group_of` of each
    item's file (pytest-xdist's own ``xdist_group`` marks have no effect on pytest 9.2)."""
    from file_groups import FileGroupScheduling

    scope = FileGroupScheduling._split_scope
    assert {scope(None, f"tests/lock/{name}::test_x[moto]") for name in
            ("test_fair_lock.py", "test_fair_dead_participants.py", "test_fair_lost_responses.py")} == {"test_fair_lock.py"}
    assert scope(None, "tests/lock/test_fair_clients.py::test_y[dynamodb-local]") == "test_fair_clients.py"
    assert scope(None, "tests/client/test_cli.py::test_z") == "test_cli.py"
