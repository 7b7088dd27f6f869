"""Helpers for the tests that run clustered ``headrace serve`` processes on loopback ports."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pika
import pika.exceptions

from conftest import fixed_port

TTL = 2
QUEUE = "orders"
LEADS = re.compile(r"headrace\.cluster: (\S+) leads, epoch (\d+)")


def cluster_env(etcd: Any, cluster_name: str, node: str, **extra: str) -> dict[str, str]:
    return {"HEADRACE_CLUSTER_ETCD_ENDPOINTS": etcd.endpoint, "HEADRACE_CLUSTER_ID": cluster_name,
            "HEADRACE_NODE_NAME": node, "HEADRACE_CLUSTER_LEASE_TTL_S": str(TTL), **extra}


def leads(proc: Any) -> list[tuple[str, int]]:
    return [(m.group(1), int(m.group(2))) for line in list(proc.lines) if (m := LEADS.search(line))]


def wait_for(check: Callable[[], object], timeout: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout}s")


class Node:
    """One clustered node with fixed ports (a cluster finds its members by them): started, killed
    and started again on the same ports and data directory."""

    def __init__(self, factory: Any, etcd: Any, cluster_name: str, name: str, data_dir: Path, **extra: str) -> None:
        self.factory, self.etcd, self.cluster_name, self.name, self.data_dir = factory, etcd, cluster_name, name, data_dir
        self.extra = extra
        self.amqp_port, self.http_port, self.cluster_port = fixed_port(), fixed_port(), fixed_port()
        self.proc: Any = None

    def start(self) -> Node:
        env = cluster_env(self.etcd, self.cluster_name, self.name, HEADRACE_CLUSTER_PORT=str(self.cluster_port),
                          **self.extra)
        self.proc = self.factory("--amqp-port", str(self.amqp_port), "--http-port", str(self.http_port),
                                 data_dir=self.data_dir, env=env)
        return self

    @property
    def lines(self) -> list[str]:
        return self.proc.lines if self.proc is not None else []

    def leads(self) -> bool:
        """Leads now: its last role line says so."""
        for line in reversed(list(self.lines)):
            if LEADS.search(line):
                return True
            if " follows " in line and "headrace.cluster" in line or "stops confirming" in line:
                return False
        return False

    def nodes(self) -> list[dict[str, Any]]:
        r = httpx.get(f"http://127.0.0.1:{self.http_port}/api/nodes", auth=("guest", "guest"), timeout=5)
        r.raise_for_status()
        return r.json()  # type: ignore[no-any-return]


def in_sync(node: Node) -> set[str]:
    try:
        return {n["name"] for n in node.nodes() if n.get("in_sync") and n.get("running")}
    except (httpx.HTTPError, ValueError):
        return set()


def healthy(nodes: list[Node]) -> None:
    """Every node running and in the leader's in-sync set. Stopped nodes start together: after the
    whole cluster stopped only the last leader may lead again, and a node started alone before it
    would wait for a leader that is not there yet."""
    start_all([n for n in nodes if n.proc.proc.poll() is not None])
    names = {n.name for n in nodes}
    try:
        wait_for(lambda: in_sync(leader_of(nodes)) == names, 30.0)
    except AssertionError:
        raise AssertionError("the cluster did not become whole again:\n" + logs(nodes)) from None


def start_three(broker_factory: Any, etcd: Any, cluster_name: str, tmp_path: Any) -> list[Node]:
    nodes = [Node(broker_factory, etcd, cluster_name, f"hr{i}@localhost", tmp_path / f"n{i}", HEADRACE_METRICS="aggregate")
             for i in (1, 2, 3)]
    start_all(nodes)
    names = {n.name for n in nodes}
    wait_for(lambda: in_sync(leader_of(nodes)) == names, 20.0)
    return nodes


def start_all(nodes: list[Node]) -> None:
    """Start the nodes together (a process takes seconds to start); the first failure is raised."""
    failed: list[BaseException] = []

    def start(n: Node) -> None:
        try:
            n.start()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            failed.append(exc)

    starts = [threading.Thread(target=start, args=(n,)) for n in nodes]
    for t in starts:
        t.start()
    for t in starts:
        t.join()
    if failed:
        raise failed[0]


def leader_of(nodes: list[Node]) -> Node:
    wait_for(lambda: sum(n.proc.proc.poll() is None and n.leads() for n in nodes) == 1, TTL + 10.0)
    (leader,) = [n for n in nodes if n.proc.proc.poll() is None and n.leads()]
    return leader


def connect(node: Node, timeout: float = 10.0) -> pika.BlockingConnection:
    """A client's connection that tries again while the node changes role (it listens again)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", node.amqp_port, connection_attempts=1))
        except pika.exceptions.AMQPConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def logs(nodes: list[Node]) -> str:
    return "\n".join(f"--- {n.name}\n" + "".join([x for x in n.lines if "httpx" not in x][-30:]) for n in nodes)


def drain(node: Node, queue: str = QUEUE) -> list[int]:
    conn = connect(node)
    ch = conn.channel()
    got = []
    while True:
        method, _props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            break
        got.append(int(body))
    conn.close()
    return got
