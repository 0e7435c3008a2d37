"""The README and docs/ say what is true: the quick start synthesizes and its own test passes
offline, the props tables match the constructors (names, types, defaults), every link, anchor,
file, make target and version they name exists, and the site's navigation lists every page.
(The guides' other code blocks: tests/tools/test_docs_blocks.py.)"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import aws_cdk as cdk
from aws_cdk import Duration
from aws_cdk.assertions import Match, Template

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))

spec = importlib.util.spec_from_file_location("readme_files", ROOT / ".ci" / "consumer" / "readme_files.py")
readme_files_module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readme_files_module)


def _readme() -> str:
    return README.read_text()


def _page(name: str) -> str:
    return (ROOT / "docs" / name).read_text()


def _files() -> dict[str, str]:
    """The files the README and the guides show (``<!-- file: PATH -->`` before a block), each
    once: the consumer test (`make consumer-test`) builds its app from the README's blocks."""
    files: dict[str, str] = {}
    for page in [README, *DOCS]:
        shown = readme_files_module.readme_files(page.read_text())
        assert not set(shown) & set(files), f"{page.name} shows a file another page shows: {set(shown) & set(files)}"
        files.update(shown)
    return files


def _write(files: dict[str, str], folder: Path, *paths: str) -> None:
    for path in paths:
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(files[path])


def _import(path: Path, name: str):
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def test_the_quick_start_is_complete():
    files = _files()
    assert {"cdk.json", "app.py", "updates_stack.py", "functions/apply_update/index.py",
            "tests/test_updates.py"} <= set(files)
    assert "conftest.py" not in files  # the plugin comes with the package (its pytest11 entry point)
    assert json.loads(files["cdk.json"])["app"] == "python app.py"
    assert "from updates_stack import UpdatesStack" in files["app.py"]


def test_the_quick_start_synthesizes(tmp_path):
    files = _files()
    _write(files, tmp_path, "updates_stack.py", "functions/apply_update/index.py")
    # The asset path is relative to the app's folder, where `cdk synth` runs it; jsii's Node
    # process resolves it against its own working directory, this one's at its start.
    stack_file = tmp_path / "updates_stack.py"
    source = stack_file.read_text()
    assert source.count('"functions/apply_update"') == 1
    stack_file.write_text(source.replace('"functions/apply_update"', repr(str(tmp_path / "functions" / "apply_update"))))
    stack_module = _import(stack_file, "readme_updates_stack")
    app = cdk.App(outdir=str(tmp_path / "cdk.out"))
    template = Template.from_stack(stack_module.UpdatesStack(app, "Updates"))
    template.resource_count_is("AWS::StepFunctions::StateMachine", 1)  # the workflow (its janitor: a function)
    template.resource_count_is("AWS::DynamoDB::Table", 1)  # the lock table (the customers: a TableV2)
    template.resource_count_is("AWS::DynamoDB::GlobalTable", 1)
    template.has_resource_properties(
        "AWS::Events::Rule",
        {"EventPattern": {"source": ["example.customers"]}, "EventBusName": Match.any_value(),
         "Targets": [Match.object_like({"RetryPolicy": Match.any_value(), "DeadLetterConfig": Match.any_value()})]},
    )
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {"Handler": "index.handler", "Environment": {"Variables": {"TABLE_NAME": Match.any_value()}}},
    )


def test_the_locked_section_example_synthesizes(tmp_path):
    files = _files()
    _write(files, tmp_path, "orders_stack.py")
    stack_module = _import(tmp_path / "orders_stack.py", "readme_orders_stack")
    app = cdk.App(outdir=str(tmp_path / "cdk.out"))
    template = Template.from_stack(stack_module.OrdersStack(app, "Orders"))
    (machine,) = template.find_resources("AWS::StepFunctions::StateMachine").values()
    definition = json.dumps(machine["Properties"]["DefinitionString"])
    assert '\\"OrderLock\\":{\\"Type\\":\\"Parallel\\"' in definition
    assert "Notify" in definition and "Prepare" in definition
    # recover_stale_holders: the janitor (a rule on status changes and its function)
    template.has_resource_properties(
        "AWS::Events::Rule", {"EventPattern": Match.object_like({"detail-type": ["Step Functions Execution Status Change"]})}
    )


