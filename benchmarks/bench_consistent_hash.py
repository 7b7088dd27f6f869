"""Routing through an x-consistent-hash exchange against a direct exchange: microseconds per route.

    .venv/bin/python benchmarks/bench_consistent_hash.py [--bindings 1000] [--routes 200000]

In one process: a direct exchange gets ``N`` bindings (queue ``q<i>`` on key ``k<i>``) and a
consistent-hash exchange ``N`` bindings of weight 1 (queue ``q<i>``, 100 ring points each); both
route ``--routes`` messages whose routing keys cycle over 10,000 keys (``order-<i>``; the direct
exchange's own keys for it, so every route finds its queue), in 7 alternated rounds timed in CPU
time of the process (``time.process_time``, so waiting for a core on a shared machine does not
count). Also times the ``N`` binds and the first route after them, which copies the ring into its
flat list (wall clock). Prints one JSON line: the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from headrace.exchanges import Binding, DestinationKind, Exchange, make_exchange

Q = DestinationKind.QUEUE


def one_round(ex: Exchange, keys: list[str], routes: int) -> float:
    """CPU seconds of this process per route (``process_time``: the time spent waiting for a
    core on a shared machine is not counted)."""
    lookup = lambda name: None  # noqa: E731
    route = ex.route
    n = len(keys)
    t0 = time.process_time()
    for i in range(routes):
        route(keys[i % n], None, lookup)
    return (time.process_time() - t0) / routes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bindings", type=int, default=1000)
    ap.add_argument("--routes", type=int, default=200_000)
    args = ap.parse_args()
    n = args.bindings
    direct = make_exchange("direct", "d")
    for i in range(n):
        direct.bind(Binding.make("d", f"q{i}", Q, f"k{i}"))
    chx = make_exchange("x-consistent-hash", "c")
    t0 = time.perf_counter()
    for i in range(n):
        chx.bind(Binding.make("c", f"q{i}", Q, "1"))
    bind_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    assert len(chx.route("first", None, lambda name: None).queues) == 1
    first_route_ms = (time.perf_counter() - t0) * 1e3
    direct_keys = [f"k{(i * 7919) % n}" for i in range(10_000)]
    hash_keys = [f"order-{i}" for i in range(10_000)]
    direct_t: list[float] = []
    chx_t: list[float] = []
    for _ in range(7):  # alternated, so both see the same machine
        direct_t.append(one_round(direct, direct_keys, args.routes))
        chx_t.append(one_round(chx, hash_keys, args.routes))
    print(json.dumps({
        "bindings": n,
        "direct_us_per_route": round(statistics.median(direct_t) * 1e6, 3),
        "consistent_hash_us_per_route": round(statistics.median(chx_t) * 1e6, 3),
        "consistent_hash_bind_us": round(bind_s / n * 1e6, 1),
        "first_route_after_binds_ms": round(first_route_ms, 2),
    }))


if __name__ == "__main__":
    main()
