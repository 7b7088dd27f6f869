"""Persistent delayed messages that came due while the broker was down (a real ``headrace serve``
killed with SIGKILL, then restarted after their due times): every one is delivered exactly once,
none early, the oldest first, and the restarted broker reads them back a bounded chunk a tick
(``delayed_read_bytes``) from its bucket files instead of holding them all at once: its peak RSS
stays far below their size."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pika
import pytest
from e2e_support import wait_until

pytestmark = pytest.mark.timeout(120)

EXCHANGE, QUEUE = "od-x", "od-q"
OVERDUE, LATER, BIG = 200, 100, 256 << 10  # 200 x 256 KiB overdue: ~52 MB
# small reads everywhere: the store reads a whole segment at a time when it rebuilds its index
ENV = {"HEADRACE_DELAYED_READ_BYTES": str(1 << 20), "HEADRACE_QUEUE_MAX_RESIDENT_BYTES": str(1 << 20),
       "HEADRACE_SEGMENT_MAX_BYTES": str(4 << 20)}


def peak_rss(pid: int) -> int:
    """The process's peak resident set size so far (VmHWM), in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_messages_due_while_down_come_out_once_oldest_first_in_bounded_memory(broker_factory, tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc = broker_factory(data_dir=data, env=ENV)
    idle = proc.rss()
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.exchange_declare(EXCHANGE, "x-delayed-message", durable=True, arguments={"x-delayed-type": "direct"})
    ch.queue_declare(QUEUE, durable=True)
    ch.queue_bind(QUEUE, EXCHANGE, "k")
    # one transaction: its publishes are placed together at the commit (one base for every due
    # time) and commit-ok comes once they are on disk, without a round trip per message
    ch.tx_select()
    delay: dict[str, int] = {}
    for i in range(OVERDUE):  # due 8 to 9 s after the commit, in a shuffled order
        delay[f"o{i}"] = 8000 + (i * 7919) % 1000
        ch.basic_publish(EXCHANGE, "k", b"o" * BIG, pika.BasicProperties(
            delivery_mode=2, message_id=f"o{i}", headers={"x-delay": delay[f"o{i}"]}))
    for i in range(LATER):  # due after the restart
        delay[f"l{i}"] = 16000 + i * 20
        ch.basic_publish(EXCHANGE, "k", b"l", pika.BasicProperties(
            delivery_mode=2, message_id=f"l{i}", headers={"x-delay": delay[f"l{i}"]}))
    committed = time.time()
    ch.tx_commit()
    assert time.time() < committed + 8, "committed too slowly to be held at the kill"
    due = {m: committed + d / 1000 for m, d in delay.items()}  # at or before the broker's due time
    conn.close()
    proc.kill()
    last_overdue = max(due[f"o{i}"] for i in range(OVERDUE))
    assert wait_until(lambda: time.time() > last_overdue + 0.2, timeout=15)  # all due while down

    proc = broker_factory(data_dir=data, env=ENV)
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=50)
    seen: dict[str, float] = {}
    order: list[str] = []

    def on_message(c, method, props, body: bytes) -> None:
        assert props.message_id not in seen, f"{props.message_id} delivered twice"
        seen[props.message_id] = time.time() - due[props.message_id]
        order.append(props.message_id)
        c.basic_ack(method.delivery_tag)

    ch.basic_consume(QUEUE, on_message)
    assert wait_until(lambda: len(seen) >= len(due), conn, timeout=60), (len(seen), proc.log[-3000:])
    assert sorted(seen) == sorted(due)
    assert min(seen.values()) > -0.05, "delivered before its delay ended"
    overdue = [m for m in order if m.startswith("o")]
    assert order[:OVERDUE] == overdue  # every overdue one before any of the later ones
    delays = [delay[m] for m in overdue]  # the due times less one base
    # the oldest first, by the second of due time (the order within a second is that of the reads)
    assert all(d > max(delays[:i], default=0) - 1000 for i, d in enumerate(delays))
    peak = peak_rss(proc.proc.pid)
    # read back 1 MiB a tick this peaks ~21 MB over the idle broker; all at once, ~75 MB
    assert peak - idle < OVERDUE * BIG * 3 // 4, (peak, idle)
    conn.close()
    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10) as http:
        assert http.get(f"/api/exchanges/%2F/{EXCHANGE}").json()["messages_delayed"] == 0
