"""A three-node cluster on this machine, with a real etcd: confirmed-publish throughput against a
standalone node, failover time from a kill -9 of the leader to the first confirm on the new one,
and the catch-up time of a node that joins a cluster holding a backlog.

    .venv/bin/python benchmarks/bench_cluster.py throughput [--rounds 3] [--messages 6000]
    .venv/bin/python benchmarks/bench_cluster.py publish [--messages 30000]
    .venv/bin/python benchmarks/bench_cluster.py failover [--kills 10] [--ttl 2]
    .venv/bin/python benchmarks/bench_cluster.py catchup [--messages 1000000]

throughput: ``amqp_load``'s confirms scenario (4 pika publishers each waiting for its confirm,
persistent messages to a durable queue, 2 consumers), alternated between a standalone node and
the cluster's leader; all four processes share this machine's cores, so the ratio is the cost of
a second disk's fsync and a loopback round trip per group, not of a network.
failover: a publisher with confirms goes to any node that answers; the leader is killed
(kill -9) --kills times and the time until the publisher's next confirm is taken, then the
node is started again and the cluster waits until all three are in sync.
catchup: --messages persistent 256-byte messages are published to the leader, then a fourth node
starts with an empty data directory; the time until it is in the in-sync set.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pika
import pika.exceptions

sys.path.insert(0, str(Path(__file__).parent))
import amqp_load  # noqa: E402

LEADS = re.compile(r"headrace\.cluster: (\S+) leads, epoch (\d+)")
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(check: Callable[[], T | None], timeout: float) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.01)
    raise SystemExit(f"not within {timeout}s")


class Node:
    def __init__(self, name: str, data: Path, env: dict[str, str]) -> None:
        self.name, self.data, self.env = name, data, env
        self.amqp, self.http, self.cluster = free_port(), free_port(), free_port()
        self.lines: list[str] = []
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> Node:
        self.lines = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "headrace", "serve", "--amqp-port", str(self.amqp), "--http-port", str(self.http),
             "--data-dir", str(self.data)],
            env={**os.environ, **self.env, "HEADRACE_NODE_NAME": self.name, "HEADRACE_CLUSTER_PORT": str(self.cluster)},
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        wait_for(lambda: any("data directory" in line for line in self.lines), 60)
        return self

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.lines.append(line)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def leads(self) -> bool:
        for line in reversed(list(self.lines)):
            if LEADS.search(line):
                return True
            if "follows" in line and "headrace.cluster" in line:
                return False
        return False

    def nodes(self) -> list[dict[str, Any]]:
        try:
            r = httpx.get(f"http://127.0.0.1:{self.http}/api/nodes", auth=("guest", "guest"), timeout=5)
            return r.json() if r.status_code == 200 else []  # type: ignore[no-any-return]
        except (httpx.HTTPError, ValueError):
            return []

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)
            self.proc.wait(30)


class Cluster:
    def __init__(self, tmp: Path, ttl: int) -> None:
        cport, pport = free_port(), free_port()
        client, peer = f"http://127.0.0.1:{cport}", f"http://127.0.0.1:{pport}"
        self.etcd = subprocess.Popen(
            ["etcd", "--name", "default", "--data-dir", str(tmp / "etcd"), "--listen-client-urls", client,
             "--advertise-client-urls", client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"default={peer}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: _etcd_ready(client), 30)
        self.env = {"HEADRACE_CLUSTER_ETCD_ENDPOINTS": client, "HEADRACE_CLUSTER_LEASE_TTL_S": str(ttl)}
        self.tmp = tmp
        self.nodes = [Node(f"hr{i}@localhost", tmp / f"n{i}", self.env) for i in (1, 2, 3)]
        starts = [threading.Thread(target=n.start) for n in self.nodes]
        for t in starts:
            t.start()
        for t in starts:
            t.join()
        self.whole(60)

    def leader(self) -> Node:
        return wait_for(lambda: next((n for n in self.nodes if n.alive() and n.leads()), None), 60)

    def whole(self, timeout: float) -> None:
        names = {n.name for n in self.nodes}
        wait_for(lambda: {r["name"] for r in self.leader().nodes() if r.get("in_sync") and r.get("running")} == names,
                 timeout)

    def close(self) -> None:
        for n in self.nodes:
            n.stop()
        self.etcd.terminate()
        self.etcd.wait(10)


def _etcd_ready(client: str) -> bool:
    try:
        return httpx.post(f"{client}/v3/kv/range", json={"key": "AA=="}, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def throughput(args: argparse.Namespace, tmp: Path) -> None:
    alone = Node("alone@localhost", tmp / "alone", {})
    alone.start()
    cluster = Cluster(tmp, args.ttl)
    rates: dict[str, list[float]] = {"standalone": [], "cluster": []}
    try:
        targets = {"standalone": amqp_load.Target("standalone", "127.0.0.1", alone.amqp),
                   "cluster": amqp_load.Target("cluster", "127.0.0.1", cluster.leader().amqp)}
        for target in targets.values():
            amqp_load.scenario_confirms(target, count=400)  # warmed
        for i in range(args.rounds):
            for name, target in targets.items():
                result = amqp_load.scenario_confirms(target, count=args.messages)
                rates[name].append(result["rate"])
                print(json.dumps({"round": i + 1, "broker": name, "rate": round(result["rate"]),
                                  "confirm_p50_ms": round(result.get("confirm_p50_ms", 0.0), 3)}), flush=True)
        a, c = statistics.median(rates["standalone"]), statistics.median(rates["cluster"])
        print(f"confirmed publishes, median of {args.rounds}: standalone {a:.0f}/s, 3-node cluster {c:.0f}/s, "
              f"cluster/standalone {c / a:.2f}; load {os.getloadavg()[0]:.1f}")
    finally:
        alone.stop()
        cluster.close()


class Confirmer(threading.Thread):
    """One publisher with confirms, through whichever node answers; for each confirm, when its
    publish was sent and when the confirm came (so a confirm already on its way at a kill is told
    apart from the first one the new leader gave)."""

    def __init__(self, nodes: list[Node]) -> None:
        super().__init__(daemon=True)
        self.nodes, self.confirms, self.stop = nodes, [(0.0, 0.0)], threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for node in self.nodes:
                try:
                    conn = pika.BlockingConnection(pika.ConnectionParameters(
                        "127.0.0.1", node.amqp, connection_attempts=1, socket_timeout=2))
                    ch = conn.channel()
                    ch.confirm_delivery()
                    ch.queue_declare("failover", durable=True)
                    while not self.stop.is_set():
                        sent = time.monotonic()
                        ch.basic_publish("", "failover", b"x" * 256, pika.BasicProperties(delivery_mode=2))
                        self.confirms.append((sent, time.monotonic()))
                    conn.close()
                except (pika.exceptions.AMQPError, OSError):
                    time.sleep(0.01)


def failover(args: argparse.Namespace, tmp: Path) -> None:
    cluster = Cluster(tmp, args.ttl)
    times: list[float] = []
    publisher = Confirmer(cluster.nodes)
    publisher.start()
    try:
        for i in range(args.kills):
            leader = cluster.leader()
            wait_for(lambda: publisher.confirms[-1][1] > time.monotonic() - 0.2, 30)  # confirming now
            time.sleep(args.ttl / 2 * (i % 3) / 2)  # a keep-alive phase that varies between rounds
            killed_at = time.monotonic()
            leader.stop(signal.SIGKILL)
            first = wait_for(lambda: next((done for sent, done in reversed(publisher.confirms) if sent > killed_at),
                                          None), 60)
            times.append(first - killed_at)
            print(f"kill {i + 1}: first confirm after {first - killed_at:.3f} s", flush=True)
            leader.start()
            cluster.whole(60)
        print(f"kill -9 of the leader to the first confirm, {len(times)} kills, ttl {args.ttl}s: median "
              f"{statistics.median(times):.2f} s, max {max(times):.2f} s, min {min(times):.2f} s; "
              f"load {os.getloadavg()[0]:.1f}")
    finally:
        publisher.stop.set()
        publisher.join(10)
        cluster.close()


def catchup(args: argparse.Namespace, tmp: Path) -> None:
    cluster = Cluster(tmp, args.ttl)
    try:
        target = amqp_load.Target("cluster", "127.0.0.1", cluster.leader().amqp)
        started = time.monotonic()
        _publish_backlog(target, args.messages, cluster.leader())
        print(f"{args.messages} persistent messages published in {time.monotonic() - started:.1f} s", flush=True)
        store = sum(p.stat().st_size for p in (cluster.nodes[0].data / "store").glob("*") if p.is_file())
        fourth = Node("hr4@localhost", tmp / "n4", cluster.env)
        cluster.nodes.append(fourth)
        began = time.monotonic()
        fourth.start()
        cluster.whole(1800)
        took = time.monotonic() - began
        print(f"a fourth node joined a cluster holding {args.messages} persistent messages ({store / 1e6:.0f} MB of "
              f"store) and was in sync after {took:.1f} s (process start included); load {os.getloadavg()[0]:.1f}")
    finally:
        cluster.close()


def _publish_backlog(target: amqp_load.Target, count: int, leader: Node) -> None:
    """``count`` persistent 256-byte messages to a durable queue from four publishers (no
    confirms: the leader's count of the queue says when all are in)."""
    def publish(n: int) -> None:
        conn = pika.BlockingConnection(target.params)
        ch = conn.channel()
        ch.queue_declare("backlog", durable=True)
        body, props = b"x" * 256, pika.BasicProperties(delivery_mode=2)
        for _ in range(n):
            ch.basic_publish("", "backlog", body, props)
        conn.close()

    publishers = [threading.Thread(target=publish, args=(count // 4 + (i < count % 4),)) for i in range(4)]
    for t in publishers:
        t.start()
    for t in publishers:
        t.join()

    def queued() -> bool:
        r = httpx.get(f"http://127.0.0.1:{leader.http}/api/queues/%2F/backlog", auth=("guest", "guest"), timeout=10)
        return r.status_code == 200 and r.json().get("messages", 0) >= count

    wait_for(queued, 600)


def publish(args: argparse.Namespace, tmp: Path) -> None:
    """Persistent publishes without confirms from one pika publisher, until the queue holds them
    all: a standalone node, then the cluster's leader (each group waits for the in-sync set)."""
    def run(node: Node) -> float:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", node.amqp))
        ch = conn.channel()
        ch.queue_declare("publish", durable=True)
        began = time.monotonic()
        for _ in range(args.messages):
            ch.basic_publish("", "publish", b"x" * 256, pika.BasicProperties(delivery_mode=2))
        conn.close()
        wait_for(lambda: httpx.get(f"http://127.0.0.1:{node.http}/api/queues/%2F/publish", auth=("guest", "guest"),
                                   timeout=10).json().get("messages", 0) >= args.messages, 600)
        return args.messages / (time.monotonic() - began)

    alone = Node("alone@localhost", tmp / "alone", {}).start()
    try:
        a = run(alone)
    finally:
        alone.stop()
    cluster = Cluster(tmp, args.ttl)
    try:
        c = run(cluster.leader())
    finally:
        cluster.close()
    print(f"{args.messages} persistent publishes without confirms: standalone {a:.0f}/s, 3-node cluster {c:.0f}/s, "
          f"cluster/standalone {c / a:.2f}; load {os.getloadavg()[0]:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["throughput", "publish", "failover", "catchup"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--messages", type=int)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--ttl", type=int, default=2)
    args = ap.parse_args()
    if args.messages is None:
        args.messages = {"catchup": 1_000_000, "publish": 30_000}.get(args.what, 6000)
    with tempfile.TemporaryDirectory(prefix="headrace-cluster-") as tmp:
        {"throughput": throughput, "publish": publish, "failover": failover,
         "catchup": catchup}[args.what](args, Path(tmp))


if __name__ == "__main__":
    main()
