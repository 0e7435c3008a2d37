"""The invariants over a scenario's critical sections (pure; DESIGN.md section 4).

:func:`find_overlaps` (no two sections of one key overlap), :func:`fence_order_violations`
(fences strictly increase per key) and :func:`lost_updates` (every update the record shows).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Mapping

from tools.scenario_history import CriticalSection


def by_key(sections: Iterable[CriticalSection]) -> dict[str, list[CriticalSection]]:
    """Sections grouped by key, each group in start order."""
    groups: dict[str, list[CriticalSection]] = defaultdict(list)
    for section in sections:
        groups[section.key].append(section)
    return {k: sorted(v, key=lambda s: (s.start_ms, s.end_ms)) for k, v in sorted(groups.items())}


def find_overlaps(sections: Iterable[CriticalSection]) -> list[tuple[CriticalSection, CriticalSection]]:
    """Every pair of sections of one key whose intervals overlap (touching ends do not)."""
    pairs = []
    for group in by_key(sections).values():
        for i, first in enumerate(group):
            for second in group[i + 1 :]:
                if second.start_ms >= first.end_ms:
                    break  # sorted by start: no later section overlaps ``first`` either
                pairs.append((first, second))
    return pairs


def fence_order_violations(
    sections: Iterable[CriticalSection],
) -> list[tuple[CriticalSection, CriticalSection]]:
    """Consecutive sections of one key (in start order) whose fence did not strictly increase.

    Sections without a fence (no lock) are not ordered by fences and are skipped.
    """
    violations = []
    for group in by_key(sections).values():
        fenced = [s for s in group if s.fence is not None]
        for before, after in zip(fenced, fenced[1:]):
            if after.fence <= before.fence:  # type: ignore[operator]
                violations.append((before, after))
    return violations


def lost_updates(expected: Mapping[str, int], actual: Mapping[str, int]) -> dict[str, int]:
    """Per key: updates expected minus updates the record shows (0 = none lost)."""
    return {key: expected[key] - int(actual.get(key, 0)) for key in sorted(expected)}
