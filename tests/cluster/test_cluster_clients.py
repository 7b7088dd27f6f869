"""Unmodified Node and Go clients through a failover: a publisher with confirms connected to a
follower's port (amqplib, with its own opt-in recovery) or to a list of every node's port
(amqp091-go, with the reconnect loop an application writes: it has no reconnect of its own) goes on
publishing through a kill -9 of the leader, and every message it saw confirmed is on the new
leader. The client programs are tests/node/cluster_failover.mjs and tests/go/cluster_failover."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from nodes import Node, drain, healthy, leader_of, logs, start_three

pytestmark = pytest.mark.timeout(300)

TESTS = Path(__file__).resolve().parents[1]
NODE_DIR = TESTS / "node"
GO_PACKAGES = "/usr/share/gocode"  # Debian's Go libraries, GOPATH layout


@pytest.fixture(scope="module")
def cluster(etcd: Any, module_broker_factory: Any, tmp_path_factory: pytest.TempPathFactory) -> list[Node]:
    """One cluster of three for the module; each test leaves it whole again."""
    return start_three(module_broker_factory, etcd, "t" + uuid.uuid4().hex[:12], tmp_path_factory.mktemp("cluster"))


def publish_through_a_failover(command: list[str], nodes: list[Node], leader: Node, queue: str, **env: str) -> None:
    """Run the client; when it says ``kill`` (200 confirmed), kill -9 the leader; the client stops
    after 200 confirms past its reconnect. Nothing it saw confirmed may be missing."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "QUEUE": queue, "KILL_AFTER": "200", "AFTER": "200", **env})
    lines: list[str] = []
    timer = threading.Timer(120, proc.kill)  # a client that hangs fails the test instead of the run
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.strip() == "kill":
                leader.proc.kill()
        proc.wait()
    finally:
        timer.cancel()
    stderr = proc.stderr.read() if proc.stderr is not None else ""
    assert proc.returncode == 0 and lines and "kill\n" in lines, \
        f"client exit {proc.returncode}: {''.join(lines)[-2000:]}{stderr[-2000:]}\n" + logs(nodes)
    result = json.loads(lines[-1])
    assert result["reconnects"] >= 1 and result["after"] >= 200, result
    got = set(drain(leader_of(nodes), queue))
    lost = set(result["confirmed"]) - got
    assert not lost, f"{len(lost)} confirmed messages lost, e.g. {sorted(lost)[:10]}"


def test_amqplib_with_its_recovery_on_a_follower_carries_on_through_a_failover(cluster: list[Node]) -> None:
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, "node and npm are needed for the amqplib tests"
    if not (NODE_DIR / "node_modules" / "amqplib" / "package.json").exists():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, check=True, timeout=240,
                       capture_output=True)
    healthy(cluster)
    leader = leader_of(cluster)
    via = next(n for n in cluster if n is not leader)
    publish_through_a_failover([node, str(NODE_DIR / "cluster_failover.mjs")], cluster, leader,
                               "amqplib-" + uuid.uuid4().hex[:6], AMQP_URL=f"amqp://127.0.0.1:{via.amqp_port}")
    healthy(cluster)


def test_amqp091_go_over_a_list_of_nodes_carries_on_through_a_failover(cluster: list[Node], tmp_path: Path) -> None:
    go = shutil.which("go")
    assert go and Path(GO_PACKAGES, "src/github.com/rabbitmq/amqp091-go").is_dir(), \
        "Go and amqp091-go are needed (make test installs golang-go and golang-github-rabbitmq-amqp091-go-dev)"
    binary = tmp_path / "cluster_failover"
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": GO_PACKAGES, "GOCACHE": str(tmp_path / "gocache"),
           "HOME": str(tmp_path)}
    subprocess.run([go, "build", "-o", str(binary), str(TESTS / "go" / "cluster_failover" / "main.go")], env=env,
                   check=True, timeout=120, capture_output=True)
    healthy(cluster)
    leader = leader_of(cluster)
    followers = [n for n in cluster if n is not leader]
    urls = ",".join(f"amqp://guest:guest@127.0.0.1:{n.amqp_port}/" for n in [*followers, leader])
    publish_through_a_failover([str(binary)], cluster, leader, "go-" + uuid.uuid4().hex[:6], AMQP_URLS=urls)
    healthy(cluster)
