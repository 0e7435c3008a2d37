"""Run jsii on the project's Node LTS (``node_modules/.bin/node``, from the npm package
``node``) when it is installed and nothing else was chosen: ``make`` exports ``JSII_NODE``;
this covers ``pytest`` or ``python -m tools.demo`` run directly. Call it before
the first import of ``aws_cdk``, which starts jsii's Node process."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_NODE = Path(__file__).resolve().parents[2] / "node_modules" / ".bin" / "node"


def use_project_node() -> None:
    if "JSII_NODE" not in os.environ and PROJECT_NODE.exists():
        os.environ["JSII_NODE"] = str(PROJECT_NODE)
