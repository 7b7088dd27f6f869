"""The broker's clock under trio's mock clock (autojump: virtual time jumps to the next deadline when
every task sleeps, so no real sleeping): it sleeps until the earliest deadline a real Broker reports,
is woken when a deadline comes earlier, and does not tick while nothing is due."""

from __future__ import annotations

import trio

from headrace.exchanges import DestinationKind
from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.broker import Broker
from headrace.server.net.clock import Clock
from shell_ports import shell_ports

TTL_1S = {"x-message-ttl": 1000}


def start(broker: Broker, clock: Clock, nursery: trio.Nursery) -> Clock:
    broker.arm_all()
    nursery.start_soon(clock.run, broker.tick, lambda now: broker.next_deadline())
    return clock


def make_broker() -> tuple[Broker, Clock]:
    """A broker whose clock port wakes a real ``Clock`` (the shell's), built first as the app does."""
    clock = Clock(wall=trio.current_time)
    broker = Broker(ports=shell_ports(wake_clock=clock.wake))
    broker.ensure_default("/", "guest", "guest")
    return broker, clock


async def test_a_message_ttl_fires_at_its_deadline_without_polling(autojump_clock: trio.testing.MockClock):
    broker, clock = make_broker()
    vhost = broker.vhosts["/"]
    t0 = trio.current_time()
    queue = vhost.declare_queue("q", owner=None, now=t0, arguments=TTL_1S)
    broker.delivery.publish(vhost, "", "q", b"", b"m", t0)
    async with trio.open_nursery() as nursery:
        start(broker, clock, nursery)
        await trio.sleep(0.99)
        assert queue.messages_ready == 1
        await trio.sleep(0.02)
        assert queue.messages_ready == 0 and queue.stats.expired == 1
        ticks = clock.ticks
        await trio.sleep(3600)  # nothing due: an hour passes without a tick
        assert clock.ticks == ticks <= 3
        nursery.cancel_scope.cancel()


async def test_an_earlier_deadline_wakes_the_sleeping_clock(autojump_clock: trio.testing.MockClock):
    broker, clock = make_broker()
    vhost = broker.vhosts["/"]
    slow = vhost.declare_queue("slow", owner=None, now=trio.current_time(), arguments={"x-message-ttl": 60_000})
    fast = vhost.declare_queue("fast", owner=None, now=trio.current_time(), arguments={"x-message-ttl": 200})
    broker.delivery.publish(vhost, "", "slow", b"", b"m", trio.current_time())
    async with trio.open_nursery() as nursery:
        start(broker, clock, nursery)
        await trio.sleep(1)  # the clock now sleeps towards the slow queue's deadline, 59 s away
        broker.delivery.publish(vhost, "", "fast", b"", b"m", trio.current_time())
        await trio.sleep(0.19)
        assert fast.messages_ready == 1
        await trio.sleep(0.02)
        assert fast.messages_ready == 0 and slow.messages_ready == 1
        await trio.sleep(59)
        assert slow.messages_ready == 0
        nursery.cancel_scope.cancel()


async def test_an_idle_x_expires_queue_goes_at_its_lease_end_and_a_declare_renews_it(
        autojump_clock: trio.testing.MockClock):
    broker, clock = make_broker()
    vhost = broker.vhosts["/"]
    args = {"x-expires": 1000}
    vhost.declare_queue("idle", owner=None, now=trio.current_time(), arguments=args)
    async with trio.open_nursery() as nursery:
        start(broker, clock, nursery)
        await trio.sleep(0.8)
        vhost.declare_queue("idle", owner=None, now=trio.current_time(), arguments=args)  # renews the lease
        await trio.sleep(0.8)
        assert "idle" in vhost.queues
        await trio.sleep(0.25)
        assert "idle" not in vhost.queues
        nursery.cancel_scope.cancel()


async def test_a_queue_expiring_at_once_does_not_spin_the_clock(autojump_clock: trio.testing.MockClock):
    broker, clock = make_broker()
    vhost = broker.vhosts["/"]
    queue = vhost.declare_queue("q", owner=None, now=trio.current_time(), arguments={"x-message-ttl": 0})
    async with trio.open_nursery() as nursery:
        start(broker, clock, nursery)
        await trio.sleep(0.1)
        for _ in range(5):
            broker.delivery.publish(vhost, "", "q", b"", b"m", trio.current_time())
            await trio.sleep(0.1)
        assert queue.messages_ready == 0 and queue.stats.expired == 5
        assert clock.ticks < 40
        nursery.cancel_scope.cancel()


async def test_a_delayed_message_is_published_when_due(autojump_clock: trio.testing.MockClock):
    broker, clock = make_broker()
    vhost = broker.vhosts["/"]
    vhost.declare_exchange("dly", "x-delayed-message", arguments={"x-delayed-type": "direct"})
    queue = vhost.declare_queue("late", owner=None, now=trio.current_time())
    vhost.bind("dly", "late", DestinationKind.QUEUE, "late", None)
    async with trio.open_nursery() as nursery:
        start(broker, clock, nursery)
        await trio.sleep(10)  # the clock sleeps with nothing due; the delayed publish wakes it
        props = encode_properties(BasicProperties(headers={"x-delay": 500}))
        broker.delivery.publish(vhost, "dly", "late", props, b"m", trio.current_time())
        await trio.sleep(0.49)
        assert queue.messages_ready == 0
        await trio.sleep(0.03)
        assert queue.messages_ready == 1
        nursery.cancel_scope.cancel()
