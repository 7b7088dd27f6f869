"""``writeStream.format("headrace")`` and ``headrace stream-bridge``: micro-batches published into an
exchange exactly once, also when the bridge's driver is SIGKILLed in the middle of a batch and its
query restarts from the checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pika
import pytest
from tcp_relay import Relay, via
from test_spark_replay import spark_env, wait_disconnected

from headrace.cli.stream_bridge import bridge_query, sink_options
from headrace.spark_bridge.amqp_publisher import ConfirmPublisher

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def fill(proc, n: int, *, exchange: str = "orders", size: int = 20) -> None:
    """A mirrored topic exchange ``exchange`` with ``n`` confirmed messages, body ``<i>-xxx..``."""
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.exchange_declare(exchange, "topic", durable=True, arguments={"x-mirror": True})
    conn.close()
    pub = ConfirmPublisher(proc.url, window=500).connect()
    for i in range(n):
        pub.publish(exchange, f"k.{i % 5}", b"\x00\x00", b"%d-" % i + b"x" * size)
    pub.wait_confirms()
    pub.close()


def target(proc, exchange: str, queue: str, cache: int | None) -> str:
    """A topic exchange (with a dedup window of ``cache`` keys) and a queue bound to it; returns the
    broker's URL, for ``count`` and ``drain``, which connect afresh: a connection left idle while a
    Spark job runs for minutes would miss its heartbeats."""
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    args = {"x-message-deduplication": True, "x-cache-size": cache} if cache else None
    ch.exchange_declare(exchange, "topic", durable=True, arguments=args)
    ch.queue_declare(queue, durable=True)
    ch.queue_bind(queue, exchange, "#")
    conn.close()
    return str(proc.url)


def drain(url: str, queue: str) -> list[tuple[str, bytes, dict]]:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    got = []
    while True:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            conn.close()
            return got
        got.append((method.routing_key, body, props.headers or {}))


class Counter:
    """The queue's message count, asked over one connection while it is polled."""

    def __init__(self, url: str, queue: str) -> None:
        self.conn = pika.BlockingConnection(pika.URLParameters(url))
        self.ch, self.queue = self.conn.channel(), queue

    def __call__(self) -> int:
        return self.ch.queue_declare(self.queue, passive=True).method.message_count

    def close(self) -> None:
        self.conn.close()


def count(url: str, queue: str) -> int:
    counter = Counter(url, queue)
    try:
        return counter()
    finally:
        counter.close()


def test_sink_publishes_each_row_once_with_its_key(spark, broker_factory, tmp_path):
    proc = broker_factory()
    fill(proc, 700)
    url = target(proc, "copy", "copy-q", 1000)
    df = spark.readStream.format("headrace").option("path", str(proc.data_dir)).option("exchange", "orders") \
        .option("maxRecordsPerTrigger", "300").load()
    query = df.select("routing_key", "body").writeStream.format("headrace").option("amqpUrl", proc.url) \
        .option("exchange", "copy").option("checkpointLocation", str(tmp_path / "chk")) \
        .trigger(availableNow=True).start()
    query.awaitTermination(120)
    assert query.exception() is None
    got = drain(url, "copy-q")
    assert sorted(int(body.split(b"-")[0]) for _, body, _ in got) == list(range(700))
    assert all(rk == f"k.{int(body.split(b'-')[0]) % 5}" for rk, body, _ in got)
    keys = [h["x-deduplication-header"] for _, _, h in got]
    assert len(set(keys)) == 700 and keys[0] == f"{query.id}:0:0:0"  # <query id>:<batch>:<partition>:<row>

    # a batch published again under the same keys (a re-run) is dropped by the window
    rerun = spark.readStream.format("headrace").option("path", str(proc.data_dir)).option("exchange", "orders") \
        .option("maxRecordsPerTrigger", "300").load().select("routing_key", "body", "exchange", "offset")
    q2 = rerun.writeStream.format("headrace").option("amqpUrl", proc.url).option("exchange", "copy") \
        .option("keyColumns", "exchange,offset").option("checkpointLocation", str(tmp_path / "chk2")) \
        .trigger(availableNow=True)
    for _ in range(2):  # two queries, two checkpoints: the second publishes nothing new
        q = q2.option("checkpointLocation", str(tmp_path / f"chk2-{_}")).start()
        q.awaitTermination(120)
        assert q.exception() is None
    got = drain(url, "copy-q")
    assert len(got) == 700 and {h["x-deduplication-header"] for _, _, h in got} == {f"orders:{i}" for i in range(700)}


