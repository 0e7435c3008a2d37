"""Synthesize a CDK stack to what ``LocalCloud.deploy`` takes: a template and its asset folder.

::

    synthesized = synth_app(lambda app: MyStack(app, "My"))
    with LocalCloud() as cloud:
        cloud.deploy(synthesized.template, assets_dir=synthesized.assets_dir)

Asset folders are staged by the synth into the cloud assembly directory (``cdk.out``);
functions find their code through their ``aws:asset:path`` metadata, relative to it.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


@dataclass(frozen=True)
class Synthesized:
    stack_name: str
    template: dict[str, Any]
    assets_dir: Path


def synth_stack(stack: Any) -> Synthesized:
    """Synthesize the app ``stack`` belongs to; the stack's template and the assembly folder."""
    import aws_cdk as cdk

    app = stack.node.root
    if not isinstance(app, cdk.App):
        raise TypeError("the stack must belong to a cdk.App (create it with cdk.App(outdir=...))")
    assembly = app.synth()
    artifact = assembly.get_stack_by_name(stack.stack_name)
    return Synthesized(artifact.stack_name, artifact.template, Path(assembly.directory))


#: Context the cdk CLI sets: CDK paths and asset paths in each resource's Metadata.
CLI_CONTEXT = {"aws:cdk:enable-path-metadata": True, "aws:cdk:enable-asset-metadata": True}


def synth_app(build: Callable[[Any], Any], *, outdir: Path | str | None = None, context: dict[str, Any] | None = None) -> Synthesized:
    """``build(app)`` returns a stack; synthesize it into ``outdir`` (a temp folder by default).

    The app gets the CLI's metadata context (:data:`CLI_CONTEXT`), so lookups by CDK path
    work; ``context`` adds to it.
    """
    import aws_cdk as cdk

    outdir = Path(outdir) if outdir else Path(tempfile.mkdtemp(prefix="cdk.out-"))
    app = cdk.App(outdir=str(outdir), context={**CLI_CONTEXT, **(context or {})})
    return synth_stack(build(app))


def read_cdk_out(cdk_out: Path | str, stack_name: str) -> Synthesized:
    """A stack synthesized earlier (``cdk synth``): ``<cdk_out>/<stack>.template.json``."""
    cdk_out = Path(cdk_out)
    manifest = json.loads((cdk_out / "manifest.json").read_text())
    artifact = manifest["artifacts"].get(stack_name, {})
    template_file = (artifact.get("properties") or {}).get("templateFile", f"{stack_name}.template.json")
    template = json.loads((cdk_out / template_file).read_text())
    return Synthesized(stack_name, template, cdk_out)
