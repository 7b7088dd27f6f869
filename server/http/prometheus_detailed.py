"""The ``rabbitmq_prometheus`` plugin's ``/metrics/detailed``: only the metric groups a scrape asks
for (``?family=queue_coarse_metrics&family=connection_churn_metrics``), optionally for some vhosts
(``&vhost=a&vhost=b``), named ``rabbitmq_detailed_*`` as the plugin names them; without a
``family`` the answer is the identity family alone, as the plugin's. Like ``/metrics`` it takes no
credentials. Group names the plugin knows but headrace has no figures for (Erlang processes,
per-channel tables keyed by pids) are accepted and answer nothing; the queue families are the
per-object ones of ``prometheus.QUEUE_FAMILIES``.

Owner of nothing: it reads the broker through the tables of ``prometheus_families.py``.
"""

from __future__ import annotations

from .metrics import escape_label
from .node_facts import cluster_name
from .prometheus_families import CHURN_FAMILIES, CONTENT_TYPE, QUEUE_FAMILIES, family_lines, identity_labels
from .routes import Context, Request, Response, Routes

__all__ = ["render_detailed", "routes"]

routes = Routes()

PREFIX = "rabbitmq_detailed_"
# the plugin's queue groups -> the queue families (by their /metrics name) each holds
QUEUE_GROUPS: dict[str, tuple[str, ...]] = {
    "queue_coarse_metrics": ("rabbitmq_queue_messages_ready", "rabbitmq_queue_messages_unacked",
                             "rabbitmq_queue_messages"),
    "queue_consumer_count": ("rabbitmq_queue_consumers",),
    "queue_metrics": ("rabbitmq_queue_messages_bytes", "rabbitmq_queue_messages_ready_bytes",
                      "rabbitmq_queue_messages_unacked_bytes", "rabbitmq_queue_messages_ram",
                      "rabbitmq_queue_messages_paged_out", "rabbitmq_queue_messages_paged_out_bytes",
                      "rabbitmq_queue_process_memory_bytes"),
}


def _detailed(name: str) -> str:
    return PREFIX + name.removeprefix("rabbitmq_")


def render_detailed(ctx: Context, groups: list[str], vhosts: list[str]) -> str:
    broker = ctx.broker
    lines: list[str] = []
    wanted = set(groups)
    queues = [q for q in broker.queues() if not vhosts or q.vhost in vhosts]
    labelled = [(f'{{vhost="{escape_label(q.vhost)}",queue="{escape_label(q.name)}"}}', q) for q in queues]
    for name, help_text, value in QUEUE_FAMILIES:
        if any(name in QUEUE_GROUPS[group] for group in wanted & QUEUE_GROUPS.keys()):
            family_lines(lines, _detailed(name), "gauge", help_text, [(labels, value(q)) for labels, q in labelled])
    if "connection_churn_metrics" in wanted:
        churn = broker.counters.extra
        for name, event, help_text in CHURN_FAMILIES:
            family_lines(lines, _detailed(name), "counter", help_text, [("", churn.get(event, 0))])
    cluster = cluster_name(broker.parameters.global_parameters)
    family_lines(lines, "rabbitmq_identity_info", "untyped", "RabbitMQ node & cluster identity info",
                 [(identity_labels(cluster), 1)])
    return "\n".join(lines) + "\n"


@routes.get("/metrics/detailed", auth=False)
def metrics_detailed(ctx: Context, req: Request) -> Response:
    body = render_detailed(ctx, req.query.get("family", []), req.query.get("vhost", []))
    return Response(200, body.encode(), content_type=CONTENT_TYPE)
