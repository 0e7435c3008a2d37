"""Parsed definitions: the executions of one definition share its parsed program.

Gap (moto 5.2.1): every execution parses its state machine's definition again
(``ExecutionWorker._get_evaluation_entrypoint`` runs the ANTLR parser, pure Python, then builds
the evaluation components). A lock's definition is large (``Lock.fair`` around a Lambda:
~100 KB of ASL), and parsing it holds the process's one interpreter for ~0.4 s. Thirty
executions started together therefore hold it for ~13 s, and every execution already running
(a holder's release, a woken waiter, a Lambda's return) waits behind them: measured with a
sampling profiler during such a burst, 89 % of the time any thread held the GIL went to this
parse. Starting an execution in Step Functions costs the executions already running nothing.

Moto's ``CreateStateMachine`` parses the definition too, to validate it (``_validate_definition``),
and throws the program away: a stack of sixteen lock machines spent ~30 s of its local deploy
there, parsing each definition a second time for its first execution, and once more per backend.

Fix: parse each definition once per process (one cache for every ``LocalCloud`` of the process,
so the same stack deployed on the two backends is parsed once), keyed by its exact text, for its
validation at ``CreateStateMachine`` and for every execution: every execution gets the same program. The program is read-only while it runs: an execution's state (its variables,
its retry counts, its workers) lives in its own ``Environment`` and the objects an evaluation
creates, never on the components. The one exception is ``EvalComponent.heap_key``, the name
under which a component keeps its per-execution state in the environment's heap (a Retrier's
attempt count): bare moto draws it at random on first use and stores it on the component, so
two threads reaching a component first at the same moment (two executions now, or two Map
iterations already in bare moto) could each draw one, and one of them would later read its
count under the other's name. Here the key is derived from the component's identity, the same
in every thread, with nothing written.

The parse itself (:func:`parse`) builds moto's program for about 60 % of moto's CPU: ANTLR's
SLL prediction first (LL, moto's mode, only when SLL stops), and no program's whole text
rendered for an error message moto builds before it knows it needs it. The shared-lock test
stack's seventeen definitions: 19.6-23.0 s of CPU with moto's parse, 12.0-12.2 s with this one
(a fresh process each, loaded machine); the fair stack's fifteen: 15.8-16.6 s, 10.9-11.3 s.
``tools/parse_check.py`` shows the same tree and program for every definition the test stacks
render.

AWS: no AWS behaviour: a cost of the runtime. It keeps what a lock's timing on AWS assumes
(no documented page says it): starting executions does not hold up the ones already running.

Across processes (opt-in, :meth:`ProgramCache.keep_in`): a test run's workers deploy the same
stacks, each parsing the same definitions (a shared-lock stack's seventeen: ~20 s of one core).
A cache given a folder keeps each large definition's program there (pickled, keyed by the
definition's text and by everything the program is built by: the moto and ANTLR versions, the
Python version, this runtime's own sources, whose patches shape the components), written once
under a file lock while the other processes wait for it, and read back by them instead of
parsing. The test suite's conftest gives it one (``.pytest_cache``); nothing else does.

Proof: ``tests/local/test_patch_parsed_definitions.py``.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.metadata
import os
import pickle
import sys
import tempfile
import threading
from collections import OrderedDict
from contextlib import ExitStack
from pathlib import Path

from antlr4 import CommonTokenStream, InputStream, ParserRuleContext
from antlr4.atn.PredictionMode import PredictionMode
from antlr4.error.ErrorStrategy import BailErrorStrategy, DefaultErrorStrategy
from antlr4.error.Errors import ParseCancellationException
from moto.stepfunctions.parser import models
from moto.stepfunctions.parser.asl.antlr.runtime.ASLLexer import ASLLexer
from moto.stepfunctions.parser.asl.antlr.runtime.ASLParser import ASLParser
from moto.stepfunctions.parser.asl.component.eval_component import EvalComponent
from moto.stepfunctions.parser.asl.parse.asl_parser import ASLParserException, SyntaxErrorListener
from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor
from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

from locked_workflow.testing.seams import patch_attribute

#: Programs kept (least recently used dropped): a test session's distinct definitions.
CAPACITY = 256
#: The shortest definition a cache with a folder keeps there: a lock's definitions are ~100 KB
#: (~2 s to parse); a few-state machine parses in milliseconds, faster than it reads back.
MIN_KEPT_CHARS = 10_000


@functools.cache
def _builder_digest() -> str:
    """What a parsed program is built by, besides its definition: moto, ANTLR, Python and this
    runtime's sources (a patch may change the components the parse builds)."""
    digest = hashlib.sha256()
    for package in ("moto", "antlr4-python3-runtime"):
        digest.update(f"{package}=={importlib.metadata.version(package)}\0".encode())
    digest.update(sys.version.encode())
    runtime = Path(__file__).resolve().parents[1]
    for path in sorted(runtime.rglob("*.py")):
        digest.update(str(path.relative_to(runtime)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


class ProgramCache:
    """Parsed programs by definition text; one parse per definition, even when many threads
    start executions of it at once."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._programs: OrderedDict[str, EvalComponent] = OrderedDict()
        self._lock = threading.Lock()
        self._capacity = capacity
        self._folder: Path | None = None
        self.parses = 0

    def keep_in(self, folder: Path | str) -> None:
        """Keep the programs of large definitions in ``folder`` too, for the other processes
        that use it (see the module docstring)."""
        self._folder = Path(folder)
        self._folder.mkdir(parents=True, exist_ok=True)

    def program(self, definition: str) -> EvalComponent:
        with self._lock:  # a parse under the lock: the others starting the same definition wait for it
            program = self._programs.get(definition)
            if program is None:
                if self._folder is not None and len(definition) >= MIN_KEPT_CHARS:
                    program = self._kept(definition)
                else:
                    program = self._parse(definition)
                self._programs[definition] = program
                while len(self._programs) > self._capacity:
                    self._programs.popitem(last=False)
            else:
                self._programs.move_to_end(definition)
            return program

    def _parse(self, definition: str) -> EvalComponent:
        program = parse(definition)  # a syntax error is not kept
        self.parses += 1
        return program

    def _kept(self, definition: str) -> EvalComponent:
        """The program from the folder, or parsed and written there (one process parses; the
        others wait on the entry's file lock, then read it)."""
        assert self._folder is not None
        key = hashlib.sha256(_builder_digest().encode() + definition.encode()).hexdigest()
        path = self._folder / f"{key}.pickle"
        with open(self._folder / f"{key}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if path.is_file():
                os.utime(path)
                return pickle.loads(path.read_bytes())
            program = self._parse(definition)
            try:
                blob = pickle.dumps(program, protocol=pickle.HIGHEST_PROTOCOL)
            except (pickle.PicklingError, TypeError, AttributeError):
                return program  # not picklable: this process keeps it in memory only
            handle, staging = tempfile.mkstemp(dir=self._folder, suffix=".partial")
            with os.fdopen(handle, "wb") as out:
                out.write(blob)
            os.replace(staging, path)  # whole or absent
            return program


def parse(definition: str) -> EvalComponent:
    """moto's ``AmazonStateLanguageParser.parse(definition)[0]``, the same program (and the
    same ``ASLParserException`` for a definition it refuses), for about 60 % of the CPU.

    ANTLR's two-stage strategy: parse in SLL prediction mode with the bail-out error strategy
    first; only when that stops (a syntax error, or a decision SLL cannot make alone) parse
    again from the first token in moto's mode (LL, the default error strategy, moto's error
    listener). Input SLL parses without error LL parses too; the trees could differ only where
    the grammar is ambiguous, and ``tools/parse_check.py`` finds them equal on every definition
    the test stacks render.
    Then moto's preprocessor, except that a program's (and a Map processor's) whole text is no
    longer rendered for an error message that is only raised when ``StartAt`` or ``States`` is
    missing (:class:`_Preprocessor`)."""
    return preprocess(parse_tree(definition))


def preprocess(tree: ParserRuleContext) -> EvalComponent:
    """The program of a parse tree: moto's preprocessor (:class:`_Preprocessor`)."""
    return _Preprocessor().visit(tree)


def parse_tree(definition: str) -> ParserRuleContext:
    """The parse tree of :func:`parse` (SLL, else LL as moto parses)."""
    tokens = CommonTokenStream(ASLLexer(InputStream(definition)))
    parser = ASLParser(tokens)
    parser.removeErrorListeners()
    # the Python runtime's only spelling of these settings (Java's getInterpreter(), setErrorHandler())
    parser._interp.predictionMode = PredictionMode.SLL
    parser._errHandler = BailErrorStrategy()
    try:
        tree = parser.state_machine()
    except ParseCancellationException:
        tokens.seek(0)
        parser.reset()
        parser._interp.predictionMode = PredictionMode.LL
        parser._errHandler = DefaultErrorStrategy()
        listener = SyntaxErrorListener()
        parser.addErrorListener(listener)
        tree = parser.state_machine()
        if listener.errors:
            raise ASLParserException(errors=listener.errors)
    return tree


class _Preprocessor(Preprocessor):
    """moto's preprocessor, without rendering a whole program's text for every program.

    moto's ``visitProgram_decl`` (each state machine and each Parallel branch) and
    ``visitItem_processor_decl`` build the ``ValueError`` they would raise for a missing
    ``StartAt`` or ``States`` before looking, with the context's whole text in its message:
    ``getText`` walks every token below, so a branch nested in a branch is rendered again at
    each level (two thirds of the preprocessing of a read/write lock's definitions). Here that
    node's text is empty while moto's method runs; if it raises anything, it runs again with
    the text, for moto's own error."""

    def visitProgram_decl(self, ctx):  # type: ignore[no-untyped-def]
        return _without_eager_text(super().visitProgram_decl, ctx)

    def visitItem_processor_decl(self, ctx):  # type: ignore[no-untyped-def]
        return _without_eager_text(super().visitItem_processor_decl, ctx)


def _without_eager_text(visit, ctx):  # type: ignore[no-untyped-def]
    ctx.getText = str  # this node's text, empty (its children and ancestors keep theirs)
    try:
        return visit(ctx)
    except Exception:  # noqa: BLE001 - raised again below, with moto's message
        pass
    finally:
        del ctx.getText
    return visit(ctx)


#: The process's programs: every LocalCloud of the process shares them.
PROGRAMS = ProgramCache()


class _CachedParser:
    """What moto's ``_validate_definition`` calls ``AmazonStateLanguageParser``: the same parse
    (its errors raised as they are, for moto to map to ``InvalidDefinition``), kept."""

    def __init__(self, cache: ProgramCache) -> None:
        self._cache = cache

    def parse(self, definition: str) -> tuple[EvalComponent, None]:
        return self._cache.program(definition), None


def _heap_key(self: EvalComponent) -> str:
    return f"{type(self).__name__}-{id(self)}"  # unique among live components, stable, never written


def apply(stack: ExitStack, cache: ProgramCache | None = None) -> ProgramCache:
    cache = cache or PROGRAMS

    def entrypoint(self: ExecutionWorker) -> EvalComponent:
        return cache.program(self._evaluation_details.state_machine_details.definition)

    patch_attribute(stack, ExecutionWorker, "_get_evaluation_entrypoint", entrypoint, by=__name__)
    patch_attribute(stack, models, "AmazonStateLanguageParser", _CachedParser(cache), by=__name__)
    patch_attribute(stack, EvalComponent, "heap_key", property(_heap_key), by=__name__)
    return cache
