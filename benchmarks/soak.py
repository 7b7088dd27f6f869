"""A long soak: a real broker under mixed, moderate load for a bounded time, its RSS and the
publish-to-deliver latency sampled throughout. Memory must stay flat once warmed up.

    .venv/bin/python benchmarks/soak.py [--minutes 30] [--warmup-minutes 5] [--rss-bound-mib 32]
        [--sample-seconds 5] [--window-minutes 5]

``make soak`` runs it with the defaults. It starts ``headrace serve`` in a subprocess on loopback
ports chosen by the kernel, in a temporary data directory, with a small resident limit per queue
(``HEADRACE_QUEUE_MAX_RESIDENT_MESSAGES``) so one queue really spills to disk. Load, each part on
its own pika connection in a thread (the machine is shared, so rates are modest and fixed):

- pubsub: 200 msg/s through a direct exchange to a queue with an acking consumer; each body
  carries its publish time, so the consumer measures publish-to-deliver latency;
- confirms: 100 persistent msg/s with publisher confirms to a durable queue, consumed and acked;
- spill: a burst fills a queue to 4x the resident limit with nobody consuming, then a consumer
  drains it to empty; again 20 s later;
- stream: 50 msg/s into a stream with a size bound (old segments are dropped); every few
  seconds a consumer attaches at ``first`` or ``last``, reads a few hundred, and leaves;
- churn: consumers connecting, consuming from the pubsub queue for a moment, and disconnecting.

Every ``--sample-seconds`` the broker's RSS (from /proc) and the latencies measured since the last
sample are recorded. At the end it prints one JSON summary: RSS at start, after warm-up and at the
end, the slope after warm-up (least squares, MiB per hour), and p50/p99 latency per window. It exits
non-zero if RSS at the end exceeds RSS after warm-up by more than ``--rss-bound-mib``, if a load
thread failed, or if the broker did not exit 0 on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pika

RESIDENT = 2000  # the spill queue's resident limit: the burst goes to 4x this
STAMP = struct.Struct("!d")


class Soak:
    """The broker process, the load threads' shared stop flag, and what they measured."""

    def __init__(self, data_dir: Path) -> None:
        ports = data_dir / "ports.json"
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "HEADRACE_QUEUE_MAX_RESIDENT_MESSAGES": str(RESIDENT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "headrace", "serve", "--amqp-port", "0", "--http-port", "0",
             "--data-dir", str(data_dir / "data"), "--ports-file", str(ports)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        self.log: list[str] = []
        ready = threading.Event()
        threading.Thread(target=self._drain, args=(ready,), daemon=True).start()
        if not ready.wait(30) or self.proc.poll() is not None:
            self.proc.kill()
            raise SystemExit("broker did not start:\n" + "".join(self.log[-40:]))
        self.port = json.loads(ports.read_text())["amqp"]
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.latencies: list[float] = []  # seconds, since the last sample
        self.counts: dict[str, int] = {}
        self.errors: list[str] = []

    def _drain(self, ready: threading.Event) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)
            del self.log[:-200]
            if "headrace: data directory" in line:
                ready.set()
        ready.set()

    def connect(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", self.port, "/", pika.PlainCredentials("guest", "guest"), heartbeat=0,
            blocked_connection_timeout=60))

    def count(self, what: str, n: int = 1) -> None:
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + n

    def rss(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def run(self, name: str, body: Callable[[], None]) -> threading.Thread:
        """Run one part of the load in a thread; a failure is recorded and ends the soak."""
        def guarded() -> None:
            try:
                body()
            except Exception as exc:  # noqa: BLE001 - reported in the summary, and the run fails
                if not self.stop.is_set():
                    self.errors.append(f"{name}: {exc!r}")
                    self.stop.set()
        thread = threading.Thread(target=guarded, name=name, daemon=True)
        thread.start()
        return thread


def paced(soak: Soak, rate: float, step: Callable[[], None], conn: pika.BlockingConnection) -> None:
    """Call ``step`` ``rate`` times a second until the soak stops, in batches of 10 ms."""
    interval = 1.0 / rate
    due = time.monotonic()
    while not soak.stop.is_set():
        now = time.monotonic()
        while due <= now:
            step()
            due += interval
        conn.process_data_events(time_limit=max(0.0, min(0.01, due - time.monotonic())))


def pubsub(soak: Soak) -> None:
    conn = soak.connect()
    ch = conn.channel()
    ch.exchange_declare("soak.direct", "direct")
    ch.queue_declare("soak.pubsub")
    ch.queue_bind("soak.pubsub", "soak.direct", "k")

    def consume() -> None:
        cconn = soak.connect()
        cch = cconn.channel()
        cch.basic_qos(prefetch_count=100)

        def on_message(channel: Any, method: Any, props: Any, body: bytes) -> None:
            latency = time.monotonic() - STAMP.unpack_from(body)[0]
            with soak.lock:
                soak.latencies.append(latency)
            soak.count("pubsub delivered")
            channel.basic_ack(method.delivery_tag)
        cch.basic_consume("soak.pubsub", on_message)
        while not soak.stop.is_set():
            cconn.process_data_events(time_limit=0.2)
        cconn.close()
    soak.run("pubsub consumer", consume)
    pad = b"x" * 248

    def step() -> None:
        ch.basic_publish("soak.direct", "k", STAMP.pack(time.monotonic()) + pad)
        soak.count("pubsub published")
    paced(soak, 200, step, conn)
    conn.close()


def confirms(soak: Soak) -> None:
    conn = soak.connect()
    ch = conn.channel()
    ch.queue_declare("soak.confirms", durable=True)
    ch.confirm_delivery()
    cconn = soak.connect()
    cch = cconn.channel()
    cch.basic_qos(prefetch_count=200)

    def on_message(channel: Any, method: Any, props: Any, body: bytes) -> None:
        channel.basic_ack(method.delivery_tag)
        soak.count("confirms acked")
    cch.basic_consume("soak.confirms", on_message)
    props = pika.BasicProperties(delivery_mode=2)
    body = b"c" * 512
    interval = 0.1  # 10 confirmed publishes (each waited for) every 100 ms
    while not soak.stop.is_set():
        started = time.monotonic()
        for _ in range(10):
            ch.basic_publish("", "soak.confirms", body, props)  # raises if nacked or returned
        soak.count("confirms confirmed", 10)
        while not soak.stop.is_set() and time.monotonic() - started < interval:  # returns early on events
            cconn.process_data_events(time_limit=max(0.0, interval - (time.monotonic() - started)))
    cconn.close()
    conn.close()


def spill(soak: Soak) -> None:
    conn = soak.connect()
    ch = conn.channel()
    ch.queue_declare("soak.spill", durable=True)
    body = b"s" * 1024
    props = pika.BasicProperties(delivery_mode=2)
    while not soak.stop.is_set():
        for i in range(4 * RESIDENT):  # the burst: past the resident limit, so it spills
            ch.basic_publish("", "soak.spill", body, props)
            if i % 200 == 199:
                conn.process_data_events(time_limit=0.05)
                if soak.stop.is_set():
                    return
        soak.count("spill bursts")
        drained = 0
        ch.basic_qos(prefetch_count=200)
        tag = ch.basic_consume("soak.spill", lambda c, m, p, b: c.basic_ack(m.delivery_tag))
        deadline = time.monotonic() + 120
        while not soak.stop.is_set():
            conn.process_data_events(time_limit=0.2)
            drained = ch.queue_declare("soak.spill", passive=True).method.message_count
            if drained == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"spill queue not drained in 120 s ({drained} left)")
        ch.basic_cancel(tag)
        soak.count("spill drains")
        soak.stop.wait(20)
    conn.close()


