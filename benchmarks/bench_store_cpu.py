"""CPU time of the message store per publish and per ack, independent of the machine's load.

    python benchmarks/bench_store_cpu.py [--messages 200000] [--runs 3]

Publishes N one-queue 256-byte persistent messages in batches of 1,000 (fsync off), then acks
them in batches of 1,000; prints the minimum over the runs of ``time.process_time`` per message
for each phase. Wall-clock figures on a shared machine swing with the load; CPU time much less.
To compare two versions, run this alternately against each.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from headrace.persistence import Ack, FsyncMode, MessageStore, Publish

BODY = bytes(256)
PROPS = b"\x10\x00\x02"  # delivery-mode = 2


def run(n: int) -> tuple[float, float]:
    root = Path(tempfile.mkdtemp(prefix="headrace-store-cpu-"))
    try:
        store = MessageStore(root, fsync=FsyncMode.OFF)
        store.recover()
        pubs = [[Publish(i, "/", ("q",), "ex", "rk", PROPS, BODY) for i in range(f, min(f + 1000, n + 1))]
                for f in range(1, n + 1, 1000)]
        acks = [[Ack(i, "/", "q") for i in range(f, min(f + 1000, n + 1))] for f in range(1, n + 1, 1000)]
        start = time.process_time()
        for batch in pubs:
            store.write(batch)
        publish = time.process_time() - start
        start = time.process_time()
        for batch in acks:
            store.write(batch)
        ack = time.process_time() - start
        store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return publish / n * 1e6, ack / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    results = [run(args.messages) for _ in range(args.runs)]
    print(json.dumps({"messages": args.messages, "runs": args.runs,
                      "publish_cpu_us": round(min(r[0] for r in results), 2),
                      "ack_cpu_us": round(min(r[1] for r in results), 2)}), flush=True)


if __name__ == "__main__":
    main()
