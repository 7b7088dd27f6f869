"""Prometheus text exposition (format 0.0.4) of the broker's state, written by hand: the format is
a few lines per family and the core package stays free of a client library.

``/metrics`` is read without credentials (as scrapers do), so how much it tells is the ``metrics``
setting's: nothing (``off``, the default), totals per vhost with no queue names (``aggregate``),
or every queue by name (``per-queue``, for a port only trusted scrapers reach)."""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any

from headrace.queues import Destination
from headrace.server.broker import Broker
from headrace.server.broker.stream_groups import stream_groups

__all__ = ["escape_label", "render_metrics"]


def escape_label(value: str) -> str:
    """A label value in the exposition format: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_metrics(broker: Broker, *, store_bytes: int = 0, per_queue: bool = False,
                   cluster: list[dict[str, Any]] | None = None) -> str:
    lines: list[str] = []

    def family(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            lines.append(f"{name}{labels} {value}")

    # one group of queues per sample: each queue by name, or all of a vhost's queues together
    if per_queue:
        prefix = "headrace_queue"
        groups = [(f'{{vhost="{escape_label(q.vhost)}",queue="{escape_label(q.name)}"}}', [q]) for q in broker.queues()]
    else:
        prefix = "headrace_vhost"
        groups = [(f'{{vhost="{escape_label(v.name)}"}}', list(v.queues.values())) for v in broker.vhosts.values()]
        family("headrace_vhost_queues", "gauge", "Queues.", [(lbl, len(qs)) for lbl, qs in groups])

    def total(value: Callable[[Destination], int]) -> list[tuple[str, float]]:
        return [(lbl, sum(value(q) for q in qs)) for lbl, qs in groups]

    family(f"{prefix}_messages_ready", "gauge", "Messages ready for delivery.", total(lambda q: q.messages_ready))
    family(f"{prefix}_messages_unacked", "gauge", "Messages delivered and not yet acknowledged.",
           total(lambda q: q.messages_unacked))
    family(f"{prefix}_messages_spilled", "gauge", "Ready messages kept on disk.", total(lambda q: q.spilled_count()))
    family(f"{prefix}_consumers", "gauge", "Consumers.", total(lambda q: q.consumer_count))
    for field, help_text in (("published", "Messages enqueued."), ("delivered", "Deliveries and gets."),
                             ("acked", "Acknowledgements."), ("redelivered", "Redeliveries."),
                             ("spill_damaged", "Spilled messages lost to a damaged spill record.")):
        family(f"{prefix}_messages_{field}_total", "counter", help_text,
               total(attrgetter(f"stats.{field}")))
    lag: list[tuple[str, float]] = []
    for q in broker.queues():
        for c in q.describe_consumers():  # a log's consumers, by position
            if per_queue:
                lag.append((f'{{vhost="{escape_label(q.vhost)}",queue="{escape_label(q.name)}",'
                            f'consumer="{escape_label(c["consumer_tag"])}"}}', c["lag"]))
    if per_queue:
        family("headrace_stream_consumer_lag", "gauge", "Stream messages a consumer has yet to read.", lag)
    else:
        family("headrace_vhost_stream_lag_max", "gauge", "Largest lag of a stream consumer.",
               [(f'{{vhost="{escape_label(v.name)}"}}', max((c["lag"] for q in v.queues.values()
                                                     for c in q.describe_consumers()), default=0))
                for v in broker.vhosts.values()])
    # consumer groups: a super stream's group is one sample, its partitions' lags summed
    group_views = {v.name: stream_groups(v) for v in broker.vhosts.values()}
    if per_queue:
        family("headrace_stream_group_lag", "gauge",
               "Messages a stream consumer group has yet to ack, over a super stream's partitions.",
               [(f'{{vhost="{escape_label(g.vhost)}",stream="{escape_label(g.stream)}",'
                 f'group="{escape_label(g.name)}"}}', g.lag) for views in group_views.values() for g in views])
    else:
        family("headrace_vhost_stream_group_lag_max", "gauge", "Largest lag of a stream consumer group.",
               [(f'{{vhost="{escape_label(name)}"}}', max((g.lag for g in views), default=0))
                for name, views in group_views.items()])
    family("headrace_connections", "gauge", "Open AMQP connections.", [("", len(broker.connections))])
    family("headrace_channels", "gauge", "Open AMQP channels.",
           [("", sum(len(s.channels) for s in broker.connections.values()))])
    family("headrace_memory_used_bytes", "gauge",
           "Memory compared with the high watermark (per memory_calculation_strategy).",
           [("", broker.memory_used)])
    family("headrace_topology_memory_bytes", "gauge",
           "Estimated fixed memory of queues, exchanges, bindings, connections, channels and consumers "
           "(not counted by the memory alarm).", [("", broker.memory_topology)])
    family("headrace_process_resident_memory_bytes", "gauge", "Resident set size of the broker process.",
           [("", broker.memory_rss)])
    family("headrace_disk_free_bytes", "gauge", "Free disk in the data directory.", [("", broker.disk_free)])
    family("headrace_alarm", "gauge", "1 while the alarm is raised.",
           [(f'{{resource="{r}"}}', int(r in broker.alarms)) for r in ("memory", "disk")])
    hits = sum(ex.cache_hits for v in broker.vhosts.values() for ex in v.exchanges.values())
    misses = sum(ex.cache_misses for v in broker.vhosts.values() for ex in v.exchanges.values())
    family("headrace_routing_cache_hits_total", "counter", "Topic routing cache hits.", [("", hits)])
    family("headrace_routing_cache_misses_total", "counter", "Topic routing cache misses.", [("", misses)])
    family("headrace_routing_cache_hit_ratio", "gauge", "Topic routing cache hits / lookups (0 before any).",
           [("", round(hits / (hits + misses), 4) if hits + misses else 0.0)])
    family("headrace_store_bytes", "gauge", "Size on disk of the message store segments.", [("", store_bytes)])
    # a counter's name ends in _total (the exposition format's rule, which promtool checks)
    family("headrace_store_synced_total", "counter", "Persistent publishes made durable.",
           [("", broker.synced_ticket)])
    if cluster:  # the cluster's nodes as its leader sees them (server/net/cluster_node.py)
        def per_node(key: str) -> list[tuple[str, float]]:
            return [(f'{{node="{escape_label(str(n["name"]))}"}}', float(n.get(key) or 0)) for n in cluster]

        family("headrace_cluster_leader", "gauge", "1 for the node that leads the cluster.",
               [(f'{{node="{escape_label(str(n["name"]))}"}}', int(n["cluster_role"] == "leader")) for n in cluster])
        family("headrace_cluster_in_sync", "gauge", "1 while the node is in the in-sync set.",
               [(f'{{node="{escape_label(str(n["name"]))}"}}', int(bool(n.get("in_sync")))) for n in cluster])
        family("headrace_cluster_replication_lag", "gauge", "Replication batches the node has yet to acknowledge.",
               per_node("replication_lag"))
        family("headrace_cluster_replication_lag_bytes", "gauge", "Bytes the node has yet to acknowledge.",
               per_node("replication_lag_bytes"))
    return "\n".join(lines) + "\n"
