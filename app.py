#!/usr/bin/env python3
"""Example CDK app: composes stacks only (no resources here, no AWS calls; synth works offline)."""

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from locked_workflow.constructs_lib.example_stack import CustomerUpdatesStack
from locked_workflow.constructs_lib.nag import suppress_example_findings

app = cdk.App()
stack = CustomerUpdatesStack(app, "CustomerUpdates")
suppress_example_findings(stack)
cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
app.synth()
