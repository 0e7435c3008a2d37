"""The template resolver: intrinsic functions, dependency order, physical ids (pure)."""

from __future__ import annotations

import pytest

from locked_workflow.testing.resolver import (
    NO_VALUE,
    PhysicalResource,
    ResolveError,
    Resolver,
    default_physical_resource,
    deployment_order,
    matching_ids,
)

TEMPLATE = {
    "Parameters": {"Stage": {"Type": "String", "Default": "dev"}, "BootstrapVersion": {"Type": "String"}},
    "Conditions": {
        "IsProd": {"Fn::Equals": [{"Ref": "Stage"}, "prod"]},
        "NotProd": {"Fn::Not": [{"Condition": "IsProd"}]},
    },
    "Mappings": {"Sizes": {"dev": {"Memory": 128}}},
    "Resources": {
        "Table": {"Type": "AWS::DynamoDB::Table", "Properties": {}},
        "Role": {"Type": "AWS::IAM::Role", "Properties": {}},
        "Machine": {
            "Type": "AWS::StepFunctions::StateMachine",
            "Properties": {"RoleArn": {"Fn::GetAtt": ["Role", "Arn"]}, "DefinitionString": {"Ref": "Table"}},
            "DependsOn": ["Policy"],
        },
        "Policy": {"Type": "AWS::IAM::Policy", "Properties": {"Roles": [{"Ref": "Role"}]}},
        "Rule": {
            "Type": "AWS::Events::Rule",
            "Properties": {"Targets": [{"Arn": {"Fn::Sub": "${Machine.Arn}"}}]},
        },
    },
}


@pytest.fixture
def resolver() -> Resolver:
    physical = {
        "Table": PhysicalResource("locks", {"Arn": "arn:aws:dynamodb:eu-west-1:111122223333:table/locks", "StreamArn": "s"}),
        "Role": PhysicalResource("role-name", {"Arn": "arn:aws:iam::111122223333:role/role-name"}),
    }
    return Resolver(TEMPLATE, region="eu-west-1", account_id="111122223333", stack_name="App", physical=physical)


def test_ref_get_att_and_pseudo_parameters(resolver):
    assert resolver.resolve({"Ref": "Table"}) == "locks"
    assert resolver.resolve({"Fn::GetAtt": ["Table", "Arn"]}).endswith(":table/locks")
    assert resolver.resolve({"Fn::GetAtt": "Table.StreamArn"}) == "s"
    assert resolver.resolve({"Ref": "Stage"}) == "dev"
    assert resolver.resolve(
        [{"Ref": "AWS::Region"}, {"Ref": "AWS::AccountId"}, {"Ref": "AWS::Partition"}, {"Ref": "AWS::URLSuffix"}]
    ) == ["eu-west-1", "111122223333", "aws", "amazonaws.com"]


def test_join_select_split(resolver):
    joined = {"Fn::Join": ["", ['{"T":"', {"Ref": "Table"}, '","R":"', {"Fn::GetAtt": ["Role", "Arn"]}, '"}']]}
    assert resolver.resolve(joined) == '{"T":"locks","R":"arn:aws:iam::111122223333:role/role-name"}'
    assert resolver.resolve({"Fn::Select": [1, {"Fn::Split": ["/", {"Fn::GetAtt": ["Table", "Arn"]}]}]}) == "locks"


def test_sub_both_forms(resolver):
    assert resolver.resolve({"Fn::Sub": "arn:${AWS::Partition}:x:${AWS::Region}:${Table}/${Role.Arn}/${!Literal}"}) == (
        "arn:aws:x:eu-west-1:locks/arn:aws:iam::111122223333:role/role-name/${Literal}"
    )
    assert resolver.resolve({"Fn::Sub": ["${Name}-${Table}", {"Name": {"Fn::Join": ["-", ["a", "b"]]}}]}) == "a-b-locks"


def test_conditions_if_and_no_value(resolver):
    value = {
        "Memory": {"Fn::If": ["IsProd", 1024, {"Fn::FindInMap": ["Sizes", {"Ref": "Stage"}, "Memory"]}]},
        "Extra": {"Fn::If": ["NotProd", {"Ref": "AWS::NoValue"}, "x"]},
        "List": ["a", {"Ref": "AWS::NoValue"}],
    }
    assert resolver.resolve(value) == {"Memory": 128, "List": ["a"]}
    assert resolver.resolve({"Fn::If": ["IsProd", "p", "np"]}) == "np"
    assert resolver.resolve({"Ref": "AWS::NoValue"}) is NO_VALUE


