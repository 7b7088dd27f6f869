"""``/api/nodes`` (and a node's memory breakdown), ``/api/cluster-name``, ``/api/extensions``, ``/api/feature-flags`` and
``/api/auth``: the node and cluster as RabbitMQ's management API describes them, for one node."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from headrace.queues.queue import ENTRY_OVERHEAD

from .listing import page, rated
from .node_facts import (FEATURE_FLAGS, FLAG_DOCS, FLAG_PROVIDERS, NODE_NAME, churn_counts, cluster_name, node_json,
                         store_io_counts)
from .rates import CHURN
from .sampler import NODE_GAUGES
from .routes import Context, HTTPError, Request, Response, Routes, json_response, user_of

__all__ = ["node_of", "require_monitor", "routes"]

routes = Routes()
# the node's gauges read per request (``node_facts``), with no history: their samples are flat
UNSAMPLED_GAUGES = ("fd_used", "proc_used")


class ClusterNameBody(BaseModel):
    name: str = Field(min_length=1, max_length=255)


def require_monitor(req: Request) -> None:
    if not user_of(req).can_monitor:
        raise HTTPError(401, "not_authorised", "Not monitor user")


def node_of(ctx: Context) -> dict[str, Any]:
    """The node's JSON with RabbitMQ's rates: of its gauges (memory, descriptors, sockets, disk) and
    of the churn counters it shares with the overview."""
    b = ctx.broker
    out = node_json(ctx.node_facts(), now=ctx.now, mem_used=b.memory_rss or b.memory_used, disk_free=b.disk_free,
                    alarms=b.alarms, sockets_used=len(b.connections))
    out.update(rated(ctx, ("node",), NODE_GAUGES, tuple(out[g] for g in NODE_GAUGES), ages="node_stats",
                     signed=True))
    out.update(rated(ctx, [], UNSAMPLED_GAUGES, tuple(out[g] for g in UNSAMPLED_GAUGES), ages="node_stats",
                     signed=True))
    # the node page asks for node_stats alone, its churn charts too
    out.update(rated(ctx, ("churn",), CHURN, churn_counts(b.counters), ages="node_stats"))
    names, counts = store_io_counts(ctx.store_io())
    out.update(rated(ctx, ("node",), names, counts, ages="node_stats", column=len(NODE_GAUGES)))
    return out


def cluster_nodes(ctx: Context) -> list[dict[str, Any]]:
    """Every node: alone, this one; in a cluster (answered by its leader, to which the followers
    forward), the leader's full figures and each follower's role, in-sync flag and lag, in
    RabbitMQ's shape with headrace's cluster fields added."""
    facts = ctx.node_facts()
    this = node_of(ctx)
    if not facts.cluster:
        return [this]
    out = []
    for row in facts.cluster:
        if row["cluster_role"] == "leader":
            out.append({**this, **row})
        else:
            out.append({**{k: v for k, v in this.items() if k in _SHARED_KEYS}, "type": "disc", "being_drained": False,
                        **row})
    return out


# what a follower's entry shares with the leader's (the same software and settings)
_SHARED_KEYS = frozenset({"exchange_types", "auth_mechanisms", "applications", "rates_mode", "net_ticktime",
                          "mem_limit", "disk_free_limit", "processors", "partitions", "cluster_links"})


@routes.get("/api/nodes")
def list_nodes(ctx: Context, req: Request) -> Response:
    require_monitor(req)
    return page(req, cluster_nodes(ctx))


@routes.get("/api/nodes/{name}")
def get_node(ctx: Context, req: Request, name: str) -> Response:
    require_monitor(req)
    for node in cluster_nodes(ctx):
        if node["name"] == name or (name == NODE_NAME and node.get("cluster_role", "leader") == "leader"):
            return json_response(200, node)
    raise HTTPError(404, "not_found", f"node '{name}' not found")


@routes.delete("/api/cluster/nodes/{name}", admin=True)
def leave_cluster(ctx: Context, req: Request, name: str) -> Response:
    """``headrace cluster leave NAME``: a follower is told to stop and leaves the in-sync set; the
    leader stops, handing over at once (its lease revoked). RabbitMQ's ``forget_cluster_node``."""
    left = ctx.cluster_leave(name)
    if left is None:
        raise HTTPError(400, "bad_request", "this node is not in a cluster (cluster_etcd_endpoints is not set)")
    if not left:
        raise HTTPError(404, "not_found", f"node '{name}' is not in the cluster")
    return Response(204)


