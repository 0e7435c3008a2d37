"""Direct DynamoDB: the interpreter's DynamoDB tasks reach moto without emulating HTTP.

Gap (moto 5.2.1): a DynamoDB task (``arn:aws:states:::dynamodb:*``, ``aws-sdk:dynamodb:*``) calls
DynamoDB through a botocore client whose request moto intercepts at botocore's last step, just
before the socket: botocore resolves the endpoint, serializes the request, builds and prepares an
HTTP request, signs it (SigV4), emits its send events, and moto's stubber (on ``before-send``)
routes the URL to ``DynamoHandler``, which answers an HTTP response that botocore then parses.
That emulation (preparing the request, its send events, moto's routing of it, the retry and
response events) is about a tenth of a task call's CPU: a lock's acquire (a conditional
UpdateItem, ``ALL_NEW``) through the task client, one thread, 200 calls five times each way in one
process on a loaded machine, 7.50 ms of CPU a call through botocore's whole path, 6.68 ms here
(0.89); held on the process's one interpreter while every other execution waits. Step Functions
makes a task's call without such a cost to the others. What remains (90 % of a call, profiled) is
moto's own: its request parsing and response serializer, and its DynamoDB's update expression
(parsed twice, validated in ten passes over a deep copy).

Fix: each task client of DynamoDB (``patches/task_clients`` hands them out) answers its calls at
botocore's ``before-call`` event - the documented hook that botocore's own ``Stubber`` answers
calls at - by handing the request botocore serialized (the same body, headers and URL, signed by
the client's own signer) straight to moto's stubber (``BotocoreStubber.process_request``, which
routes it to ``DynamoHandler`` exactly as on ``before-send``) and parsing moto's answer with
botocore's parser for the protocol, the modeled error fields included (``CancellationReasons``,
``Item``), as botocore's endpoint does. What is skipped: preparing and sending an HTTP request
(events ``request-created`` but the signing, ``before-send``, ``response-received``,
``needs-retry``: the task clients make one attempt, moto's ``boto_client_for`` sets no retries).

Every seam stays where it was: ``BaseClient._make_api_call`` (``faults.dynamodb_faults``,
``faults.fault_registry``, ``patches/transaction_conflicts``) is entered as before, so faults and
conflicts apply to these calls the same way; moto's ``DynamoHandler`` runs its request parsing,
``call_action`` (``patches/serial_dynamodb``) and its action (``patches/dynamodb_validation``,
``patches/consumed_capacity``); the task integration gets the same response or the same modeled
exception (``DynamoDB.ConditionalCheckFailedException``, ``DynamoDb.TransactionCanceledException``
with its cause). A request moto would not answer (its stubber off, a passthrough URL, an endpoint
not moto's, e.g. DynamoDB Local's) takes botocore's whole path, as before.

AWS: no AWS behaviour: a cost of the runtime. It keeps what a lock's timing on AWS assumes
(no documented page says it): one execution's task calls do not hold up the others.

Proof: ``tests/local/test_patch_direct_dynamodb.py``.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

from botocore import parsers
from botocore.awsrequest import AWSResponse, create_request_object
from botocore.endpoint import convert_to_response_dict
from botocore.model import OperationModel
from moto.core.botocore_stubber import MockRawResponse
from moto.core.models import botocore_stubber

from locked_workflow.testing.patches.task_clients import TaskClients

#: botocore's name of the service whose task clients answer directly.
SERVICE = "dynamodb"
#: The event a client's handler answers a call at (botocore.stub.Stubber's).
EVENT = f"before-call.{SERVICE}"
#: How the handler is registered on a client (so it is registered once).
UNIQUE_ID = "locked-workflow-direct-dynamodb"


class DirectCalls:
    """The ``before-call`` handler of one client: its calls answered by moto directly."""

    def __init__(self, protocol: str, events: Any) -> None:
        self._protocol = protocol
        self._events = events

    def __call__(self, model: OperationModel, params: dict[str, Any], request_signer: Any,
                 **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if not botocore_stubber.enabled:
            return None
        request = create_request_object(params)
        request_signer.sign(model.name, request)
        prepared = request.prepare()
        answer = botocore_stubber.process_request(prepared)
        if answer is None:  # not moto's to answer: botocore's whole path (which finds the same)
            return None
        status, headers, body = answer
        http = AWSResponse(prepared.url, status, headers, MockRawResponse(body))
        response = convert_to_response_dict(http, model)
        customized: dict[str, Any] = {}
        self._events.emit(f"before-parse.{model.service_model.service_id.hyphenize()}.{model.name}",
                          operation_model=model, response_dict=response, customized_response_dict=customized)
        parser = parsers.create_parser(self._protocol)  # one a response, as botocore's endpoint does
        parsed = parser.parse(response, model.output_shape)
        parsed.update(customized)
        if http.status_code >= 300:
            _add_modeled_error_fields(parser, response, parsed, model)
        metadata = parsed.get("ResponseMetadata")
        if metadata is not None:
            metadata["RetryAttempts"] = 0  # one attempt, as botocore's endpoint counts it
        return http, parsed


def _add_modeled_error_fields(parser: Any, response: dict[str, Any], parsed: dict[str, Any],
                              model: OperationModel) -> None:
    """The error's own members (``CancellationReasons``...), as botocore's endpoint adds them."""
    code = parsed.get("Error", {}).get("Code")
    shape = model.service_model.shape_for_error_code(code) if code is not None else None
    if shape is not None:
        parsed.update(parser.parse(response, shape))


def attach(client: Any) -> DirectCalls | None:
    """Answer ``client``'s calls directly if it is a DynamoDB client; its handler, else None."""
    service_model = client.meta.service_model
    if service_model.service_name != SERVICE:
        return None
    protocol = getattr(service_model, "resolved_protocol", None) or service_model.protocol  # botocore's endpoint's
    handler = DirectCalls(protocol, client.meta.events)
    client.meta.events.register(EVENT, handler, unique_id=UNIQUE_ID)
    return handler


def apply(stack: ExitStack, clients: TaskClients) -> None:
    """The task clients ``clients`` creates from now on answer DynamoDB calls directly."""
    clients.prepare.append(attach)
    stack.callback(clients.prepare.remove, attach)
