"""Rows the matrix's cells do not reach, each with why: rows whose situation a witness run found
not to make the row's call (:data:`NOT_REACHED`: their cells run and end ``n/r``), and rows no
participant of the matrix's stack can reach (:data:`UNREACHABLE`: their cells are not run)."""

from __future__ import annotations

from tools.matrix.situations import SHARED_HOLD

#: Rows whose situation a witness run (``--reach``: the situation without a fault, the row's
#: calls only counted) found not to make the row's call, each with why: their cells end ``n/r``
#: in every column (moto, 2026-11-28: the fair rows; docs/safety.md says which were run);
#: ``tests/tools/test_fault_matrix_rows.py`` keeps this list from growing unnoticed.
_SUPERSEDED_AHEAD = ("a helper (a waiter whose look finds the lock free or its holder ended while a ticket ahead "
                     "of it still has a row) on this key: keep_newest(1) lets each newer arrival take the row of the "
                     "one ahead (TakeSuperseded), so a look finds only superseded tickets ahead and jumps past them "
                     "(Lock.Help.Jump); the fair lock's placements need ticket 1 still parked ahead of ticket 2. "
                     "Would need the newcomer's take of that row to fail through its Retry (faults-by:2 on "
                     "Lock.TakeSuperseded): not tried yet")
NOT_REACHED: dict[str, dict[str, str]] = {
    'fair': {
        'Lock.Help.Unmark': "the helper marks ticket 1's row again only while the release's mark is younger than a "
                            "park timeout, and the helper looks when its own park times out: the gates order the "
                            "waiter's take between the helper's mark and read, but not that the mark is still young",
        'Lock.ReleaseAfterError.Nudge': "a release's grant refused by another's handoff: only when the releaser's "
                                        "hold was taken over during its handoff (its lease ran out)",
        'Lock.Release.Nudge': "as Lock.ReleaseAfterError.Nudge",
    },
    # (witness run of every coalescing row, moto, 2026-11-28: 46 of 82 reached, before the rows
    # placed since - the release's unmark and second wake-ups, Leave, ClaimOnLeave, the release
    # after an error's Release, Grant, Recheck - were added)
    'coalesce': {
        **{f"Lock.Help.{state}": _SUPERSEDED_AHEAD
           for state in ("Take", "TakeNext", "Skip", "Mark", "Served", "Unmark", "Revoke", "WakeAgain", "Retake",
                         "Confirmed", "RetakeEarly", "WakeAgainEarly", "DescribeGrantee", "Wake", "Grant", "Recheck")},
        'Lock.Requeue': "a waiter whose ticket the helper skipped requeues (the fair lock's placement): as the "
                        "helper's rows, " + _SUPERSEDED_AHEAD,
        'Lock.Claim': "a grantee whose park timed out claims its grant (the fair lock's placement: the helper's grant):"
                      " as the helper's rows",
        'Lock.Release.TakeAny': "a release that meets a ticket with no row while another parks behind it (the fair "
                                "lock's placement: the helper's skip of ticket 1): a newer waiter supersedes ticket 1",
        'Lock.Release.Skip': "a release skips the row of a waiter that ended: on this key the next arrival "
                             "supersedes that row first (its take), so the release meets no ended waiter's row",
        'Lock.ReleaseAfterError.Skip': "as Lock.Release.Skip",
        'Lock.Help.Nudge': "as the fair lock's Lock.Release.Nudge (a grant refused to a releaser that still holds)",
        'Lock.Release.Nudge': "a release's grant refused by another's handoff: only when the releaser's hold was "
                              "taken over during its handoff (its lease ran out)",
        'Lock.ReleaseAfterError.Nudge': "as Lock.Release.Nudge",
        'Lock.Help.WakeSuperseded': "the helper wakes a superseded waiter whose row it took before the newcomer did "
                                    "(the newcomer's take throttled): the helper's look needs a ticket ahead, "
                                    + _SUPERSEDED_AHEAD,
        'Lock.Release.WakeSuperseded': "the release takes a superseded waiter's row before the newcomer's take "
                                       "(throttled, then retried): a race of the release with the newcomer's "
                                       "retry; reached in the full run of 2026-11-27, not in the witness run",
        'Lock.ReleaseAfterError.WakeSuperseded': "as Lock.Release.WakeSuperseded",
        'Lock.WakeSuperseded': "the newcomer wakes the waiter it superseded only once that one parked: contend's "
                               "arrivals (within 0.6 s) race the older waiter's park; reached in the full run of "
                               "2026-11-27, not in the witness run",
        'Lock.DropSuperseded': "the superseded waiter's park refused (its row taken before it parked): the other "
                               "side of the race of Lock.WakeSuperseded",
    },
}

#: Why a row cannot be reached by any cell of this stack (:data:`UNREACHABLE`): its cells are
#: not run, and the table prints the reason in place of ``n/r``.
UNREACHABLE_WHY: dict[str, str] = {
    "mutex key": "a plain mutex waiter's sweep of a read/write key's shared hold: this machine's keys are in a "
                 "namespace no reader ever holds (the same states run in the mutex:Lock.* cells, on a read/write "
                 "key as RwMutex)",
    "legacy item": "frees `{owner: shared, readers: 0}` with no reader entry, the item the first protocol's "
                   "two-write leave left (L1); today's last leave frees the hold in the same write, so no "
                   "participant can write that item",
    "no coalescing section": "probes a holder's presence token: only a LockedSection registers one, and the "
                             "matrix's coalescing lock is a LockedWorkflow (presence off); the same states of "
                             "the fair lock run in the fair:Lock.* cells (FairSection)",
    "no coalescing poller": "grants a polling waiter (a LockClient, an EXPRESS run): the matrix's coalescing "
                            "participants park; the same state of the fair lock runs in the fair:Lock.* cells",
    "no record section": "probes a holder's presence token: only a LockedSection registers one, and the matrix's "
                         "record lock is a LockedWorkflow (presence off); tests/lock/test_lock_record.py::"
                         "test_a_record_held_by_a_cancelled_branch_is_free_after_its_grace covers it",
    "reader cap": "runs only when a reader's enqueue is refused at the reader cap (shared_protocol.MAX_READERS "
                  "readers on the key): a cell has three participants; tests/lock/test_shared_faults.py::"
                  "test_a_reader_past_the_reader_cap_is_refused_before_it_writes_and_a_writer_still_works covers it",
    "leave rounds": "runs only after shared_protocol.MAX_LEAVE_ROUNDS leaves in a row were refused (the readers' "
                    "count moving between each read and write): a cell has three participants; tests/lock/"
                    "test_shared_faults.py::test_a_readers_leave_refused_round_after_round_retires_its_entry_at_the_cap "
                    "covers it",
}
UNREACHABLE: dict[str, dict[str, str]] = {
    "mutex": {"Lock.FreeEmptyShared": "legacy item"},
    "nested": {f"{section}.{state}": "mutex key" for section in ("Outer", "Inner") for state in SHARED_HOLD},
    "multikey": {f"Lock.{state}": "mutex key" for state in SHARED_HOLD},
    "record": {"Lock.ProbeHolder": "no record section", "Lock.Abandoned": "no record section"},
    "shared": {"Lock.CountReaders": "reader cap", "Lock.ReleaseRetire": "leave rounds",
               "Lock.ReleaseAfterErrorRetire": "leave rounds"},
    "coalesce": {"Lock.ProbeHolder": "no coalescing section", "Lock.Abandoned": "no coalescing section",
                 **{f"Lock.{run}.GrantPoller": "no coalescing poller" for run in ("Release", "ReleaseAfterError", "Help")}},
}
