"""Replay rate: a mirror log of --messages records published back into a local headrace broker
by ``replay`` (pipelined confirms, dedup header set), into an exchange with a dedup window and a
durable queue bound; the rate counts until every message is confirmed, checked in the queue.

    .venv/bin/python benchmarks/bench_replay.py [--messages 200000] [--partitions 4] [--window 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pika

sys.path.insert(0, str(Path(__file__).parent))
from run import Headrace  # noqa: E402

from headrace.persistence.mirror_log import MirrorLog, MirrorRecord  # noqa: E402


def add_log_args(ap: argparse.ArgumentParser, messages: int) -> None:
    """The log's shape and the replay's settings, shared with ``bench_replay_resume.py``."""
    ap.add_argument("--messages", type=int, default=messages)
    ap.add_argument("--body", type=int, default=256)
    ap.add_argument("--keys", type=int, default=64)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--window", type=int, default=1000)
    ap.add_argument("--master", default="local[2]")


def write_log(data: Path, args: argparse.Namespace) -> None:
    """A mirror log of exchange ``src`` under ``data``: ``args.messages`` records of ``args.body``
    bytes over ``args.keys`` routing keys, written in batches of 10,000."""
    log = MirrorLog(data, "/", "src")
    log.recover()
    body = b"x" * args.body
    for start in range(0, args.messages, 10_000):  # keys counted over the whole log, not per batch
        log.append_many([MirrorRecord(1_700_000_000_000 + i, f"k.{i % args.keys}", b"", body)
                         for i in range(start, min(start + 10_000, args.messages))])
    log.close()


@contextmanager
def replay_setup(args: argparse.Namespace, prefix: str) -> Iterator[tuple[Path, Any, Any, str]]:
    """What both replay benchmarks start from: a temporary directory whose ``data`` holds the log
    (``write_log``), a broker on it, a pika channel to that broker, a Spark session and the
    broker's AMQP URL; all stopped when the block ends."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from headrace.cli.spark_commands import spark_session

    with tempfile.TemporaryDirectory(prefix=prefix) as tmpdir:
        tmp = Path(tmpdir)
        write_log(tmp / "data", args)
        server = Headrace(tmp)
        try:
            # no heartbeats: the channel sits idle while Spark works
            conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port, heartbeat=0))
            spark = spark_session(args.master, ())
            try:
                yield tmp, conn.channel(), spark, f"amqp://guest:guest@127.0.0.1:{server.port}/%2F"
            finally:
                spark.stop()
                conn.close()
        finally:
            server.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    add_log_args(ap, messages=200_000)
    args = ap.parse_args()
    with replay_setup(args, "headrace-replay-") as (tmp, ch, spark, url):
        from headrace.spark_bridge.replay import replay

        ch.exchange_declare("replayed", "topic", durable=True, arguments={
            "x-message-deduplication": True, "x-cache-size": args.window * args.partitions * 2})
        ch.queue_declare("replayed-q", durable=True)
        ch.queue_bind("replayed-q", "replayed", "#")
        ch.exchange_declare("warm-up", "topic")
        # warm-up: JVM, Python workers and the broker's connection path, on a small range
        replay(spark, str(tmp / "data"), "src", amqp_url=url, to_exchange="warm-up", to_offset=999,
               partitions=args.partitions, window=args.window, progress_dir=str(tmp / "warm"))
        start = time.perf_counter()
        n = replay(spark, str(tmp / "data"), "src", amqp_url=url, to_exchange="replayed",
                   partitions=args.partitions, window=args.window, progress_dir=str(tmp / "progress"))
        seconds = time.perf_counter() - start
        queued = ch.queue_declare("replayed-q", passive=True).method.message_count
        print(json.dumps({"messages": n, "queued": queued, "seconds": round(seconds, 2),
                          "msg_s": round(n / seconds), "partitions": args.partitions, "window": args.window,
                          "master": args.master}), flush=True)


if __name__ == "__main__":
    main()
