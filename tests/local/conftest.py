"""Fixtures of the local-runtime tests: the runtime's own pytest plugin.

``local_cloud`` is the full runtime on the backend named by ``$LOCAL_CLOUD_BACKEND``
(default ``moto``); helpers for bare-moto negative tests are in ``local_helpers.py``.
"""

from __future__ import annotations

import os

from tools.node import use_project_node  # noqa: E402

use_project_node()  # before aws_cdk starts jsii

from locked_workflow.testing.pytest_plugin import (  # noqa: E402,F401 - fixtures
    local_backend,
    local_cloud,
    local_cloud_factory,
)
