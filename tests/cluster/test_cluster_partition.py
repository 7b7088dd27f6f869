"""The leader cut off from the others by the network: each node in a network namespace of its own
with two links, one to the cluster's network (etcd and the other nodes) and one to the clients'.
Cutting the leader's cluster link leaves it reachable by its clients but alone: it stops
confirming, the majority elects a new leader and confirms again, and when the link is back the old
leader learns it lost, takes a copy and follows. Nothing confirmed on either side is lost.
Needs root (``ip netns``), as ``make test`` runs in CI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pika
import pika.exceptions
import pytest

from nodes import LEADS, TTL, wait_for

CLUSTER_NET, CLIENT_NET = "10.88.{}.", "10.89.{}."
AMQP, HTTP, REPLICATION = 5672, 15672, 25672  # the same in every namespace: each has its own addresses


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class Net:
    """Two bridges in the root namespace (the cluster's and the clients'), one namespace per node
    with a veth pair to each."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:4]
        self.subnet = int(self.tag, 16) % 200 + 20
        self.names: list[str] = []
        for kind, net in (("c", CLUSTER_NET), ("k", CLIENT_NET)):
            bridge = f"hb{kind}{self.tag}"
            ip("link", "add", bridge, "type", "bridge")
            ip("addr", "add", net.format(self.subnet) + "1/24", "dev", bridge)
            ip("link", "set", bridge, "up")
            self.names.append(bridge)
        self.namespaces: list[str] = []

    def cluster_ip(self, i: int) -> str:
        return CLUSTER_NET.format(self.subnet) + str(10 + i)

    def client_ip(self, i: int) -> str:
        return CLIENT_NET.format(self.subnet) + str(10 + i)

    @property
    def etcd_ip(self) -> str:
        return CLUSTER_NET.format(self.subnet) + "1"

    def add(self, i: int) -> str:
        ns = f"hr{self.tag}{i}"
        ip("netns", "add", ns)
        self.namespaces.append(ns)
        ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
        for kind, addr in (("c", self.cluster_ip(i)), ("k", self.client_ip(i))):
            outer, inner = f"h{kind}{self.tag}{i}", f"i{kind}{self.tag}{i}"
            ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            ip("link", "set", inner, "netns", ns)
            ip("link", "set", outer, "master", f"hb{kind}{self.tag}")
            ip("link", "set", outer, "up")
            ip("netns", "exec", ns, "ip", "addr", "add", addr + "/24", "dev", inner)
            ip("netns", "exec", ns, "ip", "link", "set", inner, "up")
        return ns

    def cut(self, i: int, up: bool = False) -> None:
        """The node's link to the cluster's network down (or up again)."""
        ip("link", "set", f"hc{self.tag}{i}", "up" if up else "down")

    def close(self) -> None:
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for bridge in self.names:
            subprocess.run(["ip", "link", "del", bridge], capture_output=True)


class NsNode:
    def __init__(self, net: Net, i: int, etcd: str, cluster: str, data: Path) -> None:
        self.net, self.i, self.name = net, i, f"hr{i}@partition"
        self.ns = net.add(i)
        self.lines: list[str] = []
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "HEADRACE_CLUSTER_ETCD_ENDPOINTS": etcd,
               "HEADRACE_CLUSTER_ID": cluster, "HEADRACE_NODE_NAME": self.name,
               "HEADRACE_CLUSTER_LEASE_TTL_S": str(TTL), "HEADRACE_CLUSTER_HOST": net.cluster_ip(i),
               "HEADRACE_LOOPBACK_USERS": "[]"}  # the clients come from the clients' network
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, sys.executable, "-m", "headrace", "serve", "--amqp-host", "0.0.0.0",
             "--http-host", "0.0.0.0", "--amqp-port", str(AMQP), "--http-port", str(HTTP), "--data-dir", str(data)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def leads(self) -> bool:
        for line in reversed(list(self.lines)):
            if LEADS.search(line):
                return True
            if " follows " in line and "headrace.cluster" in line:
                return False
        return False

    def in_sync(self) -> set[str]:
        try:
            r = httpx.get(f"http://{self.net.client_ip(self.i)}:{HTTP}/api/nodes", auth=("guest", "guest"), timeout=2)
            return {n["name"] for n in r.json() if n.get("in_sync") and n.get("running")} if r.status_code == 200 else set()
        except (httpx.HTTPError, ValueError):
            return set()


