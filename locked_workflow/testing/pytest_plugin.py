"""pytest plugin: a ``local_cloud`` fixture for tests of your own stacks.

Installing the package registers it with pytest (its ``pytest11`` entry point, named after
this module): no ``conftest.py`` line is needed, and an old ``pytest_plugins =
["locked_workflow.testing.pytest_plugin"]`` line is harmless. Importing it has no side
effect (the runtime loads when a fixture first needs it), so pytest starts as before in a
project that never uses it::

    def test_my_workflow(local_cloud, tmp_path):
        app = local_cloud.deploy(my_template, assets_dir=cdk_out)
        arn = local_cloud.start_execution(app.state_machine_arn("MyWorkflow"), {"id": "1"})
        assert local_cloud.wait_for(arn).status == "SUCCEEDED"

Fixtures:

* ``local_cloud`` - a fresh :class:`~locked_workflow.testing.LocalCloud` per test, on the
  backend from ``local_backend``.
* ``local_backend`` - ``"moto"`` unless ``$LOCAL_CLOUD_BACKEND`` says otherwise (or
  ``$LOCAL_CLOUD_DYNAMODB_PORT`` is set: then ``"dynamodb-local"``); override it (or
  parametrize ``local_cloud`` indirectly with backend names) to run a test on both.
* ``local_cloud_factory`` - ``factory(backend="moto", **kwargs)`` for tests that need
  options (``emit_status_events=False``...); the cloud is closed after the test.

Inspecting a test's locks while it runs (paused at a ``breakpoint()``, say):
``LOCAL_CLOUD_DYNAMODB_PORT=8000`` starts every ``dynamodb-local`` cloud's server on that
loopback port, and prints its endpoint on the terminal, so that another shell can run
``locked-workflow locks list --endpoint-url http://127.0.0.1:8000 --table <name>``.

A ``dynamodb-local`` cloud whose Java server or jar is missing skips the test, except when
``$CI`` is ``true``: there a missing backend is a failure.
"""

from __future__ import annotations

import os
from contextlib import ExitStack, nullcontext
from typing import TYPE_CHECKING, Any, Callable, Iterator

import pytest

if TYPE_CHECKING:
    from locked_workflow.testing.cloud import LocalCloud

ENV_BACKEND = "LOCAL_CLOUD_BACKEND"
#: A fixed port for DynamoDB Local (and the ``dynamodb-local`` backend by default).
ENV_PORT = "LOCAL_CLOUD_DYNAMODB_PORT"


def pinned_port() -> int | None:
    """The port ``$LOCAL_CLOUD_DYNAMODB_PORT`` names (None when unset)."""
    raw = os.environ.get(ENV_PORT, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise pytest.UsageError(f"${ENV_PORT} must be a TCP port from 1 to 65535, got: {raw!r}")
    return int(raw)


def require_backend(backend: str) -> None:
    """Skip (fail on CI) when ``backend`` cannot run here."""
    if backend != "dynamodb-local":
        return
    from locked_workflow.testing.dynamodb_local import unavailable_reason

    reason = unavailable_reason()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"DynamoDB Local is required on CI: {reason}")
    pytest.skip(reason)


@pytest.fixture
def local_backend(request: pytest.FixtureRequest) -> str:
    default = "dynamodb-local" if pinned_port() is not None else "moto"
    return getattr(request, "param", None) or os.environ.get(ENV_BACKEND) or default


@pytest.fixture
def local_cloud_factory(pytestconfig: pytest.Config) -> Iterator[Callable[..., "LocalCloud"]]:
    from locked_workflow.testing.cloud import LocalCloud

    with ExitStack() as stack:

        def factory(backend: str = "moto", **kwargs: Any) -> LocalCloud:
            require_backend(backend)
            port = pinned_port() if backend == "dynamodb-local" else None
            if port is not None:
                kwargs.setdefault("dynamodb_local_port", port)
            cloud = stack.enter_context(LocalCloud(backend, **kwargs))
            if port is not None:
                _announce(pytestconfig, f"local_cloud: DynamoDB Local at {cloud.dynamodb_endpoint_url} "
                                        f"(locked-workflow locks list --endpoint-url {cloud.dynamodb_endpoint_url} "
                                        "--table NAME)")
            return cloud

        yield factory


def _announce(config: pytest.Config, line: str) -> None:
    """Write ``line`` on the terminal now, past pytest's output capture."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        return
    with capture.global_and_fixture_disabled() if capture is not None else nullcontext():
        reporter.write_line(line)


@pytest.fixture
def local_cloud(request: pytest.FixtureRequest, local_backend: str, local_cloud_factory) -> "LocalCloud":  # type: ignore[no-untyped-def]
    backend = getattr(request, "param", None) or local_backend
    return local_cloud_factory(backend)
