"""The broker's tally of what its queues hold (queues/held.py) against the sum over the queues it
replaces, through random sequences of publishes, consumers, gets, settles, expiry, bounds, policies,
purges, deletions and spilled entries paged back in."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from headrace.persistence.spill_store import SpillStore
from headrace.queues import Consumer, Queue, QueueEntry
from headrace.queues.queue import ENTRY_OVERHEAD
from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.broker import Broker, Settle
from headrace.server.broker.errors import ChannelException
from shell_ports import shell_ports

PLAIN = encode_properties(BasicProperties())
SHORT_TTL = encode_properties(BasicProperties(expiration="500"))
URGENT = encode_properties(BasicProperties(priority=5))
# classic; bounded with a dead-letter target; by priority; with a message TTL
QUEUES = {
    "plain": {},
    "bounded": {"x-max-length": 3, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "plain"},
    "ranked": {"x-max-priority": 9},
    "ttl": {"x-message-ttl": 1000},
}


class Sink:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.got: list[tuple[Queue, QueueEntry]] = []
        self.consumer: Consumer | None = None

    def has_capacity(self) -> bool:
        return len(self.got) < self.capacity

    def deliver(self, consumer: Consumer, queue: Queue, entry: QueueEntry, now: float) -> None:
        self.got.append((queue, entry))

    def consumer_cancelled(self, consumer: Consumer) -> None:
        pass


names = st.sampled_from(sorted(QUEUES))
ops = st.one_of(
    st.tuples(st.just("declare"), names),
    st.tuples(st.just("publish"), names, st.sampled_from([PLAIN, SHORT_TTL, URGENT]), st.integers(0, 40)),
    st.tuples(st.just("consume"), names, st.integers(1, 4), st.booleans()),
    st.tuples(st.just("cancel"), names),
    st.tuples(st.just("get"), names, st.booleans()),
    st.tuples(st.just("settle"), st.sampled_from(list(Settle)), st.integers(0, 5)),
    st.tuples(st.just("tick"), st.floats(0.1, 2.0)),
    st.tuples(st.just("wait"), st.floats(0.1, 2.0)),  # time passes, the clock not told: a get or a
    # consume finds the expired entries itself
    st.tuples(st.just("purge"), names),
    st.tuples(st.just("delete"), names),
    st.tuples(st.just("policy"), st.sampled_from([None, 1, 5])),
    st.tuples(st.just("page_in"),),
)


def summed(broker: Broker) -> tuple[int, int]:
    queues = [q for v in broker.vhosts.values() for q in v.queues.values()]
    return sum(q.memory for q in queues), sum(q.consumer_count for q in queues)


def page_in(broker: Broker, now: float) -> None:
    """What the pager does, in this thread."""
    vhost = broker.vhosts["/"]
    for queue in list(vhost.queues.values()):
        while queue.page_in_wanted():
            backing = queue.take_backing()
            plan = backing.plan_read(*queue.page_in_room())
            if plan is None:
                break
            entries = plan if isinstance(plan, list) else backing.finish_read(plan, plan.run())
            if not entries:
                break
            broker.delivery.page_in(vhost, queue, entries, queue.generation, now)


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(ops, min_size=10, max_size=60))
@example(steps=[("declare", "plain"), ("publish", "plain", PLAIN, 3), ("publish", "plain", SHORT_TTL, 5),
                ("wait", 1.0), ("get", "plain", False), ("get", "plain", False), ("settle", Settle.ACK, 1)])
@example(steps=[("declare", "ranked"), ("publish", "ranked", URGENT, 7), ("publish", "ranked", PLAIN, 2),
                ("consume", "ranked", 1, True), ("consume", "ranked", 2, False), ("get", "ranked", True)])
def test_the_tally_is_the_sum_over_the_queues(steps):
    with tempfile.TemporaryDirectory() as tmp:
        spill = SpillStore(Path(tmp))
        broker = Broker(ports=shell_ports(), resident_max_messages=6, spill_factory=lambda v, q: spill.backing(f"{v}\x00{q}"))
        broker.ensure_default("/", "guest", "guest")
        vhost = broker.vhosts["/"]
        now = 1000.0
        sinks: dict[str, Sink] = {}
        held: list[tuple[Queue, QueueEntry]] = []  # basic.get entries not yet settled
        for step in steps:
            kind, *args = step
            try:
                if kind == "declare":
                    vhost.declare_queue(args[0], owner=None, now=now, arguments=QUEUES[args[0]])
                elif kind == "publish":
                    name, props, size = args
                    if name in vhost.queues:
                        broker.delivery.publish(vhost, "", name, props, b"x" * size, now)
                elif kind == "consume" and args[0] in vhost.queues and args[0] not in sinks:
                    sink = sinks[args[0]] = Sink(args[1])
                    sink.consumer = Consumer(args[0], sink, prefetch=args[1], no_ack=args[2])
                    broker.delivery.add_consumer(vhost, vhost.queues[args[0]], sink.consumer, now)
                elif kind == "cancel" and args[0] in sinks:
                    sink = sinks.pop(args[0])
                    queue = vhost.queues.get(args[0])
                    if queue is not None:
                        broker.delivery.remove_consumer(vhost, queue, sink.consumer, now)
                        broker.delivery.settle(vhost, sink.got, Settle.REQUEUE, now)
                elif kind == "get" and args[0] in vhost.queues:
                    entry = broker.delivery.get(vhost, vhost.queues[args[0]], now, no_ack=args[1], owner=held)
                    if entry is not None and not args[1]:
                        held.append((vhost.queues[args[0]], entry))
                elif kind == "settle":
                    action, n = args
                    for sink in sinks.values():
                        items, sink.got = sink.got[:n], sink.got[n:]
                        broker.delivery.settle(vhost, items, action, now)
                    items, held[:] = held[:n], held[n:]
                    broker.delivery.settle(vhost, items, action, now)
                elif kind == "tick":
                    now += args[0]
                    broker.tick(now)
                elif kind == "wait":
                    now += args[0]
                elif kind == "purge" and args[0] in vhost.queues:
                    vhost.purge_queue(args[0], None)
                elif kind == "delete" and args[0] in vhost.queues:
                    vhost.delete_queue(args[0])
                    sinks.pop(args[0], None)
                elif kind == "policy":
                    if args[0] is None:
                        broker.clear_policy("/", "cap", now)
                    else:
                        broker.set_policy("/", "cap", {"pattern": "^(plain|ttl)$", "apply-to": "queues",
                                                       "definition": {"max-length": args[0]}}, now)
                elif kind == "page_in":
                    page_in(broker, now)
            except ChannelException:
                pass  # refused (inequivalent, absent): the tally must still agree
            memory, consumers = summed(broker)
            assert broker.held.entries * ENTRY_OVERHEAD + broker.held.bytes == memory, step
            assert broker.held.consumers == consumers, step
        for name in list(vhost.queues):
            vhost.delete_queue(name)
        assert (broker.held.entries, broker.held.bytes, broker.held.consumers) == (0, 0, 0)
        spill.close()
