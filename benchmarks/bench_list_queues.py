"""Listing many queues through the management API: the time of ``GET /api/queues`` with full
statistics, with ``disable_stats``, and of one page, against a broker holding N queues.

    .venv/bin/python benchmarks/bench_list_queues.py [--queues 10000] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from run import Headrace  # noqa: E402

QUERIES = {
    "all queues, full statistics": {},
    "all queues, disable_stats": {"disable_stats": "true"},
    "all queues, disable_stats + enable_queue_totals": {"disable_stats": "true", "enable_queue_totals": "true"},
    "one page of 100, sorted by messages": {"page": "1", "page_size": "100", "sort": "messages"},
    "one page of 100, name filter": {"page": "1", "page_size": "100", "name": "q-99"},
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queues", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="headrace-list-") as tmpdir:
        server = Headrace(Path(tmpdir))
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{server.http_port}", auth=("guest", "guest"),
                              timeout=120) as http:
                batch = "\n".join(json.dumps({"routing_key": f"q-{i}", "payload": "x"}) for i in range(args.queues))
                for i in range(args.queues):
                    http.put(f"/api/queues/%2F/q-{i}", json={"durable": False})
                http.post("/api/exchanges/%2F/amq.default/publish-batch", content=batch)  # one message each
                results = {}
                for label, params in QUERIES.items():
                    times, size = [], 0
                    for _ in range(args.runs):
                        start = time.perf_counter()
                        r = http.get("/api/queues", params=params)
                        times.append(time.perf_counter() - start)
                        r.raise_for_status()
                        size = len(r.content)
                    results[label] = {"median_s": round(statistics.median(times), 3),
                                      "best_s": round(min(times), 3), "bytes": size}
        finally:
            server.stop()
    print(json.dumps({"scenario": "list-queues", "queues": args.queues, "runs": args.runs, "results": results},
                     indent=1))


if __name__ == "__main__":
    main()
