"""Rebalance time of a stream consumer group after a member is killed.

    .venv/bin/python benchmarks/bench_sac_rebalance.py [--partitions 12] [--members 3] [--rounds 3]

A fresh headrace broker; a super stream of ``--partitions`` partitions (``PUT /api/super-streams``);
``--members`` member processes, each consuming every partition with ``x-single-active-consumer``,
one group name and ``x-super-stream`` (so each is active on partitions/members of them), acking
each delivery and reporting (partition, arrival time) for each. A publisher sends one message to
each partition (its binding key) every 5 ms. After 2 s one member is killed (SIGKILL: its socket
closes, nothing is cancelled); the figure is, for each partition whose active member changed (the
victim's, and those the new spread moves between the members left), the time from the kill to
the first delivery of that partition at its new active member, and the largest of those (when
every moved partition is read again). The 5 ms publish period bounds the resolution.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import amqp_load  # noqa: E402
import httpx  # noqa: E402
import pika  # noqa: E402
from run import Headrace  # noqa: E402

NAME = "bench-group-ss"
GROUP = "bench-group"


def member(port: int, me: int, partitions: int, out: mp.Queue) -> None:
    conn = pika.BlockingConnection(amqp_load.Target("headrace", "127.0.0.1", port).params)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=50)
    args = {"x-single-active-consumer": True, "x-stream-consumer-name": GROUP, "x-stream-offset": "next",
            "x-super-stream": NAME}

    def handler(partition: int) -> Any:
        def on_message(chan: Any, method: Any, props: Any, body: bytes) -> None:
            out.put((me, partition, time.time()))
            chan.basic_ack(method.delivery_tag)
        return on_message

    for i in range(partitions):
        ch.basic_consume(f"{NAME}-{i}", handler(i), arguments=args)
    out.put((me, -1, time.time()))  # subscribed
    while True:
        conn.process_data_events(0.05)


def one_round(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="sac-rebalance-") as tmpdir:
        server = Headrace(Path(tmpdir))
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{server.http_port}", auth=("guest", "guest")) as http:
                assert http.put(f"/api/super-streams/%2F/{NAME}", json={"partitions": args.partitions}).status_code == 201
            out: mp.Queue = mp.Queue()
            procs = []
            for me in range(args.members):  # one at a time: the order they come decides the spread
                p = mp.Process(target=member, args=(server.port, me, args.partitions, out), daemon=True)
                p.start()
                procs.append(p)
                while out.get()[1] != -1:
                    pass
            conn = pika.BlockingConnection(amqp_load.Target("headrace", "127.0.0.1", server.port).params)
            ch = conn.channel()
            owner: dict[int, int] = {}
            events: list[tuple[int, int, float]] = []
            kill_at = None
            victim = 1
            t0 = time.time()
            while time.time() - t0 < 4.0:
                for i in range(args.partitions):
                    ch.basic_publish(NAME, str(i), b"x")
                conn.process_data_events(0)
                time.sleep(0.005)
                while not out.empty():
                    events.append(out.get())
                if kill_at is None and time.time() - t0 > 2.0:
                    for who, partition, _ in events:
                        owner[partition] = who
                    kill_at = time.time()
                    os.kill(procs[victim].pid, signal.SIGKILL)
            time.sleep(0.5)
            while not out.empty():
                events.append(out.get())
            conn.close()
            assert kill_at is not None
            final: dict[int, int] = {}
            for who, partition, t in events:
                if t > kill_at:
                    final[partition] = who
            # every partition whose active member changed: the victim's, and those the new spread
            # (partition mod 2 instead of mod 3) moves between the two left
            moved = sorted(p for p, who in owner.items() if p >= 0 and final.get(p) != who)
            took = {}
            for p in moved:
                after = [t for who, partition, t in events if partition == p and who == final.get(p) and t > kill_at]
                took[p] = round((min(after) - kill_at) * 1000, 1) if after else None
            for p in procs:
                if p.is_alive():
                    p.kill()
            done = [v for v in took.values() if v is not None]
            return {"partitions": args.partitions, "members": args.members, "moved": moved,
                    "ms_per_partition": took, "rebalance_ms": max(done) if len(done) == len(moved) else None,
                    "load_1m": round(os.getloadavg()[0], 1)}
        finally:
            server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--members", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    for _ in range(args.rounds):
        print(json.dumps(one_round(args)), flush=True)


if __name__ == "__main__":
    main()
