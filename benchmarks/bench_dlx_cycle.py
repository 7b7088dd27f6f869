"""Two queues that dead-letter to each other on a 1 ms TTL: does the broker let go of the messages,
and what does it cost while they are there?

    .venv/bin/python benchmarks/bench_dlx_cycle.py [--messages 100] [--settle 3] [--window 7]

One fresh broker. Queues a and b each have ``x-message-ttl: 1`` and dead-letter to the other through
the default exchange (``x-dead-letter-routing-key``); ``--messages`` are published to a. Reported:
how long until one ``/api/queues`` listing shows both empty (``drained_s``, null if not within
``--settle`` seconds), then over the ``--window`` seconds that follow: the entries into the pair
(the queues' ``message_stats.publish``), the broker's CPU (user + system time over wall time, from
``/proc``), and the round trip of a ``queue.declare passive`` on an idle queue, sampled every 50 ms
(median and largest), next to the same round trip measured before publishing. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pika

sys.path.insert(0, str(Path(__file__).parent))
import run  # noqa: E402


def round_trip(ch: Any, queue: str) -> float:
    started = time.perf_counter()
    ch.queue_declare(queue, passive=True)
    return (time.perf_counter() - started) * 1000


def pair_state(http: httpx.Client) -> tuple[int, int]:
    """(messages in a and b, entries into a and b so far), from one listing: one instant."""
    listing = http.get("/api/queues/%2F", params={"columns": "name,messages,message_stats.publish"}).json()
    queues = [q for q in listing if q["name"] in ("a", "b")]
    return sum(q["messages"] for q in queues), sum(q.get("message_stats", {}).get("publish", 0) for q in queues)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--settle", type=float, default=3.0)
    parser.add_argument("--window", type=float, default=7.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = run.Headrace(Path(tmp))
        try:
            result = measure(server, args)
        finally:
            server.stop()
    print(json.dumps(result))


def measure(server: run.Headrace, args: argparse.Namespace) -> dict[str, Any]:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
    ch = conn.channel()
    run.wait_port(server.http_port, 30)
    http = httpx.Client(base_url=f"http://127.0.0.1:{server.http_port}", auth=("guest", "guest"), timeout=10)
    ch.queue_declare("idle")
    idle = [round_trip(ch, "idle") for _ in range(40)]
    for name, other in (("a", "b"), ("b", "a")):
        ch.queue_declare(name, arguments={"x-message-ttl": 1, "x-dead-letter-exchange": "",
                                          "x-dead-letter-routing-key": other})
    published = time.monotonic()
    for i in range(args.messages):
        ch.basic_publish("", "a", b"m", pika.BasicProperties(message_id=str(i)))
    drained = None
    most = 0
    while time.monotonic() - published < args.settle:
        messages, _ = pair_state(http)
        most = max(most, messages)
        if messages == 0 and drained is None:
            drained = time.monotonic() - published
        time.sleep(0.02)
    _, entries_before = pair_state(http)
    cpu_before, wall_before = run.cpu_seconds(server.proc.pid), time.monotonic()
    busy = []
    while time.monotonic() - wall_before < args.window:
        busy.append(round_trip(ch, "idle"))
        time.sleep(0.05)
    cpu_after, wall_after = run.cpu_seconds(server.proc.pid), time.monotonic()
    messages, entries_after = pair_state(http)
    conn.close()
    http.close()
    return {"messages": args.messages, "drained_s": None if drained is None else round(drained, 3),
            "most_in_pair": most, "left_in_pair": messages, "window_s": args.window,
            "entries_in_window": entries_after - entries_before,
            "broker_cpu_pct": round(100 * (cpu_after - cpu_before) / (wall_after - wall_before), 1),
            "rtt_idle_ms_p50": round(statistics.median(idle), 2),
            "rtt_ms_p50": round(statistics.median(busy), 2), "rtt_ms_max": round(max(busy), 2)}


if __name__ == "__main__":
    main()
