"""MkDocs hooks of the documentation site (``mkdocs.yml``: ``hooks``).

The API reference is read from the sources without importing them (griffe, through
mkdocstrings): no aws-cdk-lib, moto or Node is needed to build the site. In a checkout the
subpackages ``locked_workflow.constructs_lib``, ``.state_machines`` and ``.lambdas`` are the
top-level folders ``constructs_lib/``, ``state_machines/`` and ``lambdas/``, which the wheel
and the editable install map under the package (``[tool.setuptools]`` in pyproject.toml). Griffe reads, it does not import, so this hook lays the
package out as the wheel does - a folder of symbolic links, ``build/api-src/locked_workflow/``
- before mkdocstrings looks for it (``mkdocs.yml`` points mkdocstrings there).
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from mkdocs.plugins import event_priority

# mkdocs loads this file by its path, with no ``tools`` package on ``sys.path``: so its neighbour too.
_spec = importlib.util.spec_from_file_location("docstring_roles", Path(__file__).with_name("docstring_roles.py"))
_roles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_roles)

ROOT = Path(__file__).resolve().parents[1]
#: Where the package is laid out as the wheel has it (``mkdocs.yml``: mkdocstrings' ``paths``).
API_SOURCE = ROOT / "build" / "api-src"
#: The wheel's layout: name inside ``locked_workflow/`` -> the checkout's file or folder.
LAYOUT = {
    "__init__.py": ROOT / "locked_workflow" / "__init__.py",
    "py.typed": ROOT / "locked_workflow" / "py.typed",
    "testing": ROOT / "locked_workflow" / "testing",
    "constructs_lib": ROOT / "constructs_lib",
    "state_machines": ROOT / "state_machines",
    "lambdas": ROOT / "lambdas",
}


def lay_out_package(destination: Path = API_SOURCE) -> Path:
    """Write ``destination/locked_workflow/`` as links to the checkout's folders; return it."""
    package = destination / "locked_workflow"
    shutil.rmtree(destination, ignore_errors=True)
    package.mkdir(parents=True)
    for name, target in LAYOUT.items():
        (package / name).symlink_to(target, target_is_directory=target.is_dir())
    return package


@event_priority(100)  # before mkdocstrings' own on_config, which drops a search path not there
def on_config(config, **kwargs):
    lay_out_package()
    return config


def on_page_content(html, **kwargs):
    """Each page's docstrings without the reST roles' names (``tools/docstring_roles.py``)."""
    return _roles.plain_roles(html)
