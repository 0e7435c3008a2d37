"""The LockClient's re-entrancy follows the flow of control - asyncio tasks, threads, generators -
each probe on both DynamoDB backends."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid

import pytest

from locked_workflow.constructs_lib.lock_client import (
    Lease,
    LockClient,
    LockHeldInThisThread,
    LockLost,
)
from lock_client_fakes import TABLE, item, polling_sleep

pytestmark = pytest.mark.usefixtures("offline_aws_env")


# --------------------------------------------------------------------------------------
# Re-entrancy follows the flow of control: asyncio tasks, threads, generators
# (each probe on both DynamoDB backends)
# --------------------------------------------------------------------------------------


@pytest.fixture(params=["moto", "dynamodb-local"])
def backend(request, clock):
    """``(make_client, ddb, key)`` on either DynamoDB backend; ``key`` is new for each test."""
    ddb = request.getfixturevalue("ddb" if request.param == "moto" else "dynamodb_local")

    def make(owner: str = "alice", **kwargs) -> LockClient:
        return LockClient(TABLE, owner=owner, dynamodb=ddb, clock=clock, **kwargs)

    return make, ddb, f"flow-{uuid.uuid4().hex[:8]}"


class Probe:
    """What critical sections see: holders inside at entry (a correct lock always sees 1), the
    fences, and a read-modify-write counter (equal to the writes when no update is lost)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self.inside = 0
        self.inside_at_entry: list[int] = []
        self.fences: list[int] = []
        self.counter = 0
        self.writes = 0

    def enter(self, lease: Lease) -> int:
        with self._mutex:
            self.inside += 1
            self.inside_at_entry.append(self.inside)
            self.fences.append(lease.fence)
        return self.counter  # the read

    def leave(self, read: int) -> None:
        self.counter = read + 1  # the write
        with self._mutex:
            self.writes += 1
            self.inside -= 1

    def assert_serialized(self, sections: int) -> None:
        assert self.inside_at_entry == [1] * sections, self.inside_at_entry
        assert self.fences == sorted(set(self.fences)) and len(self.fences) == sections, self.fences
        assert self.counter == self.writes == sections


def free_with_fence(ddb, key: str, fence: int) -> dict:
    return {"pk": {"S": f"#{key}"}, "fence": {"N": str(fence)}}


def test_two_asyncio_tasks_take_turns(backend):
    """Two tasks share a thread: the second's hold() must not pass into the first's block."""
    make, ddb, key = backend
    sleeps = []
    client = make(sleep=sleeps.append)
    probe, refused, holders = Probe(), [], []

    async def main():
        entered, tried = asyncio.Event(), asyncio.Event()

        async def first():
            with client.hold(key) as lease:
                holders.append(lease.owner)
                read = probe.enter(lease)
                entered.set()
                await tried.wait()  # the other task tries while this one is inside
                probe.leave(read)

        async def second():
            await entered.wait()
            while True:
                try:
                    with client.hold(key, wait=30) as lease:
                        tried.set()
                        read = probe.enter(lease)
                        await asyncio.sleep(0)
                        probe.leave(read)
                        return
                except LockHeldInThisThread as error:
                    refused.append(error)
                    tried.set()
                    await asyncio.sleep(0.01)  # a task waits by awaiting, then tries again

        await asyncio.wait_for(asyncio.gather(first(), second()), 60)

    asyncio.run(main())

    probe.assert_serialized(2)
    assert refused and sleeps == []  # refused at once: no blocking wait on the event loop's thread
    assert {error.holder for error in refused} == {holders[0]}
    assert item(ddb, f"#{key}") == free_with_fence(ddb, key, 2)


def test_two_threads_of_one_client_take_turns(backend):
    make, ddb, key = backend
    polled, sleep = polling_sleep()
    client = make(sleep=sleep)
    probe, entered, errors = Probe(), threading.Event(), []

    def first():
        with client.hold(key) as lease:
            read = probe.enter(lease)
            entered.set()
            assert polled.wait(30), "the other thread never waited"
            probe.leave(read)

    def second():
        assert entered.wait(30)
        with client.hold(key, wait=30, poll_interval=0.01, max_poll_interval=0.05) as lease:
            probe.leave(probe.enter(lease))

    def run(target):
        try:
            target()
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(t,)) for t in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert errors == [] and not any(t.is_alive() for t in threads)
    probe.assert_serialized(2)
    assert item(ddb, f"#{key}") == free_with_fence(ddb, key, 2)


