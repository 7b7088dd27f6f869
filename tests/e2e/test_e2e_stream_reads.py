"""Stream reads in bounded steps: a consumer with more credit than one dispatch reads (1000
records, 256 KiB) still gets its whole window, across segments, with the publisher's properties
and headers intact beside the offset header, and consumers far back share the broker."""

from __future__ import annotations

import pika
import pytest
from e2e_support import unique, wait_until

pytestmark = pytest.mark.timeout(120)

N = 6000
BODY = b"b" * 300


def fill(ch, name: str, n: int = N) -> None:
    """``n`` messages in several segments, published without confirms; the stream's length (its
    committed end) says when they are all in."""
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream",
                                                    "x-stream-max-segment-size-bytes": 200_000})
    for i in range(n):
        ch.basic_publish("", name, BODY + b"%d" % i,
                         pika.BasicProperties(content_type="text/plain", headers={"i": i}, priority=i % 3))


def length(ch, name: str) -> int:
    return ch.queue_declare(name, durable=True, passive=True).method.message_count


def test_prefetch_window_larger_than_one_read_is_filled_without_acks(broker):
    name = unique("s")
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    fill(ch, name)
    assert wait_until(lambda: length(ch, name) == N, conn, 60)
    got: dict[str, list[tuple[dict, pika.BasicProperties, bytes]]] = {"a": [], "b": []}
    ch.basic_qos(prefetch_count=2500)
    for key, start in (("a", "first"), ("b", 3000)):
        ch.basic_consume(name, lambda c, m, p, b, key=key: got[key].append((p.headers, p, b)),
                         arguments={"x-stream-offset": start})
    assert wait_until(lambda: len(got["a"]) == 2500 and len(got["b"]) == 2500, conn, 30), \
        {k: len(v) for k, v in got.items()}
    conn.process_data_events(time_limit=0.3)
    assert {k: len(v) for k, v in got.items()} == {"a": 2500, "b": 2500}  # credit, never more
    for key, first in (("a", 0), ("b", 3000)):
        offsets = [h["x-stream-offset"] for h, _, _ in got[key]]
        assert offsets == list(range(first, first + 2500))
        for headers, props, body in got[key]:
            i = headers["x-stream-offset"]
            assert headers == {"i": i, "x-stream-offset": i}
            assert (props.content_type, props.priority, body) == ("text/plain", i % 3, BODY + b"%d" % i)
    conn.close()


def test_publisher_on_another_queue_is_served_while_consumers_read_from_first(broker):
    """Four consumers reading the stream from its start (more than one turn's reads each), acking
    as they go, and meanwhile a publisher with confirms on a classic queue: every confirm comes,
    and the readers get the whole stream in order."""
    name = unique("s")
    other = unique("q")
    n, readers_count = 3000, 4
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    fill(ch, name, n)
    ch.queue_declare(other, durable=True)
    assert wait_until(lambda: length(ch, name) == n, conn, 60)
    readers = conn.channel()
    readers.basic_qos(prefetch_count=1000)
    seen: list[list[int]] = [[] for _ in range(readers_count)]

    def on_message(chan, method, props, body, k: int) -> None:
        seen[k].append(props.headers["x-stream-offset"])
        if len(seen[k]) % 100 == 0:
            chan.basic_ack(method.delivery_tag, multiple=True)

    for k in range(readers_count):
        readers.basic_consume(name, lambda c, m, p, b, k=k: on_message(c, m, p, b, k),
                              arguments={"x-stream-offset": "first"})
    pub_conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    pub = pub_conn.channel()
    pub.confirm_delivery()
    for i in range(50):
        pub.basic_publish("", other, b"%d" % i, pika.BasicProperties(delivery_mode=2))  # raises unless confirmed
    assert wait_until(lambda: all(len(s) == n for s in seen), conn, 60), [len(s) for s in seen]
    assert all(s == list(range(n)) for s in seen)
    assert pub.queue_declare(other, durable=True, passive=True).method.message_count == 50
    pub_conn.close()
    conn.close()
