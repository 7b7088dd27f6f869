"""queue.purge-ok and HTTP DELETE of a queue's contents are answered only once the purge record is
fsynced: kill -9 the moment the answer arrives, restart, and the purged messages stay gone."""

from __future__ import annotations

import httpx
import pika
import pytest

pytestmark = pytest.mark.timeout(120)

PERSISTENT = pika.BasicProperties(delivery_mode=2)
COUNT = 10_000


def fill(url: str, queue: str) -> None:
    """COUNT persistent messages, all on disk: a confirmed publish after them covers them all."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.queue_declare(queue, durable=True)
    for i in range(COUNT):
        ch.basic_publish("", queue, b"%d" % i, PERSISTENT)
    confirm = conn.channel()
    confirm.confirm_delivery()
    confirm.basic_publish("", queue, b"last", PERSISTENT)
    assert ch.queue_declare(queue, passive=True).method.message_count == COUNT + 1
    conn.close()


def depth_after_restart(proc, queue: str) -> int:
    proc.start()
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    try:
        return conn.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        conn.close()


def test_purge_ok_then_kill_9_keeps_the_queue_empty(broker_factory):
    proc = broker_factory()
    fill(proc.url, "purged")
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ok = conn.channel().queue_purge("purged")
    proc.kill()  # SIGKILL as soon as purge-ok is in
    assert ok.method.message_count == COUNT + 1
    assert depth_after_restart(proc, "purged") == 0


def test_http_purge_answer_then_kill_9_keeps_the_queue_empty(broker_factory):
    proc = broker_factory()
    fill(proc.url, "purged-http")
    r = httpx.delete(f"{proc.http_url}/api/queues/%2F/purged-http/contents", auth=("guest", "guest"))
    proc.kill()
    assert r.status_code == 204
    assert depth_after_restart(proc, "purged-http") == 0
