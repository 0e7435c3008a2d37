"""A real CDK stack, synthesized with ``synth.synth_app`` and run through the ``local_cloud`` fixture."""

from __future__ import annotations

import pytest

from locked_workflow.testing.synth import read_cdk_out, synth_app

HANDLER = '''
from aws_lambda_powertools import Logger

logger = Logger()


@logger.inject_lambda_context
def handler(event, context):
    logger.info("greeting", extra={"who": event["name"]})
    return {"greeting": "hello " + event["name"], "function": context.function_name}
'''


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    import aws_cdk as cdk
    from aws_cdk import aws_dynamodb as dynamodb
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk import aws_stepfunctions as sfn
    from aws_cdk import aws_stepfunctions_tasks as tasks

    from locked_workflow.constructs_lib.monitoring_function import powertools_layer

    code = tmp_path_factory.mktemp("greeter")
    (code / "index.py").write_text(HANDLER)

    def build(app):
        stack = cdk.Stack(app, "Greeter")
        table = dynamodb.Table(
            stack,
            "Greetings",
            partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
        )
        function = lambda_.Function(
            stack,
            "Greet",
            runtime=lambda_.Runtime.PYTHON_3_12,
            handler="index.handler",
            code=lambda_.Code.from_asset(str(code)),
            environment={"POWERTOOLS_SERVICE_NAME": "greeter"},
            layers=[powertools_layer(stack)],  # the handler imports Powertools: as on AWS, a layer ships it
        )
        greet = tasks.LambdaInvoke.jsonata(
            stack, "Say", lambda_function=function, payload=sfn.TaskInput.from_object({"name": "{% $states.input.name %}"}),
            outputs="{% $states.result.Payload %}",
        )
        store = tasks.DynamoPutItem.jsonata(
            stack,
            "Store",
            table=table,
            item={"pk": tasks.DynamoAttributeValue.from_string("{% $states.input.greeting %}")},
            outputs="{% $states.input %}",
        )
        sfn.StateMachine(
            stack,
            "Flow",
            definition_body=sfn.DefinitionBody.from_chainable(greet.next(store)),
            query_language=sfn.QueryLanguage.JSONATA,
        )
        return stack

    return synth_app(build, outdir=tmp_path_factory.mktemp("cdk.out"))


def test_synthesized_stack_runs_locally(local_cloud, synthesized):
    app = local_cloud.deploy(synthesized.template, assets_dir=synthesized.assets_dir, stack_name=synthesized.stack_name)
    assert {t for _, t in app.skipped} >= {"AWS::IAM::Role", "AWS::IAM::Policy"}
    assert not app.warnings
    result = local_cloud.wait_for(local_cloud.start_execution(app.state_machine_arn("Flow"), {"name": "ada"}))
    assert result.status == "SUCCEEDED", result.cause
    assert result.output == {"greeting": "hello ada", "function": app.function_name("Greet")}
    stored = local_cloud.dynamodb.scan(TableName=app.table_name("Greetings"))["Items"]
    assert stored == [{"pk": {"S": "hello ada"}}]


def test_read_cdk_out_finds_the_same_stack(synthesized):
    again = read_cdk_out(synthesized.assets_dir, synthesized.stack_name)
    assert again.template == synthesized.template
