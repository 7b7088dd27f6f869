"""Publish deduplication through a real broker: duplicates confirmed but not delivered, and the
window surviving a clean restart and a SIGKILL."""

from __future__ import annotations

import pika
import pytest

pytestmark = pytest.mark.timeout(60)

DEDUP = {"x-message-deduplication": True, "x-cache-size": 1000}


def setup(url: str) -> tuple[pika.BlockingConnection, pika.adapters.blocking_connection.BlockingChannel]:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare("dd", "direct", durable=True, arguments=DEDUP)
    ch.queue_declare("dd-q", durable=True)
    ch.queue_bind("dd-q", "dd", "k")
    return conn, ch


def publish(ch, keys, persistent=True) -> None:
    for key in keys:
        ch.basic_publish("dd", "k", f"body-{key}".encode(), pika.BasicProperties(
            headers={"x-deduplication-header": key}, delivery_mode=2 if persistent else 1), mandatory=True)


def drain(ch) -> list[bytes]:
    out = []
    while True:
        method, _, body = ch.basic_get("dd-q", auto_ack=True)
        if method is None:
            return out
        out.append(body)


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_window_survives_a_restart(broker_factory, tmp_path, how):
    b = broker_factory()
    conn, ch = setup(b.url)
    publish(ch, [f"k{i}" for i in range(50)])  # every publish confirmed (confirm_delivery)
    publish(ch, [f"k{i}" for i in range(0, 50, 7)])  # duplicates: confirmed, not returned
    assert drain(ch) == [f"body-k{i}".encode() for i in range(50)]
    conn.close()
    if how == "sigterm":
        assert b.stop() == 0
    else:
        b.kill()
    b = broker_factory(data_dir=b.data_dir)
    conn, ch = setup(b.url)
    publish(ch, [f"k{i}" for i in range(45, 55)])
    assert drain(ch) == [f"body-k{i}".encode() for i in range(50, 55)]
    conn.close()


def test_a_publish_the_queue_refused_is_taken_when_retried(broker_factory):
    """reject-publish nacks the publish: its key is not remembered, so the retry is no duplicate."""
    b = broker_factory()
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare("dd-full", "fanout", durable=True, arguments=DEDUP)
    ch.queue_declare("dd-full-q", durable=True, arguments={
        "x-max-length": 1, "x-overflow": "reject-publish", **DEDUP})
    ch.queue_bind("dd-full-q", "dd-full")

    def send(key: str) -> None:
        ch.basic_publish("dd-full", "", key.encode(), pika.BasicProperties(message_id=key, delivery_mode=2))

    send("a")
    with pytest.raises(pika.exceptions.NackError):
        send("b")  # the queue is full: refused
    assert ch.basic_get("dd-full-q", auto_ack=True)[2] == b"a"
    send("b")  # the retry goes through: confirmed and queued
    send("b")  # now it is a duplicate: confirmed, not queued
    assert ch.basic_get("dd-full-q", auto_ack=True)[2] == b"b"
    assert ch.basic_get("dd-full-q", auto_ack=True)[0] is None
    conn.close()


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_a_deleted_exchange_or_queue_takes_its_window_along_across_a_restart(broker_factory, how):
    b = broker_factory()
    conn, ch = setup(b.url)
    ch.queue_declare("dd-own", durable=True, arguments=DEDUP)  # a queue with its own window
    ch.queue_bind("dd-own", "dd", "k")
    publish(ch, ["old0", "old1"])
    assert drain(ch) == [b"body-old0", b"body-old1"]
    ch.exchange_delete("dd")
    ch.queue_delete("dd-own")
    conn.close()
    conn, ch = setup(b.url)  # the namesake: an empty window
    ch.queue_declare("dd-own", durable=True, arguments=DEDUP)
    ch.queue_bind("dd-own", "dd", "k")
    publish(ch, ["old0", "new0"])
    assert drain(ch) == [b"body-old0", b"body-new0"]
    assert ch.queue_purge("dd-own").method.message_count == 2
    ch.exchange_delete("dd")  # gone before the restart, declared again after it
    conn.close()
    if how == "sigterm":
        assert b.stop() == 0
    else:
        b.kill()
    b = broker_factory(data_dir=b.data_dir)
    conn, ch = setup(b.url)
    ch.queue_bind("dd-own", "dd", "k")  # dd-own survived with its window: old0 and new0
    publish(ch, ["old0", "new0", "new1"])
    assert drain(ch) == [b"body-old0", b"body-new0", b"body-new1"]
    _, _, body = ch.basic_get("dd-own", auto_ack=True)
    assert body == b"body-new1" and ch.basic_get("dd-own", auto_ack=True)[0] is None
    conn.close()
