"""Replay jobs against a real broker: progress keyed by the whole job, --rate shared by the
partitions that have rows, and the ``headrace replay`` / ``headrace export`` commands as
subprocesses (a replay SIGKILLed midway resumes without duplicates or losses)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pika
import pytest

from headrace.persistence.mirror_log import MirrorLog, MirrorRecord
from headrace.spark_bridge.export import read_log
from headrace.spark_bridge.replay import load_progress, replay

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

T0 = 1_700_000_000_000


def write_log(root: Path, exchange: str = "orders", n: int = 60, keys: int = 3, start: int = 0) -> None:
    """Records ``start`` to ``n - 1`` (body = offset, key ``k.<offset % keys>``), appended to the log."""
    log = MirrorLog(root, "/", exchange, segment_max_bytes=2048, index_interval_bytes=256)
    log.recover()
    log.append_many([MirrorRecord(T0 + i, f"k.{i % keys}", b"", b"%d" % i) for i in range(start, n)])
    log.close()


class Target:
    """A queue bound to ``exchange`` and a consumer that collects (routing key, body, headers)."""

    def __init__(self, url: str, exchange: str, queue: str, arguments: dict | None = None) -> None:
        self.conn = pika.BlockingConnection(pika.URLParameters(url))
        self.ch = self.conn.channel()
        self.ch.exchange_declare(exchange, "topic", durable=True, arguments=arguments)
        self.ch.queue_declare(queue, durable=True)
        self.ch.queue_bind(queue, exchange, "#")
        self.got: list[tuple[str, int, dict, float]] = []
        self.queue = queue
        # a prefetch keeps what this (slow) consumer has not taken yet in the queue, where
        # ``ready`` can count it, instead of in its socket
        self.ch.basic_qos(prefetch_count=1000)
        self.ch.basic_consume(queue, self._on_message)
        self._counter = self.conn.channel()

    def _on_message(self, channel, method, props, body) -> None:
        self.got.append((method.routing_key, int(body), props.headers or {}, time.monotonic()))
        channel.basic_ack(method.delivery_tag)

    def ready(self) -> int:
        """Messages ready in the queue (the broker's count; deliveries not dispatched here)."""
        return self._counter.queue_declare(self.queue, passive=True).method.message_count

    def pump(self, seconds: float = 0.05) -> None:
        self.conn.process_data_events(time_limit=seconds)

    def wait_count(self, n: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(self.got) < n and time.monotonic() < deadline:
            self.pump(0.1)
        self.pump(0.2)  # anything beyond n (a duplicate) would show up here
        assert len(self.got) == n

    def close(self) -> None:
        self.conn.close()


def test_default_progress_is_per_job_so_another_target_gets_everything(spark, broker_factory):
    proc = broker_factory()
    write_log(proc.data_dir)
    a, b = Target(proc.url, "to-a", "qa"), Target(proc.url, "to-b", "qb")
    assert replay(spark, str(proc.data_dir), "orders", amqp_url=proc.url, to_exchange="to-a") == 60
    assert replay(spark, str(proc.data_dir), "orders", amqp_url=proc.url, to_exchange="to-a") == 0  # resumed
    assert replay(spark, str(proc.data_dir), "orders", amqp_url=proc.url, to_exchange="to-b") == 60
    assert replay(spark, str(proc.data_dir), "orders", amqp_url=proc.url, to_exchange="to-b",
                  routing_key_pattern="k.1") == 20  # another filter is another job
    assert replay(spark, str(proc.data_dir), "orders", amqp_url=proc.url, to_exchange="to-b",
                  from_offset=50) == 10
    a.wait_count(60)
    b.wait_count(90)
    jobs = sorted(p for p in (proc.data_dir / "replay-progress").iterdir())
    assert len(jobs) == 4
    assert {json.loads((j / "job.json").read_text())["to_exchange"] for j in jobs} == {"to-a", "to-b"}
    a.close()
    b.close()


def test_a_finished_job_runs_again_without_the_resume_job_and_sends_what_the_log_gained(spark, broker_factory):
    proc = broker_factory()
    write_log(proc.data_dir, n=30)
    target = Target(proc.url, "fin", "q-fin")
    progress = proc.data_dir / "p"
    tracker = spark.sparkContext.statusTracker()

    def again() -> tuple[int, int]:
        """(published, Spark jobs it took)"""
        before = set(tracker.getJobIdsForGroup())
        sent = replay(spark, str(proc.data_dir), "orders", amqp_url=proc.url, to_exchange="fin",
                      progress_dir=str(progress))
        return sent, len(set(tracker.getJobIdsForGroup()) - before)

    assert again()[0] == 30 and (progress / "finished").exists()
    sent, after_finished = again()
    assert sent == 0
    (progress / "finished").unlink()  # as a run cut short leaves it: the resume job runs first
    sent, after_cut = again()
    assert sent == 0 and after_cut > after_finished and (progress / "finished").exists()
    write_log(proc.data_dir, n=35, start=30)
    assert again()[0] == 5
    target.wait_count(35)
    assert sorted(g[1] for g in target.got) == list(range(35))
    target.close()


def test_rate_is_shared_by_partitions_with_rows(spark, broker_factory, tmp_path):
    proc = broker_factory()
    write_log(proc.data_dir, n=16, keys=1)  # one routing key: one partition of four has rows
    target = Target(proc.url, "paced", "q-paced")
    target.close()
    arrivals: list[float] = []

    def consume() -> None:  # its own connection, so arrival times are taken while replay runs
        conn = pika.BlockingConnection(pika.URLParameters(proc.url))
        ch = conn.channel()
        deadline = time.monotonic() + 120
        for _method, _props, _body in ch.consume("q-paced", auto_ack=True, inactivity_timeout=0.5):
            if _method is not None:
                arrivals.append(time.monotonic())
            if len(arrivals) == 16 or time.monotonic() > deadline:
                break
        ch.cancel()
        conn.close()

    consumer = threading.Thread(target=consume)
    consumer.start()
    assert replay(spark, str(proc.data_dir), "orders", amqp_url=proc.url, to_exchange="paced", rate=20.0,
                  partitions=4, progress_dir=str(tmp_path / "p")) == 16
    consumer.join(120)
    assert len(arrivals) == 16
    span = arrivals[-1] - arrivals[0]
    # 15 gaps at 20/s = 0.75 s; splitting the rate over all 4 partitions would take 3 s
    assert 0.6 < span < 2.0, span


def spark_cli(*args: str) -> list[str]:
    # C1 only: these jobs are short, and the JVM's warm-up, not its peak speed, is what they wait on
    return [sys.executable, "-m", "headrace", *args, "--master", "local[1]",
            "--conf", "spark.sql.shuffle.partitions=2", "--conf", "spark.ui.enabled=false",
            "--conf", "spark.driver.extraJavaOptions=-XX:+UseSerialGC -Xshare:auto -XX:TieredStopAtLevel=1"]


def spark_env() -> dict[str, str]:
    return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}


def run_consuming(args: list[str], target: Target, log: Path, timeout: float = 240) -> str:
    """Runs a replay to its end while ``target`` keeps consuming (a consumer that stops reading for
    minutes misses its heartbeats and the broker closes it); returns what the replay logged."""
    with open(log, "w") as out:
        proc = subprocess.Popen(args, env=spark_env(), stdout=out, stderr=out)
        try:
            deadline = time.monotonic() + timeout
            while proc.poll() is None:
                assert time.monotonic() < deadline, "the replay did not finish"
                target.pump(0.05)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    return text


def wait_disconnected(http_url: str, keep: int, timeout: float = 30) -> None:
    """Polls the broker's HTTP API until it holds only ``keep`` connections: a killed client's
    are gone, so the broker has read and routed everything the kill left in their sockets."""
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=http_url, auth=("guest", "guest"), timeout=10) as http:
        while len(http.get("/api/connections").json()) > keep:
            assert time.monotonic() < deadline, http.get("/api/connections").json()
            time.sleep(0.01)  # the poll's interval


