"""Re-entrancy of :meth:`LockClient.hold() <locked_workflow.constructs_lib.lock_client.LockClient.hold>`
(see the lock client's module notes on nesting): an open ``with hold()`` block (:class:`Block`), the
frame that runs it (:func:`block_frame`), and how a client registers its open blocks, finds the one
a new ``hold()`` re-enters, and closes them (:class:`ReentrantHolds`).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import sys
import threading
from types import FrameType
from typing import Iterator

from locked_workflow.constructs_lib.client_lease import Lease, LockLost
from locked_workflow.state_machines.errors import ERROR_LOST

logger = logging.getLogger(__name__)


class Block:
    """One open ``with hold()`` block. ``frame`` runs the block (its ``with`` statement);
    ``taken`` is the block whose acquisition a re-entered block shares (None: it acquired);
    ``released`` (on an acquiring block) is set when that acquisition ends."""

    __slots__ = ("lease", "frame", "taken", "thread", "released")

    def __init__(self, lease: Lease, frame: FrameType, taken: "Block | None") -> None:
        self.lease = lease
        self.frame = frame
        self.taken = taken
        self.thread = threading.current_thread()
        self.released = False

    @property
    def acquisition(self) -> "Block":
        return self.taken or self


GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR


def in_contextlib(frame: FrameType) -> bool:
    return frame.f_globals is vars(contextlib)


def block_frame(frame: FrameType) -> FrameType:
    """The frame whose ``with`` statement runs a block, from a frame inside ``hold()``:
    contextlib's own frames are skipped, and so is a generator that contextlib drives - a
    ``@contextmanager`` (``hold()`` itself, or a user's wrapper), whose block is its caller's.
    A generator that something else drives (``next()``, ``for``) keeps the block its own."""
    while True:
        back = frame.f_back
        if back is None:
            return frame
        if in_contextlib(frame) or (frame.f_code.co_flags & GENERATOR_FLAGS and in_contextlib(back)):
            frame = back
            continue
        return frame


class ReentrantHolds:
    """The open ``hold()`` blocks of a :class:`LockClient` (a base of it): ``_blocks`` (the open
    blocks per stored key) and ``_blocks_mutex`` are set by the client; ``release`` is the
    client's."""

    _blocks: dict[str, list[Block]]
    _blocks_mutex: threading.Lock

    def _run_block(self, table_key: str, block: "Block") -> Iterator[Lease]:
        """Run one ``with hold()`` block: registered while open; an acquisition releases at
        its end, a re-entered block checks that its acquisition outlived it."""
        with self._blocks_mutex:
            self._blocks.setdefault(table_key, []).append(block)
        try:
            yield block.lease
        except BaseException as error:
            problem = self._close_block(table_key, block)
            if problem is not None:  # the block's error is the one that matters
                what = "releasing the lock also failed" if block.taken is None else "the lock was not held to the end"
                logger.warning("leaving the hold of %s: %s: %r", table_key, what, problem)
                if hasattr(error, "add_note"):  # Python >= 3.11
                    error.add_note(f"{what}: {problem!r}")
            raise
        problem = self._close_block(table_key, block)
        if problem is not None:
            raise problem

    def _close_block(self, table_key: str, block: "Block") -> Exception | None:
        """Unregister ``block`` and, if it acquired, release; what went wrong, if anything
        (:class:`LockLost`, or the release's own error)."""
        with self._blocks_mutex:
            blocks = self._blocks.get(table_key, [])
            blocks.remove(block)
            if not blocks:
                self._blocks.pop(table_key, None)
            outlived = block.taken is not None and block.taken.released
            if block.taken is None:
                block.released = True
        if block.taken is not None:
            if not outlived:
                return None
            return LockLost(
                f"{ERROR_LOST}: lock {table_key!r} (fence {block.lease.fence}) was released by the "
                f"block this nested hold() re-entered before the nested block ended (e.g. a generator "
                f"suspended inside it was resumed later): the nested block ran partly without the lock"
            )
        try:
            self.release(block.lease)
        except Exception as error:  # noqa: BLE001 - the caller decides: raise it, or note it
            return error
        return None

    def _enclosing(self, table_key: str, owner: str | None) -> tuple["Block | None", bool]:
        """The open block a new ``hold()`` here re-enters (or None), and whether another flow
        of this thread holds the key (then a wait could never end). Call with the mutex held.

        Re-entered: the innermost open block on the current call stack, unless a later block of
        this thread is open beside it (a suspended generator's: interleaved, not nested)."""
        thread = threading.current_thread()
        blocks = [b for b in self._blocks.get(table_key, []) if not b.acquisition.released]
        if not blocks:
            return None, False
        stack = set()
        frame: FrameType | None = sys._getframe()
        while frame is not None:
            stack.add(id(frame))  # frames on the stack are alive: their ids are unique
            frame = frame.f_back
        enclosing = None
        for index in range(len(blocks) - 1, -1, -1):
            if id(blocks[index].frame) in stack:
                beside = [b for b in blocks[index + 1:] if b.thread is thread]
                if not beside and owner in (None, blocks[index].lease.owner):
                    enclosing = blocks[index]
                break
        return enclosing, enclosing is None and any(b.thread is thread for b in blocks)
