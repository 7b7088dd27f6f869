"""The read gate: a broadcast wakes the readers paused for alarms, the store or the mirror; a
saturated queue's release wakes only the readers that queue alone held."""

from __future__ import annotations

import trio
import trio.testing

from headrace.server.net.gate import Gate


async def test_a_release_wakes_the_readers_of_that_queue_only_and_a_broadcast_the_others():
    gate = Gate()
    woke: list[str] = []

    async def reader(name: str, held_by: object | None) -> None:
        await gate.wait_changed(held_by)
        woke.append(name)

    q1, q2 = object(), object()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader, "held by q1", q1)
        nursery.start_soon(reader, "held by q1 too", q1)
        nursery.start_soon(reader, "held by q2", q2)
        nursery.start_soon(reader, "paused otherwise", None)
        await trio.testing.wait_all_tasks_blocked()
        gate.notify()  # alarms, the store: not a saturated queue's business
        await trio.testing.wait_all_tasks_blocked()
        assert woke == ["paused otherwise"]
        gate.released(q1)
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(woke) == ["held by q1", "held by q1 too", "paused otherwise"]
        gate.released(q1)  # nobody waits on it any more: nothing happens
        gate.released(q2)
        await trio.testing.wait_all_tasks_blocked()
    assert sorted(woke) == ["held by q1", "held by q1 too", "held by q2", "paused otherwise"]


async def test_a_reader_that_waits_after_a_release_waits_for_the_next_one(autojump_clock):
    gate = Gate()
    q = object()
    gate.released(q)  # released before anyone waited: not remembered
    with trio.move_on_after(1) as scope:
        await gate.wait_changed(q)
    assert scope.cancelled_caught
