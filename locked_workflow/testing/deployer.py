"""Deploy a synthesized CloudFormation template into the local cloud.

Resources are created in dependency order (``resolver.deployment_order``) through boto3
clients of the active backends; intrinsic functions are resolved by ``resolver.Resolver``.

Created: ``AWS::DynamoDB::Table`` / ``AWS::DynamoDB::GlobalTable`` (keys, GSIs, LSIs,
billing, TTL, streams), ``AWS::StepFunctions::StateMachine`` (``DefinitionString`` or
``Definition``, ``DefinitionSubstitutions``, type), ``AWS::Lambda::Function`` (Python
handlers run in-process from their asset folder, with their layers), ``AWS::Lambda::LayerVersion``
(its asset folder), ``AWS::Events::EventBus``,
``AWS::Events::Rule`` (pattern, bus, state, targets with Input / InputPath /
InputTransformer / RetryPolicy / DeadLetterConfig), ``AWS::SQS::Queue``.

Skipped (they do not change what an execution does offline): IAM, logs, Lambda
permissions, CDK metadata, resource policies, alarms, KMS, ``Custom::LogRetention``...
Skipped resources still get a name and an ARN, so references to them resolve. Any other
type raises :class:`UnsupportedResourceError`.
"""

from __future__ import annotations

import io
import json
import logging
import re
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from locked_workflow.testing import lambda_imports
from locked_workflow.testing.lambda_runtime import FunctionRegistry, InProcessFunction
from locked_workflow.testing.resolver import (
    NAME_PROPERTIES,
    PhysicalResource,
    Resolver,
    cdk_path,
    default_physical_resource,
    deployment_order,
    matching_ids,
)

#: Progress of a deploy (INFO: start and end; DEBUG: each resource): ``--log-cli-level=INFO`` shows it live.
_log = logging.getLogger("locked_workflow.testing.deploy")

#: Types that do not affect execution offline; deployed as names only.
SKIPPED_TYPES = frozenset(
    {
        "AWS::CDK::Metadata",
        "AWS::IAM::Role",
        "AWS::IAM::Policy",
        "AWS::IAM::ManagedPolicy",
        "AWS::IAM::InstanceProfile",
        "AWS::Logs::LogGroup",
        "AWS::Logs::LogStream",
        "AWS::Logs::SubscriptionFilter",
        "AWS::Logs::MetricFilter",
        "AWS::Lambda::Permission",
        "AWS::Lambda::EventInvokeConfig",
        "AWS::SQS::QueuePolicy",
        "AWS::SNS::TopicPolicy",
        "AWS::Events::EventBusPolicy",
        "AWS::KMS::Key",
        "AWS::KMS::Alias",
        "AWS::CloudWatch::Alarm",
        "AWS::CloudWatch::CompositeAlarm",
        "AWS::CloudWatch::Dashboard",
        "AWS::SSM::Parameter",
        "AWS::Events::Archive",
        "Custom::LogRetention",
        "Custom::S3AutoDeleteObjects",
    }
)

PYTHON_RUNTIME = re.compile(r"^python3(\.\d+)?$")


class UnsupportedResourceError(RuntimeError):
    """A resource type the local cloud cannot deploy and that matters for execution."""

    def __init__(self, logical_id: str, resource_type: str, reason: str = "") -> None:
        self.logical_id = logical_id
        self.resource_type = resource_type
        detail = f": {reason}" if reason else ""
        super().__init__(f"cannot deploy {logical_id} ({resource_type}) locally{detail}")


