"""The ``headrace`` streaming sink's throughput: a mirror log streamed (``trigger(availableNow)``, in
micro-batches of ``--batch`` records) into an exchange with a dedup window and a queue behind it,
against the same query into Spark's ``noop`` sink (what reading and planning cost alone). Runs
alternate within one warm SparkSession; each run has its own checkpoint, so keys never repeat.

    .venv/bin/python benchmarks/bench_stream_sink.py [--messages 200000] [--body 256] [--batch 50000] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import pika

from bench_broker import start_broker, stop_broker
from bench_spark import write_log


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--body", type=int, default=256)
    ap.add_argument("--batch", type=int, default=50_000, help="maxRecordsPerTrigger")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from headrace.cli.spark_commands import spark_session
    from headrace.spark_bridge.datasource import register

    with tempfile.TemporaryDirectory(prefix="headrace-stream-sink-") as tmpdir:
        tmp = Path(tmpdir)
        data = tmp / "data"
        write_log(data, "big", args.messages, args.body)
        broker, ports = start_broker(data)
        url = f"amqp://guest:guest@127.0.0.1:{ports['amqp']}/%2F"
        conn = pika.BlockingConnection(pika.URLParameters(url))
        ch = conn.channel()
        ch.exchange_declare("copy", "topic", durable=True,
                            arguments={"x-message-deduplication": True, "x-cache-size": 2 * args.batch})
        ch.queue_declare("copy-q", durable=True)
        ch.queue_bind("copy-q", "copy", "#")
        conn.close()
        try:
            spark = spark_session(args.master, ())
            register(spark)
            times: dict[str, list[float]] = {"noop": [], "headrace": []}

            def run(sink: str, n: int) -> float:
                df = spark.readStream.format("headrace").option("path", str(data)).option("exchange", "big") \
                    .option("maxRecordsPerTrigger", str(args.batch)).load().select("routing_key", "properties", "body")
                writer = df.writeStream.format(sink).option("checkpointLocation", str(tmp / f"chk-{sink}-{n}"))
                if sink == "headrace":
                    writer = writer.option("amqpUrl", url).option("exchange", "copy")
                start = time.perf_counter()
                query = writer.trigger(availableNow=True).start()
                query.awaitTermination()
                took = time.perf_counter() - start
                assert query.exception() is None, query.exception()
                if sink == "headrace":  # a connection of its own: an idle one misses its heartbeats
                    purge = pika.BlockingConnection(pika.URLParameters(url))
                    got = purge.channel().queue_purge("copy-q").method.message_count
                    purge.close()
                    assert got == args.messages, (got, args.messages)
                return took

            run("noop", -1)  # warm-up
            run("headrace", -1)
            for n in range(args.runs):
                for sink in ("noop", "headrace"):
                    times[sink].append(run(sink, n))
                    print(f"run {n} {sink}: {times[sink][-1]:.2f} s", flush=True)
            noop, pub = statistics.median(times["noop"]), statistics.median(times["headrace"])
            print(f"{args.messages} x {args.body} B, batches of {args.batch}, {args.master}, load {os.getloadavg()}")
            print(f"noop sink: median {noop:.2f} s {[round(t, 2) for t in times['noop']]}")
            print(f"headrace sink: median {pub:.2f} s {[round(t, 2) for t in times['headrace']]} "
                  f"= {args.messages / pub:,.0f} msg/s; headrace/noop {pub / noop:.2f}x")
            spark.stop()
        finally:
            stop_broker(broker)


if __name__ == "__main__":
    main()
