"""Draw a state machine definition (ASL) as a Mermaid flowchart: ``make diagram``.

GitHub and the docs site render a ``mermaid`` code block as a picture, so ``docs/protocol.md``
shows the example app's state machine drawn from its synthesized definition, between the markers
``<!-- diagram:start -->`` and ``<!-- diagram:end -->``; ``make diagram`` rewrites them and a
test keeps them equal to what this module draws.

States are nodes (choices as diamonds, Succeed/Fail as rounded ends), Parallel branches and Map
item processors are subgraphs, and the edges are labelled: ``catch <errors>``, choice
conditions (shortened), ``default``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Sequence

START, END = "<!-- diagram:start -->", "<!-- diagram:end -->"
#: Longest edge label drawn (conditions are JSONata: long).
MAX_LABEL = 40


class _Drawing:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ids: dict[tuple[str, str], str] = {}

    def node_id(self, scope: str, name: str) -> str:
        return self.ids.setdefault((scope, name), f"s{len(self.ids)}")


def _label(text: str) -> str:
    text = re.sub(r"\s+", " ", text.replace("{%", "").replace("%}", "")).strip()
    if len(text) > MAX_LABEL:
        text = text[: MAX_LABEL - 1] + "…"
    return text.replace('"', "'").replace("|", "/")


def _node(node_id: str, name: str, state: dict) -> str:
    text = _label(name) if len(name) <= MAX_LABEL else name.replace('"', "'")
    kind = state.get("Type")
    if kind == "Choice":
        return f'{node_id}{{"{text}"}}'
    if kind in ("Succeed", "Fail"):
        return f'{node_id}(["{text}"])'
    if kind in ("Wait", "Pass"):
        return f'{node_id}["{text}"]'
    return f'{node_id}["{text}"]'


def _draw(drawing: _Drawing, machine: dict, scope: str, indent: str) -> str:
    """Draw ``machine``'s states; return the node id of its start state."""
    states: dict[str, dict] = machine["States"]
    for name, state in states.items():
        node_id = drawing.node_id(scope, name)
        if state.get("Type") in ("Parallel", "Map"):
            drawing.lines.append(f'{indent}subgraph {node_id}["{_label(name)} ({state["Type"]})"]')
            branches = state.get("Branches") or [state.get("ItemProcessor") or state.get("Iterator")]
            for index, branch in enumerate(branches):
                inner_scope = f"{scope}/{name}/{index}"
                start = _draw(drawing, branch, inner_scope, indent + "  ")
                drawing.lines.append(f"{indent}  {node_id}_in{index}(( )) --> {start}")
            drawing.lines.append(f"{indent}end")
        else:
            drawing.lines.append(indent + _node(node_id, name, state))
    for name, state in states.items():
        source = drawing.node_id(scope, name)
        for target, label in _edges(state):
            edge = f' -->|"{label}"| ' if label else " --> "
            drawing.lines.append(f"{indent}{source}{edge}{drawing.node_id(scope, target)}")
    return drawing.node_id(scope, machine["StartAt"])


def _edges(state: dict) -> list[tuple[str, str]]:
    edges = []
    if "Next" in state:
        edges.append((state["Next"], ""))
    for choice in state.get("Choices", []):
        edges.append((choice["Next"], _label(str(choice.get("Condition", choice.get("Variable", ""))))))
    if "Default" in state:
        edges.append((state["Default"], "default"))
    for catcher in state.get("Catch", []):
        edges.append((catcher["Next"], _label("catch " + ", ".join(catcher["ErrorEquals"]))))
    return edges


def mermaid(definition: dict) -> str:
    """The Mermaid flowchart of an ASL definition."""
    drawing = _Drawing()
    drawing.lines.append("flowchart TD")
    start = _draw(drawing, definition, "", "  ")
    drawing.lines.insert(1, f"  start(( )) --> {start}")
    return "\n".join(drawing.lines) + "\n"


def example_definition() -> dict:
    """The example app's locked workflow, as synthesized (tokens drawn as ``TOKEN``)."""
    from locked_workflow.testing.synth import synth_app
    from locked_workflow.constructs_lib.example_stack import CustomerUpdatesStack

    synthesized = synth_app(lambda app: CustomerUpdatesStack(app, "CustomerUpdates"))
    return definition_of(synthesized.template, "ApplyCustomerUpdatesStateMachine")


def definition_of(template: dict, logical_id_prefix: str) -> dict:
    machines = [
        v for k, v in template["Resources"].items()
        if v["Type"] == "AWS::StepFunctions::StateMachine" and k.startswith(logical_id_prefix)
    ]
    if len(machines) != 1:
        raise ValueError(f"expected one state machine under {logical_id_prefix!r}, got {len(machines)}")
    definition = machines[0]["Properties"]["DefinitionString"]
    if isinstance(definition, dict):
        definition = "".join(p if isinstance(p, str) else "TOKEN" for p in definition["Fn::Join"][1])
    return json.loads(definition)


def readme_block(definition: dict) -> str:
    return f"{START}\n```mermaid\n{mermaid(definition)}```\n{END}"


def replace_block(text: str, block: str) -> str:
    pattern = re.compile(re.escape(START) + r".*?" + re.escape(END), flags=re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"the file has no {START} … {END} markers")
    return pattern.sub(lambda _: block, text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Draw the example app's state machine as Mermaid")
    parser.add_argument("--readme", type=Path, default=None,
                        help="rewrite the diagram between the markers of this file (else print it)")
    args = parser.parse_args(argv)
    block = readme_block(example_definition())
    if args.readme is None:
        print(block)
    else:
        args.readme.write_text(replace_block(args.readme.read_text(), block))
        print(f"diagram written to {args.readme}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
