"""What queues, bindings, connections, channels and consumers cost in broker RSS, against what the
memory alarm's "held" calculation counts for them (server/net/alarms.py).

    python benchmarks/alarm_costs.py [--queues 5000] [--bindings 5000] [--connections 200]
                                     [--channels 500] [--consumers 2000]

Starts a broker, adds each kind of object in turn and prints one JSON line per kind: RSS growth per
object, the alarm's estimate per object (growth of /metrics' headrace_memory_used_bytes), and the
ratio. The estimate should be at least the measured cost, or the watermark does not hold.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pika
from run import Headrace

AUTH = ("guest", "guest")


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def used(http: httpx.Client) -> int:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("headrace_memory_used_bytes "):
            return int(float(line.split()[1]))
    raise RuntimeError("no headrace_memory_used_bytes")


def measure(name: str, count: int, pid: int, http: httpx.Client, add: Callable[[], object]) -> object:
    time.sleep(1.2)  # the alarm task samples every 0.5 s
    rss0, used0 = rss(pid), used(http)
    keep = add()
    time.sleep(1.2)
    rss1, used1 = rss(pid), used(http)
    per_rss, per_est = (rss1 - rss0) / count, (used1 - used0) / count
    print(json.dumps({"object": name, "count": count, "rss_bytes_each": round(per_rss),
                      "estimate_bytes_each": round(per_est),
                      "estimate_over_rss": round(per_est / per_rss, 2) if per_rss > 0 else None}),
          flush=True)
    return keep


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queues", type=int, default=5000)
    ap.add_argument("--bindings", type=int, default=5000)
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--channels", type=int, default=500)
    ap.add_argument("--consumers", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = Headrace(Path(tmp), env={"HEADRACE_METRICS": "aggregate"})
        pid = server.proc.pid
        http = httpx.Client(base_url=f"http://127.0.0.1:{server.http_port}", auth=AUTH, timeout=120)
        url = f"amqp://guest:guest@127.0.0.1:{server.port}/%2F"
        try:
            def definitions(**kinds: list[dict]) -> None:
                r = http.post("/api/definitions", json={"vhosts": [{"name": "/"}], **kinds})
                r.raise_for_status()

            measure("queue", args.queues, pid, http, lambda: definitions(queues=[
                {"name": f"q{i}", "vhost": "/", "durable": False, "auto_delete": False, "arguments": {}}
                for i in range(args.queues)]))
            measure("binding", args.bindings, pid, http, lambda: definitions(bindings=[
                {"source": "amq.topic", "vhost": "/", "destination": "q0", "destination_type": "queue",
                 "routing_key": f"k.{i}.#", "arguments": {}} for i in range(args.bindings)]))
            conns = measure("connection", args.connections, pid, http, lambda: [
                pika.BlockingConnection(pika.URLParameters(url)) for _ in range(args.connections)])
            one = conns[0]  # type: ignore[index]
            channels = measure("channel", args.channels, pid, http,
                               lambda: [one.channel() for _ in range(args.channels)])
            ch = channels[0]  # type: ignore[index]
            measure("consumer", args.consumers, pid, http, lambda: [
                ch.basic_consume("q1", lambda *a: None) for _ in range(args.consumers)])
        finally:
            http.close()
            server.stop()


if __name__ == "__main__":
    main()
