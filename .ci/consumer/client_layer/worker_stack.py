"""A user's function that takes part in a lock with LockClient, shipped the supported way: its
asset holds only index.py, and LockClientLayer carries the client."""

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from locked_workflow import LockClientLayer, LockTable


class WorkerStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, with_layer: bool = True, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        locks = LockTable(self, "Locks", removal_policy=RemovalPolicy.DESTROY)
        worker = lambda_.Function(
            self, "Worker", runtime=lambda_.Runtime.PYTHON_3_13, handler="index.handler",
            code=lambda_.Code.from_asset("functions/worker"), timeout=Duration.seconds(10),
            layers=[LockClientLayer(self, "LockClient").layer] if with_layer else [],
            environment={"LOCK_TABLE": locks.table.table_name},
        )
        locks.table.grant_read_write_data(worker)
