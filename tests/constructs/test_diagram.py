"""The protocol page's picture of the state machine (docs/protocol.md) is drawn from the synthesized definition."""

from __future__ import annotations

import re
from pathlib import Path

from locked_workflow.constructs_lib import diagram

ROOT = Path(__file__).resolve().parents[2]

SMALL = {
    "StartAt": "Section",
    "States": {
        "Section": {
            "Type": "Parallel", "Next": "Done",
            "Catch": [{"ErrorEquals": ["Lock.Timeout"], "Next": "Gave up"}],
            "Branches": [{"StartAt": "Try", "States": {
                "Try": {"Type": "Task", "Resource": "x", "Next": "Held?"},
                "Held?": {"Type": "Choice", "Choices": [{"Condition": "{% $waited > 10 %}", "Next": "Out"}],
                          "Default": "Try"},
                "Out": {"Type": "Fail", "Error": "Lock.Timeout"},
            }}],
        },
        "Done": {"Type": "Succeed"},
        "Gave up": {"Type": "Fail"},
    },
}


def test_every_state_and_edge_is_drawn():
    text = diagram.mermaid(SMALL)
    nodes = dict(re.findall(r'(s\d+)[\[\{\(]+"([^"]+)', text))
    by_name = {name.split(" (")[0]: node for node, name in nodes.items()}
    assert set(by_name) == {"Section", "Try", "Held?", "Out", "Done", "Gave up"}
    edges = set(re.findall(r"(s\d+) -->(?:\|\"([^\"]*)\"\|)? (s\d+)", text))
    n = by_name
    assert (n["Section"], "", n["Done"]) in edges
    assert (n["Section"], "catch Lock.Timeout", n["Gave up"]) in edges
    assert (n["Try"], "", n["Held?"]) in edges
    assert (n["Held?"], "$waited > 10", n["Out"]) in edges
    assert (n["Held?"], "default", n["Try"]) in edges
    assert f'{n["Held?"]}{{"Held?"}}' in text and f'{n["Out"]}(["Out"])' in text  # shapes
    assert f'subgraph {n["Section"]}["Section (Parallel)"]' in text


def test_the_protocol_page_shows_the_example_app_as_drawn(example):
    definition = diagram.definition_of(example.template, "ApplyCustomerUpdatesStateMachine")
    page = (ROOT / "docs" / "protocol.md").read_text()
    assert diagram.readme_block(definition) in page, "run `make diagram`"