def test_the_quick_start_test_passes_offline(tmp_path):
    """The README's own test, run as the README says: pytest from the app's root, no conftest
    line, the plugin registered by the package's entry point (against this checkout, its
    entry point declared as an installed distribution would; `make consumer-test` runs it
    against the built wheel, after `cdk synth`)."""
    from plugin_entry import entry_point_site

    files = _files()
    _write(files, tmp_path, "updates_stack.py", "functions/apply_update/index.py", "tests/test_updates.py")
    paths = [str(entry_point_site(tmp_path / "site")), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths).rstrip(os.pathsep))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert re.search(r"^1 passed", result.stdout, flags=re.MULTILINE), result.stdout[-2000:]


# -- the props tables ----------------------------------------------------------------------


def _section(text: str, heading: str) -> str:
    """The text under ``heading`` (a whole heading line), up to the next heading of its level or
    above (outside code blocks, where ``#`` starts a comment)."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.split("\n")
    start = lines.index(heading) + 1
    fenced = False
    for end in range(start, len(lines)):
        if lines[end].startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(rf"#{{1,{level}}} ", lines[end]):
            return "\n".join(lines[start:end])
    return "\n".join(lines[start:])


def _first_table(section: str) -> dict[str, list[str]]:
    """First column (without backticks) -> the other cells, of the section's first table."""
    rows: dict[str, list[str]] = {}
    lines = [l for l in section.splitlines() if l.startswith("|")]
    assert lines, "no table"
    for line in lines[2:]:
        if not line.startswith("| `"):
            break
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        rows[cells[0].strip("`")] = cells[1:]
    return rows


def _documented_default(default) -> str | None:
    """How the table writes a default it can be checked against, or None (described in words)."""
    if default is None:
        return None
    if isinstance(default, bool) or isinstance(default, (int, float)):
        return f"`{default:g}`" if isinstance(default, float) else f"`{default!r}`"
    if isinstance(default, str):
        return f"`{json.dumps(default)}`"
    if default == ():
        return "`()`"
    return None


def _check_table(rows: dict[str, list[str]], params: dict[str, inspect.Parameter | object], where: str) -> None:
    assert set(rows) == set(params), f"{where}: the table's names differ from the signature's"
    for name, (type_cell, default_cell, *_rest) in rows.items():
        assert type_cell and type_cell != "-", f"{where}: `{name}` has no type"
        default = params[name].default if isinstance(params[name], inspect.Parameter) else params[name]
        if default is inspect.Parameter.empty:
            assert default_cell.startswith("required"), f"{where}: `{name}` is required, the table says {default_cell!r}"
            continue
        if default is None:
            assert default_cell.startswith(("`None`", "required")), f"{where}: `{name}` defaults to None: {default_cell!r}"
            continue
        if isinstance(default, Duration):
            written = re.search(r"`Duration\.(seconds|minutes|hours)\((\d+)\)`", default_cell)
            assert written, f"{where}: `{name}`'s default is a Duration: {default_cell!r}"
            seconds = int(written[2]) * {"seconds": 1, "minutes": 60, "hours": 3600}[written[1]]
            assert seconds == default.to_seconds(), f"{where}: `{name}` defaults to {default.to_seconds()} s"
            continue
        expected = _documented_default(default)
        if expected is not None:
            assert default_cell.startswith(expected), f"{where}: `{name}` defaults to {expected}, the table says {default_cell!r}"
        else:  # an enum member (RemovalPolicy.RETAIN, StateMachineType.STANDARD): named in the cell
            assert str(default).split(".")[-1].upper() in default_cell.upper(), f"{where}: `{name}` defaults to {default}"


def _keyword_params(callable_) -> dict[str, inspect.Parameter]:
    skip = {"self", "scope", "construct_id", "id"}
    return {n: p for n, p in inspect.signature(callable_).parameters.items() if n not in skip}


@pytest.mark.parametrize("page, heading, dotted", [
    ("constructs.md", "## `LockedWorkflow`", "locked_workflow.constructs_lib.locked_workflow.LockedWorkflow"),
    ("constructs.md", "## `LockedSection`", "locked_workflow.constructs_lib.locked_section.LockedSection"),
    ("constructs.md", "## `LockTable`", "locked_workflow.constructs_lib.lock_table.LockTable"),
    ("python-clients.md", "## `LockClient`", "locked_workflow.constructs_lib.lock_client.LockClient"),
    ("operating.md", "## Monitoring", "locked_workflow.constructs_lib.monitoring.LockMonitoring"),
])
def test_every_prop_is_in_its_table_with_a_type_and_its_default(page, heading, dotted):
    module_name, class_name = dotted.rsplit(".", 1)
    cls = getattr(importlib.import_module(module_name), class_name)
    rows = _first_table(_section(_page(page), heading)) if heading != "## Monitoring" else _monitoring_props()
    _check_table(rows, _keyword_params(cls.__init__), heading)


