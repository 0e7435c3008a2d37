"""The code of the Lambda functions the constructs deploy, run on moto's DynamoDB (the root
conftest's ``offline_aws_env``)."""
