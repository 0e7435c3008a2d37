"""``docs/runtime.md``'s list of what the runtime models cannot drift from the modules.

The table "What the runtime models" has one row per module of
``locked_workflow/testing/patches/`` (and of the runtime modules named in :data:`RUNTIME_MODULES`),
each naming the module, what AWS does, the AWS page and the proof test. The module's docstring is
the source: the row's proof test must exist and be the one its docstring names (``Proof:``), and
the row's AWS page must be one its docstring cites - or both say "no AWS behaviour". Read from
the files (``pkgutil`` and ``ast``), nothing imported: no moto needed.
"""

from __future__ import annotations

import ast
import pkgutil
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTING = ROOT / "locked_workflow" / "testing"
DOC = ROOT / "docs" / "runtime.md"
SECTION = "## What the runtime models"
#: The runtime's own modules that model an AWS behaviour (the rest of it deploys and drives).
RUNTIME_MODULES = ("lambda_runtime", "lambda_environments", "lambda_imports", "function_logs", "events")
NO_AWS = "no AWS behaviour"

_ROW = re.compile(r"^\|\s*`(?P<module>[\w/]+)`\s*\|(?P<rest>.*)\|\s*$")
_AWS_URL = re.compile(r"https://docs\.aws\.amazon\.com/[^\s`'\"<>]+")
_LINK = re.compile(r"\]\((https://docs\.aws\.amazon\.com/[^)\s]+)\)")
_PROOF_IN_ROW = re.compile(r"`(tests/[\w/]+\.py)`")
_PROOF_IN_DOCSTRING = re.compile(r"Proof: ``(tests/[\w/]+\.py)``")


def expected_modules() -> list[str]:
    """Every module the table must list, as the row names it."""
    patches = sorted(m.name for m in pkgutil.iter_modules([str(TESTING / "patches")]))
    return [f"patches/{name}" for name in patches] + list(RUNTIME_MODULES)


def _docstring(module: str) -> str | None:
    path = TESTING / f"{module}.py"
    if not path.is_file():
        return None
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def _aws_urls(text: str) -> set[str]:
    return {url.rstrip(".,;:)") for url in _AWS_URL.findall(text)}


def table_rows(doc_text: str) -> list[tuple[str, str]]:
    """``(module, rest of the row)`` for each row of the section's table."""
    _, found, section = doc_text.partition(SECTION)
    assert found, f"docs/runtime.md must have a section {SECTION!r}"
    section = section.split("\n## ", 1)[0]
    return [(m["module"], m["rest"]) for line in section.splitlines() if (m := _ROW.match(line))]


def problems(doc_text: str, modules: list[str]) -> list[str]:
    """What is wrong between the table in ``doc_text`` and ``modules`` (empty: they agree)."""
    found: list[str] = []
    rows = table_rows(doc_text)
    named = [module for module, _ in rows]
    for module in modules:
        count = named.count(module)
        if count != 1:
            found.append(f"{module}: {count} rows in docs/runtime.md, expected 1")
    for module, rest in rows:
        docstring = _docstring(module)
        if docstring is None:
            found.append(f"{module}: a row names a module that does not exist")
            continue
        if module not in modules:
            found.append(f"{module}: a row names a module the list does not cover")
        proofs = _PROOF_IN_ROW.findall(rest)
        cited = _PROOF_IN_DOCSTRING.findall(docstring)
        if len(proofs) != 1:
            found.append(f"{module}: the row names {len(proofs)} proof tests, expected 1")
        elif not (ROOT / proofs[0]).is_file():
            found.append(f"{module}: proof {proofs[0]} does not exist")
        elif proofs[0] not in cited:
            found.append(f"{module}: proof {proofs[0]} is not the docstring's ({cited})")
        links = {url.rstrip(".,;:)") for url in _LINK.findall(rest)}
        if not links:
            if NO_AWS not in rest or NO_AWS not in docstring:
                found.append(f"{module}: no AWS page, and not '{NO_AWS}' in both row and docstring")
        elif not links <= _aws_urls(docstring):
            found.append(f"{module}: AWS page {sorted(links - _aws_urls(docstring))} not cited by its docstring")
    return found


def test_every_module_has_one_row_with_its_aws_page_and_its_proof():
    assert problems(DOC.read_text(encoding="utf-8"), expected_modules()) == []


def test_the_list_covers_every_patch_module_and_the_runtimes_own():
    modules = expected_modules()
    assert "patches/serial_dynamodb" in modules and "patches/__init__" not in modules
    assert len(modules) == len(list((TESTING / "patches").glob("[!_]*.py"))) + len(RUNTIME_MODULES)


def test_a_missing_row_a_made_up_module_and_a_foreign_page_are_reported():
    """Negative control: the checker finds a removed row, a row of no module, a wrong page."""
    text = DOC.read_text(encoding="utf-8")
    lines = text.splitlines()
    removed = next(line for line in lines if line.startswith("| `patches/redrive`"))
    proof = "tests/local/test_patch_redrive.py"
    made_up = f"| `patches/made_up` | AWS does it | no AWS behaviour | `{proof}` |"
    foreign = next(line for line in lines if line.startswith("| `patches/data_limit`"))
    wrong_page = foreign.replace("dg/service-quotas.html", "dg/state-parallel.html")
    doctored = text.replace(removed + "\n", made_up + "\n").replace(foreign, wrong_page)

    found = problems(doctored, expected_modules())

    assert "patches/redrive: 0 rows in docs/runtime.md, expected 1" in found
    assert "patches/made_up: a row names a module that does not exist" in found
    assert any(p.startswith("patches/data_limit: AWS page") for p in found), found
    assert len(found) == 3, found


def test_a_proof_the_docstring_does_not_name_and_a_duplicate_row_are_reported():
    text = DOC.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `patches/task_clients`"))
    other = row.replace("test_patch_task_clients.py", "test_patch_redrive.py")
    doctored = text.replace(row, row + "\n" + other)

    found = problems(doctored, expected_modules())

    assert "patches/task_clients: 2 rows in docs/runtime.md, expected 1" in found
    assert any("test_patch_redrive.py is not the docstring's" in p for p in found), found
