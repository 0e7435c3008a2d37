from aws_cdk import aws_stepfunctions as sfn


def notify(scope):
    return sfn.Pass.jsonata(scope, "Notify", outputs={"notified": True})
