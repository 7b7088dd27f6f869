"""Mirror log and Spark bridge figures: publish overhead of mirroring, Spark read time of a large
log, replay rate.

    .venv/bin/python benchmarks/bench_mirror.py [--messages 1000000] [--replay 20000] [--pairs 3] [--publish 50000]

The overhead is given two ways per A B / B A pair: publish throughput (mirrored against plain)
and the broker's CPU time per message (from /proc). ``--replay 0`` stops after the overhead.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import amqp_load  # noqa: E402
import pika  # noqa: E402
from run import Headrace, cpu_seconds  # noqa: E402

from headrace.persistence.mirror_log import MirrorLog, MirrorRecord  # noqa: E402


def publish_rate(target: amqp_load.Target, exchange: str, queue: str, count: int, ch: Any,
                 pid: int) -> tuple[float, float]:
    """Messages per second until the broker has routed all of them into ``queue`` (the producer's own
    rate would mostly measure how fast pika fills the socket buffers), and the broker's CPU
    microseconds per message meanwhile (what mirroring costs it, whatever the machine's load)."""
    out: mp.Queue = mp.Queue()
    cpu0 = cpu_seconds(pid)
    start = time.perf_counter()
    amqp_load.producer(target, exchange, ["k"], b"x" * 256, count, False, False, 0, out)
    out.get()
    while ch.queue_declare(queue, passive=True).method.message_count < count:
        time.sleep(0.005)
    wall = time.perf_counter() - start
    return count / wall, (cpu_seconds(pid) - cpu0) / count * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--publish", type=int, default=50_000)
    ap.add_argument("--replay", type=int, default=20_000)
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="headrace-mirror-") as tmpdir:
        tmp = Path(tmpdir)
        server = Headrace(tmp)
        target = amqp_load.Target("headrace", "127.0.0.1", server.port)
        try:
            conn = pika.BlockingConnection(target.params)
            ch = conn.channel()
            for name, args_ in (("plain", {}), ("mirrored", {"x-mirror": True})):
                ch.exchange_declare(name, "fanout", arguments=args_)
                ch.queue_declare(f"{name}-q")
                ch.queue_bind(f"{name}-q", name)
            ratios, cpu_ratios = [], []
            for pair in range(args.pairs):
                rates, cpus = {}, {}
                for name in (("plain", "mirrored") if pair % 2 == 0 else ("mirrored", "plain")):  # A B, then B A
                    rates[name], cpus[name] = publish_rate(target, name, f"{name}-q", args.publish, ch,
                                                           server.proc.pid)
                plain, mirrored = rates["plain"], rates["mirrored"]
                ratios.append(mirrored / plain)
                cpu_ratios.append(cpus["mirrored"] / cpus["plain"])
                ch.queue_purge("plain-q")
                ch.queue_purge("mirrored-q")
                print(json.dumps({"plain_msg_s": round(plain), "mirrored_msg_s": round(mirrored),
                                  "plain_cpu_us": round(cpus["plain"], 2),
                                  "mirrored_cpu_us": round(cpus["mirrored"], 2)}), flush=True)
            overhead = (1 - statistics.median(ratios)) * 100
            cpu_overhead = (statistics.median(cpu_ratios) - 1) * 100
            print(json.dumps({"metric": "mirror_publish_overhead_pct", "median": round(overhead, 1),
                              "broker_cpu_overhead_pct": round(cpu_overhead, 1)}), flush=True)
            if not args.replay:  # --replay 0: the publish overhead alone
                return
            # replay rate: a log of --replay messages published back through AMQP
            os.environ["PYSPARK_PYTHON"] = sys.executable  # workers need headrace importable
            os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
            from pyspark.sql import SparkSession

            from headrace.spark_bridge.export import read_log
            from headrace.spark_bridge.replay import replay

            log = MirrorLog(tmp / "data", "/", "big")
            log.recover()
            batch = [MirrorRecord(1_700_000_000_000 + i, f"k.{i % 8}", b"", b"x" * 256) for i in range(10_000)]
            start = time.perf_counter()
            for _ in range(args.messages // len(batch)):
                log.append_many(batch)
            log.close()
            write_s = time.perf_counter() - start
            spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
            start = time.perf_counter()
            rows = read_log(spark, str(tmp / "data"), "big").count()
            read_s = time.perf_counter() - start
            print(json.dumps({"metric": "spark_read", "rows": rows, "seconds": round(read_s, 1),
                              "log_write_seconds": round(write_s, 1)}), flush=True)
            ch.exchange_declare("replay-into", "fanout")
            ch.queue_declare("replay-into-q")
            ch.queue_bind("replay-into-q", "replay-into")
            conn.close()
            url = f"amqp://guest:guest@127.0.0.1:{server.port}/%2F"
            start = time.perf_counter()
            n = replay(spark, str(tmp / "data"), "big", amqp_url=url, to_exchange="replay-into",
                       to_offset=args.replay - 1, progress_dir=str(tmp / "progress"))
            replay_s = time.perf_counter() - start
            print(json.dumps({"metric": "replay", "messages": n, "msg_s": round(n / replay_s)}), flush=True)
            spark.stop()
        finally:
            server.stop()


if __name__ == "__main__":
    main()
