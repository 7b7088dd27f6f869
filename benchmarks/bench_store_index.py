"""RAM of the message store's index per live persistent message, and recovery of that backlog.

    python benchmarks/bench_store_index.py [--messages 1000000] [--dir PATH]

Writes N one-queue 256-byte persistent messages into a ``MessageStore`` (fsync off, 1,000 per
group), then prints one JSON line: bytes per message the store holds (tracemalloc, after the
writes), recovery time of the closed store, and bytes per message after recovery and at its peak
(tracemalloc, the recovered queue's id list included while it exists).
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import tempfile
import time
import tracemalloc
from pathlib import Path

from headrace.persistence import FsyncMode, MessageStore, Publish

BODY = bytes(256)
PROPS = b"\x10\x00\x02"  # delivery-mode = 2
BATCH = 1_000


def traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--dir", type=Path, default=None, help="parent of the work dir")
    args = ap.parse_args()
    n = args.messages
    root = Path(tempfile.mkdtemp(prefix="headrace-index-", dir=args.dir))
    try:
        tracemalloc.start()
        store = MessageStore(root, fsync=FsyncMode.OFF)
        store.recover()
        before = traced()
        start = time.perf_counter()
        for first in range(1, n + 1, BATCH):
            store.write([Publish(i, "/", ("q",), "ex", "rk", PROPS, BODY)
                         for i in range(first, min(first + BATCH, n + 1))])
        publish_s = time.perf_counter() - start
        live = traced() - before
        store.close()
        del store
        tracemalloc.stop()

        start = time.perf_counter()
        store = MessageStore(root, fsync=FsyncMode.OFF)
        rec = store.recover()
        recover_s = time.perf_counter() - start
        assert len(rec.queues[("/", "q")]) == n
        del rec
        store.close()
        del store

        tracemalloc.start()
        before = traced()
        tracemalloc.reset_peak()
        store = MessageStore(root, fsync=FsyncMode.OFF)
        rec = store.recover()
        with_ids = traced() - before
        peak = tracemalloc.get_traced_memory()[1] - before
        del rec
        recovered = traced() - before
        store.close()
        tracemalloc.stop()
        disk = sum(p.stat().st_size for p in root.iterdir())
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({
        "messages": n, "disk_mb": round(disk / 2**20, 1),
        "index_bytes_per_msg": round(live / n, 1),
        "publish_msgs_per_s": round(n / publish_s),
        "recover_seconds": round(recover_s, 2), "recover_msgs_per_s": round(n / recover_s),
        "recovered_bytes_per_msg": round(recovered / n, 1),
        "recovered_with_queue_ids_bytes_per_msg": round(with_ids / n, 1),
        "recover_peak_bytes_per_msg": round(peak / n, 1),
    }), flush=True)


if __name__ == "__main__":
    main()
