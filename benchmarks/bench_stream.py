"""Stream queue figures: append rate (until the broker has the messages in the stream's fsynced
log), consume rate of consumers reading at different offsets, and the broker's RSS while they
read a long stream (memory must not grow with the stream's length or the number of consumers).

    .venv/bin/python benchmarks/bench_stream.py [--messages 1000000] [--consumers 10] [--read 50000]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import amqp_load  # noqa: E402
import pika  # noqa: E402
from run import Headrace  # noqa: E402

STREAM = "bench-stream"


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def stream_length(ch: pika.adapters.blocking_connection.BlockingChannel) -> int:
    return ch.queue_declare(STREAM, durable=True, passive=True).method.message_count


def reader(target: amqp_load.Target, start: int, count: int, out: mp.Queue) -> None:
    """One consumer from ``start``: ``count`` deliveries, acked every 500 (multiple)."""
    conn = pika.BlockingConnection(target.params)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=2000)
    got = 0
    t0 = time.perf_counter()

    def on_message(chan, method, props, body):  # noqa: ANN001
        nonlocal got
        got += 1
        if got % 500 == 0:
            chan.basic_ack(method.delivery_tag, multiple=True)
        if got >= count:
            chan.stop_consuming()

    ch.basic_consume(STREAM, on_message, arguments={"x-stream-offset": start})
    ch.start_consuming()
    out.put((got, time.perf_counter() - t0))
    conn.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--consumers", type=int, default=10)
    ap.add_argument("--read", type=int, default=50_000, help="messages each consumer reads")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="headrace-stream-") as tmpdir:
        server = Headrace(Path(tmpdir))
        target = amqp_load.Target("headrace", "127.0.0.1", server.port)
        try:
            conn = pika.BlockingConnection(target.params)
            ch = conn.channel()
            ch.queue_declare(STREAM, durable=True, arguments={"x-queue-type": "stream"})
            rss_empty = rss(server.proc.pid)
            out: mp.Queue = mp.Queue()
            t0 = time.perf_counter()
            procs = [mp.Process(target=amqp_load.producer,
                                args=(target, "", [STREAM], b"x" * args.size, args.messages // 2, False, False, 0,
                                      out)) for _ in range(2)]
            for p in procs:
                p.start()
            for p in procs:
                p.join()
            total = (args.messages // 2) * 2
            while stream_length(ch) < total:
                time.sleep(0.01)
            publish_s = time.perf_counter() - t0
            rss_after_publish = rss(server.proc.pid)
            # consumers spread over the stream, each reading its own window
            starts = [i * total // args.consumers for i in range(args.consumers)]
            peak = [rss_after_publish]
            done = threading.Event()

            def sample() -> None:
                while not done.is_set():
                    peak[0] = max(peak[0], rss(server.proc.pid))
                    time.sleep(0.1)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            t1 = time.perf_counter()
            read_out: mp.Queue = mp.Queue()
            readers = [mp.Process(target=reader, args=(target, s, min(args.read, total - s), read_out))
                       for s in starts]
            for p in readers:
                p.start()
            results = [read_out.get() for _ in readers]
            consume_s = time.perf_counter() - t1
            for p in readers:
                p.join()
            done.set()
            delivered = sum(n for n, _ in results)
            disk = sum(f.stat().st_size for f in (Path(tmpdir) / "headrace" / "streams").rglob("*") if f.is_file())
            print(f"stream of {total:,} messages of {args.size} B ({disk / 1e6:,.0f} MB on disk)")
            print(f"append rate (2 producers, until in the fsynced log): {total / publish_s:,.0f} msg/s")
            print(f"consume: {args.consumers} consumers at offsets {starts[0]:,} .. {starts[-1]:,}, "
                  f"{delivered:,} deliveries in {consume_s:.1f} s = {delivered / consume_s:,.0f} msg/s")
            print(f"broker RSS: empty {rss_empty / 1e6:.0f} MB, after publish {rss_after_publish / 1e6:.0f} MB, "
                  f"peak while {args.consumers} consumers read {peak[0] / 1e6:.0f} MB")
            conn.close()
        finally:
            server.stop()


if __name__ == "__main__":
    main()
