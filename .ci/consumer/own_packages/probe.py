"""The README's app with its own top-level `state_machines` and `lambdas` packages:
do they import beside the library, and does the app still synthesize?"""

from pathlib import Path

import state_machines.steps  # the app's own packages, first on sys.path (the app's folder)
import lambdas

here = Path(__file__).resolve().parent
for package in (state_machines, lambdas):
    assert Path(package.__file__).resolve().parent.parent == here, f"{package.__name__} is not the app's: {package.__file__}"

import aws_cdk as cdk  # noqa: E402

from updates_stack import UpdatesStack  # noqa: E402 - imports the library

app = cdk.App(outdir="cdk.out.probe")
stack = UpdatesStack(app, "Updates")
state_machines.steps.notify(stack)
app.synth()
print("the app's own state_machines and lambdas packages import beside the library")