class Confirms(threading.Thread):
    """Numbered persistent publishes with confirms to the given client addresses, in turn; the
    confirmed numbers with when each was confirmed."""

    def __init__(self, addresses: list[str], queue: str, start: int) -> None:
        super().__init__(daemon=True)
        self.addresses, self.queue, self.n = addresses, queue, start
        self.confirmed: dict[int, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for address in self.addresses:
                try:
                    conn = pika.BlockingConnection(pika.ConnectionParameters(
                        address, AMQP, connection_attempts=1, socket_timeout=2, blocked_connection_timeout=30))
                    ch = conn.channel()
                    ch.confirm_delivery()
                    ch.queue_declare(self.queue, durable=True)
                    while not self.stop.is_set():
                        n, self.n = self.n, self.n + 1
                        ch.basic_publish("", self.queue, str(n).encode(), pika.BasicProperties(delivery_mode=2))
                        self.confirmed[n] = time.monotonic()
                    conn.close()
                except (pika.exceptions.AMQPError, OSError):
                    self.n += 1
                    time.sleep(0.05)


@pytest.fixture
def net() -> Iterator[Net]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.fail("network namespaces need root and iproute2 (make test runs as root in CI)")
    n = Net()
    yield n
    n.close()


def test_a_leader_cut_off_from_the_cluster_stops_confirming_and_the_majority_elects_another(
        net: Net, tmp_path: Path) -> None:
    etcd_url = f"http://{net.etcd_ip}:{2379 + net.subnet}"
    peer = f"http://{net.etcd_ip}:{2380 + 300 + net.subnet}"
    etcd = subprocess.Popen(
        ["etcd", "--name", "default", "--data-dir", str(tmp_path / "etcd"), "--listen-client-urls", etcd_url,
         "--advertise-client-urls", etcd_url, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
         "--initial-cluster", f"default={peer}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    nodes: list[NsNode] = []
    publishers: list[Confirms] = []
    try:
        wait_for(lambda: _answers(etcd_url), 20.0)
        nodes = [NsNode(net, i, etcd_url, "p" + net.tag, tmp_path / f"n{i}") for i in (1, 2, 3)]
        names = {n.name for n in nodes}
        try:
            wait_for(lambda: any(n.leads() and n.in_sync() == names for n in nodes), 40.0)
        except AssertionError:
            raise AssertionError("no whole cluster:\n" + _logs(nodes)) from None
        (old,) = [n for n in nodes if n.leads()]
        others = [n for n in nodes if n is not old]
        # one publisher on the leader itself (its clients still reach it), one through the others
        alone = Confirms([net.client_ip(old.i)], "partitioned", 0)
        rest = Confirms([net.client_ip(n.i) for n in others], "partitioned", 1_000_000)
        publishers = [alone, rest]
        for p in publishers:
            p.start()
        wait_for(lambda: len(alone.confirmed) > 100 and len(rest.confirmed) > 100, 20.0)

        net.cut(old.i)
        cut_at = time.monotonic()
        # the majority elects another leader and confirms again
        wait_for(lambda: any(n.leads() for n in others), TTL + 15.0)
        after = len(rest.confirmed)
        wait_for(lambda: len(rest.confirmed) > after + 100, 20.0)
        # the cut-off leader confirmed nothing once cut (a confirm already on its way may land)
        late = [n for n, at in alone.confirmed.items() if at > cut_at + 0.5]
        assert not late, f"{len(late)} confirms from the cut-off leader, e.g. {late[:5]}"
        assert any("stops confirming" in line for line in old.lines), "".join(old.lines[-30:])

        net.cut(old.i, up=True)  # back: it learns it lost, takes a copy and follows
        new = next(n for n in others if n.leads())
        wait_for(lambda: new.in_sync() == names, 40.0)
        assert not old.leads()
    finally:
        for p in publishers:
            p.stop.set()
        for p in publishers:
            p.join(15)
        for n in nodes:
            if n.proc.poll() is None:
                n.proc.terminate()
        for n in nodes:
            try:
                n.proc.wait(15)
            except subprocess.TimeoutExpired:
                n.proc.kill()
        etcd.terminate()
        etcd.wait(10)
    confirmed = set(publishers[0].confirmed) | set(publishers[1].confirmed)
    assert confirmed
    # every confirmed message, from either side of the cut, is in the queue: read from the data
    # the new leader left (started alone, standalone, on its directory)
    got = _drain_standalone(tmp_path / f"n{new.i}", tmp_path)
    lost = confirmed - set(got)
    assert not lost, f"{len(lost)} confirmed messages lost, e.g. {sorted(lost)[:10]}"


def _logs(nodes: list[NsNode]) -> str:
    return "\n".join(f"--- {n.name}\n" + "".join([x for x in n.lines if "httpx" not in x][-25:]) for n in nodes)


def _answers(url: str) -> bool:
    try:
        return httpx.post(f"{url}/v3/kv/range", json={"key": "AA=="}, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _drain_standalone(data: Path, tmp_path: Path) -> list[int]:
    """The queue's messages, read by a standalone broker started on a copy of ``data``."""
    copy = tmp_path / "check"
    shutil.copytree(data, copy, ignore=shutil.ignore_patterns("headrace.lock", "cluster.*"))
    proc = subprocess.Popen([sys.executable, "-m", "headrace", "serve", "--amqp-port", "0", "--http-port", "0",
                             "--data-dir", str(copy), "--ports-file", str(tmp_path / "ports.json")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (tmp_path / "ports.json").exists(), 30.0)
        port = json.loads((tmp_path / "ports.json").read_text())["amqp"]
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        ch = conn.channel()
        got = []
        while (m := ch.basic_get("partitioned", auto_ack=True))[0] is not None:
            got.append(int(m[2]))
        conn.close()
        return got
    finally:
        proc.terminate()
        proc.wait(15)

