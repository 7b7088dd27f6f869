"""What topic bindings leave the cyclic garbage collector to walk, in one process, no sockets.

    .venv/bin/python benchmarks/bench_bindings_gc.py [--bindings 100000] [--kind topic|direct]

Under the broker's collector settings (``server/app.py``'s ``tune_gc``: start-up frozen, young
collections every 10,000 allocations) it binds ``--bindings`` patterns of the ``topic100k``
scenario (``amqp_load.topic_patterns``) over ten queues to one exchange and reports: the objects
the collector tracks per binding (the ``Binding`` included), microseconds per bind (making the
``Binding`` included), the full collections that ran while binding (each in ms), one full
collection afterwards (ms), an uncached route (µs, the exchange's route cache cleared before
each), and microseconds per unbind. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from amqp_load import topic_patterns  # noqa: E402

from headrace.exchanges import Binding, DestinationKind, make_exchange  # noqa: E402
from headrace.server.app import GC_YOUNG_THRESHOLD  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bindings", type=int, default=100_000)
    ap.add_argument("--kind", choices=("topic", "direct"), default="topic")
    args = ap.parse_args()
    n = args.bindings
    keys = topic_patterns(n) if args.kind == "topic" else [f"user.{i}" for i in range(n)]
    queues = [f"q{i % 10}" for i in range(n)]
    routes = [f"svc{(i * 7919) % n}.{'eu' if i % 2 else 'us'}.{'created' if i % 3 else 'updated'}"
              if args.kind == "topic" else f"user.{(i * 7919) % n}" for i in range(5000)]
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)
    full: list[float] = []
    started: list[float] = []

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif info["generation"] == 2:
            full.append(round((time.perf_counter() - started[-1]) * 1000, 1))

    exchange = make_exchange(args.kind, "ex")
    before = len(gc.get_objects())
    gc.callbacks.append(timed)
    bindings = []  # made as the broker makes them, one per bind (each is one of the tracked objects)
    t0 = time.perf_counter()
    for queue, key in zip(queues, keys):
        b = Binding.make("ex", queue, DestinationKind.QUEUE, key)
        exchange.bind(b)
        bindings.append(b)
    bind_us = (time.perf_counter() - t0) / n * 1e6
    gc.callbacks.remove(timed)
    gc.collect()
    tracked = (len(gc.get_objects()) - before) / n
    t0 = time.perf_counter()
    gc.collect()
    full_ms = (time.perf_counter() - t0) * 1000
    cache = getattr(exchange, "_cache", {})
    runs = []
    for _ in range(7):
        t0 = time.perf_counter()
        for key in routes:
            cache.clear()
            exchange.destinations(key, None)
        runs.append((time.perf_counter() - t0) / len(routes) * 1e6)
    t0 = time.perf_counter()
    for b in bindings:
        exchange.unbind(b)
    unbind_us = (time.perf_counter() - t0) / n * 1e6
    print(json.dumps({"kind": args.kind, "bindings": n, "tracked_per_binding": round(tracked, 2),
                      "bind_us": round(bind_us, 2), "full_collections_while_binding_ms": full,
                      "full_collection_ms": round(full_ms, 1), "uncached_route_us": round(statistics.median(runs), 2),
                      "unbind_us": round(unbind_us, 2)}))


if __name__ == "__main__":
    main()
