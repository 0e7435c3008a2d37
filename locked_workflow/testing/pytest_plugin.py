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
from typing import TYPE_CHECKING, Any, Callable, Iterator

import pytest

if TYPE_CHECKING:
    from locked_workflow.testing.cloud import LocalCloud

ENV_BACKEND = "LOCAL_CLOUD_BACKEND"


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
    return getattr(request, "param", None) or os.environ.get(ENV_BACKEND, "moto")


@pytest.fixture
def local_cloud_factory() -> Iterator[Callable[..., "LocalCloud"]]:
    from locked_workflow.testing.cloud import LocalCloud

    with ExitStack() as stack:

        def factory(backend: str = "moto", **kwargs: Any) -> LocalCloud:
            require_backend(backend)
            return stack.enter_context(LocalCloud(backend, **kwargs))

        yield factory


@pytest.fixture
def local_cloud(request: pytest.FixtureRequest, local_backend: str, local_cloud_factory) -> "LocalCloud":  # type: ignore[no-untyped-def]
    backend = getattr(request, "param", None) or local_backend
    return local_cloud_factory(backend)
