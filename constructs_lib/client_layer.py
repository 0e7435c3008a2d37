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

In the function: ``from locked_workflow import LockClient``; grant it what the client calls
with :func:`grant_lock_client`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

from aws_cdk import RemovalPolicy, Stack, aws_dynamodb as dynamodb, aws_iam as iam, aws_lambda as lambda_
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from locked_workflow.constructs_lib import code_closure, lock_client
from locked_workflow.constructs_lib.assets import bundled_code
from locked_workflow.constructs_lib.client_kind import ClientKind, client_kind_of
from locked_workflow.constructs_lib.janitor import executions_of

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


#: The DynamoDB calls of every ``LockClient`` (the protocol's conditional writes, its reads, and
#: a fair lock's queue rows), and of a read/write one's park transaction beside them (a
#: ``TransactWriteItems`` is authorized by its items' actions: its liveness check's retire of an
#: abandoned hold - a Delete and an Update - needs nothing more).
CLIENT_TABLE_ACTIONS = ("dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
READ_WRITE_TABLE_ACTIONS = ("dynamodb:ConditionCheckItem",)
#: A waiter's liveness check (:mod:`client_liveness`): the probe of a hold's presence token, and
#: the question about its execution.
PROBE_ACTION, DESCRIBE_ACTION = "states:SendTaskHeartbeat", "states:DescribeExecution"
#: A release's wake-up of a parked workflow: a fair client's ``SendTaskSuccess`` and its
#: ``SendTaskFailure`` (a grant the woken run must look at again); a read/write client's grant
#: only (the woken run claims it).
WAKE_ACTIONS = {"fair": ("states:SendTaskSuccess", "states:SendTaskFailure"),
                "read_write": ("states:SendTaskSuccess",)}


def lock_client_actions(*, kind: Any = None, fair: bool = False, read_write: bool = False) -> frozenset[str]:
    """Every IAM action a ``LockClient`` of ``kind`` calls (as ``LockClient``'s ``kind``:
    ``LockClient.FAIR``, or the workflows' ``Lock`` value; the flags are deprecated): what
    :func:`grant_lock_client` grants, with ``holders``."""
    chosen = client_kind_of(kind, fair=fair, read_write=read_write)
    read_write = chosen is ClientKind.READ_WRITE
    return frozenset((*CLIENT_TABLE_ACTIONS, *(READ_WRITE_TABLE_ACTIONS if read_write else ()), PROBE_ACTION,
                      DESCRIBE_ACTION, *(WAKE_ACTIONS["fair"] if chosen is ClientKind.FAIR else ()),
                      *(WAKE_ACTIONS["read_write"] if read_write else ())))


def grant_lock_client(
    grantee: iam.IGrantable,
    *,
    table: dynamodb.ITable,
    holders: Sequence[sfn.IStateMachine] = (),
    kind: Any = None,
    fair: bool = False,
    read_write: bool = False,
) -> None:
    """Grant ``grantee`` (a function running a ``LockClient``) exactly what the client calls
    (:func:`lock_client_actions`):

    * on ``table``: ``GetItem``, ``UpdateItem``, ``DeleteItem`` (a read/write lock's park, a
      ``TransactWriteItems``, adds ``ConditionCheckItem``);
    * the waiter's liveness check of the workflows holding its keys (:mod:`client_liveness`,
      every kind: a read/write waiter checks the writer or the readers it is blocked by):
      ``states:DescribeExecution`` on the executions of ``holders`` (the state machines whose
      sections share its keys), and ``states:SendTaskHeartbeat`` - the probe of a hold's
      presence token - on ``*``: a task token is no IAM resource (the state machines' own probe
      is granted the same way);
    * a release's wake-up of a parked workflow, on ``*`` for the same reason: a
      ``LockClient.FAIR`` client's ``states:SendTaskSuccess`` / ``states:SendTaskFailure``; a
      ``LockClient.READ_WRITE`` one's ``states:SendTaskSuccess``.

    Without the Step Functions part the client still works; it then waits out the lease of a
    holder whose branch was cancelled or whose execution ended.

    :param holders: the state machines whose executions may hold the client's keys. Default: none.
    :param kind: the client's ``kind`` (``LockClient(kind=...)``: ``LockClient.FAIR``, or the
        workflows' ``Lock`` value). Default: ``LockClient.MUTEX``.
    :param fair: deprecated (a ``DeprecationWarning``): ``kind=LockClient.FAIR``. Default: ``False``.
    :param read_write: deprecated (a ``DeprecationWarning``): ``kind=LockClient.READ_WRITE``.
        Default: ``False``.
    :raises LockKindNotServed: a ``kind`` no client takes part in.
    :raises TypeError: a ``kind`` of no kind, a flag that is not a bool.
    """
    actions = lock_client_actions(kind=client_kind_of(kind, fair=fair, read_write=read_write))
    table.grant(grantee, *sorted(a for a in actions if a.startswith("dynamodb:")))
    iam.Grant.add_to_principal(grantee=grantee, actions=[PROBE_ACTION], resource_arns=["*"])
    if holders:
        names = [machine.state_machine_name for machine in holders]
        iam.Grant.add_to_principal(grantee=grantee, actions=[DESCRIBE_ACTION],
                                   resource_arns=executions_of(Stack.of(table), names))
    wakes = sorted(a for a in actions if a.startswith("states:") and a not in (PROBE_ACTION, DESCRIBE_ACTION))
    if wakes:
        iam.Grant.add_to_principal(grantee=grantee, actions=wakes, resource_arns=["*"])
