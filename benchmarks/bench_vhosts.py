"""Two busy vhosts: one broker process serving both against two processes serving one each.

    python benchmarks/bench_vhosts.py --rounds 4 --count 100000

The first step of ARCHITECTURE.md's "Beyond one core" (a vhost per process), measured before it is
built: ``one`` is one ``headrace serve`` with vhosts v1 and v2; ``two`` is two ``headrace serve``
processes on their own ports and data directories, v1 on the first and v2 on the second, which is
what a vhost per process would give with no routing between them. Each round loads both vhosts at
once with ``amqp_load.py``'s low-cost clients: per vhost one producer and one consumer process
(transient 128 B messages, manual acks, prefetch 200), ``--count`` messages each. Rounds alternate
one, two, one, two; the brokers stay up across rounds.

Per round: the rate both vhosts together delivered (messages consumed / wall time until both are
done), the brokers' CPU seconds per message (summed over their processes: what the work costs,
which the machine's load does not inflate) and the time the brokers spent runnable but waiting
for a core (``schedstat``: how contended the machine was). Prints one JSON line per round and
one with the medians and the per-pair ratios two / one.
"""

from __future__ import annotations

import argparse
import base64
import json
import multiprocessing as mp
import os
import shutil
import statistics
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import amqp_load
from run import Headrace, cpu_seconds, wait_seconds


def add_vhost(server: Headrace, name: str) -> None:
    auth = "Basic " + base64.b64encode(b"guest:guest").decode()
    for path, body in ((f"/api/vhosts/{name}", b"{}"),
                       (f"/api/permissions/{name}/guest", json.dumps(
                           {"configure": ".*", "write": ".*", "read": ".*"}).encode())):
        req = urllib.request.Request(f"http://127.0.0.1:{server.http_port}{path}", data=body, method="PUT",
                                     headers={"Authorization": auth, "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status in (200, 201, 204), resp.status


def load(targets: list[amqp_load.Target], pids: list[int], count: int, timeout: float) -> dict[str, Any]:
    """One producer and one consumer per target (vhost), all at once."""
    out: mp.Queue = mp.Queue()
    queues = []
    for t in targets:
        conn, ch = amqp_load._admin(t)
        q = f"bench-vh-{uuid.uuid4().hex[:8]}"
        ch.queue_declare(q)
        conn.close()
        queues.append(q)
    deadline = time.time() + timeout
    cons = [mp.Process(target=amqp_load.consumer, args=(t, [q], count, 200, deadline, out))
            for t, q in zip(targets, queues, strict=True)]
    prods = [mp.Process(target=amqp_load.producer, args=(t, "", [q], b"x" * 128, count, False, False, 0, out))
             for t, q in zip(targets, queues, strict=True)]
    cpu0 = sum(cpu_seconds(p) for p in pids)
    wait0 = sum(wait_seconds(p) for p in pids)
    amqp_load._run(cons)
    start = time.perf_counter()
    amqp_load._run(prods)
    results = amqp_load._collect(out, len(cons) + len(prods), timeout + 10)
    wall = time.perf_counter() - start
    amqp_load._join(cons + prods)
    cpu = sum(cpu_seconds(p) for p in pids) - cpu0
    waited = sum(wait_seconds(p) for p in pids) - wait0
    for t, q in zip(targets, queues, strict=True):
        conn, ch = amqp_load._admin(t)
        ch.queue_delete(q)
        conn.close()
    consumed = sum(r[1] for r in results if r[0] == "consumed")
    return {"consumed": consumed, "complete": consumed == count * len(targets),
            "rate": round(consumed / wall), "broker_cpu_us_per_msg": round(cpu / max(consumed, 1) * 1e6, 2),
            "broker_wait_s": round(waited, 2), "wall_s": round(wall, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--count", type=int, default=100_000, help="messages per vhost per round")
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="headrace-vhosts-"))
    servers: list[Headrace] = []
    try:
        for name in ("one", "two-a", "two-b"):
            (tmp / name).mkdir()
            servers.append(Headrace(tmp / name))
        one, two_a, two_b = servers
        for server, names in ((one, ("v1", "v2")), (two_a, ("v1",)), (two_b, ("v2",))):
            for name in names:
                add_vhost(server, name)
        configs = {
            "one": ([amqp_load.Target("one", "127.0.0.1", one.port, vhost="v1"),
                     amqp_load.Target("one", "127.0.0.1", one.port, vhost="v2")], [one.proc.pid]),
            "two": ([amqp_load.Target("two-a", "127.0.0.1", two_a.port, vhost="v1"),
                     amqp_load.Target("two-b", "127.0.0.1", two_b.port, vhost="v2")],
                    [two_a.proc.pid, two_b.proc.pid]),
        }
        runs: dict[str, list[dict[str, Any]]] = {"one": [], "two": []}
        for n in range(args.rounds):
            for name, (targets, pids) in configs.items():
                load_avg = os.getloadavg()[0]
                r = load(targets, pids, args.count, args.timeout)
                r["load"] = round(load_avg, 1)
                runs[name].append(r)
                print(json.dumps({"scenario": "vhosts", "config": name, "round": n, **r}), flush=True)
        ratios = [t["rate"] / o["rate"] for o, t in zip(runs["one"], runs["two"], strict=True)]
        cpu_ratios = [t["broker_cpu_us_per_msg"] / o["broker_cpu_us_per_msg"]
                      for o, t in zip(runs["one"], runs["two"], strict=True)]
        print(json.dumps({"scenario": "vhosts-medians",
                          **{f"{name}_{key}": statistics.median(r[key] for r in rs)
                             for name, rs in runs.items()
                             for key in ("rate", "broker_cpu_us_per_msg", "broker_wait_s")},
                          "rate_ratio_two_over_one": [round(x, 2) for x in ratios],
                          "rate_ratio_median": round(statistics.median(ratios), 2),
                          "cpu_ratio_two_over_one": [round(x, 2) for x in cpu_ratios],
                          "all_complete": all(r["complete"] for rs in runs.values() for r in rs)}),
              flush=True)
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
