"""Run jsii on this checkout's Node LTS (``node_modules/.bin/node``, from the npm package
``node``) when it is installed and nothing else was chosen: ``make`` exports ``JSII_NODE``;
this covers ``pytest`` (the suite's conftest) or ``python -m tools.demo`` (``tools``'s
``__init__``) run directly. Call it before the first import of ``aws_cdk``, which starts jsii's
Node process. A checkout's concern: not part of the wheel (the installed package sets
nothing on import)."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_NODE = Path(__file__).resolve().parents[1] / "node_modules" / ".bin" / "node"


def use_project_node() -> None:
    if "JSII_NODE" not in os.environ and PROJECT_NODE.exists():
        os.environ["JSII_NODE"] = str(PROJECT_NODE)
