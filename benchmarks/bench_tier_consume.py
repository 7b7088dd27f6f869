"""A stream consumer reading from ``first`` a stream whose sealed segments are only in a
``file://`` tier, against the same stream kept on local disk: what reading the tier in worker
threads (``persistence/tier_reads.py``, 1 MiB a read, the queue dispatched again once it is done)
costs a consumer that catches up, and what it costs the broker's CPU.

Each round starts a broker per case (local first, then tiered, alternating), publishes
``--messages`` messages of ``--size`` bytes with confirms into a stream with 8 MiB segments, for
the tiered case sets a policy that uploads the sealed segments and drops their local copies and
waits until they are gone, then one pika consumer (prefetch 1000, multiple acks every 100) reads
every message from ``first``. Reported: deliveries/s and the broker's CPU seconds per 100k
deliveries, median over the rounds.

    .venv/bin/python benchmarks/bench_tier_consume.py [--messages 300000] [--size 256] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pika

sys.path.insert(0, str(Path(__file__).parent))
import amqp_load  # noqa: E402
import bench_stream  # noqa: E402
from bench_stream import STREAM, cpu, producer  # noqa: E402
from run import Headrace  # noqa: E402

from headrace.persistence.stream_log import stream_root  # noqa: E402
from headrace.persistence.tier_manifest import all_segments  # noqa: E402

SEGMENT = 8 << 20


def offloaded(data_dir: Path) -> bool:
    segs = all_segments(stream_root(data_dir), "/", STREAM)
    return len(segs) > 1 and all(s.tier and not s.path.exists() for s in segs[:-1])


def one(case: str, tmp: Path, messages: int, size: int) -> dict[str, Any]:
    broker = Headrace(tmp, env={"HEADRACE_TIER_INTERVAL": "0.2"})
    try:
        target = amqp_load.Target("headrace", "127.0.0.1", broker.port)
        conn = pika.BlockingConnection(target.params)
        conn.channel().queue_declare(STREAM, durable=True, arguments={
            "x-queue-type": "stream", "x-stream-max-segment-size-bytes": SEGMENT})
        conn.close()
        out: mp.Queue = mp.Queue()
        procs = [mp.Process(target=producer, args=(target, b"x" * size, messages // 2, out)) for _ in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        data_dir = tmp / "headrace"
        if case == "tiered":
            httpx.put(f"http://127.0.0.1:{broker.http_port}/api/policies/%2F/tier", auth=("guest", "guest"), json={
                "pattern": f"^{STREAM}$", "apply-to": "streams",
                "definition": {"tier-uri": f"file://{tmp / 'tier'}", "tier-local-max-bytes": 0}}).raise_for_status()
            deadline = time.monotonic() + 300
            while not offloaded(data_dir):
                assert time.monotonic() < deadline, "segments never offloaded"
                time.sleep(0.1)
        segs = all_segments(stream_root(data_dir), "/", STREAM)
        before = cpu(broker.proc.pid)
        total, seconds = bench_stream.consume(target, ["first"], messages, 1000)
        used = cpu(broker.proc.pid) - before
        return {"case": case, "segments": len(segs), "tiered": sum(1 for s in segs if not s.path.exists()),
                "rate": total / seconds, "cpu_per_100k": used / total * 100_000}
    finally:
        broker.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    runs: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for case in ("local", "tiered"):
            with tempfile.TemporaryDirectory(prefix="bench-tier-") as tmp:
                result = one(case, Path(tmp), args.messages, args.size)
            print(json.dumps({"round": r, **result}), flush=True)
            runs.append(result)
    for case in ("local", "tiered"):
        mine = [x for x in runs if x["case"] == case]
        print(f"{case:7s} median {statistics.median(x['rate'] for x in mine):,.0f} deliveries/s, "
              f"{statistics.median(x['cpu_per_100k'] for x in mine):.2f} CPU s per 100k "
              f"({mine[0]['tiered']} of {mine[0]['segments']} segments only in the tier)")


if __name__ == "__main__":
    main()