def test_a_generator_suspended_inside_its_hold_keeps_the_lock_to_itself(backend):
    """The caller of a generator suspended in a ``with hold()`` block is not inside that block;
    the generator is, wherever it is resumed."""
    make, ddb, key = backend
    client = make()

    def steps():
        with client.hold(key) as outer:
            yield outer
            with client.hold(key) as inner:  # its own nested hold: re-entrant
                yield inner

    def resume_on_another_thread(generator):
        got = {}
        thread = threading.Thread(target=lambda: got.setdefault("value", next(generator, None)))
        thread.start()
        thread.join(30)
        assert not thread.is_alive()
        return got["value"]

    generator = steps()
    outer = next(generator)
    with pytest.raises(LockHeldInThisThread):
        with client.hold(key):
            pytest.fail("passed into the block of a suspended generator")

    inner = resume_on_another_thread(generator)  # resumed elsewhere

    assert inner == outer  # the generator's nested hold re-entered its own
    with pytest.raises(LockHeldInThisThread):  # (the thread that took the lock)
        with client.hold(key):
            pytest.fail("passed into the block of a generator suspended on another thread")
    assert item(ddb, f"#{key}")["owner"] == {"S": outer.owner}
    assert resume_on_another_thread(generator) is None  # it ends there: and releases
    assert item(ddb, f"#{key}") == free_with_fence(ddb, key, 1)


def test_a_task_created_inside_a_hold_does_not_pass_into_it(backend):
    make, ddb, key = backend
    client = make()
    probe, refused = Probe(), []

    async def child():
        try:
            with client.hold(key, wait=30) as lease:
                probe.leave(probe.enter(lease))
        except LockHeldInThisThread as error:
            refused.append(error)

    async def main():
        with client.hold(key) as lease:
            read = probe.enter(lease)
            await asyncio.wait_for(asyncio.create_task(child()), 60)  # concurrent with its parent
            probe.leave(read)
        return lease

    parent = asyncio.run(main())

    probe.assert_serialized(1)
    assert [error.holder for error in refused] == [parent.owner]
    assert item(ddb, f"#{key}") == free_with_fence(ddb, key, 1)


def test_a_thread_with_a_copy_of_the_context_waits_for_the_hold(backend):
    """``asyncio.to_thread`` runs in a copy of the caller's context: still another flow, so it
    waits for the parent's release (the parent must not await it inside the hold)."""
    make, ddb, key = backend
    polled, sleep = polling_sleep()
    client = make(sleep=sleep)
    probe = Probe()

    def child():
        with client.hold(key, wait=30, poll_interval=0.01, max_poll_interval=0.05) as lease:
            probe.leave(probe.enter(lease))

    async def main():
        with client.hold(key) as lease:
            read = probe.enter(lease)
            waiting = asyncio.create_task(asyncio.to_thread(child))
            assert await asyncio.to_thread(polled.wait, 30), "the child never waited"
            probe.leave(read)
        await asyncio.wait_for(waiting, 60)

    asyncio.run(main())

    probe.assert_serialized(2)
    assert item(ddb, f"#{key}") == free_with_fence(ddb, key, 2)


def test_wrapping_hold_in_a_context_manager_keeps_nesting_reentrant(backend):
    """``@contextmanager`` wrappers, ``ExitStack`` and the decorator form belong to the ``with``
    statement that uses them: nested, they re-enter."""
    make, ddb, key = backend
    client = make()

    @contextlib.contextmanager
    def customer_lock():
        with client.hold(key) as lease:
            yield lease

    @client.hold(key)
    def decorated():
        with client.hold(key) as lease:
            return lease

    with customer_lock() as outer:
        with customer_lock() as inner, contextlib.ExitStack() as stack:
            innermost = stack.enter_context(client.hold(key))
            with client.hold(key) as under_the_stack:
                nested = {inner, innermost, under_the_stack}
        held = item(ddb, f"#{key}")

    assert nested == {outer} and held["owner"] == {"S": outer.owner}
    assert item(ddb, f"#{key}") == free_with_fence(ddb, key, 1)
    assert decorated().fence == 2 and item(ddb, f"#{key}") == free_with_fence(ddb, key, 2)


def test_a_nested_block_that_outlives_its_enclosing_hold_raises_lock_lost(backend):
    make, ddb, key = backend
    client = make()

    def nested():
        with client.hold(key) as lease:  # re-enters the caller's block
            yield lease

    with client.hold(key) as outer:
        generator = nested()
        assert next(generator) == outer
    assert item(ddb, f"#{key}") == free_with_fence(ddb, key, 1)  # the enclosing block released

    with pytest.raises(LockLost, match="ran partly without the lock"):
        next(generator)  # the nested block ends now: it was not covered to its end
    with client.hold(key) as later:  # and nothing of it is left behind
        assert later.fence == 2


def test_generators_interleaved_inside_one_hold_do_not_share_it(backend):
    """Two generators that the block runs side by side are beside each other, not nested."""
    make, ddb, key = backend
    client = make()

    def section():
        with client.hold(key) as lease:
            yield lease

    with client.hold(key) as outer:
        first = section()
        assert next(first) == outer  # nested in the block: re-entrant
        second = section()
        with pytest.raises(LockHeldInThisThread):
            next(second)  # the first is suspended inside its nested block
        assert next(first, None) is None  # the first leaves its block
        third = section()
        assert next(third) == outer  # nothing beside any more
        third.close()
        assert item(ddb, f"#{key}")["owner"] == {"S": outer.owner}
    assert item(ddb, f"#{key}") == free_with_fence(ddb, key, 1)

