"""The backlog target on headrace alone: N messages with no consumer, then drained.

    python benchmarks/bench_backlog.py [--count 10000000] [--size 256] [--timeout 3600] [--persistent]
    python benchmarks/bench_backlog.py --count 10000000 --kill-restart [--dir PATH]

Prints one JSON line: publish rate, queue depth, peak broker RSS (sampled every 0.5 s across both
phases) and drain rate. ``run.py --scenarios backlog`` runs the same scenario side by side with
RabbitMQ at 1M messages; this script is for the 10M figure, which RabbitMQ cannot hold in RAM here.

``--kill-restart`` (a persistent, durable backlog): publish N, wait for one confirmed message
after them (every earlier record is then fsynced), kill -9 the broker, restart it on the same data
directory, and drain. Gives peak RSS while publishing, the restart time (until an AMQP handshake
succeeds: the broker recovers before it serves) and the broker's CPU seconds by then, peak RSS
during and after recovery, the depth found, and peak RSS and rate while draining.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import queue as queue_mod
import shutil
import signal
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import amqp_load
import pika
from run import Headrace, cpu_seconds


class PeakRss:
    """Samples a process's RSS every 0.2 s in a thread until ``stop``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self.peak = max(self.peak, amqp_load.rss_of(self.pid))
            except OSError:
                return

    def stop(self) -> float:
        """The peak in MB: the samples' or the kernel's high-water mark (VmHWM), whichever is
        higher (a restart shorter than a sampling period has no sample)."""
        self._stop.set()
        self._thread.join()
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        self.peak = max(self.peak, int(line.split()[1]) * 1024)
        except OSError:
            pass  # gone already: the samples stand
        return round(self.peak / 2**20, 1)


def _connect(port: int, timeout: float) -> pika.BlockingConnection:
    """The first AMQP handshake that succeeds: the broker only answers once recovery is over."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return pika.BlockingConnection(pika.ConnectionParameters(
                "127.0.0.1", port, heartbeat=0, socket_timeout=timeout, stack_timeout=timeout,
                blocked_connection_timeout=timeout))
        except pika.exceptions.AMQPConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def kill_restart(tmp: Path, count: int, size: int, timeout: float) -> dict[str, Any]:
    out: dict[str, Any] = {"count": count, "size": size}
    qname = f"bench-backlog-{uuid.uuid4().hex[:8]}"
    server = Headrace(tmp)
    rss = PeakRss(server.proc.pid)
    conn = _connect(server.port, 60)
    ch = conn.channel()
    ch.queue_declare(qname, durable=True)
    results: mp.Queue = mp.Queue()
    producers = 2
    per = count // producers
    body = b"x" * size
    start = time.perf_counter()
    procs = [mp.Process(target=amqp_load.producer,
                        args=(amqp_load.Target("h", "127.0.0.1", server.port), "", [qname], body, per,
                              True, False, 0, results)) for _ in range(producers)]
    amqp_load._run(procs)
    for _ in procs:
        results.get(timeout=timeout)
    amqp_load._join(procs)
    depth = 0
    while depth < per * producers and time.perf_counter() - start < timeout:
        depth = ch.queue_declare(qname, passive=True).method.message_count
        time.sleep(0.5)
    ch.confirm_delivery()  # one confirmed publish after the rest: they are all fsynced when it is
    ch.basic_publish("", qname, body, pika.BasicProperties(delivery_mode=2))
    out["publish_rate"] = round(per * producers / (time.perf_counter() - start))
    out["publish_peak_rss_mb"] = rss.stop()
    total = per * producers + 1
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait()
    conn = None

    start = time.perf_counter()
    server = Headrace(tmp)
    rss = PeakRss(server.proc.pid)
    try:
        conn = _connect(server.port, timeout)
        out["restart_seconds"] = round(time.perf_counter() - start, 1)
        out["restart_cpu_seconds"] = round(cpu_seconds(server.proc.pid), 1)
        out["restart_peak_rss_mb"] = rss.stop()
        out["rss_after_restart_mb"] = round(amqp_load.rss_of(server.proc.pid) / 2**20, 1)
        ch = conn.channel()
        out["depth_after_restart"] = ch.queue_declare(qname, passive=True).method.message_count
        rss = PeakRss(server.proc.pid)
        start = time.perf_counter()
        cons = mp.Process(target=amqp_load.consumer,
                          args=(amqp_load.Target("h", "127.0.0.1", server.port), [qname], total, 1000,
                                time.time() + timeout, results))
        amqp_load._run([cons])
        while True:
            try:
                r = results.get(timeout=0.5)
                break
            except queue_mod.Empty:
                if not cons.is_alive():
                    r = ("consumed", 0)
                    break
        out["drain_rate"] = round(r[1] / (time.perf_counter() - start))
        out["drained"] = r[1]
        out["drain_peak_rss_mb"] = rss.stop()
        amqp_load._join([cons])
        ch.queue_delete(qname)
        conn.close()
    finally:
        server.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=10_000_000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--persistent", action="store_true", help="durable queue, delivery_mode 2")
    ap.add_argument("--kill-restart", action="store_true",
                    help="persistent backlog, kill -9 after publishing, restart, drain")
    ap.add_argument("--dir", type=Path, default=None, help="parent of the data directory")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="headrace-backlog-", dir=args.dir))
    try:
        if args.kill_restart:
            result = kill_restart(tmp, args.count, args.size, args.timeout)
            print(json.dumps({"scenario": "backlog-kill-restart", **result}), flush=True)
            return
        server = Headrace(tmp)
        try:
            result = amqp_load.scenario_backlog(
                amqp_load.Target("headrace", "127.0.0.1", server.port), count=args.count, size=args.size,
                broker_pid=server.proc.pid, timeout=args.timeout,
                persistent=args.persistent)
        finally:
            server.stop()
        print(json.dumps({"scenario": "backlog", "size": args.size, **result}), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
