"""The runtime's parse of a definition against moto's, on every definition the test stacks render.

``locked_workflow.testing.patches.parsed_definitions.parse`` parses in ANTLR's SLL mode first and
skips the program texts moto renders for its error messages; this check shows it builds what moto
builds: for each state machine of each test stack (synthesized here, or read from the test run's
synth cache when ``LOCKED_WORKFLOW_SYNTH_CACHE`` names it), the two parse trees are the same
(``toStringTree``) and the two programs pickle to the same bytes (every component, field and
value). It prints the definitions compared per stack and exits 1 on any difference::

    python -m tools.parse_check                  # every test stack
    python -m tools.parse_check Shared Fair      # some of them
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]


def _stacks() -> dict[str, tuple[Callable[[Any], Any], bool]]:
    """The test stacks by construct id: how to build each, and whether the tests synthesize it
    with asset metadata (the synth cache's key)."""
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "lock")]  # the test stacks
    from behaviour_stack import BehaviourStack
    from fair_stack import FairStack
    from monitoring_stack import KindsStack
    from outputs_stack import OutputsStack
    from rate_stack import RateStack
    from record_stack import RecordStack
    from safety_stack import SafetyStack
    from shared_stack import SharedStack
    from variants_stack import VariantsStack

    from locked_workflow.constructs_lib.example_stack import CustomerUpdatesStack
    from tools.matrix.stack import build_stack

    return {"Behaviour": (BehaviourStack, True), "Fair": (FairStack, True), "Shared": (SharedStack, True),
            "Safety": (SafetyStack, True), "Variants": (VariantsStack, True), "Record": (RecordStack, False),
            "RateLimits": (RateStack, False), "Monitoring": (KindsStack, False), "Outputs": (OutputsStack, False),
            "Matrix": (build_stack, False), "CustomerUpdates": (CustomerUpdatesStack, False)}


def definitions(template: dict) -> dict[str, str]:
    """Each state machine's definition text, its references (``Ref``, ``Fn::GetAtt``) as
    placeholder names: the parse does not depend on what they resolve to."""
    out = {}
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] != "AWS::StepFunctions::StateMachine":
            continue
        props = resource["Properties"]
        body = props.get("DefinitionString", props.get("Definition"))
        if isinstance(body, dict) and "Fn::Join" in body:
            out[logical_id] = "".join(p if isinstance(p, str) else "ref" for p in body["Fn::Join"][1])
        else:
            out[logical_id] = body if isinstance(body, str) else json.dumps(body)
    return out


def compare(definition: str) -> tuple[bool, bool]:
    """(same tree, same program) for one definition."""
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

    from locked_workflow.testing.patches import parsed_definitions

    moto_program, moto_tree = AmazonStateLanguageParser.parse(definition)
    tree = parsed_definitions.parse_tree(definition)
    program = parsed_definitions.preprocess(tree)  # parsed_definitions.parse(definition), in its two steps
    same_tree = moto_tree.toStringTree(recog=moto_tree.parser) == tree.toStringTree(recog=tree.parser)
    same_program = pickle.dumps(moto_program) == pickle.dumps(program)
    return same_tree, same_program


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stacks", nargs="*", help="construct ids of the test stacks (default: all)")
    args = parser.parse_args(argv)
    from tools.node import use_project_node

    use_project_node()
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "lock")]  # the test stacks
    from synth_cache import synth_cached

    from locked_workflow.testing import LocalCloud

    stacks = _stacks()
    different = 0
    with LocalCloud():  # the runtime's patches applied, as when it parses
        for name in args.stacks or list(stacks):
            build, metadata = stacks[name]
            context = {"aws:cdk:enable-asset-metadata": True} if metadata else None
            template = synth_cached(build, name, context=context).template
            texts = definitions(template)
            for logical_id, definition in texts.items():
                same_tree, same_program = compare(definition)
                if not (same_tree and same_program):
                    different += 1
                    print(f"  DIFFERENT {name}/{logical_id}: tree {same_tree}, program {same_program}")
            print(f"{name}: {len(texts)} definitions ({sum(map(len, texts.values())) // 1000} KB) compared", flush=True)
    print("every definition: the same tree and program" if not different else f"{different} different")
    return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())