def test_sink_refuses_a_missing_exchange_or_body_column(spark, broker_factory, tmp_path):
    proc = broker_factory()
    fill(proc, 10)
    df = spark.readStream.format("headrace").option("path", str(proc.data_dir)).option("exchange", "orders").load()
    for frame, exchange, message in ((df, "nowhere", "the headrace sink's exchange 'nowhere' does not exist"),
                                     (df.select("offset"), "orders", "the headrace sink needs the column(s) body")):
        with pytest.raises(Exception) as info:
            q = frame.writeStream.format("headrace").option("amqpUrl", proc.url).option("exchange", exchange) \
                .option("checkpointLocation", str(tmp_path / exchange)).trigger(availableNow=True).start()
            q.awaitTermination(60)
            raise AssertionError(str(q.exception()))
        assert message in str(info.value)


def bridge_cmd(proc, checkpoint, *extra: str, amqp_url: str | None = None) -> list[str]:
    return [sys.executable, "-m", "headrace", "stream-bridge", "--data-dir", str(proc.data_dir), "--exchange", "orders",
            "--to-exchange", "copy", "--amqp-url", amqp_url or proc.url, "--http-url", proc.http_url,
            "--checkpoint", str(checkpoint),
            "--master", "local[1]", "--conf", "spark.ui.enabled=false",
            "--conf", "spark.driver.extraJavaOptions=-XX:+UseSerialGC -Xshare:auto -XX:TieredStopAtLevel=1", *extra]


BATCH = 400
N = 5 * BATCH  # five micro-batches: the kill lands after one and half the next


def test_bridge_killed_mid_batch_and_restarted_publishes_everything_once(spark, broker_factory, tmp_path):
    """``headrace stream-bridge`` SIGKILLed mid-batch; the restart is the bridge's own query
    (``bridge_query`` with the command's source and sink options, the same checkpoint) in the
    session's Spark: it publishes the killed batch again, the window drops its first part, and the
    target holds every message once. The bridge publishes through a relay that lets exactly one
    batch and a half through: the kill always lands mid-batch."""
    proc = broker_factory()
    fill(proc, N)
    url = target(proc, "copy", "copy-q", 2 * BATCH)
    checkpoint = tmp_path / "chk"
    log = open(tmp_path / "bridge.log", "w")
    relay = Relay("127.0.0.1", proc.amqp_port, hold_after_publishes=BATCH + BATCH // 2)
    polled = Counter(url, "copy-q")
    bridge = subprocess.Popen(bridge_cmd(proc, checkpoint, "--max-records-per-trigger", str(BATCH),
                                         "--trigger-interval", "0", "--window", "4", amqp_url=via(proc.url, relay)),
                              env=spark_env(), stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while (n := polled()) < BATCH + BATCH // 2:  # a batch through, and half the next: the rest is held
            assert bridge.poll() is None, (tmp_path / "bridge.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"only {n} published"
            time.sleep(0.01)
        os.killpg(bridge.pid, signal.SIGKILL)  # the driver: its Python, its JVM, its Python workers
        bridge.wait(10)
    finally:
        if bridge.poll() is None:
            os.killpg(bridge.pid, signal.SIGKILL)
        log.close()
        polled.close()
        relay.close()
    wait_disconnected(proc.http_url, keep=0)  # what the killed sockets had written out is counted
    before = count(url, "copy-q")
    assert before == BATCH + BATCH // 2
    source = {"exchange": "orders", "vhost": "/", "startingOffsets": "earliest",
              "maxRecordsPerTrigger": str(BATCH), "path": str(proc.data_dir)}
    query = bridge_query(spark, source, sink_options(proc.url, "copy", "x-deduplication-header", 4, str(checkpoint)),
                         None)
    query.awaitTermination(180)
    assert query.exception() is None
    republished = sum(p["numInputRows"] for p in query.recentProgress)
    assert republished > N - before  # the killed batch went out again: the window dropped its first part
    got = drain(url, "copy-q")
    offsets = sorted(int(body.split(b"-")[0]) for _, body, _ in got)
    assert offsets == list(range(N)), (len(offsets), len(set(offsets)))


def test_bridge_refuses_a_target_without_a_large_enough_window(broker_factory, tmp_path):
    proc = broker_factory()
    fill(proc, 5)
    target(proc, "copy", "copy-q", 100)
    r = subprocess.run(bridge_cmd(proc, tmp_path / "chk", "--max-records-per-trigger", "500"), env=spark_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "target exchange 'copy' keeps 100 dedup keys (x-cache-size), fewer than the 500" in r.stderr
