"""Where an object's memory goes: queues or bindings made in-process, RSS growth and tracemalloc's
largest allocation sites per object.

    .venv/bin/python benchmarks/profile_object_costs.py queue|topic|direct [--count N] [--trace]

A ``Broker`` with one vhost; for bindings, 10,000 queues first and N bindings spread over them
(distinct keys ``k.<i>.#`` or ``rk<i>``, made before the baseline so their strings are not
counted). Prints the RSS growth per object, and with ``--trace`` (which adds its own overhead to
RSS) the traced bytes per object and the 14 largest sites. A diagnostic beside
``bench_object_costs.py``, which measures a real broker.
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc

from headrace.exchanges import DestinationKind
from headrace.server.broker import Broker

QUEUES = 10_000


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=("queue", "topic", "direct"))
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--trace", action="store_true")
    args = ap.parse_args()
    vhost = Broker().add_vhost("/")
    n = args.count if args.kind != "queue" else QUEUES
    names = [f"queue-{i}" for i in range(QUEUES)]
    if args.kind != "queue":
        for name in names:
            vhost.declare_queue(name, owner=None, now=0.0)
    keys = [f"k.{i}.#" if args.kind == "topic" else f"rk{i}" for i in range(n)]
    dests = [names[i % QUEUES] for i in range(n)]
    exchange = "amq.topic" if args.kind == "topic" else "amq.direct"
    gc.collect()
    if args.trace:
        tracemalloc.start(1)
        before = tracemalloc.take_snapshot()
    rss0 = rss()
    if args.kind == "queue":
        for name in names:
            vhost.declare_queue(name, owner=None, now=0.0)
    else:
        for i in range(n):
            vhost.bind(exchange, dests[i], DestinationKind.QUEUE, keys[i], {})
    gc.collect()
    print(f"{args.kind}: RSS {(rss() - rss0) / n:.0f} B each over {n}")
    if args.trace:
        stats = tracemalloc.take_snapshot().compare_to(before, "lineno")
        print(f"traced {sum(s.size_diff for s in stats) / n:.0f} B each")
        for s in stats[:14]:
            print(f"{s.size_diff / n:8.1f} B  {s.count_diff / n:5.2f} blocks  {s.traceback[0]}")


if __name__ == "__main__":
    main()
