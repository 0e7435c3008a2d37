"""The pytest plugin is registered by installing the package (a ``pytest11`` entry point, as
moto needs no conftest line either), and importing it has no side effect (issue 26, part 3)."""

from __future__ import annotations

import os
import subprocess
import sys
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (the floor): the dev extra installs tomli there
    import tomli as tomllib
from pathlib import Path

from plugin_entry import entry_point_site

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = "locked_workflow.testing.pytest_plugin"

USER_TEST = '''
def test_the_fixture_comes_from_the_installed_package(local_cloud):
    assert local_cloud.dynamodb.list_tables()["TableNames"] == []
'''


def _environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("JSII_NODE", "PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    return {**env, "AWS_DEFAULT_REGION": "us-east-1", **extra}


def test_the_package_declares_the_plugin_as_a_pytest11_entry_point():
    entry_points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    assert entry_points == {PLUGIN: PLUGIN}  # named after its module: an old conftest line is harmless


def test_importing_the_plugin_has_no_side_effect():
    """It once set JSII_NODE from a checkout's node_modules and loaded the whole runtime."""
    script = (
        "import os, sys\n"
        f"import {PLUGIN}\n"
        "print(os.environ.get('JSII_NODE'), sorted(m for m in ('moto', 'aws_cdk', 'jsii', "
        "'locked_workflow.testing.cloud') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], env=_environment(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "None []"


def test_a_project_without_a_conftest_line_gets_the_fixtures(tmp_path):
    """The entry point as an installed distribution declares it (pyproject's), on a project
    with no conftest.py; blocking the plugin by its name (the negative control) takes the
    fixture away, so it came from the entry point."""
    site = entry_point_site(tmp_path / "site")
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_user.py").write_text(USER_TEST)
    env = _environment(PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]))

    def pytest(*options: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options, "test_user.py"],
            cwd=project, env=env, capture_output=True, text=True, timeout=300,
        )

    done = pytest()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout
    blocked = pytest("-p", f"no:{PLUGIN}")
    assert blocked.returncode != 0 and "fixture 'local_cloud' not found" in blocked.stdout
    # an old conftest line registers nothing twice
    (project / "conftest.py").write_text(f"pytest_plugins = [{PLUGIN!r}]\n")
    again = pytest()
    assert again.returncode == 0 and "1 passed" in again.stdout, again.stdout[-3000:] + again.stderr[-2000:]
