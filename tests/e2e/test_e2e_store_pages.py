"""A recovered backlog past the resident window is paged in from the message store's segments
(``persistence/store_pages.py``), through a real ``headrace serve`` killed with SIGKILL: order,
redelivered flags, acks after the restart, a kill while the backlog drains, and the segments
reclaimed once it is consumed."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pika
import pika.exceptions
import pytest
from e2e_support import publish_persistent, sync_marker

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

QUEUE = "paged-durable"
# small segments (the backlog spans many), checkpoints at once, a resident window of 16
ENV = {"HEADRACE_SEGMENT_MAX_BYTES": "65536", "HEADRACE_CHECKPOINT_MIN_BYTES": "0",
       "HEADRACE_QUEUE_MAX_RESIDENT_MESSAGES": "16"}
BODY = b"p" * 200


def publish_confirmed(url: str, prefix: str, count: int) -> list[str]:
    return publish_persistent(url, QUEUE, prefix, count, lambda mid: BODY + mid.encode())


def take(url: str, count: int | None, ack: int) -> list[tuple[str, bool]]:
    """``count`` messages (all with None) by basic.get as (id, redelivered); the first ``ack`` of
    them acked, the rest left unacked (delivered: redelivered after a restart); then a marker."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    got: list[tuple[str, bool]] = []
    tag_of_ack = 0
    while count is None or len(got) < count:
        method, props, body = ch.basic_get(QUEUE)
        if method is None:
            break
        assert body == BODY + props.message_id.encode()
        got.append((props.message_id, method.redelivered))
        if len(got) == ack:
            tag_of_ack = method.delivery_tag
    if tag_of_ack:
        ch.basic_ack(tag_of_ack, multiple=True)
    sync_marker(ch)
    conn.close()  # (the unacked ones go back to the queue)
    return got


def test_a_recovered_backlog_pages_in_across_kills(broker_factory, tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc = broker_factory(data_dir=data, env=ENV)
    confirmed = publish_confirmed(proc.url, "m", 1500)
    first = take(proc.url, 100, ack=0)  # delivered, not acked: counted in the store
    assert [m for m, _ in first] == confirmed[:100]
    proc.kill()

    proc = broker_factory(data_dir=data, env=ENV)
    got = take(proc.url, 600, ack=400)  # ids 16..99 come from the store's segments, delivered once
    assert got == [(m, i < 100) for i, m in enumerate(confirmed[:600])]
    proc.kill()

    proc = broker_factory(data_dir=data, env=ENV)
    rest = take(proc.url, None, ack=0)
    assert [m for m, _ in rest] == confirmed[400:]  # in order, none twice, nothing acked back
    assert all(red for m, red in rest[:200]) and not any(red for m, red in rest[200:])
    got = take(proc.url, None, ack=len(confirmed) - 400)
    assert len(got) == 1100 and all(red for _, red in got)
    proc.kill()

    proc = broker_factory(data_dir=data, env=ENV)
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    assert conn.channel().queue_declare(QUEUE, durable=True, passive=True).method.message_count == 0
    conn.close()
    deadline = time.monotonic() + 30  # the drained segments go at the flusher's maintenance passes
    while len(list((data / "store").glob("*.seg"))) > 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(list((data / "store").glob("*.seg"))) <= 3
    assert proc.stop() == 0


def _consume(url: str, acked: list[str], stop: threading.Event) -> None:
    """Consume with manual acks, one ack per message, until killed or told to stop."""
    try:
        conn = pika.BlockingConnection(pika.URLParameters(url))
        ch = conn.channel()
        ch.basic_qos(prefetch_count=50)
        for method, props, _ in ch.consume(QUEUE, inactivity_timeout=0.2):
            if stop.is_set():
                break
            if method is None:
                continue
            ch.basic_ack(method.delivery_tag)
            acked.append(props.message_id)
    except (pika.exceptions.AMQPError, OSError):
        return  # killed under us


def test_kill_9_while_the_recovered_backlog_drains(broker_factory, tmp_path: Path) -> None:
    """A consumer drains a backlog paged in from the store and the broker is killed mid-way,
    twice: each restart has every message not acked, in order, none twice; acks the
    client sent just before the kill may or may not have been written."""
    data = tmp_path / "data"
    proc = broker_factory(data_dir=data, env=ENV)
    confirmed = publish_confirmed(proc.url, "d", 2000)
    acked: list[str] = []
    for cycle in range(2):
        proc.kill()
        proc = broker_factory(data_dir=data, env=ENV)
        settled = set(acked)
        stop = threading.Event()
        mine: list[str] = []
        consumer = threading.Thread(target=_consume, args=(proc.url, mine, stop), daemon=True)
        consumer.start()
        deadline = time.monotonic() + 60
        while len(mine) < 400 and time.monotonic() < deadline:
            time.sleep(0.005)
        proc.kill()  # mid-drain: the pager is reading the store's segments
        stop.set()
        consumer.join(30)
        assert len(mine) >= 400, f"cycle {cycle}: only {len(mine)} delivered"
        left = [m for m in confirmed if m not in settled]
        assert mine == left[:len(mine)], "delivered out of order"
        acked += mine
        proc = broker_factory(data_dir=data, env=ENV)
        rest = take(proc.url, None, ack=0)
        ids = [m for m, _ in rest]
        assert len(ids) == len(set(ids)), "a message came back twice"
        assert not set(ids) & settled, "a message acked in an earlier cycle came back"
        # whatever the kill cut, the rest is a suffix of the publish order
        assert ids == left[len(left) - len(ids):]
        assert len(ids) >= len(left) - len(mine), "confirmed messages lost"
        acked = [m for m in confirmed if m not in set(ids)]
    assert proc.stop() == 0
