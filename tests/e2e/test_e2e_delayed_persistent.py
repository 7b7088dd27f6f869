"""Persistent delayed messages through a real ``headrace serve`` killed with SIGKILL: every one
confirmed comes out once after the restart (none of those delivered and acked before the kill
comes back, none early), and once all are delivered their Delay records no longer keep the
store's segments: compaction collects them."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pika
import pytest
from e2e_support import wait_until

from headrace.persistence.segments import list_segments

pytestmark = pytest.mark.timeout(180)

EXCHANGE, QUEUE, MARKER = "pd-x", "pd-q", "pd-marker"
ENV = {"HEADRACE_SEGMENT_MAX_BYTES": "65536"}  # small segments: the Delay records span many
PAD = b"d" * 300
Channel = pika.adapters.blocking_connection.BlockingChannel


def take_all(ch: Channel, seen: dict[str, float]) -> None:
    """Every message the queue holds now into ``seen`` (id -> lateness, s), checked for
    duplicates, and acked; then a confirmed publish, whose group commit covers the acks and
    every Undelay before it."""
    got = 0
    while True:
        method, props, body = ch.basic_get(QUEUE)
        if method is None:
            break
        assert props.message_id not in seen, f"{props.message_id} delivered twice"
        seen[props.message_id] = time.time() - float(body[:20])
        got += 1
    if got:
        ch.basic_ack(0, multiple=True)
    ch.basic_publish("", MARKER, b"m", pika.BasicProperties(delivery_mode=2))


def queued(ch: Channel) -> int:
    return int(ch.queue_declare(QUEUE, durable=True, passive=True).method.message_count)


def test_persistent_delayed_messages_survive_kill_9_once(broker_factory, tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc = broker_factory(data_dir=data, env=ENV)
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare(EXCHANGE, "x-delayed-message", durable=True, arguments={"x-delayed-type": "direct"})
    ch.queue_declare(QUEUE, durable=True)
    ch.queue_bind(QUEUE, EXCHANGE, "k")
    ch.queue_declare(MARKER, durable=True)
    rng = random.Random(44)
    ids = [f"soon-{i}" for i in range(600)] + [f"late-{i}" for i in range(1400)]
    for mid in ids:
        delay = rng.randint(50, 400) if mid.startswith("soon") else rng.randint(4000, 8000)
        due = b"%20.6f" % (time.time() + delay / 1000)
        ch.basic_publish(EXCHANGE, "k", due + PAD, pika.BasicProperties(
            delivery_mode=2, message_id=mid, headers={"x-delay": delay}))
    assert len(list_segments(data / "store")) > 10
    assert wait_until(lambda: queued(ch) >= 600, conn, timeout=20)
    seen: dict[str, float] = {}
    take_all(ch, seen)
    assert len(seen) >= 600
    conn.close()
    proc.kill()

    proc = broker_factory(data_dir=data, env=ENV)
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.confirm_delivery()
    assert wait_until(lambda: (take_all(ch, seen), len(seen) >= len(ids))[1], conn, timeout=60), \
        (len(seen), proc.log[-3000:])
    assert sorted(seen) == sorted(ids)
    assert min(seen.values()) > -0.05, "delivered before its delay ended"
    # every Delay record released: compaction leaves a segment or two of the many. The markers
    # (live records in every segment, each needing a rewrite at one per compaction pass) are
    # purged first, and each poll writes and purges one more so the flusher keeps passing
    def settled() -> bool:
        ch.queue_purge(MARKER)
        ch.basic_publish("", MARKER, b"m", pika.BasicProperties(delivery_mode=2))
        return len(list_segments(data / "store")) <= 3
    assert wait_until(settled, conn, timeout=30), len(list_segments(data / "store"))
    conn.close()
