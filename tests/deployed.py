"""The behaviour stack deployed into a LocalCloud, with helpers to run and inspect it."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from locked_workflow.testing import LocalCloud
from locked_workflow.constructs_lib.lock_client import LockClient
from locked_workflow.state_machines import lock_protocol as p

@dataclass
class Deployed:
    cloud: LocalCloud
    app: object

    def machine(self, name: str) -> str:
        return self.app.state_machine_arn(f"{name}StateMachine" if name != "Unlocked" else "Unlocked")

    def run(self, machine: str, inputs: list[dict], *, stagger_s: float = 0.0, timeout: float = 180):
        arns = []
        for document in inputs:
            arns.append(self.cloud.start_execution(self.machine(machine), document))
            if stagger_s:
                time.sleep(stagger_s)
        return [self.cloud.wait_for(arn, timeout=timeout) for arn in arns]

    def customer(self, customer_id: str) -> dict:
        item = self.cloud.dynamodb.get_item(
            TableName=self.customers_table, Key={"customerId": {"S": customer_id}}, ConsistentRead=True
        ).get("Item", {})
        return {k: (int(v["N"]) if "N" in v else v.get("S")) for k, v in item.items()}

    def lock_item(self, namespace: str, key: str) -> dict:
        return self.cloud.dynamodb.get_item(
            TableName=self.locks_table, Key={p.KEY_ATTRIBUTE: {"S": p.namespaced(namespace, key)}},
            ConsistentRead=True,
        ).get("Item", {})

    @property
    def customers_table(self) -> str:
        return next(v for k, v in self.app.resources.items() if k.startswith("Customers"))

    @property
    def locks_table(self) -> str:
        return next(v for k, v in self.app.resources.items() if k.startswith("LocksTable"))

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


def local_deployment(backend: str, synthesized):
    """``(cloud, app)``: ``synthesized`` deployed in a fresh LocalCloud on ``backend``."""
    from locked_workflow.testing import LocalCloud
    from locked_workflow.testing.pytest_plugin import require_backend

    require_backend(backend)
    with LocalCloud(backend) as cloud:
        yield cloud, cloud.deploy(synthesized.template, assets_dir=synthesized.assets_dir)


def backend_cloud(backend: str):
    """A bare LocalCloud on ``backend`` (skipped where the backend is missing), for a module's
    tests that need tables, not a stack: ``yield from backend_cloud(request.param)``."""
    from locked_workflow.testing.pytest_plugin import require_backend

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
