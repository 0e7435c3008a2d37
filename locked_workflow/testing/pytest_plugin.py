"""pytest plugin: a ``local_cloud`` fixture for tests of your own stacks.

Enable it in your top-level ``conftest.py``::

    pytest_plugins = ["locked_workflow.testing.pytest_plugin"]

    def test_my_workflow(local_cloud, tmp_path):
        app = local_cloud.deploy(my_template, assets_dir=cdk_out)
        arn = local_cloud.start_execution(app.state_machine_arn("MyWorkflow"), {"id": "1"})
        assert local_cloud.wait_for(arn).status == "SUCCEEDED"

Fixtures:

* ``local_cloud`` - a fresh :class:`~locked_workflow.testing.LocalCloud` per test, on the
  backend from ``local_backend``.
* ``local_backend`` - ``"moto"`` unless ``$LOCAL_CLOUD_BACKEND`` says otherwise; override
  it (or parametrize ``local_cloud`` indirectly with backend names) to run a test on both.
* ``local_cloud_factory`` - ``factory(backend="moto", **kwargs)`` for tests that need
  options (``emit_status_events=False``...); the cloud is closed after the test.

A ``dynamodb-local`` cloud whose Java server or jar is missing skips the test, except when
``$CI`` is ``true``: there a missing backend is a failure.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from typing import Any, Callable, Iterator

import pytest

from locked_workflow.testing.cloud import LocalCloud
from locked_workflow.testing.dynamodb_local import unavailable_reason

ENV_BACKEND = "LOCAL_CLOUD_BACKEND"


def require_backend(backend: str) -> None:
    """Skip (fail on CI) when ``backend`` cannot run here."""
    if backend != "dynamodb-local":
        return
    reason = unavailable_reason()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"DynamoDB Local is required on CI: {reason}")
    pytest.skip(reason)


@pytest.fixture
def local_backend(request: pytest.FixtureRequest) -> str:
    return getattr(request, "param", None) or os.environ.get(ENV_BACKEND, "moto")


@pytest.fixture
def local_cloud_factory() -> Iterator[Callable[..., LocalCloud]]:
    with ExitStack() as stack:

        def factory(backend: str = "moto", **kwargs: Any) -> LocalCloud:
            require_backend(backend)
            return stack.enter_context(LocalCloud(backend, **kwargs))

        yield factory


@pytest.fixture
def local_cloud(request: pytest.FixtureRequest, local_backend: str, local_cloud_factory) -> LocalCloud:  # type: ignore[no-untyped-def]
    backend = getattr(request, "param", None) or local_backend
    return local_cloud_factory(backend)
