"""Routing through a headers exchange as its bindings grow: microseconds per publish.

    .venv/bin/python benchmarks/bench_headers.py [--bindings 100,1000,10000] [--routes 20000]

In one process: a headers exchange gets ``N`` bindings, one queue each, half ``x-match: all`` on
``{"tenant": t<i>, "kind": "order"}`` and half ``x-match: any`` on ``{"region": r<i>, "vip": true}``
(as per-tenant and per-region subscriptions are), then routes messages whose headers are
``{"tenant": ..., "kind": "order", "region": ..., "vip": false}`` for tenants and regions spread over
the bindings (each message matches two). Prints one JSON line per ``N``: the median of 5 timings.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from headrace.exchanges import Binding, DestinationKind, make_exchange


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bindings", default="100,1000,10000")
    ap.add_argument("--routes", type=int, default=20_000)
    args = ap.parse_args()
    for n in (int(x) for x in args.bindings.split(",")):
        ex = make_exchange("headers", "h")
        half = n // 2
        for i in range(half):
            ex.bind(Binding.make("h", f"t{i}", DestinationKind.QUEUE, "",
                                 {"x-match": "all", "tenant": f"t{i}", "kind": "order"}))
            ex.bind(Binding.make("h", f"r{i}", DestinationKind.QUEUE, "",
                                 {"x-match": "any", "region": f"r{i}", "vip": True}))
        messages = [{"tenant": f"t{(i * 7919) % half}", "kind": "order", "region": f"r{(i * 104729) % half}",
                     "vip": False} for i in range(1000)]
        lookup = lambda name: None  # noqa: E731
        routes = max(args.routes * 100 // max(n, 100), 200)
        timings = []
        for _ in range(5):
            t0 = time.perf_counter()
            for i in range(routes):
                ex.route("", messages[i % 1000], lookup)
            timings.append((time.perf_counter() - t0) / routes)
        assert len(ex.route("", messages[0], lookup).queues) == 2
        print(json.dumps({"bindings": n, "us_per_route": round(statistics.median(timings) * 1e6, 2)}))


if __name__ == "__main__":
    main()
