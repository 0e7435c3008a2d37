"""Reading IAM out of a synthesized template (the tests' one spelling of it)."""

from __future__ import annotations


def actions(statement: dict) -> list[str]:
    """A policy statement's actions (CloudFormation allows one string or a list)."""
    return statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]


def role_statements(template: dict, role: str) -> list[dict]:
    """Every statement of the policies attached to the role with logical ID ``role``."""
    return [s for r in template["Resources"].values() if r["Type"] == "AWS::IAM::Policy"
            and {"Ref": role} in r["Properties"]["Roles"] for s in r["Properties"]["PolicyDocument"]["Statement"]]
