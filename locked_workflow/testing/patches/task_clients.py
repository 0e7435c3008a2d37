"""Task clients: the interpreter's service tasks reuse their boto3 clients.

Gap (moto 5.2.1): the Step Functions interpreter creates a new boto3 client for every task it
runs (``boto_client_for``, called by every service integration and the Lambda invoke): a
botocore client's creation copies its event hooks and builds a method per operation, 2-4 ms of
the process's one interpreter on a quiet machine. A contended fair run makes five DynamoDB or
Step Functions calls, so a burst of 100 starts spent 31 % of the time any thread held the GIL
creating clients (sampled with a profiler), while the running executions waited. Step Functions
makes a task's call without such a cost to the others.

Fix: one client per (region, service, endpoint) for as long as the runtime is active, created
once under a lock; botocore clients are thread-safe for making calls. The endpoint is part of
the key: with DynamoDB Local the environment names its endpoint (``AWS_ENDPOINT_URL_DYNAMODB``).
``state_credentials`` is not: moto's own function ignores it too (every client uses the same
fake keys). Faults and meters that patch ``BaseClient._make_api_call`` see every call as before.

AWS: no AWS behaviour: a cost of the runtime. It keeps what a lock's timing on AWS assumes
(no documented page says it): one execution's task calls do not hold up the others.

Proof: ``tests/local/test_patch_task_clients.py``.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from contextlib import ExitStack
from types import ModuleType
from typing import Any, Callable

import moto.stepfunctions.parser as sfn_parser
from moto.stepfunctions.parser.asl.utils import boto_client

from locked_workflow.testing.seams import patch_attribute

#: Environment variables that choose a client's endpoint (boto3 reads them at creation).
_ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL",)


def users() -> list[ModuleType]:
    """The interpreter's modules that call ``boto_client_for`` (each imports it by name). The
    preprocessor imports every state component, so they are all loaded by then."""
    importlib.import_module("moto.stepfunctions.parser.asl.parse.preprocessor")
    original = boto_client.boto_client_for
    return [module for name, module in list(sys.modules.items())
            if name.startswith(sfn_parser.__name__) and getattr(module, "boto_client_for", None) is original]


class TaskClients:
    """The clients handed out, by (region, service, endpoint)."""

    def __init__(self, create: Callable[..., Any]) -> None:
        self._create = create
        #: Called with each client created, before anyone gets it (``patches/direct_dynamodb``).
        self.prepare: list[Callable[[Any], Any]] = []
        self._clients: dict[tuple, Any] = {}
        self._lock = threading.Lock()
        self.created = 0

    def client(self, region: str, service: str, state_credentials: Any = None) -> Any:
        endpoints = tuple(os.environ.get(name) for name in
                          (*_ENDPOINT_VARIABLES, f"AWS_ENDPOINT_URL_{service.upper().replace('-', '_')}"))
        key = (region, service, boto_client.botocore_stubber.enabled, endpoints)
        client = self._clients.get(key)  # a dict read: no lock once the client exists
        if client is not None:
            return client
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = self._create(region, service, state_credentials)
                for prepare in self.prepare:
                    prepare(client)
                self._clients[key] = client
                self.created += 1
            return client


def apply(stack: ExitStack) -> TaskClients:
    clients = TaskClients(boto_client.boto_client_for)
    for module in users():
        patch_attribute(stack, module, "boto_client_for", clients.client, by=__name__)
    return clients
