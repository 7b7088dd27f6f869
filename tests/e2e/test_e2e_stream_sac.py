"""Single active consumer on streams through pika: one member of a named group reads, the next
takes over after the group's last ack; over a super stream the partitions spread over the members
and move when one leaves."""

from __future__ import annotations

import httpx
import pika
import pika.exceptions
import pytest
from e2e_support import unique, wait_until

pytestmark = pytest.mark.timeout(120)


class Member:
    """One group member: its own connection, consuming the given streams with SAC and acking."""

    def __init__(self, broker, group: str, streams: list[str], super_stream: str | None = None) -> None:
        self.conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        self.ch = self.conn.channel()
        self.ch.basic_qos(prefetch_count=20)
        self.got: list[tuple[str, int, bytes]] = []  # (stream, offset, body)
        args = {"x-single-active-consumer": True, "x-stream-consumer-name": group, "x-stream-offset": "first"}
        if super_stream is not None:
            args["x-super-stream"] = super_stream
        for stream in streams:
            self.ch.basic_consume(stream, self._on_message(stream), arguments=args)

    def _on_message(self, stream: str):
        def on_message(chan, method, props, body):
            self.got.append((stream, props.headers["x-stream-offset"], body))
            chan.basic_ack(method.delivery_tag)
        return on_message

    def pump(self) -> None:
        if self.conn.is_open:
            self.conn.process_data_events(time_limit=0.02)

    def close(self) -> None:
        if self.conn.is_open:
            self.conn.close()


def pump_until(members, cond, timeout: float = 10.0) -> bool:
    return wait_until(lambda: (any(m.pump() for m in members), cond())[1], timeout=timeout)


def consumers_of(http: httpx.Client, stream: str) -> list[dict]:
    return http.get(f"/api/queues/%2F/{stream}").json()["stream"]["consumers"]


def publish(broker, exchange: str, routing_keys: list[str], bodies: list[bytes]) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    for key, body in zip(routing_keys, bodies):
        ch.basic_publish(exchange, key, body)
    conn.close()


def test_one_active_member_then_the_next_after_the_last_ack(broker, http):
    stream, group = unique("sac"), unique("g")
    setup = pika.BlockingConnection(pika.URLParameters(broker.url))
    setup.channel().queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    setup.close()
    publish(broker, "", [stream] * 30, [f"m{i}".encode() for i in range(30)])
    a = Member(broker, group, [stream])
    b = Member(broker, group, [stream])
    assert pump_until([a, b], lambda: len(a.got) == 30)
    listed = {c["active"] for c in consumers_of(http, stream)}
    assert listed == {True, False}  # the assignment is in the HTTP API: one active, one waiting
    publish(broker, "", [stream] * 20, [f"m{i}".encode() for i in range(30, 50)])
    assert pump_until([a, b], lambda: len(a.got) == 50)
    assert b.got == []
    a.close()  # the active member leaves: the waiting one takes over after the group's last ack
    publish(broker, "", [stream] * 10, [f"m{i}".encode() for i in range(50, 60)])
    assert pump_until([b], lambda: len(b.got) == 10), b.got
    assert [body for _, _, body in a.got + b.got] == [f"m{i}".encode() for i in range(60)]  # none twice
    assert [offset for _, offset, _ in b.got] == list(range(50, 60))
    assert [c["active"] for c in consumers_of(http, stream)] == [True]
    b.close()


def test_super_stream_group_spreads_and_rebalances(broker, http):
    name, group = unique("ss"), unique("grp")
    assert http.put(f"/api/super-streams/%2F/{name}", json={"partitions": 6}).status_code == 201
    streams = [f"{name}-{i}" for i in range(6)]
    members = [Member(broker, group, streams, super_stream=name) for _ in range(3)]

    actives = [[c["active"] for c in consumers_of(http, s)] for s in streams]
    assert all(row.count(True) == 1 for row in actives)
    # each member is active on 2 of the 6 partitions: member i mod 3 of partition i
    assert [row.index(True) for row in actives] == [0, 1, 2, 0, 1, 2]
    keys = [f"customer-{i}" for i in range(30)]
    sent = [(k, f"{k}/{n}".encode()) for n in range(4) for k in keys]
    publish(broker, name, [k for k, _ in sent], [b for _, b in sent])
    assert pump_until(members, lambda: sum(len(m.got) for m in members) == len(sent))
    members[1].close()  # a member leaves: its partitions move, 3 to each of the two left
    actives = [[c["active"] for c in consumers_of(http, s)] for s in streams]
    assert all(row.count(True) == 1 for row in actives) and all(len(row) == 2 for row in actives)
    assert [row.index(True) for row in actives] == [0, 1, 0, 1, 0, 1]
    more = [(k, f"{k}/{n}".encode()) for n in range(4, 8) for k in keys]
    publish(broker, name, [k for k, _ in more], [b for _, b in more])
    left = [members[0], members[2]]
    total = len(sent) + len(more)
    assert pump_until(left, lambda: sum(len(m.got) for m in members) == total), sum(len(m.got) for m in members)
    # a member joins while the others still hold deliveries they have not acked (published, not
    # yet pumped): the partitions it takes start once those are settled, after the last ack
    last = [(k, f"{k}/{n}".encode()) for n in range(8, 12) for k in keys]
    publish(broker, name, [k for k, _ in last], [b for _, b in last])
    members.append(Member(broker, group, streams, super_stream=name))
    left.append(members[-1])
    total += len(last)
    assert pump_until(left, lambda: sum(len(m.got) for m in members) == total), sum(len(m.got) for m in members)
    actives = [[c["active"] for c in consumers_of(http, s)] for s in streams]
    assert [row.index(True) for row in actives] == [0, 1, 2, 0, 1, 2]  # even again: 2 partitions each
    bodies = [b for m in members for _, _, b in m.got]
    assert sorted(bodies) == sorted(b for _, b in sent + more + last)  # each once: nothing acked came again
    for key in keys:  # per-key order kept across the moves: each key's bodies in publish order
        seen = sorted((offset, body) for m in members for stream, offset, body in m.got
                      if body.decode().split("/")[0] == key)
        assert [int(body.decode().split("/")[1]) for _, body in seen] == list(range(12))
        assert len({stream for m in members for stream, _, body in m.got if body.decode().split("/")[0] == key}) == 1
    for m in left:
        m.close()


