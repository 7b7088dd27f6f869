"""Restart after ``kill -9`` of one persistent backlog, two trees alternating on the same data.

    python benchmarks/bench_restart.py --count 10000000 --rounds 2 --before /path/to/old/pkg [--dir PATH]

Publishes ``--count`` persistent 256 B messages to a durable queue with this tree (two pika
producers without confirms, then one confirmed publish: everything before it is fsynced, as in
``bench_backlog.py --kill-restart``), then ``kill -9``. Then restarts the broker on that data
directory ``--rounds`` times with each tree, alternating (before, this, before, this, ...): each
restart is timed until the first AMQP handshake succeeds (the broker recovers before it serves),
with the broker's CPU seconds by then, its peak RSS, and the depth it found; then ``kill -9``
again. ``--before`` is a PYTHONPATH entry whose ``headrace`` package is the tree to compare with
(run the script from outside the clone, so that the clone's own ``headrace`` is not first on the
path). A restart changes nothing in the store, so every round reads the same log; the store this
tree wrote carries its index checkpoints, which a tree without them ignores.

``--keep`` leaves the data directory in place (its path and the queue's name are printed) and
``--reuse DIR --queue NAME`` restarts such a directory again without publishing: a 10M backlog
takes most of an hour to publish on a loaded machine, and the restarts are the measurement.

Prints one JSON line per restart and one with the medians.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import signal
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import amqp_load
import pika
from bench_backlog import PeakRss, _connect
from run import Headrace, cpu_seconds


def publish_backlog(tmp: Path, count: int, size: int, timeout: float,
                    env: dict[str, str]) -> tuple[str, dict[str, Any]]:
    qname = f"bench-restart-{uuid.uuid4().hex[:8]}"
    server = Headrace(tmp, env=env)
    rss = PeakRss(server.proc.pid)
    conn = _connect(server.port, 60)
    ch = conn.channel()
    ch.queue_declare(qname, durable=True)
    results: mp.Queue = mp.Queue()
    per = count // 2
    body = b"x" * size
    start = time.perf_counter()
    procs = [mp.Process(target=amqp_load.producer,
                        args=(amqp_load.Target("h", "127.0.0.1", server.port), "", [qname], body, per,
                              True, False, 0, results)) for _ in range(2)]
    amqp_load._run(procs)
    for _ in procs:
        results.get(timeout=timeout)
    amqp_load._join(procs)
    depth = 0
    while depth < per * 2 and time.perf_counter() - start < timeout:
        depth = ch.queue_declare(qname, passive=True).method.message_count
        time.sleep(0.5)
    ch.confirm_delivery()
    ch.basic_publish("", qname, body, pika.BasicProperties(delivery_mode=2))
    out = {"publish_rate": round(per * 2 / (time.perf_counter() - start)),
           "publish_peak_rss_mb": rss.stop(),
           "publish_cpu_seconds": round(cpu_seconds(server.proc.pid), 1)}
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait()
    return qname, out


def timed_restart(tmp: Path, env: dict[str, str], timeout: float,
                  found: Callable[[Headrace, pika.BlockingConnection], dict[str, Any]]) -> dict[str, Any]:
    """One restart of the data in ``tmp`` until the first AMQP handshake (recovery runs before the
    broker serves): wall and CPU seconds by then, peak and settled RSS, and what ``found`` reads
    from the recovered broker; then ``kill -9``."""
    start = time.perf_counter()
    server = Headrace(tmp, env=env)
    rss = PeakRss(server.proc.pid)
    try:
        conn = _connect(server.port, timeout)
        out: dict[str, Any] = {
            "restart_seconds": round(time.perf_counter() - start, 1),
            "restart_cpu_seconds": round(cpu_seconds(server.proc.pid), 1),
            "restart_peak_rss_mb": rss.stop(),
            "rss_after_restart_mb": round(amqp_load.rss_of(server.proc.pid) / 2**20, 1)}
        out.update(found(server, conn))
        conn.close()
    finally:
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait()
    return out


def alternate(tmp: Path, before: dict[str, str], this: dict[str, str], rounds: int, timeout: float,
              found: Callable[[Headrace, pika.BlockingConnection], dict[str, Any]]) -> None:
    """``rounds`` restarts with each tree, before and this in turn; one JSON line per restart and
    one with the medians."""
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "this": []}
    for _ in range(rounds):
        for tree, env in (("before", before), ("this", this)):
            r = timed_restart(tmp, env, timeout, found)
            runs[tree].append(r)
            print(json.dumps({"scenario": "restart", "tree": tree, **r}), flush=True)
    if rounds:
        print(json.dumps({"scenario": "restart-medians", **{
            f"{tree}_{key}": statistics.median(r[key] for r in rs)
            for tree, rs in runs.items() for key in ("restart_seconds", "restart_cpu_seconds",
                                                     "restart_peak_rss_mb", "rss_after_restart_mb")}}),
            flush=True)


def restart_arguments(ap: argparse.ArgumentParser) -> None:
    """The options every two-tree restart benchmark takes (this one, bench_delayed_restart.py)."""
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--before", required=True, help="PYTHONPATH entry of the tree to compare with")
    ap.add_argument("--after", default="", help="PYTHONPATH entry of the tree under test (default: "
                    "the installed one, this clone)")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--dir", type=Path, default=None, help="parent of the data directory")
    ap.add_argument("--keep", action="store_true", help="leave the data directory in place")
    ap.add_argument("--reuse", type=Path, default=None, help="a data directory --keep left: no publish")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=10_000_000)
    ap.add_argument("--size", type=int, default=256)
    restart_arguments(ap)
    ap.add_argument("--queue", default="", help="the queue of the --reuse directory")
    args = ap.parse_args()
    if args.reuse is not None and not args.queue:
        ap.error("--reuse needs --queue")
    tmp = args.reuse or Path(tempfile.mkdtemp(prefix="headrace-restart-", dir=args.dir))
    this = {"PYTHONPATH": args.after} if args.after else {}
    try:
        if args.reuse is None:
            qname, published = publish_backlog(tmp, args.count, args.size, args.timeout, this)
            print(json.dumps({"scenario": "restart-publish", "count": args.count, "dir": str(tmp),
                              "queue": qname, **published}), flush=True)
        else:
            qname = args.queue
        alternate(tmp, {"PYTHONPATH": args.before}, this, args.rounds, args.timeout,
                  lambda _, conn: {"depth": conn.channel().queue_declare(qname, passive=True).method.message_count})
    finally:
        if not (args.keep or args.reuse):
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
