"""``/api/overview`` and ``/api/whoami``: the broker at a glance, within what the user may see."""

from __future__ import annotations

from .listing import rated, visible_vhosts
from .node_facts import EXCHANGE_TYPES, NODE_NAME, RABBITMQ_API_VERSION, churn_counts, cluster_name, contexts_json, \
    listeners_json
from .rates import CHURN, DEPTH, VHOST_DEPTH_AT, VHOST_STATS
from .routes import Context, Request, Response, Routes, json_response, user_of
from .vhosts import vhost_counts

__all__ = ["routes"]

routes = Routes()


@routes.get("/api/overview")
def overview(ctx: Context, req: Request) -> Response:
    """Totals over the vhosts the user can see (all of them for an administrator), as RabbitMQ's."""
    b = ctx.broker
    user = user_of(req)
    vhosts = visible_vhosts(ctx, req)
    names = {v.name for v in vhosts}
    queues = [q for v in vhosts for q in v.queues.values()]
    sessions = [s for s in b.connections.values() if s.user is not None and s.vhost.name in names
                and (user.can_monitor or s.user.name == user.name)]
    # an administrator's totals have a history of their own; a user's are the sum of their vhosts'
    keys = [("overview",)] if user.is_administrator else [("vhost", n) for n in sorted(names)]
    ready = sum(q.messages_ready for q in queues)
    unacked = sum(q.messages_unacked for q in queues)
    counts = [0] * len(VHOST_STATS)
    for v in vhosts:
        for i, count in enumerate(vhost_counts(v)):
            counts[i] += count
    facts = ctx.node_facts()
    return json_response(200, {
        "product_name": "headrace", "product_version": ctx.version, "management_version": ctx.version,
        # the RabbitMQ release whose management API this one follows (tools branch on it)
        "rabbitmq_version": RABBITMQ_API_VERSION, "erlang_version": "none", "erlang_full_version": "none",
        "rates_mode": "basic", "disable_stats": False, "enable_queue_totals": False,
        "node": NODE_NAME, "cluster_name": cluster_name(b.parameters.global_parameters),
        "listeners": listeners_json(facts), "contexts": contexts_json(facts), "exchange_types": EXCHANGE_TYPES,
        "churn_rates": rated(ctx, ("churn",), CHURN, churn_counts(b.counters)),
        "statistics_db_event_queue": 0,
        "sample_retention_policies": {"global": ctx.history.policies["global"].reported(),
                                      "basic": ctx.history.policies["basic"].reported(),
                                      "detailed": ctx.history.policies["basic"].reported()[:1]},
        "object_totals": {"connections": len(sessions), "channels": sum(len(s.channels) for s in sessions),
                          "exchanges": sum(len(v.exchanges) for v in vhosts), "queues": len(queues),
                          "consumers": sum(q.consumer_count for q in queues)},
        "queue_totals": rated(ctx, keys, DEPTH, (ready + unacked, ready, unacked), ages="lengths", signed=True,
                              column=VHOST_DEPTH_AT),
        "release_series_support_status": "supported",
        "message_stats": rated(ctx, keys, VHOST_STATS, tuple(counts)),
        "alarms": sorted(b.alarms), "mem_used": b.memory_used, "mem_rss": b.memory_rss,
        "disk_free": b.disk_free,
    })


@routes.get("/api/whoami")
def whoami(ctx: Context, req: Request) -> Response:
    user = user_of(req)
    return json_response(200, {"name": user.name, "tags": list(user.tags)})