def test_sac_needs_a_consumer_name_and_a_real_partition(broker, http):
    stream = unique("sac")
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    ch.basic_qos(prefetch_count=10)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_consume(stream, lambda *a: None, arguments={"x-single-active-consumer": True})
    assert (info.value.reply_code, info.value.reply_text) == (
        406, f"PRECONDITION_FAILED - single active consumer on stream queue '{stream}' in vhost '/' needs a "
             "consumer name ('x-stream-consumer-name')")
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_consume(stream, lambda *a: None, arguments={
            "x-single-active-consumer": True, "x-stream-consumer-name": "g", "x-super-stream": "other"})
    assert (info.value.reply_code, info.value.reply_text) == (
        406, f"PRECONDITION_FAILED - invalid arg 'x-super-stream': stream queue '{stream}' in vhost '/' is not a "
             "partition of super stream 'other' (NAME-<n>)")
    assert consumers_of(http, stream) == []  # a refused consumer leaves nothing behind
    conn.close()


def test_group_arguments_on_queue_types_that_refuse_them(broker, http):
    """The queue argument x-single-active-consumer on a stream: RabbitMQ 3.10's refusal. The
    consumer arguments of stream groups on a classic or quorum queue (which RabbitMQ ignores,
    leaving the consumer sharing the queue round-robin): refused, unless the queue itself is
    single-active and the consumer only says so too."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    stream, classic, sac, quorum = unique("s"), unique("c"), unique("c-sac"), unique("qq")

    def refused(action) -> tuple[int, str]:
        nonlocal ch
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            action(ch)
        ch = conn.channel()
        return info.value.reply_code, info.value.reply_text

    ch = conn.channel()
    assert refused(lambda c: c.queue_declare(stream, durable=True, arguments={
        "x-queue-type": "stream", "x-single-active-consumer": True})) == (
        406, f"PRECONDITION_FAILED - invalid arg 'x-single-active-consumer' for queue '{stream}' in vhost '/' of "
             "queue type rabbit_stream_queue")
    ch.queue_declare(classic, durable=True)
    ch.queue_declare(sac, durable=True, arguments={"x-single-active-consumer": True})
    ch.queue_declare(quorum, durable=True, arguments={"x-queue-type": "quorum"})
    consume = lambda q, args: lambda c: c.basic_consume(q, lambda *a: None, arguments=args)  # noqa: E731
    assert refused(consume(classic, {"x-single-active-consumer": True, "x-stream-consumer-name": "g"})) == (
        406, f"PRECONDITION_FAILED - invalid arg 'x-single-active-consumer' for queue '{classic}' in vhost '/' of "
             "queue type rabbit_classic_queue: as a consumer argument it is for stream queues; declare the queue "
             "with it instead")
    assert refused(consume(quorum, {"x-super-stream": "invoices"})) == (
        406, f"PRECONDITION_FAILED - invalid arg 'x-super-stream' for queue '{quorum}' in vhost '/' of queue type "
             "rabbit_quorum_queue: a consumer argument of stream queues only")
    # nothing asked that the queue does not do: accepted, as RabbitMQ accepts them
    ch.basic_consume(sac, lambda *a: None, arguments={"x-single-active-consumer": True})
    ch.basic_consume(classic, lambda *a: None, arguments={"x-single-active-consumer": False,
                                                          "x-stream-consumer-name": "g"})
    assert wait_until(lambda: http.get(f"/api/queues/%2F/{classic}").json().get("consumers") == 1)
    conn.close()
