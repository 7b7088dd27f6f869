"""The deadline heap the clock sleeps on (``server/broker/deadlines.py``) and the clock task itself
(``server/net/clock.py``) under trio's mock clock (``autojump_clock``: MockClock(autojump_threshold=0),
virtual time jumps to the next deadline as soon as every task sleeps, so nothing really sleeps).

The clock is driven here by a real ``Deadlines`` heap: ``tick`` takes the due keys, and the test
arms keys the way the delivery owner does."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from headrace.server.broker.deadlines import Deadlines
from headrace.server.net.clock import MIN_SLEEP, WAKE_COALESCE, Clock

# ------------------------------------------------------------------ the heap


def _unwatched() -> None:
    """The clock port of a heap no clock sleeps on (these tests read ``earliest`` themselves)."""


def test_earliest_is_the_nearest_armed_deadline_and_a_rearm_replaces_the_old_one():
    d = Deadlines(_unwatched)
    assert d.earliest() is None and len(d) == 0
    d.arm(("/", "a"), 30.0)
    d.arm(("/", "b"), 10.0)
    d.arm(("/", None), 20.0)  # the vhost's delayed messages
    assert d.earliest() == 10.0 and len(d) == 3
    d.arm(("/", "b"), 40.0)  # b moved later: its old entry is stale, not due any more
    assert d.earliest() == 20.0 and len(d) == 3
    assert d.pop_due(25.0) == [("/", None)]
    d.arm(("/", "a"), None)  # nothing to do for a
    assert d.earliest() == 40.0 and len(d) == 1


def test_on_earlier_fires_only_for_a_deadline_before_the_earliest():
    calls: list[float | None] = []
    d = Deadlines(lambda: calls.append(d.earliest()))
    d.arm(("/", "a"), 10.0)  # first one: earlier than nothing
    d.arm(("/", "b"), 20.0)  # later: the sleeping clock need not know
    d.arm(("/", "a"), 10.0)  # unchanged: nothing
    d.arm(("/", "c"), 5.0)  # nearer: wake the clock
    d.arm(("/", "c"), 10.0)  # later again: nothing
    assert calls == [10.0, 5.0]


def test_pop_due_returns_each_due_key_once_in_time_order_and_disarms_it():
    d = Deadlines(_unwatched)
    d.arm(("/", "late"), 3.0)
    d.arm(("v", "early"), 1.0)
    d.arm(("/", "mid"), 2.0)
    d.arm(("/", "mid"), 2.5)  # re-armed: one key, one pop
    assert d.pop_due(0.5) == []
    assert d.pop_due(2.5) == [("v", "early"), ("/", "mid")]  # at ``now`` exactly is due
    assert d.pop_due(2.5) == []
    assert d.earliest() == 3.0 and len(d) == 1
    d.disarm(("/", "late"))
    assert d.pop_due(100.0) == [] and d.earliest() is None


def test_rearming_one_key_many_times_keeps_the_heap_bounded():
    d = Deadlines(_unwatched)
    for i in range(10_000):
        d.arm(("/", "q"), 1000.0 + i)
    assert len(d) == 1 and d.earliest() == 10_999.0
    assert len(d._heap) <= 2 * len(d) + 65  # stale entries are dropped, not kept forever
    assert d.pop_due(20_000.0) == [("/", "q")]


# ------------------------------------------------------------------ the clock task


class Ticks:
    """The clock's two callbacks over a real heap: records when each tick ran and what was due."""

    def __init__(self, deadlines: Deadlines) -> None:
        self.deadlines = deadlines
        self.at: list[float] = []
        self.due: list[tuple[float, list[tuple[str, str | None]]]] = []

    def tick(self, now: float) -> None:
        self.at.append(now)
        due = self.deadlines.pop_due(now)
        if due:
            self.due.append((now, due))

    def next_deadline(self, now: float) -> float | None:
        return self.deadlines.earliest()


async def start(nursery: trio.Nursery, clock: Clock, deadlines: Deadlines) -> tuple[Clock, Ticks]:
    ticks = Ticks(deadlines)
    nursery.start_soon(clock.run, ticks.tick, ticks.next_deadline)
    await trio.testing.wait_all_tasks_blocked()
    return clock, ticks


