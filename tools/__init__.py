"""The repository's tools (not part of the installed library): ``make demo`` (``demo``),
``make bench`` / ``bench-variants`` / ``bench-fair`` (``bench*``), ``make stress`` (``stress``),
and the example scenario they share (``scenario``)."""

from tools.node import use_project_node

use_project_node()  # `python -m tools.demo` run directly: jsii on this checkout's Node
