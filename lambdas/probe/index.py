"""Probe of mutual exclusion: counts the holders inside the protected work at entry.

Each invocation adds 1 to ``inside`` on the probe item of its key (an atomic counter),
records what it read (``insideAtEntry``: 1 when it is alone, as a working lock guarantees),
works for ``workMs``, and takes 1 off again. ``violations`` counts entries that were not
alone, ``entries`` all of them; a fenced ``counter`` (``lastFence < :fence``) counts the
works whose write the fence accepted.
"""

from __future__ import annotations

import os
import time

import boto3
from aws_lambda_powertools import Logger

logger = Logger(service="lock-probe")
_dynamodb = None


def _client():
    global _dynamodb
    if _dynamodb is None:
        _dynamodb = boto3.client("dynamodb")
    return _dynamodb


def _add(table: str, key: str, expression: str, values: dict) -> dict:
    return _client().update_item(
        TableName=table, Key={"pk": {"S": key}}, UpdateExpression=expression,
        ExpressionAttributeValues=values, ReturnValues="UPDATED_NEW",
    )["Attributes"]


@logger.inject_lambda_context
def handler(event: dict, context: object) -> dict:
    table = os.environ["PROBE_TABLE"]
    key = str(event["key"])
    inside = int(_add(table, key, "ADD inside :one, entries :one", {":one": {"N": "1"}})["inside"]["N"])
    if inside != 1:
        _add(table, key, "ADD violations :one", {":one": {"N": "1"}})
        logger.warning("not alone in the protected work", extra={"key": key, "insideAtEntry": inside})
    try:
        time.sleep(int(event.get("workMs") or 0) / 1000)
        fence = event.get("fence")
        if fence is not None:
            try:
                _client().update_item(
                    TableName=table, Key={"pk": {"S": key}},
                    UpdateExpression="SET lastFence = :fence ADD fencedWrites :one",
                    ConditionExpression="attribute_not_exists(lastFence) OR lastFence < :fence",
                    ExpressionAttributeValues={":fence": {"N": str(fence)}, ":one": {"N": "1"}},
                )
            except _client().exceptions.ConditionalCheckFailedException:
                logger.info("fenced write rejected", extra={"key": key, "fence": fence})
    finally:
        _add(table, key, "ADD inside :minus", {":minus": {"N": "-1"}})
    if event.get("fail"):
        raise RuntimeError(f"probe asked to fail: {event['fail']}")
    return {"key": key, "insideAtEntry": inside, "fence": event.get("fence")}