def _monitoring_props() -> dict[str, list[str]]:
    section = _section(_page("operating.md"), "## Monitoring")
    return _first_table(section[section.index("`LockMonitoring` props"):])


def test_the_wait_policy_table_matches_the_dataclass():
    from locked_workflow.state_machines.lock_protocol import WaitPolicy

    rows = _first_table(_section(_page("constructs.md"), "## `WaitPolicy`"))
    fields = {f.name: f.default for f in dataclasses.fields(WaitPolicy)}
    _check_table(rows, fields, "WaitPolicy")
    signature = "WaitPolicy(" + ", ".join(f"{n}={v!r}" for n, v in fields.items()) + ")"
    assert signature in _page("constructs.md")


def test_the_lock_client_methods_are_as_documented():
    from locked_workflow.constructs_lib.lock_client import DEFAULT_LEASE, LockClient

    section = _section(_page("python-clients.md"), "## `LockClient`")
    acquire = inspect.signature(LockClient.acquire).parameters
    row = next(l for l in section.splitlines() if l.startswith("| `acquire("))
    for name in ("owner", "wait", "poll_interval", "max_poll_interval", "backoff_rate"):
        assert f"`{name}={acquire[name].default!r}`" in row, name
    assert f"`lease={DEFAULT_LEASE.total_seconds():g}` s" in row
    for method in ("acquire", "hold", "refresh", "release"):
        assert f"| `{method}(" in section


# -- links, files, targets, versions ---------------------------------------------------------


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.MULTILINE | re.DOTALL)
    return {_slug(h) for h in re.findall(r"^#+ (.*)$", text, flags=re.MULTILINE)}


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves(page):
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links or page == README or page.parent.name == "api"
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        assert path.exists(), f"{page.name}: {link} names no file"
        if anchor:
            assert anchor in _anchors(path), f"{page.name}: {link} names no heading of {path.name}"


def test_the_guides_are_linked_from_the_readme():
    top = [p for p in DOCS if p.parent.name == "docs" and p.name != "index.md"]  # the site's home is the README's
    for page in top:
        assert f"](docs/{page.name})" in _readme(), f"docs/{page.name} is not linked from the README"
    assert {p.name for p in top} >= {"getting-started.md", "testing.md", "operating.md", "protocol.md",
                                     "safety.md", "runtime.md", "benchmarks.md", "mutex.md", "fair-lock.md"}


def _nav_pages() -> list[str]:
    config = (ROOT / "mkdocs.yml").read_text()
    return re.findall(r"^ +- (?:[^:\n]+: )?([\w/.-]+\.md)$", config[config.index("\nnav:"):], flags=re.MULTILINE)


def test_the_site_navigation_lists_every_page_once():
    nav = _nav_pages()
    assert "getting-started.md" in nav and "api/index.md" in nav  # the control: the nav is read
    assert sorted(nav) == sorted(str(p.relative_to(ROOT / "docs")) for p in DOCS), "mkdocs.yml's nav and docs/ differ"
    assert len(nav) == len(set(nav))


