"""HTTP publish-batch throughput: NDJSON batches of N messages over keep-alive connections.

    .venv/bin/python benchmarks/bench_http_batch.py [--messages 100000] [--batch 1000] [--clients 2] [--persistent]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from run import Headrace  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--persistent", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="headrace-http-") as tmpdir:
        server = Headrace(Path(tmpdir))
        try:
            ports = json.loads((Path(tmpdir) / "headrace" / "ports.json").read_text()) \
                if (Path(tmpdir) / "headrace" / "ports.json").exists() else None
            base = f"http://127.0.0.1:{server.http_port}" if ports is None else f"http://127.0.0.1:{ports['http']}"
            auth = ("guest", "guest")
            httpx.put(f"{base}/api/queues/%2F/bench-http", json={"durable": True}, auth=auth)
            props = {"delivery_mode": 2} if args.persistent else {}
            line = json.dumps({"routing_key": "bench-http", "payload": "x" * 200, "properties": props})
            body = "\n".join([line] * args.batch)
            per_client = args.messages // args.clients // args.batch

            def client() -> None:
                with httpx.Client(base_url=base, auth=auth, timeout=60) as c:
                    for _ in range(per_client):
                        r = c.post("/api/exchanges/%2F/amq.default/publish-batch", content=body)
                        r.raise_for_status()

            threads = [threading.Thread(target=client) for _ in range(args.clients)]
            start = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.perf_counter() - start
            total = per_client * args.clients * args.batch
            print(json.dumps({"scenario": "http-batch", "persistent": args.persistent, "messages": total,
                              "batch": args.batch, "clients": args.clients, "msg_s": round(total / elapsed)}))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
