"""kill -9 while publishers wait for confirms and consumers ack: nothing confirmed is lost, nothing
acked comes back, nothing is delivered twice after recovery."""

from __future__ import annotations

import threading
from pathlib import Path

import pika
import pika.exceptions
import pytest
from e2e_support import sync_marker

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

QUEUE = "crash-durable"
PUBLISHERS = 3
KILL_AFTER = 300  # confirmed messages across publishers before the kill


def publisher(url: str, prefix: str, confirmed: list[str], enough: threading.Event, lock: threading.Lock,
              total: list[int]) -> None:
    try:
        conn = pika.BlockingConnection(pika.URLParameters(url))
        ch = conn.channel()
        ch.confirm_delivery()
        i = 0
        while True:
            mid = f"{prefix}-{i}"
            ch.basic_publish("", QUEUE, mid.encode(), pika.BasicProperties(delivery_mode=2, message_id=mid))
            confirmed.append(mid)
            i += 1
            with lock:
                total[0] += 1
                if total[0] >= KILL_AFTER:
                    enough.set()
    except (pika.exceptions.AMQPError, OSError):
        return  # the broker died under us: what was confirmed is in `confirmed`


def drain_all(url: str) -> list[str]:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ids = []
    while True:
        method, props, body = ch.basic_get(QUEUE)
        if method is None:
            break
        ids.append(props.message_id)
    if ids:
        ch.basic_ack(0, multiple=True)
    sync_marker(ch)  # the acks are on disk
    conn.close()
    return ids


def test_confirmed_messages_survive_repeated_kill_9(broker_factory, tmp_path: Path):
    data = tmp_path / "data"
    proc = broker_factory(data_dir=data)
    setup = pika.BlockingConnection(pika.URLParameters(proc.url))
    setup.channel().queue_declare(QUEUE, durable=True)
    setup.close()
    seen_after_ack: set[str] = set()
    for cycle in range(3):
        confirmed_lists: list[list[str]] = [[] for _ in range(PUBLISHERS)]
        enough = threading.Event()
        lock = threading.Lock()
        total = [0]
        threads = [threading.Thread(target=publisher, args=(proc.url, f"c{cycle}p{n}", confirmed_lists[n],
                                                            enough, lock, total), daemon=True)
                   for n in range(PUBLISHERS)]
        for t in threads:
            t.start()
        assert enough.wait(60), proc.log[-3000:]
        proc.kill()  # SIGKILL mid-stream
        for t in threads:
            t.join(30)
        # the next cycle's group fsyncs run on the event loop or, when forced, in a worker thread
        proc = broker_factory(data_dir=data, env={"HEADRACE_FSYNC_INLINE_BELOW_MS": "0" if cycle % 2 == 0 else "1"})
        recovered = drain_all(proc.url)
        confirmed = {mid for lst in confirmed_lists for mid in lst}
        assert len(recovered) == len(set(recovered)), "a message came back twice"
        missing = confirmed - set(recovered)
        assert not missing, f"cycle {cycle}: {len(missing)} confirmed messages lost"
        assert not (set(recovered) & seen_after_ack), "an acked message came back"
        seen_after_ack |= set(recovered)
        # the acks above are on disk (the marker's confirm covers them): kill again, nothing returns
        proc.kill()
        proc = broker_factory(data_dir=data)
        conn = pika.BlockingConnection(pika.URLParameters(proc.url))
        assert conn.channel().queue_declare(QUEUE, durable=True, passive=True).method.message_count == 0
        conn.close()
    assert proc.stop() == 0


def test_unacked_deliveries_come_back_redelivered_after_kill(broker_factory, tmp_path: Path):
    proc = broker_factory()
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.queue_declare("redeliver", durable=True)
    ch.confirm_delivery()
    for i in range(10):
        ch.basic_publish("", "redeliver", b"%d" % i, pika.BasicProperties(delivery_mode=2))
    got = [ch.basic_get("redeliver") for _ in range(4)]
    ch.basic_ack(got[1][0].delivery_tag)  # ack one of the four, leave three unacked
    sync_marker(ch)  # the ack and the deliveries are on disk
    proc.kill()
    proc = broker_factory(data_dir=proc.data_dir)
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    bodies, flags = [], []
    while True:
        method, _, body = ch.basic_get("redeliver", auto_ack=True)
        if method is None:
            break
        bodies.append(body)
        flags.append(method.redelivered)
    assert bodies == [b"0", b"2", b"3", b"4", b"5", b"6", b"7", b"8", b"9"]
    assert flags[:3] == [True, True, True]
    assert not any(flags[3:])
    conn.close()


def test_committed_transaction_survives_kill(broker_factory):
    proc = broker_factory()
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.queue_declare("tx-durable", durable=True)
    ch.tx_select()
    for i in range(20):
        ch.basic_publish("", "tx-durable", b"%d" % i, pika.BasicProperties(delivery_mode=2))
    ch.tx_commit()  # commit-ok only after the fsync covering all 20
    proc.kill()
    proc = broker_factory(data_dir=proc.data_dir)
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    assert conn.channel().queue_declare("tx-durable", durable=True, passive=True).method.message_count == 20
    conn.close()