@dataclass
class Deployment:
    """What ``LocalCloud.deploy`` created.

    ``resources``: logical id -> physical id (what ``Ref`` returns: table/function/bus/rule
    name, state machine ARN, queue URL). ``skipped``: ``(logical id, type)`` of resources
    not needed to run. ``warnings``: things deployed but not fully functional offline.
    """

    stack_name: str
    template: dict[str, Any]
    resources: dict[str, str] = field(default_factory=dict)
    attributes: dict[str, dict[str, Any]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    # -- lookups ------------------------------------------------------------------------

    def logical_id(self, key: str, resource_type: str | None = None) -> str:
        """The one logical id matching ``key`` (exact id, id prefix, or CDK path)."""
        candidates = [i for i in self.types if resource_type is None or self.types[i] == resource_type]
        found = matching_ids(candidates, self.template["Resources"], key)
        kind = resource_type or "resource"
        if not found:
            raise KeyError(f"no {kind} matches {key!r} (have: {sorted(candidates)})")
        if len(found) > 1:
            raise KeyError(f"{key!r} matches several {kind}s: {sorted(found)}")
        return found[0]

    def ref(self, key: str, resource_type: str | None = None) -> str:
        return self.resources[self.logical_id(key, resource_type)]

    def attribute(self, key: str, attribute: str, resource_type: str | None = None) -> Any:
        return self.attributes[self.logical_id(key, resource_type)][attribute]

    def state_machine_arn(self, key: str = "") -> str:
        return self.ref(key, "AWS::StepFunctions::StateMachine")

    def table_name(self, key: str = "") -> str:
        try:
            return self.ref(key, "AWS::DynamoDB::Table")
        except KeyError:
            return self.ref(key, "AWS::DynamoDB::GlobalTable")

    def function_name(self, key: str = "") -> str:
        return self.ref(key, "AWS::Lambda::Function")

    def event_bus_name(self, key: str = "") -> str:
        return self.ref(key, "AWS::Events::EventBus")

    def rule_name(self, key: str = "") -> str:
        return self.ref(key, "AWS::Events::Rule")

    def queue_url(self, key: str = "") -> str:
        return self.ref(key, "AWS::SQS::Queue")

    def of_type(self, resource_type: str) -> dict[str, str]:
        """Logical id -> physical id of every deployed resource of ``resource_type``."""
        return {i: self.resources[i] for i, t in self.types.items() if t == resource_type and i in self.resources}


class Deployer:
    """Creates the resources of one template (used by ``LocalCloud.deploy``)."""

    def __init__(
        self,
        *,
        client: Callable[[str], Any],
        functions: FunctionRegistry,
        region: str,
        account_id: str,
    ) -> None:
        self.client = client
        self.functions = functions
        self.region = region
        self.account_id = account_id

    def deploy(
        self,
        template: Mapping[str, Any],
        *,
        stack_name: str,
        assets_dir: Path | None = None,
        assets: Mapping[str, Path] | None = None,
        parameters: Mapping[str, Any] | None = None,
    ) -> Deployment:
        template = json.loads(json.dumps(template))  # private copy
        resolver = Resolver(
            template,
            region=self.region,
            account_id=self.account_id,
            stack_name=stack_name,
            parameters=parameters,
        )
        deployment = Deployment(stack_name=stack_name, template=template)
        self._assets_dir = Path(assets_dir) if assets_dir else None
        self._assets = {k: Path(v) for k, v in (assets or {}).items()}
        self._layers: dict[str, Path | None] = {}  # layer version ARN -> content folder
        resources = template.get("Resources", {})
        order = deployment_order(template)
        started = time.monotonic()
        _log.info("deploying %s: %d resources", stack_name, len(order))

        for n, logical_id in enumerate(order, 1):
            resource = resources[logical_id]
            resource_type = resource["Type"]
            condition = resource.get("Condition")
            if condition and not resolver.condition(condition):
                deployment.skipped.append((logical_id, resource_type))
                continue
            deployment.types[logical_id] = resource_type
            handler = self._HANDLERS.get(resource_type)
            if handler is None and resource_type not in SKIPPED_TYPES:
                raise UnsupportedResourceError(logical_id, resource_type)
            properties = resolver.resolve(resource.get("Properties", {}))
            name_property = NAME_PROPERTIES.get(resource_type)
            physical = default_physical_resource(
                resource_type,
                logical_id,
                properties.get(name_property) if name_property else None,
                stack_name=stack_name,
                region=self.region,
                account_id=self.account_id,
            )
            if handler is None:
                deployment.skipped.append((logical_id, resource_type))
            else:
                physical = handler(self, logical_id, resource, properties, physical, deployment) or physical
            resolver.physical[logical_id] = physical
            deployment.resources[logical_id] = physical.ref
            deployment.attributes[logical_id] = dict(physical.attributes)
            _log.debug("%s: %d/%d %s (%s) after %.1f s", stack_name, n, len(order), logical_id, resource_type,
                       time.monotonic() - started)
        _log.info("deployed %s: %d resources in %.1f s", stack_name, len(order), time.monotonic() - started)
        return deployment

    # -- DynamoDB -----------------------------------------------------------------------

    def _table(self, logical_id, resource, props, physical, deployment):  # type: ignore[no-untyped-def]
        global_table = resource["Type"] == "AWS::DynamoDB::GlobalTable"
        request: dict[str, Any] = {
            "TableName": physical.ref,
            "KeySchema": props["KeySchema"],
            "AttributeDefinitions": props["AttributeDefinitions"],
        }
        billing = "PAY_PER_REQUEST" if global_table else props.get("BillingMode", "PROVISIONED")
        request["BillingMode"] = billing
        if billing == "PROVISIONED":
            request["ProvisionedThroughput"] = props.get(
                "ProvisionedThroughput", {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5}
            )
        indexes = []
        for index in props.get("GlobalSecondaryIndexes", []):
            spec = {k: index[k] for k in ("IndexName", "KeySchema", "Projection")}
            if billing == "PROVISIONED":
                spec["ProvisionedThroughput"] = index.get("ProvisionedThroughput", request["ProvisionedThroughput"])
            indexes.append(spec)
        if indexes:
            request["GlobalSecondaryIndexes"] = indexes
        if props.get("LocalSecondaryIndexes"):
            request["LocalSecondaryIndexes"] = [
                {k: index[k] for k in ("IndexName", "KeySchema", "Projection")}
                for index in props["LocalSecondaryIndexes"]
            ]
        stream = props.get("StreamSpecification")
        if stream and stream.get("StreamViewType"):
            request["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": stream["StreamViewType"]}
        dynamodb = self.client("dynamodb")
        created = dynamodb.create_table(**request)["TableDescription"]
        ttl = props.get("TimeToLiveSpecification")
        if ttl and ttl.get("Enabled"):
            dynamodb.update_time_to_live(
                TableName=physical.ref,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl["AttributeName"]},
            )
        attributes = dict(physical.attributes, Arn=created.get("TableArn", physical.attributes["Arn"]))
        if created.get("LatestStreamArn"):
            attributes["StreamArn"] = created["LatestStreamArn"]
        return PhysicalResource(physical.ref, attributes)

    # -- Step Functions -----------------------------------------------------------------

    def _state_machine(self, logical_id, resource, props, physical, deployment):  # type: ignore[no-untyped-def]
        if "DefinitionString" in props:
            definition = props["DefinitionString"]
        elif "Definition" in props:
            definition = json.dumps(props["Definition"])
        elif "DefinitionS3Location" in props:
            raise UnsupportedResourceError(logical_id, resource["Type"], "DefinitionS3Location")
        else:
            raise UnsupportedResourceError(logical_id, resource["Type"], "no definition")
        for key, value in (props.get("DefinitionSubstitutions") or {}).items():
            definition = definition.replace("${" + key + "}", value if isinstance(value, str) else json.dumps(value))
        request = {
            "name": physical.attributes["Name"],
            "definition": definition,
            "roleArn": props.get("RoleArn") or f"arn:aws:iam::{self.account_id}:role/local-states",
        }
        if props.get("StateMachineType"):
            request["type"] = props["StateMachineType"]
        arn = self.client("stepfunctions").create_state_machine(**request)["stateMachineArn"]
        return PhysicalResource(arn, dict(physical.attributes, Arn=arn))

    # -- Lambda -------------------------------------------------------------------------

    def _function(self, logical_id, resource, props, physical, deployment):  # type: ignore[no-untyped-def]
        name = physical.ref
        runtime = props.get("Runtime", "")
        handler = props.get("Handler", "index.handler")
        environment = (props.get("Environment") or {}).get("Variables") or {}
        code_dir = self._code_dir(logical_id, resource, props)
        layers, layer_packages = self._function_layers(logical_id, props, deployment)
        role = props.get("Role") or f"arn:aws:iam::{self.account_id}:role/local-lambda"
        self._ensure_role(role)  # moto's CreateFunction insists that the role exists
        self.client("lambda").create_function(
            FunctionName=name,
            Runtime=runtime or "python3.12",
            Role=role,
            Handler=handler,
            Code={"ZipFile": _empty_zip()},
            Environment={"Variables": {k: str(v) for k, v in environment.items()}},
            Timeout=int(props.get("Timeout", 3)),
            MemorySize=int(props.get("MemorySize", 128)),
        )
        if not PYTHON_RUNTIME.match(runtime) or code_dir is None:
            reason = (
                f"runtime {runtime!r} cannot run in-process"
                if not PYTHON_RUNTIME.match(runtime)
                else "no code folder (pass assets_dir= or assets={logical_id: folder})"
            )
            deployment.warnings.append(f"{logical_id}: {reason}; invoking it fails")
            code_dir = Path(tempfile.mkdtemp(prefix="local-lambda-"))
            (code_dir / "_unrunnable.py").write_text(
                "class LocalRuntimeUnsupported(Exception):\n    pass\n\n\n"
                f"def handler(event, context):\n    raise LocalRuntimeUnsupported({reason!r})\n"
            )
            handler = "_unrunnable.handler"
        self.functions.add(
            InProcessFunction(
                name=name,
                code_dir=code_dir,
                handler=handler,
                region=self.region,
                account_id=self.account_id,
                environment={k: str(v) for k, v in environment.items()},
                timeout_s=int(props.get("Timeout", 3)),
                memory_mb=int(props.get("MemorySize", 128)),
                layers=tuple(layers),
                layer_packages=frozenset(layer_packages),
            )
        )
        return None

    def _layer_version(self, logical_id, resource, props, physical, deployment):  # type: ignore[no-untyped-def]
        """A layer of this template: its content folder (its asset), for the functions that use it."""
        folder = self._code_dir(logical_id, resource, {"Code": props.get("Content") or {}})
        if folder is None:
            deployment.warnings.append(f"{logical_id}: no content folder; functions see nothing of this layer")
        self._layers[physical.ref] = folder
        return None

    def _function_layers(self, logical_id: str, props: Mapping[str, Any], deployment: Deployment):
        """The content folders of a function's layers of this template, and the top-level
        packages of its published layers the runtime knows (the Powertools layer)."""
        folders, packages = [], set()
        for arn in props.get("Layers") or []:
            if arn in self._layers:
                if self._layers[arn] is not None:
                    folders.append(self._layers[arn])
                continue
            known = lambda_imports.published_layer_packages(str(arn))
            if known is None:
                deployment.warnings.append(f"{logical_id}: layer {arn} is unknown offline; it provides nothing here")
            else:
                packages |= known
        return folders, packages

    def _ensure_role(self, role_arn: str) -> None:
        iam = self.client("iam")
        name = role_arn.rsplit("/", 1)[-1]
        try:
            iam.get_role(RoleName=name)
        except iam.exceptions.NoSuchEntityException:
            iam.create_role(
                RoleName=name,
                AssumeRolePolicyDocument=json.dumps(
                    {
                        "Version": "2012-10-17",
                        "Statement": [
                            {
                                "Effect": "Allow",
                                "Principal": {"Service": "lambda.amazonaws.com"},
                                "Action": "sts:AssumeRole",
                            }
                        ],
                    }
                ),
            )

    def _code_dir(self, logical_id: str, resource: Mapping[str, Any], props: Mapping[str, Any]) -> Path | None:
        path = cdk_path(resource) or ""
        for key, folder in self._assets.items():
            if key == logical_id or (path and (path == key or path.startswith(key.rstrip("/") + "/"))):
                return folder
        code = props.get("Code") or {}
        if "ZipFile" in code:
            folder = Path(tempfile.mkdtemp(prefix=f"local-lambda-{logical_id}-"))
            module = props.get("Handler", "index.handler").rpartition(".")[0].replace(".", "/")
            target = folder / f"{module}.py"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(code["ZipFile"])
            return folder
        # aws:asset:path metadata (cdk CLI), else the assets manifest by S3 key (any synth).
        asset_path = (resource.get("Metadata") or {}).get("aws:asset:path")
        if asset_path:
            folder = Path(asset_path)
            if not folder.is_absolute() and self._assets_dir is not None:
                folder = self._assets_dir / folder
            if folder.is_dir():
                return folder
        s3_key = code.get("S3Key")
        if isinstance(s3_key, str) and self._assets_dir is not None:
            return asset_folder_for_key(self._assets_dir, s3_key)
        return None

    # -- EventBridge --------------------------------------------------------------------

    def _event_bus(self, logical_id, resource, props, physical, deployment):  # type: ignore[no-untyped-def]
        arn = self.client("events").create_event_bus(Name=physical.ref)["EventBusArn"]
        return PhysicalResource(physical.ref, dict(physical.attributes, Arn=arn))

    def _rule(self, logical_id, resource, props, physical, deployment):  # type: ignore[no-untyped-def]
        events = self.client("events")
        bus = props.get("EventBusName", "default")
        if bus.startswith("arn:"):
            bus = bus.split("/", 1)[1]
        request: dict[str, Any] = {"Name": physical.ref, "EventBusName": bus, "State": props.get("State", "ENABLED")}
        if "EventPattern" in props:
            pattern = props["EventPattern"]
            request["EventPattern"] = pattern if isinstance(pattern, str) else json.dumps(pattern)
        if "ScheduleExpression" in props:
            request["ScheduleExpression"] = props["ScheduleExpression"]
            deployment.warnings.append(f"{logical_id}: schedules do not fire offline")
        if props.get("Description"):
            request["Description"] = props["Description"]
        arn = events.put_rule(**request)["RuleArn"]
        targets = []
        for target in props.get("Targets", []):
            spec = {k: v for k, v in target.items() if k in _TARGET_KEYS}
            if "Input" in spec and not isinstance(spec["Input"], str):
                spec["Input"] = json.dumps(spec["Input"])
            transformer = spec.get("InputTransformer")
            if transformer and not isinstance(transformer.get("InputTemplate", ""), str):
                transformer["InputTemplate"] = json.dumps(transformer["InputTemplate"])
            targets.append(spec)
        if targets:
            events.put_targets(Rule=physical.ref, EventBusName=bus, Targets=targets)
        return PhysicalResource(physical.ref, dict(physical.attributes, Arn=arn))

    # -- SQS ----------------------------------------------------------------------------

    def _queue(self, logical_id, resource, props, physical, deployment):  # type: ignore[no-untyped-def]
        name = physical.attributes["QueueName"]
        if props.get("FifoQueue") and not name.endswith(".fifo"):
            name += ".fifo"
        attributes = {}
        for key in (
            "FifoQueue",
            "ContentBasedDeduplication",
            "VisibilityTimeout",
            "MessageRetentionPeriod",
            "DelaySeconds",
            "ReceiveMessageWaitTimeSeconds",
            "MaximumMessageSize",
        ):
            if key in props:
                value = props[key]
                attributes[key] = str(value).lower() if isinstance(value, bool) else str(value)
        if "RedrivePolicy" in props:
            policy = props["RedrivePolicy"]
            attributes["RedrivePolicy"] = policy if isinstance(policy, str) else json.dumps(policy)
        sqs = self.client("sqs")
        url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        return PhysicalResource(url, {"Arn": arn, "QueueName": name, "QueueUrl": url})

    _HANDLERS: dict[str, Callable[..., PhysicalResource | None]] = {
        "AWS::DynamoDB::Table": _table,
        "AWS::DynamoDB::GlobalTable": _table,
        "AWS::StepFunctions::StateMachine": _state_machine,
        "AWS::Lambda::Function": _function,
        "AWS::Lambda::LayerVersion": _layer_version,
        "AWS::Events::EventBus": _event_bus,
        "AWS::Events::Rule": _rule,
        "AWS::SQS::Queue": _queue,
    }


_TARGET_KEYS = (
    "Id",
    "Arn",
    "RoleArn",
    "Input",
    "InputPath",
    "InputTransformer",
    "RetryPolicy",
    "DeadLetterConfig",
    "SqsParameters",
)


def asset_folder_for_key(assets_dir: Path, object_key: str) -> Path | None:
    """The staged folder of the file asset published as ``object_key`` (``*.assets.json``)."""
    for manifest in sorted(assets_dir.glob("*.assets.json")):
        files = json.loads(manifest.read_text()).get("files", {})
        for asset in files.values():
            keys = {d.get("objectKey") for d in (asset.get("destinations") or {}).values()}
            if object_key in keys:
                folder = assets_dir / asset["source"]["path"]
                return folder if folder.is_dir() else None
    return None


def _empty_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("README", "code runs in-process from its asset folder\n")
    return buffer.getvalue()
