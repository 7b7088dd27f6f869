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
