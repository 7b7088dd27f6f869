"""What one sample of the memory alarm's "held" figure costs as queues and bindings grow.

    .venv/bin/python benchmarks/bench_memory_sample.py [--queues 100000] [--bindings 100000] [--messages 10]
        [--connections 0]

In one process, no sockets: a broker's default vhost gets ``--queues`` queues, each holding
``--messages`` messages with an acking consumer on every other queue (half of them delivered,
unacked), and ``--bindings`` topic bindings spread over them; ``--connections`` real sessions
(each with one channel open) are opened on it; they have no handler, so their output counts as
sent (in the broker, a handler with output queued is in ``MemoryWatch.pending_output``). The shell samples this figure every
0.5 s and after every 4 MiB read from clients, on the event loop. Prints one JSON line: the
milliseconds per sample (median of 21) and the figure itself.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from headrace.exchanges import DestinationKind
from headrace.queues import Consumer
from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.broker.core import Broker
from headrace.server.net.alarms import held_memory

from bench_core import idle_ports, session


class _Sink:
    """A consumer's sink with room for a few deliveries, none ever acked."""

    def has_capacity(self) -> bool:
        return True

    def deliver(self, consumer: Any, queue: Any, entry: Any, now: float) -> None:
        pass

    def consumer_cancelled(self, consumer: Any) -> None:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queues", type=int, default=100_000)
    ap.add_argument("--bindings", type=int, default=100_000)
    ap.add_argument("--messages", type=int, default=10)
    ap.add_argument("--connections", type=int, default=0)
    args = ap.parse_args()
    broker = Broker(ports=idle_ports())
    broker.ensure_default("/", "guest", "guest")
    vhost = broker.vhosts["/"]
    vhost.declare_exchange("events", "topic")
    props = encode_properties(BasicProperties())
    sink = _Sink()
    for i in range(args.queues):
        queue = vhost.declare_queue(f"q{i}", owner=None, now=0.0)
        for _ in range(args.messages):
            broker.delivery.publish(vhost, "", f"q{i}", props, b"x" * 100, 0.0)
        if i % 2:
            broker.delivery.add_consumer(vhost, queue, Consumer(f"c{i}", sink, prefetch=args.messages // 2), 0.0)
    for i in range(args.bindings):
        vhost.bind("events", f"q{i % max(args.queues, 1)}", DestinationKind.QUEUE, f"svc.{i}.*", None)
    sessions = [session(broker) for _ in range(args.connections)]
    assert len(broker.connections) == args.connections
    times = []
    for _ in range(21):
        t0 = time.perf_counter()
        figure = held_memory(broker)
        times.append(time.perf_counter() - t0)
    print(json.dumps({"queues": args.queues, "bindings": args.bindings, "messages_per_queue": args.messages,
                      "connections": len(sessions),
                      "sample_ms": round(statistics.median(times) * 1e3, 3), "held_bytes": figure}))


if __name__ == "__main__":
    main()
