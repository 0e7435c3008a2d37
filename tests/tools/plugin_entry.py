"""The package's pytest11 entry point, declared as an installed distribution would declare it
(a ``*.dist-info`` folder with ``entry_points.txt``): for tests that run pytest on a user's
project against this checkout, where the installed metadata may predate the entry point."""

from __future__ import annotations

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (the floor): the dev extra installs tomli there
    import tomli as tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def entry_point_site(site: Path) -> Path:
    """A folder to put on ``PYTHONPATH`` whose distribution declares pyproject's pytest11
    entry points."""
    entry_points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    dist_info = site / "locked_workflow_entry_probe-0.0.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: locked-workflow-entry-probe\nVersion: 0.0\n")
    (dist_info / "entry_points.txt").write_text(
        "[pytest11]\n" + "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    )
    return site
