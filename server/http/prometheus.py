"""The ``rabbitmq_prometheus`` plugin's endpoint: RabbitMQ's metric names on their own port, so a
Prometheus job, its alerts and the RabbitMQ Grafana dashboards scrape headrace unchanged.

Served by the listener of the ``prometheus_port`` setting (15692, as the plugin's; off unless set),
without credentials, like the plugin: ``/metrics`` has node-wide totals only (the plugin's default,
``return_per_object_metrics = false``), ``/metrics/per-object`` adds every queue's families by
``vhost`` and ``queue``. Families and help texts follow RabbitMQ 3.10's; a family that exists only
inside the Erlang VM (reductions, mnesia, raft, ETS) is left out. Counters are node-wide totals
that never go down: deleted queues and exchanges keep their counts in ``broker.retired``
(``broker/totals.py``). Channel and connection families are node-wide sums here too: a channel
has no Erlang pid to label it with.

The management port's own ``/metrics`` (``metrics.py``, ``headrace_*``) is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

from headrace.queues import QueueStats
from headrace.server.broker.totals import add_stats, node_totals

from .metrics import escape_label
from .node_facts import RABBITMQ_API_VERSION, cluster_name
from .prometheus_detailed import routes as detailed_routes
from .prometheus_families import CHURN_FAMILIES, CONTENT_TYPE, QUEUE_FAMILIES, family_lines, identity_labels
from .routes import Context, Request, Response, Router, Routes

__all__ = ["render_rabbitmq", "router"]

routes = Routes()

PROTOCOL = '{protocol="amqp091"}'
# RabbitMQ's queue type modules, the ``queue_type`` label of the global counters
QUEUE_TYPE_LABELS = {"classic": "rabbit_classic_queue", "quorum": "rabbit_quorum_queue",
                     "stream": "rabbit_stream_queue"}


def render_rabbitmq(ctx: Context, *, per_object: bool = False) -> str:
    broker = ctx.broker
    facts = ctx.node_facts()
    lines: list[str] = []

    def family(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        family_lines(lines, name, kind, help_text, samples)

    def one(name: str, kind: str, help_text: str, value: float, labels: str = "") -> None:
        family(name, kind, help_text, [(labels, value)])

    queues = broker.queues()
    sessions = list(broker.connections.values())
    alarms = broker.alarms
    cluster = cluster_name(broker.parameters.global_parameters)

    one("rabbitmq_build_info", "untyped", "RabbitMQ & Erlang/OTP version info", 1,
        f'{{rabbitmq_version="{RABBITMQ_API_VERSION}",prometheus_plugin_version="{RABBITMQ_API_VERSION}",'
        f'prometheus_client_version="none",erlang_version="none",product="headrace",'
        f'product_version="{escape_label(ctx.version)}"}}')
    one("rabbitmq_identity_info", "untyped", "RabbitMQ node & cluster identity info", 1, identity_labels(cluster))

    # node: alarms, memory, disk, descriptors
    one("rabbitmq_alarms_file_descriptor_limit", "untyped",
        "is 1 if file descriptor limit alarm is in effect", 0)
    one("rabbitmq_alarms_free_disk_space_watermark", "untyped",
        "is 1 if free disk space watermark alarm is in effect", int("disk" in alarms))
    one("rabbitmq_alarms_memory_used_watermark", "untyped",
        "is 1 if VM memory watermark alarm is in effect", int("memory" in alarms))
    one("rabbitmq_process_open_fds", "gauge", "Open file descriptors", facts.fd_used)
    one("rabbitmq_process_max_fds", "gauge", "Open file descriptors limit", facts.fd_total)
    one("rabbitmq_process_resident_memory_bytes", "gauge", "Memory used in bytes", broker.memory_rss)
    one("rabbitmq_resident_memory_limit_bytes", "gauge", "Memory high watermark in bytes", facts.mem_limit)
    one("rabbitmq_disk_space_available_bytes", "gauge", "Disk space available in bytes", broker.disk_free)
    one("rabbitmq_disk_space_available_limit_bytes", "gauge", "Free disk space low watermark in bytes",
        facts.disk_free_limit)

    # objects and their churn
    churn = broker.counters.extra
    one("rabbitmq_connections", "gauge", "Connections currently open", len(sessions))
    one("rabbitmq_channels", "gauge", "Channels currently open", sum(len(s.channels) for s in sessions))
    consumers = sum(q.consumer_count for q in queues)
    one("rabbitmq_consumers", "gauge", "Consumers currently connected", consumers)
    one("rabbitmq_queues", "gauge", "Queues available", len(queues))
    for name, event, help_text in CHURN_FAMILIES:
        one(name, "counter", help_text, churn.get(event, 0))

    # queues: summed, or one sample each
    if per_object:
        labelled = [(f'{{vhost="{escape_label(q.vhost)}",queue="{escape_label(q.name)}"}}', q) for q in queues]
        for name, help_text, value in QUEUE_FAMILIES:
            family(name, "gauge", help_text, [(labels, value(q)) for labels, q in labelled])
        family("rabbitmq_queue_messages_published_total", "counter", "Total number of messages published to queues",
               [(labels, q.stats.published) for labels, q in labelled])
    else:
        for name, help_text, value in QUEUE_FAMILIES:
            one(name, "gauge", help_text, sum(value(q) for q in queues))

    # messages, node-wide, deleted objects included
    by_type, vt = node_totals(broker.retired, broker.vhosts.values())
    every = QueueStats()
    for stats in by_type.values():
        add_stats(every, stats)
    if not per_object:
        one("rabbitmq_queue_messages_published_total", "counter", "Total number of messages published to queues",
            every.published)
    recv_oct = vt.recv_oct + sum(s.io.recv_oct for s in sessions)
    send_oct = vt.send_oct + sum(s.io.send_oct for s in sessions)
    one("rabbitmq_connection_incoming_bytes_total", "counter", "Total number of bytes received on a connection",
        recv_oct)
    one("rabbitmq_connection_outgoing_bytes_total", "counter", "Total number of bytes sent on a connection",
        send_oct)
    consumed = every.delivered - every.got - every.got_no_ack  # to consumers, with and without acks
    one("rabbitmq_channel_messages_published_total", "counter",
        "Total number of messages published into an exchange on a channel", vt.published)
    one("rabbitmq_channel_messages_confirmed_total", "counter",
        "Total number of messages published into an exchange and confirmed on the channel", vt.confirmed)
    one("rabbitmq_channel_messages_unroutable_returned_total", "counter",
        "Total number of messages published as mandatory into an exchange and returned to the publisher as "
        "unroutable", vt.unroutable_returned)
    one("rabbitmq_channel_messages_unroutable_dropped_total", "counter",
        "Total number of messages published as non-mandatory into an exchange and dropped as unroutable",
        vt.unroutable - vt.unroutable_returned)
    one("rabbitmq_channel_get_ack_total", "counter",
        "Total number of messages fetched with basic.get in manual acknowledgement mode", every.got)
    one("rabbitmq_channel_get_total", "counter",
        "Total number of messages fetched with basic.get in automatic acknowledgement mode", every.got_no_ack)
    one("rabbitmq_channel_messages_delivered_ack_total", "counter",
        "Total number of messages delivered to consumers in manual acknowledgement mode",
        consumed - every.delivered_no_ack)
    one("rabbitmq_channel_messages_delivered_total", "counter",
        "Total number of messages delivered to consumers in automatic acknowledgement mode", every.delivered_no_ack)
    one("rabbitmq_channel_messages_redelivered_total", "counter",
        "Total number of messages redelivered to consumers", every.redelivered)
    one("rabbitmq_channel_messages_acked_total", "counter",
        "Total number of messages acknowledged by consumers", every.acked)
    one("rabbitmq_channel_get_empty_total", "counter",
        "Total number of times basic.get operations fetched no message", every.get_empty)

    publishers = sum(1 for s in sessions if s.published)
    one("rabbitmq_global_consumers", "gauge", "Current number of consumers", consumers, PROTOCOL)
    one("rabbitmq_global_publishers", "gauge", "Current number of publishers", publishers, PROTOCOL)
    one("rabbitmq_global_messages_received_total", "counter", "Total number of messages received from publishers",
        vt.published, PROTOCOL)
    # the two differ by the publishes a reject-publish queue refused, which are nacked
    one("rabbitmq_global_messages_received_confirm_total", "counter",
        "Total number of messages received from publishers expecting confirmations", vt.received_confirm, PROTOCOL)
    one("rabbitmq_global_messages_confirmed_total", "counter",
        "Total number of messages confirmed to publishers", vt.confirmed, PROTOCOL)
    one("rabbitmq_global_messages_routed_total", "counter",
        "Total number of messages routed to queues or streams", max(0, vt.published - vt.unroutable), PROTOCOL)
    one("rabbitmq_global_messages_unroutable_dropped_total", "counter",
        "Total number of messages published as non-mandatory into an exchange and dropped as unroutable",
        vt.unroutable - vt.unroutable_returned, PROTOCOL)
    one("rabbitmq_global_messages_unroutable_returned_total", "counter",
        "Total number of messages published as mandatory into an exchange and returned to the publisher as "
        "unroutable", vt.unroutable_returned, PROTOCOL)

    def by_queue_type(name: str, help_text: str, value: Callable[[QueueStats], int]) -> None:
        family(name, "counter", help_text,
               [(f'{{protocol="amqp091",queue_type="{QUEUE_TYPE_LABELS.get(kind, kind)}"}}', value(stats))
                for kind, stats in by_type.items()])

    by_queue_type("rabbitmq_global_messages_delivered_total", "Total number of messages delivered to consumers",
                  lambda s: s.delivered)
    by_queue_type("rabbitmq_global_messages_delivered_consume_manual_ack_total",
                  "Total number of messages delivered to consumers using basic.consume with manual acknowledgment",
                  lambda s: s.delivered - s.got - s.got_no_ack - s.delivered_no_ack)
    by_queue_type("rabbitmq_global_messages_delivered_consume_auto_ack_total",
                  "Total number of messages delivered to consumers using basic.consume with automatic acknowledgment",
                  lambda s: s.delivered_no_ack)
    by_queue_type("rabbitmq_global_messages_delivered_get_manual_ack_total",
                  "Total number of messages delivered to consumers using basic.get with manual acknowledgment",
                  lambda s: s.got)
    by_queue_type("rabbitmq_global_messages_delivered_get_auto_ack_total",
                  "Total number of messages delivered to consumers using basic.get with automatic acknowledgment",
                  lambda s: s.got_no_ack)
    by_queue_type("rabbitmq_global_messages_get_empty_total",
                  "Total number of times basic.get operations fetched no message", lambda s: s.get_empty)
    by_queue_type("rabbitmq_global_messages_redelivered_total",
                  "Total number of messages redelivered to consumers", lambda s: s.redelivered)
    by_queue_type("rabbitmq_global_messages_acknowledged_total",
                  "Total number of messages acknowledged by consumers", lambda s: s.acked)
    return "\n".join(lines) + "\n"


@routes.get("/metrics", auth=False)
def metrics(ctx: Context, req: Request) -> Response:
    return Response(200, render_rabbitmq(ctx).encode(), content_type=CONTENT_TYPE)


@routes.get("/metrics/per-object", auth=False)
def metrics_per_object(ctx: Context, req: Request) -> Response:
    return Response(200, render_rabbitmq(ctx, per_object=True).encode(), content_type=CONTENT_TYPE)


router = Router([routes, detailed_routes])
