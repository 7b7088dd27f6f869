"""Message store and spill throughput: one JSON line per scenario.

    python benchmarks/bench_store.py [--dir PATH] [--messages N] [--fsync batch|always|off]

Scenarios: group commits (``write_and_sync``) of 1, 100 and 1000 persistent 256-byte messages,
acking them back, recovering the log, and spilling/paging 256-byte transient entries.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from headrace.persistence import Ack, FsyncMode, MessageStore, Publish, SpillStore
from headrace.queues.message import Message, QueueEntry

BODY = bytes(256)
PROPS = b"\x10\x00\x02"  # delivery-mode = 2


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def bench_group_commit(root: Path, batch: int, total: int, mode: FsyncMode) -> None:
    path = root / f"store-{batch}"
    store = MessageStore(path, fsync=mode)
    store.recover()
    commits = max(1, total // batch)
    mid = 1
    start = time.perf_counter()
    for _ in range(commits):
        ops = [Publish(mid + i, "/", ("q",), "ex", "rk", PROPS, BODY) for i in range(batch)]
        mid += batch
        store.write_and_sync(ops)
    elapsed = time.perf_counter() - start
    n = commits * batch
    emit(scenario="publish_group_commit", batch=batch, fsync=mode.value, messages=n,
         seconds=round(elapsed, 4), msgs_per_s=round(n / elapsed),
         commits_per_s=round(commits / elapsed),
         mb_per_s=round(n * len(BODY) / elapsed / 1e6, 2))

    start = time.perf_counter()
    for first in range(1, mid, 1000):
        store.write_and_sync([Ack(i, "/", "q") for i in range(first, min(first + 1000, mid))])
    elapsed = time.perf_counter() - start
    emit(scenario="ack_group_commit", batch=1000, fsync=mode.value, messages=n,
         seconds=round(elapsed, 4), msgs_per_s=round(n / elapsed))
    store.close()
    shutil.rmtree(path)


def bench_recover(root: Path, total: int) -> None:
    path = root / "recover"
    store = MessageStore(path, fsync=FsyncMode.OFF)
    store.recover()
    for first in range(1, total + 1, 1000):
        store.write([Publish(i, "/", ("q",), "ex", "rk", PROPS, BODY)
                     for i in range(first, min(first + 1000, total + 1))])
    store.close()
    start = time.perf_counter()
    store = MessageStore(path, fsync=FsyncMode.OFF)
    rec = store.recover()
    elapsed = time.perf_counter() - start
    assert len(rec.queues[("/", "q")]) == total
    emit(scenario="recover", messages=total, seconds=round(elapsed, 4),
         msgs_per_s=round(total / elapsed))
    store.close()
    shutil.rmtree(path)


def bench_spill(root: Path, total: int) -> None:
    spill = SpillStore(root / "spill")
    backing = spill.backing("q")
    batch = [QueueEntry(i, Message(i, "ex", "rk", PROPS, BODY)) for i in range(1000)]
    start = time.perf_counter()
    for _ in range(max(1, total // 1000)):
        backing.append(batch)
    elapsed = time.perf_counter() - start
    n = backing.depth()
    emit(scenario="spill_append", messages=n, seconds=round(elapsed, 4),
         msgs_per_s=round(n / elapsed))
    start = time.perf_counter()
    while backing.read_batch(1000, 1 << 20):
        pass
    elapsed = time.perf_counter() - start
    emit(scenario="spill_read_batch", messages=n, seconds=round(elapsed, 4),
         msgs_per_s=round(n / elapsed))
    spill.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None,
                        help="parent of the work dir (default: system temp)")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--fsync", choices=[m.value for m in FsyncMode], default="batch")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="headrace-bench-", dir=args.dir))
    try:
        mode = FsyncMode(args.fsync)
        for batch in (1, 100, 1000):
            # batches of 1 pay one fsync per message: cap them so the run stays short
            total = min(args.messages, 2_000) if batch == 1 else args.messages
            bench_group_commit(root, batch, total, mode)
        bench_recover(root, args.messages)
        bench_spill(root, args.messages)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
