"""Resident memory per object: queue, binding (topic and direct), exchange, connection, channel.

    .venv/bin/python benchmarks/bench_object_costs.py [--queues 10000] [--bindings 100000]
        [--exchanges 5000] [--connections 200] [--channels 1000] [--runs 3]

Method: for each kind of object, each run starts a fresh broker subprocess (empty data directory,
watermark out of the way), adds what that kind needs first (the queues bindings go to, the one
connection channels open on), then adds N objects of that kind: idle queues (``/api/definitions``
imports of 1,000 objects each, as a single import's transient JSON would be counted too), topic
bindings from ``amq.topic`` spread over the queues (keys ``k.<i>.#``, distinct), direct bindings from ``amq.direct`` (keys ``rk<i>``), direct exchanges,
pika connections, channels on one connection. A fresh broker per kind, because memory one step
freed (an import's parsed JSON) would otherwise be reused by the next. Before and after it reads
the broker's RSS (``/proc/<pid>/status`` VmRSS, through psutil) once it is steady (two reads
0.3 s apart within 64 KiB), and prints the growth over N as bytes per object. The figure is the
median over the runs (each run a fresh broker). RSS is what a watermark sees; it includes what
the allocator keeps around, so the figures are a little coarse for small N (use N large enough
that the growth is tens of MiB). It also prints what the broker's topology gauge
(``headrace_topology_memory_bytes`` on ``/metrics``) counts for the same objects, which should
be at least the measured cost. Client-side objects (pika's) are not in the broker's RSS.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import pika
import psutil
from run import Headrace

AUTH = ("guest", "guest")
CHUNK = 1000  # objects per definitions import


def steady_rss(proc: psutil.Process) -> int:
    last = proc.memory_info().rss
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = proc.memory_info().rss
        if abs(now - last) < 64 << 10:
            return now
        last = now
    return last


def gauge(http: httpx.Client) -> int | None:
    time.sleep(0.6)  # the broker samples it every 0.5 s
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("headrace_topology_memory_bytes "):
            return int(float(line.split()[1]))
    return None  # a broker without the gauge


KINDS = ("queue", "binding_topic", "binding_direct", "exchange", "connection", "channel")


def measure_kind(kind: str, args: argparse.Namespace) -> tuple[float, float | None]:
    """One fresh broker: what ``kind`` needs first, then N of ``kind``; RSS and gauge growth per object."""
    with tempfile.TemporaryDirectory() as tmp:
        server = Headrace(Path(tmp), env={"HEADRACE_MEMORY_HIGH_WATERMARK": "0.99", "HEADRACE_METRICS": "aggregate"})
        proc = psutil.Process(server.proc.pid)
        http = httpx.Client(base_url=f"http://127.0.0.1:{server.http_port}", auth=AUTH, timeout=300)
        url = f"amqp://guest:guest@127.0.0.1:{server.port}/%2F"
        conns: list[pika.BlockingConnection] = []
        try:
            def definitions(**kinds: list[dict]) -> None:
                """Imported ``CHUNK`` objects a request: a single import of 100,000 bindings leaves
                its parsed JSON's freed memory spread between the objects it made, which the RSS
                growth would count as theirs (~600 B a binding more, measured)."""
                for kind, items in kinds.items():
                    for start in range(0, len(items), CHUNK):
                        http.post("/api/definitions", json={"vhosts": [{"name": "/"}],
                                                            kind: items[start:start + CHUNK]}).raise_for_status()

            q, b = args.queues, args.bindings
            queues = [{"name": f"queue-{i}", "vhost": "/", "durable": False, "auto_delete": False, "arguments": {}}
                      for i in range(q)]
            count, add = {
                "queue": (q, lambda: definitions(queues=queues)),
                "binding_topic": (b, lambda: definitions(bindings=[
                    {"source": "amq.topic", "vhost": "/", "destination": f"queue-{i % q}",
                     "destination_type": "queue", "routing_key": f"k.{i}.#", "arguments": {}}
                    for i in range(b)])),
                "binding_direct": (b, lambda: definitions(bindings=[
                    {"source": "amq.direct", "vhost": "/", "destination": f"queue-{i % q}",
                     "destination_type": "queue", "routing_key": f"rk{i}", "arguments": {}} for i in range(b)])),
                "exchange": (args.exchanges, lambda: definitions(exchanges=[
                    {"name": f"ex-{i}", "vhost": "/", "type": "direct", "durable": False, "auto_delete": False,
                     "internal": False, "arguments": {}} for i in range(args.exchanges)])),
                "connection": (args.connections, lambda: conns.extend(
                    pika.BlockingConnection(pika.URLParameters(url)) for _ in range(args.connections))),
                "channel": (args.channels, lambda: [conns[0].channel() for _ in range(args.channels)]),
            }[kind]
            if kind.startswith("binding"):
                definitions(queues=queues)
            if kind == "channel":
                conns.append(pika.BlockingConnection(pika.URLParameters(url)))
            rss0, g0 = steady_rss(proc), gauge(http)
            kept = add()
            rss1, g1 = steady_rss(proc), gauge(http)
            del kept
            est = (g1 - g0) / count if g0 is not None and g1 is not None else None
            return (rss1 - rss0) / count, est
        finally:
            for c in conns:
                c.close()
            http.close()
            server.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queues", type=int, default=10_000)
    ap.add_argument("--bindings", type=int, default=100_000)
    ap.add_argument("--exchanges", type=int, default=5_000)
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--channels", type=int, default=1_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kinds", default=",".join(KINDS))
    args = ap.parse_args()
    for name in args.kinds.split(","):
        runs = [measure_kind(name, args) for _ in range(args.runs)]
        measured = [r[0] for r in runs]
        gauged = [r[1] for r in runs if r[1] is not None]
        print(json.dumps({"object": name, "rss_bytes_each": round(statistics.median(measured)),
                          "runs": [round(m) for m in measured],
                          "gauge_bytes_each": round(statistics.median(gauged)) if gauged else None}), flush=True)


if __name__ == "__main__":
    main()
