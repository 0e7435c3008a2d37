"""The test stacks deployed into a LocalCloud (the fixture factory :func:`deployed_stack`, the
behaviour stack's handle :class:`Deployed`), with helpers to run and inspect them."""

from __future__ import annotations

import functools
import threading
import time
import uuid
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar

import pytest

from kept_deployment import KEPT
from locked_workflow.testing import LocalCloud
from locked_workflow.constructs_lib.lock_client import LockClient
from locked_workflow.state_machines import lock_protocol as p

#: The DynamoDB backends every deployed-stack fixture runs a module on.
BACKENDS = ("moto", "dynamodb-local")

Run = TypeVar("Run", bound="StackRun")


class StackRun:
    """A test stack deployed in a :class:`LocalCloud`: what every test module's handle on its
    stack shares (each module subclasses it with the helpers its tests read).

    State machines are named as the stack's construct ids: ``arn("Fair")`` is the machine of the
    ``LockedWorkflow`` ``Fair`` (its ``FairStateMachine``); a machine built by hand whose id
    starts with ``Unlocked`` is its own name (override :meth:`machine_id` for other rules)."""

    def __init__(self, cloud: LocalCloud, app: Any) -> None:
        self.cloud, self.app = cloud, app

    def machine_id(self, name: str) -> str:
        return name if name.startswith("Unlocked") else f"{name}StateMachine"

    def arn(self, name: str) -> str:
        return self.app.state_machine_arn(self.machine_id(name))

    def table(self, prefix: str) -> str:
        """The physical name of the stack's table whose logical id starts with ``prefix``."""
        return next(v for k, v in self.app.resources.items() if k.startswith(prefix))

    def start(self, machine: str, document: dict) -> str:
        return self.cloud.start_execution(self.arn(machine), document)

    def wait(self, arns, timeout: float = 240):
        return [self.cloud.wait_for(a, timeout=timeout) for a in arns]

    def get(self, table_prefix: str, key: dict) -> dict:
        """An item of the stack's table (``table_prefix``) by its key, read consistently (``{}``
        when absent)."""
        return self.cloud.dynamodb.get_item(TableName=self.table(table_prefix), Key=key,
                                            ConsistentRead=True).get("Item", {})


@functools.cache
def synthesized(stack: Callable[[Any, str], Any], name: str, *, asset_metadata: bool = True):
    """``stack(app, name)`` synthesized once per test run (with its Lambda assets staged and,
    by default, the asset metadata LocalCloud finds their code by): the first worker to need it
    synthesizes it, the others read it (``synth_cache``)."""
    from synth_cache import synth_cached

    context = {"aws:cdk:enable-asset-metadata": True} if asset_metadata else None
    return synth_cached(stack, name, context=context)


def deployed_stack(stack: Callable[[Any, str], Any], name: str, run: Callable[[LocalCloud, Any], Run], *,
                   asset_metadata: bool = True) -> Callable[..., Run]:
    """A module-scoped fixture: ``stack`` (synthesized once per run, :func:`synthesized`)
    deployed on each DynamoDB backend (:data:`BACKENDS`, skipped where missing), yielded as
    ``run(cloud, app)``; the test files of one group share that deployment
    (:func:`shared_deployment`)::

        fair = deployed_stack(FairStack, "Fair", Fair)
    """

    @pytest.fixture(scope="module", params=BACKENDS)
    def fixture(request) -> Run:
        return shared_deployment(request.param, synthesized(stack, name, asset_metadata=asset_metadata), run)

    return fixture


def shared_deployment(backend: str, synthesized, run: Callable[[LocalCloud, Any], Run]) -> Run:
    """``run(cloud, app)`` of ``synthesized`` deployed in a fresh LocalCloud on ``backend``,
    kept for the next test module that asks for the same (``kept_deployment.KEPT``: one per
    process, closed when the next test is in another group, ``file_groups.GROUPS``).
    ``run`` is called once per deployment: what it builds (a handle, or what its runs left) is
    shared too."""

    def deploy(exit_stack) -> Run:
        return run(*exit_stack.enter_context(_deployment(backend, synthesized)))

    return KEPT.get((backend, synthesized.stack_name, str(synthesized.assets_dir), run), deploy)


