"""Parsed paths: a JSONPath (``ResultPath``, ``InputPath``, ``OutputPath``, a ``.$`` field) is
parsed once per path text.

Gap (moto 5.2.1): every evaluation of a JSONPath parses its text again, and each parse builds a
new PLY parser first (``jsonpath_ng.parse`` and ``jsonpath_ng.ext.parse`` construct a
``JsonPathParser`` per call, whose ``__init__`` loads the LALR tables): ``ResultPath`` on every
state that has one (a lock's acquire and release: every task of a ``Lock.mutex`` workflow), and
``extract_json`` for every ``InputPath``/``OutputPath``/``ItemsPath`` and ``.$`` field. Sampled
over uncontended locked runs, this parsing held the process's one interpreter ~8 % of the time
the executions' threads ran (the yacc set-up alone 5 %), for paths that never change.

Fix: the two ``parse`` functions moto's interpreter calls (``result_path.parse``,
``json_path.parse``) keep what they parsed, by path text (each its own cache: the two parsers
accept different languages). A path that does not parse raises as before, every time (nothing
is kept). A parsed path is a tree of ``jsonpath_ng`` nodes that ``find`` and
``update_or_create`` read and never change, so one tree serves every execution and thread.

AWS: no AWS behaviour: a cost of the runtime. It keeps what a lock's timing on AWS assumes
(no documented page says it): a state's cost does not include re-reading its own definition.

Proof: ``tests/local/test_patch_parsed_paths.py``.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack
from typing import Any, Callable

from moto.stepfunctions.parser.asl.component.common.path import result_path
from moto.stepfunctions.parser.asl.utils import json_path

from locked_workflow.testing.seams import patch_attribute

#: Paths kept per parser (the whole cache is dropped past this: a session's distinct paths are few).
CAPACITY = 4096


class ParsedPaths:
    """``parse`` (a path text in, a parsed path out), each text parsed once."""

    def __init__(self, parse: Callable[[str], Any], capacity: int = CAPACITY) -> None:
        self._parse = parse
        self._parsed: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._capacity = capacity
        self.parses = 0

    def __call__(self, path: str) -> Any:
        parsed = self._parsed.get(path)
        if parsed is None:
            parsed = self._parse(path)  # a path that does not parse raises here, and is not kept
            with self._lock:
                self.parses += 1
                if len(self._parsed) >= self._capacity:
                    self._parsed.clear()
                self._parsed[path] = parsed
        return parsed

    def __len__(self) -> int:
        return len(self._parsed)


#: The modules whose ``parse`` the interpreter calls: ResultPath's (jsonpath_ng's) and the
#: extended one of every other path (``extract_json``).
USERS = (result_path, json_path)


def apply(stack: ExitStack) -> dict[str, ParsedPaths]:
    caches = {}
    for module in USERS:
        caches[module.__name__] = cache = ParsedPaths(module.parse)
        patch_attribute(stack, module, "parse", cache, by=__name__)
    return caches
