"""CloudFormation template resolution: intrinsic functions, dependency order, physical ids.

Pure functions of a template (a dict) and of the physical ids already known; no AWS calls.
The deployer (``deployer.py``) walks :func:`deployment_order`, asks
:func:`default_physical_resource` for each resource's local name and ARN, resolves its
properties with :class:`Resolver`, and creates it.

Supported: ``Ref`` (resources, parameters, pseudo parameters ``AWS::Region``,
``AWS::AccountId``, ``AWS::Partition``, ``AWS::URLSuffix``, ``AWS::StackName``,
``AWS::StackId``, ``AWS::NoValue``), ``Fn::GetAtt`` (list or ``"Id.Attr"`` form),
``Fn::Join``, ``Fn::Sub`` (string and ``[string, variables]`` forms), ``Fn::Select``,
``Fn::Split``, ``Fn::If`` / ``Fn::Equals`` / ``Fn::Not`` / ``Fn::And`` / ``Fn::Or`` /
``Condition``, ``Fn::FindInMap``, ``Fn::Base64``, ``Fn::GetAZs``, ``Fn::ToJsonString``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

#: Marker for ``Ref: AWS::NoValue`` and a false ``Fn::If`` branch that drops a property.
NO_VALUE = object()


class ResolveError(ValueError):
    """An intrinsic function the resolver cannot evaluate (names the offending value)."""


@dataclass
class PhysicalResource:
    """What ``Ref`` and ``Fn::GetAtt`` of one deployed resource return."""

    ref: str
    attributes: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------------------------
# Dependencies
# ------------------------------------------------------------------------------------

_SUB_VARIABLE = re.compile(r"\$\{([^!}][^}]*)\}")


def references(value: Any) -> set[str]:
    """Names referenced by ``value`` through Ref, GetAtt and Sub (pseudo params included)."""
    found: set[str] = set()
    if isinstance(value, dict):
        if len(value) == 1:
            (key, arg), = value.items()
            if key == "Ref" and isinstance(arg, str):
                found.add(arg)
            elif key == "Fn::GetAtt":
                name = arg[0] if isinstance(arg, list) else str(arg).split(".", 1)[0]
                found.add(name)
            elif key == "Fn::Sub":
                text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
                for match in _SUB_VARIABLE.findall(text):
                    name = match.split(".", 1)[0]
                    if name not in variables:
                        found.add(name)
                found |= references(variables)
        for item in value.values():
            found |= references(item)
    elif isinstance(value, list):
        for item in value:
            found |= references(item)
    return found


def resource_dependencies(template: Mapping[str, Any]) -> dict[str, set[str]]:
    """For each resource, the resources it references or ``DependsOn``."""
    resources = template.get("Resources", {})
    graph: dict[str, set[str]] = {}
    for logical_id, resource in resources.items():
        deps = references({k: v for k, v in resource.items() if k != "DependsOn"})
        depends_on = resource.get("DependsOn", [])
        deps |= set([depends_on] if isinstance(depends_on, str) else depends_on)
        graph[logical_id] = {dep for dep in deps if dep in resources and dep != logical_id}
    return graph


def deployment_order(template: Mapping[str, Any]) -> list[str]:
    """Resources in an order where each comes after everything it depends on."""
    graph = resource_dependencies(template)
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(node: str, path: tuple[str, ...]) -> None:
        if state.get(node) == "done":
            return
        if state.get(node) == "visiting":
            raise ResolveError(f"circular dependency: {' -> '.join(path + (node,))}")
        state[node] = "visiting"
        for dep in sorted(graph[node]):
            visit(dep, path + (node,))
        state[node] = "done"
        order.append(node)

    for node in graph:
        visit(node, ())
    return order


# ------------------------------------------------------------------------------------
# Physical ids
# ------------------------------------------------------------------------------------

#: Property holding a resource's explicit name, per type.
NAME_PROPERTIES = {
    "AWS::DynamoDB::Table": "TableName",
    "AWS::DynamoDB::GlobalTable": "TableName",
    "AWS::StepFunctions::StateMachine": "StateMachineName",
    "AWS::StepFunctions::Activity": "Name",
    "AWS::Lambda::Function": "FunctionName",
    "AWS::Lambda::LayerVersion": "LayerName",
    "AWS::Events::EventBus": "Name",
    "AWS::Events::Rule": "Name",
    "AWS::SQS::Queue": "QueueName",
    "AWS::SNS::Topic": "TopicName",
    "AWS::IAM::Role": "RoleName",
    "AWS::IAM::Policy": "PolicyName",
    "AWS::IAM::ManagedPolicy": "ManagedPolicyName",
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::S3::Bucket": "BucketName",
}

_MAX_NAME = {"AWS::Lambda::Function": 64, "AWS::Lambda::LayerVersion": 64, "AWS::IAM::Role": 64, "AWS::SQS::Queue": 80, "AWS::Events::Rule": 64}


def generated_name(stack_name: str, logical_id: str, max_length: int = 80) -> str:
    """A CloudFormation-style generated name: ``<stack>-<logicalId>-<HASH>``."""
    suffix = hashlib.sha256(f"{stack_name}/{logical_id}".encode()).hexdigest()[:12].upper()
    head = f"{stack_name}-{logical_id}"[: max_length - len(suffix) - 1]
    return f"{head}-{suffix}"


def default_physical_resource(
    resource_type: str,
    logical_id: str,
    name: str | None,
    *,
    stack_name: str,
    region: str,
    account_id: str,
    partition: str = "aws",
) -> PhysicalResource:
    """Ref and GetAtt values of a resource called ``name`` (generated when None)."""
    name = name or generated_name(stack_name, logical_id, _MAX_NAME.get(resource_type, 80))
    base = f"arn:{partition}"
    if resource_type in ("AWS::DynamoDB::Table", "AWS::DynamoDB::GlobalTable"):
        arn = f"{base}:dynamodb:{region}:{account_id}:table/{name}"
        return PhysicalResource(name, {"Arn": arn, "StreamArn": f"{arn}/stream/1970-01-01T00:00:00.000"})
    if resource_type == "AWS::StepFunctions::StateMachine":
        arn = f"{base}:states:{region}:{account_id}:stateMachine:{name}"
        return PhysicalResource(arn, {"Arn": arn, "Name": name, "StateMachineRevisionId": arn})
    if resource_type == "AWS::StepFunctions::Activity":
        arn = f"{base}:states:{region}:{account_id}:activity:{name}"
        return PhysicalResource(arn, {"Arn": arn, "Name": name})
    if resource_type == "AWS::Lambda::Function":
        arn = f"{base}:lambda:{region}:{account_id}:function:{name}"
        return PhysicalResource(name, {"Arn": arn})
    if resource_type == "AWS::Lambda::LayerVersion":  # Ref: the layer version's ARN
        arn = f"{base}:lambda:{region}:{account_id}:layer:{name}:1"
        return PhysicalResource(arn, {"LayerVersionArn": arn})
    if resource_type == "AWS::Events::EventBus":
        arn = f"{base}:events:{region}:{account_id}:event-bus/{name}"
        return PhysicalResource(name, {"Arn": arn, "Name": name})
    if resource_type == "AWS::Events::Rule":
        arn = f"{base}:events:{region}:{account_id}:rule/{name}"
        return PhysicalResource(name, {"Arn": arn})
    if resource_type == "AWS::SQS::Queue":
        arn = f"{base}:sqs:{region}:{account_id}:{name}"
        url = f"https://sqs.{region}.amazonaws.com/{account_id}/{name}"
        return PhysicalResource(url, {"Arn": arn, "QueueName": name, "QueueUrl": url})
    if resource_type == "AWS::SNS::Topic":
        arn = f"{base}:sns:{region}:{account_id}:{name}"
        return PhysicalResource(arn, {"TopicArn": arn, "TopicName": name})
    if resource_type == "AWS::IAM::Role":
        arn = f"{base}:iam::{account_id}:role/{name}"
        return PhysicalResource(name, {"Arn": arn, "RoleId": f"AROA{_digest(name, 16)}"})
    if resource_type == "AWS::IAM::ManagedPolicy":
        arn = f"{base}:iam::{account_id}:policy/{name}"
        return PhysicalResource(arn, {"PolicyArn": arn})
    if resource_type == "AWS::Logs::LogGroup":
        arn = f"{base}:logs:{region}:{account_id}:log-group:{name}:*"
        return PhysicalResource(name, {"Arn": arn})
    if resource_type == "AWS::S3::Bucket":
        name = name.lower()
        return PhysicalResource(
            name,
            {"Arn": f"{base}:s3:::{name}", "DomainName": f"{name}.s3.amazonaws.com",
             "RegionalDomainName": f"{name}.s3.{region}.amazonaws.com"},
        )
    return PhysicalResource(name, {"Arn": f"{base}:local:{region}:{account_id}:{logical_id}/{name}"})


def _digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length].upper()


# ------------------------------------------------------------------------------------
# Intrinsic functions
# ------------------------------------------------------------------------------------


def _unsupported(name: str) -> Any:
    def handler(self: "Resolver", arg: Any) -> Any:
        raise ResolveError(f"{name} is not supported offline (argument: {arg!r})")

    return handler


class Resolver:
    """Evaluates intrinsic functions of one template against known physical resources."""

    def __init__(
        self,
        template: Mapping[str, Any],
        *,
        region: str,
        account_id: str,
        stack_name: str,
        partition: str = "aws",
        url_suffix: str = "amazonaws.com",
        parameters: Mapping[str, Any] | None = None,
        physical: Mapping[str, PhysicalResource] | None = None,
    ) -> None:
        self.template = template
        self.region = region
        self.account_id = account_id
        self.stack_name = stack_name
        self.partition = partition
        self.url_suffix = url_suffix
        self.physical: dict[str, PhysicalResource] = dict(physical or {})
        self.parameters = self._parameter_values(parameters or {})
        self._conditions: dict[str, bool] = {}

    def _parameter_values(self, given: Mapping[str, Any]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, spec in self.template.get("Parameters", {}).items():
            if name in given:
                values[name] = given[name]
            elif "Default" in spec:
                values[name] = spec["Default"]
        values.update({k: v for k, v in given.items() if k not in values})
        return values

    @property
    def pseudo_parameters(self) -> dict[str, str]:
        return {
            "AWS::Region": self.region,
            "AWS::AccountId": self.account_id,
            "AWS::Partition": self.partition,
            "AWS::URLSuffix": self.url_suffix,
            "AWS::StackName": self.stack_name,
            "AWS::StackId": (
                f"arn:{self.partition}:cloudformation:{self.region}:{self.account_id}:"
                f"stack/{self.stack_name}/00000000-0000-0000-0000-000000000000"
            ),
            "AWS::NotificationARNs": [],  # type: ignore[dict-item]
        }

    # -- public -----------------------------------------------------------------------

    def resolve(self, value: Any) -> Any:
        """``value`` with every intrinsic function evaluated (``NO_VALUE`` keys dropped)."""
        if isinstance(value, dict):
            if len(value) == 1:
                (key, arg), = value.items()
                handler = self._FUNCTIONS.get(key)
                if handler is not None:
                    return handler(self, arg)
            resolved = {}
            for key, item in value.items():
                item = self.resolve(item)
                if item is not NO_VALUE:
                    resolved[key] = item
            return resolved
        if isinstance(value, list):
            return [item for item in (self.resolve(v) for v in value) if item is not NO_VALUE]
        return value

    def condition(self, name: str) -> bool:
        """Value of a template condition."""
        if name not in self._conditions:
            spec = self.template.get("Conditions", {}).get(name)
            if spec is None:
                raise ResolveError(f"unknown condition {name!r}")
            self._conditions[name] = bool(self.resolve(spec))
        return self._conditions[name]

    # -- functions ----------------------------------------------------------------------

    def _ref(self, name: Any) -> Any:
        if not isinstance(name, str):
            raise ResolveError(f"Ref needs a name, got {name!r}")
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in self.pseudo_parameters:
            return self.pseudo_parameters[name]
        if name in self.parameters:
            return self.parameters[name]
        if name in self.physical:
            return self.physical[name].ref
        raise ResolveError(f"Ref to {name!r}: not a parameter or a deployed resource")

    def _get_att(self, arg: Any) -> Any:
        if isinstance(arg, str):
            logical_id, _, attribute = arg.partition(".")
        else:
            logical_id, attribute = arg[0], self.resolve(arg[1])
        resource = self.physical.get(logical_id)
        if resource is None:
            raise ResolveError(f"Fn::GetAtt {logical_id}.{attribute}: {logical_id!r} is not deployed")
        if attribute not in resource.attributes:
            raise ResolveError(
                f"Fn::GetAtt {logical_id}.{attribute}: unknown attribute "
                f"(known: {sorted(resource.attributes)})"
            )
        return resource.attributes[attribute]

    def _join(self, arg: Any) -> str:
        separator, items = arg
        items = self.resolve(items)
        return self.resolve(separator).join(_text(item) for item in items)

    def _sub(self, arg: Any) -> str:
        if isinstance(arg, str):
            text, variables = arg, {}
        else:
            text, variables = arg[0], self.resolve(arg[1])

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in variables:
                return _text(variables[name])
            if "." in name and name.split(".", 1)[0] in self.physical:
                return _text(self._get_att(name))
            return _text(self._ref(name))

        return re.sub(r"\$\{([^}]*)\}", replace, text)

    def _select(self, arg: Any) -> Any:
        index, items = self.resolve(arg[0]), self.resolve(arg[1])
        return items[int(index)]

    def _split(self, arg: Any) -> list[str]:
        separator, text = self.resolve(arg[0]), self.resolve(arg[1])
        return _text(text).split(separator)

    def _if(self, arg: Any) -> Any:
        name, when_true, when_false = arg
        return self.resolve(when_true if self.condition(name) else when_false)

    def _equals(self, arg: Any) -> bool:
        left, right = self.resolve(arg[0]), self.resolve(arg[1])
        return left == right

    def _not(self, arg: Any) -> bool:
        return not self._truth(arg[0])

    def _and(self, arg: Any) -> bool:
        return all(self._truth(item) for item in arg)

    def _or(self, arg: Any) -> bool:
        return any(self._truth(item) for item in arg)

    def _truth(self, item: Any) -> bool:
        if isinstance(item, dict) and set(item) == {"Condition"}:
            return self.condition(item["Condition"])
        return bool(self.resolve(item))

    def _condition(self, name: Any) -> bool:
        return self.condition(name)

    def _find_in_map(self, arg: Any) -> Any:
        name, top, second = (self.resolve(item) for item in arg[:3])
        try:
            return self.template["Mappings"][name][top][second]
        except KeyError as error:
            raise ResolveError(f"Fn::FindInMap {name}/{top}/{second}: not found") from error

    def _base64(self, arg: Any) -> str:
        return base64.b64encode(_text(self.resolve(arg)).encode()).decode()

    def _get_azs(self, arg: Any) -> list[str]:
        region = self.resolve(arg) or self.region
        return [f"{region}{zone}" for zone in "abc"]

    def _to_json_string(self, arg: Any) -> str:
        return json.dumps(self.resolve(arg), separators=(",", ":"))

    _FUNCTIONS = {
        "Ref": _ref,
        "Fn::GetAtt": _get_att,
        "Fn::Join": _join,
        "Fn::Sub": _sub,
        "Fn::Select": _select,
        "Fn::Split": _split,
        "Fn::If": _if,
        "Fn::Equals": _equals,
        "Fn::Not": _not,
        "Fn::And": _and,
        "Fn::Or": _or,
        "Condition": _condition,
        "Fn::FindInMap": _find_in_map,
        "Fn::Base64": _base64,
        "Fn::GetAZs": _get_azs,
        "Fn::ToJsonString": _to_json_string,
        "Fn::ImportValue": _unsupported("Fn::ImportValue"),
        "Fn::Cidr": _unsupported("Fn::Cidr"),
        "Fn::Transform": _unsupported("Fn::Transform"),
    }


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    raise ResolveError(f"expected a string, got {value!r}")


def cdk_path(resource: Mapping[str, Any]) -> str | None:
    """The ``aws:cdk:path`` metadata of a resource, if any."""
    return (resource.get("Metadata") or {}).get("aws:cdk:path")


def matching_ids(ids: Iterable[str], resources: Mapping[str, Any], key: str) -> list[str]:
    """Logical ids matching ``key``: exact id, else id prefix, else CDK path (exact, suffix, or segment)."""
    ids = list(ids)
    if key in ids:
        return [key]
    # the construct id the user gave: a top-level construct's logical id is it plus CDK's
    # 8-character hash; a prefix that also begins a sibling's id ("Cancelled", "CancelledBlind")
    # is ambiguous only if no id is exactly that
    exact = [i for i in ids if re.fullmatch(re.escape(key) + r"[0-9A-F]{8}", i)]
    if exact:
        return exact
    found = [i for i in ids if i.startswith(key)]
    if len(found) > 1:  # prefer those whose CDK path names ``key`` as a construct of its own
        named = [i for i in found if ("/" + key + "/") in (cdk_path(resources[i]) or "") + "/"]
        found = named or found
    if found:
        return found
    # paths with a leading "/": a full path (the stack's name first) matches as a suffix does
    paths = {i: f"/{path}" if (path := cdk_path(resources[i])) else "" for i in ids}
    key = key.strip("/")
    for test in (
        lambda p: p in ("/" + key, "/" + key + "/Resource"),
        lambda p: p.endswith("/" + key) or p.endswith("/" + key + "/Resource"),
        lambda p: ("/" + key + "/") in p + "/",
    ):
        found = [i for i, p in paths.items() if p and test(p)]
        if found:
            return found
    return []
