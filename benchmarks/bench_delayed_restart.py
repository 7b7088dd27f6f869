"""Restart after ``kill -9`` of a schedule of persistent delayed messages, two trees alternating
on the same data.

    cd /tmp && <clone>/.venv/bin/python <clone>/benchmarks/bench_delayed_restart.py --messages 10000000 \\
        --rounds 2 --before /tmp/before/pkg [--after /tmp/after/pkg] [--dir PATH] [--keep | --reuse DIR]

Publishes ``--messages`` persistent 32 B messages to a durable ``x-delayed-message`` exchange
with the tree under test (``bench_delayed.py``'s two raw-frame publishers, due 1 h to 25 h),
waits until the schedule holds them all, then ``kill -9``. Then restarts the broker on that data
directory ``--rounds`` times with each tree, alternating (before, this, before, this, ...): each
restart is timed until the first AMQP handshake succeeds (recovery, which puts every message back
in the schedule's bucket files, runs before the broker serves), with the broker's CPU seconds by
then, its peak RSS (sampled every 0.2 s) and the number the schedule holds; then ``kill -9``
again. The bucket files are wiped at every start and nothing is due, so each round does the same
work on the same log. ``--before`` / ``--after`` are PYTHONPATH entries holding a ``headrace``
package laid out from each tree (as ``make lint`` lays out ``build/lint``); run from outside the
clone. Prints one JSON line per restart and one with the medians.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import amqp_load
import httpx
from bench_backlog import _connect
from bench_delayed import AUTH, EX, bulk, held
from bench_restart import alternate, restart_arguments
from run import Headrace


def publish(tmp: Path, count: int, env: dict[str, str]) -> dict[str, Any]:
    server = Headrace(tmp, env=env)
    http = httpx.Client(base_url=f"http://127.0.0.1:{server.http_port}", auth=AUTH, timeout=60)
    try:
        _connect(server.port, 60).close()
        http.put(f"/api/exchanges/%2F/{EX}", json={"type": "x-delayed-message", "durable": True,
                                                  "arguments": {"x-delayed-type": "direct"}})
        http.put("/api/queues/%2F/bulk", json={"durable": True})
        http.post(f"/api/bindings/%2F/e/{EX}/q/bulk", json={"routing_key": "bulk"})
        start = time.perf_counter()
        bulk(server.port, http, count // 2, True, mp.Queue())
        out = {"publish_rate": round(count // 2 * 2 / (time.perf_counter() - start)),
               "held": held(http), "rss_mb": round(amqp_load.rss_of(server.proc.pid) / 2**20, 1)}
    finally:
        http.close()
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait()
    return out


def held_after(server: Headrace, _: Any) -> dict[str, Any]:
    """What the recovered schedule holds."""
    with httpx.Client(base_url=f"http://127.0.0.1:{server.http_port}", auth=AUTH, timeout=60) as http:
        return {"held": held(http)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=10_000_000)
    restart_arguments(ap)
    args = ap.parse_args()
    tmp = args.reuse or Path(tempfile.mkdtemp(prefix="headrace-delayed-restart-", dir=args.dir))
    this = {"PYTHONPATH": args.after} if args.after else {}
    try:
        if args.reuse is None:
            print(json.dumps({"scenario": "publish", "messages": args.messages, "dir": str(tmp),
                              **publish(tmp, args.messages, this)}), flush=True)
        alternate(tmp, {"PYTHONPATH": args.before}, this, args.rounds, args.timeout, held_after)
    finally:
        if not (args.keep or args.reuse):
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