def test_unknown_references_raise(resolver):
    with pytest.raises(ResolveError, match="Nope"):
        resolver.resolve({"Ref": "Nope"})
    with pytest.raises(ResolveError, match="unknown attribute"):
        resolver.resolve({"Fn::GetAtt": ["Table", "Bogus"]})
    with pytest.raises(ResolveError, match="ImportValue"):
        resolver.resolve({"Fn::ImportValue": "shared"})


def test_deployment_order_follows_refs_get_atts_subs_and_depends_on():
    order = deployment_order(TEMPLATE)
    assert order.index("Role") < order.index("Policy") < order.index("Machine") < order.index("Rule")
    assert order.index("Table") < order.index("Machine")


def test_circular_dependencies_are_named():
    cyclic = {"Resources": {"A": {"Type": "T", "DependsOn": "B"}, "B": {"Type": "T", "Properties": {"X": {"Ref": "A"}}}}}
    with pytest.raises(ResolveError, match="circular"):
        deployment_order(cyclic)


def test_physical_ids_follow_each_types_ref_semantics():
    kwargs = {"stack_name": "App", "region": "eu-west-1", "account_id": "111122223333"}
    machine = default_physical_resource("AWS::StepFunctions::StateMachine", "Machine", "m", **kwargs)
    assert machine.ref == machine.attributes["Arn"] == "arn:aws:states:eu-west-1:111122223333:stateMachine:m"
    queue = default_physical_resource("AWS::SQS::Queue", "Q", None, **kwargs)
    assert queue.ref.startswith("https://sqs.eu-west-1.amazonaws.com/111122223333/App-Q-")
    generated = default_physical_resource("AWS::Lambda::Function", "Fn" * 50, None, **kwargs)
    assert len(generated.ref) <= 64 and generated.ref == default_physical_resource(
        "AWS::Lambda::Function", "Fn" * 50, None, **kwargs
    ).ref


def test_matching_ids_by_id_prefix_and_cdk_path():
    resources = {
        "LockedWorkflowStateMachine1A2B": {"Metadata": {"aws:cdk:path": "App/Locked/StateMachine/Resource"}},
        "OtherMachineC3D4": {"Metadata": {"aws:cdk:path": "App/Other/StateMachine/Resource"}},
    }
    ids = list(resources)
    assert matching_ids(ids, resources, "OtherMachineC3D4") == ["OtherMachineC3D4"]
    assert matching_ids(ids, resources, "LockedWorkflow") == ["LockedWorkflowStateMachine1A2B"]
    assert matching_ids(ids, resources, "App/Other/StateMachine/Resource") == ["OtherMachineC3D4"]
    assert matching_ids(ids, resources, "Other/StateMachine") == ["OtherMachineC3D4"]
    assert matching_ids(ids, resources, "App/Other/StateMachine") == ["OtherMachineC3D4"]  # the full path
    assert matching_ids(ids, resources, "App/Other") == ["OtherMachineC3D4"]
    assert matching_ids(ids, resources, "Locked") == ["LockedWorkflowStateMachine1A2B"]
    assert matching_ids(ids, resources, "Missing") == []


def test_the_construct_id_given_is_not_ambiguous_with_a_longer_sibling():
    resources = {
        "Cancelled748A6061": {"Metadata": {"aws:cdk:path": "S/Cancelled/Resource"}},
        "CancelledBlindBF316030": {"Metadata": {"aws:cdk:path": "S/CancelledBlind/Resource"}},
        "ApplyStateMachine1A2B3C4D": {"Metadata": {"aws:cdk:path": "S/Apply/StateMachine/Resource"}},
        "ApplyerMachine5E6F7A8B": {"Metadata": {"aws:cdk:path": "S/Applyer/Resource"}},
    }
    assert matching_ids(resources, resources, "Cancelled") == ["Cancelled748A6061"]
    assert matching_ids(resources, resources, "CancelledBlind") == ["CancelledBlindBF316030"]
    # a prefix of two ids: the one whose path has the construct id as a segment
    assert matching_ids(resources, resources, "Apply") == ["ApplyStateMachine1A2B3C4D"]
