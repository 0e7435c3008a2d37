"""The invariant checkers themselves: each must be able to fail."""

from lock_invariants import Section, fences_in_order, overlapping_pairs


def s(start, end, fence=None, key="k"):
    return Section("arn", key, start, end, fence)


def test_overlap_detects_intersecting_sections_and_passes_serial_ones():
    assert overlapping_pairs([s(0, 1), s(1, 2), s(2, 3)]) == []
    assert overlapping_pairs([s(0, 1.5), s(1, 2)]) == [(s(0, 1.5), s(1, 2))]


def test_fence_order_requires_strict_increase_in_start_order():
    assert fences_in_order([s(2, 3, 3), s(0, 1, 1), s(1, 2, 2)])
    assert not fences_in_order([s(0, 1, 2), s(1, 2, 1)])
    assert not fences_in_order([s(0, 1, 1), s(1, 2, 1)])
    assert not fences_in_order([s(0, 1, None)])
