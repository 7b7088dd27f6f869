"""Shovel throughput: how fast a dynamic shovel moves a backlog from one headrace to another.

    .venv/bin/python benchmarks/bench_shovel.py [--messages 100000] [--size 256] [--rounds 3]

Starts two ``headrace serve`` processes on loopback ports. Each round fills a durable queue on the
first with --messages persistent messages, declares a shovel on the first (``amqp://`` source, the
second broker as destination, or the first again for ``local``), and times from the shovel's PUT
until the destination queue holds them all (polled through the management API every 20 ms), and
compares that with the time one pika publisher (no confirms) took to fill the queue in the same
round, a yardstick on a shared, noisy machine.
Modes: ``on-confirm`` (the default ack mode: the source is acked once the destination confirmed),
``on-publish``, and ``local`` (on-confirm, both ends this broker). Prints the median rate per
mode.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pika

AUTH = ("guest", "guest")


class Broker:
    def __init__(self, data: Path) -> None:
        self.data = data
        ports_file = data / "ports.json"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "headrace", "serve", "--amqp-port", "0", "--http-port", "0",
             "--data-dir", str(data), "--ports-file", str(ports_file)],
            env={**os.environ}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not ports_file.exists():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit("broker did not start")
            time.sleep(0.05)
        ports = json.loads(ports_file.read_text())
        self.amqp, self.http = ports["amqp"], ports["http"]

    def api(self, method: str, path: str, body: object = None) -> httpx.Response:
        return httpx.request(method, f"http://127.0.0.1:{self.http}{path}", auth=AUTH, json=body, timeout=120)

    def count(self, queue: str) -> int:
        r = self.api("GET", f"/api/queues/%2F/{queue}")
        return int(r.json().get("messages", 0)) if r.status_code == 200 else 0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def fill(broker: Broker, queue: str, n: int, size: int) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{broker.amqp}/%2F"))
    ch = conn.channel()
    ch.queue_declare(queue, durable=True)
    body = b"x" * size
    props = pika.BasicProperties(delivery_mode=2)
    for _ in range(n):
        ch.basic_publish("", queue, body, props)
    conn.close()
    while broker.count(queue) < n:
        time.sleep(0.05)


def one_round(a: Broker, b: Broker, mode: str, n: int, size: int, round_no: int) -> tuple[float, float]:
    """(seconds to move, seconds one pika publisher took to fill the source: the same machine's
    yardstick in the same round)."""
    src, dest, name = f"src-{mode}-{round_no}", f"dst-{mode}-{round_no}", f"bench-{mode}-{round_no}"
    target = a if mode == "local" else b
    began = time.perf_counter()
    fill(a, src, n, size)
    filled = time.perf_counter() - began
    dest_uri = "amqp://" if mode == "local" else f"amqp://guest:guest@127.0.0.1:{b.amqp}/%2F"
    value = {"src-uri": "amqp://", "src-queue": src, "dest-uri": dest_uri, "dest-queue": dest,
             "ack-mode": "on-publish" if mode == "on-publish" else "on-confirm", "src-prefetch-count": 1000}
    start = time.perf_counter()
    assert a.api("PUT", f"/api/parameters/shovel/%2F/{name}", {"value": value}).status_code == 201
    while target.count(dest) < n:
        time.sleep(0.02)
    elapsed = time.perf_counter() - start
    a.api("DELETE", f"/api/parameters/shovel/%2F/{name}")
    a.api("DELETE", f"/api/queues/%2F/{src}")
    target.api("DELETE", f"/api/queues/%2F/{dest}")
    return elapsed, filled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="on-confirm,on-publish,local")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "a").mkdir()
        (Path(tmp) / "b").mkdir()
        a, b = Broker(Path(tmp) / "a"), Broker(Path(tmp) / "b")
        try:
            for mode in args.modes.split(","):
                runs = [one_round(a, b, mode, args.messages, args.size, r) for r in range(args.rounds)]
                med = statistics.median(t for t, _ in runs)
                ratio = statistics.median(f / t for t, f in runs)
                print(f"{mode:>10}: {args.messages} x {args.size} B in {med:.2f} s median "
                      f"({args.messages / med:,.0f} msg/s; rounds {', '.join(f'{t:.2f}' for t, _ in runs)}); "
                      f"{ratio:.2f}x the rate of the pika publisher that filled the queue "
                      f"({', '.join(f'{f:.2f}' for _, f in runs)} s)")
        finally:
            a.stop()
            b.stop()


if __name__ == "__main__":
    main()
