"""Mirror log -> Spark: batch reads with filters, partitions per segment, streaming availableNow,
export, and replay into a real broker (resumable, ordered per routing key)."""

from __future__ import annotations

import time

import pika
import pytest

from headrace.persistence.mirror_log import MirrorLog, MirrorRecord, Retention, list_segments
from headrace.spark_bridge.export import export, read_log
from headrace.spark_bridge.replay import replay, topic_matches

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

T0 = 1_700_000_000_000


def write_log(root, exchange="orders", n=500, start=0, segment_max_bytes=8192):
    log = MirrorLog(root, "/", exchange, segment_max_bytes=segment_max_bytes, index_interval_bytes=512)
    log.recover()
    log.append_many([MirrorRecord(T0 + i * 1000, f"orders.{i % 3}", b"", b"body-%d" % i,
                                  {"n": str(i)}, "text/plain", f"m{i}") for i in range(start, start + n)])
    log.close()


def test_batch_read_is_complete_ordered_and_filtered(spark, tmp_path):
    write_log(tmp_path)
    assert len(list_segments(tmp_path, "/", "orders")) > 1
    df = read_log(spark, str(tmp_path), "orders", partition_bytes=4096)
    assert df.rdd.getNumPartitions() > 1
    assert read_log(spark, str(tmp_path), "orders").rdd.getNumPartitions() == 1  # small segments packed
    rows = df.orderBy("offset").collect()
    assert [r.offset for r in rows] == list(range(500))
    assert rows[7].body == b"body-7" and rows[7].headers == {"n": "7"} and rows[7].message_id == "m7"
    assert rows[7].content_type == "text/plain" and rows[7].routing_key == "orders.1"
    sub = read_log(spark, str(tmp_path), "orders", from_offset=100, to_offset=199).collect()
    assert sorted(r.offset for r in sub) == list(range(100, 200))
    timed = read_log(spark, str(tmp_path), "orders", from_time=str(T0 + 10_000), to_time=str(T0 + 19_000)).collect()
    assert sorted(r.offset for r in timed) == list(range(10, 20))


def test_export_parquet_and_json_round_trip(spark, tmp_path):
    write_log(tmp_path / "data", n=120)
    out = tmp_path / "parquet"
    assert export(spark, str(tmp_path / "data"), "orders", out=str(out), partition_by="routing_key") == 120
    back = spark.read.parquet(str(out)).orderBy("offset").collect()
    assert [r.offset for r in back] == list(range(120)) and back[5].body == b"body-5"
    out_json = tmp_path / "json"
    assert export(spark, str(tmp_path / "data"), "orders", out=str(out_json), fmt="json", partition_by="date") == 120
    assert spark.read.json(str(out_json)).count() == 120


def test_streaming_available_now_picks_up_new_segments_with_one_checkpoint(spark, tmp_path):
    data = tmp_path / "data"
    write_log(data, n=100)
    checkpoint = str(tmp_path / "chk")
    out = str(tmp_path / "stream-out")

    def run_once():
        stream = (spark.readStream.format("headrace").option("path", str(data)).option("exchange", "orders").load()
                  .select("offset", "body"))
        query = stream.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint) \
            .trigger(availableNow=True).start()
        query.awaitTermination(120)

    run_once()
    assert spark.read.parquet(out).count() == 100
    write_log(data, n=60, start=100)
    run_once()
    offsets = sorted(r.offset for r in spark.read.parquet(out).collect())
    assert offsets == list(range(160))


def test_retention_and_torn_tail(tmp_path):
    write_log(tmp_path, n=300)
    segs = list_segments(tmp_path, "/", "orders")
    with open(segs[-1].path, "ab") as f:
        f.write(b"\x00\x00\x01\x00garbage")  # torn record
    log = MirrorLog(tmp_path, "/", "orders", retention=Retention(max_bytes=segs[0].size * 2))
    assert log.recover() == 300
    dropped = log.enforce_retention(T0)
    assert dropped >= 1 and list_segments(tmp_path, "/", "orders")[0].base_offset > 0
    log.close()


def test_topic_pattern_matching():
    assert topic_matches("orders.*", "orders.1") and not topic_matches("orders.*", "orders")
    assert topic_matches("#", "") and topic_matches("a.#", "a") and not topic_matches("*", "")


def test_mirror_from_broker_then_replay_ordered_and_resumable(spark, broker_factory, tmp_path):
    proc = broker_factory()
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.exchange_declare("orders", "topic", durable=True, arguments={"x-mirror": True})
    for i in range(60):
        ch.basic_publish("orders", f"eu.{i % 3}", b"%d" % i, pika.BasicProperties(headers={"i": i}, message_id=str(i)))
    conn.close()
    assert proc.stop() == 0  # the mirror writer drains at shutdown
    rows = read_log(spark, str(proc.data_dir), "orders").orderBy("offset").collect()
    assert [r.body for r in rows] == [b"%d" % i for i in range(60)] and rows[3].headers == {"i": "3"}
    proc = broker_factory(data_dir=proc.data_dir)
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.exchange_declare("replayed", "topic", durable=True)
    ch.queue_declare("replay-target", durable=True)
    ch.queue_bind("replay-target", "replayed", "#")
    progress = str(tmp_path / "progress")
    first = replay(spark, str(proc.data_dir), "orders", amqp_url=proc.url, to_exchange="replayed",
                   progress_dir=progress, to_offset=29)
    again = replay(spark, str(proc.data_dir), "orders", amqp_url=proc.url, to_exchange="replayed",
                   progress_dir=progress)  # resumes: no duplicates
    assert (first, again) == (30, 30)
    got = []

    def on_message(channel, method, props, body):
        got.append((method.routing_key, int(body), props.headers, props.message_id))
        channel.basic_ack(method.delivery_tag)

    ch.basic_consume("replay-target", on_message)
    deadline = time.monotonic() + 30
    while len(got) < 60 and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    assert len(got) == 60 and len({g[1] for g in got}) == 60
    for key in ("eu.0", "eu.1", "eu.2"):
        per_key = [g[1] for g in got if g[0] == key]
        assert per_key == [i for i in range(60) if f"eu.{i % 3}" == key]  # original order per routing key
    # the original headers come back, plus where each message was replayed from
    assert all(g[2] == {"i": g[1], "x-replayed-from": f"orders:{g[1]}", "x-deduplication-header": f"orders:{g[1]}"}
               and g[3] == str(g[1]) for g in got)
    only_eu1 = replay(spark, str(proc.data_dir), "orders", amqp_url=proc.url, to_exchange="replayed",
                      progress_dir=str(tmp_path / "p2"), routing_key_pattern="eu.1")
    assert only_eu1 == 20
    conn.close()


def test_export_parquet_equals_source_in_every_column(spark, tmp_path):
    write_log(tmp_path / "data", n=90)
    source = read_log(spark, str(tmp_path / "data"), "orders")
    columns = source.columns
    assert columns == ["offset", "timestamp", "vhost", "exchange", "routing_key", "headers", "content_type",
                       "message_id", "properties", "body"]
    expected = [tuple(r) for r in source.orderBy("offset").collect()]
    for partition_by in (None, "routing_key"):
        out = tmp_path / f"parquet-{partition_by}"
        assert export(spark, str(tmp_path / "data"), "orders", out=str(out), partition_by=partition_by) == 90
        back = [tuple(r) for r in spark.read.parquet(str(out)).select(*columns).orderBy("offset").collect()]
        assert back == expected
    assert expected[4][4:8] == ("orders.1", {"n": "4"}, "text/plain", "m4") and expected[4][9] == b"body-4"