def stream(soak: Soak) -> None:
    conn = soak.connect()
    ch = conn.channel()
    ch.queue_declare("soak.stream", durable=True, arguments={
        "x-queue-type": "stream", "x-max-length-bytes": 8 << 20, "x-stream-max-segment-size-bytes": 1 << 20})

    def readers() -> None:
        n = 0
        while not soak.stop.wait(3):
            rconn = soak.connect()
            rch = rconn.channel()
            rch.basic_qos(prefetch_count=100)
            got = [0]

            def on_message(channel: Any, method: Any, props: Any, body: bytes) -> None:
                got[0] += 1
                channel.basic_ack(method.delivery_tag)
            offset = "first" if n % 2 == 0 else "last"
            rch.basic_consume("soak.stream", on_message, arguments={"x-stream-offset": offset})
            deadline = time.monotonic() + 10
            while got[0] < 300 and time.monotonic() < deadline and not soak.stop.is_set():
                rconn.process_data_events(time_limit=0.1)
            soak.count("stream reads", got[0])
            rconn.close()
            n += 1
    soak.run("stream readers", readers)
    body = b"t" * 512

    def step() -> None:
        ch.basic_publish("", "soak.stream", body)
        soak.count("stream published")
    paced(soak, 50, step, conn)
    conn.close()


