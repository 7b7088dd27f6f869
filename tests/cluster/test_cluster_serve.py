"""``headrace serve`` processes in a cluster with the module's real etcd: one leads, a kill -9
of the leader makes another lead with a higher epoch within a few seconds, a node name already
in use is refused with one line, and an unreachable etcd stops the start with one line."""

from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
import sys
import time

import httpx

from conftest import free_port
from nodes import Node, in_sync

TTL = 2
LEADS = re.compile(r"headrace\.cluster: (\S+) leads, epoch (\d+)")


def cluster_env(etcd, cluster_name: str, node: str) -> dict[str, str]:
    return {"HEADRACE_CLUSTER_ETCD_ENDPOINTS": etcd.endpoint, "HEADRACE_CLUSTER_ID": cluster_name,
            "HEADRACE_NODE_NAME": node, "HEADRACE_CLUSTER_LEASE_TTL_S": str(TTL)}


def leads(proc) -> list[tuple[str, int]]:
    return [(m.group(1), int(m.group(2))) for line in list(proc.lines) if (m := LEADS.search(line))]


def wait_for(check, timeout: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout}s")


def test_kill_9_of_the_leader_elects_another_with_a_higher_epoch(etcd, cluster_name, broker_factory, tmp_path) -> None:
    cluster = [Node(broker_factory, etcd, cluster_name, f"hr{i}@localhost", tmp_path / f"n{i}").start()
               for i in (1, 2, 3)]
    nodes = [n.proc for n in cluster]
    wait_for(lambda: sum(bool(leads(n)) for n in nodes) == 1, 10.0)
    (leader,) = [n for n in nodes if leads(n)]
    assert leads(leader) == [(f"hr{nodes.index(leader) + 1}@localhost", 1)]
    others = [n for n in nodes if n is not leader]
    wait_for(lambda: all(any("follows" in line for line in n.lines) for n in others), 10.0)
    # only an in-sync node may take over: wait until both followers have a whole copy
    wait_for(lambda: len(in_sync(cluster[nodes.index(leader)])) == 3, 15.0)
    leader.kill()
    took = wait_for(lambda: any(leads(n) for n in others), TTL + 5.0)
    assert took < TTL + 3.0
    (new,) = [n for n in others if leads(n)]
    assert leads(new)[0][1] == 2
    # the remaining one follows the new leader
    (rest,) = [n for n in others if n is not new]
    name = leads(new)[0][0]
    wait_for(lambda: any(f"follows {name}, epoch 2" in line for line in rest.lines), 5.0)
    for n in others:
        assert n.stop() == 0, n.log[-3000:]


def test_graceful_stop_of_the_leader_hands_over_at_once(etcd, cluster_name, broker_factory, tmp_path) -> None:
    node_a = Node(broker_factory, etcd, cluster_name, "a@localhost", tmp_path / "a").start()
    a = node_a.proc
    wait_for(lambda: leads(a) == [("a@localhost", 1)], 10.0)
    b = Node(broker_factory, etcd, cluster_name, "b@localhost", tmp_path / "b").start().proc
    wait_for(lambda: in_sync(node_a) == {"a@localhost", "b@localhost"}, 10.0)  # else b may not lead
    assert a.stop() == 0, a.log[-3000:]
    try:
        took = wait_for(lambda: leads(b) == [("b@localhost", 2)], 5.0)
    except AssertionError:
        raise AssertionError("".join(x for x in b.lines if "httpx" not in x)[-4000:]) from None
    assert took < TTL  # the lease was revoked, not waited out
    assert b.stop() == 0


def serve_refused(data_dir, env: dict[str, str]) -> tuple[int, list[str]]:
    """Run ``headrace serve`` that is expected to refuse to start: its exit code and stderr lines."""
    proc = subprocess.run(
        [sys.executable, "-m", "headrace", "serve", "--amqp-port", str(free_port()), "--http-port", str(free_port()),
         "--data-dir", str(data_dir)],
        env={**os.environ, "HEADRACE_CLUSTER_PORT": str(free_port()), **env}, capture_output=True, text=True, timeout=60,
    )
    return proc.returncode, proc.stderr.splitlines()


def test_a_second_node_with_an_existing_name_exits_1_with_one_line(etcd, cluster_name, broker_factory, tmp_path) -> None:
    first = Node(broker_factory, etcd, cluster_name, "hr1@localhost", tmp_path / "first").start().proc
    wait_for(lambda: bool(leads(first)), 10.0)
    code, lines = serve_refused(tmp_path / "second", cluster_env(etcd, cluster_name, "hr1@localhost"))
    assert code == 1, lines
    assert [line for line in lines if "Error" in line or "Traceback" in line] == [
        "Error: cluster: node name 'hr1@localhost' is already a member of this cluster "
        "(another running node registered it; give each node its own node_name)"]
    assert leads(first) == [("hr1@localhost", 1)]  # untouched
    assert first.stop() == 0


def test_a_cluster_node_without_fixed_ports_exits_1_with_one_line(etcd, cluster_name, tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "headrace", "serve", "--amqp-port", "0", "--data-dir", str(tmp_path / "z")],
        env={**os.environ, **cluster_env(etcd, cluster_name, "z@localhost")}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if "Error" in line or "Traceback" in line]
    assert errors == ["Error: cluster: amqp_port must be a fixed port in a cluster (0 was given): the other nodes "
                      "find this node by it"]