def test_make_docs_is_a_strict_build_in_a_docs_only_venv():
    """`make docs`: the [docs] extra alone (no CDK, moto or Node) and `mkdocs build --strict`,
    whose warnings (a broken link or anchor, a page outside the nav, an unreadable docstring)
    fail the build; CI runs it."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {re.split(r"[\[<>=]", r)[0] for r in extras["docs"]} == {"mkdocs", "mkdocs-material", "mkdocstrings"}
    assert not [r for r in extras["dev"] if r.startswith("pdoc")]
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^docs: (.*)\n((?:\t.*\n)+)", makefile, flags=re.MULTILINE)
    assert recipe[1].strip() == "$(STAMP_DOCS)" and "mkdocs build --strict" in recipe[2]
    stamp = re.search(r"^\$\(STAMP_DOCS\): .*\n((?:\t.*\n)+)", makefile, flags=re.MULTILINE)[1]
    assert "$(DOCS_VENV)" in stamp and "pip install" in stamp and ".[dev]" not in stamp and "-e " not in stamp
    config = (ROOT / "mkdocs.yml").read_text()
    assert re.search(r"^strict: true$", config, flags=re.MULTILINE)
    for check in ("omitted_files", "absolute_links", "unrecognized_links", "anchors"):
        assert re.search(rf"^  {check}: warn$", config, flags=re.MULTILINE), check
    assert "check_paths: true" in config  # a snippet that names no file fails too
    assert "make docs" in (ROOT / ".ci" / "run").read_text()


SNIPPET = re.compile(r'^--8<-- "README\.md:([\w-]+)"$', flags=re.MULTILINE)


def test_the_snippets_the_site_takes_from_the_readme_exist_and_link_nowhere_relative():
    """A page includes a README section (``--8<-- "README.md:name"``, between the README's
    ``[start:name]`` and ``[end:name]`` markers); its relative links would point elsewhere on
    the site, so the included sections have none."""
    used = {name for page in DOCS for name in SNIPPET.findall(page.read_text())}
    assert {"what", "install", "quick-start", "lock-kinds"} <= used
    for name in used:
        section = re.search(rf"<!-- --8<-- \[start:{name}\] -->\n(.*?)<!-- --8<-- \[end:{name}\] -->",
                            _readme(), flags=re.DOTALL)
        assert section, f"README.md has no section {name!r}"
        prose = re.sub(r"^```.*?^```", "", section[1], flags=re.MULTILINE | re.DOTALL)
        relative = [link for link in re.findall(r"\]\(([^)\s]+)\)", prose) if not re.match(r"[a-z]+://", link)]
        assert relative == [], f"README section {name!r} links {relative}"


#: Paths the pages name that are not this repository's (`cdk init`'s test folder, the quick
#: start app's test).
NOT_OURS = {"tests/unit/conftest.py", "tests/test_updates.py"}


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_named_exists(page):
    """Backticked repository paths (`tests/protocol/test_fair_model.py`, `state_machines/`) exist."""
    named = re.findall(r"`((?:constructs_lib|state_machines|lambdas|tests|docs|\.ci)/[\w./-]*)`", page.read_text())
    for path in set(named) - NOT_OURS:
        assert (ROOT / path).exists(), f"{page.name} names {path}, which does not exist"


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_make_target_named_exists(page):
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), flags=re.MULTILINE))
    named = set(re.findall(r"`make ([\w-]+)", page.read_text()))
    assert named - targets == set()


def test_the_two_set_up_commands_are_shown_as_they_were():
    section = _section(_readme(), "### Two commands")
    (block,) = re.findall(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    assert [line.split()[:2] for line in block.splitlines()] == [["make", "demo"], ["make", "test"]]


def test_the_install_names_the_wheel_that_is_built():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wheel = f"{project['name'].replace('-', '_')}-{project['version']}-py3-none-any.whl"
    install = _section(_readme(), "## Install")
    assert f'pip install "/path/to/dist/{wheel}[local]"' in install
    assert "npm install aws-cdk@2" in install
    assert set(re.findall(r"locked_workflow-[\w.]+-py3-none-any\.whl", _readme())) == {wheel}


def test_the_readme_is_short_and_for_users_first():
    """Issue 26: what it is, install, the quick start, the lock kinds, links, under 250 lines;
    the rest lives in the guides (docs/)."""
    headings = re.findall(r"^## (.*)$", re.sub(r"^```.*?^```", "", _readme(), flags=re.MULTILINE | re.DOTALL),
                          flags=re.MULTILINE)
    assert headings == ["Install", "Quick start", "Lock kinds", "Documentation", "Developing this repository"]
    assert len(_readme().splitlines()) < 250


def test_the_lock_table_lists_every_factory_with_its_settings():
    from locked_workflow import Lock

    rows = _first_table(_section(_page("constructs.md"), "## `Lock`"))
    factories = {name for name, member in vars(Lock).items() if isinstance(member, staticmethod)}
    assert factories == {"mutex", "fair", "semaphore", "keys", "on_record", "shared", "exclusive", "rate"}  # the control: they are found
    documented = {re.match(r"Lock\.(\w+)\(", name)[1]: cells for name, cells in rows.items()}
    assert set(documented) == factories
    for name, (settings, _meaning) in documented.items():
        for param in inspect.signature(getattr(Lock, name)).parameters.values():
            if param.name == "key" and name != "mutex":
                continue  # (the paragraph above the table says what a key is)
            assert f"`{param.name}`: " in settings, f"Lock.{name}: `{param.name}` is not described"
            if param.default is not inspect.Parameter.empty and param.default is not None:
                shown = _documented_default(param.default) or (
                    f"`Duration.seconds({int(param.default.to_seconds())})`" if isinstance(param.default, Duration) else None)
                assert shown and shown in settings, f"Lock.{name}: `{param.name}` defaults to {param.default}"
