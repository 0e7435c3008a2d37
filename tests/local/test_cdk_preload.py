"""``cdk_preload``: importing the runtime starts loading aws-cdk-lib on a thread (node's work
overlapping Python's imports of moto), unless ``LOCKED_WORKFLOW_CDK_PRELOAD=0``.

Each case runs in a fresh interpreter (``aws_cdk`` is already imported in this one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = (
    "import sys\n"
    "import locked_workflow.testing.cloud\n"
    "from locked_workflow.testing import cdk_preload\n"
    "thread = cdk_preload.start()\n"
    "print('thread', thread.name if thread else None)\n"
    "if thread: thread.join(600)\n"
    "print('aws_cdk', 'aws_cdk' in sys.modules)\n"
)


def _run(**env: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if line.startswith(("thread ", "aws_cdk "))]


def test_importing_the_runtime_loads_aws_cdk_on_a_thread():
    assert _run() == ["thread aws-cdk-preload", "aws_cdk True"]


def test_the_preload_can_be_turned_off():
    assert _run(LOCKED_WORKFLOW_CDK_PRELOAD="0") == ["thread None", "aws_cdk False"]