class Deployed(StackRun):
    """The behaviour stack (``tests/lock/behaviour_stack.py``) deployed: conftest's ``deployed``."""

    def machine(self, name: str) -> str:
        return self.arn(name)

    def run(self, machine: str, inputs: list[dict], *, stagger_s: float = 0.0, timeout: float = 180):
        arns = []
        for document in inputs:
            arns.append(self.cloud.start_execution(self.machine(machine), document))
            if stagger_s:
                time.sleep(stagger_s)
        return [self.cloud.wait_for(arn, timeout=timeout) for arn in arns]

    def customer(self, customer_id: str) -> dict:
        item = self.get("Customers", {"customerId": {"S": customer_id}})
        return {k: (int(v["N"]) if "N" in v else v.get("S")) for k, v in item.items()}

    def lock_item(self, namespace: str, key: str) -> dict:
        return self.get("LocksTable", {p.KEY_ATTRIBUTE: {"S": p.namespaced(namespace, key)}})

    @property
    def customers_table(self) -> str:
        return self.table("Customers")

    @property
    def locks_table(self) -> str:
        return self.table("LocksTable")

    def client(self, namespace: str) -> LockClient:
        return LockClient(self.locks_table, namespace=namespace, dynamodb=self.cloud.dynamodb)


def update(customer_id: str, *, delta=1, work_ms: int = 50) -> dict:
    return {"customerId": customer_id, "update": {"balanceDelta": delta}, "workMs": work_ms}


def new_key(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:8]}"




def start(deployed: Deployed, machine: str, document: dict) -> str:
    return deployed.cloud.start_execution(deployed.machine(machine), document)


def wait_until(predicate, *, timeout: float = 30.0, poll_s: float = 0.05) -> float:
    """Poll ``predicate`` until true; the time.time() at which it first was. Fails on timeout."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return time.time()
        time.sleep(poll_s)
    raise AssertionError(f"condition not met within {timeout} s")


def run_in_thread(target) -> tuple[threading.Thread, dict]:
    """``target()`` in a daemon thread: the thread, and a dict that gets its ``value`` or its
    ``error`` when it ends."""
    out: dict = {}

    def run():
        try:
            out["value"] = target()
        except BaseException as error:  # noqa: BLE001 - the test inspects it
            out["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


@contextmanager
def _deployment(backend: str, synthesized) -> Iterator[tuple[LocalCloud, Any]]:
    from locked_workflow.testing.pytest_plugin import require_backend

    KEPT.release()  # one LocalCloud at a time in a process
    require_backend(backend)
    with LocalCloud(backend) as cloud:
        yield cloud, cloud.deploy(synthesized.template, assets_dir=synthesized.assets_dir)


def local_deployment(backend: str, synthesized):
    """``(cloud, app)``: ``synthesized`` deployed in a fresh LocalCloud on ``backend``, for this
    fixture alone (:func:`shared_deployment` shares one between files)."""
    with _deployment(backend, synthesized) as deployment:
        yield deployment


def backend_cloud(backend: str):
    """A bare LocalCloud on ``backend`` (skipped where the backend is missing), for a module's
    tests that need tables, not a stack: ``yield from backend_cloud(request.param)``."""
    from locked_workflow.testing.pytest_plugin import require_backend

    KEPT.release()  # one LocalCloud at a time in a process
    require_backend(backend)
    with LocalCloud(backend) as cloud:
        yield cloud


def create_lock_table(cloud: LocalCloud, name: str) -> str:
    """A table keyed as a lock table (the string partition key ``pk``), created anew."""
    if name in cloud.dynamodb.list_tables()["TableNames"]:
        cloud.dynamodb.delete_table(TableName=name)
    cloud.dynamodb.create_table(
        TableName=name, KeySchema=[{"AttributeName": p.KEY_ATTRIBUTE, "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": p.KEY_ATTRIBUTE, "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name
