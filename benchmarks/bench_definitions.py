"""Declaring N durable queues one by one over AMQP (pika, one queue.declare per round trip): the
total time, the rate, the size of the definitions file at the end and the bytes the broker wrote
(``write_bytes`` of /proc/<pid>/io), which shows whether each durable change costs O(1) or O(n).

    .venv/bin/python benchmarks/bench_definitions.py [--queues 10000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import pika

sys.path.insert(0, str(Path(__file__).parent))
from run import Headrace  # noqa: E402


def written_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    return 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queues", type=int, default=10_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="headrace-defs-", dir="/var/tmp") as tmpdir:
        server = Headrace(Path(tmpdir))
        try:
            conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", server.port))
            ch = conn.channel()
            before = written_bytes(server.proc.pid)
            start = time.perf_counter()
            for i in range(args.queues):
                ch.queue_declare(f"durable-{i}", durable=True)
            elapsed = time.perf_counter() - start
            written = written_bytes(server.proc.pid) - before
            conn.close()
            size = sum(p.stat().st_size for p in (Path(tmpdir) / "headrace").glob("definitions*"))
        finally:
            server.stop()
    print(json.dumps({"scenario": "declare-durable-queues", "queues": args.queues,
                      "seconds": round(elapsed, 2), "per_second": round(args.queues / elapsed),
                      "definitions_bytes": size, "broker_write_bytes": written}, indent=1))


if __name__ == "__main__":
    main()
