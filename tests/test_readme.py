"""The README's usage example synthesizes as written."""

from __future__ import annotations

import re
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_events as events, aws_lambda as lambda_
from aws_cdk.assertions import Match, Template

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_usage_example_synthesizes():
    namespace: dict = {}
    exec(compile(_python_blocks()[0], "README.md", "exec"), namespace)  # noqa: S102 - our own README
    app = cdk.App()
    deps = cdk.Stack(app, "Deps")
    fn = lambda_.Function(
        deps, "Fn", runtime=lambda_.Runtime.PYTHON_3_13, handler="index.handler",
        code=lambda_.Code.from_inline("def handler(e, c): return e"),
    )
    stack = namespace["Updates"](app, "Updates", apply_update_fn=fn, bus=events.EventBus(deps, "Bus"))
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::StepFunctions::StateMachine", 1)  # the workflow (its janitor: a function)
    template.has_resource_properties(
        "AWS::Events::Rule",
        {"EventPattern": {"source": ["example.customers"]}, "Targets": [Match.object_like({"RetryPolicy": Match.any_value()})]},
    )
