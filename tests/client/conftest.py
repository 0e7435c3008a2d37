"""The Python side of the lock: ``LockClient`` on moto's DynamoDB (and its layer in a user's
Lambda function), and the lock CLI on both DynamoDB backends (``deployed.backend_cloud``)."""
