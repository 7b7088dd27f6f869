"""``headrace cluster``: the nodes of a cluster, a node joining one, and a node leaving it.

``status`` and ``leave`` are thin clients of the broker's HTTP API (``/api/nodes`` and
``DELETE /api/cluster/nodes/{name}``), answered by the leader through any node; ``join`` runs this
machine's node in a cluster, as ``serve`` does with the cluster settings given.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import click

from .client import Client, pass_client

__all__ = ["cluster", "join"]


@click.group()
def cluster() -> None:
    """A cluster's nodes: status, join, leave (RabbitMQ's cluster_status, join_cluster,
    forget_cluster_node)."""


@cluster.command("status")
@pass_client
def status(c: Client) -> None:
    """Every node with its role (leader or follower), whether it is in sync, and its lag."""
    rows = c.call("GET", "/api/nodes")
    if not c.as_json:
        rows = [{**r, "cluster_role": r.get("cluster_role", "standalone"), "in_sync": r.get("in_sync", True),
                 "replication_lag": r.get("replication_lag", 0),
                 "replication_lag_bytes": r.get("replication_lag_bytes", 0)} for r in rows]
    c.show(rows, ["name", "cluster_role", "running", "in_sync", "replication_lag", "replication_lag_bytes"])


@cluster.command("leave")
@click.argument("node")
@pass_client
def leave(c: Client, node: str) -> None:
    """Remove NODE from the cluster: a follower stops and leaves the in-sync set; the leader stops
    and another in-sync node takes over at once."""
    c.call("DELETE", f"/api/cluster/nodes/{quote(node, safe='')}")
    c.done(f"Node {node} is leaving the cluster", "left", node=node)


@click.command("join")
@click.argument("etcd_endpoints")
@click.option("--node-name", required=True, help="This node's name in the cluster, e.g. hr4@host.")
@click.option("--cluster-id", default="default", show_default=True, help="The cluster's key prefix in etcd.")
@click.option("--cluster-port", type=int, default=25672, show_default=True, help="This node's replication port.")
@click.option("--amqp-port", type=int, help="AMQP port [5672].")
@click.option("--http-port", type=int, help="HTTP API port [15672].")
@click.option("--data-dir", type=click.Path(path_type=Path, file_okay=False), help="Data directory [./headrace-data].")
def join(etcd_endpoints: str, node_name: str, cluster_id: str, cluster_port: int, **flags: object) -> None:
    """Run this node in the cluster whose etcd is at ETCD_ENDPOINTS (comma-separated URLs): it gets
    a copy of the leader's data, joins the in-sync set, and serves (forwarding to the leader)."""
    from .serving import run_broker

    run_broker(None, node_name=node_name, cluster_etcd_endpoints=etcd_endpoints, cluster_id=cluster_id,
               cluster_port=cluster_port, **flags)

