"""Spark read figures of the mirror log: ``count()`` and a full write to Parquet of a large log
through the ``headrace`` data source, with a warm SparkSession (JVM up, Python workers started).

    .venv/bin/python benchmarks/bench_spark.py [--messages 1000000] [--body 256] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from headrace.persistence.mirror_log import MirrorLog, MirrorRecord


def write_log(root: Path, exchange: str, messages: int, body: int) -> float:
    log = MirrorLog(root, "/", exchange)
    log.recover()
    batch = [MirrorRecord(1_700_000_000_000 + i, f"k.{i % 8}", b"", b"x" * body) for i in range(10_000)]
    start = time.perf_counter()
    for _ in range(messages // len(batch)):
        log.append_many(batch)
    log.close()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--body", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from headrace.cli.spark_commands import spark_session
    from headrace.spark_bridge.export import read_log

    with tempfile.TemporaryDirectory(prefix="headrace-spark-") as tmpdir:
        tmp = Path(tmpdir)
        write_s = write_log(tmp / "data", "big", args.messages, args.body)
        spark = spark_session(args.master, ())
        df = read_log(spark, str(tmp / "data"), "big")
        partitions = df.rdd.getNumPartitions()
        assert df.count() == args.messages  # warm-up: workers started, code paths loaded
        counts, writes = [], []
        for run in range(args.runs):
            start = time.perf_counter()
            rows = read_log(spark, str(tmp / "data"), "big").count()
            counts.append(time.perf_counter() - start)
            assert rows == args.messages
            start = time.perf_counter()
            read_log(spark, str(tmp / "data"), "big").write.mode("overwrite").parquet(str(tmp / f"out{run}"))
            writes.append(time.perf_counter() - start)
        spark.stop()
        print(json.dumps({"messages": args.messages, "body": args.body, "master": args.master,
                          "partitions": partitions, "log_write_s": round(write_s, 2),
                          "count_s": [round(c, 2) for c in counts], "count_median_s": round(statistics.median(counts), 2),
                          "parquet_s": [round(w, 2) for w in writes],
                          "parquet_median_s": round(statistics.median(writes), 2)}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
