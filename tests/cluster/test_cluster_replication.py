"""Three clustered nodes with the module's real etcd: confirms wait for a second disk; under
confirmed load, a kill -9 of the leader (two rounds), a kill -9 of a follower, a frozen leader
(SIGSTOP past its lease, then SIGCONT) and an etcd restart lose nothing confirmed and service goes
on; every node answers clients (a follower forwards them to the leader); unacked deliveries of a
dead leader come back redelivered."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pika
import pika.exceptions
import pytest

from conftest import free_port
from nodes import TTL, Node, connect, drain, healthy, in_sync, leader_of, logs, start_three, wait_for

QUEUE = "orders"


@pytest.fixture(scope="module")
def cluster(etcd: Any, module_broker_factory: Any, tmp_path_factory: pytest.TempPathFactory) -> list[Node]:
    """One cluster of three for the module: each test leaves it whole again (every node running
    and in sync), so the next one starts from a healthy cluster without three process starts."""
    return start_three(module_broker_factory, etcd, "t" + uuid.uuid4().hex[:12], tmp_path_factory.mktemp("cluster"))


class Publisher(threading.Thread):
    """Publishes numbered persistent messages with confirms through any node that answers, and
    records each number whose confirm arrived."""

    def __init__(self, nodes: list[Node], queue: str = QUEUE) -> None:
        super().__init__(daemon=True)
        self.queue = queue
        self.nodes = nodes
        self.confirmed: set[int] = set()
        self.stop = threading.Event()
        self.sent = 0
        self.errors = 0

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            for node in self.nodes:
                if self.stop.is_set():
                    return
                try:
                    conn = pika.BlockingConnection(pika.ConnectionParameters(
                        "127.0.0.1", node.amqp_port, connection_attempts=1, socket_timeout=2, blocked_connection_timeout=5))
                    ch = conn.channel()
                    ch.confirm_delivery()
                    ch.queue_declare(self.queue, durable=True)
                    while not self.stop.is_set():
                        ch.basic_publish("", self.queue, str(n).encode(), pika.BasicProperties(delivery_mode=2))
                        self.confirmed.add(n)
                        n += 1
                    conn.close()
                except (pika.exceptions.AMQPError, OSError):
                    self.errors += 1
                    n += 1  # the one in flight may or may not be in
                    time.sleep(0.05)


def test_a_follower_forwards_clients_to_the_leader_and_the_message_is_on_every_disk(cluster: list[Node]) -> None:
    healthy(cluster)
    leader = leader_of(cluster)
    follower = next(n for n in cluster if n is not leader)
    conn = connect(follower)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("via-follower", durable=True)
    ch.basic_publish("", "via-follower", b"hello through a follower", pika.BasicProperties(delivery_mode=2))
    conn.close()
    # /api/nodes on any node lists the three with their roles (a follower forwards HTTP too)
    rows = {r["name"]: r for r in follower.nodes()}
    assert set(rows) == {n.name for n in cluster}
    assert rows[leader.name]["cluster_role"] == "leader"
    assert sorted(r["cluster_role"] for r in rows.values()) == ["follower", "follower", "leader"]
    assert all(r["in_sync"] for r in rows.values())
    # a copy never takes a node's own files: each lock still names its own process
    for n in cluster:
        assert (n.data_dir / "headrace.lock").read_text().strip() == str(n.proc.proc.pid)
    # and /metrics has the role, the in-sync flag and the lag per node
    text = httpx.get(f"http://127.0.0.1:{follower.http_port}/metrics", timeout=5).text
    assert f'headrace_cluster_leader{{node="{leader.name}"}} 1' in text
    assert f'headrace_cluster_in_sync{{node="{follower.name}"}} 1' in text
    assert f'headrace_cluster_replication_lag{{node="{follower.name}"}}' in text
    # confirmed means on a second disk: the bytes are in an in-sync follower's store files
    holders = [n for n in cluster if n is not leader and b"hello through a follower" in
               b"".join(p.read_bytes() for p in (n.data_dir / "store").glob("*") if p.is_file())]
    assert holders


def fault(kind: str, nodes: list[Node], etcd: Any) -> None:
    """Do one fault to a running cluster; ``healthy`` heals it."""
    leader = leader_of(nodes)
    if kind == "leader killed":
        leader.proc.kill()
        wait_for(lambda: any(n.leads() for n in nodes if n is not leader), TTL + 10.0)
    elif kind == "follower killed":
        next(n for n in nodes if n is not leader).proc.kill()
    elif kind == "leader frozen":
        leader.proc.signal(signal.SIGSTOP)
        try:
            wait_for(lambda: any(n.leads() for n in nodes if n is not leader), TTL + 10.0)
        finally:
            leader.proc.signal(signal.SIGCONT)
    elif kind == "follower frozen":  # behind past the bound: it leaves the in-sync set, then catches up
        victim = next(n for n in nodes if n is not leader)
        victim.proc.signal(signal.SIGSTOP)
        try:
            # a write the frozen follower cannot ack (the load's publisher may be the one frozen
            # with it, through its forwarder): confirmed once the follower has left the set
            conn = connect(leader)
            ch = conn.channel()
            ch.confirm_delivery()
            ch.queue_declare("frozen-follower", durable=True)
            ch.basic_publish("", "frozen-follower", b"x", pika.BasicProperties(delivery_mode=2))
            conn.close()
            wait_for(lambda: victim.name not in in_sync(leader), 10.0)
        finally:
            victim.proc.signal(signal.SIGCONT)
    elif kind == "etcd restarted":
        etcd.restart()


@pytest.mark.parametrize("kinds", [("leader killed", "leader killed"), ("follower killed",), ("follower frozen",),
                                   ("leader frozen",), ("etcd restarted",)], ids=" then ".join)
def test_a_fault_under_confirmed_load_loses_nothing_confirmed(cluster: list[Node], etcd: Any,
                                                             kinds: tuple[str, ...]) -> None:
    healthy(cluster)
    queue = "orders-" + "-".join(k.split()[0] for k in kinds) + uuid.uuid4().hex[:6]
    publisher = Publisher(cluster, queue)
    publisher.start()
    try:
        for kind in kinds:
            count = len(publisher.confirmed)
            wait_for(lambda c=count: len(publisher.confirmed) > c + 200, 20.0)
            fault(kind, cluster, etcd)
            before = len(publisher.confirmed)
            try:
                wait_for(lambda b=before: len(publisher.confirmed) > b + 100, TTL + 20.0)
            except AssertionError:
                raise AssertionError(f"no confirms after {kind}:\n" + logs(cluster)) from None
            healthy(cluster)
    finally:
        publisher.stop.set()
        publisher.join(15)
    got = drain(leader_of(cluster), queue)
    lost = publisher.confirmed - set(got)
    assert not lost, f"{len(lost)} confirmed messages lost, e.g. {sorted(lost)[:10]}"


def test_unacked_deliveries_of_a_dead_leader_come_back_redelivered(cluster: list[Node]) -> None:
    healthy(cluster)
    leader = leader_of(cluster)
    conn = connect(leader)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("work", durable=True)
    for i in range(10):
        ch.basic_publish("", "work", str(i).encode(), pika.BasicProperties(delivery_mode=2))
    taken = [ch.basic_get("work")[0] for _ in range(4)]  # delivered, never acked
    assert all(m is not None and not m.redelivered for m in taken)
    follower = next(n for n in cluster if n is not leader)
    wait_for(lambda: all(r.get("replication_lag", 1) == 0 for r in follower.nodes()), 5.0)  # the marks shipped
    leader.proc.kill()
    new = leader_of(cluster)
    conn = connect(new)
    ch = conn.channel()
    got = []
    try:
        while (m := ch.basic_get("work", auto_ack=True))[0] is not None:
            got.append((int(m[2]), m[0].redelivered))
    except pika.exceptions.ChannelClosedByBroker as exc:
        raise AssertionError(f"{exc} on {new.name}:\n" + logs(cluster)) from None
    conn.close()
    assert got == [(i, i < 4) for i in range(10)]
    healthy(cluster)


def test_aio_pika_connect_robust_carries_on_through_a_failover(cluster: list[Node]) -> None:
    """An unmodified aio-pika client with ``connect_robust`` on a follower's port: the leader is
    killed, the forwarded connection drops, aio-pika reconnects (to the new leader, through the
    same follower) and publishes on; every confirmed message is there."""
    import asyncio

    import aio_pika

    healthy(cluster)
    leader = leader_of(cluster)
    via = next(n for n in cluster if n is not leader)
    confirmed: set[int] = set()

    async def main() -> None:
        connection = await aio_pika.connect_robust(f"amqp://guest:guest@127.0.0.1:{via.amqp_port}/",
                                                   reconnect_interval=0.2)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            await channel.declare_queue("robust", durable=True)
            n = 0
            killed_at = 0.0
            while True:
                if n == 200 and not killed_at:
                    leader.proc.kill()
                    killed_at = time.monotonic()
                if killed_at and len([c for c in confirmed if c > 200]) >= 200:
                    return
                try:
                    await channel.default_exchange.publish(
                        aio_pika.Message(str(n).encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                        routing_key="robust", timeout=5)
                    confirmed.add(n)
                except (aio_pika.exceptions.AMQPError, asyncio.TimeoutError, ConnectionError, RuntimeError):
                    await asyncio.sleep(0.1)  # the connection is being restored: send the next one then
                n += 1

    asyncio.run(asyncio.wait_for(main(), 60))
    got = drain(leader_of(cluster), "robust")
    lost = confirmed - set(got)
    assert not lost, f"{len(lost)} confirmed messages lost, e.g. {sorted(lost)[:10]}"
    healthy(cluster)


def headrace(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "headrace", *args], capture_output=True, text=True, timeout=60)


def test_a_fourth_node_joins_a_running_cluster_and_leaves_it(cluster: list[Node], etcd: Any,
                                                             tmp_path: Path) -> None:
    healthy(cluster)
    leader = leader_of(cluster)
    cluster_id = leader.cluster_name
    ports = [str(free_port()) for _ in range(3)]
    fourth = subprocess.Popen(
        [sys.executable, "-m", "headrace", "cluster", "join", etcd.endpoint, "--node-name", "hr4@localhost",
         "--cluster-id", cluster_id, "--cluster-port", ports[0], "--amqp-port", ports[1], "--http-port", ports[2],
         "--data-dir", str(tmp_path / "n4")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "HEADRACE_CLUSTER_LEASE_TTL_S": str(TTL)})
    try:
        names = {n.name for n in cluster}
        wait_for(lambda: in_sync(leader) == names | {"hr4@localhost"}, 30.0)
        url = f"http://127.0.0.1:{ports[2]}"  # through the new node, forwarded to the leader
        shown = headrace("cluster", "status", "--url", url, "--format", "tsv")
        assert shown.returncode == 0, shown.stderr
        rows = [line.split("\t") for line in shown.stdout.strip().splitlines()[1:]]
        assert sorted((r[0], r[1]) for r in rows) == sorted(
            [(n, "leader" if n == leader.name else "follower") for n in names | {"hr4@localhost"}])
        left = headrace("cluster", "leave", "hr4@localhost", "--url", url)
        assert left.returncode == 0 and "hr4@localhost is leaving the cluster" in left.stdout, left
        assert fourth.wait(15) == 0
        wait_for(lambda: in_sync(leader) == names, 10.0)
        unknown = headrace("cluster", "leave", "nobody@nowhere", "--url", f"http://127.0.0.1:{leader.http_port}")
        assert unknown.returncode == 1 and "node 'nobody@nowhere' is not in the cluster" in unknown.stderr
    finally:
        fourth.kill()
        fourth.wait()


def test_the_cluster_stops_gracefully(cluster: list[Node]) -> None:
    healthy(cluster)
    for n in sorted(cluster, key=lambda n: n.leads()):  # the followers first, the leader last
        assert n.proc.stop() == 0, n.proc.log[-3000:]


def test_the_console_overview_shows_the_nodes_their_roles_and_lag(cluster: list[Node], browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    healthy(cluster)
    leader = leader_of(cluster)
    follower = next(n for n in cluster if n is not leader)
    base = f"http://127.0.0.1:{follower.http_port}"  # a follower's port: the console is the leader's
    browser.get(base + "/#/overview")
    browser.execute_script("sessionStorage.clear()")
    browser.refresh()
    wait = WebDriverWait(browser, 10, poll_frequency=0.05)
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#login").is_displayed())
    browser.find_element(By.CSS_SELECTOR, "#login-user").send_keys("guest")
    browser.find_element(By.CSS_SELECTOR, "#login-password").send_keys("guest", Keys.ENTER)

    def rows(d: Any) -> dict[str, list[str]]:
        found = d.find_elements(By.CSS_SELECTOR, "#cluster-nodes tbody tr")
        return {cells[0]: cells[1:] for r in found if (cells := [c.text for c in r.find_elements(By.TAG_NAME, "td")])}

    wait.until(lambda d: len(rows(d)) == 3)
    shown = rows(browser)
    assert shown[leader.name][:3] == ["leader", "yes", "yes"]
    assert sorted(v[0] for v in shown.values()) == ["follower", "follower", "leader"]
    assert all(v[2] == "yes" for v in shown.values())  # in sync
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, severe
