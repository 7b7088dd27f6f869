"""Durability against real broker processes: kill -9 while consumers ack, what a clean restart
keeps, delivery counts across restarts, idle disk reclaim, the disk alarm, spilled persistent
messages across a restart, and a deep spilled queue's memory and order."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pika
import pika.exceptions
import pytest

pytestmark = pytest.mark.timeout(180)

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def dir_bytes(path: Path) -> int:
    """Bytes of the files under path; a segment the broker deletes while we walk counts as 0."""
    total = 0
    for p in path.rglob("*"):
        try:
            total += p.stat().st_size if p.is_file() else 0
        except FileNotFoundError:
            pass
    return total


def barrier(ch) -> None:
    """A confirmed persistent publish on a channel in confirm mode: its fsync covers every store
    operation the broker took before it on this connection (acks included)."""
    ch.basic_publish("", "barrier", b"b", PERSISTENT)


def poll(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_kill_9_while_consumer_acks_loses_nothing_and_returns_no_confirmed_ack(broker_factory):
    proc = broker_factory()
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("acking", durable=True)
    ch.queue_declare("barrier", durable=True)
    total = 2_000
    for i in range(total):
        ch.basic_publish("", "acking", b"%d" % i, PERSISTENT)  # each confirmed
    ch.basic_qos(prefetch_count=50)
    acked_sent: set[int] = set()
    acked_confirmed: set[int] = set()
    pending: list[int] = []
    for method, _, body in ch.consume("acking", inactivity_timeout=10):
        assert method is not None
        ch.basic_ack(method.delivery_tag)
        acked_sent.add(int(body))
        pending.append(int(body))
        if len(pending) == 100:
            barrier(ch)  # a round trip whose confirm covers the acks before it
            acked_confirmed.update(pending)
            pending.clear()
        if len(acked_sent) == 1_037:
            break  # 37 acks in flight, 50 deliveries unacked
    proc.kill()
    proc = broker_factory(data_dir=proc.data_dir)
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    back: list[int] = []
    while True:
        method, _, body = ch.basic_get("acking", auto_ack=True)
        if method is None:
            break
        back.append(int(body))
    conn.close()
    assert not acked_confirmed & set(back)  # nothing acked (and confirmed by a round trip) returns
    assert set(range(total)) - acked_sent <= set(back)  # nothing unacked is lost
    assert len(back) == len(set(back)) and back == sorted(back)  # once each, in order


def test_clean_restart_keeps_users_vhosts_permissions_flags_and_x_death(broker_factory):
    proc = broker_factory()
    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10) as http:
        assert http.put("/api/vhosts/kept-vh").status_code in (201, 204)
        assert http.put("/api/users/alice", json={"password": "s3cret", "tags": "monitoring"}).status_code in (201, 204)
        assert http.put("/api/permissions/kept-vh/alice",
                        json={"configure": "^a.*", "write": ".*", "read": ".*"}).status_code in (201, 204)
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare("dlx-r", "fanout", durable=True)
    ch.queue_declare("dead-r", durable=True)
    ch.queue_bind("dead-r", "dlx-r")
    ch.queue_declare("src-r", durable=True, arguments={"x-dead-letter-exchange": "dlx-r"})
    ch.queue_declare("redeliver-r", durable=True)
    ch.queue_declare("excl-r", durable=True, exclusive=True)
    ch.basic_publish("", "excl-r", b"exclusive", PERSISTENT)
    ch.basic_publish("", "src-r", b"to-die", PERSISTENT)
    ch.basic_publish("", "redeliver-r", b"again", PERSISTENT)
    method, _, _ = ch.basic_get("src-r")
    ch.basic_reject(method.delivery_tag, requeue=False)
    other = conn.channel()
    assert other.basic_get("redeliver-r")[2] == b"again"
    other.close()  # unacked: back in the queue, redelivered
    ch.queue_declare("barrier", durable=True)
    barrier(ch)
    conn.close()
    assert proc.stop() == 0
    proc = broker_factory(data_dir=proc.data_dir)
    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10) as http:
        assert http.get("/api/vhosts/kept-vh").status_code == 200
        assert http.get("/api/users/alice").json()["tags"] in ("monitoring", ["monitoring"])
        perm = http.get("/api/permissions/kept-vh/alice").json()
        assert (perm["configure"], perm["write"], perm["read"]) == ("^a.*", ".*", ".*")
    alice = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", proc.amqp_port, "kept-vh", pika.PlainCredentials("alice", "s3cret")))
    alice.channel().queue_declare("a-queue")  # the permission works after the restart
    alice.close()
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        ch.queue_declare("excl-r", passive=True)  # exclusive queues do not survive
    ch = conn.channel()
    ch.queue_declare("excl-r", durable=True)  # nor do their messages, under the same name
    assert ch.basic_get("excl-r")[0] is None
    method, _, body = ch.basic_get("redeliver-r", auto_ack=True)
    assert body == b"again" and method.redelivered
    method, props, body = ch.basic_get("dead-r", auto_ack=True)
    assert body == b"to-die"
    death = props.headers["x-death"][0]
    assert death["queue"] == "src-r" and death["reason"] == "rejected"
    assert ch.basic_get("src-r")[0] is None
    conn.close()


def test_delivery_limit_counts_deliveries_before_a_restart(broker_factory):
    proc = broker_factory()
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("limited", durable=True, arguments={"x-delivery-limit": 2})
    ch.queue_declare("barrier", durable=True)
    ch.basic_publish("", "limited", b"poison", PERSISTENT)
    for _ in range(2):  # two deliveries, two returns: at the limit, still queued
        method, _, _ = ch.basic_get("limited")
        ch.basic_nack(method.delivery_tag, requeue=True)
    barrier(ch)
    conn.close()
    assert proc.stop() == 0
    proc = broker_factory(data_dir=proc.data_dir)
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    method, _, body = ch.basic_get("limited")
    assert body == b"poison" and method.redelivered
    ch.basic_nack(method.delivery_tag, requeue=True)  # the third return passes the limit
    assert ch.basic_get("limited")[0] is None
    conn.close()


def test_idle_broker_reclaims_dead_segments(broker_factory):
    proc = broker_factory(env={"HEADRACE_SEGMENT_MAX_BYTES": "8192"})
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("churn", durable=True)
    body = b"x" * 1000
    for _ in range(400):  # ~400 KB over ~50 segments
        ch.basic_publish("", "churn", body, PERSISTENT)
    store = proc.data_dir / "store"
    grown = dir_bytes(store)
    assert grown > 300_000
    while ch.basic_get("churn", auto_ack=True)[0] is not None:
        pass
    assert ch.queue_declare("churn", passive=True).method.message_count == 0
    conn.close()
    # nothing more happens: the broker is idle, and must still give the dead segments back
    assert poll(lambda: dir_bytes(store) < 40_000, 20), dir_bytes(store)


def test_disk_alarm_blocks_amqp_and_http_publishers(broker_factory):
    proc = broker_factory(env={"HEADRACE_DISK_FREE_LIMIT": str(1 << 60)})  # more than any disk
    events: list[str] = []
    params = pika.URLParameters(proc.url)
    params.blocked_connection_timeout = 30
    conn = pika.BlockingConnection(params)
    conn.add_on_connection_blocked_callback(lambda c, frame: events.append(frame.method.reason))
    ch = conn.channel()
    ch.queue_declare("disk-q")
    ch.basic_publish("", "disk-q", b"m")
    deadline = time.monotonic() + 15
    while not events and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.2)
    assert events == ["low on disk"]
    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10) as http:
        assert http.get("/api/overview").json()["alarms"] == ["disk"]
        refused = http.post("/api/exchanges/%2F/amq.default/publish",
                            json={"routing_key": "disk-q", "payload": "x", "payload_encoding": "string",
                                  "properties": {}})
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"] and "Retry-After" in refused.headers
    consumer = pika.BlockingConnection(pika.URLParameters(proc.url))
    assert consumer.channel().queue_declare("disk-q", passive=True).method.message_count <= 1
    consumer.close()


def test_spilled_persistent_messages_come_back_in_order_after_restart(broker_factory):
    env = {"HEADRACE_QUEUE_MAX_RESIDENT_MESSAGES": "500"}
    proc = broker_factory(env=env)
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.queue_declare("spilled-p", durable=True)
    ch.queue_declare("barrier", durable=True)
    total = 5_000
    impl = ch._impl
    for i in range(total):
        impl.basic_publish("", "spilled-p", b"%06d" % i, PERSISTENT)
        if i % 500 == 499:
            conn.process_data_events(0)
    ch.confirm_delivery()
    barrier(ch)  # every publish before it is on disk
    assert dir_bytes(proc.data_dir / "spill") > 0
    conn.close()
    assert proc.stop() == 0
    proc = broker_factory(data_dir=proc.data_dir, env=env)
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    assert ch.queue_declare("spilled-p", passive=True).method.message_count == total
    ch.basic_qos(prefetch_count=500)
    expected = 0
    for method, _, body in ch.consume("spilled-p", inactivity_timeout=15):
        assert method is not None, f"stalled at {expected}"
        assert int(body) == expected
        expected += 1
        if expected % 250 == 0:
            ch.basic_ack(method.delivery_tag, multiple=True)
        if expected == total:
            break
    ch.cancel()
    conn.close()


SPILL_TOTAL = 300_000


def test_deep_spill_keeps_memory_bounded_and_order_exact(broker_factory):
    proc = broker_factory(env={"HEADRACE_QUEUE_MAX_RESIDENT_MESSAGES": "10000"})
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.queue_declare("deep")
    baseline = proc.rss()
    impl = ch._impl
    for i in range(SPILL_TOTAL):
        impl.basic_publish("", "deep", b"%07d" % i)
        if i % 1000 == 999:
            conn.process_data_events(0)
    assert ch.queue_declare("deep", passive=True).method.message_count == SPILL_TOTAL
    grown = proc.rss() - baseline
    assert grown < 40 * 2**20, grown  # ~10k resident entries, the rest on disk
    ch.basic_qos(prefetch_count=1000)
    expected = 0
    for method, _, body in ch.consume("deep", inactivity_timeout=15):
        assert method is not None, f"stalled at {expected}"
        assert int(body) == expected
        expected += 1
        if expected % 500 == 0:
            ch.basic_ack(method.delivery_tag, multiple=True)
        if expected == SPILL_TOTAL:
            break
    ch.cancel()
    conn.close()


def test_purge_of_spilled_durable_queue_survives_kill_9_and_spares_unacked(broker_factory):
    proc = broker_factory(env={"HEADRACE_QUEUE_MAX_RESIDENT_MESSAGES": "500"})
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("purged", durable=True)
    ch.queue_declare("barrier", durable=True)
    for i in range(3_000):
        ch.basic_publish("", "purged", b"%d" % i, PERSISTENT)
    held = conn.channel()
    held_ids = [int(held.basic_get("purged")[2]) for _ in range(2)]  # delivered, never acked
    assert ch.queue_purge("purged").method.message_count == 2_998
    ch.basic_publish("", "purged", b"after", PERSISTENT)
    barrier(ch)
    proc.kill()
    proc = broker_factory(data_dir=proc.data_dir)
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    back = []
    while (got := ch.basic_get("purged", auto_ack=True))[0] is not None:
        back.append(got[2])
    conn.close()
    assert back == [b"%d" % i for i in held_ids] + [b"after"]


def test_fsync_window_and_batch_cap_still_confirm_everything(broker_factory):
    env = {"HEADRACE_FSYNC_WINDOW_MS": "20", "HEADRACE_FSYNC_BATCH_MAX": "7"}
    proc = broker_factory(env=env)
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.queue_declare("windowed", durable=True)
    ch.queue_declare("barrier", durable=True)
    impl = ch._impl
    for i in range(100):  # one burst: groups of at most 7 records, each after a 20 ms window
        impl.basic_publish("", "windowed", b"%d" % i, PERSISTENT)
    ch.confirm_delivery()
    started = time.monotonic()
    barrier(ch)
    assert time.monotonic() - started < 10
    proc.kill()
    proc = broker_factory(data_dir=proc.data_dir, env=env)
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    assert ch.queue_declare("windowed", passive=True).method.message_count == 100
    conn.close()
