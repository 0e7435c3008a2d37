"""The lock deployed on the LocalCloud: the test stacks (``*_stack.py``), the helpers over their
executions' histories (``lock_invariants.py``), the behaviour stack's fixture, and the monitored
stack's synth (``synth``: once per session, for the monitoring template's tests and the tests of
its filters on real log lines).

Each group of test files (``file_groups.GROUPS``; a file of no group is its own)
deploys the stack it runs in a fresh LocalCloud once per DynamoDB backend
(:func:`deployed.deployed_stack`, ``kept_deployment``); the stacks are synthesized once per run
(``synth_cache``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from locked_workflow.testing.synth import CLI_CONTEXT, Synthesized
from behaviour_stack import BehaviourStack
from deployed import Deployed, deployed_stack
from monitoring_stack import KindsStack, Synth

#: The behaviour stack in a fresh LocalCloud, once per group of test files and DynamoDB backend.
deployed = deployed_stack(BehaviourStack, "Behaviour", Deployed)


@pytest.fixture(scope="session")
def synth() -> Synth:
    from cdk_nag import AwsSolutionsChecks

    outdir = tempfile.mkdtemp(prefix="cdk.out-monitoring-")
    app = cdk.App(outdir=outdir, context=CLI_CONTEXT)
    stack = KindsStack(app, "Monitoring")
    cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    assembly = app.synth()
    artifact = assembly.get_stack_by_name("Monitoring")
    return Synth(
        stack=stack,
        template=Template.from_stack(stack),
        synthesized=Synthesized("Monitoring", artifact.template, Path(assembly.directory)),
        messages=list(artifact.messages),
    )