def churn(soak: Soak) -> None:
    """Consumers coming and going on the pubsub queue: a connection, a channel, a consumer for
    about half a second, then a close (half of them with deliveries left unacked, requeued)."""
    n = 0
    while not soak.stop.wait(0.5):
        cconn = soak.connect()
        cch = cconn.channel()
        cch.basic_qos(prefetch_count=20)
        ack = n % 2 == 0
        cch.basic_consume("soak.pubsub", lambda c, m, p, b: c.basic_ack(m.delivery_tag) if ack else None)
        cconn.process_data_events(time_limit=0.5)
        cconn.close()
        soak.count("churn connections")
        n += 1


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def slope_mib_per_hour(points: list[tuple[float, int]]) -> float:
    """Least-squares slope of RSS over time."""
    if len(points) < 2:
        return 0.0
    ts = [t for t, _ in points]
    rs = [r for _, r in points]
    mt, mr = statistics.fmean(ts), statistics.fmean(rs)
    den = sum((t - mt) ** 2 for t in ts)
    return sum((t - mt) * (r - mr) for t, r in points) / den * 3600 / (1 << 20) if den else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--warmup-minutes", type=float, default=5, help="capped at a fifth of the run")
    ap.add_argument("--rss-bound-mib", type=float, default=32,
                    help="the most RSS may grow from the end of warm-up to the end")
    ap.add_argument("--sample-seconds", type=float, default=5)
    ap.add_argument("--window-minutes", type=float, default=5, help="capped at a fifth of the run")
    args = ap.parse_args()
    warmup = min(args.warmup_minutes, args.minutes / 5) * 60
    window = min(args.window_minutes, args.minutes / 5) * 60
    with tempfile.TemporaryDirectory(prefix="headrace-soak-") as tmp:
        soak = Soak(Path(tmp))
        try:
            return drive(soak, args.minutes * 60, warmup, window, args)
        finally:
            soak.stop.set()
            if soak.proc.poll() is None:
                soak.proc.kill()
                soak.proc.wait(10)


def drive(soak: Soak, duration: float, warmup: float, window: float, args: argparse.Namespace) -> int:
    rss_start = soak.rss()
    threads = [soak.run(name, lambda f=f: f(soak)) for name, f in  # type: ignore[misc]
               (("pubsub", pubsub), ("confirms", confirms), ("spill", spill), ("stream", stream), ("churn", churn))]
    t0 = time.monotonic()
    samples: list[tuple[float, int]] = []
    windows: list[list[float]] = []
    while not soak.stop.wait(args.sample_seconds):
        t = time.monotonic() - t0
        if soak.proc.poll() is not None:
            soak.errors.append(f"broker exited with {soak.proc.returncode}")
            break
        rss = soak.rss()
        samples.append((t, rss))
        with soak.lock:
            batch, soak.latencies = soak.latencies, []
        index = min(int(t // window), max(0, math.ceil(duration / window) - 1))  # the last sample: last window
        while len(windows) <= index:
            windows.append([])
        windows[index].extend(batch)
        print(f"{t:7.0f}s rss {rss / (1 << 20):7.1f} MiB  p50 {percentile(batch, 0.5) * 1e3:6.2f} ms  "
              f"p99 {percentile(batch, 0.99) * 1e3:6.2f} ms  n {len(batch)}", flush=True)
        if t >= duration:
            break
    soak.stop.set()
    for thread in threads:
        thread.join(15)
    soak.proc.send_signal(signal.SIGTERM)
    try:
        code = soak.proc.wait(30)
    except subprocess.TimeoutExpired:
        code = None
    if code != 0:
        soak.errors.append(f"broker exit code on SIGTERM: {code}")
    after = [(t, r) for t, r in samples if t >= warmup]
    rss_warm = after[0][1] if after else rss_start
    rss_end = samples[-1][1] if samples else rss_start
    growth = (rss_end - rss_warm) / (1 << 20)
    mib = 1 << 20
    summary = {
        "minutes": round(duration / 60, 2), "samples": len(samples),
        "rss_mib": {"start": round(rss_start / mib, 1), "after_warmup": round(rss_warm / mib, 1),
                    "end": round(rss_end / mib, 1),
                    "max_after_warmup": round(max((r for _, r in after), default=0) / mib, 1),
                    "growth_after_warmup": round(growth, 1), "bound": args.rss_bound_mib},
        "rss_slope_after_warmup_mib_per_hour": round(slope_mib_per_hour(after), 2),
        "latency_ms_per_window": [
            {"from_min": round(i * window / 60, 1), "n": len(w), "p50": round(percentile(w, 0.5) * 1e3, 2),
             "p99": round(percentile(w, 0.99) * 1e3, 2)} for i, w in enumerate(windows)],
        "counts": soak.counts, "errors": soak.errors,
    }
    print(json.dumps(summary, indent=1))
    if soak.errors:
        print("FAIL: " + "; ".join(soak.errors), file=sys.stderr)
        return 1
    if growth > args.rss_bound_mib:
        print(f"FAIL: RSS grew {growth:.1f} MiB after warm-up (bound {args.rss_bound_mib} MiB)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
