"""x-delayed-message exchanges at scale, against real broker processes: messages not due soon wait
in bucket files on disk, come out on time and in due order, persistent ones survive a kill -9, and
the schedule (GET /api/exchanges/{vhost}/{name}/schedule) counts them by due time."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pika
import pytest
from e2e_support import unique, wait_until

pytestmark = pytest.mark.timeout(120)

HOUR, DAY = 3_600_000, 86_400_000


def spilled_bytes(data_dir: Path) -> int:
    return sum(p.stat().st_size for p in (data_dir / "delayed").rglob("*") if p.is_file())


def schedule(http: httpx.Client, ex: str) -> dict[str, int | None]:
    body = http.get(f"/api/exchanges/%2F/{ex}/schedule").json()
    return {b["due_within_seconds"]: b["count"] for b in body["histogram"]}


def consume(ch, queue: str, n: int, timeout: float = 20.0) -> list[tuple[float, bytes, dict]]:
    """``n`` messages with the time each arrived."""
    got: list[tuple[float, bytes, dict]] = []
    for method, props, body in ch.consume(queue, auto_ack=True, inactivity_timeout=timeout):
        if method is None:
            break
        got.append((time.time(), body, props.headers or {}))
        if len(got) == n:
            break
    ch.cancel()
    return got


def test_far_messages_wait_on_disk_and_near_ones_come_out_on_time(broker_factory):
    proc = broker_factory()
    ex, q = unique("sched"), unique("sched-q")
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.exchange_declare(ex, "x-delayed-message", arguments={"x-delayed-type": "direct"})
    ch.queue_declare(q, exclusive=True)
    ch.queue_bind(q, ex, "k")
    big = b"f" * 4096
    for i in range(600):  # 2.4 MB due in two hours and in three days: buckets on disk
        ch.basic_publish(ex, "k", big, pika.BasicProperties(headers={"x-delay": 2 * HOUR if i % 3 else 3 * DAY}))
    sent: list[tuple[float, int]] = []
    for i in range(200):  # due 2.5 to 4.5 s from now: from a level-0 bucket file, through memory
        delay = 2500 + (i * 37) % 2000
        sent.append((time.time() + delay / 1000, i))
        ch.basic_publish(ex, "k", str(i).encode(), pika.BasicProperties(headers={"x-delay": delay, "i": i}))
    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10) as http:
        assert wait_until(lambda: http.get(f"/api/exchanges/%2F/{ex}").json().get("messages_delayed") == 800)
        counts = schedule(http, ex)
        assert counts[60] == 200 and counts[21600] == 400 and counts[604800] == 200 and sum(counts.values()) == 800
        assert spilled_bytes(proc.data_dir) > 1 << 20
        got = consume(ch, q, 200)
        assert len(got) == 200
        due = dict((i, d) for d, i in sent)
        for arrived, _, headers in got:
            lateness = arrived - due[headers["i"]]
            assert -0.05 < lateness < 2.0, lateness  # never early (both clocks are this machine's)
        dues = [due[h["i"]] for _, _, h in got]
        # in due order (the due times here are the client's estimate, a few ms before the broker's)
        assert all(b > a - 0.05 for a, b in zip(dues, dues[1:]))
        assert schedule(http, ex)[60] == 0 and http.get(f"/api/exchanges/%2F/{ex}").json()["messages_delayed"] == 600
        ch.exchange_delete(ex)  # its spilled messages go with it
        assert http.get(f"/api/exchanges/%2F/{ex}/schedule").status_code == 404
    conn.close()


def test_persistent_delayed_messages_survive_kill_9_and_are_spilled_again(broker_factory):
    proc = broker_factory()
    ex, q = unique("dur-sched"), unique("dur-sched-q")
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare(ex, "x-delayed-message", durable=True, arguments={"x-delayed-type": "direct"})
    ch.queue_declare(q, durable=True)
    ch.queue_bind(q, ex, "k")
    for i in range(300):  # confirmed: on disk in the store before kill -9
        ch.basic_publish(ex, "k", b"p" * 2048 + str(i).encode(),
                         pika.BasicProperties(delivery_mode=2, headers={"x-delay": HOUR - 120_000 if i % 2 else 6000 + i * 10}))
    conn.close()
    proc.kill()
    proc = broker_factory(data_dir=proc.data_dir)
    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10) as http:
        counts = schedule(http, ex)
        # the hour's half is all scheduled; of the seconds' half, what fell due while the broker
        # restarted (a busy machine) may be in the queue already: the consume below counts each once
        assert counts[3600] == 150 and 150 <= sum(counts.values()) <= 300
        conn = pika.BlockingConnection(pika.URLParameters(proc.url))
        ch = conn.channel()
        got = consume(ch, q, 150)
        bodies = [int(b[2048:]) for _, b, _ in got]
        assert bodies == [i for i in range(300) if i % 2 == 0]  # each once, in due order
        assert wait_until(lambda: sum(schedule(http, ex).values()) == 150)
        conn.close()


def test_schedule_of_an_exchange_that_holds_nothing_is_refused(broker):
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as http:
        r = http.get("/api/exchanges/%2F/amq.direct/schedule")
        assert r.status_code == 400 and "is not of type 'x-delayed-message'" in r.json()["reason"]
        assert http.get("/api/exchanges/%2F/no-such-exchange/schedule").status_code == 404
        assert "messages_delayed" not in http.get("/api/exchanges/%2F/amq.direct").json()
