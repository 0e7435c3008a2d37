"""``gate:``: two participants' calls placed in the order a rare path needs rather than timed
(:class:`Gate`; :class:`tools.matrix.cells.Cell` holds and opens them from the fault registry's
observers)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

#: The longest a gated call waits for its gate (s): past it, the call goes on (the cell may
#: then not reach its row: a witness run says so).
GATE_S = 60


def index_of(execution_arn: str) -> int:
    """A participant's index, from its execution's name ``<cell>-<index>-<uuid>``."""
    return int(execution_arn.rpartition(":")[2].split("-")[-2])


@dataclass
class Gate:
    """``gate:[<i>/]<state>[*][>]@[<j>/]<other>[~[<k>/]<arming>]``: the first call of ``<state>``
    by participant ``<i>`` (default: by any of the cell's executions; ``*``: every call, until the
    gate opens; ``>``: once it applied, its response held - a slow response) waits until a call of ``<other>`` by participant ``<j>`` (default: by another
    execution) has returned; with ``~``, both only once a call of ``<arming>`` (by ``<k>``)
    started. Two participants' calls in the order a rare path needs (a waiter that parks
    only once the releaser marked its row, a releaser that reads the lock only once that waiter
    took it), as a slow scheduler may order them (AWS bounds no state's start), at most
    :data:`GATE_S`, and no longer than the participant it waits for runs (stopped, ended:
    :meth:`tools.matrix.cells.Cell.ended`)."""

    state: str
    after: str
    index: int | None = None
    after_index: int | None = None
    every: bool = False
    after_call: bool = False
    arming: str = ""
    arming_index: int | None = None
    held_arn: str = ""
    used: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    guard: threading.Lock = field(default_factory=threading.Lock)

    @staticmethod
    def _who(text: str) -> tuple[int | None, str]:
        index, _, state = text.rpartition("/")
        return (int(index) if index else None), state

    @classmethod
    def parse(cls, text: str) -> "Gate":
        where, _, rest = text.partition("@")
        after, _, arming = rest.partition("~")
        index, state = cls._who(where)
        after_index, after = cls._who(after)
        arming_index, arming = cls._who(arming) if arming else (None, "")
        if not state or not after:
            raise ValueError(f"`gate` must be [<i>/]<state>[*][>]@[<j>/]<other>[~[<k>/]<arming>], got: {text}")
        return cls(state.rstrip("*>"), after, index, after_index, state.rstrip(">").endswith("*"), state.endswith(">"),
                   arming, arming_index)

    def arm(self, state: str, index: int) -> None:
        """A call of ``state`` by participant ``index`` started: arm the gate if it waits for it."""
        if self.arming and state == self.arming and self.arming_index in (None, index):
            self.arming = ""

    def takes(self, state: str, index: int) -> bool:
        """Whether this call (``state`` by participant ``index``) is held."""
        with self.guard:
            if self.done.is_set() or self.arming or (self.used and not self.every) or state != self.state \
                    or (self.index is not None and index != self.index):
                return False
            self.used = True
            return True

    def opens(self, state: str, index: int, arn: str) -> bool:
        """Whether the call of ``state`` by participant ``index`` (execution ``arn``) that just
        returned opens the gate."""
        return not self.arming and state == self.after and (index == self.after_index if self.after_index is not None
                                        else arn != self.held_arn)

