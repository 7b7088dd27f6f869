"""Stream filtering over AMQP 0-9-1 with pika (RabbitMQ 3.13's contract): publishers set
``x-stream-filter-value``, consumers pass ``x-stream-filter`` (a value or a list) and
``x-stream-match-unfiltered``; each consumer gets exactly the matching messages, in offset order,
the others taking none of its credit; the chunk filters survive a restart."""

from __future__ import annotations

from pathlib import Path

import pika
import pytest
from e2e_support import unique, wait_until

pytestmark = pytest.mark.timeout(120)

# interleaved, so every written chunk holds several values: only the per-message check keeps a
# consumer's deliveries exact (the chunk filter only rules whole chunks out)
VALUES = ["red", "blue", None, "green", "red", None, "blue", "red"]


def value_of(i: int) -> str | None:
    return VALUES[i % len(VALUES)]


def publish(ch, name: str, start: int, n: int, last: str | None = "red") -> None:
    """Messages ``start`` .. ``start + n - 1`` with their filter values, then a last one (value
    ``last``, body ``end``) every consumer here matches: once it is in, all before it were seen."""
    ch.confirm_delivery()
    for i in range(start, start + n):
        value = value_of(i)
        headers = {"x-stream-filter-value": value} if value is not None else {"i": i}
        ch.basic_publish("", name, b"%d" % i, pika.BasicProperties(headers=headers))
    ch.basic_publish("", name, b"end", pika.BasicProperties(headers={"x-stream-filter-value": last}))


def consume(conn, name: str, args: dict, prefetch: int = 1) -> list[bytes]:
    """Bodies delivered (acked one by one) up to the ``end`` message."""
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    got: list[bytes] = []

    def on_message(chan, method, props, body):
        got.append(body)
        chan.basic_ack(method.delivery_tag)

    ch.basic_consume(name, on_message, arguments={"x-stream-offset": "first", **args})
    assert wait_until(lambda: b"end" in got, conn, 20), got[-5:]
    ch.close()
    return got


def expected(n: int, wanted: set[str | None]) -> list[bytes]:
    return [b"%d" % i for i in range(n) if value_of(i) in wanted] + [b"end"]


def test_consumers_get_exactly_what_their_filter_matches(broker):
    name = unique("s")
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    n = 400
    publish(ch, name, 0, n)
    assert consume(conn, name, {"x-stream-filter": "red"}) == expected(n, {"red"})
    assert consume(conn, name, {"x-stream-filter": ["red", "blue"]}) == expected(n, {"red", "blue"})
    assert consume(conn, name, {"x-stream-filter": "red", "x-stream-match-unfiltered": True}) == \
        expected(n, {"red", None})
    assert consume(conn, name, {"x-stream-filter": "red", "x-stream-match-unfiltered": False}) == \
        expected(n, {"red"})
    assert consume(conn, name, {}) == [b"%d" % i for i in range(n)] + [b"end"]  # unfiltered: all
    conn.close()


def test_skipped_messages_take_no_credit(broker):
    """A consumer with prefetch 5 that never acks gets 5 matching messages, not fewer: the ones
    its filter skips are not deliveries."""
    name = unique("s")
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    publish(ch, name, 0, 200)
    reader = conn.channel()
    reader.basic_qos(prefetch_count=5)
    got: list[int] = []
    reader.basic_consume(name, lambda c, m, p, b: got.append(p.headers["x-stream-offset"]),
                         arguments={"x-stream-offset": "first", "x-stream-filter": "green"})
    assert wait_until(lambda: len(got) == 5, conn, 10), got
    assert got == [i for i in range(200) if value_of(i) == "green"][:5]
    conn.close()


def test_bad_filter_arguments_are_refused(broker):
    name = unique("s")
    for args, text in (({"x-stream-filter": 12}, "invalid arg 'x-stream-filter'"),
                       ({"x-stream-filter": ["a", 3]}, "invalid arg 'x-stream-filter'"),
                       ({"x-stream-filter": "a", "x-stream-match-unfiltered": "yes"},
                        "invalid arg 'x-stream-match-unfiltered'")):
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        ch = conn.channel()
        ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
        ch.basic_qos(prefetch_count=10)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.basic_consume(name, lambda *a: None, arguments=args)
        assert info.value.reply_code == 406 and text in info.value.reply_text, info.value.reply_text
        conn.close()


def test_filters_survive_a_restart(broker_factory):
    proc = broker_factory()
    name = unique("s")
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    publish(ch, name, 0, 100, last="blue")
    conn.close()
    assert proc.stop() == 0
    proc = broker_factory(data_dir=proc.data_dir)
    assert list(Path(proc.data_dir, "streams").rglob("*.flt")), "no chunk filter written"
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    publish(ch, name, 101, 100, last="blue")  # after the restart: offsets 101 .. 200, then 201
    got = consume(conn, name, {"x-stream-filter": ["blue"]})
    assert got == [b"%d" % i for i in range(100) if value_of(i) == "blue"] + [b"end"]
    ch2 = conn.channel()
    ch2.basic_qos(prefetch_count=1000)
    seen: list[bytes] = []
    ch2.basic_consume(name, lambda c, m, p, b: seen.append(b),
                      arguments={"x-stream-offset": "first", "x-stream-filter": "blue"})
    assert wait_until(lambda: seen.count(b"end") == 2, conn, 20), seen[-5:]
    assert seen == expected(100, {"blue"}) + [b"%d" % i for i in range(101, 201) if value_of(i) == "blue"] + [b"end"]
    conn.close()
