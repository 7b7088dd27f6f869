"""HTTP publish-batch throughput: NDJSON batches of N messages over keep-alive connections.

    .venv/bin/python benchmarks/bench_http_batch.py [--messages 100000] [--batch 1000] [--clients 2] [--persistent]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from http_load import scenario_http_batch  # noqa: E402
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
            result = scenario_http_batch(f"http://127.0.0.1:{server.http_port}", messages=args.messages,
                                         batch=args.batch, clients=args.clients, persistent=args.persistent)
        finally:
            server.stop()
    print(json.dumps({"scenario": "http-batch", **result}))


if __name__ == "__main__":
    main()
