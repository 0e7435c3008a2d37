"""What a Python Lambda function may import: its code asset, its layers, and what the runtime
itself carries - nothing else.

AWS Lambda's Python runtime runs a handler with the function's deployment package, the
content of its layers (their ``python`` and ``python/lib/python3.x/site-packages`` folders)
and the runtime's own libraries: the Python standard library and the AWS SDK for Python
(boto3, botocore, and what they import: s3transfer, jmespath, python-dateutil, urllib3, six).
Anything else fails at init with ``Runtime.ImportModuleError``
(https://docs.aws.amazon.com/lambda/latest/dg/lambda-python.html, "Runtime-included SDK
versions"; https://docs.aws.amazon.com/lambda/latest/dg/python-package.html;
https://docs.aws.amazon.com/lambda/latest/dg/packaging-layers.html, "Layer paths for each
Lambda runtime"). The runtime's boto3 is the version AWS lists for that runtime; offline it is
the one installed here (versions are not compared).

The offline runtime refuses, before a handler runs, a function whose handler imports -
anywhere in the modules its asset and layers carry, lazily too (stricter than AWS, which fails
only when such an import runs) - a top-level module none of those provide, although this
process could import it (from its site-packages, or a checkout): a function tested offline
that imports ``locked_workflow`` its asset does not carry would fail on AWS.

A published layer (an ARN, no asset) is known offline only when it is the Powertools for AWS
Lambda (Python) layer (:data:`POWERTOOLS_LAYER`); any other provides nothing here.

Proof: ``tests/local/test_patch_lambda_in_process.py``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Iterable, Sequence

from locked_workflow.constructs_lib import code_closure

#: What the Lambda Python runtime carries besides the standard library: the AWS SDK for Python
#: and the packages it imports.
RUNTIME_PACKAGES = frozenset({"boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six"})

#: The published Powertools for AWS Lambda (Python) layers (account 017000801446), and the
#: top-level packages they carry: Powertools with its Tracer's dependencies
#: (https://docs.aws.amazon.com/powertools/python/latest/getting-started/install/).
POWERTOOLS_LAYER = re.compile(r"^arn:aws[a-z-]*:lambda:[a-z0-9-]+:017000801446:layer:AWSLambdaPowertoolsPython")
POWERTOOLS_PACKAGES = frozenset({"aws_lambda_powertools", "aws_xray_sdk", "wrapt", "jmespath", "typing_extensions"})


def layer_paths(folder: Path) -> list[Path]:
    """The folders of a layer's content that the Python runtime puts on ``sys.path``."""
    python = folder / "python"
    return [python, *sorted(python.glob("lib/python3*/site-packages"))] if python.is_dir() else []


def published_layer_packages(arn: str) -> frozenset[str] | None:
    """Top-level packages a published layer carries, ``None`` if unknown offline."""
    return POWERTOOLS_PACKAGES if POWERTOOLS_LAYER.match(arn) else None


def multi_folder_finder(folders: Sequence[Path]) -> code_closure.Finder:
    """Finds a module in the first of ``folders`` that has it, as ``sys.path`` would."""
    finders = [code_closure.folder_finder(folder) for folder in folders]

    def find(name: str) -> code_closure.Module | None:
        for finder in finders:
            module = finder(name)
            if module is not None:
                return module
        return None

    return find


def top_level_names(folders: Iterable[Path]) -> set[str]:
    """Importable top-level names the folders provide (modules and packages)."""
    names: set[str] = set()
    for folder in folders:
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            if entry.suffix == ".py":
                names.add(entry.stem)
            elif entry.is_dir() and entry.name.isidentifier() and not entry.name.endswith(".dist-info"):
                names.add(entry.name)
    return names


def unprovided(
    module_name: str, folders: Sequence[Path], provided: Iterable[str] = ()
) -> list[code_closure.Missing]:
    """The imports of ``module_name`` (found in ``folders``: the asset, then the layers), and
    of every module of those folders it imports, whose top-level module neither the folders,
    the runtime (standard library, :data:`RUNTIME_PACKAGES`) nor ``provided`` (published
    layers' packages) carry. A module missing inside a package the folders carry is left to
    its own import, as on AWS."""
    find = multi_folder_finder(folders)
    handler = find(module_name)
    if handler is None or handler.path is None:
        return []  # the import that follows reports it
    outside = set(sys.stdlib_module_names) | RUNTIME_PACKAGES | set(provided)
    carried = top_level_names(folders)
    _, missing = code_closure.closure(
        [(module_name, handler.path)], find, within=lambda name: name.split(".")[0] not in outside
    )
    gaps = {(gap.importer, gap.name.split(".")[0]) for gap in missing if gap.name.split(".")[0] not in carried}
    return [code_closure.Missing(importer, name) for importer, name in sorted(gaps)]