def test_unreachable_etcd_at_start_exits_1_with_one_line(tmp_path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    code, lines = serve_refused(tmp_path / "x", {"HEADRACE_CLUSTER_ETCD_ENDPOINTS": dead})
    assert code == 1, lines
    errors = [line for line in lines if "Error" in line or "Traceback" in line]
    assert len(errors) == 1 and errors[0].startswith(f"Error: cluster: cannot reach etcd: no etcd endpoint answered ({dead}")


def test_a_frozen_leader_stops_confirming_and_follows_when_it_wakes(etcd, cluster_name, broker_factory, tmp_path) -> None:
    node_a = Node(broker_factory, etcd, cluster_name, "a@localhost", tmp_path / "a").start()
    a = node_a.proc
    wait_for(lambda: leads(a) == [("a@localhost", 1)], 10.0)
    b = Node(broker_factory, etcd, cluster_name, "b@localhost", tmp_path / "b").start().proc
    wait_for(lambda: in_sync(node_a) == {"a@localhost", "b@localhost"}, 10.0)
    a.signal(signal.SIGSTOP)  # past its lease: b takes over
    try:
        wait_for(lambda: leads(b) == [("b@localhost", 2)], TTL + 5.0)
    finally:
        a.signal(signal.SIGCONT)
    wait_for(lambda: any("follows b@localhost, epoch 2" in line for line in a.lines), 10.0)
    after_freeze = "".join(a.lines).split("leads, epoch 1", 1)[1]
    assert "a@localhost stops confirming" in after_freeze
    assert after_freeze.index("stops confirming") < after_freeze.index("follows b@localhost, epoch 2")
    assert leads(a) == [("a@localhost", 1)]  # it never led again
    for n in (a, b):
        assert n.stop() == 0, n.log[-3000:]


def test_a_node_whose_name_was_taken_while_it_was_frozen_exits_1_with_one_line(
        etcd, cluster_name, broker_factory, tmp_path) -> None:
    a = Node(broker_factory, etcd, cluster_name, "a@localhost", tmp_path / "a").start().proc
    wait_for(lambda: leads(a) == [("a@localhost", 1)], 10.0)
    a.signal(signal.SIGSTOP)
    try:
        # another process (another data directory) registers the same name once a's lease is gone
        member = base64.b64encode(f"/headrace/{cluster_name}/members/a@localhost".encode()).decode()
        wait_for(lambda: "kvs" not in httpx.post(f"{etcd.endpoint}/v3/kv/range", json={"key": member}).json(),
                 TTL + 5.0)
        twin = Node(broker_factory, etcd, cluster_name, "a@localhost", tmp_path / "twin").start().proc
        wait_for(lambda: leads(twin) == [("a@localhost", 2)], TTL + 5.0)
    finally:
        a.signal(signal.SIGCONT)
    assert a.wait(15) == 1
    errors = [line for line in a.lines if line.startswith(("Error", "Traceback"))]
    assert errors == ["Error: cluster: node name 'a@localhost' is already a member of this cluster "
                      "(another running node registered it; give each node its own node_name)\n"]
    assert twin.stop() == 0, twin.log[-3000:]


def test_etcd_restarted_the_cluster_keeps_one_leader(etcd, cluster_name, broker_factory, tmp_path) -> None:
    a = Node(broker_factory, etcd, cluster_name, "a@localhost", tmp_path / "a").start().proc
    wait_for(lambda: leads(a) == [("a@localhost", 1)], 10.0)
    b = Node(broker_factory, etcd, cluster_name, "b@localhost", tmp_path / "b").start().proc
    wait_for(lambda: any("follows a@localhost, epoch 1" in line for line in b.lines), 10.0)
    etcd.restart()  # etcd keeps its leases across a restart and gives them a full TTL again
    # for longer than a lease: b never leads, as a's lease is renewed, not lost
    until = time.monotonic() + TTL + 1.0
    while time.monotonic() < until:
        assert leads(b) == [], b.log[-3000:]
        time.sleep(0.05)
    # a may have stopped confirming while etcd was away; each stop was followed by a resume of
    # the same lease, so it leads with epoch 1 throughout
    stops = sum("stops confirming" in line for line in a.lines)
    assert leads(a) == [("a@localhost", 1)] * (1 + stops), a.log[-3000:]
    for n in (a, b):
        assert n.proc.poll() is None
        assert n.stop() == 0, n.log[-3000:]


def test_a_node_whose_data_has_an_epoch_ahead_of_etcd_exits_1_with_one_line(etcd, cluster_name, broker_factory,
                                                                             tmp_path) -> None:
    a = Node(broker_factory, etcd, cluster_name, "a@localhost", tmp_path / "a").start()
    wait_for(lambda: leads(a.proc) == [("a@localhost", 1)], 10.0)
    assert a.proc.stop() == 0
    assert (tmp_path / "a" / "cluster.epoch").read_text().strip() == "1"
    # etcd loses the cluster's keys (a reset, or another etcd): epoch 1 is the next one again
    prefix = base64.b64encode(f"/headrace/{cluster_name}/".encode()).decode()
    end = base64.b64encode(f"/headrace/{cluster_name}0".encode()).decode()
    httpx.post(f"{etcd.endpoint}/v3/kv/deleterange", json={"key": prefix, "range_end": end}).raise_for_status()
    (tmp_path / "a" / "cluster.epoch").write_text("7\n")  # as if it had led in epoch 7
    code, lines = serve_refused(tmp_path / "a", cluster_env(etcd, cluster_name, "a@localhost"))
    assert code == 1, lines
    errors = [line for line in lines if "Error" in line or "Traceback" in line]
    assert errors == ["Error: cluster: this node's data has epoch 7, ahead of the cluster's 0 in etcd: was etcd "
                      "reset? refusing to join"], lines
