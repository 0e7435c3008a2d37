"""What a fair bench load costs: DynamoDB request units as DynamoDB bills them
(:class:`CapacityMeter`), at on-demand prices.
"""

from __future__ import annotations

from typing import Any

from locked_workflow.state_machines.errors import CONDITIONAL_CHECK_FAILED_CODE
from tools.scenario import DOLLARS_PER_TRANSITION

#: On-demand prices (us-east-1): Step Functions STANDARD, $0.025 per 1,000 state transitions
#: (https://aws.amazon.com/step-functions/pricing/); DynamoDB on-demand, $0.625 per million
#: write and $0.125 per million read request units (https://aws.amazon.com/dynamodb/pricing/on-demand/).
PRICE_PER_TRANSITION = DOLLARS_PER_TRANSITION  # (one spelling: ``tools/scenario_metrics.py``)
PRICE_PER_WRU = 0.625 / 1_000_000
PRICE_PER_RRU = 0.125 / 1_000_000

_WRITES = {"PutItem", "UpdateItem", "DeleteItem"}
_READS = {"GetItem"}


class CapacityMeter:
    """Request units of every DynamoDB item call, by the item's key, as DynamoDB bills them:
    each call asks for its ``ConsumedCapacity`` (an extra field of the response: the state
    machines read nothing else differently). A refused condition counts 1 write unit."""

    def __init__(self) -> None:
        import threading

        self.units: dict[str, list[float]] = {}  # key -> [write units, read units]
        self._lock = threading.Lock()

    def __enter__(self) -> "CapacityMeter":
        from unittest import mock

        from botocore.client import BaseClient
        from botocore.exceptions import ClientError

        original = BaseClient._make_api_call
        meter = self

        def metered(client: Any, operation: str, params: dict) -> Any:
            if client.meta.service_model.service_name != "dynamodb" or operation not in _WRITES | _READS:
                return original(client, operation, params)
            params = {**params, "ReturnConsumedCapacity": "TOTAL"}
            key = str(next(iter((params.get("Key") or params.get("Item") or {}).values()), {}).get("S"))
            write = operation in _WRITES
            try:
                response = original(client, operation, params)
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") == CONDITIONAL_CHECK_FAILED_CODE:
                    meter._add(key, 1.0, write)
                raise
            meter._add(key, float((response.get("ConsumedCapacity") or {}).get("CapacityUnits", 0)), write)
            return response

        self._patch = mock.patch.object(BaseClient, "_make_api_call", metered)
        self._patch.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._patch.stop()

    def _add(self, key: str, units: float, write: bool) -> None:
        with self._lock:
            slot = self.units.setdefault(key, [0.0, 0.0])
            slot[0 if write else 1] += units

    def of(self, key_part: str) -> tuple[float, float]:
        """(write, read) units of every item whose key contains ``key_part`` (a lock and its rows)."""
        with self._lock:
            found = [v for k, v in self.units.items() if key_part in k]
        return sum(v[0] for v in found), sum(v[1] for v in found)
