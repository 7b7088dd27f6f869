"""The backlog target on headrace alone: N messages with no consumer, then drained.

    python benchmarks/bench_backlog.py [--count 10000000] [--size 256] [--timeout 3600] [--persistent]

Prints one JSON line: publish rate, queue depth, peak broker RSS (sampled every 0.5 s across both
phases) and drain rate. ``run.py --scenarios backlog`` runs the same scenario side by side with
RabbitMQ at 1M messages; this script is for the 10M figure, which RabbitMQ cannot hold in RAM here.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import amqp_load
from run import Headrace


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=10_000_000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--persistent", action="store_true", help="durable queue, delivery_mode 2")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = Headrace(Path(tmp))
        try:
            result = amqp_load.scenario_backlog(
                amqp_load.Target("headrace", "127.0.0.1", server.port), count=args.count, size=args.size,
                broker_pid=server.proc.pid, timeout=args.timeout,
                persistent=args.persistent)
        finally:
            server.stop()
    print(json.dumps({"scenario": "backlog", "size": args.size, **result}), flush=True)


if __name__ == "__main__":
    main()