async def test_the_clock_sleeps_until_the_earliest_deadline_and_not_longer(autojump_clock):
    clock = Clock(wall=trio.current_time)
    deadlines = Deadlines(clock.wake)
    t0 = trio.current_time()
    deadlines.arm(("/", "b"), t0 + 5.0)
    deadlines.arm(("/", "a"), t0 + 2.0)
    async with trio.open_nursery() as nursery:
        clock, ticks = await start(nursery, clock, deadlines)
        await trio.sleep(10.0)
        nursery.cancel_scope.cancel()
    assert ticks.at == pytest.approx([t0, t0 + 2.0, t0 + 5.0])
    assert [keys for _, keys in ticks.due] == [[("/", "a")], [("/", "b")]]
    assert clock.ticks == 3  # nothing due after 5 s: no tick in the 5 s that follow


async def test_nothing_armed_means_no_tick_at_all(autojump_clock):
    clock = Clock(wall=trio.current_time)
    deadlines = Deadlines(clock.wake)
    async with trio.open_nursery() as nursery:
        clock, ticks = await start(nursery, clock, deadlines)
        await trio.sleep(24 * 3600.0)
        nursery.cancel_scope.cancel()
    assert clock.ticks == 1  # the first look at start, then asleep for a day


async def test_a_nearer_deadline_rearms_the_sleeping_clock(autojump_clock):
    clock = Clock(wall=trio.current_time)
    deadlines = Deadlines(clock.wake)
    t0 = trio.current_time()
    deadlines.arm(("/", "far"), t0 + 60.0)
    async with trio.open_nursery() as nursery:
        clock, ticks = await start(nursery, clock, deadlines)
        await trio.sleep(1.0)  # asleep towards t0 + 60
        deadlines.arm(("/", "near"), t0 + 3.0)  # on_earlier -> Clock.wake
        await trio.sleep(70.0)
        nursery.cancel_scope.cancel()
    # woken at t0 + 1, it looks after the coalescing pause, then sleeps exactly to each deadline
    assert ticks.at == pytest.approx([t0, t0 + 1.0 + WAKE_COALESCE, t0 + 3.0, t0 + 60.0])
    assert ticks.due == [(pytest.approx(t0 + 3.0), [("/", "near")]), (pytest.approx(t0 + 60.0), [("/", "far")])]


async def test_a_later_deadline_does_not_wake_the_clock(autojump_clock):
    clock = Clock(wall=trio.current_time)
    deadlines = Deadlines(clock.wake)
    t0 = trio.current_time()
    deadlines.arm(("/", "near"), t0 + 3.0)
    async with trio.open_nursery() as nursery:
        clock, ticks = await start(nursery, clock, deadlines)
        await trio.sleep(1.0)
        deadlines.arm(("/", "far"), t0 + 8.0)  # after the one the clock sleeps towards
        await trio.sleep(10.0)
        nursery.cancel_scope.cancel()
    assert ticks.at == pytest.approx([t0, t0 + 3.0, t0 + 8.0])


async def test_a_burst_of_wakes_costs_one_look(autojump_clock):
    clock = Clock(wall=trio.current_time)
    deadlines = Deadlines(clock.wake)
    async with trio.open_nursery() as nursery:
        clock, ticks = await start(nursery, clock, deadlines)
        t1 = trio.current_time()
        for _ in range(100):
            clock.wake()  # e.g. every first delivery on a channel asking to be stamped
        await trio.sleep(1.0)
        nursery.cancel_scope.cancel()
    assert ticks.at[1:] == pytest.approx([t1 + WAKE_COALESCE])


async def test_a_deadline_due_but_not_past_does_not_spin_the_clock(autojump_clock):
    clock = Clock(wall=trio.current_time)
    deadlines = Deadlines(clock.wake)
    t0 = trio.current_time()

    class Stuck(Ticks):
        """A key that stays due until strictly past its time (expiry is strict: expires_at == now stays)."""

        def tick(self, now: float) -> None:
            self.at.append(now)
            if now > t0 + 1.0:
                self.deadlines.disarm(("/", "q"))

    deadlines.arm(("/", "q"), t0 + 1.0)
    async with trio.open_nursery() as nursery:
        clock = Clock(wall=trio.current_time)
        ticks = Stuck(deadlines)
        nursery.start_soon(clock.run, ticks.tick, ticks.next_deadline)
        await trio.sleep(5.0)
        nursery.cancel_scope.cancel()
    assert ticks.at == pytest.approx([t0, t0 + 1.0, t0 + 1.0 + MIN_SLEEP])
