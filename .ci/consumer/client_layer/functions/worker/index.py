import os

from locked_workflow import LockClient

client = LockClient(os.environ["LOCK_TABLE"], namespace="job")


def handler(event, context):
    with client.hold(event["key"], lease=30) as lease:
        return {"fence": lease.fence}