def received_all(target: Target) -> int:
    """Pumps ``target`` until its queue has nothing ready: every message the broker holds was sent
    to it ahead of the count's reply, on the same connection. Returns how many it got."""
    while target.ready():
        target.pump(0.02)
    target.pump(0)
    return len(target.got)


def progress_matches(progress: Path, got: list[tuple[str, int, dict, float]]) -> bool:
    """Every message the consumer saw is recorded as confirmed, and nothing beyond it."""
    last: dict[str, int] = {}
    for rk, i, _, _ in got:
        last[rk] = max(last.get(rk, -1), i)
    saved = load_progress(str(progress)) if progress.is_dir() else {}
    return saved == last


def test_cli_replay_killed_midway_resumes_exactly_once(broker_factory, tmp_path):
    proc = broker_factory()
    n = 45
    write_log(proc.data_dir, n=n)
    # the kill can land while a publish is delivered but its confirm not yet saved: the re-run sends
    # it again and the target's dedup window (the documented set-up) drops it
    target = Target(proc.url, "again", "q-again", {"x-message-deduplication": True, "x-cache-size": 3 * 4 * 1000})
    progress = tmp_path / "progress"
    args = spark_cli("replay", "--data-dir", str(proc.data_dir), "--exchange", "orders", "--to-exchange", "again",
                     "--amqp-url", proc.url, "--http-url", proc.http_url, "--progress-dir", str(progress))
    log = open(tmp_path / "first.log", "w")  # noqa: SIM115 - a file, not a pipe nobody reads
    first = subprocess.Popen([*args, "--rate", "10"], env=spark_env(), start_new_session=True,
                             stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 120
        # kill it (JVM and Python workers: the whole session it leads) between two paced publishes,
        # once a few messages are through and their progress is saved
        while not (len(target.got) >= 5 and progress_matches(progress, target.got)):
            assert time.monotonic() < deadline and first.poll() is None, \
                "replay did not get going: " + (tmp_path / "first.log").read_text()[-3000:]
            target.pump(0.02)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(30)
        log.close()
    # every publish of the killed run that the broker confirmed (and the run saved as progress) is
    # counted in ``before``: the resume re-sends at least all the others
    wait_disconnected(proc.http_url, keep=1)
    before = received_all(target)
    assert 5 <= before < n
    # the command run again resumes from the progress the killed run saved; on the Arrow engine,
    # which reads the same progress files (no second JVM to start: a resume in Spark after a kill
    # is the next test's)
    second = run_consuming([*args, "--engine", "arrow"], target, tmp_path / "second.log")
    replayed = int(re.search(r"replayed (\d+) messages", second).group(1))
    assert replayed >= n - before  # what was not delivered, and what was in flight at the kill again
    target.wait_count(n)
    bodies = [g[1] for g in target.got]
    assert sorted(bodies) == list(range(n))  # every message exactly once
    for key in ("k.0", "k.1", "k.2"):
        per_key = [g[1] for g in target.got if g[0] == key]
        assert per_key == sorted(per_key)
    assert all(g[2]["x-replayed-from"] == f"orders:{g[1]}" for g in target.got)
    target.close()


def test_cli_export_writes_parquet_equal_to_the_log(spark, tmp_path):
    data = tmp_path / "data"
    write_log(data, n=70)
    out = tmp_path / "out"
    r = subprocess.run(spark_cli("export", "--data-dir", str(data), "--exchange", "orders", "--out", str(out),
                                 "--from", "10", "--to", "59"),
                       env=spark_env(), capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "exported 50 rows" in r.stderr
    source = read_log(spark, str(data), "orders", from_offset=10, to_offset=59)
    expected = [tuple(row) for row in source.orderBy("offset").collect()]
    back = [tuple(row) for row in spark.read.parquet(str(out)).select(*source.columns).orderBy("offset").collect()]
    assert back == expected and [row[0] for row in back] == list(range(10, 60))


def replay_consuming(target: Target, *args, **kwargs) -> int:
    """``replay(*args, **kwargs)`` in a thread while ``target`` consumes (a consumer that stops
    reading holds its publishers up: the broker's saturation gate)."""
    result: list[int | BaseException] = []

    def run() -> None:
        try:
            result.append(replay(*args, **kwargs))
        except BaseException as exc:  # re-raised below, in the test's thread
            result.append(exc)

    job = threading.Thread(target=run)
    job.start()
    deadline = time.monotonic() + 240
    while job.is_alive():
        assert time.monotonic() < deadline, "the replay did not finish"
        target.pump(0.05)
    job.join()
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]


def test_cli_replay_sigkilled_with_confirms_in_flight_resumes_exactly_once(spark, broker_factory, tmp_path):
    """No --rate: publishes stream with confirms in flight when the kill lands; the re-run sends
    those again and the target's dedup window drops the ones the broker already had. The re-run is
    ``replay()`` in the session's warm Spark (the test above re-runs the command itself, on the Arrow
    engine), with the same job and progress directory and two partitions publishing side by side:
    the killed one ran them one by one, so the one in flight may come second after a partition with
    thousands to go, whose publishes would push its keys out of the target's window if it re-sent
    them only then."""
    proc = broker_factory()
    # the kill follows the first few hundred messages the queue holds ready, polled every 10 ms
    # without consuming: the consumer's prefetch (1000) fills, the queue grows, and past 1000 ready
    # the broker's saturation gate holds the replay for a second, so the kill lands mid-replay
    # however fast it runs (pumping the consumer while polling let a fast replay finish first)
    n = 30_000
    write_log(proc.data_dir, n=n, keys=7)
    target = Target(proc.url, "deduped", "q-deduped", {"x-message-deduplication": True, "x-cache-size": 3 * 500 * 4})
    args = spark_cli("replay", "--data-dir", str(proc.data_dir), "--exchange", "orders", "--to-exchange", "deduped",
                     "--amqp-url", proc.url, "--http-url", proc.http_url, "--progress-dir", str(tmp_path / "progress"),
                     "--window", "500")
    log = open(tmp_path / "first.log", "w")  # noqa: SIM115 - a file, not a pipe nobody reads
    first = subprocess.Popen(args, env=spark_env(), start_new_session=True, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 120
        while target.ready() < 300:
            assert time.monotonic() < deadline and first.poll() is None, \
                "replay did not get going: " + (tmp_path / "first.log").read_text()[-2000:]
            time.sleep(0.01)  # the poll's interval; the count itself comes from the broker
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(30)
        log.close()
    target.pump(0.3)
    assert len(target.got) < n, "the replay finished before the kill"
    # consuming meanwhile: a consumer silent for minutes misses its heartbeats
    resumed = replay_consuming(target, spark, str(proc.data_dir), "orders", amqp_url=proc.url,
                               to_exchange="deduped", progress_dir=str(tmp_path / "progress"), window=500)
    assert 0 < resumed < n  # what the first run left, and what was in flight at the kill again
    target.wait_count(n)
    bodies = [g[1] for g in target.got]
    assert sorted(bodies) == list(range(n))  # every message exactly once
    for key in range(7):
        per_key = [g[1] for g in target.got if g[0] == f"k.{key}"]
        assert per_key == sorted(per_key)  # in order per routing key
    assert all(g[2]["x-deduplication-header"] == f"orders:{g[1]}" for g in target.got)
    target.close()


def test_publishes_encoded_in_bulk_arrive_intact(broker):
    """``FrameEncoder`` frames through ``send_encoded``: the original properties and headers kept,
    the replay headers added, an empty body and one spanning several frames."""
    from headrace.server.amqp.properties import BasicProperties, encode_properties
    from headrace.spark_bridge.amqp_publisher import ConfirmPublisher
    from headrace.spark_bridge.replay_frames import FrameEncoder

    conn, ch = _bound_queue(broker.url, "encoded", "encoded-q")
    rows = [
        (7, "a.b", b"", b"plain"),
        (8, "a.c", encode_properties(BasicProperties(content_type="text/plain", delivery_mode=2,
                                                     headers={"own": "kept"}, message_id="m-8")), b""),
        (9, "a.b", encode_properties(BasicProperties(priority=3)), bytes(range(256)) * 1200),  # > frame_max
    ]
    pub = ConfirmPublisher(broker.url, window=10).connect()
    encoder = FrameEncoder("encoded", "orders", ("x-replayed-from", "x-deduplication-header"), pub.frame_max)
    frames = encoder.encode(*zip(*rows))
    assert pub.send_encoded(frames, 3) == 3
    pub.wait_confirms()
    pub.close()
    got = []
    for _ in rows:
        method, props, body = ch.basic_get("encoded-q", auto_ack=True)
        got.append((method.routing_key, props, body))
    conn.close()
    assert [(rk, body) for rk, _, body in got] == [(rk, body) for _, rk, _, body in rows]
    for (offset, *_), (_, props, _) in zip(rows, got):
        assert props.headers["x-replayed-from"] == props.headers["x-deduplication-header"] == f"orders:{offset}"
    assert got[1][1].content_type == "text/plain" and got[1][1].delivery_mode == 2
    assert got[1][1].message_id == "m-8" and got[1][1].headers["own"] == "kept"
    assert got[2][1].priority == 3


def test_close_sends_the_publishes_still_queued_before_connection_close(broker):
    """Publishes queued under a flush's worth are written at close, ahead of connection.close:
    the broker discards whatever follows a close, so sent after it they would be lost."""
    from headrace.spark_bridge.amqp_publisher import ConfirmPublisher

    conn, ch = _bound_queue(broker.url, "queued", "queued-q")
    pub = ConfirmPublisher(broker.url, window=100).connect()
    for i in range(20):
        pub.publish("queued", "k", b"\x00\x00", b"%d" % i)  # no properties: flags only
    pub.close()  # nothing flushed before it: twenty small publishes are far under a flush
    got = []
    while (message := ch.basic_get("queued-q", auto_ack=True))[0] is not None:
        got.append(int(message[2]))
    conn.close()
    assert got == list(range(20))


def test_a_publisher_the_broker_stops_reading_waits_for_room_instead_of_failing(broker_factory):
    """A publisher reads its confirms without blocking between sends; the send after such a read
    must still wait for room in its socket buffer. Here the memory alarm stops the broker reading
    it, with 3 MB queued, until a consumer drains the queue: every publish is then confirmed (a
    send on the socket left non-blocking failed with EAGAIN and lost the connection)."""
    import httpx

    from headrace.spark_bridge.amqp_publisher import ConfirmPublisher

    proc = broker_factory(env={"HEADRACE_MEMORY_HIGH_WATERMARK": "2000000"})
    conn, ch = _bound_queue(proc.url, "held", "held-q")
    pub = ConfirmPublisher(proc.url, window=100, timeout=30).connect()
    body = b"m" * 100_000
    outcome: list[BaseException | int] = []

    def publish_all() -> None:
        try:
            for i in range(30):
                pub.publish("held", "k", b"\x00\x00", body)
            pub.wait_confirms()
            outcome.append(pub.confirmed)
        except BaseException as exc:  # reported by the test thread
            outcome.append(exc)

    sender = threading.Thread(target=publish_all, daemon=True)
    sender.start()
    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10) as http:
        deadline = time.monotonic() + 15
        while http.get("/api/overview").json()["alarms"] != ["memory"] and not outcome:
            assert time.monotonic() < deadline, "no memory alarm"
            conn.process_data_events(time_limit=0.05)
    drained = 0
    deadline = time.monotonic() + 30
    while drained < 30 and time.monotonic() < deadline:
        if ch.basic_get("held-q", auto_ack=True)[2] == body:
            drained += 1
        else:
            conn.process_data_events(time_limit=0.05)
    sender.join(30)
    pub.close()
    conn.close()
    assert outcome == [30] and drained == 30


def _bound_queue(url: str, exchange: str, queue: str):
    """A topic exchange and an exclusive queue bound to all of it: (connection, channel)."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.exchange_declare(exchange, "topic")
    ch.queue_declare(queue, exclusive=True)
    ch.queue_bind(queue, exchange, "#")
    return conn, ch


def _batches(offsets: range, keys: int = 3, size: int = 1000):
    """Arrow batches of ``size`` rows as the log holds them: key ``k.<offset % keys>``, body = offset."""
    import pyarrow as pa

    for start in range(0, len(offsets), size):
        part = offsets[start:start + size]
        yield pa.RecordBatch.from_pydict({
            "offset": pa.array(list(part), pa.int64()),
            "routing_key": [f"k.{i % keys}" for i in part],
            "properties": pa.array([None] * len(part), pa.binary()),
            "body": [b"%d" % i for i in part],
        })


def _dying(batches, after: int):
    """The partition's batches, then the task dies (as under a kill, nothing after it runs)."""
    for i, batch in enumerate(batches):
        if i == after:
            raise RuntimeError("task killed")
        yield batch


def test_a_partition_cut_short_leaves_what_it_sent_in_doubt_inside_the_saved_range(broker, tmp_path):
    """A resume reads only the offsets ``doubt_range`` gives (not the whole log past the saved
    progress): every row a dying partition sent and did not have confirmed lies inside it, and the
    range ends where the batch being sent ends, not at the end of the log."""
    from headrace.spark_bridge.replay_progress import doubt_range
    from headrace.spark_bridge.replay_sink import publish_partition, uncertain_rows

    conn, ch = _bound_queue(broker.url, "cut", "cut-q")
    progress = tmp_path / "progress"
    progress.mkdir()
    with pytest.raises(RuntimeError, match="task killed"):
        publish_partition(_dying(_batches(range(5000)), after=3), partition=0, amqp_url=broker.url,
                          exchange="orders", to_exchange="cut", progress_dir=str(progress), rate=None,
                          pattern=None, window=500, dedup_header="x-deduplication-header")
    got = []
    while (message := ch.basic_get("cut-q", auto_ack=True))[0] is not None:
        got.append(int(message[2]))
    conn.close()
    assert got == list(range(3000))  # three batches sent, in order, before the task died
    done = load_progress(str(progress))
    lo, hi = doubt_range(str(progress))
    assert hi == 2999  # the end of the batch it was on: rows 3000-4999 were never sent
    # what progress does not cover may have gone unconfirmed: it is all inside (lo, hi]
    assert all(lo < offset <= hi for offset in got if offset > done[f"k.{offset % 3}"])
    # and the range starts no further back than what a run can have in doubt (a window and a piece)
    assert lo >= 3000 - uncertain_rows(None, 500) - 1


def test_a_range_spans_every_partition_and_needs_them_all(broker, tmp_path):
    from headrace.spark_bridge.replay_progress import doubt_range
    from headrace.spark_bridge.replay_sink import publish_partition

    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    conn.channel().exchange_declare("whole", "topic")
    conn.close()
    progress = tmp_path / "progress"
    progress.mkdir()
    assert doubt_range(str(progress)) is None  # no file: the whole log
    sent = publish_partition(_batches(range(100, 2600)), partition=1, amqp_url=broker.url, exchange="orders",
                             to_exchange="whole", progress_dir=str(progress), rate=None, pattern=None,
                             window=500, dedup_header="x-deduplication-header")
    assert sent == 2500
    assert doubt_range(str(progress)) == (2599, 2599)  # an empty range: a resume reads nothing
    other = {"offsets": {"k.0": 5}, "run": "", "published": 1}
    (progress / "part-7.json").write_text(json.dumps(other))  # as written before ranges were saved
    assert doubt_range(str(progress)) is None
    (progress / "part-7.json").write_text(json.dumps({**other, "through": 5, "bound": 4000}))
    assert doubt_range(str(progress)) == (5, 4000)  # the lowest ``through``, the highest ``bound``


def test_a_resume_loses_nothing_of_a_partition_that_never_started(spark, broker_factory, tmp_path):
    """The killed run's progress is one partition's (key k.0's; the other keys' tasks never ran):
    the resume job reads the range that partition left, for its keys only. The other keys have rows
    before that range, which it does not read: publishing their later rows alone would save
    progress past them, and they would never be sent."""
    import pyarrow as pa

    from headrace.spark_bridge.replay_progress import doubt_range
    from headrace.spark_bridge.replay_sink import publish_partition

    proc = broker_factory()
    write_log(proc.data_dir, n=600, keys=3)
    target = Target(proc.url, "started", "q-started", {"x-message-deduplication": True, "x-cache-size": 3000})
    progress = tmp_path / "progress"
    progress.mkdir()
    k0 = [b.set_column(1, "routing_key", pa.array(["k.0"] * b.num_rows))
          for b in _batches(range(0, 600, 3), size=40)]  # the log's rows of k.0: offsets 0, 3, ... 597
    with pytest.raises(RuntimeError, match="task killed"):
        publish_partition(_dying(iter(k0), after=4), partition=0, amqp_url=proc.url, exchange="orders",
                          to_exchange="started", progress_dir=str(progress), rate=None, pattern=None, window=20,
                          dedup_header="x-deduplication-header")
    lo, hi = doubt_range(str(progress))
    # k.1 and k.2 have rows before the range, and no progress. The range is what was published and
    # not yet confirmed when the task died: up to the window's 20 rows (k.0's rows are 3 offsets
    # apart, so 60 offsets), or none when every confirm came back before the next batch was asked
    # for (both happen; the resume below must hold for both)
    assert 100 < lo <= hi == 477 and hi - lo <= 3 * 20
    assert replay_consuming(target, spark, str(proc.data_dir), "orders", amqp_url=proc.url, to_exchange="started",
                            progress_dir=str(progress), window=500) > 0
    target.wait_count(600)
    assert sorted(g[1] for g in target.got) == list(range(600))  # every message exactly once
    for key in range(3):
        per_key = [g[1] for g in target.got if g[0] == f"k.{key}"]
        assert per_key == sorted(per_key)
    target.close()

def test_partitions_publishing_side_by_side_in_small_pieces_all_finish(broker):
    """A flush's read that takes the very confirms a full window waits for must not be followed
    by a blocking read: that read waited for a confirm that never came, and the partition failed
    after the socket timeout (small batches and windows, three partitions at once, hit it)."""
    import pyarrow as pa

    from headrace.spark_bridge.replay_sink import publish_partition

    conn, ch = _bound_queue(broker.url, "small", "small-q")
    results: dict[int, int | BaseException] = {}

    def partition(k: int) -> None:
        rows = [b.set_column(1, "routing_key", pa.array([f"k.{k}"] * b.num_rows))
                for b in _batches(range(1500), size=7)]
        try:
            results[k] = publish_partition(iter(rows), partition=k, amqp_url=broker.url, exchange="orders",
                                           to_exchange="small", progress_dir=str(progress), rate=None, pattern=None,
                                           window=49, dedup_header="x-deduplication-header")
        except BaseException as exc:  # checked below, in the test's thread
            results[k] = exc

    progress = Path(broker.data_dir) / "small-progress"
    progress.mkdir()
    threads = [threading.Thread(target=partition, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == {0: 1500, 1: 1500, 2: 1500}
    assert ch.queue_declare("small-q", passive=True).method.message_count == 4500
    conn.close()

def test_a_partition_saves_how_far_it_may_send_before_it_sends(broker, tmp_path):
    """Killed in its first batch with nothing confirmed yet, a partition has already left the
    range its publishes fall in: the file is written before the batch's first publish."""
    import pyarrow as pa

    from headrace.spark_bridge.replay_progress import doubt_range
    from headrace.spark_bridge.replay_sink import publish_partition

    conn, ch = _bound_queue(broker.url, "first", "first-q")
    progress = tmp_path / "progress"
    progress.mkdir()
    batch = next(_batches(range(1000, 2000)))
    keys = batch.column("routing_key").to_pylist()
    keys[800] = "k." + "x" * 300  # no AMQP routing key: the piece holding it fails to encode, and the task dies
    batch = batch.set_column(1, "routing_key", pa.array(keys))
    with pytest.raises(ValueError, match="over 255 bytes"):
        # a window wider than the batch: no confirm is waited for (and saved) before the death
        publish_partition(iter([batch]), partition=0, amqp_url=broker.url, exchange="orders", to_exchange="first",
                          progress_dir=str(progress), rate=None, pattern=None, window=100_000,
                          dedup_header="x-deduplication-header")
    got = []
    while (message := ch.basic_get("first-q", auto_ack=True))[0] is not None:
        got.append(int(message[2]))
    conn.close()
    assert got and got == list(range(1000, 1000 + len(got)))  # pieces before the bad one went out
    lo, hi = doubt_range(str(progress))
    assert 999 <= lo < 1000 + len(got) and hi == 1999
