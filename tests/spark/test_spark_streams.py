"""Stream queues read by Spark: the same source and schema with ``option("stream", name)``, batch and
streaming, and ``headrace export --stream``."""

from __future__ import annotations

import subprocess

import pika
import pytest
from test_spark_replay import spark_cli, spark_env

from headrace.spark_bridge.export import read_log

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def publish_to_stream(proc, name: str, start: int, count: int) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    ch.confirm_delivery()  # confirmed = appended and fsynced: Spark sees it on disk
    for i in range(start, start + count):
        ch.basic_publish("", name, b"event-%d" % i, pika.BasicProperties(content_type="text/plain",
                                                                         headers={"n": str(i)}))
    conn.close()


def test_spark_reads_a_stream_batch_and_streaming_and_exports_it(spark, broker_factory, tmp_path):
    proc = broker_factory()
    publish_to_stream(proc, "events", 0, 120)
    df = spark.read.format("headrace").option("path", str(proc.data_dir)).option("stream", "events").load()
    rows = df.orderBy("offset").collect()
    assert [r.offset for r in rows] == list(range(120))
    assert rows[7].body == b"event-7" and rows[7].routing_key == "events" and rows[7].content_type == "text/plain"
    assert rows[7].headers == {"n": "7"}
    assert df.columns == spark.read.format("headrace").option("path", str(proc.data_dir)) \
        .option("exchange", "any").load().columns  # the same schema as a mirrored exchange
    bounded = read_log(spark, str(proc.data_dir / "streams"), "events", from_offset=100)
    assert bounded.count() == 20

    checkpoint, out = str(tmp_path / "chk"), str(tmp_path / "out")

    def run_once() -> None:
        stream = spark.readStream.format("headrace").option("path", str(proc.data_dir)).option("stream", "events") \
            .load().select("offset", "body")
        query = stream.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint) \
            .trigger(availableNow=True).start()
        query.awaitTermination(120)

    run_once()
    publish_to_stream(proc, "events", 120, 30)
    run_once()
    assert sorted(r.offset for r in spark.read.parquet(out).collect()) == list(range(150))

    exported = tmp_path / "exported"
    r = subprocess.run(spark_cli("export", "--data-dir", str(proc.data_dir), "--stream", "events", "--out",
                                 str(exported), "--from", "140"),
                       env=spark_env(), capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "exported 10 rows" in r.stderr
    r = subprocess.run(spark_cli("export", "--data-dir", str(proc.data_dir), "--out", str(exported)),
                       env=spark_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--exchange or --stream" in r.stderr