# RabbitMQ's breakdown keys; headrace fills those it has a figure for, the rest are 0
_RABBIT_MEMORY_KEYS = (
    "connection_readers", "connection_writers", "connection_channels", "connection_other", "queue_procs",
    "queue_slave_procs", "quorum_queue_procs", "quorum_queue_dlx_procs", "stream_queue_procs",
    "stream_queue_replica_reader_procs", "stream_queue_coordinator_procs", "plugins", "other_proc", "metrics",
    "mgmt_db", "mnesia", "quorum_ets", "other_ets", "binary", "msg_index", "code", "atom", "other_system",
    "allocated_unused", "reserved_unallocated")


@routes.get("/api/nodes/{name}/memory")
def node_memory(ctx: Context, req: Request, name: str) -> Response:
    """RabbitMQ's memory breakdown, mapped: messages and queues in ``queue_procs``, exchanges and
    bindings in ``mnesia`` (where RabbitMQ keeps them), connections and channels in theirs. Beside
    them headrace's own split, ``messages`` (what the "held" alarm counts, less unsent output) and
    ``topology`` (the objects' estimated fixed cost, which the alarm leaves out) with its parts."""
    require_monitor(req)
    if name != NODE_NAME:
        raise HTTPError(404, "not_found", f"node '{name}' not found")
    b = ctx.broker
    parts = b.memory_topology_parts
    messages = b.held.entries * ENTRY_OVERHEAD + b.held.bytes
    memory: dict[str, Any] = dict.fromkeys(_RABBIT_MEMORY_KEYS, 0)
    memory.update(
        queue_procs=messages + parts.get("queues", 0), mnesia=parts.get("exchanges", 0) + parts.get("bindings", 0),
        connection_other=parts.get("connections", 0) + b.tx_bytes,
        connection_channels=parts.get("channels", 0) + parts.get("consumers", 0),
        messages=messages, topology=b.memory_topology, topology_parts=dict(parts),
        total={"erlang": b.memory_used, "rss": b.memory_rss, "allocated": b.memory_rss})
    return json_response(200, {"memory": memory})


@routes.get("/api/cluster-name")
def get_cluster_name(ctx: Context, req: Request) -> Response:
    return json_response(200, {"name": cluster_name(ctx.broker.parameters.global_parameters)})


@routes.put("/api/cluster-name", admin=True)
def put_cluster_name(ctx: Context, req: Request) -> Response:
    body = ClusterNameBody.model_validate(req.json())
    ctx.broker.parameters.set_global("cluster_name", body.name)
    return Response(204)


@routes.get("/api/extensions")
def extensions(ctx: Context, req: Request) -> Response:
    """RabbitMQ's UI loads each listed script after login and only then draws its pages: its own
    ``dispatcher.js`` is the first extension RabbitMQ lists, so without it the UI stays blank."""
    return json_response(200, [{"javascript": "dispatcher.js"}])


@routes.get("/api/feature-flags")
def feature_flags(ctx: Context, req: Request) -> Response:
    require_monitor(req)
    return json_response(200, [{"name": name, "desc": desc, "doc_url": FLAG_DOCS.get(name, ""), "stability": "stable",
                                "provided_by": FLAG_PROVIDERS.get(name, "rabbit"), "state": "enabled",
                                "min_version": since}
                               for name, desc, since in FEATURE_FLAGS])


@routes.put("/api/feature-flags/{flag}/enable", admin=True)
def enable_feature_flag(ctx: Context, req: Request, flag: str) -> Response:
    """Every flag of this version is enabled already (one node): enabling a known one is a no-op."""
    if flag not in {name for name, _, _ in FEATURE_FLAGS}:
        raise HTTPError(400, "bad_request", f"unsupported feature flag '{flag}'")
    return Response(204)


@routes.delete("/api/reset", admin=True)
@routes.delete("/api/reset/{name}", admin=True)
def reset_stats(ctx: Context, req: Request, name: str | None = None) -> Response:
    """RabbitMQ's statistics reset: the rates start afresh (the counters are the objects' own)."""
    if name is not None and name != NODE_NAME:
        raise HTTPError(404, "not_found", f"node '{name}' not found")
    ctx.history.reset()
    return Response(204)


@routes.get("/api/auth", auth=False)
def auth_settings(ctx: Context, req: Request) -> Response:
    """Read before login by RabbitMQ's UI to choose its login form: basic auth only here."""
    return json_response(200, {"enable_uaa": False, "uaa_client_id": "", "uaa_location": "",  # RabbitMQ 3.10's
                               "oauth_enabled": False, "oauth_client_id": "", "oauth_provider_url": ""})  # later
