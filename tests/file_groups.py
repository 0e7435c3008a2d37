"""Which test files run together, and in what order (``tests/conftest.py`` applies it).

A group is a set of test files that run as one unit on one worker (``make test``: ``--dist
loadgroup``, scheduled by :class:`FileGroupScheduling`): the pieces of what was one long file,
whose tests share its deployed stack - deployed once per backend for the whole group
(``kept_deployment``) instead of once per file. A file of no group is a group of its own.

Not xdist's own ``xdist_group`` marks: pytest-xdist 3.8 groups by a suffix it writes to
``item._nodeid``, which pytest 9.2 no longer reads (a node's id is ``item._id`` there), so marked
items were handed out one by one and a group's files ran on every worker, each deploying.
"""

from __future__ import annotations

from typing import Any, Sequence

#: The groups of several files, each named as its first file, its files in the order they run.
GROUPS = {
    "test_fair_lock.py": ("test_fair_lock.py", "test_fair_dead_participants.py", "test_fair_lost_responses.py"),
    "test_shared_lock.py": ("test_shared_lock.py", "test_shared_faults.py"),
    "test_shared_recovery.py": ("test_shared_recovery.py", "test_shared_janitor.py"),
    "test_shared_client_workflows.py": ("test_shared_client_workflows.py", "test_shared_client_faults.py",
                                        "test_shared_client_cancelled.py"),
    "test_lock_safety.py": ("test_lock_safety.py", "test_lock_safety_redrive.py", "test_lock_safety_cancelled.py"),
    "test_lock_recovery.py": ("test_lock_recovery.py", "test_lock_janitor.py"),
    "test_lock_record.py": ("test_lock_record.py", "test_lock_record_updates.py"),
    "test_monitoring.py": ("test_monitoring.py", "test_monitoring_metrics.py"),
}
_GROUP_OF = {name: (group, n) for group, names in GROUPS.items() for n, name in enumerate(names)}

#: The groups (a file of its own: its name) that take longest (module setups plus calls, from a
#: fresh-clone run's ``--durations=0``; the split files estimated from their tests), longest
#: first. ``make test`` runs ``--dist loadgroup --no-loadscope-reorder``: xdist hands out whole
#: groups in collection order as its workers free up, so these go first and no long group starts
#: last and runs alone while the other workers idle. (Without ``--no-loadscope-reorder``, xdist
#: 3.8 orders the groups by their number of tests instead, whatever the collection order.)
LONGEST_FIRST = (
    "test_shared_lock.py", "test_fair_lock.py", "test_fault_matrix.py", "test_section_outputs.py",
    "test_shared_recovery.py", "test_shared_client_workflows.py", "test_fair_redrive.py", "test_lock_safety.py",
    "test_lock_variants.py", "test_lock_record.py", "test_rate_limit.py", "test_fair_model.py",
    "test_monitoring.py", "test_fair_coalesce.py", "test_lock_recovery.py", "test_callbacks.py",
    "test_stress.py", "test_fair_clients.py", "test_lock_client.py",
)
_BACKEND_ORDER = {"moto": 1, "dynamodb-local": 2}  # (an item of no backend: 0, first)




def group_of(file_name: str) -> str:
    """The group of the test file ``file_name``: its group in :data:`GROUPS`, else itself."""
    return _GROUP_OF.get(file_name, (file_name, 0))[0]


def _backend(item: Any) -> str | None:
    params = getattr(item, "callspec", None)
    return next((v for v in params.params.values() if v in _BACKEND_ORDER), None) if params else None


def run_order(items: Sequence[Any]) -> list[Any]:
    """``items`` (pytest items) in the order they run: the groups in :data:`LONGEST_FIRST` order,
    then the others in collection order, each group whole; in a group of several files, its items
    of no backend, then its moto ones, then its DynamoDB Local ones (so the group deploys each
    backend once, one LocalCloud at a time), each file in the group's order. Stable: each file's
    items keep their order among those of its backend."""
    rank = {name: n for n, name in enumerate(LONGEST_FIRST)}
    first: dict[str, int] = {}
    for n, item in enumerate(items):
        first.setdefault(group_of(item.path.name), n)

    def order(item: Any) -> tuple:
        group = group_of(item.path.name)
        member = _GROUP_OF.get(item.path.name)
        within = (_BACKEND_ORDER.get(_backend(item), 0), member[1]) if member else (0, 0)
        return rank.get(group, len(rank)), first[group], *within

    return sorted(items, key=order)


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0].rsplit("/", 1)[-1]


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # (no pytest-xdist: no scheduler to make)
    LoadScopeScheduling = object


class FileGroupScheduling(LoadScopeScheduling):
    """xdist's scheduling by scope (whole work units, handed out in collection order with
    ``--no-loadscope-reorder``), a unit being a group of files (:func:`group_of`) rather than one
    file."""

    def _split_scope(self, nodeid: str) -> str:
        return group_of(_file_of(nodeid))
