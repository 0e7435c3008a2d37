"""The one deployed stack a test process keeps from one test file to the next of its group.

A test file's deployed-stack fixture (``deployed.deployed_stack``) used to deploy its stack in a
fresh ``LocalCloud`` per module and backend: seconds to tens of seconds of CPU each. The files of
one subject (the pieces of what was one long file: ``file_groups.GROUPS``) share one
deployment per backend instead: the fixture asks :data:`KEPT` for it, which deploys it the first
time and hands the same one out while it is asked for the same thing. Only one ``LocalCloud`` can
be active in a process (moto is process-wide), so :data:`KEPT` holds one at most: asked for another
stack or backend it closes the one it holds first, and ``tests/conftest.py`` closes it when the
next test is in another group (and at the end of the session), so no cloud outlives its group.
The group's items run moto first, then DynamoDB Local (``file_groups.run_order``): each backend is
deployed once per group, and each cloud runs the tests the one long file ran in it.

No import of the runtime here: ``tests/conftest.py`` releases through it in every process.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any, Callable, Hashable


class KeptDeployment:
    """One deployed thing at a time, kept under its key until another is asked for or it is
    released.

    ``get(key, open)`` returns what ``open(exit_stack)`` returned for ``key`` (compared with
    ``==``), calling it only when the kept one is not ``key``'s: then the kept one is closed
    first (its exit stack unwound), and ``open``'s registered on a fresh exit stack.
    :attr:`opened` counts the calls of ``open`` (what a group's deploys cost)."""

    def __init__(self) -> None:
        self._key: Hashable | None = None
        self._value: Any = None
        self._exit: ExitStack | None = None
        self.opened = 0

    def get(self, key: Hashable, open: Callable[[ExitStack], Any]) -> Any:
        if self._exit is not None and self._key == key:
            return self._value
        self.release()
        exit_stack = ExitStack()
        try:
            value = open(exit_stack)
        except BaseException:
            exit_stack.close()
            raise
        self.opened += 1
        self._key, self._value, self._exit = key, value, exit_stack
        return value

    @property
    def key(self) -> Hashable | None:
        """The key of what is kept (None: nothing is)."""
        return self._key if self._exit is not None else None

    def release(self) -> None:
        """Close what is kept (nothing when nothing is)."""
        exit_stack, self._key, self._value, self._exit = self._exit, None, None, None
        if exit_stack is not None:
            exit_stack.close()


#: The process's kept deployment (``deployed.deployed_stack``'s fixtures, ``tests/conftest.py``).
KEPT = KeptDeployment()
