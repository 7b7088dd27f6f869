"""The ``headrace`` source reading a large mirror log over the broker's HTTP API (``url``) against
reading it from the data directory (``path``): same machine, same SparkSession, runs alternated.

A log of ``--messages`` records of ``--body`` bytes is written with ``MirrorLog`` into a data
directory, then a real broker (``headrace serve``) is started on it and serves the log over
loopback HTTP. Each run times ``count()`` and a full write to Parquet both ways.

    .venv/bin/python benchmarks/bench_spark_network.py [--messages 1000000] [--body 256] [--runs 5]
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
from typing import Any

from bench_broker import start_broker, stop_broker
from bench_spark import write_log


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--body", type=int, default=256)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from headrace.cli.spark_commands import spark_session
    from headrace.spark_bridge.export import read_log

    with tempfile.TemporaryDirectory(prefix="headrace-spark-net-") as tmpdir:
        tmp = Path(tmpdir)
        data = tmp / "data"
        write_log(data, "big", args.messages, args.body)
        broker, ports = start_broker(data)
        try:
            spark = spark_session(args.master, ())
            url = {"url": f"http://127.0.0.1:{ports['http']}", "user": "guest", "password": "guest", "exchange": "big"}

            def frame(way: str) -> Any:
                return read_log(spark, str(data), "big", source=url if way == "network" else None)

            times: dict[str, list[float]] = {f"{way}_{op}": [] for way in ("path", "network") for op in ("count", "parquet")}
            partitions = {way: frame(way).rdd.getNumPartitions() for way in ("path", "network")}
            for way in ("path", "network"):  # warm-up: workers started, code paths loaded, page cache filled
                assert frame(way).count() == args.messages
            for run in range(args.runs):
                for way in ("path", "network") if run % 2 == 0 else ("network", "path"):
                    start = time.perf_counter()
                    assert frame(way).count() == args.messages
                    times[f"{way}_count"].append(time.perf_counter() - start)
                    start = time.perf_counter()
                    frame(way).write.mode("overwrite").parquet(str(tmp / f"out-{way}"))
                    times[f"{way}_parquet"].append(time.perf_counter() - start)
            spark.stop()
        finally:
            stop_broker(broker)
        medians = {k: round(statistics.median(v), 2) for k, v in times.items()}
        print(json.dumps({
            "messages": args.messages, "body": args.body, "master": args.master, "partitions": partitions,
            "runs": {k: [round(x, 2) for x in v] for k, v in times.items()}, "medians_s": medians,
            "ratio_count": round(medians["network_count"] / medians["path_count"], 2),
            "ratio_parquet": round(medians["network_parquet"] / medians["path_parquet"], 2)}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
