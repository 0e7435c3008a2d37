"""LockClientLayer: a Lambda layer carrying the lock client, for your own functions.

A Python function imports only what its code asset, its layers and the Lambda runtime (the
standard library, boto3 and botocore) carry: a handler that imports ``locked_workflow`` from an
asset holding only ``index.py`` fails on AWS with ``Runtime.ImportModuleError``
(https://docs.aws.amazon.com/lambda/latest/dg/python-package.html). This layer carries
:class:`~locked_workflow.constructs_lib.lock_client.LockClient` and exactly the modules of
this package it imports (the protocol modules: one spelling of every expression), under
``python/locked_workflow/`` (the Python runtime's layer path,
https://docs.aws.amazon.com/lambda/latest/dg/packaging-layers.html) - no CDK, no other
dependency: the client needs only boto3, which the runtime has. The files are found by reading
the client's imports (:mod:`~locked_workflow.constructs_lib.code_closure`), as the janitor's
bundle is, and copied at synth without Docker.

In the function: ``from locked_workflow import LockClient``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from aws_cdk import RemovalPolicy, aws_lambda as lambda_
from constructs import Construct

from locked_workflow.constructs_lib import code_closure, lock_client
from locked_workflow.constructs_lib.assets import bundled_code

#: Where a Python layer's packages live in its content.
LAYER_PYTHON_PATH = "python"
#: The modules the layer starts from: the client (and the package's own ``__init__``, which
#: exports it lazily).
CLIENT_MODULE = "locked_workflow.constructs_lib.lock_client"


def layer_files() -> dict[str, Path]:
    """The layer's content (path in the layer -> source): ``lock_client`` and the closure of
    its imports of ``locked_workflow``, below ``python/``."""
    files = code_closure.package_files([(CLIENT_MODULE, Path(lock_client.__file__).resolve())])
    return {f"{LAYER_PYTHON_PATH}/{name}": source for name, source in files.items()}


class LockClientLayer(Construct):
    """A ``lambda_.LayerVersion`` carrying the lock client: add ``layer`` to a Python
    function's ``layers`` and it can ``from locked_workflow import LockClient``.

    :param compatible_runtimes: the runtimes the layer declares. Default: Python 3.10 to 3.13.
    :param removal_policy: what happens to a replaced layer version. Default:
        ``RemovalPolicy.DESTROY``.
    :param description: the layer's description. Default: says what it carries.

    Exposes ``layer`` (the ``lambda_.LayerVersion``) and ``files`` (its content, path ->
    source).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        compatible_runtimes: Optional[Sequence[lambda_.Runtime]] = None,
        removal_policy: RemovalPolicy = RemovalPolicy.DESTROY,
        description: Optional[str] = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.files = layer_files()
        self.layer = lambda_.LayerVersion(
            self,
            "Layer",
            code=bundled_code(Path(lock_client.__file__).resolve().parent, layer_files),
            compatible_runtimes=list(compatible_runtimes) if compatible_runtimes is not None else [
                lambda_.Runtime.PYTHON_3_10, lambda_.Runtime.PYTHON_3_11,
                lambda_.Runtime.PYTHON_3_12, lambda_.Runtime.PYTHON_3_13,
            ],
            description=description or "locked_workflow.LockClient and the lock protocols it imports (no CDK)",
            removal_policy=removal_policy,
        )
