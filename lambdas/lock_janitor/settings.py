"""The janitor function's settings and their environment variables, in one place: the
``LockJanitor`` construct writes them at synth (:meth:`JanitorSettings.environment`), the
function reads them (:meth:`JanitorSettings.from_environment`). No dependency beyond the
protocol module, so the construct imports this without Powertools installed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from locked_workflow.state_machines import lock_protocol as protocol

#: Execution statuses after which an execution may still own a lock: the events it handles.
ENDED_WITHOUT_RELEASE = ("ABORTED", "TIMED_OUT", "FAILED")

ENV_TABLE = "LOCK_TABLE"
ENV_KEY_ATTRIBUTE = "LOCK_KEY_ATTRIBUTE"
ENV_ATTRIBUTE_PREFIX = "LOCK_ATTRIBUTE_PREFIX"
ENV_FAIR = "FAIR_LOCK"
ENV_METRICS_NAMESPACE = "METRICS_NAMESPACE_PREFIX"
#: Metrics go to ``<prefix>/<state machine name>``: ``LockMonitoring``'s default namespace.
DEFAULT_METRICS_NAMESPACE = "LockedWorkflow"


@dataclass(frozen=True)
class JanitorSettings:
    """Which locks: the table, where the lock attributes live on its items, fair or not; and
    the prefix of the metrics' namespace."""

    table_name: str
    item: protocol.LockItem = protocol.LOCK_TABLE_ITEM
    fair: bool = False
    metrics_namespace: str = DEFAULT_METRICS_NAMESPACE

    def environment(self) -> dict[str, str]:
        return {
            ENV_TABLE: self.table_name,
            ENV_KEY_ATTRIBUTE: self.item.key_attribute,
            ENV_ATTRIBUTE_PREFIX: self.item.prefix,
            ENV_FAIR: "true" if self.fair else "false",
            ENV_METRICS_NAMESPACE: self.metrics_namespace,
        }

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> "JanitorSettings":
        table = environ.get(ENV_TABLE)
        if not table:
            raise RuntimeError(f"the {ENV_TABLE} environment variable is not set")
        return cls(
            table_name=table,
            item=protocol.LockItem(
                key_attribute=environ.get(ENV_KEY_ATTRIBUTE) or protocol.KEY_ATTRIBUTE,
                prefix=environ.get(ENV_ATTRIBUTE_PREFIX, ""),
            ),
            fair=environ.get(ENV_FAIR, "false") == "true",
            metrics_namespace=environ.get(ENV_METRICS_NAMESPACE) or DEFAULT_METRICS_NAMESPACE,
        )

    def metrics_namespace_of(self, state_machine_name: str) -> str:
        """The namespace of a watched state machine's metrics (``LockMonitoring.namespace``)."""
        return f"{self.metrics_namespace}/{state_machine_name}"
